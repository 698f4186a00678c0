"""The runtime of ``serve`` (slurm_keda/runtime.py): runnables start in order and stop in reverse, one that
cannot start stops those started, a writer runs only while this replica leads, a task that ends stops the
process, and each runnable's families and status lines reach the HTTP side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.errors import ConfigError
from exporter.model import Snapshot
from slurm_keda.runtime import Manager, Runnable


class Probe(Runnable):
    def __init__(self, name: str, log: list[str], *, leader: bool = False, fail_start: bool = False) -> None:
        self.name, self.log, self.needs_leader, self.fail_start = name, log, leader, fail_start
        self.running = asyncio.Event()

    async def start(self) -> None:
        if self.fail_start:
            raise ConfigError(f"{self.name}: port in use")
        self.log.append(f"start {self.name}")

    async def run(self) -> None:
        self.log.append(f"run {self.name}")
        self.running.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.running.clear()

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")

    def health_families(self, now: float) -> Iterable[Metric]:
        return [GaugeMetricFamily(f"probe_{self.name}", "a probe", value=now)]

    def snapshot_families(self, snap: Snapshot) -> Iterable[Metric]:
        return [GaugeMetricFamily(f"probe_{self.name}_snapshot", "a probe", value=snap.taken_at)]

    def status_lines(self, now: float) -> Iterable[str]:
        return [f"{self.name} fine"]


class Elector:
    """Leads when ``lead_now`` is set, loses the lead when it is cleared (as the Lease elector does)."""

    def __init__(self) -> None:
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        while True:
            await self.leading.wait()
            task = asyncio.ensure_future(lead())
            lost = asyncio.ensure_future(self.lost.wait())
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
            task.cancel()
            lost.cancel()
            await asyncio.gather(task, lost, return_exceptions=True)
            self.leading.clear()
            self.lost.clear()

    def families(self) -> Iterable[Metric]:
        return [GaugeMetricFamily("probe_leader", "1 while leading", value=float(self.leading.is_set()))]

    def status_lines(self) -> Iterable[str]:
        return ["lease: leading" if self.leading.is_set() else "lease: standby"]


async def test_start_in_order_run_all_stop_in_reverse() -> None:
    log: list[str] = []
    manager = Manager([Probe("a", log), Probe("b", log)])
    await manager.start()
    stop = asyncio.Event()
    running = asyncio.ensure_future(manager.run(stop=stop, handle_signals=False))
    await asyncio.sleep(0.05)
    stop.set()
    assert await running == 0  # a requested stop
    assert log[:2] == ["start a", "start b"] and set(log[2:4]) == {"run a", "run b"}
    assert log[4:] == ["stop b", "stop a"]


async def test_one_that_cannot_start_stops_those_started() -> None:
    log: list[str] = []
    manager = Manager([Probe("a", log), Probe("b", log, fail_start=True), Probe("c", log)])
    with pytest.raises(ConfigError, match="b: port in use"):
        await manager.start()
    assert log == ["start a", "stop a"]


async def test_a_task_that_ends_stops_the_process_with_1() -> None:
    class Ends(Runnable):
        name = "ends"

        async def run(self) -> None:
            return None

    log: list[str] = []
    manager = Manager([Probe("a", log), Ends()])
    await manager.start()
    assert await manager.run(handle_signals=False) == 1
    assert log[-1] == "stop a"


async def test_a_writer_runs_only_while_leading() -> None:
    log: list[str] = []
    reader, writer = Probe("reader", log), Probe("writer", log, leader=True)
    elector = Elector()
    manager = Manager([reader, writer], elector=elector)
    await manager.start()
    stop = asyncio.Event()
    running = asyncio.ensure_future(manager.run(stop=stop, handle_signals=False))
    await asyncio.wait_for(reader.running.wait(), 5)
    await asyncio.sleep(0.05)
    assert not writer.running.is_set()  # a follower: every reader runs, no writer
    elector.leading.set()
    await asyncio.wait_for(writer.running.wait(), 5)
    elector.lost.set()  # the Lease is lost: the writer is stopped, the reader goes on
    for _ in range(100):
        if not writer.running.is_set():
            break
        await asyncio.sleep(0.01)
    assert not writer.running.is_set() and reader.running.is_set()
    stop.set()
    assert await running == 0


async def test_without_election_a_writer_runs_at_once() -> None:
    log: list[str] = []
    writer = Probe("writer", log, leader=True)
    manager = Manager([writer])
    await manager.start()
    stop = asyncio.Event()
    running = asyncio.ensure_future(manager.run(stop=stop, handle_signals=False))
    await asyncio.wait_for(writer.running.wait(), 5)
    stop.set()
    assert await running == 0


def test_families_and_status_lines_come_from_every_runnable() -> None:
    log: list[str] = []
    elector = Elector()
    manager = Manager([Probe("a", log), Probe("b", log)], elector=elector)
    assert [f.name for f in manager.health_families(7.0)] == ["probe_a", "probe_b", "probe_leader"]
    snap = Snapshot(taken_at=3.0, api_version="v0.0.45")
    assert [f.name for f in manager.snapshot_families(snap)] == ["probe_a_snapshot", "probe_b_snapshot"]
    assert list(manager.status_lines(7.0)) == ["lease: standby", "a fine", "b fine"]
    with pytest.raises(AssertionError, match="added twice"):
        manager.add(Probe("a", log))


async def test_only_the_leader_lists_the_jobs_for_the_period() -> None:
    """The bridge overlay's standby replica keeps its jobs from /jobs/state but leaves the periodic full
    listings (27 s of slurmrestd at 20,000 jobs) to the Lease's holder."""
    from exporter.client import ClientConfig, SlurmClient, TokenSource
    from exporter.poller import Poller
    from exporter.session import SlurmSession
    from slurm_keda.serve import LeaderListings

    client = SlurmClient(ClientConfig(base_url="http://127.0.0.1:9", token=TokenSource(token="t")))
    poller = Poller(SlurmSession(client))
    elector = Elector()
    manager = Manager([LeaderListings(poller)], elector=elector)
    assert poller.standby
    await manager.start()
    stop = asyncio.Event()
    running = asyncio.ensure_future(manager.run(stop=stop, handle_signals=False))

    async def standby_is(value: bool) -> None:
        for _ in range(500):
            if poller.standby is value:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"standby is not {value}")

    await asyncio.sleep(0.05)
    assert poller.standby  # a follower
    elector.leading.set()
    await standby_is(False)
    elector.lost.set()
    await standby_is(True)
    stop.set()
    assert await running == 0
    await client.close()
