"""What room a node offers new jobs now: read by the demand model (busy nodes' free room) and by the
eligibility bars (``--nodelist`` naming a node). Pure.

A node takes no new job in a broken or held-back state — ``DOWN``, ``ERROR``, ``FUTURE``, ``UNKNOWN`` — or
with a flag saying so: drained or draining, not responding, in maintenance or a reservation, invalid
(its registration refused), failing. slurmctld's node selection leaves such nodes out
(``avail_node_bitmap``); a powering-down node offers no room either (:data:`POWERING_DOWN_FLAGS`), but one
that is powered down is resumed for a job that names it.
"""

from __future__ import annotations

from exporter.model import Node

__all__ = [
    "BUSY_NODE_STATES",
    "POWERING_DOWN_FLAGS",
    "UNUSABLE_NODE_FLAGS",
    "UNUSABLE_NODE_STATES",
    "free_cpus",
    "in_service",
    "looks_busy",
]

UNUSABLE_NODE_STATES = frozenset({"DOWN", "ERROR", "FUTURE", "UNKNOWN"})
UNUSABLE_NODE_FLAGS = frozenset(
    {"DRAIN", "DRAINING", "NOT_RESPONDING", "MAINTENANCE", "RESERVED", "INVALID", "FAIL"}
)
POWERING_DOWN_FLAGS = frozenset({"POWERING_DOWN", "POWER_DOWN", "POWERED_DOWN"})
"""A busy node going to (or gone to) power saving offers no free room to the jobs already pending."""
BUSY_NODE_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def looks_busy(node: Node) -> bool:
    """Whether the node shows jobs on it by itself: CPUs allocated, a busy state, or completing (jobs and
    nodes are fetched at slightly different times, so the demand model also asks the jobs' node lists)."""
    return node.alloc_cpus > 0 or node.state in BUSY_NODE_STATES or "COMPLETING" in node.flags


def in_service(node: Node) -> bool:
    """Whether the node is there as one of its target's current nodes: not powered down or going to be,
    not ``FUTURE`` (configured, never there). What a start without a listing holds the target's desired
    count at, at least, until every job was read (:class:`autoscaler.service.DemandService`): a NodeSet's
    replicas are its registered slurmd nodes."""
    return node.state != "FUTURE" and POWERING_DOWN_FLAGS.isdisjoint(node.flags)


def free_cpus(node: Node, max_cpus: int | None = None) -> int:
    """CPUs a new job may have on the node now: its effective CPUs less those allocated (``max_cpus``: the
    partition's ``MaxCPUsPerNode``, counted against all of them); 0 when it takes no new job (a state or
    flag above)."""
    if node.state in UNUSABLE_NODE_STATES or not UNUSABLE_NODE_FLAGS.isdisjoint(
        node.flags
    ):  # usable(), inline
        return 0
    free = (node.effective_cpus or node.cpus) - node.alloc_cpus
    if max_cpus is not None:
        free = min(free, max_cpus - node.alloc_cpus)
    return max(free, 0)
