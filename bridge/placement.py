"""Where Kubernetes lets a pass's pods run, per Slurm partition: the Kubernetes nodes of the partition's
Slurm nodes judged by Kubernetes' rules (:func:`bridge.feasible.feasible`), and the Slurm nodes a job must
therefore exclude.

A :class:`Placements` is kept by the caller between passes. A partition's nodes are judged again only when
what the verdicts depend on changed — the partition's Slurm nodes and their Kubernetes nodes, those
nodes' labels, taints, cordon, readiness and allocatable, and what pods Slurm does not know request on
them (its :attr:`PartitionNodes.fingerprint`) — so a pass over pods that all pend, with nothing changing,
judges none of them again. A pod with volume claims is judged every pass (its claims, volumes and storage
classes are not in the fingerprint).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from .feasible import Feasibility, NodeIndex, NodeUse
from .pods import Node, Pod
from .volumes import Volumes, claim_names

__all__ = ["PartitionNodes", "Placement", "Placements", "placement_key"]


@dataclass(frozen=True)
class Placement:
    """One pod's (or gang's) verdict in one partition, and what its job excludes."""

    verdict: Feasibility
    excluded: tuple[str, ...]
    """The partition's Slurm nodes whose Kubernetes node is ruled out, sorted (empty when the verdict is
    blocked: the job is not submitted)."""
    size: int = 0
    """The partition's Slurm nodes."""

    @property
    def left(self) -> int:
        """The partition's Slurm nodes not excluded (powered-down ones without a Kubernetes node included):
        fewer than the job's nodes, and Slurm refuses it unless the partition has fewer nodes than that."""
        return self.size - len(self.excluded)

    @functools.cached_property
    def summary(self) -> str:
        """:meth:`bridge.feasible.Feasibility.summary`, worded once."""
        return self.verdict.summary()


def placement_key(pod: Pod, asks: Mapping[str, int]) -> Hashable:
    """What of ``pod`` decides where Kubernetes lets it run (``asks``: its
    :func:`bridge.feasible.pod_asks`): two pods with equal keys get one verdict."""
    spec = pod.spec
    claims = tuple(claim_names(pod))
    return msgspec.json.encode(
        [
            spec.nodeSelector,
            spec.affinity,
            spec.tolerations,
            asks,
            pod.metadata.namespace if claims else "",
            claims,
        ]
    )


class PartitionNodes:
    """One partition's nodes as the bridge judges them, and the verdicts given on them so far."""

    def __init__(
        self,
        slurm: Mapping[str, Node | None],
        usable: Iterable[str],
        others_usage: Mapping[str, NodeUse],
        fingerprint: bytes,
        asleep: frozenset[str] = frozenset(),
    ) -> None:
        """``slurm``: the partition's Slurm nodes → their Kubernetes node (None: none); ``usable``: the
        Kubernetes nodes the bridge may use (Ready, labelled, schedulable); ``others_usage``: what pods
        Slurm does not know request per Kubernetes node; ``asleep``: Slurm nodes powered down (or powering
        up) — without a Kubernetes node they are not excluded: resumed, they get one (a NodeSet's slurmd
        pod), and a node Kubernetes then rules out is caught when the job starts there."""
        self.fingerprint = fingerprint
        self.size = len(slurm)
        """Its Slurm nodes."""
        self.candidates = list({n.metadata.name: n for n in slurm.values() if n is not None}.values())
        """The Kubernetes nodes of its Slurm nodes."""
        self.index = NodeIndex(self.candidates, others_usage, usable)
        self.missing = tuple(s for s, n in slurm.items() if n is None and s not in asleep)
        """Its Slurm nodes without a Kubernetes node (and not powered down: those may get one)."""
        slurm_of: dict[str, list[str]] = {}
        for s, n in slurm.items():
            if n is not None:
                slurm_of.setdefault(n.metadata.name, []).append(s)
        self.slurm_of = slurm_of
        """Kubernetes node → its Slurm nodes."""
        self.one_each = (
            {k: v[0] for k, v in slurm_of.items()} if all(len(v) == 1 for v in slurm_of.values()) else {}
        )
        """Kubernetes node → its Slurm node when each has exactly one (else empty)."""
        self.placements: dict[Hashable, Placement] = {}
        """Placement keys (one per pod of a gang) → the answer, while the fingerprint holds."""
        self.this_pass: dict[Hashable, Placement] = {}
        """The same for pods with volume claims (their claims and volumes are not in the fingerprint):
        cleared by :meth:`begin`."""
        self._excluded_by: dict[frozenset[str], tuple[str, ...]] = {}
        """Kubernetes nodes ruled out → the Slurm nodes to exclude (pods of different specs often rule out
        the same nodes): one pass's, cleared by :meth:`begin`."""
        self.used: set[Hashable] = set()
        """The keys asked for since the last :meth:`begin`."""

    def begin(self) -> None:
        """A new pass: forget the verdicts the last pass did not ask for, and its exclusion lists."""
        for key in self.placements.keys() - self.used:
            del self.placements[key]
        self.used.clear()
        self.this_pass.clear()
        self._excluded_by.clear()

    def judge(self, pods: Sequence[Pod], asks: Sequence[Mapping[str, int]], volumes: Volumes) -> Placement:
        """:func:`bridge.feasible.feasible` of ``pods`` over these nodes (:meth:`NodeIndex.judge`), and
        the Slurm nodes to exclude."""
        verdict = self.index.judge(pods, volumes, asks)
        if verdict.blocked is not None:
            return Placement(verdict, ())
        excluded = self._excluded(verdict)
        return Placement(verdict, excluded, self.size)

    def _excluded(self, verdict: Feasibility) -> tuple[str, ...]:
        """Slurm nodes that do not exist yet (a NodeSet scaled to zero) are not excluded: the job pends,
        the demand asks for nodes, and a new node Kubernetes rules out is caught when the job starts."""
        bad = frozenset().union(*verdict.ruled_out.values())
        if (known := self._excluded_by.get(bad)) is not None:
            return known
        out = set(self.missing)
        if self.one_each:  # one Slurm node per Kubernetes node (a slurmd pod per node): a map, not a loop
            out.update(map(self.one_each.__getitem__, bad & self.one_each.keys()))
        else:
            out.update(s for k8s in bad for s in self.slurm_of.get(k8s, ()))
        self._excluded_by[bad] = result = tuple(sorted(out))
        return result


