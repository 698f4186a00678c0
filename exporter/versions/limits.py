"""``/slurmdb/v0.0.4x/qos`` and ``/associations`` (``sacctmgr show qos|assoc``) → :class:`exporter.model.
QosLimits` and :class:`exporter.model.Association`. Pure.

One shape from v0.0.40 to v0.0.45 for what is read here (recorded on 24.11 and 26.05 with every limit
below set by ``sacctmgr``, the answers compared with ``sacctmgr -P show``): each count is Slurm's optional
number (``{"set", "infinite", "number"}``: unset or infinite means no limit), each TRES limit a list of
``{type, name, count}`` (memory in MiB), wall-clock limits in minutes. Where each sacctmgr limit sits:

==========================  ==============================================  ==============================
sacctmgr                    QOS (``limits.max.…``)                          association (``max.…``)
==========================  ==============================================  ==============================
GrpJobs                     ``active_jobs.count``                           ``jobs.per.count``
GrpSubmit(Jobs)             ``jobs.count``                                  ``jobs.per.submitted``
GrpTRES                     ``tres.total``                                  ``tres.total``
GrpWall                     ``wall_clock.per.qos``                          ``per.account.wall_clock``
MaxJobs(PerUser)            ``jobs.active_jobs.per.user``                   ``jobs.active``
MaxSubmit(JobsPerUser)      ``jobs.per.user``                               ``jobs.total``
MaxJobsPerAccount           ``jobs.active_jobs.per.account``                —
MaxSubmitJobsPerAccount     ``jobs.per.account``                            —
MaxTRESPerUser / -Account   ``tres.per.user`` / ``tres.per.account``        —
MaxTRES(PerJob), MaxNodes   ``tres.per.job`` (``node``)                     ``tres.per.job`` (``node``)
MaxTRESPerNode              ``tres.per.node``                               ``tres.per.node``
MaxWall                     ``wall_clock.per.job``                          ``jobs.per.wall_clock``
==========================  ==============================================  ==============================

v0.0.40 and v0.0.41 (24.11) leave a QOS's ``GrpSubmitJobs`` out (no ``max.jobs.count``): None there.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter.model import MIB, Association, Envelope, QosLimits

from . import _common as c
from ._common import N, n

__all__ = ["decode_associations", "decode_qos"]


def _minutes(x: N | None) -> int | None:
    minutes = n(x)
    return None if minutes is None else minutes * 60


def _tres(items: list[c.RawTres] | None) -> dict[str, int]:
    """``[{type, name, count}]`` → ``{"cpu": 8, "mem": bytes, "gres/gpu": 1}`` (a negative count: unset)."""
    out: dict[str, int] = {}
    for t in items or ():
        if t.count < 0:
            continue
        key = f"{t.type}/{t.name}" if t.name else t.type
        out[key] = t.count * MIB if key == "mem" else t.count
    return out


# -- QOS ---------------------------------------------------------------------------------------


class _PerUserAccount(Struct, gc=False):
    user: N | None = None
    account: N | None = None


class _Per(Struct, gc=False):
    per: _PerUserAccount | None = None


class _QosJobs(Struct, gc=False):
    count: N | None = None
    per: _PerUserAccount | None = None
    active_jobs: _Per | None = None


class _QosActive(Struct, gc=False):
    count: N | None = None


class _QosTresPer(Struct, gc=False):
    user: list[c.RawTres] | None = None
    account: list[c.RawTres] | None = None
    job: list[c.RawTres] | None = None
    node: list[c.RawTres] | None = None


class _QosTres(Struct, gc=False):
    total: list[c.RawTres] | None = None
    per: _QosTresPer | None = None


class _QosWallPer(Struct, gc=False):
    qos: N | None = None
    job: N | None = None


class _QosWall(Struct, gc=False):
    per: _QosWallPer | None = None


class _QosMax(Struct, gc=False):
    active_jobs: _QosActive | None = None
    jobs: _QosJobs | None = None
    tres: _QosTres | None = None
    wall_clock: _QosWall | None = None


class _QosLimits(Struct, gc=False):
    max: _QosMax | None = None


class RawQos(Struct, gc=False):
    name: str
    flags: list[str] | None = None
    priority: N | None = None
    limits: _QosLimits | None = None


class RawQosList(Struct, gc=False):
    qos: list[RawQos] | UnsetType = UNSET
    meta: c.RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


_QOS = msgspec.json.Decoder(RawQosList)


def decode_qos(body: bytes) -> tuple[list[QosLimits], Envelope]:
    """Every QOS of any v0.0.40+ answer; typed :mod:`exporter.errors` on bad input."""
    return c.decode_records(_QOS, body, "qos", "qos", "qos", convert_qos)


def convert_qos(r: RawQos) -> QosLimits:
    m = r.limits.max if r.limits is not None and r.limits.max is not None else _QosMax()
    jobs = m.jobs or _QosJobs()
    submit = jobs.per or _PerUserAccount()
    running = jobs.active_jobs.per if jobs.active_jobs and jobs.active_jobs.per else _PerUserAccount()
    tres = m.tres or _QosTres()
    per = tres.per or _QosTresPer()
    wall = m.wall_clock.per if m.wall_clock and m.wall_clock.per else _QosWallPer()
    return QosLimits(
        name=r.name,
        priority=n(r.priority) or 0,
        flags=tuple(r.flags or ()),
        grp_jobs=n(m.active_jobs.count) if m.active_jobs else None,
        grp_submit_jobs=n(jobs.count),
        grp_tres=_tres(tres.total),
        grp_wall_seconds=_minutes(wall.qos),
        max_jobs_per_user=n(running.user),
        max_submit_jobs_per_user=n(submit.user),
        max_jobs_per_account=n(running.account),
        max_submit_jobs_per_account=n(submit.account),
        max_tres_per_user=_tres(per.user),
        max_tres_per_account=_tres(per.account),
        max_tres_per_job=_tres(per.job),
        max_tres_per_node=_tres(per.node),
        max_wall_seconds=_minutes(wall.job),
    )


# -- associations ------------------------------------------------------------------------------


class _AssocJobsPer(Struct, gc=False):
    count: N | None = None
    submitted: N | None = None
    wall_clock: N | None = None


class _AssocJobs(Struct, gc=False):
    per: _AssocJobsPer | None = None
    active: N | None = None
    total: N | None = None


class _AssocTresPer(Struct, gc=False):
    job: list[c.RawTres] | None = None
    node: list[c.RawTres] | None = None


class _AssocTres(Struct, gc=False):
    total: list[c.RawTres] | None = None
    per: _AssocTresPer | None = None


class _WallClock(Struct, gc=False):
    wall_clock: N | None = None


class _AssocPer(Struct, gc=False):
    account: _WallClock | None = None


class _AssocMax(Struct, gc=False):
    jobs: _AssocJobs | None = None
    tres: _AssocTres | None = None
    per: _AssocPer | None = None


class _Default(Struct, gc=False):
    qos: str = ""


class RawAssociation(Struct, gc=False):
    account: str = ""
    user: str = ""
    partition: str = ""
    parent_account: str = ""
    qos: list[str] | None = None
    default: _Default | None = None
    max: _AssocMax | None = None


class RawAssociations(Struct, gc=False):
    associations: list[RawAssociation] | UnsetType = UNSET
    meta: c.RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


_ASSOCIATIONS = msgspec.json.Decoder(RawAssociations)


def decode_associations(body: bytes) -> tuple[list[Association], Envelope]:
    """Every association of any v0.0.40+ answer; typed :mod:`exporter.errors` on bad input."""
    return c.decode_records(
        _ASSOCIATIONS, body, "associations", "associations", "association", convert_association
    )


def convert_association(r: RawAssociation) -> Association:
    m = r.max or _AssocMax()
    jobs = m.jobs or _AssocJobs()
    per_jobs = jobs.per or _AssocJobsPer()
    tres = m.tres or _AssocTres()
    per = tres.per or _AssocTresPer()
    grp_wall = m.per.account.wall_clock if m.per and m.per.account else None
    return Association(
        account=r.account,
        user=r.user,
        partition=r.partition,
        parent=r.parent_account,
        qos=tuple(r.qos or ()),
        default_qos=r.default.qos if r.default is not None else "",
        grp_jobs=n(per_jobs.count),
        grp_submit_jobs=n(per_jobs.submitted),
        grp_tres=_tres(tres.total),
        grp_wall_seconds=_minutes(grp_wall),
        max_jobs=n(jobs.active),
        max_submit_jobs=n(jobs.total),
        max_tres_per_job=_tres(per.job),
        max_tres_per_node=_tres(per.node),
        max_wall_seconds=_minutes(per_jobs.wall_clock),
    )
