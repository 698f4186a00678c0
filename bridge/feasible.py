"""(pod, nodes, pods on the nodes, volumes) → which Kubernetes nodes the pod may be bound to, and why the
others not. Pure. The bridge offers Slurm only the feasible nodes (the rest go into the job's
``excluded_nodes``), so the kubelet never rejects a pod Slurm placed.

The rules are kube-scheduler's filter plugins, with their semantics and their messages (what
``kubectl describe pod`` shows, e.g. ``0/5 nodes are available: 2 node(s) had untolerated taint
{gpu: true}, 3 Insufficient cpu.``):

* **NodeUnschedulable** — a cordoned node (``spec.unschedulable``) unless the pod tolerates the taint
  ``node.kubernetes.io/unschedulable:NoSchedule``.
* **NodeAffinity** — ``nodeSelector`` (every label equal) and the required node affinity
  (:mod:`bridge.nodeselect`: every operator, ``matchFields``). Preferred terms do not filter
  (kube-scheduler scores them; Slurm chooses among the feasible nodes).
* **TaintToleration** — every taint with effect ``NoSchedule`` or ``NoExecute`` must be tolerated (but
  :data:`bridge.sharednodes.MANAGED_TAINT`, which keeps the default scheduler's pods off Slurm's nodes):
  a toleration's effect (empty: any) and key (empty, with ``Exists``: any) must match, ``Equal`` (or
  no operator) compares the value, ``Exists`` does not. ``tolerationSeconds`` does not matter for
  placement (it bounds how long a ``NoExecute`` taint added later is tolerated). ``PreferNoSchedule``
  does not filter.
* **NodeResourcesFit** — the node's ``status.allocatable`` less what the pods already bound to it
  request (every pod, the bridge's or not — DaemonSets, the slurmd pod — unless it Succeeded or
  Failed), per resource the pod requests (:func:`bridge.pods.pod_requests`: CPU in millicores rounded
  up, everything else in whole units rounded up); and one pod slot (``pods``).
* **Volumes** (:mod:`bridge.volumes`) — a bound claim's volume node affinity, an unbound
  ``WaitForFirstConsumer`` claim's storage class ``allowedTopologies``; a missing claim, one being
  deleted, or an unbound ``Immediate`` one makes every node infeasible (kube-scheduler waits as well).

The bridge also requires a node to be Ready and labelled for it (:class:`bridge.actions.BridgeOptions`
``node_label``); :func:`feasible` takes that as ``eligible``.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from .nodeselect import LabelIndex
from .pods import MAX_QUANTITY, Node, NodeSelector, Pod, QuantityError, parse_quantity, pod_requests
from .sharednodes import MANAGED_TAINT
from .volumes import Volumes, claim_names, claims_problem, volume_reasons

__all__ = [
    "NOT_READY",
    "Feasibility",
    "NodeUse",
    "feasible",
    "lacks_room",
    "node_reasons",
    "node_usage",
    "tolerates",
    "usage_split",
]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NO_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"
TOO_MANY_PODS = "Too many pods"
NOT_READY = "node(s) were not ready or not labelled for the bridge"
FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class NodeUse:
    """What the pods bound to one node request: per resource (base units as Kubernetes rounds them:
    CPU in millicores), and how many pods."""

    requested: Mapping[str, int] = field(default_factory=dict)
    pods: int = 0


@dataclass(frozen=True)
class Feasibility:
    """One pod's (or gang's) verdict over the nodes."""

    nodes: tuple[str, ...]
    """The Kubernetes nodes it may be bound to, sorted."""
    ruled_out: Mapping[str, frozenset[str]]
    """Reason (kube-scheduler's wording) → the nodes it rules out; every node not in :attr:`nodes` is in at
    least one."""
    blocked: str | None = None
    """Why no node at all (a claim missing or not yet bound): then every node's reason is this."""

    @functools.cached_property
    def reasons(self) -> dict[str, tuple[str, ...]]:
        """Every node not in :attr:`nodes` → why not (its reasons in the order they were found)."""
        out: dict[str, list[str]] = {}
        for reason, names in self.ruled_out.items():
            for name in names:
                out.setdefault(name, []).append(reason)
        return {name: tuple(why) for name, why in sorted(out.items())}

    def summary(self) -> str:
        """``0/5 nodes are available: 2 node(s) had untolerated taint {gpu: true}, 3 Insufficient cpu.``
        — kube-scheduler's ``FitError`` wording: per reason how many nodes gave it, sorted."""
        out = set().union(*self.ruled_out.values())
        total = len(self.nodes) + len(out)
        if self.blocked is not None:
            return f"0/{total} nodes are available: {self.blocked}."
        if not self.ruled_out:
            return f"{len(self.nodes)}/{total} nodes are available."
        parts = sorted(f"{len(names)} {reason}" for reason, names in self.ruled_out.items())
        return f"{len(self.nodes)}/{total} nodes are available: {', '.join(parts)}."


def units(resource: str, quantity: Fraction) -> int:
    """A quantity as kube-scheduler compares it: CPU in millicores, anything else in whole units, both
    rounded up (``Quantity.MilliValue()``/``Value()``)."""
    return math.ceil(quantity * 1000) if resource == "cpu" else math.ceil(quantity)


_PLAIN = re.compile(r"([0-9]{1,18})(m|k|M|G|T|Ki|Mi|Gi|Ti)?", re.ASCII)
_MILLI = {None: 1000, "m": 1, "k": 10**6, "M": 10**9, "G": 10**12, "T": 10**15}
_MILLI |= {"Ki": 1000 << 10, "Mi": 1000 << 20, "Gi": 1000 << 30, "Ti": 1000 << 40}


def quantity_units(resource: str, text: str) -> int:
    """:func:`units` of a quantity's text: integer arithmetic for the forms nodes and pods use
    (``"64"``, ``"500m"``, ``"256Gi"``), :func:`bridge.pods.parse_quantity` for the rest. Raises
    :class:`QuantityError`."""
    m = _PLAIN.fullmatch(text)
    if m is None:
        return units(resource, parse_quantity(text))
    milli = int(m.group(1)) * _MILLI[m.group(2)]
    if milli > MAX_QUANTITY * 1000:
        raise QuantityError(f"{text[:40]!r} is out of range")
    return milli if resource == "cpu" else -(-milli // 1000)


def node_usage(
    pods: Iterable[Pod], memo: MutableMapping[tuple[str, str], dict[str, int]] | None = None
) -> dict[str, NodeUse]:
    """Node name → what the pods bound to it request (pods that Succeeded or Failed no longer count, as
    for kube-scheduler's cache). A pod whose quantities Kubernetes would not have accepted counts as one
    pod requesting nothing. ``memo``: each pod's :func:`pod_asks` by (uid, resourceVersion), kept by the
    caller between passes (a pod's requests parsed once per version)."""
    return usage_split(pods, lambda _: True, memo)[0]


def usage_split(
    pods: Iterable[Pod],
    counted: Callable[[Pod], bool],
    memo: MutableMapping[tuple[str, str], dict[str, int]] | None = None,
) -> tuple[dict[str, NodeUse], dict[str, NodeUse]]:
    """:func:`node_usage` of every pod and of those ``counted`` says, in one walk."""
    tallies: dict[str, tuple[Counter[str], Counter[str], list[int]]] = {}
    for pod in pods:
        node = pod.spec.nodeName
        if not node or pod.terminal:
            continue
        every, some, count = tallies.setdefault(node, (Counter(), Counter(), [0, 0]))
        asks = remembered_asks(pod, memo)
        every.update(asks)
        count[0] += 1
        if counted(pod):
            some.update(asks)
            count[1] += 1
    return (
        {node: NodeUse(dict(every), n) for node, (every, _, (n, _)) in tallies.items()},
        {node: NodeUse(dict(some), n) for node, (_, some, (_, n)) in tallies.items() if n},
    )


# -- node affinity ----------------------------------------------------------------------------------


def _required(pod: Pod) -> NodeSelector | None:
    aff = pod.spec.affinity
    return (
        aff.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution if aff and aff.nodeAffinity else None
    )


# -- taints ------------------------------------------------------------------------------------------


def tolerates(pod: Pod, key: str, value: str, effect: str) -> bool:
    """Whether one of ``pod``'s tolerations tolerates the taint (``Toleration.ToleratesTaint``)."""
    for t in pod.spec.tolerations:
        if t.effect and t.effect != effect:
            continue
        if t.key and t.key != key:
            continue
        if t.operator in ("", "Equal") and t.value == value:
            return True
        if t.operator == "Exists":
            return True
    return False


# -- resources ---------------------------------------------------------------------------------------


def _allocatable(node: Node) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, text in node.status.allocatable.items():
        try:
            out[name] = quantity_units(name, text)
        except QuantityError:
            out[name] = 0  # an allocatable Kubernetes would not report: nothing fits
    return out


# -- everything ----------------------------------------------------------------------------------------


def node_reasons(
    pod: Pod, node: Node, use: NodeUse, volumes: Volumes, asks: Mapping[str, int] | None = None
) -> list[str]:
    """Why ``pod`` may not be bound to ``node`` (its bound pods requesting ``use``); empty when it may —
    :func:`feasible` over that one node. ``asks``: :func:`pod_asks` of the pod (computed when None)."""
    name = node.metadata.name
    verdict = feasible([pod], [node], {name: use}, volumes, asks=None if asks is None else [asks])
    return list(verdict.reasons.get(name, ()))


def lacks_room(reason: str) -> bool:
    """Whether ``reason`` is NodeResourcesFit's (``Too many pods``, ``Insufficient <resource>``): the node
    may take the pod once pods bound there end, unlike a label, taint or volume reason."""
    return reason == TOO_MANY_PODS or reason.startswith("Insufficient ")


def remembered_asks(pod: Pod, memo: MutableMapping[tuple[str, str], dict[str, int]] | None) -> dict[str, int]:
    """:func:`pod_asks`, from ``memo`` (by uid and resourceVersion, kept by the caller between passes) when it
    holds this version of the pod, else parsed and remembered."""
    key = (pod.metadata.uid, pod.metadata.resourceVersion)
    if memo is not None and (known := memo.get(key)) is not None:
        return known
    asks = pod_asks(pod)
    if memo is not None and pod.metadata.resourceVersion:
        memo[key] = asks
    return asks


def pod_asks(pod: Pod) -> dict[str, int]:
    """:func:`bridge.pods.pod_requests` in the units kube-scheduler compares (:func:`units`); a quantity
    Kubernetes would not accept (the API server refuses such pods; the bridge refuses them before this)
    counts as nothing."""
    try:
        return {name: units(name, value) for name, value in pod_requests(pod).items()}
    except QuantityError:
        return {}


class NodeIndex:
    """The nodes pods are judged against, prepared once: labels indexed
    (:class:`bridge.nodeselect.LabelIndex`), nodes grouped by the taints that filter, each node's room
    (allocatable less ``usage``) in kube-scheduler's units, and which the bridge may use (``eligible``:
    Ready, labelled for it; None: all). :meth:`judge` then judges a pod against all of them with set
    operations."""

    def __init__(
        self, nodes: Sequence[Node], usage: Mapping[str, NodeUse], eligible: Iterable[str] | None = None
    ) -> None:
        self.nodes = {n.metadata.name: n for n in nodes}
        self.labels = LabelIndex(self.nodes.values())
        every = self.labels.all
        self.allowed = every if eligible is None else every & frozenset(eligible)
        """The nodes the bridge may use; the others are ruled out as :data:`NOT_READY`."""
        self.unschedulable = frozenset(name for name, n in self.nodes.items() if n.spec.unschedulable)
        groups: dict[tuple[tuple[str, str, str], ...], set[str]] = {}
        for name, n in self.nodes.items():
            taints = tuple(
                (t.key, t.value, t.effect)
                for t in n.spec.taints
                if t.effect in FILTERED_EFFECTS and t.key != MANAGED_TAINT  # the bridge's pods tolerate it
            )
            if taints:
                groups.setdefault(taints, set()).add(name)
        self.tainted = groups
        """Filtering taints → the nodes carrying exactly them."""
        self.room: dict[str, dict[str, int]] = {}
        """Node → resource → what is left (allocatable less what bound pods request); ``pods``: slots."""
        for name, n in self.nodes.items():
            use = usage.get(name, NodeUse())
            free = _allocatable(n)
            left = {r: v - use.requested.get(r, 0) for r, v in free.items()}
            left["pods"] = free.get("pods", 0) - use.pods
            self.room[name] = left
        self.full = frozenset(name for name, left in self.room.items() if left["pods"] < 1)
        """Nodes without a pod slot left."""
        self._by_room: dict[str, tuple[list[int], list[str]]] = {}

    def short_of(self, resource: str, want: int) -> list[str]:
        """The nodes with less than ``want`` of ``resource`` left (a resource a node lacks: none left)."""
        ranked = self._by_room.get(resource)
        if ranked is None:
            pairs = sorted((left.get(resource, 0), name) for name, left in self.room.items())
            ranked = self._by_room[resource] = ([v for v, _ in pairs], [name for _, name in pairs])
        values, names = ranked
        return names[: bisect.bisect_left(values, want)]

    def judge(
        self, pods: Sequence[Pod], volumes: Volumes, asks: Sequence[Mapping[str, int]] | None = None
    ) -> Feasibility:
        """:func:`feasible` over these nodes (``asks``: :func:`pod_asks` of each pod, when known)."""
        every, allowed = self.labels.all, self.allowed
        blocked = next((b for p in pods if (b := claims_problem(p, volumes)) is not None), None)
        if blocked is not None:
            return Feasibility((), {blocked: every}, blocked)
        ruled: dict[str, frozenset[str]] = {}

        def rule(reason: str, names: Iterable[str]) -> None:
            hit = allowed.intersection(names)
            if hit:
                known = ruled.get(reason)
                ruled[reason] = hit if known is None else known | hit

        for i, pod in enumerate(pods):
            if not tolerates(pod, UNSCHEDULABLE_TAINT, "", "NoSchedule"):
                rule(UNSCHEDULABLE, self.unschedulable)
            selector = pod.spec.nodeSelector
            matching = self.labels.labels_nodes(selector) if selector else allowed
            required = _required(pod)
            if required is not None:
                matching = matching & self.labels.selector_nodes(required)
            rule(NO_AFFINITY, allowed - matching)
            for taints, names in self.tainted.items():
                for key, value, effect in taints:
                    if not tolerates(pod, key, value, effect):
                        rule(f"node(s) had untolerated taint {{{key}: {value}}}", names)
                        break
            rule(TOO_MANY_PODS, self.full)
            for resource, want in sorted((pod_asks(pod) if asks is None else asks[i]).items()):
                if resource != "pods" and want > 0:
                    rule(f"Insufficient {resource}", self.short_of(resource, want))
            if claim_names(pod):
                for name in allowed:
                    for reason in volume_reasons(pod, self.nodes[name], volumes):
                        rule(reason, (name,))
        if len(allowed) < len(every):
            ruled[NOT_READY] = every - allowed
        out = frozenset().union(*ruled.values())
        return Feasibility(tuple(sorted(every - out)), ruled)


def feasible(
    pods: Sequence[Pod],
    nodes: Sequence[Node],
    usage: Mapping[str, NodeUse],
    volumes: Volumes,
    eligible: Iterable[str] | None = None,
    asks: Sequence[Mapping[str, int]] | None = None,
) -> Feasibility:
    """The nodes every one of ``pods`` may be bound to (one pod, or a gang's members: each lands on its
    own node, and any member may get any of the job's nodes), the pods bound to them requesting ``usage``.
    ``eligible``: the node names the bridge may use at all (Ready, labelled for it); the others get
    :data:`NOT_READY`. ``asks``: :func:`pod_asks` of each pod, when known. A caller judging many pods
    against the same nodes builds one :class:`NodeIndex` and calls its :meth:`~NodeIndex.judge`."""
    return NodeIndex(nodes, usage, eligible).judge(pods, volumes, asks)
