"""Pod → Slurm job request: which pods the bridge takes, and what each one asks Slurm for. Pure.

A pod is the bridge's when ``spec.schedulerName`` is the bridge's name, it has no ``spec.nodeName``,
and its namespace is managed (listed in the policy). The bridge never takes kube-system, its own
namespace, mirror pods or DaemonSet pods, even if they name it (:func:`select`).

The request (:func:`job_request`) is the pod's resources and its annotations under :data:`PREFIX`,
checked against its namespace's :class:`~bridge.policy.NamespacePolicy`:

=========================== ==================================================================
annotation                  meaning (anything outside the policy refuses the pod)
=========================== ==================================================================
``partition``               one of the policy's partitions (default: its first)
``account`` / ``qos``       one of the policy's accounts / QOS (default: the first, else none)
``reservation``             one of the policy's reservations (default: none)
``constraint``              Slurm ``--constraint`` (features, ``& | [ ] ( ) * :``)
``licenses``                Slurm ``--licenses`` (``name[:count],...``)
``wckey``                   Slurm ``--wckey``
``time-limit``              minutes, or Slurm's ``[D-]HH:MM:SS`` forms (default:
                            ``activeDeadlineSeconds``, else the partition's default)
``share-node``              ``"true"``: other jobs may use the node's free CPUs (only when the
                            policy has ``allow_shared_nodes``); default: the node is exclusive
``user``                    refused unless it names nothing else than the policy's uid
``group`` / ``group-size``  this pod is one of a gang placed together (:mod:`bridge.groups`)
``opt-out``                 ``"true"``: the admission webhook does not put the pod on the bridge
=========================== ==================================================================

SchedMD's slurm-bridge annotations (``slurmjob.slinky.slurm.net/`` ``account``, ``qos``, ``partition``,
``reservation``, ``licenses``, ``constraints``, ``wckey``, ``timelimit``, ``exclusive``, ``user-id``,
``group-id``, ``job-name``) are read beside these, under the same policy (:data:`SLINKY_ANNOTATIONS`); the
ones for resources and node counts refuse the pod, saying where this bridge takes them from.

Resources as Kubernetes counts them (:func:`bridge.pods.effective_request`): CPUs rounded up (at least
one), memory bytes → MiB rounded up (none: Slurm's default), GPUs from ``nvidia.com/gpu`` and
``amd.com/gpu``, other extended resources through the namespace policy's ``devices`` (a GRES each;
unmapped ones refuse the pod). The job runs as the policy's uid; nothing in the pod can change that.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from .pods import Pod, QuantityError, effective_request
from .policy import NamespacePolicy, Policy

__all__ = [
    "ANNOTATIONS",
    "PREFIX",
    "RELEASE_MOVED",
    "RELEASE_UNBOUND",
    "AdminComment",
    "JobRequest",
    "Refusal",
    "Selection",
    "admit",
    "gang_request",
    "job_request",
    "parse_time_limit",
    "released_comment",
    "select",
]

PREFIX = "slurm-keda.io/"
"""The prefix of every annotation the bridge reads."""
ANNOTATIONS = frozenset(
    {"partition", "account", "qos", "reservation", "constraint", "licenses", "wckey", "time-limit"}
    | {"share-node", "user", "group", "group-size", "opt-out"}
)
BRIDGE_WRITES = frozenset({"slurm-node", "job-id", "nodes", "rank"})
"""Annotations the bridge itself writes on pods it placed (never read as a request)."""
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
NEVER_NAMESPACES = frozenset({"kube-system"})

MAX_CPUS = 1 << 16
MAX_MEMORY_MIB = 1 << 30  # 1 PiB
MAX_GPUS = 1 << 10
MAX_TIME_MINUTES = 365 * 24 * 60

_CONSTRAINT = re.compile(r"[A-Za-z0-9_.&|*\[\](),:!-]{1,256}", re.ASCII)
_LICENSES = re.compile(
    r"[A-Za-z0-9_.@+-]{1,64}(:\d{1,6})?(,[A-Za-z0-9_.@+-]{1,64}(:\d{1,6})?){0,31}", re.ASCII
)
_WCKEY = re.compile(r"[A-Za-z0-9_.@+-]{1,64}", re.ASCII)
_TIME = re.compile(r"(?:(\d{1,3})-)?(\d{1,6})(?::(\d{1,2}))?(?::(\d{1,2}))?", re.ASCII)


@dataclass(frozen=True)
class Refusal:
    """Why the bridge will not submit a pod (becomes an Event and a ``PodScheduled=False`` message)."""

    reason: str


@dataclass(frozen=True)
class JobRequest:
    """What one pod — or a gang, one member per node — asks Slurm for: ``nodes`` nodes, one task of
    ``cpus`` CPUs on each."""

    namespace: str
    pod: str
    uid: str
    name: str
    user_id: int
    group_id: int | None
    partition: str
    cpus: int
    memory_mib: int | None
    gpus: int
    time_limit_minutes: int | None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraints: str | None = None
    licenses: str | None = None
    wckey: str | None = None
    exclusive: bool = True
    gres: tuple[tuple[str, int], ...] = ()
    """Other generic resources per node, ``(GRES name[:type], count)``, from the namespace policy's
    ``devices`` (a MIG profile, a typed GPU, ...)."""
    nodes: int = 1
    members: tuple[tuple[str, str, str], ...] = ()
    """A gang's pods as ``(namespace, name, uid)`` in rank order (empty: the one pod above)."""
    group: str | None = None
    """A gang's name (:class:`bridge.groups.GroupKey`), for the admin comment and messages."""

    def admin_comment(self, instance: str) -> str:
        """The job's ``admin_comment``: this bridge instance and the pods (namespace, name, uid) in rank
        order, so that state — and which member runs on which node — is rebuilt from Slurm after a
        restart, and two bridges on one Slurm never touch each other's jobs
        (:func:`bridge.requests.parse_admin_comment`)."""
        members = self.members or ((self.namespace, self.pod, self.uid),)
        pods = [{"namespace": ns, "name": name, "uid": uid} for ns, name, uid in members]
        doc: dict[str, object] = {"instance": instance, "pods": pods}
        if self.group is not None:
            doc["group"] = self.group
        return json.dumps({"slurm-keda": doc}, separators=(",", ":"))


