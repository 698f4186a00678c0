"""Range checks on translated records: a record slurmrestd reports with impossible numbers is dropped and
counted, never believed. Pure.

A negative CPU count or job id (seen from a fake slurmrestd: node CPUs −9 moved a target's desired nodes
from 5 to 3) is not Slurm data. A record that does not decode at all (``1e30`` where a count must be an
integer) is refused alone (:func:`decode_each`): the endpoint's other records are kept, not the whole
answer failed. Each refusal has a reason (:func:`reason_of`: the field, or ``undecodable``) — the
``reason`` label of ``slurm_exporter_records_dropped_total`` and one log line per reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from .errors import ResponseError, ShapeError
from .model import Job, Node

__all__ = [
    "JOB_REASONS",
    "MAX_COUNT",
    "NODE_REASONS",
    "UNDECODABLE",
    "check_jobs",
    "check_nodes",
    "decode_each",
    "dropped_partitions",
    "job_problem",
    "job_stand_in",
    "keep_valid",
    "node_problem",
    "node_stand_in",
    "reason_of",
]

R = TypeVar("R")

MAX_COUNT = 1 << 31
"""Above any real count of CPUs, tasks, nodes or GPUs (Slurm keeps them in 32-bit fields)."""
MAX_BYTES = 1 << 62
"""Above any real memory size in bytes."""


JOB_REASONS = ("job_id", "cpus", "min_nodes", "gpus", "memory_bytes", "priority", "undecodable")
"""Every reason a job record is refused for (:func:`job_problem`, :func:`decode_each`)."""
NODE_REASONS = (
    "cpus",
    "alloc_cpus",
    "effective_cpus",
    "gpus",
    "gpus_used",
    "memory_bytes",
    "alloc_memory_bytes",
    "undecodable",
)
"""Every reason a node record is refused for (:func:`node_problem`, :func:`decode_each`)."""


def _count(value: int, low: int = 0) -> bool:
    return low <= value < MAX_COUNT


def job_problem(job: Job) -> str | None:
    """Why ``job`` cannot be a real Slurm job record, or None: its id, and the counts the collector and
    the demand model add up (CPUs, nodes, GPUs, memory) and order by (priority)."""
    if job.job_id < 1:
        return f"job {job.job_id}: job_id {job.job_id}"
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


UNDECODABLE = "undecodable"
"""The reason of a record that does not even decode as its API version says (a float where a count must
be an integer): refused alone, its endpoint's other records kept."""


def reason_of(why: str) -> str:
    """The field a problem text names (``"job 7: cpus -9"`` → ``cpus``): the ``reason`` label of the
    refused-records counter. Every problem text here is ``<record>: <field> <value or detail>``."""
    return why.partition(": ")[2].partition(" ")[0] or UNDECODABLE


def job_stand_in(doc: object) -> Job:
    """What can be read of an undecodable job element (its id and partitions, leniently), so that its
    refusal holds the right targets and the incremental reads do not read it again until it moves."""
    d = doc if isinstance(doc, dict) else {}
    job_id = d.get("job_id")
    parts = d.get("partition")
    return Job(
        job_id=job_id if isinstance(job_id, int) and not isinstance(job_id, bool) else 0,
        state="UNKNOWN",
        partitions=tuple(p for p in parts.split(",") if p) if isinstance(parts, str) else (),
    )


def node_stand_in(doc: object) -> Node:
    """What can be read of an undecodable node element (its name and partitions)."""
    d = doc if isinstance(doc, dict) else {}
    name, parts = d.get("name"), d.get("partitions")
    return Node(
        name=name if isinstance(name, str) else "?",
        state="UNKNOWN",
        partitions=tuple(p for p in parts if isinstance(p, str)) if isinstance(parts, list) else (),
    )


def decode_each(
    array_text: bytes, decode: Callable[[bytes], list[R]], stand_in: Callable[[object], R]
) -> tuple[list[R], list[tuple[R, str]]]:
    """Decode a JSON array of records one element at a time — after decoding it whole failed: the records
    of the elements that decode, and a :func:`job_stand_in`-like stand-in (with why, reason
    :data:`UNDECODABLE`) for each that does not. Raises the whole array's error when it is not a JSON
    array at all."""
    try:
        elements = msgspec.json.decode(array_text, type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise ShapeError(f"not an array of records: {e}") from None
    good: list[R] = []
    bad: list[tuple[R, str]] = []
    for raw in elements:
        piece = b"[" + bytes(raw) + b"]"
        try:
            good.extend(decode(piece))
        except ResponseError as e:
            try:
                doc: object = msgspec.json.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                doc = None
            record = stand_in(doc)
            who = (
                f"job {record.job_id}" if isinstance(record, Job) else f"node {getattr(record, 'name', '?')}"
            )
            text = e.message.replace("$[0]", "", 1)
            bad.append((record, f"{who}: {UNDECODABLE} ({text})"))
    return good, bad


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
