"""Demand for people and scripts: ``slurm-keda demand --format json|table``. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.demand import Demand, Target
from exporter.model import MIB

__all__ = ["demand_json", "demand_table"]


def demand_json(demands: Mapping[Target, Demand]) -> list[dict[str, Any]]:
    """One JSON object per target (memory in bytes)."""
    out = []
    for t, d in demands.items():
        out.append(
            {
                "target": t.name,
                "partition": t.partition,
                "desired": d.desired,
                "busy": d.busy,
                "needed": d.needed,
                "nodes": d.nodes,
                "min": t.min_nodes,
                "max": t.max_nodes,
                "eligible_pending": d.eligible,
                "ignored_pending": dict(sorted(d.ignored.items())),
                "too_large": [{"job": x.job, "tasks": x.tasks, "why": x.why} for x in d.too_large],
                "shape": None
                if d.shape is None
                else {"cpus": d.shape.cpus, "memory_bytes": d.shape.memory_bytes, "gpus": d.shape.gpus},
                "shape_source": d.shape_source,
                "reasons": list(d.reasons),
            }
        )
    return out


def demand_table(demands: Mapping[Target, Demand]) -> str:
    """A table (one row per target) followed by each target's reasons."""
    head = (
        f"{'TARGET':<16} {'PARTITION':<12} {'DESIRED':>7} {'BUSY':>5} {'NEEDED':>6} {'NODES':>5} "
        f"{'ELIGIBLE':>8} {'IGNORED':>7} {'SHAPE (CPUs/MiB/GPUs)':<22}"
    )
    rows = [head]
    for t, d in demands.items():
        shape = "-" if d.shape is None else f"{d.shape.cpus}/{d.shape.memory_bytes // MIB}/{d.shape.gpus}"
        rows.append(
            f"{t.name:<16} {t.partition:<12} {d.desired:>7} {d.busy:>5} {d.needed:>6} {d.nodes:>5} "
            f"{d.eligible:>8} {sum(d.ignored.values()):>7} {shape + ' (' + d.shape_source + ')':<22}"
        )
    for t, d in demands.items():
        rows += ["", f"{t.name}:"] + [f"  {r}" for r in d.reasons]
    return "\n".join(rows)
