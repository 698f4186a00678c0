"""Kinds as columns (``tables.KindTable``, ``compute._count_table``) give the answers :class:`Kind` objects
give (``queue.TABLES`` off: the reference) — on mixes of every kind of key the model reads, with and
without the scan cache, the ignored reasons in the same order."""

from __future__ import annotations

import random
import threading
from typing import Any

import msgspec
import numpy as np
import pytest

from autoscaler.demand import Demand, NodeShape, ScanCache, Target, compute_demand, queue, tables
from exporter.model import MIB, Job, Node, Partition, Snapshot
from testkit.budget import seeds
from tests.unit.test_scan_cache import next_jobs, random_job, snapshot

SHAPE = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=2)
REASONS = [
    "Resources",
    "Priority",
    "None",
    "PartitionConfig",
    "JobArrayTaskLimit",
    "JobHeldUser",
    "Dependency",
]


def varied_job(rng: random.Random, job_id: int) -> Job:
    """:func:`random_job` and more of what kinds merge and order by: constraints, GPUs, jobs too large,
    equal priorities (kinds ordered by their leads' submit time and id), partitions tried by tier."""
    job = random_job(rng, job_id)
    kw: dict[str, Any] = {
        "reason": rng.choice(REASONS),
        "priority": rng.choice([0, 7, 7, 7, 50, 50, 900]),
        "submit_time": rng.choice([None, 100.0, 100.0, 250.0, 250.5]),  # 250.5: lexsort, not one int64
        "features": rng.choice(["", "", "", "fast", "slow", "fast|slow"]),
        "gpus_per_node": rng.choice([None, None, 1, 2, 3]),
        "cpus": rng.choice([1, 2, 4, 8, 16]),  # 16: more than a node has
        "partitions": rng.choice([("a",), ("b",), ("a", "b"), ("b", "a"), ("c",)]),
    }
    if rng.random() < 0.15:  # ranked by an earlier id than its own (an array's): before kinds made earlier
        kw["array_job_id"] = rng.randint(1, job_id)
    return msgspec.structs.replace(job, **kw)


def targets(rng: random.Random) -> list[Target]:
    return [
        Target("a", "a", shape=SHAPE, nodeset_feature=rng.choice([None, "fast"])),
        Target("b", "b", shape=SHAPE, max_nodes=rng.choice([None, 3, 40])),
        Target("c", "c", shape=rng.choice([None, SHAPE]), features=frozenset({"slow"})),
    ]


def with_tiers(snap: Snapshot, rng: random.Random) -> Snapshot:
    parts = (
        Partition(name="a", priority_tier=rng.choice([1, 2])),
        Partition(name="b", priority_tier=rng.choice([1, 2])),
        Partition(name="c"),
    )
    nodes = snap.nodes + tuple(
        Node(
            name=f"c{i}",
            partitions=("c",),
            state="IDLE",
            cpus=8,
            memory_bytes=16000 * MIB,
            features=("slow",),
        )
        for i in range(rng.choice([0, 2]))
    )
    return msgspec.structs.replace(snap, partitions=parts, nodes=nodes)


def answers(snap: Snapshot, wanted: list[Target], cache: ScanCache | None, tables: bool) -> dict[str, Demand]:
    queue.TABLES = tables
    try:
        return compute_demand(snap, wanted, cache)
    finally:
        queue.TABLES = True


