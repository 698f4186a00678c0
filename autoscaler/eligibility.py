"""What a pending job's own fields say before slurmctld's next scheduling pass says it. Pure, no I/O.

A fresh job's ``reason`` is not final: slurmctld sets Dependency, BeginTime, the partition-limit and
license reasons at its next scheduling pass (about once a second), and in a **zero-node** (dynamic, scaled
to zero) partition it never sets most of them: every job there pends with ``PartitionConfig`` — the reason
the demand model must count to scale from zero. The job's own fields are set at submission, so they are
read instead, for jobs whose reason is one of :data:`UNSETTLED`. Seen on the 26.05 lab (``docs/eligibility.md``
has the table): in ``dyn`` at zero nodes, ``-d afterok:N`` shows PartitionConfig for up to 1 s, then
Dependency; ``--begin`` likewise, then BeginTime; over MaxNodes, over MaxTime, short of licenses, or bound to
an active reservation elsewhere: PartitionConfig for as long as the partition has no node (then
PartitionNodeLimit, PartitionTimeLimit, Licenses, BadConstraints); ``-H``: JobHeldUser at once.

:func:`settled_reason` gives the reason the model classifies a job by (:mod:`autoscaler.reasons`):

* a reason outside :data:`UNSETTLED` is Slurm's verdict and is kept — except that a job bound to a
  reservation is never helped by new nodes (below);
* otherwise the first bar among, in Slurm's order: **held** (priority 0) → ``JobHeldUser``;
  **dependency** with a part not yet fulfilled (``afterok:12(unfulfilled)``; ``?`` lists need one fulfilled
  part; a failed part → ``DependencyNeverSatisfied``; a dependency text without a state is not trusted) →
  ``Dependency``; **eligible time** more than a second after slurmctld's clock (:func:`slurm_now`) → ``BeginTime``; a **partition** (every one
  the job lists that the snapshot knows) DOWN/INACTIVE → ``PartitionDown``/``PartitionInactive``, or the
  job's minimum nodes outside its MinNodes..MaxNodes → ``PartitionNodeLimit``, or its time limit above
  MaxTime → ``PartitionTimeLimit``; **licenses** it asks for beyond what is free now (a license the
  snapshot does not list is not held against it; ``|`` alternatives need one) → ``Licenses``;
* a job with a **reservation** (any reason): its reservation not in the snapshot, not started yet, or
  without the FLEX flag (the job runs only on the reservation's nodes, which new nodes never join) →
  ``Reservation``;
* none of these: Slurm's reason, so an eligible fresh job is counted at once.

Not visible in a snapshot: QOS and association limits (slurmrestd's /qos and /associations need slurmdbd).
A fresh job over such a limit is counted until the pass that names the limit (≤ 1 s); that is the price of
the activation latency (submission → active at p50 0.35 s), which waiting for every fresh job's first pass
would roughly triple. Licenses are checked job by job against what is free: several fresh jobs that
together ask for more than is free are all counted until the pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.reasons import Eligibility, classify
from exporter.model import Job, License, Partition, Reservation, Snapshot

__all__ = ["CLOCK_SLACK", "UNSETTLED", "Bars", "dependency_reason", "settled_reason", "slurm_now"]

UNSETTLED = frozenset({"None", "PartitionConfig"})
"""Reasons a job shows before slurmctld's first scheduling pass over it (``PartitionConfig``: every job
of a zero-node partition, for as long as it has no node)."""

_DEP_STATE = re.compile(r"\((\w+)\)\s*$")
_HELD = "JobHeldUser"
_RESERVATION = "Reservation"


CLOCK_SLACK = 1.0
"""Seconds an eligible time may lie ahead of :func:`slurm_now` and still count as reached: Slurm's times
are whole seconds (truncated), and /diag and /jobs are read a few ms apart."""


def slurm_now(snapshot: Snapshot) -> float:
    """slurmctld's own clock at the snapshot, epoch seconds: /diag's ``req_time`` moved on by the time
    between that fetch and the snapshot, so a clock difference between slurm-keda and slurmctld never makes
    an eligible job look as if it started later (or a ``--begin`` job earlier); the snapshot's own
    ``taken_at`` without /diag."""
    diag = snapshot.diag
    fetched = snapshot.fetched_at.get("diag")
    if diag is None or diag.stats_time is None or fetched is None:
        return snapshot.taken_at
    return diag.stats_time + max(0.0, snapshot.taken_at - fetched)


def dependency_reason(dependency: str) -> str | None:
    """``Dependency`` / ``DependencyNeverSatisfied`` while Slurm's dependency text says the job must still
    wait, None when it may run. ``a(unfulfilled),b(fulfilled)``: all parts must be fulfilled;
    ``a(unfulfilled)?b(fulfilled)``: one; a part without a state counts as unfulfilled."""
    text = dependency.strip()
    if not text or text == "(null)":
        return None
    any_of = "?" in text
    states = []
    for part in text.split("?" if any_of else ","):
        m = _DEP_STATE.search(part)
        states.append(m.group(1).lower() if m else "unknown")
    if any_of:
        if "fulfilled" in states:
            return None
        return "DependencyNeverSatisfied" if all(s == "failed" for s in states) else "Dependency"
    if "failed" in states:
        return "DependencyNeverSatisfied"
    return None if all(s == "fulfilled" for s in states) else "Dependency"


def _partition_reason(job: Job, part: Partition) -> str | None:
    if part.state == "DOWN":
        return "PartitionDown"
    if part.state == "INACTIVE":
        return "PartitionInactive"
    if (part.max_nodes_per_job is not None and job.min_nodes > part.max_nodes_per_job) or (
        job.min_nodes < part.min_nodes_per_job
    ):
        return "PartitionNodeLimit"
    limit = job.time_limit_seconds
    if part.max_time_seconds is not None and limit is not None and limit > part.max_time_seconds:
        return "PartitionTimeLimit"
    return None


def _short_of(option: str, licenses: Mapping[str, License]) -> bool:
    """Whether one license request (``matlab:2``, ``matlab``, ``fluent@db:1``) exceeds what is free."""
    name, _, count = option.strip().partition(":")
    lic = licenses.get(name)
    if lic is None:
        return False
    try:
        wanted = int(count) if count else 1
    except ValueError:
        return False
    return wanted > lic.free


@dataclass(frozen=True)
class Bars:
    """What of a snapshot :func:`settled_reason` reads besides the job: built once per snapshot."""

    now: float
    """slurmctld's clock when the jobs were read, epoch seconds: :func:`slurm_now`."""
    partitions: Mapping[str, Partition]
    licenses: Mapping[str, License]
    reservations: Mapping[str, Reservation]

    @classmethod
    def of(cls, snapshot: Snapshot) -> Bars:
        return cls(
            now=slurm_now(snapshot),
            partitions={p.name: p for p in snapshot.partitions},
            licenses={lic.name: lic for lic in snapshot.licenses},
            reservations={r.name: r for r in snapshot.reservations},
        )

    def reservation_reason(self, name: str) -> str | None:
        """``Reservation`` unless the reservation is known, started and FLEX (then new nodes may help)."""
        resv = self.reservations.get(name)
        if resv is None or (resv.start_time is not None and resv.start_time > self.now):
            return _RESERVATION
        return None if "FLEX" in resv.flags else _RESERVATION

    def _licenses_reason(self, wanted: str) -> str | None:
        for item in wanted.split(","):
            if item and all(_short_of(option, self.licenses) for option in item.split("|")):
                return "Licenses"
        return None

    def barrier(self, job: Job) -> str | None:
        """The reason slurmctld's next pass would give ``job`` (its own fields), or None (none seen)."""
        if job.priority == 0:
            return _HELD
        if job.dependency:
            why = dependency_reason(job.dependency)
            if why is not None:
                return why
        if job.eligible_time is not None and job.eligible_time > self.now + CLOCK_SLACK:
            return "BeginTime"
        first: str | None = None
        for name in job.partitions:
            part = self.partitions.get(name)
            if part is None:
                first = None
                break
            why = _partition_reason(job, part)
            if why is None:
                first = None
                break
            first = first or why
        if first is not None:
            return first
        if job.licenses:
            why = self._licenses_reason(job.licenses)
            if why is not None:
                return why
        if job.reservation:
            return self.reservation_reason(job.reservation)
        return None


def settled_reason(job: Job, bars: Bars) -> str:
    """The reason the demand model classifies ``job`` by (module docstring): Slurm's, or the bar its own
    fields show while Slurm's reason is one of :data:`UNSETTLED`."""
    reason = job.reason
    if reason in UNSETTLED:
        return bars.barrier(job) or reason
    if job.reservation and classify(reason)[1] is not Eligibility.INELIGIBLE:
        return bars.reservation_reason(job.reservation) or reason
    return reason
