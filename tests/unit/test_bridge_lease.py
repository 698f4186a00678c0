"""Leader election (bridge/lease.py) over real HTTP against the fake API server: one leader at a time, a
follower takes over a dead leader's Lease only after its duration, at once after a release, and a leader
that cannot renew stops its work before anyone else may start."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from bridge.kube import Kube, load_configuration
from bridge.lease import REPLICA_URL_ANNOTATION, LeaderElector, LeaseOptions
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.tools import eventually

PREFIX = "coordination.k8s.io/v1"


@contextlib.asynccontextmanager
async def kube(tmp_path: Path) -> AsyncIterator[tuple[FakeKube, Kube]]:
    fake = FakeKube(token=TOKEN)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            yield fake, Kube(api)


def options(identity: str, *, release: bool = True) -> LeaseOptions:
    return LeaseOptions("bridge", "slurm-keda", identity, 1.5, 1.0, 0.2, release_on_cancel=release)


class Work:
    """A stand-in for the bridge: counts how often it started and whether it runs now."""

    def __init__(self) -> None:
        self.starts = 0
        self.running = False

    async def __call__(self) -> None:
        self.starts += 1
        self.running = True
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False


def holder(fake: FakeKube) -> str | None:
    lease = fake.get("leases", "slurm-keda", "bridge", prefix=PREFIX)
    return None if lease is None else str(lease["spec"].get("holderIdentity", ""))


async def test_one_leader_and_a_takeover_after_the_duration_when_it_dies(tmp_path: Path) -> None:
    async with kube(tmp_path) as (fake, k):
        a, b = LeaderElector(k, options("a", release=False)), LeaderElector(k, options("b"))
        work_a, work_b = Work(), Work()
        task_a = asyncio.create_task(a.run(work_a), name="elector-a")
        await eventually(lambda: a.leading and work_a.running, 5.0, "a to lead")
        task_b = asyncio.create_task(b.run(work_b), name="elector-b")
        try:
            await asyncio.sleep(2.5)  # several of b's tries, longer than the duration: a keeps renewing
            assert holder(fake) == "a" and not b.leading and work_b.starts == 0
            task_a.cancel()  # a dies without releasing (release_on_cancel off)
            await asyncio.gather(task_a, return_exceptions=True)
            assert not work_a.running
            died = asyncio.get_running_loop().time()
            await eventually(lambda: b.leading and work_b.running, 5.0, "b to take over")
            took = asyncio.get_running_loop().time() - died
            assert 1.5 - 0.25 <= took <= 1.5 + 1.0, took  # the duration after a's last renewal (≤ 0.2 s ago)
            lease = fake.get("leases", "slurm-keda", "bridge", prefix=PREFIX)
            assert lease is not None and lease["spec"]["leaseTransitions"] == 1
            assert (a.acquisitions, b.acquisitions) == (1, 1)
        finally:
            task_b.cancel()
            await asyncio.gather(task_b, return_exceptions=True)
        assert holder(fake) == ""  # b released it


async def test_a_released_lease_is_taken_at_once(tmp_path: Path) -> None:
    async with kube(tmp_path) as (_, k):
        a, b = LeaderElector(k, options("a")), LeaderElector(k, options("b"))
        task_a = asyncio.create_task(a.run(Work()), name="elector-a")
        await eventually(lambda: a.leading, 5.0, "a to lead")
        task_b = asyncio.create_task(b.run(Work()), name="elector-b")
        await asyncio.sleep(0.5)
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        released = asyncio.get_running_loop().time()
        await eventually(lambda: b.leading, 5.0, "b to take the released Lease")
        assert asyncio.get_running_loop().time() - released < 1.0  # not the 1.5 s duration
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)


async def test_a_leader_that_cannot_renew_stops_its_work_before_the_lease_expires(tmp_path: Path) -> None:
    async with kube(tmp_path) as (fake, k):
        a = LeaderElector(k, options("a"))
        work = Work()
        task = asyncio.create_task(a.run(work), name="elector-a")
        await eventually(lambda: work.running, 5.0, "a to lead")
        fake.down = True
        cut = asyncio.get_running_loop().time()
        await eventually(lambda: not work.running, 5.0, "a to stop leading")
        stopped = asyncio.get_running_loop().time() - cut
        assert stopped < 1.5, stopped  # within the renew deadline, so before a follower could take it
        assert not a.leading
        fake.down = False
        await eventually(lambda: work.running and work.starts == 2, 5.0, "a to lead again")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_two_candidates_at_once_never_both_lead(tmp_path: Path) -> None:
    async with kube(tmp_path) as (_, k):
        electors = [LeaderElector(k, options(f"c{i}")) for i in range(5)]
        tasks = [asyncio.create_task(e.run(Work()), name=f"elector-{i}") for i, e in enumerate(electors)]
        try:
            await eventually(lambda: any(e.leading for e in electors), 5.0, "someone to lead")
            for _ in range(20):
                assert sum(e.leading for e in electors) == 1
                await asyncio.sleep(0.1)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def test_durations_must_nest() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseOptions("x", "ns", "me", duration=10, renew_deadline=10, retry_period=2)


async def test_the_leader_names_its_url_in_the_lease_and_the_follower_reads_it(tmp_path: Path) -> None:
    """--replica-copy: the holder writes where it serves its snapshots (an annotation, with every renewal);
    a follower reads it while the Lease is held, and none is named once the holder released it."""
    async with kube(tmp_path) as (fake, k):
        a = LeaderElector(k, dataclasses.replace(options("a"), advertise="http://10.0.0.7:9341"))
        b = LeaderElector(k, dataclasses.replace(options("b"), advertise="http://10.0.0.8:9341"))
        task_a = asyncio.create_task(a.run(Work()), name="elector-a")
        await eventually(lambda: a.leading, 5.0, "a to lead")
        task_b = asyncio.create_task(b.run(Work()), name="elector-b")
        try:
            await eventually(lambda: b.leader_url, 5.0, "b to read a's URL")
            assert b.leader_url == "http://10.0.0.7:9341" and a.leader_url == ""  # the leader copies nobody
            lease = fake.get("leases", "slurm-keda", "bridge", prefix=PREFIX)
            assert lease is not None
            assert lease["metadata"]["annotations"] == {REPLICA_URL_ANNOTATION: "http://10.0.0.7:9341"}
            task_a.cancel()  # a releases: b leads, and names itself
            await asyncio.gather(task_a, return_exceptions=True)
            await eventually(lambda: b.leading, 5.0, "b to take over")
            assert b.leader_url == ""
            lease = fake.get("leases", "slurm-keda", "bridge", prefix=PREFIX)
            assert lease is not None
            assert lease["metadata"]["annotations"][REPLICA_URL_ANNOTATION] == "http://10.0.0.8:9341"
        finally:
            task_b.cancel()
            await asyncio.gather(task_b, return_exceptions=True)
