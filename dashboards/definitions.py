"""The four dashboards: cluster overview, partitions & autoscaling, scheduler, slurm-keda health.

Each function returns a dashboard builder; :mod:`dashboards.build` turns them into the committed JSON.
Queries name only series slurm-keda exports (``tests/unit/test_dashboards.py`` checks every name against a
live ``/metrics``) plus KEDA's, kube-state-metrics' and Prometheus' own, which are labelled as such.
"""

from __future__ import annotations

from collections.abc import Callable

from grafana_foundation_sdk.builders import dashboard as db

from .panels import CLUSTER, Query, common_variables, data, graph, query_variable, series, single

PARTITION = 'partition=~"$partition"'
TARGET = 'target=~"$target"'
MANAGED = 'source!="default"'
"""Targets that something scales (configured, or asked for by a KEDA trigger)."""
PENDING = 'state="pending"'
ACCOUNT_ROWS = 'user=""'
"""Fair-share rows of accounts (a user's row names the user)."""
TAGS = ["slurm", "slurm-keda"]


def _dashboard(uid: str, title: str, description: str) -> db.Dashboard:
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .readonly()
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
    )


def _partition_variable() -> db.QueryVariable:
    return query_variable(
        "partition", "partition", f"label_values({series('slurm_partition_nodes')}, partition)"
    )


def _sum(metric: str, by: str = "", matchers: str = PARTITION) -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({data(metric, matchers)})"


