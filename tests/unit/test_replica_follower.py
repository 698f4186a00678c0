"""A standby's copy of the leader's snapshots (exporter.follower), over real HTTP against the leader's real
server and poller, both reading one fake slurmrestd: the standby serves what the leader read and asks
slurmrestd nothing while the leader answers; it polls again itself once the leader is gone; taking over,
it reads what changed against the copy instead of listing every job."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import bcrypt
import pytest

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.follower import FollowerOptions, ReplicaFollower, read_basic_auth
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app
from exporter.session import SlurmSession
from exporter.webconfig import load_web_config
from testkit.fake_jobs import JobTable
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED
from testkit.tools import eventually, serve_app

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")

OPTIONS = FollowerOptions(wait=0.3, fresh_for=0.8, retry=0.05, timeout_margin=2.0, start_grace=2.0)


def _client(url: str) -> SlurmClient:
    return SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="good-token"), retries=0))


@contextlib.asynccontextmanager
async def _running(*coros: object) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(c) for c in coros]  # type: ignore[arg-type]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _shows(poller: Poller, job_id: int) -> bool:
    snap = poller.snapshot
    return snap is not None and any(j.job_id == job_id for j in snap.jobs)


def _same(a: Snapshot | None, b: Snapshot | None) -> bool:
    return a is not None and b is not None and a == b


async def test_a_standby_serves_the_leaders_snapshots_and_polls_only_without_them() -> None:
    table = JobTable.recorded()
    fake = FakeSlurmrestd(DATA, jobs_table=table)
    async with serve(fake) as slurm:
        leader_client, standby_client = _client(slurm), _client(slurm)
        leader = Poller(SlurmSession(leader_client), PollerConfig(interval=0.1, jobs_sweep_rate=0.0))
        standby = Poller(SlurmSession(standby_client), PollerConfig(interval=0.05, jobs_sweep_rate=0.0))
        standby.standby = True
        async with leader_client, standby_client:
            app_cm = serve_app(make_app(leader))
            url = await app_cm.__aenter__()
            leader_url = {"url": url}
            follower = ReplicaFollower(standby, lambda: leader_url["url"], OPTIONS)
            standby.copy_fresh = follower.fresh
            assert await leader.poll_once() is not None
            stopped = False
            try:
                # the standby's poller first, as serve starts it: it waits for the copy, asks nothing
                async with _running(standby.run(), leader.run(), follower.run()):
                    await eventually(lambda: _same(standby.snapshot, leader.snapshot), 5.0, "the first copy")
                    assert sum(standby_client.requests_by_endpoint.values()) == 0
                    assert follower.fresh() and standby.status.up(standby.snapshot.taken_at + 1)  # type: ignore[union-attr]

                    # a change the leader reads reaches the standby as a delta, and still no request
                    new_id = table.submit()
                    await eventually(lambda: _shows(standby, new_id), 5.0, "the new job in the copy")
                    await asyncio.sleep(0.4)  # eight standby intervals
                    assert sum(standby_client.requests_by_endpoint.values()) == 0, "the standby polled"
                    assert follower.frames >= 2 and standby.adopted == follower.frames

                    # the leader's server goes away: the copy turns stale and the standby polls itself
                    await app_cm.__aexit__(None, None, None)
                    stopped = True
                    gone_id = table.submit()
                    await eventually(lambda: _shows(standby, gone_id), 10.0, "the standby's own poll")
                    assert not follower.fresh() and follower.failures
                    assert set(follower.failures) <= {"unreachable", "timeout"}, follower.failures
                    assert standby_client.requests_by_endpoint["jobs/state"] >= 1
                    assert "STALE" in follower.status_line()
            finally:
                if not stopped:
                    await app_cm.__aexit__(None, None, None)


async def test_taking_over_reads_what_changed_against_the_copy_not_every_job() -> None:
    table = JobTable.recorded()
    fake = FakeSlurmrestd(DATA, jobs_table=table)
    async with serve(fake) as slurm:
        leader_client, standby_client = _client(slurm), _client(slurm)
        leader = Poller(SlurmSession(leader_client), PollerConfig(jobs_sweep_rate=0.0))
        standby = Poller(SlurmSession(standby_client), PollerConfig(jobs_sweep_rate=0.0))
        standby.standby = True
        async with leader_client, standby_client, serve_app(make_app(leader)) as url:
            follower = ReplicaFollower(standby, lambda: url, OPTIONS)
            standby.copy_fresh = follower.fresh
            assert await leader.poll_once() is not None
            async with _running(follower.run()):
                await eventually(lambda: _same(standby.snapshot, leader.snapshot), 5.0, "the first copy")
            held = standby.snapshot
            assert held is not None
            new_id = table.submit()
            standby.standby = False  # it leads now
            assert not standby.adopt(held), "a leader takes no copy"
            snap = await standby.poll_once()
            assert snap is not None
            listings = standby_client.requests_by_endpoint["jobs"]
            assert listings == 0, f"the new leader listed every job ({listings} /jobs requests)"
            assert standby_client.requests_by_endpoint["jobs/state"] >= 1
            assert any(j.job_id == new_id for j in snap.jobs), "the change since the copy was not read"
            assert {j.job_id for j in snap.jobs} - {new_id} == {j.job_id for j in held.jobs}


def test_the_basic_auth_file_is_user_colon_password(tmp_path: Path) -> None:
    path = tmp_path / "auth"
    path.write_text("scraper:s3cret:with:colons\n")
    assert read_basic_auth(path) == "Basic " + base64.b64encode(b"scraper:s3cret:with:colons").decode()
    path.write_text("no-colon\n")
    with pytest.raises(ValueError, match="user:password"):
        read_basic_auth(path)
    path.write_text("")
    with pytest.raises(ValueError, match="user:password"):
        read_basic_auth(path)


async def test_a_leader_behind_basic_auth_is_copied_with_the_file_and_refused_without(tmp_path: Path) -> None:
    """The leader's web config asks for basic auth: with the file's credentials the standby copies; without,
    every request is a 401 — counted by kind, said on the status line, and the standby polls itself."""
    digest = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    config = tmp_path / "web.yaml"
    config.write_text(f"basic_auth_users:\n  standby: '{digest}'\n")
    web_config = load_web_config(config)
    (tmp_path / "auth").write_text("standby:s3cret\n")
    fake = FakeSlurmrestd(DATA, jobs_table=JobTable.recorded())
    async with serve(fake) as slurm:
        leader_client, standby_client = _client(slurm), _client(slurm)
        leader = Poller(SlurmSession(leader_client), PollerConfig(jobs_sweep_rate=0.0))
        async with leader_client, standby_client, serve_app(make_app(leader, web_config=web_config)) as url:
            assert await leader.poll_once() is not None
            for authorization, copies in ((read_basic_auth(tmp_path / "auth"), True), (None, False)):
                standby = Poller(SlurmSession(standby_client), PollerConfig(jobs_sweep_rate=0.0))
                standby.standby = True
                follower = ReplicaFollower(standby, lambda: url, OPTIONS, authorization=authorization)
                async with _running(follower.run()):
                    if copies:
                        await eventually(lambda: _same(standby.snapshot, leader.snapshot), 5.0, "the copy")  # noqa: B023
                    else:
                        await eventually(lambda: follower.failures, 5.0, "a refusal")  # noqa: B023
                        assert set(follower.failures) == {"http_401"} and standby.snapshot is None
                        assert not follower.fresh() and "s3cret" not in follower.status_line()


async def test_without_a_leader_to_copy_the_standby_polls_after_the_start_grace_not_an_interval() -> None:
    """No replica names a URL (the leader does not advertise one): the standby waits the start grace for a
    copy, then polls — within a second of it, not after its 30-s interval; and copies nothing."""
    fake = FakeSlurmrestd(DATA, jobs_table=JobTable.recorded())
    async with serve(fake) as slurm:
        client = _client(slurm)
        standby = Poller(SlurmSession(client), PollerConfig(interval=30.0, jobs_sweep_rate=0.0))
        standby.standby = True
        options = FollowerOptions(wait=0.3, fresh_for=0.8, retry=0.05, start_grace=0.3)
        follower = ReplicaFollower(standby, lambda: "", options)
        standby.copy_fresh = follower.fresh
        async with client, _running(standby.run(), follower.run()):
            started = asyncio.get_running_loop().time()
            await eventually(lambda: standby.snapshot, 5.0, "the standby's own poll", 0.05)
            assert asyncio.get_running_loop().time() - started < 0.3 + 1.5
            assert follower.frames == 0 and not follower.fresh()
            assert "none" in follower.status_line()
