"""Snapshot → Prometheus metric families (pure: no I/O, nothing kept between scrapes).

:class:`SnapshotCollector` builds fresh families on every ``collect()`` from the poller's current
snapshot and status; it is registered in a private ``CollectorRegistry``. The metric surface is
deliberately small here (health and headline counts); the full surface is built on top of the
same functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from .model import Snapshot
from .poller import PollStatus


def health_families(snap: Snapshot | None, status: PollStatus, now: float) -> Iterable[Metric]:
    """Exporter health: up, poll durations and errors per endpoint, snapshot age, info."""
    up = GaugeMetricFamily(
        "slurm_up", "1 if the last poll of slurmrestd produced a snapshot (some endpoint answered), else 0"
    )
    up.add_metric([], 1.0 if status.last_poll_ok else 0.0)
    yield up
    duration = GaugeMetricFamily(
        "slurm_exporter_poll_duration_seconds",
        "Seconds the last fetch of each slurmrestd endpoint took (decode included)",
        labels=["endpoint"],
    )
    errors = CounterMetricFamily(
        "slurm_exporter_poll_errors",
        "Failed fetches of slurmrestd endpoints, by endpoint and error kind",
        labels=["endpoint", "kind"],
    )
    fetched = GaugeMetricFamily(
        "slurm_exporter_endpoint_fetched_timestamp_seconds",
        "When each endpoint's data in the current snapshot was fetched or confirmed unchanged",
        labels=["endpoint"],
    )
    for st in (status.negotiation, *status.endpoints.values()):
        duration.add_metric([st.name], st.last_duration)
        for kind, n in sorted(st.errors.items()):
            errors.add_metric([st.name, kind], float(n))
        if st.fetched_at is not None:
            fetched.add_metric([st.name], st.fetched_at)
    yield duration
    yield errors
    yield fetched
    last = GaugeMetricFamily(
        "slurm_exporter_last_success_timestamp_seconds", "When the current snapshot was taken (epoch seconds)"
    )
    age = GaugeMetricFamily(
        "slurm_exporter_snapshot_age_seconds", "Seconds since the current snapshot was taken"
    )
    if snap is not None:
        last.add_metric([], snap.taken_at)
        age.add_metric([], max(0.0, now - snap.taken_at))
    yield last
    yield age
    info = InfoMetricFamily("slurm_exporter", "Cluster, Slurm release and slurmrestd API version in use")
    if snap is not None:
        info.add_metric(
            [],
            {"cluster": snap.cluster, "slurm_version": snap.slurm_version, "api_version": snap.api_version},
        )
    yield info


def headline_families(snap: Snapshot) -> Iterable[Metric]:
    """Jobs by partition and state (array tasks counted as tasks), nodes by base state."""
    jobs = GaugeMetricFamily(
        "slurm_jobs",
        "Jobs by partition and base state; pending array tasks count one each",
        labels=["partition", "state"],
    )
    counts: Counter[tuple[str, str]] = Counter()
    for j in snap.jobs:
        for p in j.partitions or ("",):
            counts[(p, j.state.lower())] += j.task_count
    for (p, s), n in sorted(counts.items()):
        jobs.add_metric([p, s], float(n))
    yield jobs
    nodes = GaugeMetricFamily("slurm_nodes", "Nodes by base state", labels=["state"])
    ncounts = Counter(n.state.lower() for n in snap.nodes)
    for s, n in sorted(ncounts.items()):
        nodes.add_metric([s], float(n))
    yield nodes


class SnapshotCollector(Collector):
    """Prometheus collector over a snapshot source; register it in a private registry."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot | None],
        status: Callable[[], PollStatus],
        clock: Callable[[], float],
    ) -> None:
        self._snapshot = snapshot
        self._status = status
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        snap = self._snapshot()
        yield from health_families(snap, self._status(), self._clock())
        if snap is not None:
            yield from headline_families(snap)
