"""What a pending job's own fields say before slurmctld's next scheduling pass does. Pure, no I/O.

A fresh job's ``reason`` is not final: slurmctld sets Dependency, BeginTime and the limit reasons at its
next scheduling pass (about once a second), and in a partition with **no node** (a NodeSet at zero) it
keeps most of them hidden behind ``PartitionConfig`` for as long as the partition stays empty — the very
reason the demand model counts to scale from zero. A job's own fields are set at submission, so they are
read instead while its reason is one of :data:`UNSETTLED` (lab evidence: ``docs/eligibility.md``).

:func:`settled_reason` is the reason the model classifies a job by (:mod:`autoscaler.reasons`):

* reason in :data:`UNSETTLED`: the first bar, in Slurm's order, among
  **held** (priority 0) → ``JobHeldUser``;
  **dependency** not met (:func:`dependency_reason`) → ``Dependency`` / ``DependencyNeverSatisfied``;
  **eligible time** more than :data:`CLOCK_SLACK` after slurmctld's clock (:func:`slurm_now`) →
  ``BeginTime``;
  **partition** — in every partition the job lists that the snapshot knows — DOWN / INACTIVE →
  ``PartitionDown`` / ``PartitionInactive``, minimum nodes outside MinNodes..MaxNodes →
  ``PartitionNodeLimit``, time limit above MaxTime (and no ``--time-min`` under it) →
  ``PartitionTimeLimit``, whole-node memory or
  ``--mem`` above MaxMemPerNode → ``MaxMemPerLimit``;
  **licenses** not free once the pending jobs ahead of it in Slurm's order took theirs
  (:mod:`autoscaler.licenses`; one ``|`` alternative suffices; a license the snapshot does not list is not
  held against the job) → ``Licenses``;
  else Slurm's reason: an eligible fresh job counts at once.
* ``PartitionTimeLimit`` on a job whose ``--time-min`` fits under MaxTime: slurmctld's main scheduler says
  so, its backfill starts the job with its limit cut to MaxTime → read as an unsettled reason.
* any eligible reason, with a **reservation**: unless the reservation is in the snapshot, has started and
  is FLEX, the job runs only on the reservation's nodes, which new nodes never join → ``Reservation``.
* any eligible reason, with ``--nodelist`` naming at least the nodes it needs → ``RequiredNodes``
  (:func:`required_nodes_reason`); naming fewer, but one of them without the CPUs the job asks of each
  node free (busy, or not in the snapshot) → ``RequiredNodes`` too: it waits for that node, new ones do
  not start it.
* a fresh job (``None``) whose ``--exclude`` names a node that has jobs on it → ``Resources``: it is not
  placed in busy nodes' free room (which of them it may use is not modelled; more nodes, never fewer —
  slurmctld's first pass, about a second later, says which).
* otherwise Slurm's reason, its verdict.

**Per-job QOS and association limits** (CPUs, memory, ``-N``, GPUs, time limit against ``MaxTRESPerJob``
and ``MaxWall``) where slurmctld enforces limits and says so (26.05's ``/conf``; :mod:`autoscaler.limits`)
→ Slurm's ``QOSMax…PerJob…`` / ``AssocMax…PerJob…``, between the partition bars and licenses. The limits that
depend on what else runs (``GrpTRES``, ``MaxJobsPerUser``, ...) are not a job's own: the demand model hands
their budgets out in order (:meth:`autoscaler.limits.JobLimits.budgets`). Every limit on older Slurm is not
judged: a fresh job over one is counted until Slurm names it: at its first pass where the partition has
nodes (≤ 1 s); on a NodeSet at zero presumably not before a node joins, as for licenses and partition
limits.
Licenses are handed out in Slurm's scheduling order: a fresh job whose licenses the jobs ahead of it (fresh,
or judged by Slurm and able to start) took is held back (:mod:`autoscaler.licenses`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from autoscaler.licenses import Taker, held_back
from autoscaler.limits import JobLimits
from autoscaler.nodes import free_cpus, looks_busy
from autoscaler.reasons import Eligibility, classify
from exporter.model import Job, License, Node, Partition, Reservation, Snapshot
from exporter.slurmtext import hostlist_count, hostlist_expand

__all__ = ["CLOCK_SLACK", "UNSETTLED", "Bars", "dependency_reason", "settled_reason", "slurm_now"]

UNSETTLED = frozenset({"None", "PartitionConfig"})
"""Reasons a job shows before slurmctld's first scheduling pass over it (``PartitionConfig``: every job
of a zero-node partition, for as long as it has no node)."""

_DEP_STATE = re.compile(r"\((\w+)\)\s*$")
_HELD = "JobHeldUser"
_RESERVATION = "Reservation"
_REQUIRED_NODES = "RequiredNodes"


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
    if _over_max_time(job, part):
        return "PartitionTimeLimit"
    # MaxMemPerNode bounds each job's memory on a node: a whole-node-memory job (--mem=0, or no memory
    # default) or a larger --mem pends with MaxMemPerLimit for ever (lab: 26.05.5, MaxMemPerNode=8000)
    most = part.max_memory_per_node_bytes
    if most and (job.whole_node_memory or (job.memory_per_node_bytes or 0) > most):
        return "MaxMemPerLimit"
    return None


def _over_max_time(job: Job, part: Partition) -> bool:
    """The job's time limit is above the partition's MaxTime and its ``--time-min`` (if any) does not fit
    under it. With a ``--time-min`` that fits, slurmctld's main scheduler names it ``PartitionTimeLimit`` but
    its backfill tests the job with the minimum (``job_limits_check(job, check_min_time=true)``) and starts
    it, the limit cut to MaxTime (``node_scheduler.c``; lab: 26.05.5, ``MaxTime=60``, ``-t 120
    --time-min=30``: ran, TimeLimit 01:00:00)."""
    most, limit = part.max_time_seconds, job.time_limit_seconds
    if most is None or limit is None or limit <= most:
        return False
    return job.time_min_seconds is None or job.time_min_seconds > most


def _runs_by_time_min(job: Job, bars: Bars) -> bool:
    """Slurm's ``PartitionTimeLimit`` on a job whose ``--time-min`` fits under MaxTime in one of its
    partitions: the main scheduler's verdict, not the backfill's (:func:`_over_max_time`)."""
    if job.time_min_seconds is None:
        return False
    parts = bars.partitions
    return any((part := parts.get(name)) is None or not _over_max_time(job, part) for name in job.partitions)


def _may_bar(part: Partition) -> bool:
    return (
        part.state != "UP"
        or part.max_nodes_per_job is not None
        or part.min_nodes_per_job > 1
        or part.max_time_seconds is not None
        or bool(part.max_memory_per_node_bytes)
    )


@dataclass(frozen=True, eq=False)
class Bars:
    """What of a snapshot :func:`settled_reason` reads besides the job: built once per snapshot (compared
    and hashed as itself: its fields hold the snapshot's nodes)."""

    now: float
    """slurmctld's clock when the jobs were read, epoch seconds: :func:`slurm_now`."""
    partitions: Mapping[str, Partition]
    """The partitions that may bar a job (not UP, or with a node or time limit), by name."""
    licenses: Mapping[str, License]
    reservations: Mapping[str, Reservation]
    limits: JobLimits | None = None
    """Per-job QOS/association limits, where slurmctld enforces them (:mod:`autoscaler.limits`)."""
    nodes: tuple[Node, ...] = ()
    """The snapshot's nodes (for ``--nodelist`` and ``--exclude``: :attr:`free_cpus`)."""
    jobs: tuple[Job, ...] = ()
    """The snapshot's jobs (for the licenses handed out in Slurm's order: :attr:`licenses_short`)."""

    @classmethod
    def of(cls, snapshot: Snapshot) -> Bars:
        return cls(
            now=slurm_now(snapshot),
            partitions={p.name: p for p in snapshot.partitions if _may_bar(p)},
            licenses={lic.name: lic for lic in snapshot.licenses},
            reservations={r.name: r for r in snapshot.reservations},
            limits=JobLimits.of(snapshot),
            nodes=snapshot.nodes,
            jobs=snapshot.jobs,
        )

    @cached_property
    def _wanting_licenses(self) -> list[Job]:
        """The pending jobs that ask for licenses (a pass over the snapshot's jobs, once)."""
        return [j for j in self.jobs if j.licenses and j.state == "PENDING"] if self.licenses else []

    @cached_property
    def licenses_short(self) -> Mapping[int, str]:
        """Fresh pending job id → the license that holds it back once the jobs ahead of it took theirs
        (:func:`autoscaler.licenses.held_back`); built the first time a fresh job asks for licenses."""
        return held_back(self._wanting_licenses, self.licenses.values(), self._license_taker)

    @cached_property
    def _short_by_partition(self) -> dict[str, dict[str, int]]:
        # not built when no fresh job was judged to its licenses (:meth:`barrier`): none can be held back
        short = self.__dict__.get("licenses_short", {})
        out: dict[str, dict[str, int]] = {}
        if short:
            for job in self._wanting_licenses:
                name = short.get(job.job_id)
                if name is not None:
                    for partition in job.partitions:
                        per = out.setdefault(partition, {})
                        per[name] = per.get(name, 0) + 1
        return out

    def _license_taker(self, job: Job) -> Taker:
        """A fresh job takes licenses unless another bar comes first; a judged one (Slurm's reason
        stands) takes them when its reason lets it start — ``Licenses`` too: it is ahead of the fresh jobs
        after it when licenses free up."""
        if job.reason in UNSETTLED:
            return Taker.FRESH if self._bar_before_licenses(job) is None else Taker.NONE
        if job.reason == "Licenses" or classify(job.reason)[1] is not Eligibility.INELIGIBLE:
            return Taker.JUDGED
        return Taker.NONE

    def held_back_by_license(self, partition: str) -> dict[str, int]:
        """License name → fresh pending jobs of ``partition`` it holds back (:attr:`licenses_short`)."""
        return dict(self._short_by_partition.get(partition, {}))

    @cached_property
    def free_cpus(self) -> Mapping[str, int]:
        """Node name → CPUs free for a job now (0 on a node that is down, drained or failing); built the
        first time a job names nodes."""
        return {n.name: free_cpus(n) for n in self.nodes}

    @cached_property
    def busy(self) -> frozenset[str]:
        """Nodes with jobs on them by their own record (:func:`autoscaler.nodes.looks_busy`: their free
        room is where fresh jobs go first)."""
        return frozenset(n.name for n in self.nodes if looks_busy(n))

    def reservation_reason(self, name: str) -> str | None:
        """``Reservation`` unless the reservation is known, started and FLEX (then new nodes may help)."""
        resv = self.reservations.get(name)
        if resv is None or (resv.start_time is not None and resv.start_time > self.now):
            return _RESERVATION
        return None if "FLEX" in resv.flags else _RESERVATION

    def barrier(self, job: Job) -> str | None:
        """The reason slurmctld's next pass would give ``job`` (its own fields, and the licenses the jobs
        ahead of it leave), or None (none seen)."""
        why = self._bar_before_licenses(job)
        if why is not None:
            return why
        if job.licenses and self.licenses and job.job_id in self.licenses_short:
            return "Licenses"
        if job.reservation:
            return self.reservation_reason(job.reservation)
        return None

    def _bar_before_licenses(self, job: Job) -> str | None:
        """:meth:`barrier`'s bars that come before licenses in slurmctld's order."""
        if job.priority == 0:
            return _HELD
        if job.dependency:
            why = dependency_reason(job.dependency)
            if why is not None:
                return why
        if job.eligible_time is not None and job.eligible_time > self.now + CLOCK_SLACK:
            return "BeginTime"
        limits = self.partitions
        barred = [
            _partition_reason(job, part) if (part := limits.get(name)) is not None else None
            for name in job.partitions
        ]
        if barred and all(barred):  # runnable in none of its partitions: the first one's reason
            return barred[0]
        if self.limits is not None:
            return self.limits.reason(job)
        return None


def required_nodes_reason(job: Job, bars: Bars | None = None) -> str | None:
    """``RequiredNodes`` when ``--nodelist`` names at least as many nodes as the job needs: it runs on
    those nodes only, which exist already — a new node never helps it (a NodeSet's future node names
    cannot be listed: sbatch refuses unknown nodes). Naming fewer: when one of them (``bars``' nodes) has
    fewer CPUs free than the job asks of each node, the job waits for it, and new nodes do not start it
    either."""
    if not job.required_nodes:
        return None
    nodes = max(job.min_nodes, 1)
    if hostlist_count(job.required_nodes) >= nodes:
        return _REQUIRED_NODES
    if bars is not None:
        per_node = -(-max(job.cpus, job.tasks * job.cpus_per_task, 1) // nodes)
        free = bars.free_cpus
        try:
            named = hostlist_expand(job.required_nodes)
        except ValueError:
            return None
        if any(free.get(name, 0) < per_node for name in named):
            return _REQUIRED_NODES
    return None


def _excludes_busy(job: Job, bars: Bars) -> bool:
    busy = bars.busy
    if not busy:
        return False
    try:
        return not busy.isdisjoint(hostlist_expand(job.excluded_nodes))
    except ValueError:
        return True  # an unreadable list: not into busy rooms (more nodes, never fewer)


def settled_reason(job: Job, bars: Bars) -> str:
    """The reason the demand model classifies ``job`` by (module docstring): Slurm's, or the bar its own
    fields show while Slurm's reason is one of :data:`UNSETTLED`."""
    reason = job.reason
    if reason in UNSETTLED:
        reason = bars.barrier(job) or reason
    elif reason == "PartitionTimeLimit" and _runs_by_time_min(job, bars):
        reason = bars.barrier(job) or "None"
    elif job.reservation and classify(reason)[1] is not Eligibility.INELIGIBLE:
        reason = bars.reservation_reason(job.reservation) or reason
    if job.required_nodes and classify(reason)[1] is not Eligibility.INELIGIBLE:
        reason = required_nodes_reason(job, bars) or reason
    if reason == "None" and job.excluded_nodes and _excludes_busy(job, bars):
        return "Resources"
    return reason
