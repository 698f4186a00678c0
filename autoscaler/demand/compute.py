"""``compute_demand``: the rules of :mod:`autoscaler.demand` applied to every target of one snapshot. Pure.

Per target: its nodes and busy nodes (:mod:`~autoscaler.demand.select`), its pending jobs in Slurm's
order (:mod:`~autoscaler.demand.queue`) counted or ignored, each counted kind sized
(:mod:`~autoscaler.demand.sizing`), fresh jobs packed into busy nodes' free room first, the rest onto new
nodes (:mod:`~autoscaler.demand.packing`), and desired clamped. The answer is facts
(:class:`~autoscaler.demand.types.Demand`); :mod:`autoscaler.report` words them.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import compress, islice
from operator import eq
from typing import Any

import numpy as np

from autoscaler.demand.packing import OWNED_JOBS, Bins, Piece, first_fit_owned, is_exact, pack, pack_columns
from autoscaler.demand.queue import Draw, JobKey, Kind, Owner, Queue, ScanCache, job_label
from autoscaler.demand.select import (
    busy_nodes,
    constraint_fits,
    free_room,
    node_feature_sets,
    snapshot_shape,
    target_nodes,
)
from autoscaler.demand.sizing import NO_RULES, Request, SizeRules, size, size_columns
from autoscaler.demand.tables import (
    INELIGIBLE_CODE,
    WHEN_EMPTY_CODE,
    KeyFacts,
    KindTable,
    PieceIds,
    first_seen,
)
from autoscaler.demand.types import Demand, Misfit, NodeShape, Packing, Target, TooLarge
from autoscaler.nodes import in_service
from autoscaler.reasons import Eligibility
from exporter.model import Node, Snapshot

__all__ = ["compute_demand"]


@dataclass
class _Runs:
    """The counted jobs of one target in Slurm's order, as runs of identical pieces (parallel lists: few
    objects, so a 100k-run queue stays cheap for the garbage collector)."""

    pieces: list[Piece] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)
    """Reason ``None``: may start on busy nodes' free room."""
    owners: list[Owner | None] = field(default_factory=list)
    """(user, ``--exclusive=user``) where the run's user has such jobs pending (:attr:`Kind.owner`)."""


@dataclass
class _RunColumns:
    """:class:`_Runs` as columns, none of them an owner's (from :func:`_count_table`)."""

    pieces: np.ndarray[Any, np.dtype[np.int64]]
    """Rows ``[nodes, cpus, memory, gpus]``, one per run."""
    jobs: np.ndarray[Any, np.dtype[np.int64]]
    fresh: np.ndarray[Any, np.dtype[np.bool_]]
    ids: np.ndarray[Any, np.dtype[np.int64]]
    """Each run's piece id (equal pieces, equal ids)."""


@dataclass
class _Count:
    """What counting a target's pending jobs found."""

    runs: _Runs = field(default_factory=_Runs)
    columns: _RunColumns | None = None
    """The runs as columns instead (:func:`_count_table`), when there are any."""
    eligible: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    misfits: dict[JobKey, Misfit] = field(default_factory=dict)


