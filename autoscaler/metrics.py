"""Demand as Prometheus families: the numbers KEDA gets, for prometheus/metrics-api triggers and dashboards.

Pure: ``{Target: Demand}`` → fresh families, built per snapshot by the metrics renderer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter

from prometheus_client.core import GaugeMetricFamily, Metric

from autoscaler.demand import Demand, Target

__all__ = ["demand_families"]

_LABELS = ("target", "partition")


def demand_families(
    demands: Mapping[Target, Demand],
    label: Callable[[Target], str] = attrgetter("name"),
    source: Callable[[Target], str] = lambda _: "configured",
) -> Iterable[Metric]:
    """``slurm_autoscaler_*`` families, one series per target (and reason); ``label`` gives each target's
    ``target`` label (:meth:`autoscaler.service.DemandService.label`: unique per target)."""
    desired = GaugeMetricFamily(
        "slurm_autoscaler_desired_nodes",
        "Nodes the target should have now: clamp(busy + needed, min, max), never below busy "
        "(the value the KEDA external scaler serves)",
        labels=_LABELS,
    )
    busy = GaugeMetricFamily(
        "slurm_autoscaler_busy_nodes", "Target nodes with allocated CPUs or jobs (the floor)", labels=_LABELS
    )
    needed = GaugeMetricFamily(
        "slurm_autoscaler_needed_nodes",
        "New nodes the target's eligible pending jobs need, packed first fit in Slurm's scheduling order",
        labels=_LABELS,
    )
    nodes = GaugeMetricFamily(
        "slurm_autoscaler_target_nodes", "Nodes of the target in the snapshot, any state", labels=_LABELS
    )
    eligible = GaugeMetricFamily(
        "slurm_autoscaler_pending_eligible_jobs",
        "Pending jobs (array tasks counted one by one) that more nodes would let start",
        labels=_LABELS,
    )
    ignored = GaugeMetricFamily(
        "slurm_autoscaler_pending_ignored_jobs",
        "Pending jobs (array tasks one by one) that more nodes would not help, by pending reason",
        labels=(*_LABELS, "reason"),
    )
    too_large = GaugeMetricFamily(
        "slurm_autoscaler_pending_too_large_jobs",
        "Pending jobs that can never run on the target (larger than its node shape or max)",
        labels=_LABELS,
    )
    held = GaugeMetricFamily(
        "slurm_autoscaler_held",
        "1 while the target's jobs or nodes data is partly invalid (records of its partition dropped as "
        "impossible): desired_nodes is held at the last answer on valid data or above, never lowered, and "
        "is absent while there is no such answer yet; else 0",
        labels=_LABELS,
    )
    info = GaugeMetricFamily(
        "slurm_autoscaler_target_info",
        "1 per exported target; source is configured (targets file), scaler (a KEDA trigger asked for it) "
        "or default (one per partition while nothing is configured: informational, alerts skip it)",
        labels=(*_LABELS, "source"),
    )
    for target, d in demands.items():
        key = [label(target), target.partition]
        info.add_metric([*key, source(target)], 1)
        if d.answered:
            desired.add_metric(key, d.desired)
        held.add_metric(key, 0 if d.held is None or d.unread else 1)
        busy.add_metric(key, d.busy)
        needed.add_metric(key, d.needed)
        nodes.add_metric(key, d.nodes)
        eligible.add_metric(key, d.eligible)
        too_large.add_metric(key, sum(t.tasks for t in d.too_large))
        for reason, count in sorted(d.ignored.items()):
            ignored.add_metric([*key, reason], count)
    return [desired, busy, needed, nodes, eligible, ignored, too_large, held, info]
