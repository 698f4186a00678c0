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
   ``reasons`` says so. The partition's ``MaxCPUsPerNode`` caps the shape's CPUs (and busy nodes' free
   room). Partition memory defaults (``DefMemPerCPU``/``DefMemPerNode``) need nothing here: slurmctld
   writes them into the job's record at submission, and ``OverSubscribe=EXCLUSIVE`` marks the partition's
   jobs exclusive the same way.
4. **Pending jobs** of the partition (a job pending in several partitions counts only in the one Slurm
   tries first: highest ``PriorityTier``, then the job's own order — put a NodeSet's partition first, or
   give it the higher tier, for its NodeSet to scale for such jobs) are classified by
   :mod:`autoscaler.reasons` — by Slurm's reason, or for a job slurmctld has not classified yet
   (``None``, ``PartitionConfig``) or bound to a reservation, by the reason its own fields show
   (:mod:`autoscaler.eligibility`) —: ineligible ones land in
   ``ignored[reason]`` (counted in tasks), eligible ones are sized. With ``nodeset_feature`` set, a
   job whose ``--constraint`` does not name that feature belongs to another NodeSet and is skipped
   (a job without a constraint counts toward every NodeSet of its partition). When the target has
   nodes, a constraint of ``&``-joined features needs one node with all of them, of ``|``-joined ones a
   node with any (new nodes of a NodeSet carry its existing nodes' features); brackets and counts are
   not judged (:func:`_constraint_fits`). At zero only the NodeSet's own feature is known.
5. **Arrays**: a pending array record stands for ``task_count`` tasks; with a ``%N`` throttle at
   most ``N − running tasks`` of them (running = the snapshot's task records of the same
   ``array_job_id`` that hold nodes) count; the rest go to ``ignored["JobArrayTaskLimit"]``.
6. **Job size** on this shape (C CPUs, M bytes, G GPUs per node): nodes
   ``n = max(min_nodes, ⌈cpus/C⌉, ⌈tasks/⌊C/cpus_per_task⌋⌉, ⌈memory/M⌉, ⌈gpus/G⌉)`` where memory is
   ``--mem`` × nodes, ``--mem-per-cpu`` × cpus, else the TRES memory; "whole node memory"
   (``--mem=0`` or no memory default) takes all of M on each node. Each of the n nodes gets an even
   share (CPUs ⌈cpus/n⌉, memory, GPUs ``--gpus-per-node`` or ⌈gpus/n⌉). Exclusive jobs take
   whole nodes. ``--spread-job`` takes a node per task, up to its own and the target's maximum
   (oracle: ``spread``). ``--ntasks-per-node``, ``-N min-max`` (the minimum starts it) and
   ``--mem-per-cpu`` agree with Slurm through the formula (oracle: ``task_geometry``). GPUs: ``--gpus``,
   ``--gpus-per-node``, ``--gpus-per-task`` (× tasks, by the adapter), ``--cpus-per-gpu`` (slurmctld
   writes the CPUs into the record), ``--mem-per-gpu`` (the TRES memory total) — hand-computed tests
   only: the lab has no CLOUD GPU nodes to ask Slurm (26.05.5 refuses GRES on nodes made by ``scontrol
   create``). A job that can
   never run on this target (per-node memory/GPUs above the shape,
   more nodes than its own ``--nodes`` maximum or than ``Target.max_nodes``) goes to
   ``too_large`` and is not counted.
7. **Packing** (:mod:`autoscaler.packing`): per-node pieces are packed by first fit **in Slurm's
   scheduling order** (bins = nodes, dimensions = CPUs, memory, GPUs; the n pieces of one job go to n
   different nodes). Slurm's main scheduler takes pending jobs up in priority order (within one
   partition: priority descending, then submit time, then job id — an array's tasks at the array's id)
   and gives each job nodes that fit: in the oracle's mixes the lowest-numbered ones (its node
   selection prefers the tightest run of adjacent nodes that holds a job alone; ``multinode_after`` is
   where that differs). When a NodeSet scales up from zero its nodes register one after the other and
   are filled in that order, so first fit in that order models what Slurm will really use. The issue's
   original rule, first-fit *decreasing* (largest first), under-counted Slurm by one node on the
   oracle's ``priority_order`` mix (``-c3, -c3, -c5, -c5``: Slurm resumes 3 — 3+3, 5, 5 —, decreasing
   said 2 — 5+3 twice); on a real NodeSet the fourth job would pend after the scale-up and cost a second
   round (``tests/test_autoscale_live.py``).
   **Runs**: up to :data:`ORDER_JOBS` pending job records the jobs are ordered one by one and
   consecutive jobs of one size form a run, placed in bulk (the oracle's and most queues' case: exact
   first fit in Slurm's order). Beyond, each size is one run, at the place of the first job of that
   size Slurm takes up (a kind's lead job: its highest priority; among its jobs of that priority, the
   first one slurmctld lists), so the cost grows with the number of distinct job shapes, not jobs (bins
   are kept as runs of identical bins). The price: jobs Slurm interleaves with others are placed
   together (``-c3, -c5, -c3, -c5``: Slurm uses 2 nodes — 3+5 twice —, as runs 3 — 3+3, 5, 5; the
   end-to-end workload of ``tests/test_autoscale_live.py``: 6, as runs 7). Exact while runs of jobs ×
   kinds of bins stay within ``packing.EXACT_WORK`` (~1000 runs onto new nodes); beyond (e.g. 100k jobs
   of all-different sizes, where first fit is ~quadratic) best fit in the same order through an index
   of free room: linear, never fewer nodes than the jobs need (a real packing), at most ``2·S + n_max``
   (S = the jobs' CPU + memory + GPU shares of a node, summed; exact first fit obeys the same bound, in
   any order), measured within ±1.5 % of exact first fit; ``reasons`` says which was used (bounds and
   proof: :mod:`autoscaler.packing`).
   **Free room first**: jobs with reason ``None`` are first packed into the free room of busy, usable
   nodes (in the same order); only what does not fit needs new nodes, packed with the others, each
   run in its place in Slurm's order. ``None`` means the scheduler has not looked at the job yet — at
   1 s polling that is nearly every fresh submission — and Slurm's next scheduling pass starts such a
   job on free room of the running nodes if it fits there, rather than leaving it for a node that still
   has to be resumed; counting it as new nodes would resume cloud nodes for jobs that start elsewhere a
   second later. Jobs Slurm already evaluated (Resources, Priority, ...) did not fit the current nodes,
   so they are packed onto new nodes only.
8. ``desired = clamp(busy + needed, min_nodes, max_nodes)``, and never below busy (if busy
   exceeds ``max_nodes``, desired stays at busy and ``reasons`` says so).

Exclusivity: v0.0.45 (Slurm 26.05) does not report ``--exclusive``, so the poller lists ``/jobs`` with
v0.0.44 there (:data:`exporter.client.JOBS_VERSION_INSTEAD`); an exclusive job takes its nodes whole.

Cost: every job is read once (:func:`_scan`: the fields above as one tuple and the priority, plain
attribute reads in one list comprehension — ~2× faster than ``attrgetter`` on msgspec structs —, the
tuple grouped by ``dict.setdefault``; :func:`_tally` counts the groups and finds their lead jobs with
numpy); up to :data:`ORDER_JOBS` pending records they are sorted job by job (:func:`_job_order`);
everything after works on runs and distinct kinds of jobs, merged per partition where they are equal
for the model, and on distinct job shapes. Figures: ``benchmarks/bench_demand.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import compress
from itertools import count as counter
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from autoscaler.eligibility import UNSETTLED, Bars, settled_reason
from autoscaler.packing import Bins, Piece, is_exact, pack
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


_AND = re.compile(r"[A-Za-z0-9_.\-]+(?:&[A-Za-z0-9_.\-]+)*")
_OR = re.compile(r"[A-Za-z0-9_.\-]+(?:\|[A-Za-z0-9_.\-]+)+")


def _constraint_fits(expr: str, feature: str | None, node_features: set[frozenset[str]]) -> bool:
    """Whether a job's ``--constraint`` lets it run on the target: it names the NodeSet's ``feature`` (when
    the target has one), and — when the target has nodes — one node has every ``&``-joined feature, or any
    of the ``|``-joined ones. Other forms (brackets, counts) are not judged by the nodes (they count)."""
    tokens = _CONSTRAINT_TOKEN.findall(expr)
    if feature is not None and feature not in tokens:
        return False
    if not node_features:
        return True  # at zero only the NodeSet's own feature is known
    if _AND.fullmatch(expr):
        wanted = set(tokens)
        return any(wanted <= have for have in node_features)
    if _OR.fullmatch(expr):
        return any(t in have for have in node_features for t in tokens)
    return True


def _target_nodes(target: Target, nodes: Sequence[Node]) -> list[Node]:
    """``nodes`` (already those of ``target.partition``) narrowed by feature and names."""
    match = _name_matcher(target.node_names) if target.node_names else None
    feature = target.nodeset_feature
    if feature is None and match is None:
        return list(nodes)
    out = []
    for node in nodes:
        if feature is not None and feature not in node.features and feature not in node.active_features:
            continue
        if match is not None and not match(node.name):
            continue
        out.append(node)
    return out


def _snapshot_shape(nodes: Sequence[Node]) -> NodeShape | None:
    """Most common shape among nodes reporting CPUs (ties → the largest)."""
    counts = Counter(
        (n.effective_cpus or n.cpus, n.memory_bytes, n.gpus)
        for n in nodes
        if (n.effective_cpus or n.cpus) > 0
    )
    if not counts:
        return None
    return NodeShape(*max(counts, key=lambda s: (counts[s], *s)))


def _job_label(job: Job) -> str:
    if job.array_job_id is None:
        return str(job.job_id)
    if job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return f"{job.array_job_id}_[{job.array_task_string}]"


_PLAIN_HOST = re.compile(r"[^\[\](),\s]+")
_PREFIX = re.compile(r"[^\[\](),\s]*")
_NO_HOSTS = frozenset({"(null)", "None", "N/A"})


@lru_cache(maxsize=1 << 15)
def _hosts(expr: str) -> tuple[str, ...]:
    """Host names of a job's node list, as :func:`hostlist_expand` reads it (``()`` when it cannot).

    Cached: a running job's list is read again at every poll. ``name`` and ``prefix[lo-hi]`` (most
    lists) are read here directly, the rest by :func:`hostlist_expand`.
    """
    prefix, bracket, rest = expr.partition("[")
    if not bracket:
        if _PLAIN_HOST.fullmatch(expr):
            return () if expr in _NO_HOSTS else (expr,)
    elif rest[-1:] == "]":
        lo, dash, hi = rest[:-1].partition("-")
        if (
            dash
            and lo.isdigit()
            and hi.isdigit()
            and lo.isascii()
            and hi.isascii()
            and _PREFIX.fullmatch(prefix)
        ):
            first, last = int(lo), int(hi)
            if first <= last < first + 1_000_000:  # hostlist_expand's limit
                width = len(lo) if lo[0] == "0" and len(lo) > 1 else 0
                names = []
                for i in range(first, last + 1):
                    names.append(prefix + str(i).zfill(width))
                return tuple(names)
    try:
        return tuple(hostlist_expand(expr))
    except ValueError:
        return ()


# ------------------------------------------------------------------------------------------ sizing


class _Request(NamedTuple):
    """The job fields sizing reads (``Job`` names; the tail of :func:`_key`)."""

    min_nodes: int
    max_nodes: int | None
    cpus: int
    tasks: int
    cpus_per_task: int
    memory_per_node_bytes: int | None
    memory_per_cpu_bytes: int | None
    whole_node_memory: bool
    memory_bytes: int
    gpus_per_node: int
    gpus: int
    exclusive: bool
    spread: bool


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _size(request: _Key, shape: NodeShape, max_nodes: int | None) -> Piece | str:
    """(nodes, cpus/node, memory bytes/node, gpus/node) of a job's :class:`_Request`, or why it can
    never run on this shape."""
    (
        min_nodes, job_max_nodes, job_cpus, tasks, cpus_per_task, mem_per_node, mem_per_cpu,
        whole_node_memory, memory_bytes, gpus_pn, job_gpus, exclusive, spread,
    ) = request  # fmt: skip
    c_node, m_node, g_node = shape.cpus, shape.memory_bytes, shape.gpus
    cpus = max(job_cpus, tasks * cpus_per_task if cpus_per_task > 1 else 0, 1)
    n = max(min_nodes, 1, _ceil(cpus, c_node))
    if cpus_per_task > 1:
        per_node_tasks = c_node // cpus_per_task
        if per_node_tasks == 0:
            return f"{cpus_per_task} CPUs per task > {c_node} CPUs per node"
        n = max(n, _ceil(max(tasks, 1), per_node_tasks))
    total_mem = 0
    if whole_node_memory:
        pass
    elif mem_per_node is not None:
        if mem_per_node > m_node:
            return f"--mem {mem_per_node // MIB} MiB per node > {m_node // MIB} MiB"
    elif mem_per_cpu is not None:
        if mem_per_cpu > m_node:
            return f"--mem-per-cpu {mem_per_cpu // MIB} MiB > {m_node // MIB} MiB per node"
        total_mem = cpus * mem_per_cpu
    else:
        total_mem = memory_bytes
    if total_mem and m_node:
        n = max(n, _ceil(total_mem, m_node))
    elif total_mem:
        return "asks memory, nodes have none"
    if gpus_pn:
        if gpus_pn > g_node:
            return f"{gpus_pn} GPUs per node > {g_node} GPUs per node"
    elif job_gpus:
        if not g_node:
            return f"asks {job_gpus} GPUs, nodes have none"
        n = max(n, _ceil(job_gpus, g_node))
    if spread:  # --spread-job: one task per node, as far as the job's and the target's maxima allow
        n = max(n, min(max(tasks, 1), job_max_nodes or tasks, max_nodes or tasks))
    # --mem-per-cpu: the CPUs of the fullest node must fit its memory
    if mem_per_cpu is not None and not whole_node_memory and mem_per_node is None:
        while _ceil(cpus, n) * mem_per_cpu > m_node:
            n += 1
    if job_max_nodes is not None and n > job_max_nodes:
        return f"needs {n} nodes of {shape}, the job allows at most {job_max_nodes}"
    if max_nodes is not None and n > max_nodes:
        return f"needs {n} nodes, target max is {max_nodes}"
    if exclusive:
        return (n, c_node, m_node, g_node)
    cpu_pn = _ceil(cpus, n)
    if whole_node_memory:
        mem_pn = m_node
    elif mem_per_node is not None:
        mem_pn = mem_per_node
    elif mem_per_cpu is not None:
        mem_pn = cpu_pn * mem_per_cpu
    else:
        mem_pn = _ceil(total_mem, n)
    gpu_pn = gpus_pn or _ceil(job_gpus, n)
    return (n, cpu_pn, mem_pn, gpu_pn)


# ------------------------------------------------------------------------------------------ demand

_Key = tuple[Any, ...]
_GROUP = (1 << 31) - 1
"""The group bits of a :func:`_scan` code (group 0: not pending)."""
_U32 = 0xFFFFFFFF
ORDER_JOBS = 2000
"""Up to this many pending job records, the pending jobs are ordered job by job for the packing (runs =
consecutive jobs of one kind); beyond, each kind is one run at its lead job's place (module docstring,
rule 7)."""
_Rank = tuple[int, float, int]
"""(−priority, submit time, job id): :func:`_rank`."""


def _scan(jobs: Iterable[Job], others: list[Job], bars: Bars) -> tuple[dict[_Key, int], list[int]]:
    """One pass over the jobs: the pending ones by key (every job field the model reads), the others
    appended to ``others``.

    Key: ``(partitions, reason, features, tasks, array, *request)``: ``reason`` is Slurm's, or for a job
    Slurm has not classified yet (reason in ``UNSETTLED``) or bound to a reservation what its own fields
    say (:func:`autoscaler.eligibility.settled_reason`, called for those jobs only); ``tasks`` is
    ``Job.task_count`` (an array record stands for its pending tasks); ``array`` is None for a job outside
    an array, the ``array_job_id`` for a record of an array without a ``%N`` throttle (the array's records
    are one group, see :func:`_tally`), else every array field, so that records of a throttled array are
    only counted together when the job by job reading would (the throttle's allowance is handed out in
    order); ``request`` is :class:`_Request`.

    Returns ``({key: group}, codes)``: ``group`` numbers the key (1 + the ordinal among pending jobs of
    its first job: below 2³¹); ``codes`` holds one int per job, in snapshot order: ``priority << 31 |
    group`` for a pending job (Slurm's priority is a uint32: the code fits an int64), 0 for the others.
    :func:`_tally` reads them.

    The hot loop of the model (once per job): one list comprehension, plain attribute reads (~2× faster
    than ``attrgetter`` on msgspec structs), the key hashed once by ``dict.setdefault``; a job that is
    not pending is appended to ``others`` in passing (``append`` returns None).
    """
    other = others.append
    unsettled = UNSETTLED
    settle = partial(settled_reason, bars=bars)
    groups: dict[_Key, int] = {}
    group = groups.setdefault
    ordinal = counter(1).__next__
    codes = [
        group(
            (
                j.partitions,
                j.reason if j.reason not in unsettled and not j.reservation and not j.required_nodes
                else settle(j),
                j.features,
                j.array_pending_tasks if j.array_task_id is None and j.array_task_string else 1,
                j.array_job_id if j.array_max_tasks is None
                else (j.array_job_id, j.array_task_id, j.array_task_string, j.array_max_tasks),
                j.min_nodes, j.max_nodes, j.cpus, j.tasks, j.cpus_per_task, j.memory_per_node_bytes,
                j.memory_per_cpu_bytes, j.whole_node_memory, j.memory_bytes, j.gpus_per_node, j.gpus,
                j.exclusive, j.spread,
            ),
            ordinal(),
        ) | j.priority << 31
        if j.state == "PENDING"
        else other(j) or 0
        for j in jobs
    ]  # fmt: skip
    return groups, codes


def _tally(
    groups: Mapping[_Key, int], codes: Sequence[int], *, positions: bool = False
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per key of :func:`_scan` (in its order): pending jobs, index of its *lead* job in the snapshot,
    the lead's priority; with ``positions``, also the snapshot indices of the pending jobs (else
    ``[]``).

    The lead is the job of the key that Slurm takes up first: the highest priority, and among those the
    first one listed. slurmctld lists job records in the order it created them, which is job id order —
    except array records (an array's pending record moves to the end each time a task is split off
    from it), which is why each array's records are keyed apart. Vectorised (numpy): the per-job work
    stays in :func:`_scan`.
    """
    if not groups:
        return [], [], [], []
    try:
        code = np.fromiter(codes, dtype=np.int64, count=len(codes))
    except OverflowError:  # a priority beyond Slurm's uint32: clamped (never seen)
        code = np.fromiter(
            (c & _GROUP | min(max(c >> 31, 0), _U32) << 31 for c in codes),
            dtype=np.int64,
            count=len(codes),
        )
    n = len(codes)
    group = code & _GROUP  # 0 for the jobs that are not pending
    size = int(group.max()) + 1
    jobs = np.bincount(group, minlength=size)
    # per group the largest priority << 31 | (n − index): the highest priority, then the first listed
    best = code & ~_GROUP
    best |= np.arange(n, 0, -1, dtype=np.int64)
    top = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, group, best)
    keys = np.fromiter(groups.values(), dtype=np.int64, count=len(groups))
    top = top[keys]
    leads = (n - (top & _GROUP)).tolist()
    priorities = (top >> 31).tolist()
    return jobs[keys].tolist(), leads, priorities, np.flatnonzero(group).tolist() if positions else []


def _rank(job: Job) -> _Rank:
    """Where Slurm's main scheduler takes ``job`` up (smaller first; within one partition): priority
    descending, then submit time, then job id (an array's tasks: the array's id), as slurmctld sorts its
    job queue (``sort_job_queue2``)."""
    return (-job.priority, job.submit_time or 0.0, job.array_job_id or job.job_id)


def _job_order(
    jobs: Sequence[Job], positions: Iterable[int], codes: Sequence[int], key_index: Mapping[int, int]
) -> list[list[int]]:
    """The pending jobs at ``positions`` of the snapshot in Slurm's scheduling order (:func:`_rank`;
    equal ranks — an array's tasks — in snapshot order), as runs ``[key index, jobs]`` of consecutive
    jobs of one key (``key_index``: a :func:`_scan` group → the index of its key)."""
    runs: list[list[int]] = []
    for _, i in sorted([(_rank(jobs[i]), i) for i in positions]):
        k = key_index[codes[i] & _GROUP]
        if runs and runs[-1][0] == k:
            runs[-1][1] += 1
        else:
            runs.append([k, 1])
    return runs


def _key(job: Job, bars: Bars) -> _Key:
    """The key :func:`_scan` groups a pending job under."""
    (key,) = _scan((job,), [], bars)[0]
    return key


def _full_key(j: Job, bars: Bars) -> _Key:
    """:func:`_key` with the array fields themselves: how too-large jobs are listed (grouped)."""
    return (_key(j, bars), j.array_job_id, j.array_task_id, j.array_task_string, j.array_pending_tasks)


_TASKS, _THROTTLE, _REQUEST = 3, 4, 5
"""Positions in :func:`_key`; ``key[_REQUEST:]`` is the job's :class:`_Request`."""


class _Kind:
    """Pending jobs of one partition that the model treats alike.

    Built once per snapshot from the distinct keys: an ineligible kind is one reason (all that counts
    of it is how many); an eligible, unthrottled kind is one (fresh — reason None — or not,
    constraint, request); a throttled key (``%N``) stays its own kind, as the throttle's allowance
    is handed out in order. Its lead job is its keys' lead (:func:`_tally`) that Slurm takes up first.
    """

    __slots__ = (
        "count",
        "elig",
        "features",
        "keys",
        "lead",
        "name",
        "priority",
        "request",
        "throttle",
        "ties",
    )

    def __init__(
        self, key: _Key, request: _Key, name: str, elig: Eligibility, count: int, priority: int, lead: int
    ) -> None:
        self.name = name
        self.elig = elig
        self.features: str = key[2]
        throttle = key[_THROTTLE]
        self.throttle: tuple[int, int] | None = (
            (throttle[0], throttle[3]) if type(throttle) is tuple and throttle[0] is not None else None
        )
        """(array job id, %N) of a throttled array."""
        self.request = request
        """``key[_REQUEST:]``: what sizing reads (:class:`_Request`)."""
        self.count = count
        """Jobs (array tasks individually)."""
        self.priority = priority
        """The highest priority of its jobs (−1 if ineligible: never packed)."""
        self.lead = lead
        """Snapshot index of the lead job of its first key of that priority."""
        self.ties: list[int] | None = None
        """Those of its other keys with a lead of that priority (merged keys; rare)."""
        self.keys = [key]

    def rank(self, jobs: Sequence[Job]) -> _Rank:
        """Its lead job's :func:`_rank`."""
        rank = _rank(jobs[self.lead])
        return rank if self.ties is None else min(rank, *(_rank(jobs[i]) for i in self.ties))


_by_priority = attrgetter("priority")


def _by_lead(kinds: list[_Kind], jobs: Sequence[Job]) -> list[_Kind]:
    """``kinds`` in the order Slurm takes their lead jobs up: by priority, and kinds of equal priority
    by their leads' :func:`_rank` (read only then: most kinds differ in priority). Stable."""
    kinds = sorted(kinds, key=_by_priority, reverse=True)
    i, n = 0, len(kinds)
    while i < n:
        priority = kinds[i].priority
        j = i + 1
        while j < n and kinds[j].priority == priority:
            j += 1
        if j - i > 1 and priority >= 0:
            kinds[i:j] = sorted(kinds[i:j], key=lambda kind: kind.rank(jobs))
        i = j
    return kinds


def _first_partition(partitions: tuple[str, ...], tiers: Mapping[str, int]) -> str | None:
    """The partition Slurm tries a pending job in first: the highest ``PriorityTier``, then the job's own
    order. A job pending in several partitions counts in that one only, so two NodeSets never both scale
    up for it."""
    if len(partitions) < 2:
        return partitions[0] if partitions else None
    return max(enumerate(partitions), key=lambda ip: (tiers.get(ip[1], 0), -ip[0]))[1]


class _Index:
    """What every target needs from the snapshot, built once per snapshot.

    Pending jobs are collapsed into distinct keys with a multiplicity and a lead job (:func:`_scan`,
    :func:`_tally`), then into :class:`_Kind` per partition, and listed per partition in Slurm's
    scheduling order as runs ``(kind, jobs)`` (:attr:`order`), so the per-target work grows with runs
    and kinds, not jobs.
    """

    def __init__(self, snapshot: Snapshot, partitions: Iterable[str]) -> None:
        wanted = frozenset(partitions)
        self.jobs = jobs = snapshot.jobs
        others: list[Job] = []
        self.bars = Bars.of(snapshot)
        self.max_cpus_per_node = {
            p.name: p.max_cpus_per_node
            for p in snapshot.partitions
            if p.name in wanted and p.max_cpus_per_node
        }
        """Partition ``MaxCPUsPerNode`` where set: the CPUs of a node its jobs may use together."""
        groups, codes = _scan(jobs, others, self.bars)
        self.by_job = by_job = len(codes) - len(others) <= ORDER_JOBS
        """Whether the pending jobs are ordered job by job (else kind by kind): :attr:`order`."""
        multiplicities, leads, priorities, positions = _tally(groups, codes, positions=by_job)
        kinds: dict[str, list[_Kind]] = {p: [] for p in wanted}
        tiers = {p.name: p.priority_tier for p in snapshot.partitions}
        kind_at: dict[str, dict[int, _Kind]] = {p: {} for p in wanted}  # key index → its kind
        merged: dict[str, dict[Any, _Kind]] = {p: {} for p in wanted}
        parts_of: dict[tuple[str, ...], list[str]] = {}
        class_of: dict[str, tuple[str, Eligibility]] = {}
        ineligible, eligible = Eligibility.INELIGIBLE, Eligibility.ELIGIBLE
        for k, (key, multiplicity, lead, priority) in enumerate(
            zip(groups, multiplicities, leads, priorities, strict=True)
        ):
            parts = parts_of.get(key[0])
            if parts is None:
                first = _first_partition(key[0], tiers)
                parts = parts_of[key[0]] = [first] if first in wanted else []
                if not parts:
                    continue
            elif not parts:
                continue
            cls = class_of.get(key[1])
            if cls is None:
                cls = class_of[key[1]] = classify(key[1])[:2]
            name, elig = cls
            count = multiplicity * key[_TASKS]
            request = key[_REQUEST:]
            mkey: Any
            if elig is ineligible:
                mkey = name  # all that counts is how many
                priority = -1
            else:
                if type(key[_THROTTLE]) is tuple:
                    mkey = None  # %N: keeps its place in the order
                elif elig is eligible:
                    mkey = (name == "None", key[2], request)  # fresh or not, constraint, request
                else:
                    mkey = (name, key[2], request)
            for p in parts:
                if mkey is None:
                    kind = _Kind(key, request, name, elig, count, priority, lead)
                else:
                    same = merged[p]
                    seen = same.get(mkey)
                    if seen is not None:
                        seen.count += count
                        seen.keys.append(key)
                        if priority > seen.priority:
                            seen.priority, seen.lead, seen.ties = priority, lead, None
                        elif priority == seen.priority:
                            if seen.ties is None:
                                seen.ties = [lead]
                            else:
                                seen.ties.append(lead)
                        if by_job:
                            kind_at[p][k] = seen
                        continue
                    kind = same[mkey] = _Kind(key, request, name, elig, count, priority, lead)
                kinds[p].append(kind)
                if by_job:
                    kind_at[p][k] = kind
        self.order: dict[str, list[tuple[_Kind, int]]] = {}
        """Per partition, with :attr:`by_job` (up to :data:`ORDER_JOBS` pending job records), its
        pending jobs in Slurm's scheduling order as runs ``(kind, jobs)`` of consecutive jobs of one
        kind (array tasks counted individually)."""
        self.kinds: dict[str, list[_Kind]] = {}
        """Per partition, else (one run per kind), its kinds in the order of their lead jobs."""
        if by_job:
            key_index = {g: k for k, g in enumerate(groups.values())}
            tasks = [key[_TASKS] for key in groups]
            runs = _job_order(jobs, positions, codes, key_index)
            for p in wanted:
                at = kind_at[p]
                order: list[list[Any]] = []
                for k, n in runs:
                    run_kind = at.get(k)
                    if run_kind is None:
                        continue
                    if order and order[-1][0] is run_kind:
                        order[-1][1] += n * tasks[k]
                    else:
                        order.append([run_kind, n * tasks[k]])
                self.order[p] = [(run_kind, n) for run_kind, n in order]
        else:
            self.kinds = {p: _by_lead(kinds[p], jobs) for p in wanted}
        holding = [j for j in others if j.state in _HOLDING_STATES or "COMPLETING" in j.state_flags]
        self.array_running: Counter[int] = Counter(
            j.array_job_id for j in holding if j.array_task_id is not None and j.array_job_id is not None
        )
        self._held_exprs = {j.nodes for j in holding if j.nodes and not wanted.isdisjoint(j.partitions)}
        self._held: set[str] | None = None
        self.nodes: dict[str, list[Node]] = {p: [] for p in wanted}
        for node in snapshot.nodes:
            for p in node.partitions:
                lst = self.nodes.get(p)
                if lst is not None:
                    lst.append(node)

    def held_nodes(self) -> set[str]:
        """Names of nodes held by jobs (RUNNING, SUSPENDED, COMPLETING) of the wanted partitions."""
        if self._held is None:
            self._held = set().union(*map(_hosts, self._held_exprs))
        return self._held

    def labels(self, keys: Mapping[_Key, str], partition: str) -> list[tuple[Job, str]]:
        """The pending jobs with these keys and their ``why`` (rare: only for too-large jobs), grouped
        like job by job: by all their fields, groups in order of first appearance."""
        cpus = {k[_REQUEST + 2] for k in keys}
        groups: dict[_Key, list[tuple[Job, str]]] = {}
        for job in self.jobs:
            if job.cpus in cpus and job.state == "PENDING" and partition in job.partitions:
                why = keys.get(_key(job, self.bars))
                if why is not None:
                    groups.setdefault(_full_key(job, self.bars), []).append((job, why))
        return [item for group in groups.values() for item in group]


def _room(busy_nodes: Iterable[Node], max_cpus: int | None = None) -> Bins:
    """Free room of busy, usable nodes, in node order (equal neighbours as one run). ``max_cpus``: the
    partition's MaxCPUsPerNode, counted against all of a node's allocated CPUs (exact when the partition's
    jobs are the node's only ones, as on a NodeSet; else it may under-count the room)."""
    runs: list[list[int]] = []
    last = [0, 0, 0, 0]
    for n in busy_nodes:
        c = (n.effective_cpus or n.cpus) - n.alloc_cpus
        if max_cpus is not None:
            c = min(c, max_cpus - n.alloc_cpus)
        if c <= 0 or n.state in _UNUSABLE_NODE_STATES or not _UNUSABLE_NODE_FLAGS.isdisjoint(n.flags):
            continue
        m = n.memory_bytes - n.alloc_memory_bytes
        g = n.gpus - n.gpus_used
        if m < 0:
            m = 0
        if g < 0:
            g = 0
        if last[0] == c and last[1] == m and last[2] == g:
            last[3] += 1
        else:
            last = [c, m, g, 1]
            runs.append(last)
    return Bins(runs)


def _demand_for(target: Target, index: _Index) -> Demand:
    reasons: list[str] = []
    nodes = _target_nodes(target, index.nodes[target.partition])
    busy_flags = [n.alloc_cpus > 0 or n.state in _BUSY_NODE_STATES or "COMPLETING" in n.flags for n in nodes]
    if not all(busy_flags):
        held = index.held_nodes()
        if held:
            busy_flags = [b or n.name in held for b, n in zip(busy_flags, nodes, strict=True)]
    busy_nodes = list(compress(nodes, busy_flags))
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
    max_cpus = index.max_cpus_per_node.get(target.partition)
    if shape is not None and max_cpus is not None and max_cpus < shape.cpus:
        shape = replace(shape, cpus=max_cpus)
        reasons.append(f"shape: {max_cpus} CPUs usable per node (partition MaxCPUsPerNode)")

    ignored: Counter[str] = Counter()
    too_large: list[TooLarge] = []
    # runs of jobs in Slurm's order, as parallel lists (few objects: a 100k-run queue stays cheap for the
    # garbage collector); fresh (reason None) runs may use busy nodes' free room
    run_piece: list[Piece] = []
    run_jobs: list[int] = []
    run_fresh: list[bool] = []
    by_job = index.by_job
    run_at: tuple[dict[Piece, int], dict[Piece, int]] = ({}, {})  # by kind: (evaluated, fresh) piece → run
    sizes: dict[_Key, Piece | str] = {}
    allowance: dict[int, int] = {}
    constraint_ok: dict[str, bool] = {}
    node_features: set[frozenset[str]] | None = None
    """The feature sets of the target's nodes (a NodeSet's new nodes have its existing nodes' features);
    built at the first constrained job."""
    other_nodeset = 0
    eligible = 0
    empty = not nodes
    feature = target.nodeset_feature
    too_large_keys: dict[_Key, str] = {}
    order = index.order[target.partition] if by_job else ((k, k.count) for k in index.kinds[target.partition])
    for kind, count in order:
        elig = kind.elig
        if elig is Eligibility.INELIGIBLE or (elig is Eligibility.ELIGIBLE_WHEN_EMPTY and not empty):
            ignored[kind.name] += count
            continue
        if kind.features and (feature is not None or nodes):
            ok = constraint_ok.get(kind.features)
            if ok is None:
                if node_features is None:
                    node_features = {frozenset((*n.features, *n.active_features)) for n in nodes}
                ok = constraint_ok[kind.features] = _constraint_fits(kind.features, feature, node_features)
            if not ok:
                other_nodeset += count
                continue
        if kind.throttle is not None:
            aid, throttle = kind.throttle
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
        size = sizes.get(kind.request)
        if size is None:
            size = sizes[kind.request] = _size(kind.request, shape, target.max_nodes)
        if isinstance(size, str):
            too_large_keys.update(dict.fromkeys(kind.keys, size))
            eligible -= count
            continue
        fresh = kind.name == "None"
        if by_job:  # consecutive jobs of one size are one run
            if run_piece and run_piece[-1] == size and run_fresh[-1] is fresh:
                run_jobs[-1] += count
                continue
        else:  # all jobs of one size are one run, at the first one's place
            at = run_at[fresh]
            r = at.get(size)
            if r is not None:
                run_jobs[r] += count
                continue
            at[size] = len(run_piece)
        run_piece.append(size)
        run_jobs.append(count)
        run_fresh.append(fresh)

    if too_large_keys:
        too_large = [
            TooLarge(_job_label(job), job.task_count, why)
            for job, why in index.labels(too_large_keys, target.partition)
        ]

    needed = 0
    if shape is not None and run_piece:
        cap = (shape.cpus, shape.memory_bytes, shape.gpus)
        fresh_runs = list(compress(range(len(run_piece)), run_fresh))
        room = _room(busy_nodes, max_cpus) if fresh_runs else None
        if room is not None and room.blocks:
            exact = is_exact(len(fresh_runs), room.run_count())
            groups = [(run_piece[r], run_jobs[r]) for r in fresh_runs]
            _, unplaced = pack(groups, room, cap, open_new=False, exact=exact)
            in_room = sum(run_jobs[r] for r in fresh_runs) - sum(unplaced)
            for r, k in zip(fresh_runs, unplaced, strict=True):
                run_jobs[r] = k  # what does not fit stays in its place in the order
            if in_room:
                reasons.append(
                    f"free room: {in_room} not-yet-scheduled pending jobs fit on busy nodes"
                    + ("" if exact else f" (best fit: {len(fresh_runs)} runs of jobs)")
                )
        groups = []
        for piece, k in zip(run_piece, run_jobs, strict=True):
            if not k:
                continue
            if groups and groups[-1][0] == piece:
                groups[-1] = (piece, groups[-1][1] + k)
            else:
                groups.append((piece, k))
        needed, _ = pack(groups, Bins(), cap, open_new=True)
        how = (
            "first fit in Slurm's scheduling order"
            if is_exact(len(groups), 0)
            else f"best fit in Slurm's scheduling order: {len(groups)} runs of jobs,"
            " too many for exact first fit"
        )
        reasons.append(
            f"needed: {needed} new nodes for {sum(k for _, k in groups)} eligible pending jobs ({how})"
        )
    elif eligible:
        reasons.append(f"needed: 0 ({eligible} eligible pending jobs, but no node shape)")
    else:
        reasons.append("needed: 0 (no eligible pending jobs)")
    for reason, cnt in sorted(ignored.items()):
        reasons.append(f"ignored: {cnt} pending {reason}")
    if other_nodeset:
        which = f"other features than {feature!r}" if feature is not None else "features"
        reasons.append(
            f"skipped: {other_nodeset} pending jobs constrained to {which} no node of the target has"
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
    return {t.name: _demand_for(t, index) for t in targets}
