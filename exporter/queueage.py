"""How long pending jobs have waited, without accounting: the snapshot's pending jobs → metric families.
Pure.

* ``slurm_jobs_pending_oldest_submit_timestamp_seconds{partition, reason}`` — when the oldest job still
  pending for that reason was submitted (a timestamp, so the series does not move between polls; its age
  is ``time() - value``).
* ``slurm_jobs_pending_age_seconds{partition}`` — a gauge histogram: pending jobs by how long ago they
  were submitted, at the snapshot's time (``le`` buckets from a minute to a week; ``_gsum`` the ages
  summed, ``_gcount`` the jobs).

Jobs count as in the other job families: a pending array record counts its ``task_count`` tasks (all
submitted together), a job pending in several partitions counts in each; a record without a submit time
is left out.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric

from .model import Snapshot

__all__ = ["AGE_BUCKETS", "queue_age_families"]

AGE_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)
"""Upper bounds (seconds) of the pending-age buckets; ``+Inf`` follows."""


def queue_age_families(snap: Snapshot) -> Iterable[Metric]:
    """The families above from ``snap``'s pending jobs, their ages taken at ``snap.taken_at``."""
    oldest: dict[tuple[str, str], float] = {}
    counts: dict[str, list[int]] = {}
    sums: dict[str, float] = {}
    now = snap.taken_at
    for job in snap.jobs:
        if job.state != "PENDING" or job.submit_time is None:
            continue
        n = job.task_count
        if n <= 0:
            continue
        age = max(now - job.submit_time, 0.0)
        slot = bisect.bisect_left(AGE_BUCKETS, age)
        for partition in job.partitions:
            key = (partition, job.reason)
            if job.submit_time < oldest.get(key, float("inf")):
                oldest[key] = job.submit_time
            buckets = counts.setdefault(partition, [0] * (len(AGE_BUCKETS) + 1))
            buckets[slot] += n
            sums[partition] = sums.get(partition, 0.0) + age * n
    first = GaugeMetricFamily(
        "slurm_jobs_pending_oldest_submit_timestamp_seconds",
        "When the oldest job pending in the partition for this reason was submitted (epoch seconds)",
        labels=["partition", "reason"],
    )
    for (partition, reason), at in sorted(oldest.items()):
        first.add_metric([partition, reason], at)
    yield first
    ages = GaugeHistogramMetricFamily(
        "slurm_jobs_pending_age_seconds",
        "Pending jobs by seconds since they were submitted, at the snapshot's time (array tasks one by one)",
        labels=["partition"],
    )
    bounds = [*(f"{b:g}" for b in AGE_BUCKETS), "+Inf"]
    for partition, buckets in sorted(counts.items()):
        running = 0
        cumulative = []
        for bound, n in zip(bounds, buckets, strict=True):
            running += n
            cumulative.append((bound, float(running)))
        ages.add_metric([partition], cumulative, gsum_value=sums[partition])
    yield ages