def fingerprint(
    slurm: Mapping[str, Node | None],
    usable: Iterable[str],
    others_usage: Mapping[str, NodeUse],
    asleep: frozenset[str] = frozenset(),
) -> bytes:
    """What a partition's verdicts depend on, besides the pods: equal bytes, equal verdicts."""
    nodes = {n.metadata.name: n for n in slurm.values() if n is not None}
    return msgspec.json.encode(
        [
            [[s, n.metadata.name if n is not None else s in asleep] for s, n in slurm.items()],
            sorted(usable),
            [
                [
                    name,
                    n.metadata.labels,
                    n.spec.taints,
                    n.spec.unschedulable,
                    n.status.allocatable,
                    (use := others_usage.get(name, NodeUse())).requested,
                    use.pods,
                ]
                for name, n in nodes.items()
            ],
        ]
    )


class Placements:
    """The partitions' nodes and verdicts, kept between passes (see the module doc)."""

    def __init__(self) -> None:
        self._partitions: dict[str, PartitionNodes] = {}
        self._visited: set[str] = set()
        """Partitions looked at since the last :meth:`begin`."""
        self.judged = 0
        """Verdicts computed (not remembered) since this was made."""

    def begin(self) -> None:
        """A new pass: forget the partitions and verdicts the last pass did not ask for, and every verdict
        involving volumes (:meth:`PartitionNodes.begin`)."""
        for name in self._partitions.keys() - self._visited:
            del self._partitions[name]
        self._visited.clear()
        for part in self._partitions.values():
            part.begin()

    def partition(
        self,
        name: str,
        slurm: Mapping[str, Node | None],
        usable: Sequence[str],
        others_usage: Mapping[str, NodeUse],
        asleep: frozenset[str] = frozenset(),
    ) -> PartitionNodes:
        """Partition ``name``'s nodes (see :class:`PartitionNodes`): those of the last pass when nothing
        they are judged on changed."""
        self._visited.add(name)
        mark = fingerprint(slurm, usable, others_usage, asleep)
        known = self._partitions.get(name)
        if known is None or known.fingerprint != mark:
            known = self._partitions[name] = PartitionNodes(slurm, usable, others_usage, mark, asleep)
        return known

    def place(
        self, part: PartitionNodes, pods: Sequence[Pod], asks: Sequence[Mapping[str, int]], volumes: Volumes
    ) -> Placement:
        """Where ``pods`` (one pod, or a gang's members) may run in ``part``: remembered per placement
        key (the pods of one template are judged once) — for this pass only when they claim volumes."""
        key = tuple(placement_key(p, a) for p, a in zip(pods, asks, strict=True))
        memo = part.this_pass if any(claim_names(p) for p in pods) else part.placements
        known = memo.get(key)
        if known is None:
            known = memo[key] = part.judge(pods, asks, volumes)
            self.judged += 1
        part.used.add(key)
        return known