def overview() -> db.Dashboard:
    dash = _dashboard(
        "slurm-keda-overview",
        "Slurm / Cluster overview",
        "Nodes, CPUs, memory, GPUs and jobs of the selected Slurm clusters and partitions, from slurm-keda.",
    )
    for v in (*common_variables(), _partition_variable()):
        dash = dash.with_variable(v)
    per_partition = " A node in several partitions counts once in each."
    dash = (
        dash.with_row(db.Row("Now"))
        .with_panel(
            single(
                "slurmrestd reachable",
                "1 while every selected exporter fetched jobs, nodes and partitions recently (slurm_up); 0 "
                "means the numbers below are old.",
                "bool_yes_no",
                Query(f"min({series('slurm_up')})"),
            )
        )
        .with_panel(
            single(
                "Nodes",
                "Nodes configured in the selected partitions." + per_partition,
                "short",
                Query(_sum("slurm_partition_nodes")),
            )
        )
        .with_panel(
            single(
                "Running jobs",
                "Jobs running in the selected partitions.",
                "short",
                Query(_sum("slurm_jobs", matchers=f'{PARTITION}, state="running"')),
            )
        )
        .with_panel(
            single(
                "Pending jobs",
                "Jobs pending in the selected partitions (array tasks one by one; a job pending in several "
                "partitions counts in each).",
                "short",
                Query(_sum("slurm_jobs", matchers=f'{PARTITION}, state="pending"')),
            )
        )
        .with_panel(
            single(
                "CPUs allocated",
                "Allocated share of the selected partitions' CPUs.",
                "percentunit",
                Query(f"{_sum('slurm_partition_allocated_cpus')} / {_sum('slurm_partition_cpus')}"),
            )
        )
        .with_panel(
            single(
                "GPUs allocated",
                "Allocated share of the selected partitions' GPUs (no value without GPUs).",
                "percentunit",
                Query(f"{_sum('slurm_partition_allocated_gpus')} / {_sum('slurm_partition_gpus')}"),
            )
        )
        .with_row(db.Row("Nodes"))
        .with_panel(
            graph(
                "Nodes by state",
                "Nodes by base state (idle, mixed, allocated, down, ...)." + per_partition,
                "short",
                Query(_sum("slurm_nodes", "state"), "{{state}}"),
                stacked=True,
            )
        )
        .with_panel(
            graph(
                "Nodes by flag",
                "Nodes by state flag (drain, not_responding, powered_down, powering_up, ...): a node has any "
                "number of flags, so these do not add up to the node count." + per_partition,
                "short",
                Query(_sum("slurm_nodes_flagged", "flag"), "{{flag}}"),
            )
        )
        .with_row(db.Row("Resources"))
    )
    for title, metric, unit in (
        ("CPUs", "cpus", "short"),
        ("Memory", "memory_bytes", "bytes"),
        ("GPUs", "gpus", "short"),
    ):
        dash = dash.with_panel(
            graph(
                title,
                f"{title} of the selected partitions: allocated to jobs, idle, and in total." + per_partition,
                unit,
                Query(_sum(f"slurm_partition_allocated_{metric}"), "allocated"),
                Query(_sum(f"slurm_partition_idle_{metric}"), "idle"),
                Query(_sum(f"slurm_partition_{metric}"), "total"),
                width=8,
            )
        )
    dash = (
        dash.with_row(db.Row("Jobs"))
        .with_panel(
            graph(
                "Jobs by state",
                "Jobs by base state in the selected partitions.",
                "short",
                Query(_sum("slurm_jobs", "state"), "{{state}}"),
                stacked=True,
            )
        )
        .with_panel(
            graph(
                "Pending jobs by reason",
                "Pending jobs by Slurm's pending reason: Resources and Priority wait for nodes; Dependency, "
                "BeginTime, held and limit reasons do not (the autoscaler ignores those).",
                "short",
                Query(_sum("slurm_jobs_pending", "reason"), "{{reason}}"),
                stacked=True,
            )
        )
        .with_panel(
            graph(
                "How long pending jobs have waited",
                "Seconds since the oldest pending job of the selected partitions was submitted, by reason, "
                "and the median and 90th percentile wait of every pending job now (array tasks one by one).",
                "s",
                Query(
                    "time() - min by (reason) "
                    f"({series('slurm_jobs_pending_oldest_submit_timestamp_seconds', PARTITION)})",
                    "oldest, {{reason}}",
                ),
                *(
                    Query(
                        f"histogram_quantile({q}, sum by (le) (max without (instance, pod) "
                        f"({series('slurm_jobs_pending_age_seconds_bucket', PARTITION)})))",
                        f"p{int(q * 100)}",
                    )
                    for q in (0.5, 0.9)
                ),
            )
        )
        .with_panel(
            graph(
                "Pending CPUs and GPUs",
                "CPUs and GPUs requested by pending jobs in the selected partitions.",
                "short",
                Query(_sum("slurm_jobs_pending_cpus"), "CPUs"),
                Query(_sum("slurm_jobs_pending_gpus"), "GPUs"),
            )
        )
        .with_panel(
            graph(
                "Licenses in use",
                "Slurm licenses used and total, by license.",
                "short",
                Query(f"sum by (license) ({data('slurm_licenses_used')})", "{{license}} used"),
                Query(f"sum by (license) ({data('slurm_licenses')})", "{{license}} total"),
            )
        )
        .with_row(db.Row("Users and accounts"))
    )
    for who in ("user", "account"):
        dash = dash.with_panel(
            graph(
                f"Top {who}s by allocated CPUs",
                f"The ten {who}s with the most allocated CPUs (needs slurm-keda --metrics-per-{who}).",
                "short",
                Query(f"topk(10, sum by ({who}) ({data(f'slurm_{who}_allocated_cpus')}))", f"{{{{{who}}}}}"),
                width=8,
            )
        )
    return dash.with_panel(
        graph(
            "Top users by pending jobs",
            "The ten users with the most pending jobs (needs slurm-keda --metrics-per-user).",
            "short",
            Query(f"topk(10, sum by (user) ({data('slurm_user_jobs', PENDING)}))", "{{user}}"),
            width=8,
        )
    )


IDLE_UNNEEDED = (
    f"(sum by (cluster, job, target) ({data('slurm_autoscaler_target_nodes', TARGET)})"
    f" - sum by (cluster, job, target) ({data('slurm_autoscaler_busy_nodes', TARGET)}))"
    " and on (cluster, job, target)"
    f" (sum by (cluster, job, target) ({data('slurm_autoscaler_pending_eligible_jobs', TARGET)})"
    " == 0)"
)
"""Nodes of a target with nothing to run while no pending job could use them: what a slow scale-down costs."""


