"""Which nodes a target has, which of them are busy, their shape, and the room left on them. Pure.

Rules (``docs/demand.md``, "Target nodes" to "Free room"): a target's nodes are the partition's nodes with
the NodeSet feature (features or active features) and a name in its host list or prefix; a node is
busy with allocated CPUs, in state ALLOCATED/MIXED/COMPLETING, flagged COMPLETING, or named by a job
that holds nodes; the shape is the most common one (effective CPUs, memory, GPUs).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from autoscaler.demand.packing import Bins
from autoscaler.demand.types import NodeShape, Target
from autoscaler.nodes import POWERING_DOWN_FLAGS, free_cpus, looks_busy
from exporter.model import Node
from exporter.slurmtext import hostlist_expand, hosts

__all__ = [
    "busy_nodes",
    "constraint_fits",
    "free_room",
    "hosts",
    "snapshot_shape",
    "target_nodes",
]


def _name_matcher(expr: str) -> Callable[[str], bool]:
    e = expr.strip()
    if e.endswith("*") and "[" not in e and "," not in e:
        prefix = e[:-1]
        return lambda name: name.startswith(prefix)
    names = frozenset(hostlist_expand(e))
    return names.__contains__


def target_nodes(target: Target, nodes: Sequence[Node]) -> list[Node]:
    """``nodes`` (already those of ``target.partition``) narrowed by feature and names."""
    match = _name_matcher(target.node_names) if target.node_names else None
    feature = target.nodeset_feature
    if feature is None and match is None:
        return list(nodes)
    out = []
    for node in nodes:
        if feature is not None and feature not in node.features and feature not in node.active_features:
            continue
        if match is not None and not match(node.name):
            continue
        out.append(node)
    return out


def busy_nodes(nodes: Sequence[Node], held: Callable[[], set[str]]) -> list[Node]:
    """The busy ones of ``nodes``, in order; ``held()``: names of nodes held by jobs (read only when some
    node does not look busy by itself: jobs and nodes are fetched at slightly different times)."""
    flags = [looks_busy(n) for n in nodes]
    if not all(flags):
        names = held()
        if names:
            flags = [b or n.name in names for b, n in zip(flags, nodes, strict=True)]
    return [n for n, b in zip(nodes, flags, strict=True) if b]


def snapshot_shape(nodes: Iterable[Node]) -> NodeShape | None:
    """Most common shape among nodes reporting CPUs (ties → the largest)."""
    counts = Counter(
        (
            n.effective_cpus or n.cpus,
            n.memory_bytes,
            n.gpus,
            n.threads_per_core,
            n.sockets,
            n.cores_per_socket,
        )
        for n in nodes
        if (n.effective_cpus or n.cpus) > 0
    )
    if not counts:
        return None
    return NodeShape(*max(counts, key=lambda s: (counts[s], *s)))


_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")
_AND = re.compile(r"[A-Za-z0-9_.\-]+(?:&[A-Za-z0-9_.\-]+)*")
_OR = re.compile(r"[A-Za-z0-9_.\-]+(?:\|[A-Za-z0-9_.\-]+)+")


def constraint_fits(expr: str, feature: str | None, node_features: set[frozenset[str]]) -> bool:
    """Whether a job's ``--constraint`` lets it run on the target: it names the NodeSet's ``feature`` (when
    the target has one), and — when the target has nodes (``node_features``: their feature sets) — one
    node has every ``&``-joined feature, or any of the ``|``-joined ones. Other forms (brackets, counts)
    are not judged by the nodes (they count)."""
    tokens = _TOKEN.findall(expr)
    if feature is not None and feature not in tokens:
        return False
    if not node_features:
        return True  # at zero only the NodeSet's own feature is known
    if _AND.fullmatch(expr):
        wanted = set(tokens)
        return any(wanted <= have for have in node_features)
    if _OR.fullmatch(expr):
        return any(t in have for have in node_features for t in tokens)
    return True


def node_feature_sets(nodes: Iterable[Node]) -> set[frozenset[str]]:
    """The distinct feature sets (features and active features) of ``nodes``."""
    return {frozenset((*n.features, *n.active_features)) for n in nodes}


def free_room(busy: Iterable[Node], max_cpus: int | None = None) -> Bins:
    """Free room of busy, usable nodes, in node order (equal neighbours as one run). ``max_cpus``: the
    partition's MaxCPUsPerNode, counted against all of a node's allocated CPUs (exact when the partition's
    jobs are the node's only ones, as on a NodeSet; else it may under-count the room)."""
    runs: list[list[int]] = []
    last = [0, 0, 0, 0]
    for n in busy:
        c = free_cpus(n, max_cpus)
        if c <= 0 or not POWERING_DOWN_FLAGS.isdisjoint(n.flags):
            continue
        m = max(n.memory_bytes - n.alloc_memory_bytes, 0)
        g = max(n.gpus - n.gpus_used, 0)
        if last[0] == c and last[1] == m and last[2] == g:
            last[3] += 1
        else:
            last = [c, m, g, 1]
            runs.append(last)
    return Bins(runs)
