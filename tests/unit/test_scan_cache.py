"""The scan cache (``autoscaler.demand.queue.ScanCache``): every answer on a run of snapshots is the one
computed without it, while records are kept, re-read, dropped and added as the incremental poller does,
reasons are read from changing nodes, limits on what runs come and go; and it stays bounded."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from autoscaler.demand import NodeShape, ScanCache, Target, compute_demand
from exporter.model import (
    MIB,
    Association,
    Job,
    License,
    Node,
    NodeRequest,
    Partition,
    QosLimits,
    Reservation,
    SlurmConfig,
    Snapshot,
)
from testkit.budget import seeds

SHAPE = NodeShape(cpus=8, memory_bytes=16000 * MIB)
TARGETS = [Target("a", "a", shape=SHAPE), Target("b", "b", shape=SHAPE, max_nodes=40)]
REASONS = ["Resources", "Priority", "None", "PartitionConfig", "Dependency", "JobHeldUser", "BeginTime"]
ENFORCED = SlurmConfig(accounting_storage_enforce=("associations", "limits"))
RUNNING_QOS = (QosLimits(name="normal"), QosLimits(name="capped", max_jobs_per_user=3, grp_tres={"cpu": 20}))
ASSOCIATIONS = (
    Association(account="root"),
    Association(account="physics", parent="root", grp_jobs=9),
    Association(account="physics", user="ann"),
    Association(account="physics", user="bob", max_jobs=4),
)


def random_job(rng: random.Random, job_id: int) -> Job:
    """A job of the mixes the model reads: plain, arrays (some throttled), multi-node, GPUs of none,
    reservations, ``--nodelist``, ``--exclude``, QOS, users, a few ``--exclusive=user``."""
    kw: dict[str, Any] = {
        "job_id": job_id,
        "state": rng.choice(["PENDING"] * 5 + ["RUNNING", "COMPLETED"]),
        "reason": rng.choice(REASONS),
        "partitions": rng.choice([("a",), ("b",), ("a", "b")]),
        "priority": rng.choice([0, 1, 5, 5, 100, 4000]),
        "cpus": rng.choice([1, 2, 4, 8]),
        "min_nodes": rng.choice([1, 1, 1, 2]),
        "memory_per_node_bytes": rng.choice([None, 1000 * MIB, 8000 * MIB]),
        "user": rng.choice(["ann", "bob"]),
        "account": "physics",
        "qos": rng.choice(["normal", "capped"]),
        "tres_requested": {"cpu": 1, "node": 1},
    }
    x = rng.random()
    if x < 0.1:
        kw |= {"array_job_id": job_id, "array_task_string": "1-9", "array_pending_tasks": 9}
        if rng.random() < 0.5:
            kw["array_max_tasks"] = 2
    elif x < 0.15:
        kw["reservation"] = "maint"
    elif x < 0.2:
        kw["required_nodes"] = rng.choice(["a1", "a[1-3]"])
    elif x < 0.25:
        kw["excluded_nodes"] = "a2"
    elif x < 0.27:
        kw["node_request"] = NodeRequest(exclusive_to="user")
    elif x < 0.35:
        kw["eligible_time"] = rng.choice([900.0, 1100.0, 1300.0, 5000.0])  # the clock passes some
    elif x < 0.4:
        kw["dependency"] = rng.choice(["afterok:3(unfulfilled)", "afterany:4(fulfilled)"])
    elif x < 0.45:
        kw["licenses"] = "matlab:2"
    elif x < 0.5:
        kw["time_limit_seconds"] = rng.choice([600, 7200])
        kw["min_nodes"] = rng.choice([1, 3])
    if kw["state"] == "RUNNING":
        kw |= {"reason": "None", "nodes": rng.choice(["a1", "a2", "b[1-2]"])}
    return Job(**kw)


def nodes(rng: random.Random) -> tuple[Node, ...]:
    return tuple(
        Node(
            name=f"{p}{i}",
            partitions=(p,),
            state=rng.choice(["IDLE", "MIXED", "ALLOCATED"]),
            cpus=8,
            alloc_cpus=rng.choice([0, 2, 8]),
            memory_bytes=16000 * MIB,
        )
        for p in "ab"
        for i in range(1, 5)
    )


def partitions(rng: random.Random) -> tuple[Partition, ...]:
    """Partitions that bar some jobs now and then (state, node and time limits)."""
    b = rng.choice(
        [
            Partition(name="b"),
            Partition(name="b", state="DOWN"),
            Partition(name="b", max_nodes_per_job=2, max_time_seconds=3600),
        ]
    )
    return (Partition(name="a"), b)


def snapshot(jobs: list[Job], rng: random.Random, limits: bool, now: float = 1000.0) -> Snapshot:
    return Snapshot(
        taken_at=now,
        api_version="v0.0.45",
        jobs=tuple(jobs),
        nodes=nodes(rng),
        partitions=partitions(rng),
        licenses=(License(name="matlab", total=4, free=rng.choice([0, 4])),),
        qos=RUNNING_QOS if limits else (),
        associations=ASSOCIATIONS if limits else (),
        config=ENFORCED if limits else None,
    )


def next_jobs(jobs: list[Job], rng: random.Random, top: int) -> tuple[list[Job], int]:
    """A poll later: most records the same objects, some re-read (new objects, changed), some gone, some
    new at the end (:func:`exporter.jobsync.merge`)."""
    out: list[Job] = []
    for job in jobs:
        x = rng.random()
        if x < 0.08:
            continue
        if x < 0.2:
            job = msgspec.structs.replace(
                job,
                reason=rng.choice(REASONS),
                priority=job.priority + 1,
                state=rng.choice(["PENDING", "RUNNING"]),
            )
        out.append(job)
    for _ in range(rng.randint(0, 12)):
        top += 1
        out.append(random_job(rng, top))
    return out, top


@pytest.mark.parametrize("seed", seeds(12))
def test_every_answer_is_the_one_without_the_cache(seed: int) -> None:
    rng = random.Random(seed)
    top = rng.randint(20, 80)
    jobs = [random_job(rng, i) for i in range(1, top + 1)]
    cache = ScanCache()
    limits = False
    now = 1000.0
    for _ in range(10):
        if rng.random() < 0.2:
            limits = not limits  # keys with and without ``who``: the cache starts afresh
        now += rng.choice([0.0, 100.0, 150.0, -400.0])  # slurmctld's clock: on, still, once back
        snap = snapshot(jobs, rng, limits, now)
        assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)
        assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)  # all cached now
        jobs, top = next_jobs(jobs, rng, top)


def test_beyond_2000_records_too() -> None:
    """Kinds ordered kind by kind (beyond ``ORDER_JOBS``) and the same record objects over polls."""
    rng = random.Random(99)
    jobs = [random_job(rng, i) for i in range(1, 2600)]
    cache = ScanCache()
    top = len(jobs)
    for _ in range(4):
        snap = snapshot(jobs, rng, limits=False)
        assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)
        jobs, top = next_jobs(jobs, rng, top)


def test_records_are_read_once_and_volatile_reasons_each_time() -> None:
    rng = random.Random(3)
    jobs = [random_job(rng, i) for i in range(1, 200)]
    snap = snapshot(jobs, rng, limits=False)
    cache = ScanCache()
    compute_demand(snap, TARGETS, cache)
    assert len(cache.jobs) == len(jobs)
    volatile = cache.volatile.tolist()
    for job, flag in zip(cache.jobs, volatile, strict=True):
        settled_by_snapshot = (
            job.reason in ("None", "PartitionConfig") or job.reservation or job.required_nodes
        )
        assert flag == (job.state == "PENDING" and bool(settled_by_snapshot))
    compute_demand(snap, TARGETS, cache)
    assert len(cache.jobs) == len(jobs)  # nothing read twice


def test_a_volatile_key_is_kept_while_what_it_was_read_from_holds() -> None:
    """A fresh job's reason read from its partition: kept while the partitions are the same and the clock
    goes on, read again when the partition changes; ``--begin`` in the future is read again each time."""
    waiting = Job(job_id=1, state="PENDING", reason="None", partitions=("b",), cpus=1, priority=1)
    later = msgspec.structs.replace(waiting, job_id=2, eligible_time=1500.0)
    target = [Target("b", "b", shape=SHAPE)]
    cache = ScanCache()

    def counted(part: Partition, now: float) -> tuple[int, dict[str, int]]:
        snap = Snapshot(
            taken_at=now, api_version="v0.0.45", jobs=(waiting, later), partitions=(part,), nodes=()
        )
        got = compute_demand(snap, target, cache)["b"]
        assert got == compute_demand(snap, target)["b"]
        return got.eligible, dict(got.ignored)

    up, down = Partition(name="b"), Partition(name="b", state="DOWN")
    assert counted(up, 1000.0) == (1, {"BeginTime": 1})
    kept = cache.kid[cache.row_of(waiting)]
    assert kept >= 0 and cache.kid[cache.row_of(later)] == -2  # BeginTime: the clock may end it
    assert counted(up, 1200.0) == (1, {"BeginTime": 1})
    assert counted(up, 1600.0) == (2, {})  # the clock passed --begin
    assert counted(down, 1700.0) == (0, {"PartitionDown": 2})  # the partition changed: read again
    assert counted(up, 1800.0) == (2, {})
    assert counted(up, 1400.0) == (1, {"BeginTime": 1})  # the clock went back: read again


def test_reservations_and_node_lists_are_read_again_each_time() -> None:
    """A fresh job in a FLEX reservation counts once the reservation has started (the clock, the
    partitions the same); one naming fewer nodes than it needs counts while its named node has room."""
    in_resv = Job(
        job_id=1, state="PENDING", reason="None", partitions=("a",), cpus=1, priority=1, reservation="r"
    )
    named = Job(
        job_id=2, state="PENDING", reason="None", partitions=("a",), cpus=4, min_nodes=2, priority=1,
        required_nodes="a1",
    )  # fmt: skip
    resv = Reservation(name="r", start_time=1500.0, flags=("FLEX",))
    full = Node(
        name="a1", partitions=("a",), state="ALLOCATED", cpus=8, alloc_cpus=8, memory_bytes=16000 * MIB
    )
    free = msgspec.structs.replace(full, state="MIXED", alloc_cpus=2)
    target = [Target("a", "a", shape=SHAPE)]
    cache = ScanCache()
    seen = []
    for now, a1 in ((1000.0, full), (1600.0, free), (1700.0, full)):
        snap = Snapshot(
            taken_at=now, api_version="v0.0.45", jobs=(in_resv, named), nodes=(a1,), reservations=(resv,)
        )
        got = compute_demand(snap, target, cache)["a"]
        assert got == compute_demand(snap, target)["a"]
        seen.append(dict(got.ignored))
    assert seen == [{"Reservation": 1, "RequiredNodes": 1}, {}, {"RequiredNodes": 1}]


def test_a_fresh_job_waiting_for_licenses_is_read_again_each_time() -> None:
    job = Job(
        job_id=1, state="PENDING", reason="None", partitions=("a",), cpus=1, priority=1, licenses="lic:2"
    )
    target = [Target("a", "a", shape=SHAPE)]
    cache = ScanCache()
    seen = []
    for free in (4, 0, 4):
        snap = Snapshot(
            taken_at=0.0,
            api_version="v0.0.45",
            jobs=(job,),
            licenses=(License(name="lic", total=4, free=free),),
        )
        got = compute_demand(snap, target, cache)["a"]
        assert got == compute_demand(snap, target)["a"]
        seen.append(got.eligible)
    assert seen == [1, 0, 1]


def test_a_reason_read_from_the_nodes_follows_them() -> None:
    """A fresh job whose ``--exclude`` names a busy node counts as Resources (kept out of busy rooms);
    cached, it must follow that node: while a1 is busy the job needs a new node, once a1 is idle it fits
    the room a2 has."""
    job = Job(
        job_id=1, state="PENDING", reason="None", partitions=("a",), cpus=2, priority=1, excluded_nodes="a1"
    )
    a1 = Node(name="a1", partitions=("a",), state="MIXED", cpus=8, alloc_cpus=4, memory_bytes=16000 * MIB)
    a2 = msgspec.structs.replace(a1, name="a2")
    a1_idle = msgspec.structs.replace(a1, state="IDLE", alloc_cpus=0)
    target = [Target("a", "a", shape=SHAPE)]
    cache = ScanCache()
    needed = []
    for first in (a1, a1_idle, a1):
        snap = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=(job,), nodes=(first, a2))
        got = compute_demand(snap, target, cache)
        assert got == compute_demand(snap, target)
        needed.append(got["a"].needed)
    assert needed == [1, 0, 1]


def test_stays_bounded_when_every_record_changes() -> None:
    rng = random.Random(5)
    cache = ScanCache()
    for poll in range(6):
        jobs = [random_job(rng, poll * 1000 + i) for i in range(1, 300)]
        snap = snapshot(jobs, rng, limits=False)
        assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)
        assert len(cache.jobs) <= len(jobs) + len(jobs) // 4 + 1024
        assert len(cache.ids) == len(cache.jobs) == len(cache.kid) == len(cache.volatile)


def test_rows_of_records_gone_by_are_let_go() -> None:
    """With 30% of the records re-read at each poll, the cache is cut back to the snapshot's own records
    (the same answers after it; records no snapshot holds are not kept alive by it)."""
    rng = random.Random(8)
    jobs = [random_job(rng, i) for i in range(1, 5001)]
    cache = ScanCache()
    compactions = 0
    for _ in range(6):
        snap = snapshot(jobs, rng, limits=False)
        before = len(cache.jobs)
        assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)
        assert len(cache.jobs) <= len(jobs) + len(jobs) // 4 + 1024
        assert all(cache.row_of(j) >= 0 for j in jobs)
        if len(cache.jobs) < before:
            compactions += 1
            assert [id(j) for j in cache.jobs] == [id(j) for j in jobs]
        jobs = [
            j if rng.random() < 0.7 else msgspec.structs.replace(j, priority=j.priority + 1) for j in jobs
        ]
    assert compactions
    snap = snapshot(jobs, rng, limits=False)
    assert compute_demand(snap, TARGETS, cache) == compute_demand(snap, TARGETS)
