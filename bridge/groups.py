"""Which pods form one gang — placed all together as one multi-node Slurm job — and each member's rank. Pure.

A pod belongs to a group when it carries one of these (first match wins); members are looked up **in the
pod's own namespace** only:

=============================== ======================================= ================ =================
how                             group                                   size             rank (ascending)
=============================== ======================================= ================ =================
``spec.schedulingGroup`` (1.36) its ``podGroupName`` (a Kubernetes       the PodGroup's   completion index /
                                PodGroup, ``scheduling.k8s.io``)        gang             pod index, name
                                                                        ``minCount``
``slurm-keda.io/group``         the annotation's value                  ``group-size``   completion index,
                                                                        annotation       then name
coscheduling PodGroup           label ``scheduling.x-k8s.io/pod-group`` the PodGroup's   completion index /
                                                                        ``minMember``    pod index, name
LeaderWorkerSet                 labels ``…/name`` + ``…/group-index``   annotation       ``…/worker-index``
                                (``…/group-key`` tells replicas apart)  ``…/size``       (leader 0)
JobSet with ``group-size``      label ``jobset.sigs.k8s.io/jobset-name``annotation       job global index,
                                                                                         completion index
indexed Job with ``group-size`` label ``batch.kubernetes.io/job-name``  annotation       completion index
                                (+ the Job's controller uid)
=============================== ======================================= ================ =================

(``group-size`` is ``slurm-keda.io/group-size`` on the pod template.) A pod with none of these is placed
alone. The group's job asks for ``size`` nodes, one member per node, and rank *r* runs on the *r*-th node
of Slurm's host list, so the leader / index 0 is on the first node. A PodGroup may have more pods than
``minMember``: the ``minMember`` lowest-ranked form the gang, the others are placed one by one once the
gang runs (coscheduling's meaning of ``minMember``; a Kubernetes PodGroup's ``minCount`` likewise). A
Kubernetes PodGroup with the basic policy is no gang: its pods are placed one by one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .pods import Pod

__all__ = [
    "GROUP_ANNOTATION",
    "GROUP_SIZE_ANNOTATION",
    "MAX_GROUP_SIZE",
    "POD_GROUP_LABEL",
    "GroupKey",
    "Membership",
    "membership",
]

GROUP_ANNOTATION = "slurm-keda.io/group"
GROUP_SIZE_ANNOTATION = "slurm-keda.io/group-size"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULING_GROUP = "SchedulingGroup"
"""The group kind of pods in a Kubernetes PodGroup (``spec.schedulingGroup``, 1.36)."""
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_UID = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX = "apps.kubernetes.io/pod-index"
MAX_GROUP_SIZE = 1024
"""The most members one gang may have (its admin comment lists every member)."""

_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?", re.ASCII)
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True, order=True)
class GroupKey:
    """A group: its namespace, how it was formed (``group``, ``PodGroup``, ``LeaderWorkerSet``, ``JobSet``,
    ``Job``), its name, and an id telling apart groups of one name (a Job's uid, an LWS group's key)."""

    namespace: str
    kind: str
    name: str
    discriminator: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Membership:
    """A pod's group, its rank order key, and the group's size (None: a PodGroup's ``minMember``, looked up
    in its object)."""

    group: GroupKey
    rank: tuple[int, ...]
    name_key: tuple[str | int, ...]
    size: int | None

    def order(self) -> tuple[tuple[int, ...], tuple[str | int, ...]]:
        return (self.rank, self.name_key)


class GroupError(ValueError):
    """A pod's group annotations or labels make no sense (the pod is refused, quoting the value)."""


