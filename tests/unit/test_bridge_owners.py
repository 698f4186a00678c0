"""What a pod inherits from its workload (bridge/owners.py): job annotations on its Job, JobSet,
LeaderWorkerSet or PodGroup, and a Job's activeDeadlineSeconds as the time limit — through the plan."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from bridge.actions import AdmissionKey, BridgeOptions, Refuse, Submit, plan
from bridge.owners import Owner, OwnerKey, inherited, owner_keys
from bridge.policy import parse_policy
from bridge.requests import JobRequest, Refusal
from testkit.builders import pod, world

OPTIONS = BridgeOptions(
    instance="cluster-a",
    policy=parse_policy(
        {"namespaces": {"team-a": {"user_id": 1001, "partitions": ["cpu", "gpu"], "accounts": ["a", "b"]}}}
    ),
)
JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1", "controller": True}


def owner(annotations: dict[str, str], deadline: int | None = None, namespace: str = "team-a") -> Owner:
    doc: dict[str, Any] = {"metadata": {"name": "train", "namespace": namespace, "annotations": annotations}}
    if deadline is not None:
        doc["spec"] = {"activeDeadlineSeconds": deadline}
    return msgspec.convert(doc, Owner)


def submitted(p: Any, owners: dict[OwnerKey, Owner]) -> JobRequest:
    (action,) = plan(world(pods=[p], owners=owners), OPTIONS)
    assert isinstance(action, Submit), action
    return action.request


def test_a_jobs_annotations_and_deadline_reach_its_pods() -> None:
    """The issue's case: SchedMD's timelimit on the pod, and a Job with activeDeadlineSeconds 600, both gave
    TimeLimit UNLIMITED."""
    job_pod = pod(ownerReferences=[JOB_REF])
    job = owner({"slurm-keda.io/partition": "gpu", "slurmjob.slinky.slurm.net/account": "b"}, deadline=600)
    r = submitted(job_pod, {("Job", "team-a", "train"): job})
    assert (r.partition, r.account, r.time_limit_minutes) == ("gpu", "b", 10)
    annotated = pod(ownerReferences=[JOB_REF], annotations={"slurmjob.slinky.slurm.net/timelimit": "7"})
    assert submitted(annotated, {("Job", "team-a", "train"): job}).time_limit_minutes == 7
    assert submitted(pod(), {}).time_limit_minutes is None  # no Job: no deadline


def test_the_pods_own_annotation_wins_then_the_nearest_owner() -> None:
    labels = {"jobset.sigs.k8s.io/jobset-name": "train"}
    p = pod(labels=labels, ownerReferences=[JOB_REF], annotations={"slurm-keda.io/account": "a"})
    owners = {
        ("Job", "team-a", "train"): owner({"slurm-keda.io/partition": "gpu", "slurm-keda.io/account": "b"}),
        ("JobSet", "team-a", "train"): owner({"slurm-keda.io/partition": "cpu", "slurm-keda.io/qos": "x"}),
    }
    got = inherited(p, owners)
    assert got.annotations == {"slurm-keda.io/partition": "gpu", "slurm-keda.io/qos": "x"}
    assert [k[0] for k in owner_keys(p)] == ["Job", "JobSet"]


def test_every_kind_of_owner_and_only_in_the_pods_namespace() -> None:
    gpu = {"slurm-keda.io/partition": "gpu"}
    for label, kind in (
        ("jobset.sigs.k8s.io/jobset-name", "JobSet"),
        ("leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet"),
        ("scheduling.x-k8s.io/pod-group", "PodGroup"),
    ):
        p = pod(labels={label: "train"})
        assert inherited(p, {(kind, "team-a", "train"): owner(gpu)}).annotations == gpu
        elsewhere = {(kind, "team-b", "train"): owner(gpu, namespace="team-b")}
        assert inherited(p, elsewhere).annotations == {}
    jobset_pod = pod(labels={"jobset.sigs.k8s.io/jobset-name": "train"})  # placed alone: no group-size
    assert submitted(jobset_pod, {("JobSet", "team-a", "train"): owner(gpu)}).partition == "gpu"


def test_bookkeeping_and_membership_annotations_are_not_inherited() -> None:
    notes = {"slurm-keda.io/job-id": "7", "slurm-keda.io/group": "g", "slurm-keda.io/opt-out": "true"}
    got = inherited(pod(ownerReferences=[JOB_REF]), {("Job", "team-a", "train"): owner({**notes, "x": "y"})})
    assert got.annotations == {}


def test_an_owners_choice_outside_the_policy_refuses_its_pods() -> None:
    p = pod(ownerReferences=[JOB_REF])
    (action,) = plan(
        world(pods=[p], owners={("Job", "team-a", "train"): owner({"slurm-keda.io/partition": "debug"})}),
        OPTIONS,
    )
    assert isinstance(action, Refuse) and "partition 'debug'" in action.reason


def test_an_admission_is_judged_again_when_the_owner_changes() -> None:
    p = pod(ownerReferences=[JOB_REF], resourceVersion="1")
    memo: dict[AdmissionKey, JobRequest | Refusal | None] = {}
    first = {("Job", "team-a", "train"): owner({"slurm-keda.io/partition": "gpu"})}
    (a,) = plan(world(pods=[p], owners=first, admissions=memo), OPTIONS)
    later = {("Job", "team-a", "train"): owner({"slurm-keda.io/partition": "cpu"})}
    (b,) = plan(world(pods=[p], owners=later, admissions=memo), OPTIONS)
    assert isinstance(a, Submit) and isinstance(b, Submit)
    assert (a.request.partition, b.request.partition) == ("gpu", "cpu")
    assert len(memo) == 2
    assert json.dumps(sorted(k[3] for k in memo)) == json.dumps(
        [[["slurm-keda.io/partition", "cpu"]], [["slurm-keda.io/partition", "gpu"]]]
    )
