"""Range checks on translated records: a record slurmrestd reports with impossible numbers is dropped and
counted, never believed. Pure.

A negative CPU count or job id (seen from a fake slurmrestd: node CPUs −9 moved a target's desired nodes
from 5 to 3) is not Slurm data. Numbers too large for JSON integers already fail their endpoint's decode
(a typed ``shape`` error); these checks catch what decodes but cannot be true.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from .model import Job, Node

__all__ = [
    "MAX_COUNT",
    "check_jobs",
    "check_nodes",
    "dropped_partitions",
    "job_problem",
    "keep_valid",
    "node_problem",
]

R = TypeVar("R")

MAX_COUNT = 1 << 31
"""Above any real count of CPUs, tasks, nodes or GPUs (Slurm keeps them in 32-bit fields)."""
MAX_BYTES = 1 << 62
"""Above any real memory size in bytes."""


def _count(value: int, low: int = 0) -> bool:
    return low <= value < MAX_COUNT


def job_problem(job: Job) -> str | None:
    """Why ``job`` cannot be a real Slurm job record, or None: its id, and the counts the collector and
    the demand model add up (CPUs, nodes, GPUs, memory) and order by (priority)."""
    if job.job_id < 1:
        return f"job id {job.job_id}"
    for name, value in (("cpus", job.cpus), ("min_nodes", job.min_nodes), ("gpus", job.gpus)):
        if not _count(value):
            return f"job {job.job_id}: {name} {value}"
    if not 0 <= job.memory_bytes < MAX_BYTES:
        return f"job {job.job_id}: memory_bytes {job.memory_bytes}"
    if not 0 <= job.priority < 1 << 32:
        return f"job {job.job_id}: priority {job.priority}"
    return None


def node_problem(node: Node) -> str | None:
    """Why ``node`` cannot be a real slurmd node record, or None."""
    for name, value in (
        ("cpus", node.cpus),
        ("alloc_cpus", node.alloc_cpus),
        ("effective_cpus", node.effective_cpus),
        ("gpus", node.gpus),
        ("gpus_used", node.gpus_used),
    ):
        if not _count(value):
            return f"node {node.name}: {name} {value}"
    for name, size in (("memory_bytes", node.memory_bytes), ("alloc_memory_bytes", node.alloc_memory_bytes)):
        if not 0 <= size < MAX_BYTES:
            return f"node {node.name}: {name} {size}"
    return None


def keep_valid(
    records: Sequence[R], problem: Callable[[R], str | None]
) -> tuple[list[R], list[tuple[R, str]]]:
    """(the records without a :func:`problem`, (record, problem) of those dropped), in order."""
    kept: list[R] = []
    dropped: list[tuple[R, str]] = []
    for r in records:
        why = problem(r)
        if why is None:
            kept.append(r)
        else:
            dropped.append((r, why))
    return kept, dropped


def dropped_partitions(dropped: Sequence[tuple[Job | Node, str]]) -> frozenset[str]:
    """The partitions the dropped records name; ``""`` for a record that names none (it may belong to
    any: whoever reads them treats ``""`` as every partition)."""
    out: set[str] = set()
    for record, _ in dropped:
        out.update(record.partitions or ("",))
    return frozenset(out)


def check_jobs(jobs: Sequence[Job]) -> tuple[Sequence[Job], list[tuple[Job, str]]]:
    """:func:`keep_valid` for jobs, ``jobs`` itself when none has a problem. Hot (100k jobs a poll): one
    comprehension with :func:`job_problem`'s comparisons finds the few records to check in full."""
    big, huge, prio = MAX_COUNT, MAX_BYTES, 1 << 32
    suspects = [
        j
        for j in jobs
        if not (
            j.job_id > 0
            and 0 <= j.cpus < big
            and 0 <= j.min_nodes < big
            and 0 <= j.gpus < big
            and 0 <= j.memory_bytes < huge
            and 0 <= j.priority < prio
        )
    ]
    if not suspects or all(job_problem(j) is None for j in suspects):
        return jobs, []
    return keep_valid(jobs, job_problem)


def check_nodes(nodes: Sequence[Node]) -> tuple[Sequence[Node], list[tuple[Node, str]]]:
    """:func:`keep_valid` for nodes (thousands a poll, not 100k: no fast path)."""
    return keep_valid(nodes, node_problem)