def autoscaling() -> db.Dashboard:
    dash = _dashboard(
        "slurm-keda-autoscaling",
        "Slurm / Partitions & autoscaling",
        "Per scaling target: the nodes Slurm has, the nodes busy, the nodes slurm-keda asks KEDA for, the "
        "pending jobs behind that answer, and what KEDA and the HPA did with it.",
    )
    for v in (
        *common_variables(),
        query_variable("target", "target", f"label_values({series('slurm_autoscaler_target_info')}, target)"),
        query_variable(
            "scaledobject",
            "ScaledObject",
            f"label_values(keda_scaler_metrics_value{{{CLUSTER}}}, scaledObject)",
        ),
    ):
        dash = dash.with_variable(v)
    dash = (
        dash.with_row(db.Row("Supply and demand"))
        .with_panel(
            graph(
                "Nodes of $target",
                "target: nodes of the target in Slurm (any state); busy: nodes with allocated CPUs or jobs "
                "(the "
                "floor); needed: new nodes the eligible pending jobs need; desired: clamp(busy + needed, "
                "min, "
                "max), the value the KEDA scaler serves. desired above target means a scale-up is due, below "
                "means a scale-down is.",
                "short",
                Query(f"sum ({data('slurm_autoscaler_target_nodes', TARGET)})", "target"),
                Query(f"sum ({data('slurm_autoscaler_busy_nodes', TARGET)})", "busy"),
                Query(f"sum ({data('slurm_autoscaler_needed_nodes', TARGET)})", "needed"),
                Query(f"sum ({data('slurm_autoscaler_desired_nodes', TARGET)})", "desired"),
                width=12,
            ).repeat("target")
        )
        .with_row(db.Row("Pending jobs"))
        .with_panel(
            graph(
                "Eligible pending jobs",
                "Pending jobs that more nodes would let start, by target (array tasks one by one).",
                "short",
                Query(
                    f"sum by (target) ({data('slurm_autoscaler_pending_eligible_jobs', TARGET)})",
                    "{{target}}",
                ),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Ignored pending jobs by reason",
                "Pending jobs more nodes would not help (dependencies, holds, begin times, limits), by "
                "target "
                "and Slurm's pending reason.",
                "short",
                Query(
                    f"sum by (target, reason) ({data('slurm_autoscaler_pending_ignored_jobs', TARGET)})",
                    "{{target}} {{reason}}",
                ),
                stacked=True,
                width=8,
            )
        )
        .with_panel(
            graph(
                "Too-large jobs",
                "Pending jobs that can never run on the target: larger than its node shape or its max.",
                "short",
                Query(
                    f"sum by (target) ({data('slurm_autoscaler_pending_too_large_jobs', TARGET)})",
                    "{{target}}",
                ),
                width=8,
            )
        )
        .with_row(db.Row("KEDA and the HPA"))
        .with_panel(
            graph(
                "KEDA metric value",
                "keda_scaler_metrics_value from KEDA's operator metrics: what KEDA read from slurm-keda per "
                "ScaledObject (empty unless Prometheus scrapes KEDA).",
                "short",
                Query(
                    f'keda_scaler_metrics_value{{{CLUSTER}, scaledObject=~"$scaledobject"}}',
                    "{{namespace}}/{{scaledObject}} {{metric}}",
                ),
            )
        )
        .with_panel(
            graph(
                "HPA replicas",
                "Current and desired replicas of KEDA's HPAs (keda-hpa-<ScaledObject>) from "
                "kube-state-metrics "
                "(empty unless Prometheus scrapes it). Replicas lag desired nodes by the HPA's sync and "
                "stabilisation windows.",
                "short",
                Query(
                    "kube_horizontalpodautoscaler_status_current_replicas"
                    f'{{{CLUSTER}, horizontalpodautoscaler=~"keda-hpa-($scaledobject)"}}',
                    "{{horizontalpodautoscaler}} current",
                ),
                Query(
                    "kube_horizontalpodautoscaler_status_desired_replicas"
                    f'{{{CLUSTER}, horizontalpodautoscaler=~"keda-hpa-($scaledobject)"}}',
                    "{{horizontalpodautoscaler}} desired",
                ),
            )
        )
        .with_row(db.Row("Cost and staleness"))
        .with_panel(
            graph(
                "Idle nodes while nothing eligible pends",
                "Nodes of a target with no job while no pending job could use one: the cost of a slow or "
                "held "
                "scale-down (KEDA's cooldown, the HPA's stabilisation window, minReplicaCount).",
                "short",
                Query(f"sum by (target) ({IDLE_UNNEEDED})", "{{target}}"),
                width=8,
            )
        )
        .with_panel(
            single(
                "Idle node-hours in range",
                "Node-hours spent idle with nothing eligible pending over the dashboard's time range, all "
                "selected targets.",
                "h",
                Query(f"sum(avg_over_time(({IDLE_UNNEEDED})[$__range:]))  * $__range_s / 3600"),
                width=4,
            )
        )
        .with_panel(
            graph(
                "Scaler data stale",
                "1 while the scaler's snapshot is older than --demand-stale-after: it then holds every "
                "target "
                "where it is (no scale-down on old data) and KEDA sees an error.",
                "bool_yes_no",
                Query(f"max by (instance) ({series('slurm_autoscaler_stale')})", "{{instance}}"),
                width=12,
            )
        )
        .with_row(db.Row("Partitions"))
        .with_panel(
            graph(
                "Nodes per partition",
                "Nodes configured in each partition.",
                "short",
                Query(f"sum by (partition) ({data('slurm_partition_nodes')})", "{{partition}}"),
            )
        )
        .with_panel(
            graph(
                "CPUs allocated per partition",
                "Allocated share of each partition's CPUs.",
                "percentunit",
                Query(
                    f"sum by (partition) ({data('slurm_partition_allocated_cpus')})"
                    f" / sum by (partition) ({data('slurm_partition_cpus')})",
                    "{{partition}}",
                ),
            )
        )
    )
    return dash


