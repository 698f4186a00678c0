"""``/slurm/v0.0.45/conf`` (slurmctld's configuration, ``scontrol show config``; Slurm 26.05+) →
:class:`exporter.model.SlurmConfig`. Pure.

Recorded on 26.05.5: ``slurm_conf`` holds one key per configuration parameter, named as in slurm.conf;
flag lists are arrays of strings (``AccountingStorageEnforce: []`` when nothing is enforced,
``SelectTypeParameters: ["CR_CORE_MEMORY"]``).
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter.model import Envelope, SlurmConfig

from . import _common as c

__all__ = ["decode_conf"]


class RawJobDefault(Struct, gc=False):
    """One ``JobDefaults`` entry: ``{"type": ["DefCpuPerGPU"], "value": 4}``."""

    type: list[str] | str | None = None
    value: int | None = None


class RawConf(Struct, gc=False, rename="pascal"):
    """The parameters read, named as in slurm.conf (``AccountingStorageEnforce``, ...)."""

    accounting_storage_enforce: list[str] | None = None
    priority_type: str | None = None
    select_type_parameters: list[str] | None = None
    job_defaults: list[RawJobDefault] | None = None


class RawConfAnswer(Struct, gc=False):
    slurm_conf: RawConf | UnsetType = UNSET
    meta: c.RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


_DECODER = msgspec.json.Decoder(RawConfAnswer)


def decode_conf(body: bytes) -> tuple[SlurmConfig, Envelope]:
    """The configuration of a ``/conf`` answer; typed :mod:`exporter.errors` on bad input."""
    raw, env = c.answer_data(c.decode(_DECODER, body, "conf"), "conf", "slurm_conf")
    return c.guarded("conf", "configuration", lambda: convert_conf(raw)), env


def convert_conf(r: RawConf) -> SlurmConfig:
    return SlurmConfig(
        accounting_storage_enforce=tuple(f.lower() for f in r.accounting_storage_enforce or ()),
        priority_type=r.priority_type or "",
        select_type_parameters=tuple(r.select_type_parameters or ()),
        default_cpus_per_gpu=_job_default(r.job_defaults, "defcpupergpu"),
    )


def _job_default(entries: list[RawJobDefault] | None, name: str) -> int:
    """The value of one ``JobDefaults`` entry (``name`` in lower case), or 0 (none, or not a count)."""
    for entry in entries or ():
        kinds = [entry.type] if isinstance(entry.type, str) else entry.type or []
        if any(k.lower() == name for k in kinds) and entry.value is not None and entry.value > 0:
            return entry.value
    return 0
