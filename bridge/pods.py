"""The parts of a Kubernetes Pod (and Node) the bridge reads, decoded from the API's JSON; resource
quantities; and a pod's effective resource request as Kubernetes computes it. Pure.

A pod is decoded straight from the bytes the API server sends (``msgspec``, only the fields used), so
the bridge never builds the client library's model objects. Quantities are exact
(:class:`fractions.Fraction`): ``"500m"`` CPU is 1/2, ``"1.5Gi"`` memory is 1610612736 bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from fractions import Fraction
from typing import Any

import msgspec

__all__ = [
    "Container",
    "Namespace",
    "Node",
    "Pod",
    "PodGroup",
    "QuantityError",
    "SchedulingGroup",
    "created_at",
    "decode_node",
    "decode_pod",
    "effective_request",
    "parse_quantity",
    "pod_requests",
]


class QuantityError(ValueError):
    """A resource quantity Kubernetes would not accept (the message quotes it, shortened)."""


_QUANTITY = re.compile(
    r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)", re.ASCII
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_QUANTITY = Fraction(1 << 63)
"""Kubernetes keeps quantities in an int64 of the smallest unit; anything above is refused."""


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes resource quantity (``"2"``, ``"500m"``, ``"1.5Gi"``, ``"1e3"``) as an exact number
    of base units (CPUs, bytes, devices). :class:`QuantityError` for anything else, and for negative or
    absurdly large values."""
    s = text.strip()
    m = _QUANTITY.fullmatch(s) if len(s) <= 64 else None
    if m is None:
        raise QuantityError(f"{text[:40]!r} is not a Kubernetes quantity")
    number = Fraction(m.group(1))
    if m.group(2):
        exponent = int(m.group(2)[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text[:40]!r} is out of range")
        value = number * Fraction(10) ** exponent
    elif (suffix := m.group(3) or "") in _BINARY:
        value = number * (1 << (10 * _BINARY[suffix]))
    else:
        value = number * Fraction(10) ** _DECIMAL[suffix]
    if value < 0 or value > MAX_QUANTITY:
        raise QuantityError(f"{text[:40]!r} is out of range")
    return value


# -- decoded objects --------------------------------------------------------------------------------


class Resources(msgspec.Struct, frozen=True):
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}


class Container(msgspec.Struct, frozen=True):
    name: str = ""
    resources: Resources = Resources()
    restartPolicy: str | None = None