def _index(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or len(text) > 9:
        raise GroupError(f"{what} {text[:40]!r} is not a non-negative integer")
    return int(text)


def _size(text: str | None, what: str) -> int:
    value = _index(text, what)
    if value is None:
        raise GroupError(f"{what} is missing")
    if not 1 <= value <= MAX_GROUP_SIZE:
        raise GroupError(f"{what} {value} is not between 1 and {MAX_GROUP_SIZE}")
    return value


def natural(name: str) -> tuple[str | int, ...]:
    """``w-10`` after ``w-2``: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(name))


def membership(pod: Pod) -> Membership | None:
    """The pod's group (see the module docstring), or None for a pod placed alone; :class:`GroupError` for
    malformed group annotations or labels."""
    meta = pod.metadata
    labels, notes = meta.labels, meta.annotations
    completion = _index(notes.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX), "completion index")
    ordinal = _index(labels.get(POD_INDEX), "pod index")
    by_index = (completion if completion is not None else ordinal if ordinal is not None else 1 << 30,)
    ns, name_key = meta.namespace, natural(meta.name)
    if pod.spec.schedulingGroup is not None:
        name = str(pod.spec.schedulingGroup.get("podGroupName") or "")
        if not _NAME.fullmatch(name):
            raise GroupError(f"spec.schedulingGroup.podGroupName {name[:64]!r} is not a valid name")
        return Membership(GroupKey(ns, SCHEDULING_GROUP, name), by_index, name_key, None)
    if (group := notes.get(GROUP_ANNOTATION)) is not None:
        if not _NAME.fullmatch(group):
            raise GroupError(f"annotation {GROUP_ANNOTATION} {group[:64]!r} is not a valid name")
        size = _size(notes.get(GROUP_SIZE_ANNOTATION), f"annotation {GROUP_SIZE_ANNOTATION}")
        return Membership(GroupKey(ns, "group", group), by_index, name_key, size)
    if (pod_group := labels.get(POD_GROUP_LABEL)) is not None:
        return Membership(GroupKey(ns, "PodGroup", pod_group), by_index, name_key, None)
    if (lws := labels.get(LWS_NAME)) is not None:
        index = _index(labels.get(LWS_GROUP_INDEX), f"label {LWS_GROUP_INDEX}")
        worker = _index(labels.get(LWS_WORKER_INDEX), f"label {LWS_WORKER_INDEX}")
        if index is None or worker is None:
            raise GroupError(f"a LeaderWorkerSet pod needs labels {LWS_GROUP_INDEX} and {LWS_WORKER_INDEX}")
        size = _size(notes.get(LWS_SIZE) or labels.get(LWS_SIZE), f"annotation {LWS_SIZE}")
        key = GroupKey(ns, "LeaderWorkerSet", f"{lws}-{index}", labels.get(LWS_GROUP_KEY, ""))
        return Membership(key, (worker,), name_key, size)
    if GROUP_SIZE_ANNOTATION not in notes:
        return None
    size = _size(notes[GROUP_SIZE_ANNOTATION], f"annotation {GROUP_SIZE_ANNOTATION}")
    if (jobset := labels.get(JOBSET_NAME)) is not None:
        global_index = _index(labels.get(JOBSET_GLOBAL_INDEX) or notes.get(JOBSET_GLOBAL_INDEX), "job index")
        rank = (global_index if global_index is not None else 1 << 30, by_index[0])
        return Membership(GroupKey(ns, "JobSet", jobset), rank, name_key, size)
    if (job := labels.get(JOB_NAME) or labels.get("job-name")) is not None:
        if completion is None:
            raise GroupError(f"{GROUP_SIZE_ANNOTATION} on a Job's pod needs an Indexed Job")
        uid = labels.get(JOB_UID) or labels.get("controller-uid", "")
        return Membership(GroupKey(ns, "Job", job, uid), by_index, name_key, size)
    raise GroupError(
        f"annotation {GROUP_SIZE_ANNOTATION} needs {GROUP_ANNOTATION} (or an indexed Job's or JobSet's pod)"
    )


def group_size(
    member: Membership,
    pod_groups: Mapping[tuple[str, str], int] | str | None,
    scheduling_groups: Mapping[tuple[str, str], int | None] | str | None = None,
) -> int | str:
    """The number of members the group's job needs, or why it is not known yet: a PodGroup's ``minMember``
    comes from ``pod_groups`` (``(namespace, name) → minMember``; None while those are not listed; a text
    saying why PodGroups are off); a Kubernetes PodGroup's gang ``minCount`` from ``scheduling_groups``
    (the same shape; a basic policy's pods are not a gang, :func:`is_basic`)."""
    if member.size is not None:
        return member.size
    if member.group.kind == SCHEDULING_GROUP:
        return _found(member, scheduling_groups, "Kubernetes PodGroups", "minCount")
    return _found(member, pod_groups, "PodGroups", "minMember")


def is_basic(
    member: Membership, scheduling_groups: Mapping[tuple[str, str], int | None] | str | None
) -> bool:
    """Whether ``member`` is in a Kubernetes PodGroup with the basic policy: each pod placed on its own."""
    if (
        member.group.kind != SCHEDULING_GROUP
        or scheduling_groups is None
        or isinstance(scheduling_groups, str)
    ):
        return False
    key = (member.group.namespace, member.group.name)
    return key in scheduling_groups and scheduling_groups[key] is None


def _found(
    member: Membership,
    groups: Mapping[tuple[str, str], int | None] | Mapping[tuple[str, str], int] | str | None,
    what: str,
    field: str,
) -> int | str:
    if groups is None:
        return f"{what} are not listed yet"
    if isinstance(groups, str):
        return groups
    key = member.group
    kind = "PodGroup" if member.group.kind != SCHEDULING_GROUP else "Kubernetes PodGroup"
    if (key.namespace, key.name) not in groups:
        return f"{kind} {key.namespace}/{key.name} does not exist"
    found = groups[(key.namespace, key.name)]
    if found is None or not 1 <= found <= MAX_GROUP_SIZE:
        return f"{kind} {key.namespace}/{key.name} {field} {found} is not between 1 and {MAX_GROUP_SIZE}"
    return found