def _count(
    target: Target,
    nodes: Sequence[Node],
    shape: NodeShape | None,
    queue: Queue,
    runs: Iterable[tuple[Kind, int]],
    max_memory_per_cpu: int | None,
    rules: SizeRules,
) -> _Count:
    """Walk the target's pending runs in Slurm's order: ignore, skip (constraint), throttle (``%N``),
    size and collect the counted ones as runs of pieces."""
    out = _Count()
    ignored, runs_out = out.ignored, out.runs
    pieces, run_jobs, run_fresh, run_owners = runs_out.pieces, runs_out.jobs, runs_out.fresh, runs_out.owners
    by_job = queue.by_job
    run_at: dict[tuple[Piece, bool, Owner | None], int] = {}  # (piece, fresh, owner) → its run
    most = target.max_nodes
    sizes: dict[Request, Piece | Misfit] = (
        queue.cache.sizes(shape, most, max_memory_per_cpu, rules) if queue.cache is not None else {}
    )
    allowance: dict[int, int] = {}
    budget_left: dict[tuple[str, ...], int] = {}
    constraint_ok: dict[str, bool] = {}
    feature_sets: set[frozenset[str]] | None = None  # built at the first constrained job
    empty = not nodes
    feature = target.nodeset_feature
    eligible = skipped = 0
    for kind, n_jobs in runs:
        count = n_jobs
        elig = kind.elig
        if elig is Eligibility.INELIGIBLE or (elig is Eligibility.ELIGIBLE_WHEN_EMPTY and not empty):
            ignored[kind.name] += count
            continue
        if kind.features and (feature is not None or nodes or target.features):
            ok = constraint_ok.get(kind.features)
            if ok is None:
                if feature_sets is None:
                    feature_sets = node_feature_sets(nodes) if nodes else _configured_features(target)
                ok = constraint_ok[kind.features] = constraint_fits(kind.features, feature, feature_sets)
            if not ok:
                skipped += count
                continue
        if kind.throttle is not None:
            array_id, throttle = kind.throttle
            take = _allowed(allowance, array_id, throttle, count, queue.array_running)
            if take < count:
                ignored["JobArrayTaskLimit"] += count - take
            count = take
            if not count:
                continue
        if kind.draws:
            count = _draw(kind.draws, count, budget_left, queue.budget_used, ignored)
            if not count:
                continue
        eligible += count
        if shape is None or kind.request is None:
            continue
        piece = sizes.get(kind.request)
        if piece is None:
            piece = sizes[kind.request] = size(kind.request, shape, most, max_memory_per_cpu, rules)
        if isinstance(piece, Misfit):
            out.misfits.update(dict.fromkeys(kind.keys, piece))
            eligible -= count
            for key, _, per, _ in kind.draws:  # never starts: holds nothing of its budgets
                budget_left[key] += count * per
            continue
        fresh, owner = kind.fresh, kind.owner
        if by_job:  # consecutive jobs of one size are one run
            if pieces and pieces[-1] == piece and run_fresh[-1] is fresh and run_owners[-1] == owner:
                run_jobs[-1] += count
                continue
        else:  # all jobs of one size are one run, at the first one's place
            at = (piece, fresh, owner)
            r = run_at.get(at)
            if r is not None:
                run_jobs[r] += count
                continue
            run_at[at] = len(pieces)
        pieces.append(piece)
        run_jobs.append(count)
        run_fresh.append(fresh)
        run_owners.append(owner)
    out.eligible, out.skipped = eligible, skipped
    return out


