"""A job tuple's delta (exporter.mirror): applied to a copy of the old tuple it gives the new one, record for
record and in order, over random runs of what the poller does between snapshots — and over the wire."""

from __future__ import annotations

import random

import aiohttp
import msgspec
import pytest

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.jobsync import merge
from exporter.mirror import JobsDelta, MirrorFrame, apply_frame, apply_jobs, jobs_delta
from exporter.model import Job, Snapshot
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app
from exporter.session import SlurmSession
from testkit.budget import seeds
from testkit.fake_jobs import JobTable
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED
from testkit.tools import Clock, serve_app


def _job(job_id: int, state: str = "PENDING", reason: str = "Priority") -> Job:
    return Job(job_id=job_id, state=state, reason=reason, partitions=("cpu",), cpus=1)


def _wire(delta: JobsDelta) -> JobsDelta:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(delta), type=JobsDelta)


@pytest.mark.parametrize("seed", seeds(20))
def test_a_copy_follows_every_step(seed: int) -> None:
    rng = random.Random(seed)
    jobs: tuple[Job, ...] = tuple(_job(i) for i in range(1, 60))
    copy = jobs
    next_id = 60
    for _ in range(40):
        step = rng.choice(["merge", "merge", "merge", "listing", "nothing"])
        held = list(jobs)
        if step == "merge":  # incremental reads: some replaced, some new, some gone
            fetched: dict[int, tuple[Job, ...]] = {}
            for job in rng.sample(held, min(len(held), rng.randint(0, 5))):
                fetched[job.job_id] = (_job(job.job_id, "RUNNING", "None"),)
            for _ in range(rng.randint(0, 4)):
                fetched[next_id] = (_job(next_id),)
                next_id += 1
            gone = [job.job_id for job in rng.sample(held, min(len(held), rng.randint(0, 3)))]
            new = merge(held, fetched, gone)
        elif step == "listing":  # every record a new object, in the listing's order
            new = tuple(_job(j.job_id, j.state, j.reason) for j in rng.sample(held, len(held)))
        else:
            new = jobs
        delta = _wire(jobs_delta(jobs, new))
        if step == "merge":
            assert delta.order is None  # the usual step sends no order
        if step == "nothing":
            assert delta == JobsDelta()
        copy = apply_jobs(copy, delta)
        assert copy == new
        assert [j.job_id for j in copy] == [j.job_id for j in new]
        jobs = new


def test_a_delta_carries_only_what_changed() -> None:
    old = tuple(_job(i) for i in range(1, 1001))
    replaced = _job(500, "RUNNING", "None")
    new = merge(old, {500: (replaced,), 1001: (_job(1001),)}, [7])
    delta = jobs_delta(old, new)
    assert [j.job_id for j in delta.put] == [500, 1001] and delta.gone == (7,) and delta.order is None
    assert len(msgspec.msgpack.encode(delta)) < len(msgspec.msgpack.encode(new)) // 100


DATA = RECORDED / "slurm-26.05.5"


@pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")
async def test_a_copy_over_http_equals_every_leader_snapshot() -> None:
    """The leader's real poller keeps jobs from a churning job table; a copy follows /replica/snapshot over
    HTTP (msgpack frames, jobs as deltas): after every poll it equals the leader's snapshot, field by
    field, and each frame carries only the jobs read since the last."""
    rng = random.Random(4)
    table = JobTable.recorded()
    fake = FakeSlurmrestd(DATA, jobs_table=table)
    clock = Clock(1_000_000.0)
    async with serve(fake) as slurm:
        client = SlurmClient(ClientConfig(base_url=slurm, token=TokenSource(token="good-token"), retries=0))
        p = Poller(SlurmSession(client), PollerConfig(jobs_sweep_rate=0.0), clock=clock)
        async with client, serve_app(make_app(p)) as url, aiohttp.ClientSession() as http:

            async def frame_after(seq: int, wait: float) -> MirrorFrame | None:
                params = {"after": str(seq), "wait": str(wait)}
                async with http.get(f"{url}/replica/snapshot", params=params) as r:
                    if r.status == 204:
                        return None
                    assert r.status == 200 and r.content_type == "application/msgpack"
                    return msgspec.msgpack.decode(await r.read(), type=MirrorFrame)

            assert await frame_after(0, 0.05) is None  # no snapshot yet
            copy: Snapshot | None = None
            seq = 0
            for step in range(12):
                if step:
                    for _ in range(rng.randint(1, 3)):
                        pending = [j for j, r in table.records.items() if r["job_state"] == ["PENDING"]]
                        if rng.random() < 0.5 and pending:
                            table.start(rng.choice(pending), nodes="c2")
                        else:
                            table.submit()
                clock.now += 1
                snap = await p.poll_once()
                assert snap is not None
                frame = await frame_after(seq, 5.0)
                assert frame is not None and frame.base == seq and frame.seq == seq + 1
                if step:
                    assert 0 < len(frame.jobs.put) <= len(p.status.jobs_sync.last_read) + 4
                copy, seq = apply_frame(copy, seq, frame), frame.seq
                assert copy == snap
            assert await frame_after(seq, 0.05) is None  # nothing newer
            old = await frame_after(0, 0.0)  # a copy that holds nothing: every job again
            assert old is not None and old.base == 0 and apply_frame(None, 0, old) == snap
            async with http.get(f"{url}/replica/snapshot", params={"after": "x"}) as r:
                assert r.status == 400


def test_a_frame_from_another_base_is_refused() -> None:
    snap = Snapshot(taken_at=1.0, api_version="v0.0.45", jobs=(_job(1),))
    frame = MirrorFrame(seq=5, base=4, snapshot=snap, jobs=JobsDelta())
    with pytest.raises(ValueError, match="snapshot 4"):
        apply_frame(snap, 3, frame)