class AdminComment(NamedTuple):
    """What the bridge wrote into a job's ``admin_comment``."""

    instance: str
    pods: list[tuple[str, str, str]]
    """``(namespace, name, uid)`` of each pod, in rank order."""
    group: str | None = None
    release: str | None = None
    """Set by the bridge just before it cancels the job to place its pods again
    (:data:`RELEASE_MOVED`, :data:`RELEASE_UNBOUND`): the job's end is the bridge's doing, not a verdict on
    the pods (an ``scancel``); None otherwise."""


RELEASE_MOVED = "moved"
"""The job was released because Kubernetes ruled out its node (a taint, a cordon, the node gone) or no
node may take its pods any more: placed again, not counted as a failure."""
RELEASE_UNBOUND = "unbound"
"""The job was released because its pod could not be bound within the deadline: placed again, counted as
a failure (bounded)."""


def parse_admin_comment(text: str) -> AdminComment | None:
    """The :class:`AdminComment` the bridge wrote; None for any other comment (a job someone else
    submitted)."""
    if not text.startswith('{"slurm-keda"'):
        return None
    try:
        doc = json.loads(text)["slurm-keda"]
        pods = [(str(p["namespace"]), str(p["name"]), str(p["uid"])) for p in doc["pods"]]
        group = doc.get("group")
        release = doc.get("release")
        return AdminComment(
            str(doc["instance"]),
            pods,
            None if group is None else str(group),
            None if release is None else str(release),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def released_comment(text: str, release: str) -> str:
    """The admin comment ``text`` (one the bridge wrote) marked as released (``release``: why)."""
    doc = json.loads(text)
    doc["slurm-keda"]["release"] = release
    return json.dumps(doc, separators=(",", ":"))


@dataclass(frozen=True)
class Selection:
    """Whether a pod is the bridge's: ``take`` it, ``ignore`` it (not addressed to the bridge, or
    already placed), or ``refuse`` it (addressed to the bridge but never to be placed by it)."""

    verdict: Literal["take", "ignore", "refuse"]
    reason: str = ""


def select(
    pod: Pod,
    *,
    scheduler_name: str,
    own_namespace: str,
    policy: Policy,
    namespace_labels: Mapping[str, str] | None = None,
) -> Selection:
    """Which pods the bridge places (see the module docstring); ``namespace_labels`` are the labels of
    the pod's namespace, for the policy's namespace selectors."""
    if pod.spec.schedulerName != scheduler_name:
        return Selection("ignore", "another scheduler")
    if pod.spec.nodeName or pod.terminal or pod.metadata.deletionTimestamp:
        return Selection("ignore", "already placed, finished or being deleted")
    ns = pod.metadata.namespace
    if ns in NEVER_NAMESPACES or ns == own_namespace:
        return Selection("refuse", f"the bridge never places pods in namespace {ns}")
    if pod.is_mirror:
        return Selection("refuse", "a mirror (static) pod belongs to its kubelet")
    if pod.owned_by_daemonset:
        return Selection("refuse", "a DaemonSet pod is placed by the DaemonSet controller")
    if policy.of(ns, namespace_labels) is None:
        return Selection("refuse", f"namespace {ns} is not managed by this bridge (not in its policy)")
    return Selection("take")


def parse_time_limit(text: str) -> int:
    """Minutes of a Slurm time limit: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS`` (seconds round up). ``ValueError`` otherwise, or above a year."""
    m = _TIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text[:40]!r} is not a Slurm time limit (minutes, or [D-]HH:MM:SS)")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # MM:SS
        seconds = int(a) * 60 + int(b)
    else:
        seconds = int(a) * 60
    minutes = math.ceil(seconds / 60)
    if not 1 <= minutes <= MAX_TIME_MINUTES:
        raise ValueError(f"{text[:40]!r} is not between 1 minute and a year")
    return minutes


