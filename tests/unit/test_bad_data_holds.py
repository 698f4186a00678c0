"""Bad data never lowers the scaler's answer (issue 20, item 1).

The real poller reads a fake slurmrestd serving the recorded 26.05 lab answers; between polls some records
are made impossible. Before, the records were dropped and the demand computed on the rest: every cpu node
dropped moved the cpu target's desired nodes 6 → 0, every job 6 → 3, one busy node 6 → 5, while
``slurm_up`` was 1 and nothing was stale. Now a target whose partition a dropped record names holds its
last answer on valid data (or rises above it), says so (``slurm_autoscaler_held`` 1, the report line),
and a target without such an answer has none (UNAVAILABLE, no ``desired_nodes`` series).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from prometheus_client.core import Metric

from autoscaler.demand import Target
from autoscaler.metrics import demand_families
from autoscaler.report import explain
from autoscaler.service import DemandService, NoTrustedAnswer, StaticSource, partly_invalid
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from testkit.fake_jobs import JobTable
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED, RECORDED_2605
from testkit.tools import Clock, recorded_snapshot

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")
CPU, GPU = Target("cpu", "cpu"), Target("gpu", "gpu")

Doc = dict[str, Any]


def _doc(endpoint: str, version: str) -> Doc:
    doc: Doc = json.loads((DATA / version / f"{endpoint}.json").read_bytes())
    return doc


def nodes_of(partition: str) -> Callable[[Doc], None]:
    def spoil(doc: Doc) -> None:
        for n in doc["nodes"]:
            if partition in n.get("partitions", []):
                n["cpus"] = -9

    return spoil


def node(name: str, field: str = "cpus", value: int = -9) -> Callable[[Doc], None]:
    def spoil(doc: Doc) -> None:
        for n in doc["nodes"]:
            if n["name"] == name:
                n[field] = value

    return spoil


def every_job(doc: Doc) -> None:
    for i, j in enumerate(doc["jobs"]):
        j["job_id"] = -(i + 2)


MIXES: dict[str, tuple[Callable[[Doc], None] | None, Callable[[Doc], None] | None]] = {
    # name: (spoil the /nodes answer, spoil the /jobs answer)
    "every cpu node": (nodes_of("cpu"), None),
    "every job": (None, every_job),
    "one busy node": (node("c1"), None),
    "one busy node's CPUs in use": (node("c2", "alloc_cpus", -3), None),
    "every node and job": (nodes_of("cpu"), every_job),
}
"""What main answered before the fix (cpu target, desired 6 on valid data): 0, 3, 5, 5, 0."""


def _setup(
    fake: FakeSlurmrestd, nodes: Callable[[Doc], None] | None, jobs: Callable[[Doc], None] | None
) -> None:
    fake.override.clear()
    if nodes is not None:
        doc = _doc("nodes", "v0.0.45")
        nodes(doc)
        fake.override["nodes"] = json.dumps(doc).encode()
    if jobs is not None:
        doc = _doc("jobs", "v0.0.44")  # /jobs is listed with v0.0.44 on 26.05 (job exclusivity)
        jobs(doc)
        fake.override["jobs"] = json.dumps(doc).encode()


def _series(families: list[Metric], name: str, target: str) -> float | None:
    for fam in families:
        for s in fam.samples:
            if s.name == name and s.labels.get("target") == target:
                return float(s.value)
    return None


async def _poll(p: Poller, clock: Clock, service: DemandService) -> None:
    clock.now += 70  # past --full-refresh: every endpoint fetched in full
    snap = await p.poll_once()
    assert snap is not None
    await service.refresh(snap)


@contextlib.asynccontextmanager
async def polling(fake: FakeSlurmrestd, targets: list[Target]) -> AsyncIterator[Polled]:
    """The real poller on ``fake`` and a demand service over it; polled once."""
    clock = Clock(2_000_000.0)
    async with serve(fake) as url:
        client = SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="good-token"), retries=0))
        p = Poller(SlurmSession(client), PollerConfig(), clock=clock)
        service = DemandService(p, targets=targets, clock=clock)
        async with client:
            await _poll(p, clock, service)
            yield Polled(p, clock, service)


@dataclass
class Polled:
    poller: Poller
    clock: Clock
    service: DemandService

    async def again(self) -> None:
        await _poll(self.poller, self.clock, self.service)


@pytest.mark.parametrize("mix", list(MIXES))
async def test_dropped_records_hold_the_answer_never_lower_it(mix: str) -> None:
    fake = FakeSlurmrestd(DATA)
    async with polling(fake, [CPU, GPU]) as polled:
        p, clock, service = polled.poller, polled.clock, polled.service
        good = {t: service.answer(t).desired for t in (CPU, GPU)}
        assert good == {CPU: 6, GPU: 2}  # the hand-checked figures of the recorded lab (test_demand)
        _setup(fake, *MIXES[mix])
        await polled.again()
        snap = p.snapshot
        assert snap is not None and p.status.up(clock.now)  # slurm_up stays 1: the rest is good data
        cpu = service.answer(CPU)
        assert cpu.desired >= good[CPU], (mix, cpu.demand)  # held, never lowered
        assert cpu.demand.held is not None and cpu.demand.held < good[CPU]  # the model's own count
        assert not cpu.stale
        assert explain(CPU, cpu.demand)[0].startswith(f"desired {cpu.desired}: HELD")
        # gpu: held as well when a dropped record names it (its jobs), else answered as usual
        gpu = service.answer(GPU)
        if partly_invalid(snap, GPU):
            assert gpu.demand.held is not None and gpu.desired >= good[GPU]
        else:
            assert gpu.demand.held is None and gpu.desired == good[GPU]
        fams = list(demand_families(service.demands_on(snap)))
        assert _series(fams, "slurm_autoscaler_held", "cpu") == 1.0
        assert _series(fams, "slurm_autoscaler_held", "gpu") == float(partly_invalid(snap, GPU))
        assert _series(fams, "slurm_autoscaler_desired_nodes", "cpu") == cpu.desired
        assert "HELD on records dropped as impossible: " in service.status_line(clock.now)
        # the records valid again: the answer is the model's, whatever it is, and no longer held
        fake.override.clear()
        await polled.again()
        again = service.answer(CPU)
        assert again.demand.held is None and again.desired == good[CPU]


async def test_held_data_rises_with_more_demand_but_never_falls() -> None:
    """A partly valid answer is trusted upward: more pending jobs on the valid rest raise the target."""
    fake = FakeSlurmrestd(DATA)
    async with polling(fake, [CPU]) as polled:
        service = polled.service
        assert service.answer(CPU).desired == 6
        nodes = _doc("nodes", "v0.0.45")
        node("c3")(nodes)
        jobs = _doc("jobs", "v0.0.44")
        pending = [j for j in jobs["jobs"] if "PENDING" in j["job_state"] and j["partition"] == "cpu"]
        extra = []
        for k in range(10):  # ten more copies of a pending cpu job: the model asks for more nodes
            copy = json.loads(json.dumps(pending[0]))
            copy["job_id"] = 900_000 + k
            extra.append(copy)
        jobs["jobs"] += extra
        fake.override = {"nodes": json.dumps(nodes).encode(), "jobs": json.dumps(jobs).encode()}
        await polled.again()
        cpu = service.answer(CPU)
        assert cpu.demand.held is not None and cpu.desired == cpu.demand.held > 6


async def test_no_valid_answer_yet_means_no_answer() -> None:
    """Bad records from the first poll on: nothing to hold, so no answer (KEDA keeps its replicas) and no
    desired series — never a low number taken for the truth."""
    fake = FakeSlurmrestd(DATA)
    _setup(fake, *MIXES["every cpu node"])
    async with polling(fake, [CPU, GPU]) as polled:
        p, service = polled.poller, polled.service
    with pytest.raises(NoTrustedAnswer, match="'cpu'"):
        service.answer(CPU)
    assert service.answer(GPU).desired == 2
    snap = p.snapshot
    assert snap is not None and snap.dropped == {"nodes": ("cpu",)}
    fams = list(demand_families(service.demands_on(snap)))
    assert _series(fams, "slurm_autoscaler_desired_nodes", "cpu") is None
    assert _series(fams, "slurm_autoscaler_held", "cpu") == 1.0
    assert [a.target for a in service.answers()] == [GPU]
    assert explain(CPU, service.demands_on(snap)[CPU])[0].startswith("desired: NO ANSWER")


def test_a_dropped_record_naming_no_partition_holds_every_target() -> None:
    service = DemandService(StaticSource(None), targets=[CPU, GPU])
    snap = recorded_snapshot(DATA / "v0.0.45", "v0.0.45")
    base = {t: d.desired for t, d in service.demands_on(snap).items()}
    bad = msgspec.structs.replace(snap, taken_at=snap.taken_at + 1, nodes=(), dropped={"nodes": ("",)})
    held = service.demands_on(bad)
    assert all(d.held is not None and d.desired == base[t] for t, d in held.items())


async def test_partial_jobs_data_never_lowers_the_answer() -> None:
    """A start without a full listing (more jobs than --jobs-listing-max): until every job was read the
    answer may rise, never fall — the model's count on the jobs read, never below the target's nodes in
    service (a NodeSet's replicas) — then the model's on every job, as after a listing."""
    table = JobTable.recorded()
    fake = FakeSlurmrestd(DATA, jobs_table=table)
    diag = json.loads((RECORDED_2605 / "diag.json").read_bytes())
    diag["statistics"]["jobs_pending"] = 1_000
    fake.override["diag"] = json.dumps(diag).encode()
    clock = Clock(2_000_000.0)
    config = PollerConfig(jobs_changes_limit=2, jobs_listing_max=5, jobs_sweep_rate=0.0)
    partial = []
    async with serve(fake) as url:
        client = SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="good-token"), retries=0))
        p = Poller(SlurmSession(client), config, clock=clock)
        service = DemandService(p, targets=[CPU, GPU], clock=clock)
        async with client:
            for _ in range(100):
                clock.now += 1
                snap = await p.poll_once()
                assert snap is not None
                await service.refresh(snap)
                cpu = service.answer(CPU)
                if not snap.jobs_unread:
                    break
                partial.append(cpu.desired)
                d = cpu.demand
                assert d.unread == snap.jobs_unread and d.held is not None
                assert cpu.desired == max(d.held, d.in_service) and d.in_service > 0
                fams = list(demand_families(service.demands_on(snap)))
                assert _series(fams, "slurm_autoscaler_held", "cpu") == 0.0  # not refused records
                assert _series(fams, "slurm_autoscaler_desired_nodes", "cpu") == cpu.desired
                assert explain(CPU, d)[0].startswith(f"desired {cpu.desired}: PARTIAL")
                report = service.target_reports(clock.now)
                assert {r.target: r.state for r in report}["cpu"] == "partial"
    assert "jobs" not in table.reads  # never listed
    assert len(partial) >= 2 and partial == sorted(partial)  # never lowered while partial
    assert partial[0] < 6  # the model's count on the jobs read so far, above what is there
    final = {t: service.answer(t) for t in (CPU, GPU)}
    assert {t: a.desired for t, a in final.items()} == {CPU: 6, GPU: 2}  # the figures of a listing
    assert final[CPU].demand.unread == 0 and final[CPU].demand.held is None