def same(got: dict[str, Demand], want: dict[str, Demand]) -> None:
    assert got == want
    for name in want:  # the reasons in the order the walk met them (a dict compares regardless)
        assert list(got[name].ignored) == list(want[name].ignored)


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue, "ORDER_JOBS", 0)  # kind by kind from the first pending record


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("seed", seeds(40))
def test_the_same_answers_as_kind_objects(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [varied_job(rng, i) for i in range(1, rng.randint(2, 400))]
    snap = with_tiers(snapshot(jobs, rng, limits=False), rng)
    wanted = targets(rng)
    got = answers(snap, wanted, None, tables=True)
    same(got, answers(snap, wanted, None, tables=False))


def kinds_in_order(q: queue.Queue, partition: str) -> list[tuple[Any, ...]]:
    """What each kind of the partition is, in the queue's order: from its table, or its Kind objects."""
    table = q.table(partition)
    if table is None:
        return [
            (n, k.name, k.elig.name, k.request, k.fresh, k.features, k.throttle) for k, n in q.runs(partition)
        ]
    facts = q.facts
    assert facts is not None
    elig = {
        tables.INELIGIBLE_CODE: "INELIGIBLE",
        tables.ELIGIBLE_CODE: "ELIGIBLE",
        tables.WHEN_EMPTY_CODE: "ELIGIBLE_WHEN_EMPTY",
    }
    return [
        (
            int(table.jobs[i]),
            facts.names[table.name[i]],
            elig[int(table.elig[i])],
            facts.requests[table.request[i]] if table.elig[i] != tables.INELIGIBLE_CODE else None,
            bool(table.fresh[i]) if table.elig[i] != tables.INELIGIBLE_CODE else False,
            facts.features[table.feature[i]],
            (int(table.throttle_id[i]), int(table.throttle_limit[i])) if table.throttle_id[i] >= 0 else None,
        )
        for i in range(len(table.jobs))
    ]


def same_kinds(snap: Snapshot, partitions: str, cache: ScanCache | None = None) -> None:
    """The queue's kinds of each partition as columns (where no key carries ``who``) are the ones made as
    objects, in the same order."""
    with_tables = queue.Queue(snap, list(partitions), cache)
    assert (with_tables.tables is None) == any(j.node_request for j in snap.jobs if j.state == "PENDING")
    queue.TABLES = False
    try:
        with_kinds = queue.Queue(snap, list(partitions))
    finally:
        queue.TABLES = True
    for p in partitions:
        assert kinds_in_order(with_tables, p) == kinds_in_order(with_kinds, p), p


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("seed", seeds(40))
def test_the_same_kinds_in_the_same_order(seed: int) -> None:
    rng = random.Random(1000 + seed)
    jobs = [varied_job(rng, i) for i in range(1, rng.randint(2, 300))]
    snap = with_tiers(snapshot(jobs, rng, limits=False), rng)
    same_kinds(snap, "abc")


def merging_job(rng: random.Random, job_id: int) -> Job:
    """Jobs whose keys merge into few kinds of few priorities (two reasons of one class, two partition
    lists of one first partition, arrays keyed apart): kinds ordered by the first rank among many leads."""
    return Job(
        job_id=job_id,
        state="PENDING",
        reason=rng.choice(["Resources", "Priority"]),
        partitions=rng.choice([("a",), ("a", "c"), ("c", "a")]),
        priority=rng.choice([7, 7, 9]),
        submit_time=rng.choice([100.0, 200.0, 300.0]),
        array_job_id=rng.choice([None, None, rng.randint(1, 400)]),
        cpus=rng.choice([1, 2]),
    )


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("seed", seeds(20))
def test_merged_kinds_are_ranked_by_their_first_lead(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [merging_job(rng, i) for i in range(1, rng.randint(3, 60))]
    snap = Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        jobs=tuple(jobs),
        partitions=(Partition(name="a", priority_tier=2), Partition(name="c")),
    )
    same_kinds(snap, "ac")


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("seed", seeds(8))
def test_the_same_answers_over_polls_with_the_cache(seed: int) -> None:
    rng = random.Random(100 + seed)
    top = rng.randint(50, 300)
    jobs = [varied_job(rng, i) for i in range(1, top + 1)]
    cache = ScanCache()
    wanted = targets(rng)
    for _ in range(6):
        snap = with_tiers(snapshot(jobs, rng, limits=rng.random() < 0.2), rng)
        same(answers(snap, wanted, cache, tables=True), answers(snap, wanted, None, tables=False))
        jobs, top = next_jobs(jobs, rng, top)
        jobs += [varied_job(rng, top + i) for i in range(1, 4)]
        top += 3


@pytest.mark.usefixtures("large")
def test_tables_are_made_only_where_no_key_carries_who() -> None:
    rng = random.Random(5)
    jobs = [varied_job(rng, i) for i in range(1, 60)]
    plain = queue.Queue(snapshot(jobs, rng, limits=False), ["a", "b"])
    assert plain.tables is not None and plain.table("a") is not None
    limited = queue.Queue(snapshot(jobs, rng, limits=True), ["a", "b"])  # budgets: kind by kind
    assert limited.tables is None and limited.table("a") is None and list(limited.runs("a"))


def test_the_default_order_jobs_takes_tables_beyond_2000_records() -> None:
    rng = random.Random(8)
    jobs = [  # no --exclusive=user: keys would carry who
        msgspec.structs.replace(varied_job(rng, i), state="PENDING", node_request=None)
        for i in range(1, 2200)
    ]
    snap = with_tiers(snapshot(jobs, rng, limits=False), rng)
    assert queue.Queue(snap, ["a"]).tables is not None
    wanted = targets(rng)
    same(answers(snap, wanted, ScanCache(), tables=True), answers(snap, wanted, None, tables=False))


def test_all_different_shapes_packed_by_the_bounded_path() -> None:
    """3,000 jobs of their own sizes (beyond the exact packing's budget: the bounded best fit, from
    columns and from tuples), half of them fresh into busy nodes' free room, some spanning nodes."""
    rng = random.Random(12)
    jobs = [
        Job(
            job_id=i,
            state="PENDING",
            reason="None" if rng.random() < 0.5 else "Resources",
            partitions=("a",),
            priority=rng.randint(1, 400),
            cpus=rng.randint(1, 8),
            min_nodes=rng.choice([1, 1, 2]),
            memory_per_node_bytes=(100 + i) * MIB,
        )
        for i in range(1, 3001)
    ]
    nodes = tuple(
        Node(
            name=f"a{i}",
            partitions=("a",),
            state="MIXED",
            cpus=8,
            alloc_cpus=rng.randint(1, 7),
            memory_bytes=16000 * MIB,
        )
        for i in range(300)
    )
    snap = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=tuple(jobs), nodes=nodes)
    wanted = [Target("a", "a", shape=SHAPE)]
    got = answers(snap, wanted, ScanCache(), tables=True)
    packing = got["a"].packing
    assert packing is not None and not packing.exact and not packing.free_room_exact and packing.in_free_room
    same(got, answers(snap, wanted, None, tables=False))


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("seed", seeds(6))
def test_the_same_kinds_over_polls_with_the_cache(seed: int) -> None:
    """Leads ranked from the cache's rows (records kept, re-read, dropped, added, compacted)."""
    rng = random.Random(200 + seed)
    top = rng.randint(100, 300)
    jobs = [merging_job(rng, i) if i % 2 else varied_job(rng, i) for i in range(1, top + 1)]
    jobs = [msgspec.structs.replace(j, node_request=None) for j in jobs]  # no keys with who
    cache = ScanCache()
    parts = (Partition(name="a", priority_tier=2), Partition(name="c"))
    for _ in range(8):
        snap = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=tuple(jobs), partitions=parts)
        same_kinds(snap, "abc", cache)
        jobs, top = next_jobs(jobs, rng, top)
        jobs = [msgspec.structs.replace(j, node_request=None) for j in jobs]  # no keys with who
        jobs += [merging_job(rng, top + i) for i in range(1, 30)]
        top += 29