def scheduler() -> db.Dashboard:
    dash = _dashboard(
        "slurm-keda-scheduler",
        "Slurm / Scheduler",
        "slurmctld's scheduler statistics (sdiag), from slurm-keda. slurmctld resets them at midnight and on "
        "sdiag --reset.",
    )
    for v in common_variables():
        dash = dash.with_variable(v)

    def per_minute(metric: str, legend: str) -> Query:
        # slurmctld's counts are reset at midnight: rate() treats the drop as a counter reset
        return Query(
            f"sum (max without (instance, pod) (rate({series(metric)}[$__rate_interval]))) * 60", legend
        )

    dash = dash.with_row(db.Row("Cycles"))
    for title, who, prefix in (
        ("Main scheduling cycle", "main scheduler", "slurm_scheduler"),
        ("Backfill cycle", "backfill scheduler", "slurm_backfill"),
    ):
        dash = dash.with_panel(
            graph(
                title,
                f"Duration of the {who}'s last cycle, and its mean and max since the last reset.",
                "s",
                *(
                    Query(f"max ({series(f'{prefix}_cycle_{stat}_seconds')})", stat)
                    for stat in ("last", "mean", "max")
                ),
            )
        )
    dash = (
        dash.with_panel(
            graph(
                "Cycles per minute",
                "Main and backfill cycles run per minute.",
                "opm",
                per_minute("slurm_scheduler_cycles", "main"),
                per_minute("slurm_backfill_cycles", "backfill"),
            )
        )
        .with_panel(
            graph(
                "Depth",
                "Jobs looked at per cycle: the main scheduler's mean, the backfill's last and mean.",
                "short",
                Query(f"max ({series('slurm_scheduler_mean_depth')})", "main mean"),
                Query(f"max ({series('slurm_backfill_last_depth')})", "backfill last"),
                Query(f"max ({series('slurm_backfill_mean_depth')})", "backfill mean"),
            )
        )
        .with_row(db.Row("Queue and load"))
        .with_panel(
            graph(
                "Queue length",
                "Jobs in the main scheduler's and the backfill scheduler's queues at their last cycle.",
                "short",
                Query(f"max ({series('slurm_scheduler_queue_length')})", "main"),
                Query(f"max ({series('slurm_backfill_queue_length')})", "backfill"),
            )
        )
        .with_panel(
            graph(
                "Jobs per minute",
                "Jobs submitted, started, completed, cancelled and failed per minute, and jobs started by "
                "backfill.",
                "opm",
                per_minute("slurm_scheduler_jobs_submitted", "submitted"),
                per_minute("slurm_scheduler_jobs_started", "started"),
                per_minute("slurm_scheduler_jobs_completed", "completed"),
                per_minute("slurm_scheduler_jobs_canceled", "cancelled"),
                per_minute("slurm_scheduler_jobs_failed", "failed"),
                per_minute("slurm_backfill_jobs", "backfilled"),
            )
        )
        .with_panel(
            graph(
                "Server threads",
                "slurmctld threads serving RPCs; near its limit (256) requests queue.",
                "short",
                Query(f"max ({series('slurm_scheduler_server_threads')})", "threads"),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Agent queues",
                "Messages waiting in slurmctld's agent queue (to slurmds) and its slurmdbd queue; a growing "
                "dbd "
                "queue means slurmdbd is not keeping up or is down.",
                "short",
                Query(f"max ({series('slurm_scheduler_agent_queue_size')})", "agent"),
                Query(f"max ({series('slurm_scheduler_dbd_agent_queue_size')})", "dbd agent"),
                width=8,
            )
        )
        .with_row(db.Row("RPC load"))
        .with_panel(
            graph(
                "RPCs per second, by type",
                "The ten message types slurmctld served most over the range (slurm_rpc_calls_total).",
                "reqps",
                Query(
                    f"topk(10, sum by (type) (max without (instance, pod) "
                    f"(rate({series('slurm_rpc_calls_total')}[$__rate_interval]))))",
                    "{{type}}",
                ),
            )
        )
        .with_panel(
            graph(
                "slurmctld busy serving RPCs, by type",
                "Seconds slurmctld spent per second serving each type (several threads: can pass 1).",
                "s",
                Query(
                    f"topk(10, sum by (type) (max without (instance, pod) "
                    f"(rate({series('slurm_rpc_time_seconds_total')}[$__rate_interval]))))",
                    "{{type}}",
                ),
            )
        )
        .with_panel(
            graph(
                "RPCs per second, by user",
                "The ten users who sent most RPCs (needs --metrics-per-user; slurm-keda's own token user is "
                "one of them).",
                "reqps",
                Query(
                    f"topk(10, sum by (user) (max without (instance, pod) "
                    f"(rate({series('slurm_rpc_user_calls_total')}[$__rate_interval]))))",
                    "{{user}}",
                ),
            )
        )
        .with_panel(
            graph(
                "RPCs waiting and dropped",
                "RPCs queued in slurmctld (enable_rpc_queue), dropped from that queue per minute, and "
                "outgoing RPCs the agent still has to send to slurmd (24.11+).",
                "short",
                Query(f"sum (max without (instance, pod) ({series('slurm_rpc_queued')}))", "queued"),
                Query(
                    f"sum (max without (instance, pod) "
                    f"(rate({series('slurm_rpc_dropped_total')}[$__rate_interval]))) * 60",
                    "dropped per minute",
                ),
                Query(
                    f"sum (max without (instance, pod) ({series('slurm_agent_pending_rpcs')}))",
                    "agent pending",
                ),
            )
        )
        .with_panel(
            single(
                "Since the statistics reset",
                "Time since slurmctld last reset these statistics (midnight, sdiag --reset).",
                "s",
                Query(f"time() - max ({series('slurm_scheduler_stats_reset_timestamp_seconds')})"),
                width=8,
            )
        )
    )
    return dash


