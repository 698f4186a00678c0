"""A coscheduling PodGroup's status, kept by the bridge as scheduler-plugins keeps it (its PodGroup
controller and Coscheduling plugin together), from the group's pods and its Slurm job. Pure.

``scheduled``: members bound to a node; ``running``/``succeeded``/``failed``: members by pod phase;
``occupiedBy``: the owners of the first member (``namespace/name``, sorted, comma-joined). Phase:

* ``Pending`` — fewer pods than ``minMember`` exist (or none at all);
* ``PreScheduling`` — enough pods, no Slurm job yet;
* ``Scheduling`` — the group's Slurm job pends (``scheduleStartTime``: when the job was submitted);
* ``Scheduled`` — at least ``minMember`` members bound;
* ``Running`` — at least ``minMember`` running or succeeded;
* ``Failed`` — a member failed and failed + running + succeeded reach ``minMember``;
* ``Finished`` — at least ``minMember`` succeeded.

``Failed`` and ``Finished`` are final (scheduler-plugins reconciles such a group no more).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from exporter.model import Job

from .pods import Pod, PodGroup

__all__ = ["FINAL_PHASES", "group_status"]

FINAL_PHASES = frozenset({"Finished", "Failed"})


def _stamp(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if epoch else None


def group_status(group: PodGroup, pods: Sequence[Pod], job: Job | None) -> dict[str, Any] | None:
    """The status ``group`` should have given its ``pods`` and its Slurm ``job`` (the newest, or None
    before one is submitted); None when it already has it, or its phase is final."""
    current = group.status
    if current.phase in FINAL_PHASES:
        return None
    phases = [p.status.phase for p in pods]
    running, succeeded, failed = (phases.count(x) for x in ("Running", "Succeeded", "Failed"))
    scheduled = sum(1 for p in pods if p.spec.nodeName)
    need = group.spec.minMember
    if len(pods) < need or not pods:
        phase = "Pending"
    elif job is None:
        phase = "PreScheduling"
    else:
        phase = "Scheduling"
    if pods and scheduled >= need:
        phase = "Scheduled"
    if pods and running + succeeded >= need and scheduled >= need:
        phase = "Running"
    if pods and failed and failed + running + succeeded >= need:
        phase = "Failed"
    if pods and succeeded >= need:
        phase = "Finished"
    status: dict[str, Any] = {
        "phase": phase,
        "scheduled": scheduled,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    owners = sorted(f"{p.metadata.namespace}/{o.name}" for p in pods[:1] for o in p.metadata.ownerReferences)
    if owners:
        status["occupiedBy"] = ",".join(owners)
    if job is not None and (submitted := _stamp(job.submit_time)) is not None:
        status["scheduleStartTime"] = submitted
    have = {
        "phase": current.phase,
        "scheduled": current.scheduled,
        "running": current.running,
        "succeeded": current.succeeded,
        "failed": current.failed,
    }
    if current.occupiedBy:
        have["occupiedBy"] = current.occupiedBy
    if current.scheduleStartTime:
        have["scheduleStartTime"] = current.scheduleStartTime
    return None if have == status else status