def _count_table(
    target: Target,
    nodes: Sequence[Node],
    shape: NodeShape | None,
    queue: Queue,
    table: KindTable,
    max_memory_per_cpu: int | None,
    rules: SizeRules,
) -> _Count:
    """:func:`_count` of a partition's kinds as columns (:class:`KindTable`; no budgets, no owners): the
    same walk in numpy — only the throttled kinds one by one (their allowance is handed out in order) —
    and the same answer (``tests/unit/test_kind_tables.py`` compares the two)."""
    out = _Count()
    facts = queue.facts
    assert facts is not None
    count = table.jobs.copy()
    elig = table.elig
    empty = not nodes
    ignored_at = (elig == INELIGIBLE_CODE) | ((elig == WHEN_EMPTY_CODE) & (not empty))
    live = ~ignored_at
    firsts: list[tuple[int, str, int]] = []  # (first place, reason, jobs): the Counter in walk order
    if ignored_at.any():
        at = np.flatnonzero(ignored_at)
        names, first, which = np.unique(table.name[at], return_index=True, return_inverse=True)
        jobs = np.bincount(which.ravel(), weights=count[at], minlength=len(names))
        reasons = [facts.names[i] for i in names.tolist()]
        firsts += zip(at[first].tolist(), reasons, jobs.astype(np.int64).tolist(), strict=True)
    feature = target.nodeset_feature
    if feature is not None or nodes or target.features:
        constrained = live & (table.feature != facts.feature_id(""))
        if constrained.any():
            feature_sets = node_feature_sets(nodes) if nodes else _configured_features(target)
            ids = np.unique(table.feature[constrained]).tolist()
            bad = [i for i in ids if not constraint_fits(facts.features[i], feature, feature_sets)]
            if bad:
                skip = constrained & np.isin(table.feature, bad)
                out.skipped = int(count[skip].sum())
                live &= ~skip
    throttled = np.flatnonzero(live & (table.throttle_id >= 0))
    if throttled.size:
        allowance: dict[int, int] = {}
        short_at, short = -1, 0
        for i, array_id, throttle in zip(
            throttled.tolist(),
            table.throttle_id[throttled].tolist(),
            table.throttle_limit[throttled].tolist(),
            strict=True,
        ):
            c = int(count[i])
            take = _allowed(allowance, array_id, throttle, c, queue.array_running)
            if take < c:
                if short_at < 0:
                    short_at = i
                short += c - take
            count[i] = take
            if not take:
                live[i] = False
        if short:
            firsts.append((short_at, "JobArrayTaskLimit", short))
    for _, reason, jobs_ignored in sorted(firsts, key=lambda f: f[0]):
        out.ignored[reason] += jobs_ignored
    live_at = np.flatnonzero(live)
    out.eligible = int(count[live_at].sum())
    if shape is None or not live_at.size:
        return out
    memo = _piece_ids(queue, facts, shape, target.max_nodes, max_memory_per_cpu, rules)
    requests = table.request[live_at]
    unsized = _dense_unique(requests[memo.ids[requests] == -2], len(memo.ids))
    if unsized.size:  # each request sized once per context: memo is the cache's (PieceIds)
        _size_into(memo, facts, unsized, shape, target.max_nodes, max_memory_per_cpu, rules)
    pieces = memo.ids[requests]
    misfit = pieces < 0
    if misfit.any():
        at = live_at[misfit]
        out.eligible -= int(count[at].sum())
        kinds = table.kind[at].tolist()
        keys_by_kind = queue.keys_of(kinds)
        for kind, r in zip(kinds, table.request[at].tolist(), strict=True):
            out.misfits.update(dict.fromkeys(keys_by_kind[kind], memo.misfits[r]))
        live_at, pieces = live_at[~misfit], pieces[~misfit]
    if not live_at.size:
        return out
    # all jobs of one (piece, fresh) are one run, at the first one's place
    run_key = pieces * 2 + table.fresh[live_at]
    leading, which = first_seen(run_key, 2 * len(memo))
    run_keys = run_key[leading]
    jobs = np.zeros(len(leading), dtype=np.int64)
    np.add.at(jobs, which, count[live_at])
    try:
        rows = memo.columns()
    except OverflowError:  # a piece beyond int64 (never seen): runs as lists
        runs = out.runs
        runs.pieces = [memo.piece(k >> 1) for k in run_keys.tolist()]
        runs.jobs = jobs.tolist()
        runs.fresh = [bool(k & 1) for k in run_keys.tolist()]
        runs.owners = [None] * len(leading)
        return out
    ids = run_keys >> 1
    out.columns = _RunColumns(pieces=rows[ids], jobs=jobs, fresh=(run_keys & 1).astype(np.bool_), ids=ids)
    return out