def _choose(kind: str, asked: str | None, allowed: tuple[str, ...], *, default_first: bool) -> str | None:
    if asked is None:
        return allowed[0] if default_first and allowed else None
    if asked not in allowed:
        listed = ", ".join(allowed) if allowed else "none"
        raise _Refused(f"{kind} {asked[:64]!r} is not allowed in this namespace (allowed: {listed})")
    return asked


class _Refused(Exception):
    pass


def _pattern(kind: str, value: str | None, pattern: re.Pattern[str]) -> str | None:
    if value is not None and not pattern.fullmatch(value):
        raise _Refused(f"annotation {PREFIX}{kind} {value[:64]!r} is not a valid Slurm {kind}")
    return value


def job_request(pod: Pod, policy: NamespacePolicy) -> JobRequest | Refusal:
    """The job request of a pod the bridge takes, or why it is refused."""
    try:
        return _request(pod, policy)
    except _Refused as e:
        return Refusal(str(e))


def _request(pod: Pod, ns: NamespacePolicy) -> JobRequest:
    ours = {k[len(PREFIX) :]: v for k, v in pod.metadata.annotations.items() if k.startswith(PREFIX)}
    unknown = sorted(k for k in ours if k not in ANNOTATIONS and k not in BRIDGE_WRITES)
    if unknown:
        raise _Refused(
            f"unknown annotation {PREFIX}{unknown[0][:64]} (known: {', '.join(sorted(ANNOTATIONS))})"
        )
    ours |= _slinky_annotations(pod.metadata.annotations, ours, ns)
    if "user" in ours and ours["user"].strip() != str(ns.user_id):
        raise _Refused(
            f"annotation {PREFIX}user: jobs of namespace {ns.namespace} run as the uid its policy sets;"
            " a pod cannot choose another"
        )
    share = ours.get("share-node", "false").strip().lower()
    if share not in ("true", "false"):
        raise _Refused(f"annotation {PREFIX}share-node must be true or false")
    if share == "true" and not ns.allow_shared_nodes:
        raise _Refused(f"namespace {ns.namespace} may not share nodes ({PREFIX}share-node)")
    _check_placement(pod, exclusive=share != "true")
    _check_claims(pod)
    _check_workload(pod)
    partition = _choose("partition", ours.get("partition"), ns.partitions, default_first=True)
    assert partition is not None  # the policy lists at least one
    spec = pod.spec
    devices = dict(ns.devices)
    _check_devices(pod, devices)
    try:
        cpu = effective_request(spec.containers, spec.initContainers, spec.overhead, "cpu")
        memory = effective_request(spec.containers, spec.initContainers, spec.overhead, "memory")
        gpus = sum(
            effective_request(spec.containers, spec.initContainers, spec.overhead, r) for r in GPU_RESOURCES
        )
        gres: dict[str, int] = {}
        for resource, name in sorted(devices.items()):
            count = effective_request(spec.containers, spec.initContainers, spec.overhead, resource)
            if count != int(count) or count > MAX_GPUS:
                raise _Refused(
                    f"resource {resource}: {count} is not a whole number of devices up to {MAX_GPUS}"
                )
            if count:
                gres[name] = gres.get(name, 0) + int(count)
    except QuantityError as e:
        raise _Refused(f"resources: {e}") from None
    cpus = max(1, math.ceil(cpu))
    memory_mib = math.ceil(memory / (1 << 20)) if memory else None
    if cpus > MAX_CPUS or (memory_mib or 0) > MAX_MEMORY_MIB or gpus > MAX_GPUS or gpus != int(gpus):
        raise _Refused(
            f"resources beyond any node: {cpus} CPUs, {memory_mib or 0} MiB, {gpus} GPUs"
            f" (at most {MAX_CPUS} CPUs, {MAX_MEMORY_MIB} MiB, {MAX_GPUS} whole GPUs)"
        )
    if "time-limit" in ours:
        try:
            time_limit: int | None = parse_time_limit(ours["time-limit"])
        except ValueError as e:
            raise _Refused(f"annotation {PREFIX}time-limit: {e}") from None
    elif spec.activeDeadlineSeconds is not None and spec.activeDeadlineSeconds > 0:
        time_limit = min(MAX_TIME_MINUTES, math.ceil(spec.activeDeadlineSeconds / 60))
    else:
        time_limit = None
    meta = pod.metadata
    return JobRequest(
        namespace=meta.namespace,
        pod=meta.name,
        uid=meta.uid,
        name=f"k8s:{meta.namespace}/{meta.name}"[:200],
        user_id=ns.user_id,
        group_id=ns.group_id,
        partition=partition,
        cpus=cpus,
        memory_mib=memory_mib,
        gpus=int(gpus),
        time_limit_minutes=time_limit,
        account=_choose("account", ours.get("account"), ns.accounts, default_first=True),
        qos=_choose("QOS", ours.get("qos"), ns.qos, default_first=True),
        reservation=_choose("reservation", ours.get("reservation"), ns.reservations, default_first=False),
        constraints=_pattern("constraint", ours.get("constraint"), _CONSTRAINT),
        licenses=_pattern("licenses", ours.get("licenses"), _LICENSES),
        wckey=_pattern("wckey", ours.get("wckey"), _WCKEY),
        exclusive=share != "true",
        gres=tuple(sorted(gres.items())),
    )


