"""Job records → totals by partition (and account, user): what the job metric families are drawn from.

One tight pass over the records groups them by everything the totals depend on; only the distinct groups
are then spread over partitions (:func:`aggregate_jobs`). Pure: a snapshot in, :class:`JobAggregates` out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from .model import Job, Snapshot

ALLOCATED_JOB_STATES = frozenset({"RUNNING", "SUSPENDED"})
"""Base states whose job holds an allocation (a job with the COMPLETING flag holds one too)."""

Sums = dict[str, list[float]]
"""Key → ``[cpus, memory_bytes, gpus, nodes]``."""

_NO_PARTITION: tuple[str, ...] = ("",)


def request_memory_bytes(job: Job) -> int:
    """Memory one task of ``job`` asks for (or holds) across all its nodes, in bytes.

    The TRES figure (``memory_bytes``) when Slurm gave one, else ``--mem`` × nodes or
    ``--mem-per-cpu`` × CPUs. Whole-node requests of pending jobs are resolved per partition (see
    :func:`aggregate_jobs`).
    """
    if job.memory_bytes:
        return job.memory_bytes
    if job.memory_per_node_bytes:
        return job.memory_per_node_bytes * max(job.min_nodes, 1)
    if job.memory_per_cpu_bytes:
        return job.memory_per_cpu_bytes * job.cpus
    return 0


def partition_node_memory(snap: Snapshot) -> dict[str, int]:
    """Partition → memory of its largest node, bytes (for whole-node memory requests)."""
    out: dict[str, int] = {}
    for n in snap.nodes:
        for p in n.partitions:
            if n.memory_bytes > out.get(p, 0):
                out[p] = n.memory_bytes
    return out


@dataclass
class JobTotals:
    """Jobs and resources by one key (a partition, an account or a user)."""

    jobs: dict[tuple[str, str], float] = field(default_factory=dict)
    """``(key, STATE)`` → jobs (pending array tasks counted one each)."""
    allocated: Sums = field(default_factory=dict)
    """Key → resources held by running, suspended and completing jobs."""
    pending: Sums = field(default_factory=dict)
    """Key → resources pending jobs request."""

    def add(
        self, key: str, state: str, flags: tuple[str, ...], sums: Sequence[int], pending_memory: int
    ) -> None:
        """Count a group of records: ``sums`` is ``[tasks, cpus, memory_bytes, gpus, nodes]``;
        ``pending_memory`` the memory to count if they pend (whole-node requests resolved)."""
        n, cpus, mem, gpus, nodes = sums
        k = (key, state)
        self.jobs[k] = self.jobs.get(k, 0.0) + n
        if state == "PENDING":
            _add(self.pending, key, (cpus, pending_memory, gpus, nodes))
        elif state in ALLOCATED_JOB_STATES or "COMPLETING" in flags:
            _add(self.allocated, key, (cpus, mem, gpus, nodes))


@dataclass
class JobAggregates:
    """Everything the job families need, from one pass over the job records (two more for the optional
    account and user totals)."""

    partition: JobTotals = field(default_factory=JobTotals)
    reasons: dict[tuple[str, str], float] = field(default_factory=dict)
    """``(partition, reason)`` → pending jobs by Slurm's reason."""
    account: JobTotals | None = None
    """By account, when asked for."""
    user: JobTotals | None = None
    """By user, when asked for."""


_GROUP = attrgetter("partitions", "state", "reason", "state_flags", "whole_node_memory")
_GROUP_ACCOUNT = attrgetter("account", "partitions", "state", "state_flags", "whole_node_memory")
_GROUP_USER = attrgetter("user", "partitions", "state", "state_flags", "whole_node_memory")


def _sum_by(jobs: Iterable[Job], key: Callable[[Job], tuple[Any, ...]]) -> dict[tuple[Any, ...], list[int]]:
    """The hot loop: ``key(job)`` → ``[tasks, cpus, memory_bytes, gpus, nodes]`` summed, where each
    record counts ``task_count`` times (a pending array record stands for its pending tasks)."""
    acc: dict[tuple[Any, ...], list[int]] = {}
    get = acc.get
    mem_of = request_memory_bytes
    for j in jobs:
        k = key(j)
        a = get(k)
        if j.array_task_string and j.array_task_id is None:  # pending array record: × its tasks
            n = j.array_pending_tasks
            vals = (n, j.cpus * n, (j.memory_bytes or mem_of(j)) * n, j.gpus * n, j.min_nodes * n)
            if a is None:
                acc[k] = list(vals)
            else:
                for i, v in enumerate(vals):
                    a[i] += v
        elif a is None:
            acc[k] = [1, j.cpus, j.memory_bytes or mem_of(j), j.gpus, j.min_nodes]
        else:
            a[0] += 1
            a[1] += j.cpus
            a[2] += j.memory_bytes or mem_of(j)
            a[3] += j.gpus
            a[4] += j.min_nodes
    return acc


def _add(d: Sums, key: str, values: tuple[float, float, float, float]) -> None:
    acc = d.get(key)
    if acc is None:
        d[key] = list(values)
    else:
        for i, v in enumerate(values):
            acc[i] += v


def aggregate_jobs(snap: Snapshot, *, per_account: bool = False, per_user: bool = False) -> JobAggregates:
    """Counts, allocations and pending demand of ``snap.jobs`` by partition (and account/user).

    Rules:

    * a pending array record stands for ``task_count`` tasks: it counts ``task_count`` jobs, and its
      CPUs, memory, GPUs and nodes — those of ONE task — are multiplied by ``task_count`` (the ``%N``
      throttle is not applied: throttled tasks are still requested);
    * pending memory of a whole-node request (``--mem=0`` or no default): the memory of the
      partition's largest node × nodes requested; Slurm's own TRES figure when the partition has no
      node in the snapshot. Other requests: the TRES memory (see :func:`request_memory_bytes`);
    * a job pending in several partitions counts, with its whole request, in each of them;
    * allocated: jobs RUNNING or SUSPENDED, or with the COMPLETING flag (they still hold nodes);
      their TRES allocation (memory across all nodes; nodes summed over jobs);
    * per account/user, each record counts once; a whole-node request uses its first partition.
    """
    node_memory = partition_node_memory(snap)

    def pending_memory(partition: str, whole: bool, sums: Sequence[int]) -> int:
        largest = node_memory.get(partition) if whole else None
        return sums[4] * largest if largest else sums[2]

    out = JobAggregates()
    for (ps, st, reason, flags, whole), sums in _sum_by(snap.jobs, _GROUP).items():
        for p in ps or _NO_PARTITION:
            out.partition.add(p, st, flags, sums, pending_memory(p, whole, sums))
            if st == "PENDING":
                k = (p, reason)
                out.reasons[k] = out.reasons.get(k, 0.0) + sums[0]
    if per_account:
        out.account = _by_owner(snap.jobs, _GROUP_ACCOUNT, pending_memory)
    if per_user:
        out.user = _by_owner(snap.jobs, _GROUP_USER, pending_memory)
    return out


def _by_owner(
    jobs: Iterable[Job],
    key: Callable[[Job], tuple[Any, ...]],
    pending_memory: Callable[[str, bool, Sequence[int]], int],
) -> JobTotals:
    totals = JobTotals()
    for (who, ps, st, flags, whole), sums in _sum_by(jobs, key).items():
        totals.add(who, st, flags, sums, pending_memory(ps[0] if ps else "", whole, sums))
    return totals