def _dense_unique(ids: np.ndarray[Any, np.dtype[np.int64]], size: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``np.unique`` of ids in ``[0, size)``, without a sort (a first poll's 100,000 requests: ~18 ms
    sorted)."""
    seen = np.zeros(size, dtype=np.bool_)
    seen[ids] = True
    return np.flatnonzero(seen)


def _size_into(
    memo: PieceIds,
    facts: KeyFacts,
    unsized: np.ndarray[Any, np.dtype[np.int64]],
    shape: NodeShape,
    max_nodes: int | None,
    max_memory_per_cpu: int | None,
    rules: SizeRules,
) -> None:
    """Size the requests of these ids into ``memo``: in columns (:func:`size_columns`) where the shape
    and the request allow, the rest — misfits, layouts, cores of several threads, ``MaxMemPerCPU`` — one by
    one (:func:`size`)."""
    one_by_one = unsized
    if shape.threads_per_core == 1 and max_memory_per_cpu is None and shape.cpus > 0:
        plain = facts.request_plain[unsized]
        if plain.any():
            columns = unsized[plain]
            rows, ok = size_columns(facts.request_numbers[columns], shape, max_nodes, rules)
            memo.ids[columns[ok]] = memo.add_rows(rows[ok])
            one_by_one = np.concatenate([unsized[~plain], columns[~ok]])
    for r in one_by_one.tolist():
        piece = size(facts.request_of(r), shape, max_nodes, max_memory_per_cpu, rules)
        if isinstance(piece, Misfit):
            memo.ids[r] = -1
            memo.misfits[r] = piece
        else:
            memo.ids[r] = memo.add(piece)


def size_rules(target: Target, cluster_cpus_per_gpu: int = 0) -> SizeRules:
    """What ``target`` adds to sizing — its ``cpus_per_gpu``, else the cluster's ``DefCpuPerGPU`` — (the
    same object for a target that adds nothing)."""
    cpus_per_gpu = target.cpus_per_gpu or cluster_cpus_per_gpu
    if target.node_ranges == "minimum" and not cpus_per_gpu:
        return NO_RULES
    return SizeRules(target.node_ranges == "largest", cpus_per_gpu)


def _piece_ids(
    queue: Queue,
    facts: KeyFacts,
    shape: NodeShape,
    max_nodes: int | None,
    max_memory_per_cpu: int | None,
    rules: SizeRules,
) -> PieceIds:
    """The sizing memo by request id (kept in the cache across polls), grown to every request known."""
    memo = (
        queue.cache.piece_ids(shape, max_nodes, max_memory_per_cpu, rules)
        if queue.cache is not None
        else PieceIds()
    )
    known = len(facts.requests)
    if len(memo.ids) < known:
        memo.ids = np.concatenate([memo.ids, np.full(known - len(memo.ids), -2, dtype=np.int64)])
    return memo


def _allowed(
    allowance: dict[int, int], array_id: int, throttle: int, count: int, running: Mapping[int, int]
) -> int:
    """How many of ``count`` tasks of a ``%N`` array may start: its allowance (``N`` less its tasks that
    hold nodes, ``running``), handed out in order (``allowance``: what each array has left)."""
    left = allowance.get(array_id)
    if left is None:
        left = max(0, throttle - running[array_id])
    take = min(count, left)
    allowance[array_id] = left - take
    return take


def _draw(
    draws: Sequence[Draw],
    count: int,
    left: dict[tuple[str, ...], int],
    used: Mapping[tuple[str, ...], int],
    ignored: Counter[str],
) -> int:
    """How many of ``count`` jobs the budgets they draw from let start (``left``: what each budget has left,
    from its limit less what running jobs hold, ``used``); the rest are ignored under the first budget
    that ran short (slurmctld's reason)."""
    take, why = count, ""
    for key, limit, per, reason in draws:
        room = left.get(key)
        if room is None:
            room = left[key] = limit - used.get(key, 0)
        fits = max(room, 0) // per
        if fits < take:
            take, why = fits, reason
    for key, _, per, _ in draws:
        left[key] -= take * per
    if take < count:
        ignored[why] += count - take
    return take


def _configured_features(target: Target) -> set[frozenset[str]]:
    """At zero: the feature set a new node of the target will have, if configured (else none known)."""
    if not target.features:
        return set()
    own = {target.nodeset_feature} if target.nodeset_feature is not None else set()
    return {frozenset(target.features | own)}


def _pack(runs: _Runs, shape: NodeShape, busy: Sequence[Node], max_cpus: int | None) -> tuple[int, Packing]:
    """New nodes the runs need: fresh runs first into the free room of busy nodes (what does not fit
    stays in its place in the order), then everything left onto new nodes, in order.

    Where some jobs share nodes only with their own user's (``--exclusive=user``): those users' runs never
    go into busy nodes' room (whose jobs hold it is not read); up to :data:`OWNED_JOBS` jobs, first fit
    job by job with the users kept apart (:func:`first_fit_owned`), beyond each such user's runs on nodes
    of their own (a node more, maybe, where Slurm puts a plain job beside other users' plain jobs)."""
    cap = (shape.cpus, shape.memory_bytes, shape.gpus)
    run_jobs = list(runs.jobs)
    owners, pieces = runs.owners, runs.pieces
    owned = owners.count(None) != len(owners)
    if owned:
        fresh_runs = [r for r, fresh in enumerate(runs.fresh) if fresh and owners[r] is None]
    else:
        fresh_runs = list(compress(range(len(pieces)), runs.fresh))
    in_room, room_exact = 0, True
    room = free_room(busy, max_cpus) if fresh_runs else None
    if room is not None and room.blocks:
        room_exact = is_exact(len(fresh_runs), room.run_count())
        groups = [(pieces[r], run_jobs[r]) for r in fresh_runs]
        _, unplaced = pack(groups, room, cap, open_new=False, exact=room_exact)
        in_room = sum(map(run_jobs.__getitem__, fresh_runs)) - sum(unplaced)
        for r, k in zip(fresh_runs, unplaced, strict=True):
            run_jobs[r] = k
    if not owned:  # every run one user's as far as nodes go: consecutive runs of one piece are one
        kept = list(filter(None, run_jobs))
        jobs = sum(kept)
        groups = _consecutive(list(compress(pieces, run_jobs)), kept)
        needed = pack(groups, Bins(), cap, open_new=True)[0] if groups else 0
        return needed, Packing(
            jobs=jobs,
            runs=len(groups),
            exact=is_exact(len(groups), 0),
            in_free_room=in_room,
            free_room_runs=len(fresh_runs) if in_room else 0,
            free_room_exact=room_exact,
        )
    left = [(piece, k, owner) for piece, k, owner in zip(pieces, run_jobs, owners, strict=True) if k]
    jobs = sum(k for _, k, _ in left)
    if jobs <= OWNED_JOBS:
        needed, n_runs, exact = first_fit_owned(left, cap), len(left), True
    else:
        needed = n_runs = 0
        exact = True
        by_user: dict[str | None, tuple[list[Piece], list[int]]] = {}
        for piece, k, owner in left:
            user_pieces, user_jobs = by_user.setdefault(owner[0] if owner is not None else None, ([], []))
            user_pieces.append(piece)
            user_jobs.append(k)
        for user_pieces, user_jobs in by_user.values():
            groups = _consecutive(user_pieces, user_jobs)
            opened, _ = pack(groups, Bins(), cap, open_new=True)
            needed += opened
            n_runs += len(groups)
            exact = exact and is_exact(len(groups), 0)
    packing = Packing(
        jobs=jobs,
        runs=n_runs,
        exact=exact,
        in_free_room=in_room,
        free_room_runs=len(fresh_runs) if in_room else 0,
        free_room_exact=room_exact,
    )
    return needed, packing


def _pack_columns(
    runs: _RunColumns, shape: NodeShape, busy: Sequence[Node], max_cpus: int | None
) -> tuple[int, Packing]:
    """:func:`_pack` of runs as columns (none an owner's): the same steps, on arrays."""
    cap = (shape.cpus, shape.memory_bytes, shape.gpus)
    jobs = runs.jobs.copy()
    fresh_runs = np.flatnonzero(runs.fresh)
    in_room, room_exact = 0, True
    room = free_room(busy, max_cpus) if fresh_runs.size else None
    if room is not None and room.blocks:
        room_exact = is_exact(len(fresh_runs), room.run_count())
        placed = jobs[fresh_runs]
        _, unplaced = pack_columns(
            runs.pieces[fresh_runs], placed, room, cap, open_new=False, exact=room_exact
        )
        in_room = int(placed.sum()) - sum(unplaced)
        jobs[fresh_runs] = unplaced
    kept = np.flatnonzero(jobs)
    ids, left = runs.ids[kept], jobs[kept]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else kept
    if len(starts) < len(ids):  # consecutive runs of one piece are one
        left = np.add.reduceat(left, starts)
    rows = runs.pieces[kept[starts]]
    needed = pack_columns(rows, left, Bins(), cap, open_new=True)[0] if len(rows) else 0
    return needed, Packing(
        jobs=int(left.sum()),
        runs=len(rows),
        exact=is_exact(len(rows), 0),
        in_free_room=in_room,
        free_room_runs=len(fresh_runs) if in_room else 0,
        free_room_exact=room_exact,
    )


def _consecutive(pieces: list[Piece], jobs: list[int]) -> list[tuple[Piece, int]]:
    """Runs ``(piece, jobs)``, consecutive runs of one piece made one."""
    if not any(map(eq, pieces, islice(pieces, 1, None))):  # mostly none: compared in C
        return list(zip(pieces, jobs, strict=True))
    groups: list[tuple[Piece, int]] = []
    for piece, k in zip(pieces, jobs, strict=True):
        if groups and groups[-1][0] == piece:
            groups[-1] = (piece, groups[-1][1] + k)
        else:
            groups.append((piece, k))
    return groups


def desired_count(busy: int, needed: int, target: Target) -> int:
    """``clamp(busy + needed, min_nodes, max_nodes)``, never below ``busy``."""
    desired = busy + needed
    if target.max_nodes is not None:
        desired = min(desired, target.max_nodes)
    return max(desired, target.min_nodes, busy)


def _demand_for(target: Target, queue: Queue) -> Demand:
    nodes = target_nodes(target, queue.nodes[target.partition])
    busy = busy_nodes(nodes, queue.held_nodes)
    shape = snapshot_shape(nodes)
    shape_source = "snapshot"
    if shape is None:
        shape, shape_source = target.shape, ("config" if target.shape is not None else "none")
    partition = queue.partitions.get(target.partition)
    max_cpus = (partition.max_cpus_per_node or None) if partition is not None else None
    max_memory_per_cpu = (partition.max_memory_per_cpu_bytes or None) if partition is not None else None
    if shape is not None and shape.threads_per_core > 1 and queue.cpus_by_thread:
        shape = replace(shape, threads_per_core=1)  # CR_CPU: a job's CPUs are threads, cores are shared
    cpus_cap = None
    if shape is not None and max_cpus is not None and max_cpus < shape.cpus:
        shape, cpus_cap = replace(shape, cpus=max_cpus), max_cpus
    table = queue.table(target.partition)
    rules = size_rules(target, queue.cpus_per_gpu)
    counted = (
        _count(target, nodes, shape, queue, queue.runs(target.partition), max_memory_per_cpu, rules)
        if table is None
        else _count_table(target, nodes, shape, queue, table, max_memory_per_cpu, rules)
    )
    needed, packing = 0, None
    if shape is not None and (counted.runs.pieces or counted.columns is not None):
        owned = queue.owned_nodes()
        room = [n for n in busy if n.name not in owned] if owned else busy  # another user's, maybe
        if counted.columns is not None:
            needed, packing = _pack_columns(counted.columns, shape, room, max_cpus)
        else:
            needed, packing = _pack(counted.runs, shape, room, max_cpus)
    too_large: tuple[TooLarge, ...] = ()
    if counted.misfits:
        too_large = tuple(
            TooLarge(job_label(job), job.task_count, misfit)
            for job, misfit in queue.jobs_of(counted.misfits, target.partition)
        )
    return Demand(
        target=target.name,
        desired=desired_count(len(busy), needed, target),
        busy=len(busy),
        needed=needed,
        nodes=len(nodes),
        eligible=counted.eligible,
        ignored=dict(counted.ignored),
        too_large=too_large,
        shape=shape,
        shape_source=shape_source,
        busy_nodes=tuple(n.name for n in busy),
        in_service=sum(map(in_service, nodes)),
        cpus_cap=cpus_cap,
        skipped=counted.skipped,
        packing=packing,
        held_back_by_license=queue.bars.held_back_by_license(target.partition),
    )


def compute_demand(
    snapshot: Snapshot, targets: Sequence[Target], cache: ScanCache | None = None
) -> dict[str, Demand]:
    """Demand of every target, keyed by ``Target.name`` (names must be unique).

    ``cache``: what the previous call read of the same job records (:class:`ScanCache`: the same answer,
    reading only the records that changed); one caller at a time. Python's cyclic garbage collector is
    paused while it runs (:func:`_collector_paused`)."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError("target names must be unique")
    with _collector_paused():
        queue = Queue(snapshot, (t.partition for t in targets), cache)
        demands = {t.name: _demand_for(t, queue) for t in targets}
        del queue  # freed while the collector is off: its objects never reach a collection
    return demands


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, back on after it if it was on. The model makes
    ~100k short-lived tuples per 100k-job snapshot, none of them in a cycle (reference counting frees
    them); each collection they trigger would walk every live object, the snapshot's among them (measured:
    ``docs/demand.md``, "Cost"). What the block built and does not return must be freed inside it: the
    first collection after it walks every object allocated while it was off and still alive. Threads:
    whoever turned it off turns it back on."""
    was_on = gc.isenabled()
    if was_on:
        gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