HOSTNAME_KEY = "kubernetes.io/hostname"


def _check_placement(pod: Pod, *, exclusive: bool) -> None:
    """Refuse what Slurm's placement cannot honour: a topology spread that must hold
    (``whenUnsatisfiable: DoNotSchedule``), required inter-pod affinity, required anti-affinity other than
    one pod per node (``topologyKey: kubernetes.io/hostname`` on an exclusive job: Slurm gives it the
    node alone). Preferences (``ScheduleAnyway``, preferred terms) are accepted and not honoured: Slurm
    chooses among the feasible nodes."""
    spec = pod.spec
    for c in spec.topologySpreadConstraints:
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            key = str(c.get("topologyKey", ""))[:64]
            raise _Refused(
                f"topologySpreadConstraints ({key}, DoNotSchedule): Slurm places the job and cannot keep a"
                " spread; use whenUnsatisfiable: ScheduleAnyway, or a gang (slurm-keda.io/group)"
            )
    aff = spec.affinity
    if aff is None:
        return
    if aff.podAffinity is not None and aff.podAffinity.requiredDuringSchedulingIgnoredDuringExecution:
        raise _Refused("required podAffinity: Slurm places the job and cannot put it next to other pods")
    anti = aff.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution if aff.podAntiAffinity else []
    for term in anti:
        key = str(term.get("topologyKey", ""))[:64]
        if key != HOSTNAME_KEY or not exclusive:
            raise _Refused(
                f"required podAntiAffinity on {key or 'no topologyKey'}: only one pod per node"
                f" ({HOSTNAME_KEY}) on a node of its own (no {PREFIX}share-node) is honoured"
            )


