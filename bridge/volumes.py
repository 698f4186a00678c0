"""A pod's persistent volume claims against a node, as kube-scheduler's VolumeBinding and VolumeZone
filters judge them. Pure: the claims, volumes and storage classes are passed in (:class:`Volumes`).

Per claim of the pod (``persistentVolumeClaim`` volumes, and generic ``ephemeral`` ones, whose claim is
``<pod>-<volume>``):

* missing, or being deleted → no node (kube-scheduler waits: ``persistentvolumeclaim "x" not found``);
* **bound** (``spec.volumeName``) → the volume's ``spec.nodeAffinity.required``
  (:mod:`bridge.nodeselect`) must match the node (``node(s) had volume node affinity conflict``) and its
  zone/region labels must name the node's (``node(s) had no available volume zone``);
* **unbound, ``WaitForFirstConsumer``** class → the node must offer an available volume of the class
  that fits the claim (capacity, access modes, volume mode, node affinity), or the class must provision
  (its ``provisioner`` is not ``kubernetes.io/no-provisioner``) on this node: its ``allowedTopologies``
  (OR of terms, AND of expressions, each an ``In``) match the node's labels (``node(s) didn't find
  available persistent volumes to bind``);
* **unbound otherwise** (``Immediate``, or no class) → no node: the PersistentVolume controller binds it
  first (``pod has unbound immediate PersistentVolumeClaims``).

Not judged: a volume's own capacity beyond its size (CSI storage capacity), per-node volume limits
(NodeVolumeLimits), ReadWriteOncePod conflicts (VolumeRestrictions), and two claims of one pod matching
the same available volume.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from .nodeselect import selector_matches
from .pods import NodeSelector, ObjectMeta, QuantityError, parse_quantity

if TYPE_CHECKING:
    from .pods import Node, Pod

__all__ = [
    "BIND_CONFLICT",
    "NODE_CONFLICT",
    "UNBOUND_IMMEDIATE",
    "ZONE_CONFLICT",
    "Claim",
    "PersistentVolume",
    "StorageClass",
    "VolumeStep",
    "Volumes",
    "claim_names",
    "claims_problem",
    "volume_reasons",
    "volume_steps",
]

NO_PROVISIONER = "kubernetes.io/no-provisioner"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
"""What kube-scheduler writes on a ``WaitForFirstConsumer`` claim once it chose the node: the external
provisioner then creates the volume there."""
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
ZONE_CONFLICT = "node(s) had no available volume zone"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)


class ClaimSpec(msgspec.Struct, frozen=True):
    storageClassName: str | None = None
    volumeName: str = ""
    accessModes: list[str] = []
    volumeMode: str = "Filesystem"
    resources: dict[str, dict[str, str]] = {}


class ClaimStatus(msgspec.Struct, frozen=True):
    phase: str = "Pending"


class Claim(msgspec.Struct, frozen=True):
    """A PersistentVolumeClaim as the bridge sees it."""

    metadata: ObjectMeta = ObjectMeta()
    spec: ClaimSpec = ClaimSpec()
    status: ClaimStatus = ClaimStatus()

    def storage(self) -> int | None:
        """Bytes requested (``spec.resources.requests.storage``); None when absent or not a quantity."""
        text = self.spec.resources.get("requests", {}).get("storage")
        try:
            return int(parse_quantity(text)) if text else None
        except QuantityError:
            return None


class VolumeNodeAffinity(msgspec.Struct, frozen=True):
    required: NodeSelector | None = None


class ClaimRef(msgspec.Struct, frozen=True):
    namespace: str = ""
    name: str = ""


class VolumeSpec(msgspec.Struct, frozen=True):
    storageClassName: str = ""
    capacity: dict[str, str] = {}
    accessModes: list[str] = []
    volumeMode: str = "Filesystem"
    nodeAffinity: VolumeNodeAffinity | None = None
    claimRef: ClaimRef | None = None


class VolumeStatus(msgspec.Struct, frozen=True):
    phase: str = ""


class PersistentVolume(msgspec.Struct, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: VolumeSpec = VolumeSpec()
    status: VolumeStatus = VolumeStatus()


class TopologyRequirement(msgspec.Struct, frozen=True):
    key: str = ""
    values: list[str] = []


class TopologyTerm(msgspec.Struct, frozen=True):
    matchLabelExpressions: list[TopologyRequirement] = []


class StorageClass(msgspec.Struct, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    provisioner: str = ""
    volumeBindingMode: str = "Immediate"
    allowedTopologies: list[TopologyTerm] = []


@dataclass(frozen=True)
class Volumes:
    """The storage objects a placement looks at (as listed; empty when the pod has no claims)."""

    claims: Mapping[tuple[str, str], Claim] = field(default_factory=dict)
    """(namespace, name) → claim."""
    volumes: Mapping[str, PersistentVolume] = field(default_factory=dict)
    classes: Mapping[str, StorageClass] = field(default_factory=dict)

    @functools.cached_property
    def by_class(self) -> dict[str, list[PersistentVolume]]:
        """Storage class name → its volumes (a claim without a class matches volumes without one)."""
        out: dict[str, list[PersistentVolume]] = {}
        for pv in self.volumes.values():
            out.setdefault(pv.spec.storageClassName, []).append(pv)
        return out


def claim_names(pod: Pod) -> list[str]:
    """The claims ``pod`` mounts, in volume order (a generic ephemeral volume's is ``<pod>-<volume>``)."""
    out = []
    for v in pod.spec.volumes:
        if v.persistentVolumeClaim is not None:
            out.append(v.persistentVolumeClaim.claimName)
        elif v.ephemeral is not None:
            out.append(f"{pod.metadata.name}-{v.name}")
    return out


def _class_of(claim: Claim, volumes: Volumes) -> StorageClass | None:
    name = claim.spec.storageClassName
    return volumes.classes.get(name) if name else None


def claims_problem(pod: Pod, volumes: Volumes) -> str | None:
    """Why no node can take ``pod`` now because of its claims (kube-scheduler's PreFilter), or None."""
    for name in claim_names(pod):
        claim = volumes.claims.get((pod.metadata.namespace, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim.metadata.deletionTimestamp:
            return f'persistentvolumeclaim "{name}" is being deleted'
        if claim.spec.volumeName:
            if claim.spec.volumeName not in volumes.volumes:
                pv = claim.spec.volumeName
                return f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{pv}"'
            continue
        cls = _class_of(claim, volumes)
        if claim.spec.storageClassName and cls is None:
            return f'storageclass.storage.k8s.io "{claim.spec.storageClassName}" not found'
        if cls is None or cls.volumeBindingMode != "WaitForFirstConsumer":
            return UNBOUND_IMMEDIATE
    return None


def _selector_matches(selector: NodeSelector | None, node: Node) -> bool:
    return selector is None or selector_matches(selector, node)


def _zone_ok(pv: PersistentVolume, node: Node) -> bool:
    """VolumeZone: each zone/region label of the volume (``a__b`` a set) names the node's."""
    labels = node.metadata.labels
    for key in ZONE_LABELS:
        want = pv.metadata.labels.get(key)
        if want and labels.get(key) not in set(want.split("__")):
            return False
    return True


def _fits(pv: PersistentVolume, claim: Claim, node: Node) -> bool:
    """An available volume that can be bound to ``claim`` on ``node``."""
    ref = pv.spec.claimRef
    if ref is not None and (ref.namespace, ref.name) != (claim.metadata.namespace, claim.metadata.name):
        return False
    if ref is None and pv.status.phase not in ("", "Available"):
        return False
    if pv.spec.storageClassName != (claim.spec.storageClassName or ""):
        return False
    if pv.spec.volumeMode != claim.spec.volumeMode or not set(claim.spec.accessModes) <= set(
        pv.spec.accessModes
    ):
        return False
    want = claim.storage()
    try:
        have = parse_quantity(pv.spec.capacity.get("storage", "0"))
    except QuantityError:
        return False
    if want is not None and have < want:
        return False
    affinity = pv.spec.nodeAffinity.required if pv.spec.nodeAffinity else None
    return _selector_matches(affinity, node)


def _provisions_on(cls: StorageClass, node: Node) -> bool:
    if cls.provisioner == NO_PROVISIONER:
        return False
    if not cls.allowedTopologies:
        return True
    labels = node.metadata.labels
    return any(
        all(labels.get(r.key) in r.values for r in term.matchLabelExpressions)
        for term in cls.allowedTopologies
    )


def volume_reasons(pod: Pod, node: Node, volumes: Volumes) -> list[str]:
    """Why ``pod``'s claims rule ``node`` out (call :func:`claims_problem` first: a claim it names is
    skipped here)."""
    out: dict[str, None] = {}
    for name in claim_names(pod):
        claim = volumes.claims.get((pod.metadata.namespace, name))
        if claim is None:
            continue
        if claim.spec.volumeName:
            pv = volumes.volumes.get(claim.spec.volumeName)
            if pv is None:
                continue
            affinity = pv.spec.nodeAffinity.required if pv.spec.nodeAffinity else None
            if not _selector_matches(affinity, node):
                out[NODE_CONFLICT] = None
            if not _zone_ok(pv, node):
                out[ZONE_CONFLICT] = None
            continue
        cls = _class_of(claim, volumes)
        if cls is None or cls.volumeBindingMode != "WaitForFirstConsumer":
            continue
        candidates = volumes.by_class.get(claim.spec.storageClassName or "", [])
        static = any(_fits(pv, claim, node) for pv in candidates)
        if not static and not _provisions_on(cls, node):
            out[BIND_CONFLICT] = None
    return list(out)


@dataclass(frozen=True)
class VolumeStep:
    """A write kube-scheduler's VolumeBinding makes before binding a pod to ``node``: for a
    ``WaitForFirstConsumer`` claim, pre-bind the available ``volume`` on that node to it (its
    ``claimRef``), or, with no such volume, name the node on the claim (:data:`SELECTED_NODE_ANNOTATION`)
    for the provisioner."""

    namespace: str
    claim: str
    claim_uid: str
    node: str
    volume: str | None = None
    volume_version: str = ""
    """The volume's resourceVersion when it was read available (the pre-binding is refused if it moved)."""


def volume_steps(pod: Pod, node: Node, volumes: Volumes) -> tuple[list[VolumeStep], list[str]]:
    """Before ``pod`` is bound to ``node``: the writes its unbound claims need (:class:`VolumeStep`), and
    what is still awaited (``claim "x": waiting for its volume``) — the pod is bound once both are empty,
    as kube-scheduler's PreBind waits for every claim to be bound. Call after :func:`volume_reasons` found
    the node feasible."""
    steps: list[VolumeStep] = []
    waits: list[str] = []
    ns = pod.metadata.namespace
    for name in claim_names(pod):
        claim = volumes.claims.get((ns, name))
        if claim is None:
            waits.append(f'persistentvolumeclaim "{name}" not found')
            continue
        if claim.spec.volumeName and claim.status.phase == "Bound":
            continue
        chosen = claim.metadata.annotations.get(SELECTED_NODE_ANNOTATION)
        prebound = next(
            (
                pv.metadata.name
                for pv in volumes.volumes.values()
                if pv.spec.claimRef is not None
                and (pv.spec.claimRef.namespace, pv.spec.claimRef.name) == (ns, name)
            ),
            None,
        )
        if claim.spec.volumeName or chosen == node.metadata.name or prebound is not None:
            waits.append(f'persistentvolumeclaim "{name}": waiting for its volume to be bound')
            continue
        cls = _class_of(claim, volumes)
        if cls is None or cls.volumeBindingMode != "WaitForFirstConsumer":
            waits.append(f'persistentvolumeclaim "{name}": {UNBOUND_IMMEDIATE}')
            continue
        candidates = volumes.by_class.get(claim.spec.storageClassName or "", [])
        fitting = sorted(
            (pv for pv in candidates if pv.spec.claimRef is None and _fits(pv, claim, node)),
            key=lambda pv: (_capacity(pv), pv.metadata.name),
        )
        uid, here = claim.metadata.uid, node.metadata.name
        if fitting:  # the smallest that fits, as kube-scheduler chooses
            smallest = fitting[0].metadata
            steps.append(VolumeStep(ns, name, uid, here, smallest.name, smallest.resourceVersion))
        else:
            steps.append(VolumeStep(ns, name, uid, here))
        waits.append(f'persistentvolumeclaim "{name}": waiting for its volume to be bound')
    return steps, waits


def _capacity(pv: PersistentVolume) -> int:
    try:
        return int(parse_quantity(pv.spec.capacity.get("storage", "0")))
    except QuantityError:
        return 0
