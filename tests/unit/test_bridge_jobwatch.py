"""The job watch's overlay (bridge/jobwatch.py): fresher records replace or join the snapshot's jobs, and
go for good once a snapshot whose /jobs request was sent after them arrives. (Its reads against the real
slurmrestd: ``tests/live/test_bridge_lab.py``.)"""

from __future__ import annotations

from bridge.jobwatch import JobWatch
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.model import Job, Snapshot
from exporter.session import SlurmSession
from testkit import builders


def snap(requested: float, *jobs: Job) -> Snapshot:
    return builders.snap(jobs, at=requested + 8, fetched=["jobs"], requested=requested)


def watch() -> JobWatch:
    client = SlurmClient(ClientConfig(base_url="http://127.0.0.1:9", token=TokenSource(token="t")))
    return JobWatch(SlurmSession(client))


def test_fresher_records_replace_and_join_the_snapshots_jobs() -> None:
    w = watch()
    old = snap(100.0, Job(job_id=1, state="PENDING"), Job(job_id=2, state="PENDING"))
    w.overlay = {
        2: (Job(job_id=2, state="RUNNING", nodes="c1"), 105.0),
        3: (Job(job_id=3, state="RUNNING"), 105.0),
    }
    merged = w.apply(old)
    assert [(j.job_id, j.state) for j in merged.jobs] == [(1, "PENDING"), (2, "RUNNING"), (3, "RUNNING")]
    assert merged.requested_at == old.requested_at  # the rest of the snapshot as it was
    assert w.apply(old).jobs == merged.jobs  # kept while no newer snapshot came


def test_a_snapshot_requested_after_a_record_replaces_it_for_good() -> None:
    w = watch()
    w.overlay = {2: (Job(job_id=2, state="RUNNING"), 105.0)}
    newer = snap(106.0, Job(job_id=2, state="COMPLETED"))
    assert w.apply(newer) is newer and w.overlay == {}
    # a snapshot requested before the record (answered later, a slow listing) does not
    w.overlay = {2: (Job(job_id=2, state="RUNNING"), 105.0)}
    slow = snap(104.0, Job(job_id=2, state="PENDING"))
    assert [j.state for j in w.apply(slow).jobs] == ["RUNNING"]