def _check_claims(pod: Pod) -> None:
    """Refuse Dynamic Resource Allocation: a ``spec.resourceClaims`` entry is allocated by kube-scheduler's
    DynamicResources plugin (and the claim reserved for the pod) before binding; the bridge does neither,
    and a pod bound with an unallocated claim never starts."""
    if pod.spec.resourceClaims:
        names = ", ".join(str(c.get("name", "?"))[:64] for c in pod.spec.resourceClaims[:3])
        raise _Refused(
            f"spec.resourceClaims ({names}): Dynamic Resource Allocation claims are not allocated by the"
            " Slurm bridge; ask for devices as extended resources (nvidia.com/gpu) or leave the pod to"
            " kube-scheduler"
        )


SLINKY_PREFIX = "slurmjob.slinky.slurm.net/"
"""SchedMD's slurm-bridge's job annotations, read beside ours so that its users' manifests work here."""
SLINKY_ANNOTATIONS = {
    "account": "account",
    "qos": "qos",
    "partition": "partition",
    "reservation": "reservation",
    "licenses": "licenses",
    "constraints": "constraint",
    "wckey": "wckey",
    "timelimit": "time-limit",
}
"""SchedMD's name → ours (the same meaning and checks; ``exclusive``, ``user-id`` and ``group-id`` are read
by :func:`_slinky_annotations`)."""
SLINKY_FROM_RESOURCES = frozenset({"cpu-per-task", "mem-per-node", "gres", "min-nodes", "max-nodes"})
"""SchedMD's annotations for what this bridge takes from the pod's resource requests and its gang."""


def _slinky_annotations(
    annotations: Mapping[str, str], ours: Mapping[str, str], ns: NamespacePolicy
) -> dict[str, str]:
    """SchedMD's ``slurmjob.slinky.slurm.net/*`` annotations as ours, under the same namespace policy: the
    same choice in both spellings is fine, two different ones refuse the pod, and so do the annotations
    whose meaning this bridge takes from elsewhere (resources: the pod's requests)."""
    theirs = {k[len(SLINKY_PREFIX) :]: v for k, v in annotations.items() if k.startswith(SLINKY_PREFIX)}
    out: dict[str, str] = {}
    for name, value in sorted(theirs.items()):
        if name in SLINKY_ANNOTATIONS:
            mine = SLINKY_ANNOTATIONS[name]
        elif name == "exclusive":  # "false": may share; anything else keeps the node exclusive
            mine, value = "share-node", "true" if value.strip().lower() == "false" else "false"
        elif name in ("user-id", "group-id"):
            want = ns.user_id if name == "user-id" else ns.group_id
            if value.strip() != str(want):
                raise _Refused(
                    f"annotation {SLINKY_PREFIX}{name}: jobs of namespace {ns.namespace} run as the uid and"
                    " gid its policy sets; a pod cannot choose others"
                )
            continue
        elif name == "job-name":
            continue  # the job is named after the pod (k8s:<namespace>/<name>), as squeue -n finds it
        elif name in SLINKY_FROM_RESOURCES:
            raise _Refused(
                f"annotation {SLINKY_PREFIX}{name}: this bridge takes CPUs, memory and GPUs from the pod's"
                " resource requests and node counts from its gang (slurm-keda.io/group); drop the annotation"
            )
        else:
            raise _Refused(f"unknown annotation {SLINKY_PREFIX}{name[:64]}")
        if mine in ours and ours[mine] != value:
            raise _Refused(f"annotations {PREFIX}{mine} and {SLINKY_PREFIX}{name} disagree")
        out[mine] = value
    return out


def _check_devices(pod: Pod, devices: Mapping[str, str]) -> None:
    """Refuse extended resources the job cannot ask Slurm for (anything with a domain other than
    ``kubernetes.io`` besides :data:`GPU_RESOURCES` and the namespace policy's ``devices``: an unmapped MIG
    profile such as ``nvidia.com/mig-1g.5gb``, RDMA devices...): Slurm would place the pod on a node
    without them, and the kubelet refuses it there. A GPU model may also be chosen with a node selector
    (``nvidia.com/gpu.product``), which Slurm honours through the nodes it may not use."""
    for c in (*pod.spec.containers, *pod.spec.initContainers):
        for name in (*c.resources.requests, *c.resources.limits):
            domain = name.split("/", 1)[0] if "/" in name else ""
            if (
                domain
                and name not in GPU_RESOURCES
                and name not in devices
                and not domain.endswith("kubernetes.io")
            ):
                raise _Refused(
                    f"resource {name[:64]}: not mapped to a Slurm GRES in this namespace's policy (devices);"
                    f" the bridge asks Slurm for CPUs, memory, whole GPUs ({', '.join(GPU_RESOURCES)}) and"
                    " the policy's devices; a GPU model may be chosen with a nodeSelector on"
                    " nvidia.com/gpu.product"
                )


