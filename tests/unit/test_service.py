"""DemandService: answers per snapshot, held on missing data, change notifications."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from autoscaler import service as service_module
from autoscaler.demand import NodeShape, Target, compute_demand
from autoscaler.metrics import demand_families
from autoscaler.service import DemandService, NoSnapshotYet, StaticSource, TooManyTargets, UnknownPartition
from autoscaler.targets import target_from_metadata
from exporter.model import MIB, Job, Node, Partition, Snapshot
from testkit import builders
from testkit.paths import RECORDED_2605
from testkit.tools import SnapshotFeed, recorded_snapshot

SHAPE = NodeShape(cpus=8, memory_bytes=16000 * MIB)
T = Target("p", "p", shape=SHAPE)


def pend(job_id: int, cpus: int = 1, reason: str = "Resources") -> Job:
    return Job(
        job_id=job_id,
        state="PENDING",
        reason=reason,
        partitions=("p",),
        cpus=cpus,
        memory_per_node_bytes=100 * MIB,
    )


def snap(
    at: float, jobs: list[Job], nodes: list[Node] | None = None, endpoints: Any = ("jobs", "nodes")
) -> Snapshot:
    return builders.snap(jobs, nodes or (), at=at, fetched=endpoints)


def test_no_answer_before_a_snapshot_with_jobs_and_nodes() -> None:
    src = SnapshotFeed()
    svc = DemandService(src)
    with pytest.raises(NoSnapshotYet):
        svc.answer(T)
    src.put(snap(1.0, [pend(1)], endpoints=("nodes", "partitions")))  # /jobs failed so far
    with pytest.raises(NoSnapshotYet):
        svc.answer(T)
    assert svc.answers() == []


def test_answer_is_the_model_on_the_current_snapshot() -> None:
    src = SnapshotFeed()
    clock = [100.0]
    svc = DemandService(src, stale_after=30, clock=lambda: clock[0])
    s = snap(100.0, [pend(i, cpus=3) for i in range(3)])
    src.put(s)
    ans = svc.answer(T)
    assert ans.demand == compute_demand(s, [T])["p"]
    assert (ans.desired, ans.active, ans.stale) == (2, True, False)  # three 3-CPU jobs on 8-CPU nodes


def test_missing_data_holds_the_last_answer_and_marks_it_stale() -> None:
    src = SnapshotFeed()
    clock = [100.0]
    svc = DemandService(src, stale_after=30, clock=lambda: clock[0])
    src.put(snap(100.0, [pend(1, cpus=8), pend(2, cpus=8)]))
    assert svc.answer(T).desired == 2
    # a later snapshot without /nodes data (it failed from the start of a restart, say) is not used
    src.put(snap(150.0, [], endpoints=("jobs",)))
    clock[0] = 150.0
    held = svc.answer(T)
    assert (held.desired, held.stale, held.taken_at) == (2, True, 100.0)


async def test_run_recomputes_known_targets_and_changes_yields_on_change_only() -> None:
    src = SnapshotFeed()
    svc = DemandService(src, targets=[T])
    src.put(snap(1.0, [pend(1)]))
    runner = asyncio.create_task(svc.run(), name="demand")
    seen: list[int] = []
    got = asyncio.Event()

    async def follow() -> None:
        async for ans in svc.changes(T):
            seen.append(ans.desired)
            got.set()

    follower = asyncio.create_task(follow(), name="follow")
    try:

        async def next_value() -> None:
            await asyncio.wait_for(got.wait(), 5)
            got.clear()

        await next_value()
        assert seen == [1]
        src.put(snap(2.0, [pend(1), pend(2)]))  # 2 x 1 CPU still fit one node: no message
        src.put(snap(3.0, [pend(1, cpus=8), pend(2, cpus=8), pend(3, cpus=8)]))
        await next_value()
        assert seen == [1, 3]
        assert svc.computations >= 2
        src.put(snap(4.0, [pend(1, reason="JobHeldUser")]))
        await next_value()
        assert seen == [1, 3, 0]
        assert not svc.answer(T).active
    finally:
        for t in (follower, runner):
            t.cancel()
        await asyncio.gather(follower, runner, return_exceptions=True)


async def test_refresh_covers_targets_with_the_same_name() -> None:
    src = SnapshotFeed()
    a, b = Target("x", "p", shape=SHAPE), Target("x", "p", shape=SHAPE, max_nodes=1)
    svc = DemandService(src, targets=[a, b])
    s = snap(1.0, [pend(1, cpus=8), pend(2, cpus=8)])
    src.put(s)
    await svc.refresh(s)
    assert (svc.answer(a).desired, svc.answer(b).desired) == (2, 1)


async def test_targets_no_scaler_asks_for_are_forgotten_configured_ones_kept() -> None:
    src = SnapshotFeed()
    clock = [0.0]
    fixed = Target("fixed", "p", shape=SHAPE)
    svc = DemandService(src, targets=[fixed], forget_after=600, clock=lambda: clock[0])
    s = snap(0.0, [pend(1)])
    src.put(s)
    svc.answer(T)  # asked by a ScaledObject
    await svc.refresh(s)
    assert svc.targets == [fixed, T]
    clock[0] = 500.0
    svc.answer(T)  # still asked
    clock[0] = 1000.0
    await svc.refresh(snap(1000.0, [pend(1)]))
    assert svc.targets == [fixed, T]
    clock[0] = 1200.0  # 700 s since the last question: the ScaledObject is gone
    await svc.refresh(snap(1200.0, [pend(1)]))
    assert svc.targets == [fixed]


def _series(service: DemandService, s: Snapshot) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    out: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for fam in demand_families(service.demands_on(s), service.label):
        for sample in fam.samples:
            out.setdefault(sample.name, []).append((tuple(sorted(sample.labels.items())), sample.value))
    return out


@pytest.mark.skipif(not RECORDED_2605.is_dir(), reason="no 26.05 recording")
def test_targets_of_one_partition_never_share_a_series() -> None:
    # Three ScaledObjects on partition cpu with other settings (the probe that found three
    # {target="cpu",partition="cpu"} lines, one of which a prometheus trigger could read as another's 0)
    s = recorded_snapshot(RECORDED_2605, "v0.0.45")
    metas = ({"partition": "cpu"}, {"partition": "cpu", "max": "4"}, {"partition": "cpu", "nodeNames": "c1"})
    service = DemandService(StaticSource(s))
    targets = [target_from_metadata(m) for m in metas]
    for t in targets:
        service.answer(t)
    series = _series(service, s)
    for name, rows in series.items():
        labels = [labels for labels, _ in rows]
        assert len(labels) == len(set(labels)), f"{name}: duplicate series {labels}"
    desired = {dict(labels)["target"]: value for labels, value in series["slurm_autoscaler_desired_nodes"]}
    for t in targets:
        assert desired[service.label(t)] == compute_demand(s, [t])[t.name].desired
    # the partition's default target keeps its name; the others carry a digest of their definition
    assert service.label(targets[0]) == "cpu"
    assert [service.label(t)[:4] for t in targets[1:]] == ["cpu-", "cpu-"]
    assert len({service.label(t) for t in targets}) == 3
    # stable: the same definitions are labelled alike by another process (no order, no process state)
    other = DemandService(StaticSource(s))
    assert [other.label(t) for t in reversed(targets)] == [service.label(t) for t in reversed(targets)]
    # a configured target is labelled by its name (the targets file keeps names unique)
    configured = DemandService(StaticSource(s), targets=[targets[1]])
    assert configured.label(targets[1]) == "cpu" and configured.label(targets[0]).startswith("cpu-")


def test_asked_targets_are_bounded_and_unknown_partitions_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # every distinct metadata set a scaler sends becomes a target, exported and kept for forget_after:
    # bounded (3,000 distinct max values once gave 3,006 series), and freed as they are forgotten
    monkeypatch.setattr(service_module, "MAX_ASKED", 3)
    now = [1000.0]
    s = Snapshot(
        taken_at=now[0],
        api_version="v0.0.45",
        jobs=(pend(1),),
        nodes=(Node(name="n1", partitions=("p",), state="IDLE", cpus=8, memory_bytes=16000 * MIB),),
        partitions=(Partition(name="p"),),
        fetched_at=dict.fromkeys(("jobs", "nodes", "partitions"), now[0]),
    )
    service = DemandService(StaticSource(s), forget_after=3600.0, clock=lambda: now[0])
    with pytest.raises(UnknownPartition, match="'nosuch'"):
        service.answer(Target("nosuch", "nosuch"))
    asked = [Target("p", "p", max_nodes=m) for m in (4, 5, 6)]
    for t in asked:
        service.answer(t)
    with pytest.raises(TooManyTargets):
        service.answer(Target("p", "p", max_nodes=7))
    assert service.answer(asked[0]).desired == 1  # known targets keep being answered
    assert len(service.targets) == 3
    now[0] += 3601.0  # none asked for an hour: forgotten, room for new ones
    service.answer(Target("p", "p", max_nodes=7))
    assert service.targets == [Target("p", "p", max_nodes=7)]


async def test_staleness_is_visible_in_a_metric_a_status_line_and_one_log_line_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # --demand-stale-after had no visible effect: the held answer looked fresh
    now = [5000.0]
    source = SnapshotFeed()
    source.put(snap(now[0], [pend(1)], [Node(name="n1", partitions=("p",), state="IDLE", cpus=8)]))
    service = DemandService(source, stale_after=60.0, clock=lambda: now[0])

    def stale() -> float:
        fam = service.health_families(now[0])[0]
        (sample,) = fam.samples
        return sample.value

    assert DemandService(SnapshotFeed()).health_families(now[0])[0].samples == []  # nothing to judge yet
    now[0] += 10.0
    assert stale() == 0.0 and service.status_line(now[0]).endswith("10.0 s old (fresh)")
    with caplog.at_level("INFO", logger="autoscaler.service"):
        now[0] += 51.0  # 61 s: older than stale_after
        assert stale() == 1.0 and service.answer(T).stale
        assert stale() == 1.0  # asked again: still one log line
        assert "HELD" in service.status_line(now[0])
        fresh_snap = snap(now[0], [pend(1)], [Node(name="n1", partitions=("p",), state="IDLE", cpus=8)])
        source.put(fresh_snap)
        await service.refresh(fresh_snap)  # what run() does with each new snapshot
        assert stale() == 0.0
    held = [r for r in caplog.records if "held on data" in r.getMessage()]
    fresh = [r for r in caplog.records if "fresh again" in r.getMessage()]
    assert (len(held), held[0].levelname, len(fresh)) == (1, "WARNING", 1)


@pytest.mark.skipif(not RECORDED_2605.is_dir(), reason="no 26.05 recording")
def test_target_info_says_where_each_target_comes_from() -> None:
    # alerts on unmet demand and stuck scale-down skip the informational per-partition defaults
    s = recorded_snapshot(RECORDED_2605, "v0.0.45")
    unconfigured = DemandService(StaticSource(s))
    asked = target_from_metadata({"partition": "cpu", "max": "4"})
    unconfigured.answer(asked)
    fixed = target_from_metadata({"partition": "gpu", "nodeset": "ns-gpu"})
    configured = DemandService(StaticSource(s), targets=[fixed])

    def info(service: DemandService) -> dict[str, str]:
        fams = demand_families(service.demands_on(s), service.label, service.source)
        (fam,) = [f for f in fams if f.name == "slurm_autoscaler_target_info"]
        return {x.labels["target"]: x.labels["source"] for x in fam.samples}

    sources = info(unconfigured)
    assert sources[unconfigured.label(asked)] == "scaler"
    assert {sources[p.name] for p in s.partitions if p.name != "cpu"} == {"default"}  # cpu: asked
    # and the partition's default target keeps its series beside the asked one (another definition: its
    # own label); it took the default's place before, so target="cpu" went missing once a poll rendered it
    assert sources["cpu"] == "default"
    assert info(configured) == {"ns-gpu": "configured"}


def test_the_status_line_counts_the_targets_metrics_export() -> None:
    # "demand: 0 targets known" while /metrics exported one target per partition
    snap = recorded_snapshot(RECORDED_2605, "v0.0.45")
    service = DemandService(StaticSource(snap), clock=lambda: snap.taken_at + 1.0)
    exported = {
        s.labels["target"]
        for fam in demand_families(service.demands_on(snap), service.label, service.source)
        for s in fam.samples
        if s.name == "slurm_autoscaler_desired_nodes"
    }
    assert len(exported) == len(snap.partitions) == 4
    assert service.status_line(snap.taken_at + 1.0).startswith(
        "demand: 4 targets (one per partition, and those KEDA asked for); "
    )
    configured = DemandService(StaticSource(snap), targets=[T], clock=lambda: snap.taken_at + 1.0)
    assert configured.status_line(snap.taken_at + 1.0).startswith("demand: 1 target (configured); ")


def test_each_model_run_and_its_time_are_counted_once_per_snapshot() -> None:
    """``slurm_autoscaler_computations_total`` / ``..._computation_seconds_total``: one run per new snapshot,
    whoever asks first (the renderer or the refresh); the same snapshot again is the memo."""
    now = [5000.0]
    source = SnapshotFeed()
    first = snap(now[0], [pend(1)], [Node(name="n1", partitions=("p",), state="IDLE", cpus=8)])
    service = DemandService(source, clock=lambda: now[0])

    def counters() -> dict[str, float]:
        return {
            s.name: s.value
            for fam in service.health_families(now[0])[1:]
            for s in fam.samples
            if s.name.endswith("_total")
        }

    assert counters() == {
        "slurm_autoscaler_computations_total": 0.0,
        "slurm_autoscaler_computation_seconds_total": 0.0,
    }
    service.demands_on(first)
    service.demands_on(first)
    got = counters()
    assert got["slurm_autoscaler_computations_total"] == 1.0
    assert got["slurm_autoscaler_computation_seconds_total"] > 0.0
    service.demands_on(snap(now[0] + 1, [pend(1), pend(2)], list(first.nodes)))
    assert counters()["slurm_autoscaler_computations_total"] == 2.0
