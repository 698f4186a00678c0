"""A job tuple's delta (exporter.mirror): applied to a copy of the old tuple it gives the new one, record for
record and in order, over random runs of what the poller does between snapshots — and over the wire."""

from __future__ import annotations

import random

import msgspec
import pytest

from exporter.jobsync import merge
from exporter.mirror import JobsDelta, apply_jobs, jobs_delta
from exporter.model import Job


def _job(job_id: int, state: str = "PENDING", reason: str = "Priority") -> Job:
    return Job(job_id=job_id, state=state, reason=reason, partitions=("cpu",), cpus=1)


def _wire(delta: JobsDelta) -> JobsDelta:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(delta), type=JobsDelta)


@pytest.mark.parametrize("seed", range(20))
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
