"""Nodes shared by Kubernetes and Slurm (``--bridge-shared-nodes``, off by default): each side told what the
other decided about a node. Pure: (snapshot, Kubernetes nodes) → node actions; the controller applies them.

For every Kubernetes node labelled for the bridge whose Slurm node is in the snapshot (the Slinky label
``slinky.slurm.net/slurm-nodename``, else the same name):

* **Slurm's node, not the default scheduler's**: the taint :data:`MANAGED_TAINT` (``NoSchedule``) keeps
  pods that kube-scheduler places off it — Slurm gives the node's CPUs and GPUs to its jobs and cannot see
  those pods. The bridge's own pods tolerate it (:mod:`bridge.feasible` ignores it); DaemonSets meant for
  these nodes (the slurmd pod itself) need a toleration for it.
* **Kubernetes cordons the node** (``spec.unschedulable``) → the Slurm node is drained, the reason naming
  the cordon (:data:`CORDON_REASON`); uncordoned → resumed, but only a drain whose reason is ours (an
  admin's own drain is left alone).
* **Slurm drains the node** (any reason but ours) → the Kubernetes node gets the taint
  :data:`DRAINED_TAINT` (``NoSchedule``; a taint, not a cordon, so that it is never read back as a cordon
  to drain for); resumed → the taint is removed.

Nothing is done on stale data (the same ``max_data_age`` as the plan), for a Kubernetes node without a
Slurm node, or for a Slurm node without a Kubernetes node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.model import Node as SlurmNode
from exporter.model import Snapshot

from .pods import Node

__all__ = [
    "CORDON_REASON",
    "DRAINED_TAINT",
    "MANAGED_TAINT",
    "DrainSlurmNode",
    "NodeAction",
    "ResumeSlurmNode",
    "SetTaints",
    "shared_node_actions",
]

MANAGED_TAINT = "slurm-keda.io/slurm-managed"
"""Taint key (value ``true``, effect ``NoSchedule``) on a shared node: Slurm places pods here."""
DRAINED_TAINT = "slurm-keda.io/slurm-drained"
"""Taint key (value ``true``, effect ``NoSchedule``) while Slurm has the node drained."""
CORDON_REASON = "slurm-keda: Kubernetes node {node} is cordoned"
"""The Slurm drain reason the bridge writes when Kubernetes cordons a node (and the only one it undoes)."""


@dataclass(frozen=True)
class SetTaints:
    """Replace the Kubernetes node's taints (conditional on ``version``, its resourceVersion)."""

    node: str
    version: str
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect) of every taint the node is to carry."""
    why: str


@dataclass(frozen=True)
class DrainSlurmNode:
    node: str
    reason: str


@dataclass(frozen=True)
class ResumeSlurmNode:
    node: str
    why: str


NodeAction = SetTaints | DrainSlurmNode | ResumeSlurmNode


def _drained(node: SlurmNode) -> bool:
    return "DRAIN" in node.flags or node.state == "DRAIN"


def _ours(reason: str) -> bool:
    head, _, tail = CORDON_REASON.partition("{node}")
    return reason.startswith(head) and reason.endswith(tail)


def shared_node_actions(
    snapshot: Snapshot, nodes: Sequence[Node], *, node_label: str, now: float, max_data_age: float
) -> list[NodeAction]:
    """What to do so that both sides agree on each shared node (see the module doc)."""
    fetched = snapshot.fetched_at.get("nodes")
    if fetched is None or now - fetched > max_data_age:
        return []
    slurm = {n.name: n for n in snapshot.nodes}
    out: list[NodeAction] = []
    for k8s in nodes:
        meta = k8s.metadata
        if not k8s.labelled_for(node_label):
            continue
        s = slurm.get(k8s.slurm_name)
        if s is None:
            continue
        taints = [(t.key, t.value, t.effect) for t in k8s.spec.taints]
        why = []
        if not any(t[0] == MANAGED_TAINT for t in taints):
            taints.append((MANAGED_TAINT, "true", "NoSchedule"))
            why.append(f"Slurm node {s.name} is placed by Slurm")
        drained_by_slurm = _drained(s) and not _ours(s.reason)
        has_drained = any(t[0] == DRAINED_TAINT for t in taints)
        if drained_by_slurm and not has_drained:
            taints.append((DRAINED_TAINT, "true", "NoSchedule"))
            why.append(f"Slurm drained {s.name}: {s.reason or 'no reason given'}")
        elif not drained_by_slurm and has_drained:
            taints = [t for t in taints if t[0] != DRAINED_TAINT]
            why.append(f"Slurm node {s.name} is no longer drained")
        if why:
            out.append(SetTaints(meta.name, meta.resourceVersion, tuple(taints), "; ".join(why)))
        if k8s.spec.unschedulable and not _drained(s):
            out.append(DrainSlurmNode(s.name, CORDON_REASON.format(node=meta.name)))
        elif not k8s.spec.unschedulable and _drained(s) and _ours(s.reason):
            out.append(ResumeSlurmNode(s.name, f"Kubernetes node {meta.name} is no longer cordoned"))
    return out
