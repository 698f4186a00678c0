"""THE table of Slurm pending reasons for the demand model: may more nodes help this job?

One place, documented, read only by :mod:`autoscaler.demand`. A pending job's ``reason`` (Slurm's
``job_state_reason`` string, names as in ``job_reason_string()`` of slurm_protocol_defs.c) falls
into one of three classes:

``ELIGIBLE``
    The job waits for resources (or has not been looked at yet): more nodes let it start, so it
    counts toward *needed* nodes.

``ELIGIBLE_WHEN_EMPTY``
    ``PartitionConfig``: normally "the request does not fit the partition's configuration", which
    nodes cannot fix. But Slurm 26.05 pends every job sent to a dynamic partition that has **zero**
    nodes with exactly this reason (seen in the lab: ``dyn`` partition, ``0 n/a``). So it counts
    only while the target has no nodes at all — that is the scale-from-zero case; once nodes exist
    a job still pending with PartitionConfig is really misconfigured and is ignored.

``INELIGIBLE``
    Held, waiting for a time/dependency, over a partition/QOS/association limit, waiting for a
    reservation, licenses, burst buffers, power, or a finished/failed state: no number of new nodes
    starts it. Counted in ``Demand.ignored`` under its reason.

Families matched by prefix (Slurm has ~200 limit reasons): ``QOS*``, ``Assoc*``, ``Max*PerAccount``
and ``BurstBuffer*`` are INELIGIBLE. **Unknown reasons are INELIGIBLE** (never buy nodes for a
reason we do not understand; it shows up in ``ignored`` so it is visible, and gets added here).

``JobArrayTaskLimit`` (the ``%N`` throttle is reached) is INELIGIBLE; the throttle is also applied
arithmetically (pending tasks counted ≤ ``%N`` minus running tasks), so the two never disagree in a
consistent snapshot.

Composite texts such as ``ReqNodeNotAvail, UnavailableNodes:c[1-2]`` are reduced to their first
word by :func:`normalize`.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache


class Eligibility(Enum):
    ELIGIBLE = "eligible"
    ELIGIBLE_WHEN_EMPTY = "eligible-when-empty"
    INELIGIBLE = "ineligible"


E = Eligibility.ELIGIBLE
I = Eligibility.INELIGIBLE  # noqa: E741

REASONS: dict[str, tuple[Eligibility, str]] = {
    # ---- more nodes help
    "None": (E, "not evaluated by the scheduler yet"),
    "Resources": (E, "waits for free resources"),
    "Priority": (E, "higher-priority jobs go first; they and it need resources"),
    "ReqNodeNotAvail": (E, "required nodes down, drained, powered off or reserved"),
    "NodeDown": (E, "a node the job needs is down"),
    "SchedDefer": (E, "scheduling deferred to the next pass (SchedulerParameters=defer)"),
    "Cleaning": (E, "requeued, previous run still cleaning up; needs resources again"),
    # ---- more nodes help only when the target has none (26.05 dynamic partition at zero)
    "PartitionConfig": (
        Eligibility.ELIGIBLE_WHEN_EMPTY,
        "zero-node dynamic partition (26.05); otherwise the request does not fit the partition",
    ),
    # ---- more nodes do not help
    "JobHeldUser": (I, "held by the user"),
    "JobHeldAdmin": (I, "held by an administrator"),
    "JobHoldMaxRequeue": (I, "held after too many requeues"),
    "Dependency": (I, "waits for a dependency"),
    "DependencyNeverSatisfied": (I, "dependency can never be satisfied"),
    "BeginTime": (I, "start time (--begin) is in the future"),
    "PartitionNodeLimit": (I, "asks more/fewer nodes than the partition allows"),
    "PartitionTimeLimit": (I, "time limit above the partition's MaxTime"),
    "PartitionDown": (I, "partition is DOWN"),
    "PartitionInactive": (I, "partition is INACTIVE"),
    "Reservation": (I, "waits for its advanced reservation"),
    "RequiredNodes": (I, "runs only on the existing nodes its --nodelist names (slurm-keda's own reason)"),
    "ReservationDeleted": (I, "its reservation was deleted"),
    "Licenses": (I, "waits for licenses"),
    "JobArrayTaskLimit": (I, "array %N throttle reached"),
    "AccountNotAllowed": (I, "account not allowed in the partition"),
    "QOSNotAllowed": (I, "QOS not allowed in the partition"),
    "InvalidAccount": (I, "invalid account"),
    "InvalidQOS": (I, "invalid QOS"),
    "AssociationJobLimit": (I, "association job limit"),
    "AssociationResourceLimit": (I, "association resource limit"),
    "AssociationTimeLimit": (I, "association time limit"),
    "AccountingPolicy": (I, "accounting policy limit"),
    "MaxMemPerLimit": (I, "memory above MaxMemPer* of the partition"),
    "BadConstraints": (I, "constraints no node can satisfy"),
    "FrontEndDown": (I, "front-end node down"),
    "PowerNotAvail": (I, "power capping: no power budget"),
    "PowerReserved": (I, "power reserved for other jobs"),
    "FedJobLock": (I, "federation lock"),
    "Prolog": (I, "already allocated, prolog running"),
    "DeadLine": (I, "deadline cannot be met"),
    "SystemFailure": (I, "failed: system failure"),
    "JobLaunchFailure": (I, "failed to launch"),
    "NonZeroExitCode": (I, "ended with a non-zero exit code"),
    "TimeLimit": (I, "hit its time limit"),
    "InactiveLimit": (I, "hit the inactive limit"),
    "OutOfMemory": (I, "ran out of memory"),
}
"""reason → (eligibility, why). The reference table; edit HERE only."""

PREFIX_RULES: tuple[tuple[str, str, Eligibility, str], ...] = (
    # (prefix, suffix, eligibility, why) — families of limit reasons
    ("QOS", "", I, "QOS limit"),
    ("Assoc", "", I, "association limit"),
    ("Max", "PerAccount", I, "per-account QOS limit"),
    ("BurstBuffer", "", I, "burst buffer"),
)

UNKNOWN_WHY = "unknown reason: treated as ineligible"


def normalize(reason: str) -> str:
    """``'ReqNodeNotAvail, UnavailableNodes:c1'`` → ``'ReqNodeNotAvail'``; empty → ``'None'``."""
    r = reason.strip()
    for sep in (",", ":", " ", "("):
        cut = r.find(sep)
        if cut > 0:
            r = r[:cut]
    return r or "None"


@lru_cache(maxsize=1024)
def classify(reason: str) -> tuple[str, Eligibility, str]:
    """(normalized reason, eligibility, why) of a job's reason text (cached: few distinct texts)."""
    name = normalize(reason)
    hit = REASONS.get(name)
    if hit is not None:
        return name, hit[0], hit[1]
    for prefix, suffix, elig, why in PREFIX_RULES:
        if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
            return name, elig, why
    return name, I, UNKNOWN_WHY
