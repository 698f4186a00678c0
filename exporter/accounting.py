"""Ended jobs (slurmdbd's records, :class:`exporter.model.EndedJob`) → accumulated accounting totals →
metric families. Pure: :func:`record_ended` returns new totals, the caller keeps them between polls.

The exporter reads slurmdbd's jobs in a window that moves (the jobs that ended since the last read, with an
overlap for records slurmctld hands to slurmdbd late) and adds each ended job once: :attr:`Accounting.seen`
remembers the jobs counted whose end is still inside the overlap. The totals start at zero when the exporter
starts (counters: ``rate()`` and ``increase()`` are what to read), not with slurmdbd's history.

* ``slurm_jobs_ended_total{partition, state}`` — jobs ended, by final state (COMPLETED, FAILED, TIMEOUT,
  OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED, BOOT_FAIL, DEADLINE); per account and per user behind the
  per-account / per-user opt-ins (``slurm_account_jobs_ended_total``, ``slurm_user_jobs_ended_total``).
* ``slurm_job_wait_seconds{partition}`` — histogram of submit → start of the ended jobs that started.
* ``slurm_job_run_seconds{partition}`` — histogram of their run time (elapsed).
* ``slurm_job_cpu_efficiency{partition}`` — histogram of CPU time used / (run time × CPUs allocated), 0–1
  (what ``seff`` calls CPU efficiency; jobs that ran 0 s or held no CPU are left out).
* ``slurm_job_memory_efficiency{partition}`` — histogram of the memory the job's largest step used (its
  tasks' peak RSS summed) over the memory the job held, 0–1 and above (a job over its allocation without a
  cgroup limit); jobs that ended before jobacct_gather's first sample are left out.
* ``slurm_jobs_cpu_seconds_allocated_total`` / ``slurm_jobs_gpu_seconds_allocated_total`` /
  ``slurm_jobs_cpu_seconds_used_total{partition}`` — CPU- and GPU-seconds the ended jobs held, CPU-seconds
  they used.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from .families import labelled
from .model import EndedJob

__all__ = ["ENDED_STATES", "Accounting", "Histogram", "accounting_families", "record_ended"]

ENDED_STATES = frozenset(
    {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED", "BOOT_FAIL"}
    | {"DEADLINE"}
)
WAIT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0)
RUN_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)
EFFICIENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)

JobKey = tuple[int, float]
"""(job id, submit time): one job, even where Slurm reused its id."""


@dataclass(frozen=True)
class Histogram:
    """Observations per bucket (not cumulative; the last one is ``+Inf``), their sum and count."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float = 0.0

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds, (0,) * (len(bounds) + 1))

    def observe(self, value: float) -> Histogram:
        slot = bisect.bisect_left(self.bounds, value)
        counts = list(self.counts)
        counts[slot] += 1
        return Histogram(self.bounds, tuple(counts), self.total + value)

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip([*(f"{b:g}" for b in self.bounds), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out


@dataclass(frozen=True)
class Accounting:
    """What the ended jobs added up to since the exporter started."""

    ended: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)
    """(partition, state, account, user) → jobs ended."""
    wait: Mapping[str, Histogram] = field(default_factory=dict)
    run: Mapping[str, Histogram] = field(default_factory=dict)
    cpu_efficiency: Mapping[str, Histogram] = field(default_factory=dict)
    memory_efficiency: Mapping[str, Histogram] = field(default_factory=dict)
    cpu_seconds_allocated: Mapping[str, float] = field(default_factory=dict)
    gpu_seconds_allocated: Mapping[str, float] = field(default_factory=dict)
    cpu_seconds_used: Mapping[str, float] = field(default_factory=dict)
    seen: Mapping[JobKey, float] = field(default_factory=dict)
    """Jobs counted → their end time, while it is at or after the last read's ``keep_after``."""


def record_ended(acc: Accounting, jobs: Iterable[EndedJob], *, keep_after: float) -> Accounting:
    """``acc`` plus the ended jobs of ``jobs`` not counted yet (a job not ended, or without an end time, is
    left for a later read); ``keep_after``: jobs counted that ended before this are forgotten from
    :attr:`Accounting.seen` (the next read's window starts after it)."""
    ended = dict(acc.ended)
    wait, run, eff, mem_eff = (
        dict(acc.wait),
        dict(acc.run),
        dict(acc.cpu_efficiency),
        dict(acc.memory_efficiency),
    )
    cpu_alloc, gpu_alloc, cpu_used = (
        dict(acc.cpu_seconds_allocated),
        dict(acc.gpu_seconds_allocated),
        dict(acc.cpu_seconds_used),
    )
    seen = {k: end for k, end in acc.seen.items() if end >= keep_after}
    for job in jobs:
        if job.state not in ENDED_STATES or job.end_time is None:
            continue
        key = (job.job_id, job.submit_time or 0.0)
        if key in acc.seen:
            continue
        if job.end_time >= keep_after:
            seen[key] = job.end_time
        p = job.partition
        k = (p, job.state, job.account, job.user)
        ended[k] = ended.get(k, 0) + 1
        if job.start_time is None:
            continue  # never ran: no wait, run time or usage
        if job.submit_time is not None:
            wait[p] = wait.get(p, Histogram.empty(WAIT_BUCKETS)).observe(
                max(job.start_time - job.submit_time, 0)
            )
        run[p] = run.get(p, Histogram.empty(RUN_BUCKETS)).observe(job.elapsed_seconds)
        held = job.elapsed_seconds * job.cpus
        if held > 0:
            eff[p] = eff.get(p, Histogram.empty(EFFICIENCY_BUCKETS)).observe(
                min(job.cpu_seconds_used / held, 1.0)
            )
        if job.memory_bytes_used is not None and job.memory_bytes > 0:
            mem_eff[p] = mem_eff.get(p, Histogram.empty(EFFICIENCY_BUCKETS)).observe(
                job.memory_bytes_used / job.memory_bytes
            )
        cpu_alloc[p] = cpu_alloc.get(p, 0.0) + held
        gpu_alloc[p] = gpu_alloc.get(p, 0.0) + job.elapsed_seconds * job.gpus
        cpu_used[p] = cpu_used.get(p, 0.0) + job.cpu_seconds_used
    return Accounting(ended, wait, run, eff, mem_eff, cpu_alloc, gpu_alloc, cpu_used, seen)


def accounting_families(
    acc: Accounting, *, per_account: bool = False, per_user: bool = False
) -> Iterable[Metric]:
    """The families of the module doc from ``acc``."""
    by_partition: dict[tuple[str, str], int] = {}
    by_account: dict[tuple[str, str, str], int] = {}
    by_user: dict[tuple[str, str, str], int] = {}
    for (partition, state, account, user), n in acc.ended.items():
        by_partition[(partition, state)] = by_partition.get((partition, state), 0) + n
        by_account[(account, partition, state)] = by_account.get((account, partition, state), 0) + n
        by_user[(user, partition, state)] = by_user.get((user, partition, state), 0) + n
    yield labelled(
        CounterMetricFamily,
        "slurm_jobs_ended",
        "Jobs that ended, by partition and final state",
        ["partition", "state"],
        by_partition,
    )
    if per_account:
        yield labelled(
            CounterMetricFamily,
            "slurm_account_jobs_ended",
            "Jobs that ended, by account",
            ["account", "partition", "state"],
            by_account,
        )
    if per_user:
        yield labelled(
            CounterMetricFamily,
            "slurm_user_jobs_ended",
            "Jobs that ended, by user",
            ["user", "partition", "state"],
            by_user,
        )
    for name, doc, values in (
        ("slurm_job_wait_seconds", "Seconds ended jobs waited from submission to start", acc.wait),
        ("slurm_job_run_seconds", "Seconds ended jobs ran", acc.run),
        (
            "slurm_job_cpu_efficiency",
            "CPU time ended jobs used over their run time times the CPUs they held (0 to 1)",
            acc.cpu_efficiency,
        ),
        (
            "slurm_job_memory_efficiency",
            "Memory ended jobs' largest step used (its tasks' peak RSS summed) over the memory they held",
            acc.memory_efficiency,
        ),
    ):
        fam = HistogramMetricFamily(name, doc, labels=["partition"])
        for partition, h in sorted(values.items()):
            fam.add_metric([partition], h.cumulative(), sum_value=h.total)
        yield fam
    for name, doc, sums in (
        (
            "slurm_jobs_cpu_seconds_allocated",
            "CPU-seconds ended jobs held (run time x CPUs)",
            acc.cpu_seconds_allocated,
        ),
        (
            "slurm_jobs_gpu_seconds_allocated",
            "GPU-seconds ended jobs held (run time x GPUs)",
            acc.gpu_seconds_allocated,
        ),
        (
            "slurm_jobs_cpu_seconds_used",
            "CPU-seconds ended jobs used (user and system)",
            acc.cpu_seconds_used,
        ),
    ):
        yield labelled(CounterMetricFamily, name, doc, ["partition"], {(p,): v for p, v in sums.items()})
