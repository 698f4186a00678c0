"""Prometheus alerting and recording rules for slurm-keda's metrics (monitoring-mixin conventions).

- Alerts are CamelCase with a ``Slurm`` prefix; ``severity`` is ``critical`` (pages), ``warning`` (a ticket)
  or ``info`` (not routed); annotations are ``summary`` (one sentence), a templated ``description`` and
  ``runbook_url`` (a section of ``docs/runbook.md`` named after the alert).
- Recording rules are named ``level:metric:operations``.
- Every expression keeps ``cluster``, ``job`` and ``instance`` (one Prometheus may scrape many clusters).

:func:`groups` is the rule file's content; ``make dashboards`` writes it to ``dashboards/rules/`` and wraps
it in ``deploy/base/prometheusrule.yaml``. ``dashboards/rules/tests.yaml`` holds the ``promtool test rules``
cases: every alert fires in one and must stay silent in another (``tests/unit/test_rules.py`` checks both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

JOB = 'job="slurm-keda"'
"""How the rules find slurm-keda's own scrape targets (the ServiceMonitor's job label; change with it)."""
RUNBOOK = "https://github.com/slurm-keda/slurm-keda/blob/main/docs/runbook.md"
BY = "cluster, job, instance"
FAILURES = "FAILED|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL"
"""Final states that say a job failed (not TIMEOUT, CANCELLED or PREEMPTED: a user's or a policy's doing)."""
MANAGED = f'on ({BY}, target) group_left slurm_autoscaler_target_info{{source!="default"}}'
"""Join keeping targets that something scales (configured or asked for by a KEDA trigger)."""

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{RUNBOOK}#{self.name.lower()}",
            },
        }


@dataclass(frozen=True)
class Record:
    record: str
    expr: str

    def rule(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr}


RECORDS = (
    Record(
        "partition:slurm_nodes_not_responding:sum",
        f'sum by ({BY}, partition) (slurm_nodes_flagged{{flag="not_responding"}})'
        f' - (sum by ({BY}, partition) (slurm_nodes_flagged{{flag="powering_up"}})'
        f' or sum by ({BY}, partition) (slurm_nodes_flagged{{flag="not_responding"}}) * 0)',
    ),
    Record(
        "partition:slurm_cpus_allocated:ratio",
        f"sum by ({BY}, partition) (slurm_partition_allocated_cpus)"
        f" / sum by ({BY}, partition) (slurm_partition_cpus)",
    ),
    Record(
        "target:slurm_autoscaler_missing_nodes:clamp_min0",
        f"clamp_min(slurm_autoscaler_desired_nodes - slurm_autoscaler_target_nodes, 0) * {MANAGED}",
    ),
    Record(
        "target:slurm_autoscaler_surplus_nodes:clamp_min0",
        f"clamp_min(slurm_autoscaler_target_nodes - slurm_autoscaler_desired_nodes, 0) * {MANAGED}",
    ),
    Record(
        "target:slurm_autoscaler_idle_unneeded_nodes:sum",
        f"sum by ({BY}, target) (slurm_autoscaler_target_nodes - slurm_autoscaler_busy_nodes)"
        f" and on ({BY}, target) (slurm_autoscaler_pending_eligible_jobs == 0)",
    ),
    Record(
        "instance:slurm_exporter_poll_errors:rate5m",
        f"sum by ({BY}, endpoint, kind) (rate(slurm_exporter_poll_errors_total[5m]))",
    ),
    Record(
        "instance:slurm_bridge_errors:rate5m",
        f"sum by ({BY}, action, kind) (rate(slurm_bridge_errors_total[5m]))",
    ),
    Record(
        "instance:slurm_bridge_bind_latency_seconds:mean5m",
        f"sum by ({BY}) (rate(slurm_bridge_bind_latency_seconds_sum_total[5m]))"
        f" / sum by ({BY}) (rate(slurm_bridge_bindings_total[5m]) > 0)",
    ),
)

ALERTS = (
    Alert(
        "SlurmExporterDown",
        f"up{{{JOB}}} == 0",
        "5m",
        "critical",
        "Prometheus cannot scrape slurm-keda.",
        "{{ $labels.instance }} of {{ $labels.job }} has not been scraped for 5 minutes: no Slurm metrics, "
        "no autoscaler data from it.",
    ),
    Alert(
        "SlurmExporterAbsent",
        f"absent(up{{{JOB}}})",
        "15m",
        "critical",
        "No slurm-keda target is known to Prometheus.",
        "Prometheus has no scrape target with " + JOB + " (a removed ServiceMonitor or Deployment?).",
    ),
    Alert(
        "SlurmRestdUnreachable",
        "slurm_up == 0",
        "5m",
        "critical",
        "slurm-keda cannot get jobs, nodes and partitions from slurmrestd.",
        "{{ $labels.instance }} has had no complete poll of slurmrestd for 5 minutes; it serves its last "
        "good snapshot, and the autoscaler holds every target where it is.",
    ),
    Alert(
        "SlurmSnapshotStale",
        "slurm_exporter_data_age_seconds > 300",
        "5m",
        "warning",
        "The Slurm data slurm-keda serves is more than 5 minutes old.",
        "The oldest of jobs, nodes and partitions on {{ $labels.instance }} is "
        "{{ $value | humanizeDuration }} "
        "old (slurmrestd slow or failing).",
    ),
    Alert(
        "SlurmExporterPollErrors",
        "instance:slurm_exporter_poll_errors:rate5m > 0",
        "15m",
        "warning",
        "slurm-keda's polls of slurmrestd keep failing.",
        '{{ $labels.instance }}: {{ printf "%.2f" $value }} failed fetches per second of '
        "{{ $labels.endpoint }} "
        "({{ $labels.kind }}) for 15 minutes.",
    ),
    Alert(
        "SlurmNodesDown",
        f'sum by ({BY}, partition) (slurm_nodes{{state="down"}}) > 0',
        "10m",
        "warning",
        "Slurm nodes are down.",
        "{{ $value }} node(s) of partition {{ $labels.partition }} are down.",
    ),
    Alert(
        "SlurmNodesDrained",
        f'sum by ({BY}, partition) (slurm_nodes_flagged{{flag="drain"}}) > 0',
        "30m",
        "warning",
        "Slurm nodes are drained or draining.",
        "{{ $value }} node(s) of partition {{ $labels.partition }} have been drained (or draining) for 30 "
        "minutes: capacity is lost until someone resumes them.",
    ),
    Alert(
        "SlurmNodesNotResponding",
        "partition:slurm_nodes_not_responding:sum > 0",
        "10m",
        "warning",
        "Slurm nodes do not respond to slurmctld.",
        "{{ $value }} node(s) of partition {{ $labels.partition }} are not responding (nodes still powering "
        "up are not counted).",
    ),
    Alert(
        "SlurmDemandUnmet",
        "target:slurm_autoscaler_missing_nodes:clamp_min0 > 0"
        f" and on ({BY}, target) slurm_autoscaler_pending_eligible_jobs > 0",
        "15m",
        "warning",
        "A scaling target has had fewer nodes than its pending jobs need for 15 minutes.",
        "Target {{ $labels.target }} (partition {{ $labels.partition }}) lacks {{ $value }} node(s) while "
        "eligible jobs pend: KEDA, the HPA, the NodeSet or node provisioning is not keeping up.",
    ),
    Alert(
        "SlurmAutoscalerStale",
        "slurm_autoscaler_stale == 1",
        "5m",
        "warning",
        "The autoscaler is holding every target on stale data.",
        "{{ $labels.instance }}'s snapshot is older than --demand-stale-after: KEDA gets errors, nothing "
        "scales up or down.",
    ),
    Alert(
        "SlurmScaleDownStuck",
        f"target:slurm_autoscaler_surplus_nodes:clamp_min0 > 0 and on ({BY}, target)"
        " target:slurm_autoscaler_idle_unneeded_nodes:sum > 0",
        "30m",
        "warning",
        "A scaling target keeps idle nodes it does not need.",
        "Target {{ $labels.target }} has had {{ $value }} node(s) more than desired, idle with nothing "
        "eligible pending, for 30 minutes (cooldown, stabilisation window, minReplicaCount or a stuck "
        "NodeSet?).",
    ),
    Alert(
        "SlurmSchedulerCycleSlow",
        "avg_over_time(slurm_scheduler_cycle_last_seconds[10m]) > 2",
        "15m",
        "warning",
        "slurmctld's main scheduling cycle is slow.",
        "The main scheduler's cycles on {{ $labels.instance }} averaged {{ $value | humanizeDuration }} over "
        "10 minutes (RPCs wait while it runs).",
    ),
    Alert(
        "SlurmRPCUserBusy",
        "rate(slurm_rpc_user_calls_total[5m]) > 100",
        "10m",
        "warning",
        "One user sends slurmctld more than 100 RPCs a second.",
        "{{ $labels.user }} sent slurmctld {{ $value | humanize }} RPCs a second for 15 minutes "
        "({{ $labels.instance }}; needs --metrics-per-user).",
    ),
    Alert(
        "SlurmJobsFailing",
        f'sum by ({BY}, partition) (increase(slurm_jobs_ended_total{{state=~"{FAILURES}"}}[1h])) > 10'
        f' and sum by ({BY}, partition) (increase(slurm_jobs_ended_total{{state=~"{FAILURES}"}}[1h]))'
        f" / sum by ({BY}, partition) (increase(slurm_jobs_ended_total[1h])) > 0.5",
        "15m",
        "warning",
        "Most jobs ending in a partition fail.",
        "{{ $labels.partition }}: more than half of the jobs that ended in the last hour failed "
        "(FAILED, NODE_FAIL, OUT_OF_MEMORY or BOOT_FAIL), and more than 10 of them.",
    ),
    Alert(
        "SlurmBackfillNotRunning",
        "changes(slurm_backfill_cycles[30m]) == 0"
        " and max_over_time(slurm_backfill_cycles[1d]) > 0"
        f' and on ({BY}) sum by ({BY}) (slurm_jobs{{state="pending"}}) > 0',
        "5m",
        "warning",
        "The backfill scheduler has not run for 30 minutes while jobs pend.",
        "{{ $labels.instance }}: no backfill cycle in 30 minutes (it ran within the last day); small jobs "
        "wait "
        "behind large ones.",
    ),
    Alert(
        "SlurmGPUsIdleWhileGPUJobsPend",
        f"sum by ({BY}, partition) (slurm_partition_idle_gpus) > 0"
        f" and on ({BY}, partition) sum by ({BY}, partition) (slurm_jobs_pending_gpus) > 0",
        "15m",
        "warning",
        "GPUs are idle while GPU jobs pend in the same partition.",
        "Partition {{ $labels.partition }} has {{ $value }} idle GPU(s) and pending GPU jobs for 15 minutes: "
        "fragmentation, a CPU or memory shortage on the GPU nodes, or a reservation.",
    ),
    Alert(
        "SlurmBridgePodsWaitingLong",
        "time() - slurm_bridge_oldest_waiting_pod_created_timestamp_seconds > 1800",
        "5m",
        "warning",
        "A pod has waited more than 30 minutes for Slurm to place it.",
        "The oldest pod waiting for the bridge on {{ $labels.instance }} is {{ $value | humanizeDuration }} "
        "old: its Slurm job pends (see the pod's PodScheduled condition for Slurm's reason).",
    ),
    Alert(
        "SlurmBridgeErrors",
        "instance:slurm_bridge_errors:rate5m > 0",
        "15m",
        "warning",
        "The bridge's actions keep failing.",
        "{{ $labels.instance }}: {{ $labels.action }} fails ({{ $labels.kind }}), "
        '{{ printf "%.2f" $value }} per '
        "second for 15 minutes.",
    ),
    Alert(
        "SlurmBridgeNoLeader",
        "sum by (cluster, job) (slurm_bridge_leader) != 1",
        "5m",
        "warning",
        "The bridge has no leader, or more than one.",
        "{{ $value }} replicas of {{ $labels.job }} hold the bridge's Lease: with 0, pods wait; with 2, "
        "jobs may be submitted twice.",
    ),
    Alert(
        "SlurmExporterRecordsDropped",
        f"sum by ({BY}, endpoint) (increase(slurm_exporter_records_dropped_total[1h])) > 0",
        "0m",
        "warning",
        "slurmrestd sent records with impossible values; the autoscaler holds the targets they touch.",
        "{{ $value }} {{ $labels.endpoint }} record(s) were dropped in the last hour on "
        "{{ $labels.instance }}: the targets of their partitions are held (never scaled down) until "
        "slurmrestd answers valid records again.",
    ),
    Alert(
        "SlurmAutoscalerHeld",
        f"max by ({BY}, target, partition) (slurm_autoscaler_held) == 1",
        "15m",
        "warning",
        "A scaling target is held on partly invalid Slurm data.",
        "Target {{ $labels.target }} (partition {{ $labels.partition }}) on {{ $labels.instance }} has "
        "been held for 15 minutes: records of its partition are dropped as impossible, so its NodeSet is "
        "never scaled down (and has no answer at all if it never had one on valid data).",
    ),
    Alert(
        "SlurmExporterRecordsRefused",
        f"max by ({BY}, endpoint, reason) (slurm_exporter_records_refused) > 0",
        "10m",
        "warning",
        "Records slurmrestd sends are refused as impossible in the data held.",
        "{{ $value }} {{ $labels.endpoint }} record(s) on {{ $labels.instance }} have been refused for "
        "{{ $labels.reason }} for 10 minutes: the targets of their partitions are held until slurmrestd "
        "sends them valid (the status page and the log name the first one).",
    ),
    Alert(
        "SlurmBridgeCacheNotSynced",
        f"max by ({BY}, cache) (slurm_bridge_cache_synced == 0)",
        "5m",
        "critical",
        "The bridge cannot see part of Kubernetes: it places and deletes nothing.",
        "The bridge's cache of {{ $labels.cache }} on {{ $labels.instance }} has not been a current copy "
        "for 5 minutes (slurm_bridge_cache_errors_total says why): no pod is bound, submitted or deleted "
        "until it lists again.",
    ),
    Alert(
        "SlurmBridgeCacheRestarts",
        f"sum by ({BY}, cache) (increase(slurm_bridge_cache_restarts_total[15m])) > 0",
        "0m",
        "warning",
        "A cache of the bridge failed unexpectedly and was started again.",
        "The bridge's cache of {{ $labels.cache }} on {{ $labels.instance }} failed unexpectedly in the "
        "last 15 minutes and was started again (a bug, or an answer nothing expects): its traceback is in "
        "the log.",
    ),
    Alert(
        "SlurmBridgeLeaseErrors",
        f"sum by ({BY}, operation, kind) (increase(slurm_bridge_lease_errors_total[5m])) > 0",
        "5m",
        "critical",
        "A bridge replica cannot read or write its Lease: it cannot lead.",
        "{{ $labels.instance }} has failed to {{ $labels.operation }} the bridge's Lease "
        "({{ $labels.kind }}) for 5 minutes: with http_403 the Role does not name the Lease (the instance "
        "changed without the manifests) and no replica can ever place a pod.",
    ),
    Alert(
        "SlurmBridgeThrottled",
        f"sum by ({BY}, status) (rate(slurm_bridge_kube_retry_after_total[5m])) > 0",
        "15m",
        "warning",
        "The Kubernetes API server keeps asking the bridge to slow down.",
        "{{ $labels.instance }}: the API server answered {{ $labels.status }} with Retry-After "
        '{{ printf "%.2f" $value }} times a second for 15 minutes; the bridge waits as asked, so its caches '
        "and actions lag (API Priority and Fairness, max-in-flight).",
    ),
)


def groups() -> dict[str, Any]:
    """The rule file: one group of recording rules, one of alerts."""
    return {
        "groups": [
            {"name": "slurm-keda.rules", "rules": [r.rule() for r in RECORDS]},
            {"name": "slurm-keda.alerts", "rules": [a.rule() for a in ALERTS]},
        ]
    }