class OwnerReference(msgspec.Struct, frozen=True):
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class ObjectMeta(msgspec.Struct, frozen=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    creationTimestamp: str | None = None
    """RFC 3339, UTC (``2026-12-01T17:00:00Z``)."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    ownerReferences: list[OwnerReference] = []
    deletionTimestamp: str | None = None
    deletionGracePeriodSeconds: int | None = None


class NodeSelectorRequirement(msgspec.Struct, frozen=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(msgspec.Struct, frozen=True):
    matchExpressions: list[NodeSelectorRequirement] = []
    matchFields: list[NodeSelectorRequirement] = []


class NodeSelector(msgspec.Struct, frozen=True):
    nodeSelectorTerms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(msgspec.Struct, frozen=True):
    weight: int = 0
    preference: NodeSelectorTerm = NodeSelectorTerm()


class NodeAffinity(msgspec.Struct, frozen=True):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTerm] = []


class PodAffinityTerms(msgspec.Struct, frozen=True):
    """Inter-pod (anti-)affinity: the bridge reads only whether terms are present (see bridge.feasible)."""

    requiredDuringSchedulingIgnoredDuringExecution: list[dict[str, Any]] = []
    preferredDuringSchedulingIgnoredDuringExecution: list[dict[str, Any]] = []


class Affinity(msgspec.Struct, frozen=True):
    nodeAffinity: NodeAffinity | None = None
    podAffinity: PodAffinityTerms | None = None
    podAntiAffinity: PodAffinityTerms | None = None


class Toleration(msgspec.Struct, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    tolerationSeconds: int | None = None


class PersistentVolumeClaimSource(msgspec.Struct, frozen=True):
    claimName: str = ""
    readOnly: bool = False


class EphemeralVolumeSource(msgspec.Struct, frozen=True):
    volumeClaimTemplate: dict[str, Any] | None = None


class Volume(msgspec.Struct, frozen=True):
    """A pod volume: only claims matter for placement (a generic ephemeral volume is a claim named
    ``<pod>-<volume>``, created by Kubernetes' ephemeral-volume controller)."""

    name: str = ""
    persistentVolumeClaim: PersistentVolumeClaimSource | None = None
    ephemeral: EphemeralVolumeSource | None = None


class PodSpec(msgspec.Struct, frozen=True):
    schedulerName: str = "default-scheduler"
    nodeName: str | None = None
    containers: list[Container] = []
    initContainers: list[Container] = []
    overhead: dict[str, str] = {}
    activeDeadlineSeconds: int | None = None
    nodeSelector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    volumes: list[Volume] = []
    topologySpreadConstraints: list[dict[str, Any]] = []
    schedulingGates: list[dict[str, Any]] = []
    """While any is listed, no scheduler may place the pod (kube-scheduler: PodScheduled=False,
    ``SchedulingGated``); the API server refuses a binding. Gates can only be removed, never added."""
    schedulingGroup: dict[str, Any] | None = None
    """Kubernetes 1.36's built-in gangs: the PodGroup (``scheduling.k8s.io/v1alpha2``) the pod belongs to."""
    workloadRef: dict[str, Any] | None = None
    """Kubernetes 1.35's form of the same: a pod group of a Workload (``scheduling.k8s.io/v1alpha1``)."""
    resourceClaims: list[dict[str, Any]] = []
    """Dynamic Resource Allocation claims (``resource.k8s.io``): allocated by kube-scheduler's
    DynamicResources plugin, which the bridge does not run."""


class Condition(msgspec.Struct, frozen=True):
    type: str = ""
    status: str = ""
    reason: str | None = None
    message: str | None = None


class PodStatus(msgspec.Struct, frozen=True):
    phase: str = "Pending"
    conditions: list[Condition] = []


class Pod(msgspec.Struct, frozen=True):
    """A pod as the bridge sees it (the API's field names)."""

    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def is_mirror(self) -> bool:
        return "kubernetes.io/config.mirror" in self.metadata.annotations

    @property
    def owned_by_daemonset(self) -> bool:
        return any(o.kind == "DaemonSet" for o in self.metadata.ownerReferences)

    @property
    def terminal(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


SLINKY_NODE_LABEL = "slinky.slurm.net/slurm-nodename"
"""The Kubernetes node label naming its Slurm node (Slinky's); without it the names must match."""


class Taint(msgspec.Struct, frozen=True):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(msgspec.Struct, frozen=True):
    unschedulable: bool = False
    taints: list[Taint] = []


class NodeStatus(msgspec.Struct, frozen=True):
    conditions: list[Condition] = []
    allocatable: dict[str, str] = {}


class Node(msgspec.Struct, frozen=True):
    """A Kubernetes node as the bridge sees it."""

    metadata: ObjectMeta = ObjectMeta()
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)

    @property
    def slurm_name(self) -> str:
        """Its Slurm node's name: Slinky's label :data:`SLINKY_NODE_LABEL`, else the node's own."""
        return self.metadata.labels.get(SLINKY_NODE_LABEL) or self.metadata.name

    def labelled_for(self, label: str) -> bool:
        """Whether the node carries ``label`` (any value but ``"false"``); an empty ``label``: any node."""
        return not label or self.metadata.labels.get(label, "false") != "false"


class Namespace(msgspec.Struct, frozen=True):
    """A namespace as the bridge sees it: its name and labels (for the policy's namespace selectors)."""

    metadata: ObjectMeta = ObjectMeta()


class PodGroupSpec(msgspec.Struct, frozen=True):
    minMember: int = 0


class PodGroupStatus(msgspec.Struct, frozen=True):
    phase: str = ""
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    occupiedBy: str = ""
    scheduleStartTime: str | None = None


class PodGroup(msgspec.Struct, frozen=True):
    """A scheduler-plugins coscheduling PodGroup (``scheduling.x-k8s.io/v1alpha1``): its ``minMember`` and
    the status the bridge keeps (:mod:`bridge.podgroups`)."""

    metadata: ObjectMeta = ObjectMeta()
    spec: PodGroupSpec = PodGroupSpec()
    status: PodGroupStatus = PodGroupStatus()


class GangPolicy(msgspec.Struct, frozen=True):
    minCount: int = 0


class SchedulingPolicy(msgspec.Struct, frozen=True):
    gang: GangPolicy | None = None
    basic: dict[str, Any] | None = None


class SchedulingGroupSpec(msgspec.Struct, frozen=True):
    schedulingPolicy: SchedulingPolicy = SchedulingPolicy()


class SchedulingGroup(msgspec.Struct, frozen=True):
    """Kubernetes' own PodGroup (``scheduling.k8s.io/v1alpha2``, 1.36, the GenericWorkload feature): its
    policy — a gang of ``minCount``, or basic (each pod on its own)."""

    metadata: ObjectMeta = ObjectMeta()
    spec: SchedulingGroupSpec = SchedulingGroupSpec()

    @property
    def min_count(self) -> int | None:
        """The gang's ``minCount``; None for the basic policy (or none given)."""
        gang = self.spec.schedulingPolicy.gang
        return gang.minCount if gang is not None else None


_POD = msgspec.json.Decoder(Pod)
_NODE = msgspec.json.Decoder(Node)


def created_at(pod: Pod) -> float | None:
    """``pod``'s creation time in epoch seconds, or None when absent or not RFC 3339."""
    stamp = pod.metadata.creationTimestamp
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def decode_pod(body: bytes | str) -> Pod:
    """A pod from the API's JSON; ``msgspec.ValidationError``/``DecodeError`` for a malformed one."""
    return _POD.decode(body)


def decode_node(body: bytes | str) -> Node:
    return _NODE.decode(body)


# -- effective request ------------------------------------------------------------------------------


def _container_value(c: Container, resource: str) -> Fraction:
    """The larger of a container's request and limit of ``resource`` (a limit alone is also the request)."""
    values = [parse_quantity(v) for d in (c.resources.requests, c.resources.limits) if (v := d.get(resource))]
    return max(values, default=Fraction(0))


def _container_request(c: Container, resource: str) -> Fraction:
    """A container's request of ``resource`` as the API server defaults it: the request, else the limit."""
    value = c.resources.requests.get(resource) or c.resources.limits.get(resource)
    return parse_quantity(value) if value else Fraction(0)


def effective_request(
    containers: Iterable[Container],
    init_containers: Iterable[Container],
    overhead: Mapping[str, str],
    resource: str,
    per_container: Callable[[Container, str], Fraction] = _container_value,
) -> Fraction:
    """What the pod needs of ``resource`` as Kubernetes counts it: the sum over app containers and
    sidecars (init containers with ``restartPolicy: Always``), or the largest one-shot init container
    plus the sidecars started before it, whichever is larger; plus the pod's overhead. Each container
    counts ``per_container`` of it: by default the larger of its request and limit (what Slurm is asked
    for: the pod may use up to its limit). Raises :class:`QuantityError`."""
    sidecars = Fraction(0)
    init_peak = Fraction(0)
    for c in init_containers:
        value = per_container(c, resource)
        if c.restartPolicy == "Always":
            sidecars += value
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + value)
    app = sum((per_container(c, resource) for c in containers), Fraction(0))
    extra = parse_quantity(overhead[resource]) if resource in overhead else Fraction(0)
    return max(app + sidecars, init_peak) + extra


def pod_requests(pod: Pod) -> dict[str, Fraction]:
    """Every resource ``pod`` requests as kube-scheduler counts it against a node's allocatable
    (``resourcehelper.PodRequests``): per container its request (the API server copies a limit given
    alone), the init/sidecar rule of :func:`effective_request`, plus overhead; zero requests left out.
    Raises :class:`QuantityError`."""
    spec = pod.spec
    names = {
        r
        for c in (*spec.containers, *spec.initContainers)
        for r in (*c.resources.requests, *c.resources.limits)
    }
    names.update(spec.overhead)
    out: dict[str, Fraction] = {}
    for name in sorted(names):
        value = effective_request(
            spec.containers, spec.initContainers, spec.overhead, name, _container_request
        )
        if value:
            out[name] = value
    return out
