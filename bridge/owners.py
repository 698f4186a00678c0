"""What a pod inherits from the workload that made it: the job annotations (ours, ``slurm-keda.io/*``, and
SchedMD's, ``slurmjob.slinky.slurm.net/*``) written on its Job, JobSet, LeaderWorkerSet or PodGroup, and a
Job's ``activeDeadlineSeconds`` (the Job controller does not copy it into its pods). Pure.

Users annotate the workload once rather than its pod template; SchedMD's bridge reads them there too. The
pod's own annotation wins, then the nearest owner's:

================= ===================================================== ==============================
owner             how the pod names it                                  read
================= ===================================================== ==============================
Job               its controller ``ownerReference`` (kind ``Job``)       annotations, activeDeadlineSeconds
JobSet            label ``jobset.sigs.k8s.io/jobset-name``               annotations
LeaderWorkerSet   label ``leaderworkerset.sigs.k8s.io/name``             annotations
PodGroup          label ``scheduling.x-k8s.io/pod-group``                annotations
================= ===================================================== ==============================

Owners are looked up in the pod's own namespace only.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from .groups import JOBSET_NAME, LWS_NAME, POD_GROUP_LABEL
from .pods import ObjectMeta, Pod

__all__ = [
    "INHERITED_PREFIXES",
    "Inherited",
    "Owner",
    "OwnerKey",
    "inherited",
    "owner_keys",
    "with_inherited",
]

INHERITED_PREFIXES = ("slurm-keda.io/", "slurmjob.slinky.slurm.net/")
"""The annotations a pod inherits from its owners (job settings; never the bridge's own bookkeeping,
:data:`NOT_INHERITED`)."""
NOT_INHERITED = frozenset(
    {"slurm-keda.io/job-id", "slurm-keda.io/slurm-node", "slurm-keda.io/nodes", "slurm-keda.io/rank"}
    | {"slurm-keda.io/opt-out", "slurm-keda.io/group", "slurm-keda.io/group-size"}
)
"""Written by the bridge on a bound pod, or deciding gang membership and the webhook's opt-out: read from
the pod alone."""

LABELLED_OWNERS = (("JobSet", JOBSET_NAME), ("LeaderWorkerSet", LWS_NAME), ("PodGroup", POD_GROUP_LABEL))
"""Owners a pod names by a label, nearest first."""

OwnerKey = tuple[str, str, str]
"""(kind, namespace, name): ``Job``, ``JobSet``, ``LeaderWorkerSet``, ``PodGroup``."""


class OwnerSpec(msgspec.Struct, frozen=True):
    activeDeadlineSeconds: int | None = None


class Owner(msgspec.Struct, frozen=True):
    """A workload object as the bridge reads it: its metadata, and a Job's deadline."""

    metadata: ObjectMeta = ObjectMeta()
    spec: OwnerSpec = OwnerSpec()


class Inherited(msgspec.Struct, frozen=True):
    """What a pod takes from its owners."""

    annotations: dict[str, str] = {}
    """Job annotations the pod itself does not set, from its nearest owner that does."""
    deadline_seconds: int | None = None
    """Its Job's ``activeDeadlineSeconds`` (None without a Job, or without a deadline)."""


def owner_keys(pod: Pod) -> list[OwnerKey]:
    """The owners a pod may inherit from, nearest first (see the module doc)."""
    meta = pod.metadata
    ns = meta.namespace
    keys: list[OwnerKey] = [
        ("Job", ns, ref.name) for ref in meta.ownerReferences if ref.kind == "Job" and ref.controller
    ]
    for kind, label in (
        ("JobSet", JOBSET_NAME),
        ("LeaderWorkerSet", LWS_NAME),
        ("PodGroup", POD_GROUP_LABEL),
    ):
        if name := meta.labels.get(label):
            keys.append((kind, ns, name))
    return keys


def inherited(pod: Pod, owners: Mapping[OwnerKey, Owner]) -> Inherited:
    """What ``pod`` takes from ``owners`` (every known workload object by :data:`OwnerKey`); an owner not
    (yet) known gives nothing."""
    own = pod.metadata.annotations
    notes: dict[str, str] = {}
    deadline: int | None = None
    for key in owner_keys(pod):
        owner = owners.get(key)
        if owner is None:
            continue
        for name, value in owner.metadata.annotations.items():
            wanted = name.startswith(INHERITED_PREFIXES) and name not in NOT_INHERITED
            if wanted and name not in own and name not in notes:
                notes[name] = value
        if key[0] == "Job" and deadline is None:
            deadline = owner.spec.activeDeadlineSeconds
    return Inherited(notes, deadline)


def with_inherited(pod: Pod, got: Inherited) -> Pod:
    """``pod`` as if it carried what it inherits: the owners' annotations beside its own, and its Job's
    deadline where it has none of its own."""
    if not got.annotations and got.deadline_seconds is None:
        return pod
    meta = msgspec.structs.replace(pod.metadata, annotations={**got.annotations, **pod.metadata.annotations})
    spec = pod.spec
    if spec.activeDeadlineSeconds is None and got.deadline_seconds is not None:
        spec = msgspec.structs.replace(spec, activeDeadlineSeconds=got.deadline_seconds)
    return msgspec.structs.replace(pod, metadata=meta, spec=spec)
