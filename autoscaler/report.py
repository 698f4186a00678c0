"""Demand in words, for people and scripts: ``slurm-keda demand --format json|table``, ``slurm-keda
explain``, the status page and ``/targets``. Pure.

:func:`explain` turns a :class:`~autoscaler.demand.Demand`'s facts into the lines ``slurm-keda demand``
prints under each target; :func:`misfit_text` says why a too-large job never fits; :func:`target_report`
and :func:`target_line` say what a served target asks for and why, with its state (held, stale), when it
last changed and when KEDA last asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from autoscaler.demand import Demand, Misfit, NodeShape, Target
from exporter.logs import span
from exporter.model import MIB

__all__ = [
    "TargetReport",
    "demand_json",
    "demand_table",
    "explain",
    "misfit_text",
    "target_line",
    "target_report",
]

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
    if d.unread:
        lines[0] = (
            f"desired {d.desired}: PARTIAL — {d.unread} jobs Slurm lists are not read yet (a start without a"
            f" full listing); the model computed {d.held} on the jobs read, never lower than the"
            f" {d.in_service} nodes in service and the last answer on complete data"
        )
    elif d.held is not None:
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
    for name, count in sorted(d.held_back_by_license.items()):
        lines.append(
            f"licenses: {plural(count, 'fresh pending job')} wait for {name!r}"
            " (the jobs ahead in Slurm's order take what is free)"
        )
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


class TargetReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one served target asks for and why (``/targets``; :func:`target_line` on the status page)."""

    target: str
    """Its ``target`` label."""
    partition: str
    nodeset: str | None
    source: str
    """``configured``, ``scaler`` (a KEDA trigger asked for it) or ``default`` (one per partition)."""
    desired: int | None
    """What KEDA is told; None: no answer (held without an answer on valid data)."""
    busy: int
    needed: int
    nodes: int
    """The target's nodes in Slurm now, any state."""
    state: str
    """``ok``, ``held`` (records of its partition refused: never lowered), ``partial`` (jobs not read yet:
    never lowered), ``no answer`` or ``stale``."""
    why: str
    """Why it is not ``ok`` ("" when it is)."""
    pending_counted: int
    pending_not_counted: dict[str, int]
    """Pending jobs not counted, by Slurm's reason (or why the model left them out), largest first."""
    too_large: int
    """Pending jobs that can never run on the target (larger than its node shape or max)."""
    changed_at: float | None
    """When its desired count became what it is (the snapshot's time, epoch seconds); None: not known."""
    asked_at: float | None
    """When KEDA's scaler last asked for it (epoch seconds); None: not since this process started."""
    as_of: float
    """``now`` of the report (epoch seconds)."""
    explanation: list[str]
    """:func:`explain`'s lines."""


def target_report(
    target: Target,
    d: Demand,
    *,
    label: str,
    source: str,
    stale_for: float | None,
    stale_after: float,
    changed_at: float | None,
    asked_at: float | None,
    now: float,
) -> TargetReport:
    """The report of ``target`` whose demand is ``d``; ``stale_for``: the data's age when it is older than
    ``stale_after`` (KEDA is then refused an answer and keeps its replicas), else None."""
    if stale_for is not None:
        state = "stale"
        why = (
            f"Slurm data {stale_for:.0f} s old (--demand-stale-after {stale_after:.0f} s): KEDA gets no "
            "answer and keeps its replicas"
        )
    elif d.unread:
        state = "partial"
        why = (
            f"{d.unread} jobs are not read yet (a start without a full listing): held at {d.desired}, never "
            f"lowered (the model computed {d.held} on the jobs read; {d.in_service} nodes in service)"
        )
    elif d.held is not None and not d.answered:
        state = "no answer"
        why = (
            f"records of partition {target.partition} were refused as impossible and it never had an "
            f"answer on valid data (the model computed {d.held} on the rest)"
        )
    elif d.held is not None:
        state = "held"
        why = (
            f"records of partition {target.partition} were refused as impossible: held at {d.desired}, "
            f"never lowered (the model computed {d.held} on the rest)"
        )
    else:
        state, why = "ok", ""
    return TargetReport(
        target=label,
        partition=target.partition,
        nodeset=target.name if target.name != target.partition else None,
        source=source,
        desired=d.desired if d.answered else None,
        busy=d.busy,
        needed=d.needed,
        nodes=d.nodes,
        state=state,
        why=why,
        pending_counted=d.eligible,
        pending_not_counted=dict(sorted(d.ignored.items(), key=lambda kv: (-kv[1], kv[0]))),
        too_large=len(d.too_large),
        changed_at=changed_at,
        asked_at=asked_at,
        as_of=now,
        explanation=list(explain(target, d)),
    )


def _ago(at: float | None, now: float) -> str:
    if at is None:
        return "not known"
    return f"{span(max(0.0, now - at))} ago"


def target_line(r: TargetReport, *, live: bool = True) -> str:
    """One status-page line: ``target cpu (partition cpu, configured): desires 9 nodes = 3 busy + 6 needed
    (12 in Slurm); pending: 12 counted, 28 not (26 JobArrayTaskLimit, 1 Dependency, ...); 1 too large;
    desired since 40 s ago; KEDA asked 3 s ago``, with HELD / STALE / NO ANSWER and why first when so;
    ``live`` False leaves out the last two (one poll has no history)."""
    where = f"partition {r.partition}" + (f", NodeSet {r.nodeset}" if r.nodeset else "")
    head = f"target {r.target} ({where}, {r.source}): "
    if r.state != "ok":
        head += f"{r.state.upper()} — {r.why}; "
    wants = "no answer" if r.desired is None else f"desires {r.desired} nodes"
    line = f"{head}{wants} = {r.busy} busy + {r.needed} needed ({r.nodes} in Slurm)"
    not_counted = sum(r.pending_not_counted.values())
    line += f"; pending: {r.pending_counted} counted"
    if not_counted:
        top = list(r.pending_not_counted.items())
        reasons = ", ".join(f"{n} {reason}" for reason, n in top[:4]) + (", ..." if len(top) > 4 else "")
        line += f", {not_counted} not ({reasons})"
    if r.too_large:
        line += f"; {r.too_large} too large to ever run on it"
    if not live:  # one poll (slurm-keda explain): no history, no KEDA
        return line
    asked = "KEDA never asked" if r.asked_at is None else f"KEDA asked {_ago(r.asked_at, r.as_of)}"
    return f"{line}; desired since {_ago(r.changed_at, r.as_of)}; {asked}"
