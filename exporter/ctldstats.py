"""slurmctld's own statistics (``/diag``: what ``sdiag`` prints) → metric families. Pure.

* **Scheduler and backfill** figures: slurmctld resets them at midnight (``reset_stats``) and on ``sdiag
  --reset``, so they are gauges and their HELP says so.
* **RPCs served**, by message type and by user: slurmctld keeps them from its start until ``sdiag --reset``
  (the midnight reset leaves them), so they are counters (``_total``; a reset is a counter reset, which
  ``rate()`` handles). Times are seconds. Per user only with the per-user opt-in, and only the
  ``top_users`` busiest users (most RPCs since the reset): the rest are counted in
  ``slurm_rpc_users_omitted``, never summed into a catch-all series (whose membership would change and
  break the counter).
* **Queued, dropped and pending RPCs** (24.11+; absent on 22.05): RPCs waiting in slurmctld's RPC queue
  (``SlurmctldParameters=enable_rpc_queue``), dropped from it, and outgoing RPCs the agent still has to
  send to slurmd.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .families import labelled
from .model import Diag

__all__ = ["DEFAULT_RPC_TOP_USERS", "diag_families", "rpc_families"]

DEFAULT_RPC_TOP_USERS = 20
"""Per-user RPC series kept by default (the busiest users)."""

_RESET_NOTE = "; slurmctld resets it (at midnight and on sdiag --reset), so it is a gauge, not a counter"


def diag_families(diag: Diag) -> Iterable[Metric]:
    """Scheduler statistics (``sdiag``)."""
    specs: tuple[tuple[str, str, float], ...] = (
        (
            "slurm_scheduler_cycle_last_seconds",
            "Duration of the last main scheduling cycle",
            diag.schedule_cycle_last_seconds,
        ),
        (
            "slurm_scheduler_cycle_mean_seconds",
            "Mean main scheduling cycle duration" + _RESET_NOTE,
            diag.schedule_cycle_mean_seconds,
        ),
        (
            "slurm_scheduler_cycle_max_seconds",
            "Longest main scheduling cycle" + _RESET_NOTE,
            diag.schedule_cycle_max_seconds,
        ),
        ("slurm_scheduler_cycles", "Main scheduling cycles run" + _RESET_NOTE, diag.schedule_cycle_count),
        (
            "slurm_scheduler_mean_depth",
            "Mean jobs examined per main scheduling cycle" + _RESET_NOTE,
            diag.schedule_cycle_mean_depth,
        ),
        (
            "slurm_scheduler_queue_length",
            "Jobs pending in the main scheduler's queue",
            diag.schedule_queue_length,
        ),
        (
            "slurm_backfill_cycle_last_seconds",
            "Duration of the last backfill cycle",
            diag.backfill_cycle_last_seconds,
        ),
        (
            "slurm_backfill_cycle_mean_seconds",
            "Mean backfill cycle duration" + _RESET_NOTE,
            diag.backfill_cycle_mean_seconds,
        ),
        (
            "slurm_backfill_cycle_max_seconds",
            "Longest backfill cycle" + _RESET_NOTE,
            diag.backfill_cycle_max_seconds,
        ),
        ("slurm_backfill_cycles", "Backfill cycles run" + _RESET_NOTE, diag.backfill_cycle_count),
        ("slurm_backfill_last_depth", "Jobs examined in the last backfill cycle", diag.backfill_last_depth),
        (
            "slurm_backfill_mean_depth",
            "Mean jobs examined per backfill cycle" + _RESET_NOTE,
            diag.backfill_mean_depth,
        ),
        (
            "slurm_backfill_queue_length",
            "Jobs pending in the backfill scheduler's queue",
            diag.backfill_queue_length,
        ),
        ("slurm_backfill_jobs", "Jobs started by backfill" + _RESET_NOTE, diag.backfilled_jobs),
        ("slurm_scheduler_jobs_submitted", "Jobs submitted" + _RESET_NOTE, diag.jobs_submitted),
        ("slurm_scheduler_jobs_started", "Jobs started" + _RESET_NOTE, diag.jobs_started),
        ("slurm_scheduler_jobs_completed", "Jobs completed" + _RESET_NOTE, diag.jobs_completed),
        ("slurm_scheduler_jobs_canceled", "Jobs canceled" + _RESET_NOTE, diag.jobs_canceled),
        ("slurm_scheduler_jobs_failed", "Jobs failed" + _RESET_NOTE, diag.jobs_failed),
        ("slurm_scheduler_server_threads", "slurmctld server threads in use", diag.server_thread_count),
        (
            "slurm_scheduler_agent_queue_size",
            "RPCs queued for slurmctld's agent threads",
            diag.agent_queue_size,
        ),
        ("slurm_scheduler_dbd_agent_queue_size", "Messages queued for slurmdbd", diag.dbd_agent_queue_size),
    )
    for name, doc, value in specs:
        fam = GaugeMetricFamily(name, doc)
        fam.add_metric([], float(value))
        yield fam
    fam = GaugeMetricFamily(
        "slurm_scheduler_stats_reset_timestamp_seconds",
        "When slurmctld last reset its scheduler statistics (epoch seconds)",
    )
    if diag.stats_reset_time is not None:
        fam.add_metric([], diag.stats_reset_time)
    yield fam


def rpc_families(
    diag: Diag, *, per_user: bool = False, top_users: int = DEFAULT_RPC_TOP_USERS
) -> Iterable[Metric]:
    """RPCs slurmctld served, by message type (and by user with ``per_user``); see the module doc."""
    calls = CounterMetricFamily(
        "slurm_rpc_calls",
        "RPCs slurmctld served since it started or sdiag --reset, by message type",
        labels=["type"],
    )
    seconds = CounterMetricFamily(
        "slurm_rpc_time_seconds",
        "Seconds slurmctld spent serving RPCs since it started or sdiag --reset, by message type",
        labels=["type"],
    )
    for name, count in sorted(diag.rpc_counts.items()):
        calls.add_metric([name], float(count))
        seconds.add_metric([name], diag.rpc_seconds.get(name, 0.0))
    yield calls
    yield seconds
    yield from _per_type(
        GaugeMetricFamily,
        "slurm_rpc_queued",
        "RPCs waiting in slurmctld's RPC queue, by message type",
        diag.rpc_queued,
    )
    yield from _per_type(
        CounterMetricFamily,
        "slurm_rpc_dropped",
        "RPCs slurmctld dropped from its RPC queue since it started or sdiag --reset, by message type",
        diag.rpc_dropped,
    )
    yield from _per_type(
        GaugeMetricFamily,
        "slurm_agent_pending_rpcs",
        "Outgoing RPCs to slurmd that slurmctld's agent still has to send, by message type",
        diag.agent_pending_rpcs,
    )
    if not per_user:
        return
    busiest = sorted(diag.rpc_user_counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(top_users, 0)]
    user_calls = CounterMetricFamily(
        "slurm_rpc_user_calls",
        f"RPCs slurmctld served since it started or sdiag --reset, by user (the {top_users} busiest)",
        labels=["user"],
    )
    user_seconds = CounterMetricFamily(
        "slurm_rpc_user_time_seconds",
        f"Seconds slurmctld spent serving RPCs since it started or sdiag --reset, by user (the {top_users} "
        "busiest)",
        labels=["user"],
    )
    for user, count in sorted(busiest):
        user_calls.add_metric([user], float(count))
        user_seconds.add_metric([user], diag.rpc_user_seconds.get(user, 0.0))
    yield user_calls
    yield user_seconds
    yield GaugeMetricFamily(
        "slurm_rpc_users_omitted",
        "Users who sent RPCs but are not among the busiest kept in slurm_rpc_user_calls_total",
        value=float(len(diag.rpc_user_counts) - len(busiest)),
    )


def _per_type(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    doc: str,
    values: Mapping[str, int] | None,
) -> Iterable[Metric]:
    """One ``family`` of ``values`` by message type; nothing when the API does not say (None)."""
    if values is not None:
        yield labelled(family, name, doc, ["type"], {(key,): n for key, n in values.items()})