def health() -> db.Dashboard:
    dash = _dashboard(
        "slurm-keda-health",
        "Slurm / slurm-keda health",
        "The exporter's own health: slurmrestd reachability, poll durations and errors, data age, scrapes, "
        "and "
        "the bridge.",
    )
    for v in common_variables():
        dash = dash.with_variable(v)
    dash = (
        dash.with_row(db.Row("Now"))
        .with_panel(
            single(
                "slurmrestd reachable",
                "1 while jobs, nodes and partitions were all fetched within --up-max-age (slurm_up).",
                "bool_yes_no",
                Query(f"min ({series('slurm_up')})"),
            )
        )
        .with_panel(
            single(
                "Data age",
                "Seconds since the oldest of the jobs, nodes and partitions data was fetched or confirmed.",
                "s",
                Query(f"max ({series('slurm_exporter_data_age_seconds')})"),
            )
        )
        .with_panel(
            single(
                "Scaler stale",
                "1 while the KEDA scaler holds targets on old data (no value without the autoscaler).",
                "bool_yes_no",
                Query(f"max ({series('slurm_autoscaler_stale')})"),
            )
        )
        .with_panel(
            single(
                "Bridge leaders",
                "Replicas holding the bridge's Lease: 1 is healthy, 0 means pods wait, 2 must never last "
                "(no value without the bridge).",
                "short",
                Query(f"sum ({series('slurm_bridge_leader')})"),
            )
        )
        .with_panel(
            single(
                "Scrape duration",
                "How long Prometheus' last scrape of slurm-keda took (scrape_duration_seconds, Prometheus' "
                "own).",
                "s",
                Query(f"max ({series('scrape_duration_seconds')})"),
            )
        )
        .with_panel(
            single(
                "HTTP connections",
                "Open connections to slurm-keda's HTTP server, of --http-max-connections.",
                "short",
                Query(f"sum ({series('slurm_exporter_http_connections')})"),
            )
        )
        .with_row(db.Row("Polls"))
        .with_panel(
            graph(
                "Poll duration by endpoint",
                "Seconds the last fetch of each slurmrestd endpoint took, decoding included.",
                "s",
                Query(
                    f"max by (endpoint) ({series('slurm_exporter_poll_duration_seconds')})", "{{endpoint}}"
                ),
            )
        )
        .with_panel(
            graph(
                "Poll errors",
                "Failed fetches per second by endpoint and kind (unreachable, timeout, token, bad_response, "
                "not_json, truncated, too_large, shape, ...).",
                "ops",
                Query(
                    "sum by (endpoint, kind) "
                    f"(rate({series('slurm_exporter_poll_errors_total')}[$__rate_interval]))",
                    "{{endpoint}} {{kind}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Snapshot and data age",
                "Seconds since the served snapshot was taken, and since the oldest of its jobs, nodes and "
                "partitions data was fetched.",
                "s",
                Query(f"max ({series('slurm_exporter_snapshot_age_seconds')})", "snapshot"),
                Query(f"max ({series('slurm_exporter_data_age_seconds')})", "data"),
            )
        )
        .with_panel(
            graph(
                "Records dropped",
                "Records slurmrestd sent with impossible values and that were dropped, per endpoint, in each "
                "interval.",
                "short",
                Query(
                    "sum by (endpoint) "
                    f"(increase({series('slurm_exporter_records_dropped_total')}[$__rate_interval]))",
                    "{{endpoint}}",
                ),
                bars=True,
            )
        )
        .with_row(db.Row("Bridge"))
        .with_panel(
            graph(
                "Bridge pods by phase",
                "Pods naming the bridge as their scheduler: waiting for Slurm, bound, refused by policy.",
                "short",
                Query(f"sum by (phase) ({series('slurm_bridge_pods')})", "{{phase}}"),
                stacked=True,
                width=8,
            )
        )
        .with_panel(
            graph(
                "Bridge actions",
                "Actions applied per second: submit, bind, cancel, delete, waiting, refuse.",
                "ops",
                Query(
                    f"sum by (action) (rate({series('slurm_bridge_actions_total')}[$__rate_interval]))",
                    "{{action}}",
                ),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Bridge errors",
                "Failed actions per second by action and error kind.",
                "ops",
                Query(
                    f"sum by (action, kind) (rate({series('slurm_bridge_errors_total')}[$__rate_interval]))",
                    "{{action}} {{kind}}",
                ),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Bind latency",
                "Seconds from the Slurm job's start (RUNNING) to the pod's binding: mean over the interval, "
                "and the last binding's.",
                "s",
                Query(
                    f"sum (rate({series('slurm_bridge_bind_latency_seconds_sum_total')}[$__rate_interval]))"
                    f" / sum (rate({series('slurm_bridge_bindings_total')}[$__rate_interval]))",
                    "mean",
                ),
                Query(f"max ({series('slurm_bridge_bind_latency_seconds')})", "last"),
            )
        )
        .with_panel(
            graph(
                "Oldest waiting pod",
                "Age of the oldest pod waiting for Slurm (no value while none waits).",
                "s",
                Query(
                    f"time() - min ({series('slurm_bridge_oldest_waiting_pod_created_timestamp_seconds')})",
                    "age",
                ),
            )
        )
    )
    return dash


def accounting() -> db.Dashboard:
    dash = _dashboard(
        "slurm-keda-accounting",
        "Slurm / Accounting & fair share",
        "Jobs that ended (from slurmdbd, counted from each slurm-keda's start: read rates, not totals), how "
        "long they waited and ran, how well they used their CPUs, and fair share by account and user "
        "(--metrics-fairshare).",
    )
    for v in common_variables():
        dash = dash.with_variable(v)
    dash = dash.with_variable(_partition_variable())

    def rate(metric: str, by: str = "", matchers: str = PARTITION) -> str:
        grouping = f" by ({by})" if by else ""
        inner = f"rate({series(metric, matchers)}[$__rate_interval])"
        return f"sum{grouping} (max without (instance, pod) ({inner}))"

    def quantiles(metric: str, *qs: float) -> list[Query]:
        return [
            Query(f"histogram_quantile({q}, {rate(f'{metric}_bucket', 'le')})", f"p{int(q * 100)}")
            for q in qs
        ]

    failed = 'state=~"FAILED|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL"'
    return (
        dash.with_row(db.Row("Jobs that ended"))
        .with_panel(
            graph(
                "Jobs ended per hour, by final state",
                "Jobs of the selected partitions that ended, by state, per hour.",
                "short",
                Query(f"{rate('slurm_jobs_ended_total', 'state')} * 3600", "{{state}}"),
                stacked=True,
            )
        )
        .with_panel(
            graph(
                "Share of ended jobs that failed",
                "FAILED, NODE_FAIL, OUT_OF_MEMORY and BOOT_FAIL over every ended job (SlurmJobsFailing fires "
                "over one half).",
                "percentunit",
                Query(
                    f"{rate('slurm_jobs_ended_total', matchers=PARTITION + ', ' + failed)}"
                    f" / {rate('slurm_jobs_ended_total')}",
                    "failed",
                ),
            )
        )
        .with_row(db.Row("Waiting, running, efficiency"))
        .with_panel(
            graph(
                "Wait before start",
                "Submit to start of the jobs that ended (median and 90th percentile).",
                "s",
                *quantiles("slurm_job_wait_seconds", 0.5, 0.9),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Run time",
                "Run time of the jobs that ended (median and 90th percentile).",
                "s",
                *quantiles("slurm_job_run_seconds", 0.5, 0.9),
                width=8,
            )
        )
        .with_panel(
            graph(
                "CPU efficiency",
                "CPU time used over run time x CPUs held, of the jobs that ended (10th percentile, median).",
                "percentunit",
                *quantiles("slurm_job_cpu_efficiency", 0.1, 0.5),
                width=8,
            )
        )
        .with_panel(
            graph(
                "Memory efficiency",
                "Peak memory of the largest step (its tasks' RSS summed) over the memory held, of the ended "
                "jobs jobacct_gather sampled (10th percentile, median, 90th: above 100 % is a job over its "
                "allocation without a cgroup limit).",
                "percentunit",
                *quantiles("slurm_job_memory_efficiency", 0.1, 0.5, 0.9),
            )
        )
        .with_panel(
            graph(
                "CPUs and GPUs held and used by ended jobs",
                "CPU- and GPU-seconds per second: the average number of CPUs and GPUs the ended jobs held, "
                "and of CPUs they kept busy.",
                "short",
                Query(rate("slurm_jobs_cpu_seconds_allocated_total"), "CPUs held"),
                Query(rate("slurm_jobs_cpu_seconds_used_total"), "CPUs busy"),
                Query(rate("slurm_jobs_gpu_seconds_allocated_total"), "GPUs held"),
            )
        )
        .with_row(db.Row("Fair share"))
        .with_panel(
            graph(
                "Fair-share factor, by user",
                "Each user's fair-share factor (1: under their share, 0: far over it).",
                "short",
                Query(
                    f"min by (account, user) ({series('slurm_share_fairshare_factor')})",
                    "{{account}}/{{user}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Usage against shares, by account",
                "Each account's normalised usage and normalised shares: usage above shares lowers its users' "
                "fair share.",
                "percentunit",
                Query(
                    f"max by (account) ({series('slurm_share_normalized_usage', ACCOUNT_ROWS)})",
                    "{{account}} usage",
                ),
                Query(
                    f"max by (account) ({series('slurm_share_normalized_shares', ACCOUNT_ROWS)})",
                    "{{account}} shares",
                ),
            )
        )
    )


DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "slurm-overview": overview,
    "slurm-autoscaling": autoscaling,
    "slurm-scheduler": scheduler,
    "slurm-keda-health": health,
    "slurm-accounting": accounting,
}
"""File stem (``dashboards/<stem>.json``) → builder."""
