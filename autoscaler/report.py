"""Demand in words, for people and scripts: ``slurm-keda demand --format json|table``. Pure.

:func:`explain` turns a :class:`~autoscaler.demand.Demand`'s facts into the lines ``slurm-keda demand``
prints under each target; :func:`misfit_text` says why a too-large job never fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.demand import Demand, Misfit, NodeShape, Target
from exporter.model import MIB

__all__ = ["demand_json", "demand_table", "explain", "misfit_text"]

BUSY_NAMES = 8
"""Busy node names listed in the busy line (then ``…``)."""


_MISFITS: dict[str, str] = {
    "cpus_per_task": "{asked} CPUs per task > {limit} CPUs per node",
    "cpus_for_memory": "--mem needs {asked} CPUs per node under MaxMemPerCPU > {limit} CPUs per node",
    "memory_per_node": "--mem {asked_mib} MiB per node > {limit_mib} MiB",
    "memory_per_cpu": "--mem-per-cpu {asked_mib} MiB > {limit_mib} MiB per node",
    "memory_without_memory": "asks memory, nodes have none",
    "gpus_per_node": "{asked} GPUs per node > {limit} GPUs per node",
    "gpus_without_gpus": "asks {asked} GPUs, nodes have none",
    "job_max_nodes": "needs {asked} nodes of {shape}, the job allows at most {limit}",
    "target_max_nodes": "needs {asked} nodes, target max is {limit}",
    "sockets_per_node": "--sockets-per-node {asked} > {limit} sockets per node",
    "cores_per_socket": "--cores-per-socket {asked} > {limit} cores per socket",
    "threads_per_core": "--threads-per-core {asked} > {limit} threads per core",
}
"""How each :data:`~autoscaler.demand.types.MisfitKind` reads (memory in MiB)."""


def plural(count: int, noun: str) -> str:
    """``1 new node``, ``2 new nodes``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def misfit_text(misfit: Misfit, shape: NodeShape | None) -> str:
    """Why a job never fits the target, e.g. ``--mem 9000 MiB per node > 8000 MiB``."""
    kind, asked, limit = misfit
    return _MISFITS[kind].format(
        asked=asked, limit=limit, asked_mib=asked // MIB, limit_mib=limit // MIB, shape=shape
    )


def _clamp_lines(target: Target, d: Demand) -> list[str]:
    raw = d.busy + d.needed
    lines = []
    if target.max_nodes is not None and raw > target.max_nodes:
        lines.append(f"clamped: busy+needed={raw} lowered to max {target.max_nodes}")
    low = min(raw, target.max_nodes) if target.max_nodes is not None else raw
    if low < target.min_nodes:
        lines.append(f"clamped: busy+needed={raw} raised to min {target.min_nodes}")
    if max(low, target.min_nodes) < d.busy:
        lines.append(f"floor: {d.busy} busy nodes exceed max {target.max_nodes}; desired held at busy")
    return lines


def explain(target: Target, d: Demand) -> tuple[str, ...]:
    """The human breakdown of ``d``: desired, busy, shape, what was packed and how, what was not counted."""
    top = target.max_nodes if target.max_nodes is not None else "∞"
    lines = [
        f"desired {d.desired} = clamp(busy {d.busy} + needed {d.needed}, min {target.min_nodes}, max {top})"
    ]
    if d.held is not None:
        lines[0] = (
            f"desired {d.desired}: HELD — records of partition {target.partition} were dropped as impossible;"
            f" the model computed {d.held} on the rest, never lower than the last answer on valid data"
            if d.answered
            else f"desired: NO ANSWER — records of partition {target.partition} were dropped as impossible"
            f" and there is no answer on valid data to hold (the model computed {d.held} on the rest)"
        )
    if d.busy:
        names = ",".join(d.busy_nodes[:BUSY_NAMES]) + ("…" if d.busy > BUSY_NAMES else "")
        lines.append(f"busy: {d.busy} of {d.nodes} nodes have allocated CPUs or jobs ({names})")
    else:
        lines.append(f"busy: 0 of {d.nodes} nodes")
    if d.shape is None:
        lines.append(
            "shape: none — the target has no nodes in the snapshot and no configured shape;"
            " pending jobs are not counted"
        )
    else:
        lines.append(f"shape: {d.shape} per node (from {d.shape_source})")
        if d.cpus_cap is not None:
            lines.append(f"shape: {d.cpus_cap} CPUs usable per node (partition MaxCPUsPerNode)")
    p = d.packing
    if p is not None:
        if p.in_free_room:
            lines.append(
                f"free room: {p.in_free_room} not-yet-scheduled pending jobs fit on busy nodes"
                + ("" if p.free_room_exact else f" (best fit: {p.free_room_runs} runs of jobs)")
            )
        how = (
            "first fit in Slurm's scheduling order"
            if p.exact
            else f"best fit in Slurm's scheduling order: {p.runs} runs of jobs, too many for exact first fit"
        )
        lines.append(
            f"needed: {plural(d.needed, 'new node')} for {plural(p.jobs, 'eligible pending job')} ({how})"
        )
    elif d.eligible and d.shape is None:
        lines.append(f"needed: 0 ({plural(d.eligible, 'eligible pending job')}, but no node shape)")
    elif d.eligible:
        lines.append(f"needed: 0 ({plural(d.eligible, 'eligible pending job')})")
    else:
        lines.append("needed: 0 (no eligible pending jobs)")
    for reason, count in sorted(d.ignored.items()):
        lines.append(f"ignored: {count} pending {reason}")
    if d.skipped:
        feature = target.nodeset_feature
        which = f"other features than {feature!r}" if feature is not None else "features"
        lines.append(f"skipped: {d.skipped} pending jobs constrained to {which} no node of the target has")
    lines += [f"too large: job {t.job}: {misfit_text(t.misfit, d.shape)}" for t in d.too_large]
    lines += _clamp_lines(target, d)
    return tuple(lines)


def demand_json(demands: Mapping[Target, Demand]) -> list[dict[str, Any]]:
    """One JSON object per target (memory in bytes)."""
    out = []
    for t, d in demands.items():
        p = d.packing
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
                "skipped_pending": d.skipped,
                "too_large": [
                    {"job": x.job, "tasks": x.tasks, "why": misfit_text(x.misfit, d.shape)}
                    for x in d.too_large
                ],
                "shape": None
                if d.shape is None
                else {"cpus": d.shape.cpus, "memory_bytes": d.shape.memory_bytes, "gpus": d.shape.gpus},
                "shape_source": d.shape_source,
                "busy_nodes": list(d.busy_nodes),
                "packing": None
                if p is None
                else {
                    "jobs": p.jobs,
                    "runs": p.runs,
                    "exact": p.exact,
                    "in_free_room": p.in_free_room,
                    "free_room_exact": p.free_room_exact,
                },
                "reasons": list(explain(t, d)),
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
        rows += ["", f"{t.name}:"] + [f"  {r}" for r in explain(t, d)]
    return "\n".join(rows)
