"""The exporter's client and poller configurations, from the settings: one place for ``serve``, the one-shot
commands (``snapshot``, ``demand``, ``explain``), the tests and the benchmarks."""

from __future__ import annotations

from exporter.client import ClientConfig, TokenSource
from exporter.model import ENDPOINTS
from exporter.pollstate import PollerConfig

from .settings import PollSettings, SlurmSettings


def client_config(s: SlurmSettings) -> ClientConfig:
    return ClientConfig(
        base_url=s.url,
        token=TokenSource(token=s.jwt_value(), token_file=s.token_file),
        user_name=s.user_name,
        timeout=s.request_timeout,
        stream_timeout=s.stream_timeout,
        idle_timeout=s.stream_idle_timeout,
        min_rate=s.min_transfer_rate,
        max_body_bytes=s.max_body_bytes,
        max_record_bytes=s.max_record_bytes,
        retries=s.retries,
        max_concurrency=s.max_concurrency,
        tls_ca_file=s.tls_ca_file,
        tls_insecure=s.tls_insecure,
    )


CONF_INTERVAL = 300.0
"""Seconds between reads of slurmctld's configuration (it changes with ``scontrol reconfigure`` only)."""


def poller_config(s: PollSettings, *, fairshare: bool = False) -> PollerConfig:
    """The poller's configuration; ``fairshare``: /shares is fetched too (every ``--shares-interval``)."""
    return PollerConfig(
        endpoints=(
            *ENDPOINTS,
            *(("shares",) if fairshare else ()),
            *(("slurmdb_jobs", "qos", "associations") if s.accounting else ()),
            "conf",  # where offered (26.05+)
        ),
        intervals={
            "shares": s.shares_interval,
            "slurmdb_jobs": s.accounting_interval,
            "qos": s.limits_interval,
            "associations": s.limits_interval,
            "conf": CONF_INTERVAL,
        },
        interval=s.interval,
        standby_interval=s.standby_interval,
        use_update_time=s.use_update_time,
        full_refresh=s.full_refresh,
        incremental_jobs=s.incremental_jobs,
        jobs_full_refresh=s.jobs_full_refresh,
        jobs_sweep_rate=s.jobs_sweep_rate,
        jobs_recheck_rate=s.jobs_recheck_rate,
        jobs_changes_limit=s.jobs_changes_limit,
        jobs_listing_max=s.jobs_listing_max,
        jobs_states_targeted_min=s.jobs_states_targeted_min,
        jobs_states_full_every=s.jobs_states_full_every,
        jobs_states_pending_budget=s.jobs_states_pending_budget,
        up_max_age=s.up_max_age,
    )