def lexsorted(*columns: Any) -> list[int]:
    """The reference: ``np.lexsort`` of the columns, the first the most significant."""
    return np.lexsort(columns[::-1]).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", seeds(30))
def test_one_composite_sort_orders_as_lexsort(seed: int) -> None:
    # tables._order: one int64 argsort where the columns' spans fit in 63 bits, else lexsort — the same
    # order either way: negative values, integral floats (submit times) folded in; fractional or
    # infinite floats and spans too wide for one int64 left to lexsort.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    home = rng.integers(0, 4, n)
    priority = -rng.integers(-1, rng.choice([3, 2**20, 2**32]), n)
    submit = rng.choice([0.0, 1.7e9, 1.7e9 + 60.0, 1.7e9 + 0.5, np.inf], n, p=[0.3, 0.3, 0.3, 0.05, 0.05])
    if seed % 3 == 0:
        submit = np.floor(np.where(np.isfinite(submit), submit, 0.0))
    ident = rng.integers(0, rng.choice([10, 2**40]), n)
    last = rng.permutation(n).astype(np.int64)  # unique
    for columns in [(home, priority, last), (home, submit, ident, last), (priority, ident, last), (last,)]:
        assert tables._order(*columns).tolist() == lexsorted(*columns)


def test_composite_sort_takes_one_argsort_only_where_the_bits_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real, me = np.lexsort, threading.get_ident()

    def spy(keys: Any) -> Any:  # numpy's own lexsort for the whole process: count this thread's calls
        if threading.get_ident() == me:
            calls.append(len(keys))
        return real(keys)

    monkeypatch.setattr(tables.np, "lexsort", spy)
    small, unique = np.array([3, 1, 2, 1]), np.array([0, 1, 2, 3])
    assert tables._order(small, unique).tolist() == [1, 3, 2, 0]
    assert calls == []
    wide = np.array([0, 2**61, 5, 2**61])
    assert tables._order(wide, unique).tolist() == [0, 2, 1, 3]  # 62 + 2 bits: lexsort
    fractional = np.array([0.5, 0.25, 0.5, 0.0])
    assert tables._order(fractional, unique).tolist() == [3, 1, 0, 2]
    huge = np.array([2.0**60, 2.0**60 + 2**8, 0.0, 2.0**60])  # whole, but 61 bits: not exact as floats
    assert tables._order(huge, np.array([0, 1, 2, 3])).tolist() == [2, 0, 3, 1]
    assert calls == [2, 2, 2]
    assert tables._order(np.empty(0, dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("seed", seeds(20))
def test_first_seen_groups_in_the_order_of_their_first_element(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 50)
    ids = [rng.randrange(size) for _ in range(rng.randint(0, 300))]
    firsts: dict[int, int] = {}
    for at, i in enumerate(ids):
        firsts.setdefault(i, at)
    leading, group = tables.first_seen(np.array(ids, dtype=np.int64), size)
    assert leading.tolist() == list(firsts.values())
    assert group.tolist() == [list(firsts).index(i) for i in ids]