def _check_workload(pod: Pod) -> None:
    """Refuse Kubernetes 1.35's gangs (``spec.workloadRef``): their policy lives in a Workload's pod groups
    (``scheduling.k8s.io/v1alpha1``), which the bridge does not read, and placing the members one by one
    could run half a gang. (1.36's ``spec.schedulingGroup`` is placed as one gang, :mod:`bridge.groups`.)"""
    if pod.spec.workloadRef is not None:
        name = str(pod.spec.workloadRef.get("name") or "?")[:64]
        raise _Refused(
            f"spec.workloadRef ({name}): Kubernetes 1.35's Workload gangs (scheduling.k8s.io/v1alpha1) are"
            " not placed by the Slurm bridge; use spec.schedulingGroup (1.36), a scheduler-plugins PodGroup"
            " (scheduling.x-k8s.io/pod-group label) or slurm-keda.io/group annotations"
        )


def admit(
    pod: Pod,
    *,
    scheduler_name: str,
    own_namespace: str,
    policy: Policy,
    namespace_labels: Mapping[str, str] | None = None,
) -> JobRequest | Refusal | None:
    """:func:`select` then :func:`job_request` under the pod's own namespace's policy: the request, the
    refusal, or None for a pod that is not the bridge's."""
    chosen = select(
        pod,
        scheduler_name=scheduler_name,
        own_namespace=own_namespace,
        policy=policy,
        namespace_labels=namespace_labels,
    )
    if chosen.verdict == "ignore":
        return None
    if chosen.verdict == "refuse":
        return Refusal(chosen.reason)
    ns = policy.of(pod.metadata.namespace, namespace_labels)
    assert ns is not None  # select() refuses unmanaged namespaces
    return job_request(pod, ns)


def _largest_gres(requests: Sequence[JobRequest]) -> tuple[tuple[str, int], ...]:
    """Per GRES the largest member's count (one job holds the same on every node)."""
    out: dict[str, int] = {}
    for r in requests:
        for name, count in r.gres:
            out[name] = max(out.get(name, 0), count)
    return tuple(sorted(out.items()))


_MUST_AGREE = ("partition", "account", "qos", "reservation", "constraints", "licenses", "wckey", "user_id")


def gang_request(requests: Sequence[JobRequest], group: str) -> JobRequest | Refusal:
    """One job for a gang: ``requests`` are its members' in rank order. Each node gets the largest member's
    CPUs, memory and GPUs (one job holds the same on every node); the longest time limit; the nodes are
    exclusive unless every member may share. Members must agree on partition, account, QOS, reservation,
    constraint, licenses and wckey — else the gang is refused, naming the first difference."""
    first = requests[0]
    for field in _MUST_AGREE:
        values = {getattr(r, field) for r in requests}
        if len(values) > 1:
            shown = ", ".join(sorted(repr(v) for v in values)[:3])
            return Refusal(f"the members of {group} ask for different {field.replace('_', ' ')}s ({shown})")
    memories = [r.memory_mib for r in requests if r.memory_mib is not None]
    limits = [r.time_limit_minutes for r in requests if r.time_limit_minutes is not None]
    return replace(
        first,
        name=f"k8s:{first.namespace}/{group.rsplit('/', 1)[-1]}"[:200],
        cpus=max(r.cpus for r in requests),
        memory_mib=max(memories) if memories else None,
        gpus=max(r.gpus for r in requests),
        gres=_largest_gres(requests),
        time_limit_minutes=max(limits) if limits else None,
        exclusive=any(r.exclusive for r in requests),
        nodes=len(requests),
        members=tuple((r.namespace, r.pod, r.uid) for r in requests),
        group=group,
    )
