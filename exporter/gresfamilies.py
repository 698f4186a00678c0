"""Generic resources (GPUs, MPS, shards, NICs...) by name and type → metric families. Pure.

* ``slurm_node_gres{node, name, type}`` / ``slurm_node_gres_used{...}`` — each node's configured GRES
  (its ``gres``) and those in use (``gres_used``), per node (with ``per_node``).
* ``slurm_partition_gres{partition, name, type}`` / ``slurm_partition_gres_used{...}`` — the same summed
  over the partition's nodes (a node in two partitions counts in both).

``type`` is the GRES type as configured (``a100``, a MIG profile such as ``1g.5gb``), empty for an
untyped GRES (``gpu:2``). With ``by_type`` off every type of one name is summed into ``type=""`` — one
series per name: the switch for clusters whose MIG profiles multiply the types. Counts come from
:func:`exporter.slurmtext.gres_by_type`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from .families import labelled
from .model import Snapshot
from .slurmtext import gres_by_type

__all__ = ["gres_families"]

Counts = dict[tuple[str, str], int]


def gres_families(snap: Snapshot, *, per_node: bool = True, by_type: bool = True) -> Iterable[Metric]:
    """The families above from ``snap``'s nodes."""
    memo: dict[str, Counts] = {}

    def parsed(text: str) -> Counts:
        known = memo.get(text)
        if known is None:
            known = memo[text] = _typed(gres_by_type(text), by_type)
        return known

    node_total = GaugeMetricFamily(
        "slurm_node_gres", "Generic resources configured on the node, by name and type", labels=_NODE
    )
    node_used = GaugeMetricFamily(
        "slurm_node_gres_used", "Generic resources in use on the node, by name and type", labels=_NODE
    )
    part_total: dict[tuple[str, str, str], int] = {}
    part_used: dict[tuple[str, str, str], int] = {}
    for node in snap.nodes:
        total, used = parsed(node.gres), parsed(node.gres_used)
        if not total and not used:
            continue
        for key in sorted(total.keys() | used.keys()):
            have, busy = total.get(key, 0), used.get(key, 0)
            if per_node:
                node_total.add_metric([node.name, *key], float(have))
                node_used.add_metric([node.name, *key], float(busy))
            for partition in node.partitions:
                part_total[(partition, *key)] = part_total.get((partition, *key), 0) + have
                part_used[(partition, *key)] = part_used.get((partition, *key), 0) + busy
    if per_node:
        yield node_total
        yield node_used
    yield _partition_family("slurm_partition_gres", "configured on the partition's nodes", part_total)
    yield _partition_family("slurm_partition_gres_used", "in use on the partition's nodes", part_used)


_NODE = ["node", "name", "type"]


def _typed(counts: Counts, by_type: bool) -> Counts:
    if by_type:
        return counts
    out: Counts = {}
    for (name, _), n in counts.items():
        out[(name, "")] = out.get((name, ""), 0) + n
    return out


def _partition_family(name: str, what: str, values: Mapping[tuple[str, str, str], int]) -> Metric:
    doc = f"Generic resources {what}, by name and type"
    return labelled(GaugeMetricFamily, name, doc, ["partition", "name", "type"], values)
