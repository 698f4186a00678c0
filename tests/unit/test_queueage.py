"""Pending jobs' ages (exporter.queueage): oldest submit time per partition and reason, age buckets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporter.model import Job, Snapshot
from exporter.queueage import queue_age_families
from testkit.tools import registry_of

NOW = 1_800_000_000.0


def registry(snap: Snapshot) -> CollectorRegistry:
    return registry_of(queue_age_families(snap))


def pending(
    job_id: int, waited: float, reason: str = "Priority", parts: tuple[str, ...] = ("cpu",), **kw: object
) -> Job:
    return Job(
        job_id=job_id, state="PENDING", reason=reason, partitions=parts, submit_time=NOW - waited, **kw
    )  # type: ignore[arg-type]


def test_the_oldest_pending_job_per_partition_and_reason() -> None:
    snap = Snapshot(
        taken_at=NOW,
        api_version="v0.0.45",
        jobs=(
            pending(1, 600),
            pending(2, 7200),
            pending(3, 30, reason="Resources"),
            pending(4, 99999, parts=("gpu", "cpu"), reason="Resources"),
            Job(job_id=5, state="RUNNING", partitions=("cpu",), submit_time=NOW - 10**6),  # not pending
            Job(job_id=6, state="PENDING", partitions=("cpu",), reason="Priority"),  # no submit time
        ),
    )
    reg = registry(snap)
    name = "slurm_jobs_pending_oldest_submit_timestamp_seconds"
    assert reg.get_sample_value(name, {"partition": "cpu", "reason": "Priority"}) == NOW - 7200
    assert reg.get_sample_value(name, {"partition": "cpu", "reason": "Resources"}) == NOW - 99999
    assert reg.get_sample_value(name, {"partition": "gpu", "reason": "Resources"}) == NOW - 99999


def test_pending_jobs_by_age_are_cumulative_buckets_with_array_tasks_counted() -> None:
    array = pending(7, 100, array_job_id=7, array_task_string="0-9", array_pending_tasks=10)
    snap = Snapshot(
        taken_at=NOW,
        api_version="v0.0.45",
        jobs=(pending(1, 60), pending(2, 61), array, pending(3, 10 * 86400)),
    )
    reg = registry(snap)

    def bucket(le: str) -> float | None:
        return reg.get_sample_value("slurm_jobs_pending_age_seconds_bucket", {"partition": "cpu", "le": le})

    assert bucket("60") == 1  # 60 s is in le="60"
    assert bucket("300") == 12  # + 61 s, + ten tasks at 100 s
    assert bucket("604800") == 12
    assert bucket("+Inf") == 13
    assert reg.get_sample_value("slurm_jobs_pending_age_seconds_gcount", {"partition": "cpu"}) == 13
    total = 60 + 61 + 10 * 100 + 10 * 86400
    assert reg.get_sample_value("slurm_jobs_pending_age_seconds_gsum", {"partition": "cpu"}) == total
