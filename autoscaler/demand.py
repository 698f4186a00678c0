"""The demand model: how many nodes each scaling target needs, from one snapshot. Pure, no I/O.

``compute_demand(snapshot, targets) -> {target name: Demand}``.

A **target** is a partition, or a NodeSet = the nodes of a partition selected by a feature and/or
a node-name host list / prefix (:class:`Target`). For each target:

1. **Target nodes**: snapshot nodes listing ``target.partition``, narrowed by
   ``nodeset_feature`` (in the node's features or active features) and ``node_names``
   (a Slurm host list ``c[1-4],g1``, or a prefix ``gpu-*``).
2. **Busy nodes** (the floor; desired never goes below it): target nodes with allocated CPUs,
   base state ALLOCATED/MIXED/COMPLETING, flag COMPLETING, or named by a job that holds nodes
   (RUNNING, SUSPENDED — holds memory —, or flagged COMPLETING; jobs and nodes are fetched at
   slightly different times, so both sides are read).
3. **Node shape** (CPUs, memory, GPUs per node): the most common shape of the target's nodes
   (``effective_cpus`` when reported, else ``cpus``; ``memory_bytes``; ``gpus``); when the target
   has no nodes, ``Target.shape`` (scale from zero). No shape at all → nothing is counted and
   ``reasons`` says so.
4. **Pending jobs** of the partition (a job pending in several partitions counts in each target
   of those partitions) are classified by :mod:`autoscaler.reasons`: ineligible ones land in
   ``ignored[reason]`` (counted in tasks), eligible ones are sized. With ``nodeset_feature`` set, a
   job whose ``--constraint`` does not name that feature belongs to another NodeSet and is skipped
   (a job without a constraint counts toward every NodeSet of its partition).
5. **Arrays**: a pending array record stands for ``task_count`` tasks; with a ``%N`` throttle at
   most ``N − running tasks`` of them (running = the snapshot's task records of the same
   ``array_job_id`` that hold nodes) count; the rest go to ``ignored["JobArrayTaskLimit"]``.
6. **Job size** on this shape (C CPUs, M bytes, G GPUs per node): nodes
   ``n = max(min_nodes, ⌈cpus/C⌉, ⌈tasks/⌊C/cpus_per_task⌋⌉, ⌈memory/M⌉, ⌈gpus/G⌉)`` where memory is
   ``--mem`` × nodes, ``--mem-per-cpu`` × cpus, else the TRES memory; "whole node memory"
   (``--mem=0`` or no memory default) takes all of M on each node. Each of the n nodes gets an even
   share (CPUs ⌈cpus/n⌉, memory, GPUs ``--gpus-per-node`` or ⌈gpus/n⌉). Exclusive jobs take
   whole nodes. A job that can never run on this target (per-node memory/GPUs above the shape,
   more nodes than its own ``--nodes`` maximum or than ``Target.max_nodes``) goes to
   ``too_large`` and is not counted.
7. **Packing**: per-node pieces are packed first-fit decreasing (bins = nodes, dimensions = CPUs,
   memory, GPUs; order = largest dominant share first); the n pieces of one job go to n different
   nodes. Jobs with reason ``None`` (not yet looked at by the scheduler — at 1 s polling every
   fresh submission) are first packed into the free room of busy, usable nodes, since Slurm will
   start them there; only what does not fit needs new nodes. Jobs Slurm already evaluated
   (Resources, Priority, ...) did not fit the current nodes, so they are packed onto new nodes
   only. Identical pieces are placed in bulk (bins are kept as runs of identical bins), so the
   cost grows with the number of distinct job shapes, not jobs.
8. ``desired = clamp(busy + needed, min_nodes, max_nodes)``, and never below busy (if busy
   exceeds ``max_nodes``, desired stays at busy and ``reasons`` says so).

Known limit: v0.0.45 (Slurm 26.05) does not report ``--exclusive`` (``Job.exclusive`` is False);
without a memory default such a job still has ``whole_node_memory`` and thus takes whole nodes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from autoscaler.reasons import Eligibility, classify
from exporter.model import MIB, Job, Node, Snapshot
from exporter.slurmtext import hostlist_expand

__all__ = ["Demand", "NodeShape", "Target", "TooLarge", "compute_demand"]

_HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})
_BUSY_NODE_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
_UNUSABLE_NODE_STATES = frozenset({"DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_UNUSABLE_NODE_FLAGS = frozenset(
    {"DRAIN", "DRAINING", "POWERING_DOWN", "POWER_DOWN", "POWERED_DOWN", "MAINTENANCE", "RESERVED", "FAIL"}
)
_CONSTRAINT_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class NodeShape:
    """What one node of a target offers to jobs."""

    cpus: int
    memory_bytes: int
    gpus: int = 0

    def __str__(self) -> str:
        return f"{self.cpus} CPUs, {self.memory_bytes // MIB} MiB, {self.gpus} GPUs"


@dataclass(frozen=True)
class Target:
    """One scaling target: a partition, or a NodeSet (nodes of a partition by feature/names)."""

    name: str
    partition: str
    nodeset_feature: str | None = None
    """Only nodes with this feature; only jobs whose constraint (if any) names it."""
    node_names: str | None = None
    """Only these nodes: a Slurm host list (``ns-[0-9]``) or a prefix ending in ``*`` (``ns-*``)."""
    min_nodes: int = 0
    max_nodes: int | None = None
    """Upper bound of desired; None = unbounded. Jobs needing more nodes are too large."""
    shape: NodeShape | None = None
    """Node shape used while the target has no nodes in the snapshot (scale from zero)."""

    def __post_init__(self) -> None:
        if self.min_nodes < 0:
            raise ValueError(f"target {self.name!r}: min_nodes must be >= 0")
        if self.max_nodes is not None and self.max_nodes < self.min_nodes:
            raise ValueError(f"target {self.name!r}: max_nodes < min_nodes")
        if self.shape is not None and (
            self.shape.cpus < 1 or self.shape.memory_bytes < 0 or self.shape.gpus < 0
        ):
            raise ValueError(f"target {self.name!r}: shape needs cpus >= 1, memory >= 0, gpus >= 0")


@dataclass(frozen=True)
class TooLarge:
    """A pending job that can never run on the target (reported, not counted)."""

    job: str
    """Job id as Slurm prints it (``12``, ``3_[3-20]``, ``3_7``)."""
    tasks: int
    why: str


@dataclass(frozen=True)
class Demand:
    """The demand of one target."""

    target: str
    desired: int
    busy: int
    needed: int
    """New nodes the counted pending jobs need (after using busy nodes' free room)."""
    nodes: int
    """Target nodes in the snapshot (any state)."""
    eligible: int
    """Pending jobs counted (array tasks individually), including those fitting free room."""
    ignored: Mapping[str, int]
    """Pending jobs (array tasks individually) not counted, by reason."""
    too_large: tuple[TooLarge, ...]
    shape: NodeShape | None
    shape_source: str
    """``snapshot``, ``config`` or ``none``."""
    reasons: tuple[str, ...]
    """Human breakdown of the numbers above."""


# ------------------------------------------------------------------------------------ selection


def _name_matcher(expr: str) -> Callable[[str], bool]:
    e = expr.strip()
    if e.endswith("*") and "[" not in e and "," not in e:
        prefix = e[:-1]
        return lambda name: name.startswith(prefix)
    names = frozenset(hostlist_expand(e))
    return names.__contains__


def _target_nodes(target: Target, nodes: Sequence[Node]) -> list[Node]:
    match = _name_matcher(target.node_names) if target.node_names else None
    feature = target.nodeset_feature
    out = []
    for node in nodes:
        if target.partition not in node.partitions:
            continue
        if feature is not None and feature not in node.features and feature not in node.active_features:
            continue
        if match is not None and not match(node.name):
            continue
        out.append(node)
    return out


def _node_shape(node: Node) -> NodeShape:
    return NodeShape(node.effective_cpus or node.cpus, node.memory_bytes, node.gpus)


def _snapshot_shape(nodes: Sequence[Node]) -> NodeShape | None:
    """Most common shape among nodes reporting CPUs (ties → the largest)."""
    counts = Counter(_node_shape(n) for n in nodes if (n.effective_cpus or n.cpus) > 0)
    if not counts:
        return None
    return max(counts, key=lambda s: (counts[s], s.cpus, s.memory_bytes, s.gpus))


def _usable(node: Node) -> bool:
    return node.state not in _UNUSABLE_NODE_STATES and not _UNUSABLE_NODE_FLAGS.intersection(node.flags)


def _job_label(job: Job) -> str:
    if job.array_job_id is None:
        return str(job.job_id)
    if job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return f"{job.array_job_id}_[{job.array_task_string}]"


def _holds_nodes(job: Job) -> bool:
    return job.state in _HOLDING_STATES or "COMPLETING" in job.state_flags


# ------------------------------------------------------------------------------------------ sizing

# (nodes, cpus/node, memory bytes/node, gpus/node) or a "why it can never run" text
_Piece = tuple[int, int, int, int]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _size(job: Job, shape: NodeShape, max_nodes: int | None) -> _Piece | str:
    c_node, m_node, g_node = shape.cpus, shape.memory_bytes, shape.gpus
    cpus = max(job.cpus, job.tasks * job.cpus_per_task if job.cpus_per_task > 1 else 0, 1)
    n = max(job.min_nodes, 1, _ceil(cpus, c_node))
    if job.cpus_per_task > 1:
        per_node_tasks = c_node // job.cpus_per_task
        if per_node_tasks == 0:
            return f"{job.cpus_per_task} CPUs per task > {c_node} CPUs per node"
        n = max(n, _ceil(max(job.tasks, 1), per_node_tasks))
    mem_per_node = job.memory_per_node_bytes
    mem_per_cpu = job.memory_per_cpu_bytes
    total_mem = 0
    if job.whole_node_memory:
        pass
    elif mem_per_node is not None:
        if mem_per_node > m_node:
            return f"--mem {mem_per_node // MIB} MiB per node > {m_node // MIB} MiB"
    elif mem_per_cpu is not None:
        if mem_per_cpu > m_node:
            return f"--mem-per-cpu {mem_per_cpu // MIB} MiB > {m_node // MIB} MiB per node"
        total_mem = cpus * mem_per_cpu
    else:
        total_mem = job.memory_bytes
    if total_mem and m_node:
        n = max(n, _ceil(total_mem, m_node))
    elif total_mem:
        return "asks memory, nodes have none"
    gpus_pn = job.gpus_per_node
    if gpus_pn:
        if gpus_pn > g_node:
            return f"{gpus_pn} GPUs per node > {g_node} GPUs per node"
    elif job.gpus:
        if not g_node:
            return f"asks {job.gpus} GPUs, nodes have none"
        n = max(n, _ceil(job.gpus, g_node))
    # --mem-per-cpu: the CPUs of the fullest node must fit its memory
    if mem_per_cpu is not None and not job.whole_node_memory and mem_per_node is None:
        while _ceil(cpus, n) * mem_per_cpu > m_node:
            n += 1
    if job.max_nodes is not None and n > job.max_nodes:
        return f"needs {n} nodes of {shape}, the job allows at most {job.max_nodes}"
    if max_nodes is not None and n > max_nodes:
        return f"needs {n} nodes, target max is {max_nodes}"
    if job.exclusive:
        return (n, c_node, m_node, g_node)
    cpu_pn = _ceil(cpus, n)
    if job.whole_node_memory:
        mem_pn = m_node
    elif mem_per_node is not None:
        mem_pn = mem_per_node
    elif mem_per_cpu is not None:
        mem_pn = cpu_pn * mem_per_cpu
    else:
        mem_pn = _ceil(total_mem, n)
    gpu_pn = gpus_pn or _ceil(job.gpus, n)
    return (n, cpu_pn, mem_pn, gpu_pn)


# ----------------------------------------------------------------------------------------- packing

# A run of identical bins: [free cpus, free memory, free gpus, how many bins].
_Bins = list[list[int]]


def _fit(c: int, m: int, g: int, pc: int, pm: int, pg: int) -> int:
    f = c // pc
    if pm:
        f = min(f, m // pm)
    if pg:
        f = min(f, g // pg)
    return f


def _place_single(bins: _Bins, pc: int, pm: int, pg: int, k: int) -> int:
    """First fit of k identical one-node pieces into existing bins; returns how many are left."""
    i = 0
    while k and i < len(bins):
        c, m, g, cnt = bins[i]
        f = _fit(c, m, g, pc, pm, pg)
        if f:
            if k >= f * cnt:
                bins[i] = [c - f * pc, m - f * pm, g - f * pg, cnt]
                k -= f * cnt
            else:
                q, r = divmod(k, f)
                runs = []
                if q:
                    runs.append([c - f * pc, m - f * pm, g - f * pg, q])
                if r:
                    runs.append([c - r * pc, m - r * pm, g - r * pg, 1])
                rest = cnt - q - (1 if r else 0)
                if rest:
                    runs.append([c, m, g, rest])
                bins[i : i + 1] = runs
                return 0
        i += 1
    return k


def _place_multi(
    bins: _Bins, shape: NodeShape, n: int, piece: tuple[int, int, int], k: int, *, open_new: bool
) -> tuple[int, int]:
    """First fit of k identical jobs of n one-per-node pieces; returns (jobs left, bins opened).

    Job by job, first fit puts a job's pieces into the first n bins that still take a piece; the
    next identical job finds the same n bins until one of them is full. So whole steps are done
    at once: the first n available bins (plus new bins if fewer exist) take ``t`` jobs each, ``t``
    = the smallest room among them (in pieces) or the jobs left. Each step fills a run of bins,
    so the cost grows with runs, not jobs. Exact first fit, job by job.
    """
    pc, pm, pg = piece
    per_fresh = max(1, _fit(shape.cpus, shape.memory_bytes, shape.gpus, pc, pm, pg))
    opened = 0
    start = 0  # runs before ``start`` take no piece: they only get fuller
    while k:
        avail: list[tuple[int, int, int]] = []  # (run index, bins taken, pieces per bin)
        found = 0
        i = start
        while found < n and i < len(bins):
            c, m, g, cnt = bins[i]
            f = _fit(c, m, g, pc, pm, pg)
            if f:
                if not avail:
                    start = i
                take = min(cnt, n - found)
                avail.append((i, take, f))
                found += take
            i += 1
        if not avail:
            start = len(bins)
            if not open_new:
                break
            # nothing takes a piece: rounds of per_fresh jobs fill n new bins each
            rounds, r = divmod(k, per_fresh)
            if rounds:
                bins.append(
                    [
                        shape.cpus - per_fresh * pc,
                        shape.memory_bytes - per_fresh * pm,
                        shape.gpus - per_fresh * pg,
                        rounds * n,
                    ]
                )
            if r:
                bins.append([shape.cpus - r * pc, shape.memory_bytes - r * pm, shape.gpus - r * pg, n])
            return 0, opened + (rounds + (1 if r else 0)) * n
        if found < n and not open_new:
            break  # the job does not fit the existing bins: place none of its pieces
        t = min(k, min(f for _, _, f in avail), per_fresh if found < n else k)
        # the last run may be taken in part: split it (done last, indices before stay valid)
        for idx, take, _ in reversed(avail):
            c, m, g, cnt = bins[idx]
            filled = [c - t * pc, m - t * pm, g - t * pg, take]
            bins[idx : idx + 1] = [filled] if take == cnt else [filled, [c, m, g, cnt - take]]
        if found < n:
            fresh = n - found
            bins.append([shape.cpus - t * pc, shape.memory_bytes - t * pm, shape.gpus - t * pg, fresh])
            opened += fresh
        k -= t
    return k, opened


def _open(bins: _Bins, shape: NodeShape, pieces: int, per_bin: int, pc: int, pm: int, pg: int) -> int:
    """Append new bins holding ``pieces`` one-node pieces, ``per_bin`` per bin; returns bins opened."""
    q, r = divmod(pieces, per_bin)
    if q:
        bins.append(
            [shape.cpus - per_bin * pc, shape.memory_bytes - per_bin * pm, shape.gpus - per_bin * pg, q]
        )
    if r:
        bins.append([shape.cpus - r * pc, shape.memory_bytes - r * pm, shape.gpus - r * pg, 1])
    return q + (1 if r else 0)


def _ffd_order(groups: Mapping[_Piece, int], shape: NodeShape) -> list[tuple[_Piece, int]]:
    def key(item: tuple[_Piece, int]) -> tuple[float, float, int]:
        n, pc, pm, pg = item[0]
        shares = (
            pc / shape.cpus,
            pm / shape.memory_bytes if shape.memory_bytes else 0.0,
            pg / shape.gpus if shape.gpus else 0.0,
        )
        return (max(shares), sum(shares), n)

    return sorted(groups.items(), key=key, reverse=True)


def _pack(
    groups: Mapping[_Piece, int], bins: _Bins, shape: NodeShape, *, open_new: bool
) -> tuple[int, dict[_Piece, int]]:
    """FFD of ``{piece: jobs}`` into ``bins`` (and new bins if ``open_new``).

    Returns (new bins opened, {piece: jobs left unplaced}) — leftovers only when not ``open_new``.
    """
    opened = 0
    left: dict[_Piece, int] = {}
    for (n, pc, pm, pg), k in _ffd_order(groups, shape):
        per_fresh = max(1, _fit(shape.cpus, shape.memory_bytes, shape.gpus, pc, pm, pg))
        if n == 1:
            k = _place_single(bins, pc, pm, pg, k)
            if k and open_new:
                opened += _open(bins, shape, k, per_fresh, pc, pm, pg)
                k = 0
        else:
            k, new = _place_multi(bins, shape, n, (pc, pm, pg), k, open_new=open_new)
            opened += new
        if k:
            left[(n, pc, pm, pg)] = left.get((n, pc, pm, pg), 0) + k
    return opened, left


# ------------------------------------------------------------------------------------------ demand


_JOB_KEY = attrgetter(
    "partitions", "reason", "features", "array_job_id", "array_task_id", "array_task_string",
    "array_pending_tasks", "array_max_tasks", "min_nodes", "max_nodes", "cpus", "tasks",
    "cpus_per_task", "memory_per_node_bytes", "memory_per_cpu_bytes", "whole_node_memory",
    "memory_bytes", "gpus_per_node", "gpus", "exclusive",
)  # fmt: skip
"""Every job field the model reads: pending jobs equal on these are counted together."""
_KEY_PARTITIONS = 0


class _Index:
    """What every target needs from the snapshot, built once per snapshot.

    Pending jobs are collapsed (in C: ``map``/``Counter``) into distinct keys with a multiplicity,
    so the per-target work grows with distinct job kinds, not with jobs.
    """

    def __init__(self, snapshot: Snapshot, partitions: Iterable[str]) -> None:
        wanted = frozenset(partitions)
        jobs = snapshot.jobs
        self.pending_jobs = [j for j in jobs if j.state == "PENDING"]
        self.keys: list[tuple[Any, ...]] = list(map(_JOB_KEY, self.pending_jobs))
        self.rep: dict[tuple[Any, ...], Job] = dict(zip(self.keys, self.pending_jobs, strict=True))
        self.pending: dict[str, list[tuple[tuple[Any, ...], int]]] = {p: [] for p in wanted}
        for key, cnt in Counter(self.keys).items():
            for p in key[_KEY_PARTITIONS]:
                lst = self.pending.get(p)
                if lst is not None:
                    lst.append((key, cnt))
        self.array_running: Counter[int] = Counter()
        held_exprs: set[str] = set()
        for job in jobs:
            if job.state == "PENDING" or not _holds_nodes(job):
                continue
            if job.array_task_id is not None and job.array_job_id is not None:
                self.array_running[job.array_job_id] += 1
            if job.nodes and wanted.intersection(job.partitions):
                held_exprs.add(job.nodes)
        self.held_nodes: set[str] = set()
        for expr in held_exprs:
            try:
                self.held_nodes.update(hostlist_expand(expr))
            except ValueError:
                continue

    def labels(self, keys: set[tuple[Any, ...]], partition: str) -> dict[tuple[Any, ...], list[str]]:
        """Job ids of the pending jobs with these keys (rare: only for too-large jobs)."""
        out: dict[tuple[Any, ...], list[str]] = {}
        for key, job in zip(self.keys, self.pending_jobs, strict=True):
            if key in keys and partition in job.partitions:
                out.setdefault(key, []).append(_job_label(job))
        return out


def _constraint_names(job: Job, feature: str) -> bool:
    return feature in _CONSTRAINT_TOKEN.findall(job.features)


def _demand_for(target: Target, snapshot: Snapshot, index: _Index) -> Demand:
    reasons: list[str] = []
    nodes = _target_nodes(target, snapshot.nodes)
    busy_nodes = [
        n
        for n in nodes
        if n.alloc_cpus > 0
        or n.state in _BUSY_NODE_STATES
        or "COMPLETING" in n.flags
        or n.name in index.held_nodes
    ]
    busy = len(busy_nodes)
    shape = _snapshot_shape(nodes)
    shape_source = "snapshot"
    if shape is None:
        shape, shape_source = target.shape, ("config" if target.shape is not None else "none")
    if busy:
        names = ",".join(n.name for n in busy_nodes[:8]) + ("…" if busy > 8 else "")
        reasons.append(f"busy: {busy} of {len(nodes)} nodes have allocated CPUs or jobs ({names})")
    else:
        reasons.append(f"busy: 0 of {len(nodes)} nodes")
    if shape is None:
        reasons.append(
            "shape: none — the target has no nodes in the snapshot and no configured shape;"
            " pending jobs are not counted"
        )
    else:
        reasons.append(f"shape: {shape} per node (from {shape_source})")

    ignored: Counter[str] = Counter()
    too_large: list[TooLarge] = []
    fresh: Counter[_Piece] = Counter()  # reason None: may use busy nodes' free room
    evaluated: Counter[_Piece] = Counter()
    sizes: dict[tuple[Any, ...], _Piece | str] = {}
    allowance: dict[int, int] = {}
    other_nodeset = 0
    eligible = 0
    empty = not nodes
    feature = target.nodeset_feature
    too_large_keys: dict[tuple[Any, ...], str] = {}
    for jkey, multiplicity in index.pending[target.partition]:
        job = index.rep[jkey]
        name, elig, _ = classify(job.reason)
        count = multiplicity * job.task_count
        if elig is Eligibility.INELIGIBLE or (elig is Eligibility.ELIGIBLE_WHEN_EMPTY and not empty):
            ignored[name] += count
            continue
        if feature is not None and job.features and not _constraint_names(job, feature):
            other_nodeset += count
            continue
        throttle = job.array_max_tasks
        if throttle is not None and job.array_job_id is not None:
            aid = job.array_job_id
            left = allowance.get(aid)
            if left is None:
                left = max(0, throttle - index.array_running[aid])
            take = min(count, left)
            allowance[aid] = left - take
            if take < count:
                ignored["JobArrayTaskLimit"] += count - take
            count = take
            if not count:
                continue
        eligible += count
        if shape is None:
            continue
        key = jkey[_KEY_PARTITIONS + 8 :]
        size = sizes.get(key)
        if size is None:
            size = sizes[key] = _size(job, shape, target.max_nodes)
        if isinstance(size, str):
            too_large_keys[jkey] = size
            eligible -= count
            continue
        (fresh if name == "None" else evaluated)[size] += count

    if too_large_keys:
        for jkey, labels in index.labels(set(too_large_keys), target.partition).items():
            why = too_large_keys[jkey]
            tasks = index.rep[jkey].task_count
            too_large.extend(TooLarge(label, tasks, why) for label in labels)

    needed = 0
    if shape is not None and (fresh or evaluated):
        room: _Bins = []
        for n in busy_nodes:
            if _usable(n):
                c = max(0, (n.effective_cpus or n.cpus) - n.alloc_cpus)
                m = max(0, n.memory_bytes - n.alloc_memory_bytes)
                g = max(0, n.gpus - n.gpus_used)
                if c:
                    room.append([c, m, g, 1])
        in_room = 0
        if fresh and room:
            _, unplaced = _pack(fresh, room, shape, open_new=False)
            in_room = sum(fresh.values()) - sum(unplaced.values())
            evaluated.update(unplaced)
        else:
            evaluated.update(fresh)
        if in_room:
            reasons.append(f"free room: {in_room} not-yet-scheduled pending jobs fit on busy nodes")
        needed, _ = _pack(evaluated, [], shape, open_new=True)
        reasons.append(
            f"needed: {needed} new nodes for {sum(evaluated.values())} eligible pending jobs"
            " (first-fit decreasing)"
        )
    elif eligible:
        reasons.append(f"needed: 0 ({eligible} eligible pending jobs, but no node shape)")
    else:
        reasons.append("needed: 0 (no eligible pending jobs)")
    for reason, cnt in sorted(ignored.items()):
        reasons.append(f"ignored: {cnt} pending {reason}")
    if other_nodeset:
        reasons.append(
            f"skipped: {other_nodeset} pending jobs constrained to other features than {feature!r}"
        )
    for tl in too_large:
        reasons.append(f"too large: job {tl.job}: {tl.why}")

    raw = busy + needed
    desired = raw
    if target.max_nodes is not None and desired > target.max_nodes:
        desired = target.max_nodes
        reasons.append(f"clamped: busy+needed={raw} lowered to max {target.max_nodes}")
    if desired < target.min_nodes:
        desired = target.min_nodes
        reasons.append(f"clamped: busy+needed={raw} raised to min {target.min_nodes}")
    if desired < busy:
        desired = busy
        reasons.append(f"floor: {busy} busy nodes exceed max {target.max_nodes}; desired held at busy")
    reasons.insert(
        0,
        f"desired {desired} = clamp(busy {busy} + needed {needed}, min {target.min_nodes},"
        f" max {target.max_nodes if target.max_nodes is not None else '∞'})",
    )
    return Demand(
        target=target.name,
        desired=desired,
        busy=busy,
        needed=needed,
        nodes=len(nodes),
        eligible=eligible,
        ignored=dict(ignored),
        too_large=tuple(too_large),
        shape=shape,
        shape_source=shape_source,
        reasons=tuple(reasons),
    )


def compute_demand(snapshot: Snapshot, targets: Sequence[Target]) -> dict[str, Demand]:
    """Demand of every target, keyed by ``Target.name`` (names must be unique)."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError("target names must be unique")
    index = _Index(snapshot, (t.partition for t in targets))
    return {t.name: _demand_for(t, snapshot, index) for t in targets}
