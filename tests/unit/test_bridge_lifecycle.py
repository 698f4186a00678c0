"""The bridge keeps Kubernetes' promises over the whole job lifecycle (bridge/actions.py): a pod is never
deleted for something kube-scheduler would leave Pending, a pod never runs on once its job stopped running
on its node, a failed job is retried a bounded number of times, gated pods wait, DRA claims are refused.
Hand-built worlds; the live side is tests/live/test_bridge_lifecycle_live.py."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from typing import Any

import msgspec
import pytest

from bridge.actions import (
    GATED_MESSAGE,
    JOB_ID_ANNOTATION,
    JOBS_FAILED,
    SCHEDULING_GATED,
    SLURM_NODE_ANNOTATION,
    BridgeOptions,
    Cancel,
    DeletePod,
    Refuse,
    Submit,
    Submitted,
    Waiting,
    plan,
)
from bridge.jobdesc import submit_body
from bridge.pods import decode_pod
from bridge.policy import PolicyError, parse_policy
from bridge.requests import (
    RELEASE_MOVED,
    RELEASE_UNBOUND,
    JobRequest,
    Refusal,
    admit,
    gang_request,
    parse_admin_comment,
    released_comment,
)
from exporter.model import Job
from testkit.builders import ALLOCATABLE, NOW, OPTIONS, comment, job, k8s_node, pod, pod_doc, snapshot, world
from testkit.paths import ROOT

# -- a job that ended before its pod was placed ------------------------------------------------------------


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL", "FAILED", "PREEMPTED", "OUT_OF_MEMORY"])
def test_a_job_the_cluster_failed_before_placement_is_submitted_again(state: str) -> None:
    (action,) = plan(world(job(7, "u1", state, reason="NodeDown"), pods=[pod()]), OPTIONS)
    assert isinstance(action, Submit) and action.uid == "u1"
    # not twice: the new submission is remembered until a snapshot shows it
    assert (
        plan(world(job(7, "u1", state), pods=[pod()], submitted={"u1": Submitted(8, NOW - 0.5)}), OPTIONS)
        == []
    )


def test_after_the_limit_of_failed_jobs_the_pod_stays_pending_with_the_reason() -> None:
    failed = [job(i, "u1", "NODE_FAIL", reason="NodeDown") for i in (7, 8)]
    (again,) = plan(world(*failed, pods=[pod()]), OPTIONS)
    assert isinstance(again, Submit)  # two failures: a third job
    three = [*failed, job(9, "u1", "BOOT_FAIL", reason="NodeDown")]
    (action,) = plan(world(*three, pods=[pod()]), OPTIONS)
    assert isinstance(action, Waiting) and action.reason == JOBS_FAILED
    assert action.message.startswith("3 Slurm jobs of pod team-a/p-u1 ended before it could be placed")
    assert "job 9 BOOT_FAIL (NodeDown)" in action.message
    more = BridgeOptions(instance="cluster-a", policy=OPTIONS.policy, failed_job_limit=4)
    assert isinstance(plan(world(*three, pods=[pod()]), more)[0], Submit)


def test_the_bridges_own_moves_are_not_failures_but_unbindable_releases_are() -> None:
    moved = released_comment(comment("u1"), RELEASE_MOVED)
    unbound = released_comment(comment("u1"), RELEASE_UNBOUND)
    jobs = [Job(job_id=i, state="CANCELLED", admin_comment=moved) for i in (4, 5, 6, 7)]
    (action,) = plan(world(*jobs, pods=[pod()]), OPTIONS)
    assert isinstance(action, Submit)  # four moves (a taint, a cordon...): placed again
    jobs = [Job(job_id=i, state="CANCELLED", admin_comment=unbound) for i in (4, 5, 6)]
    (action,) = plan(world(*jobs, pods=[pod()]), OPTIONS)
    assert isinstance(action, Waiting) and action.reason == JOBS_FAILED


@pytest.mark.parametrize(
    ("state", "reason"), [("CANCELLED", "None"), ("DEADLINE", "DeadLine"), ("TIMEOUT", "TimeLimit")]
)
def test_an_scancel_or_the_jobs_own_limits_are_verdicts_that_delete_the_pod(state: str, reason: str) -> None:
    (action,) = plan(world(job(7, "u1", state, reason=reason), pods=[pod()]), OPTIONS)
    assert isinstance(action, DeletePod) and f"Slurm job 7 of pod team-a/p-u1 ended {state}" in action.why


def test_a_job_released_for_a_node_kubernetes_rules_out_is_marked_then_placed_again() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", cordoned=True)]
    running = job(7, "u1", "RUNNING", nodes="c2")
    (release,) = plan(world(running, pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(release, Cancel) and release.release == RELEASE_MOVED
    marked = parse_admin_comment(release.admin_comment)
    assert marked is not None and marked.release == RELEASE_MOVED and marked.instance == "cluster-a"
    # what a restarted bridge reads after the cancel: its own release, not an scancel
    ended = Job(job_id=7, state="CANCELLED", admin_comment=release.admin_comment)
    (action,) = plan(world(ended, pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c2", "c3")


def test_a_gang_whose_job_failed_on_a_node_is_submitted_again_and_an_scancel_deletes_it() -> None:
    def member(name: str) -> Any:
        notes = {"slurm-keda.io/group": "g", "slurm-keda.io/group-size": "2"}
        return decode_pod(json.dumps(pod_doc(name, uid=f"uid-{name}", annotations=notes)))

    def gang_job(job_id: int, state: str) -> Job:
        pods = [{"namespace": "team-a", "name": u, "uid": f"uid-{u}"} for u in ("w-0", "w-1")]
        doc = {"slurm-keda": {"instance": "cluster-a", "pods": pods, "group": "group team-a/g"}}
        return Job(job_id=job_id, state=state, admin_comment=json.dumps(doc), reason="None")

    members = [member("w-0"), member("w-1")]
    (again,) = plan(world(gang_job(7, "NODE_FAIL"), pods=members), OPTIONS)
    assert isinstance(again, Submit) and again.uids == ("uid-w-0", "uid-w-1")
    failed = [gang_job(i, "NODE_FAIL") for i in (7, 8, 9)]
    waits = plan(world(*failed, pods=members), OPTIONS)
    assert [type(a) for a in waits] == [Waiting, Waiting] and all(a.reason == JOBS_FAILED for a in waits)  # type: ignore[union-attr]
    deleted = plan(world(gang_job(7, "NODE_FAIL"), gang_job(8, "CANCELLED"), pods=members), OPTIONS)
    assert [type(a) for a in deleted] == [DeletePod, DeletePod]


# -- a bound pod whose job stopped running on its node -------------------------------------------------------


def bound(uid: str = "u1", slurm_node: str = "c1", **kw: Any) -> Any:
    notes = {JOB_ID_ANNOTATION: "7", SLURM_NODE_ANNOTATION: slurm_node}
    return pod(
        uid,
        node=slurm_node,
        labels={JOB_ID_ANNOTATION: "7"},
        annotations=notes,
        status={"phase": "Running"},
        **kw,
    )


@pytest.mark.parametrize(
    ("state", "reason"), [("SUSPENDED", "None"), ("PENDING", "BeginTime"), ("REQUEUED", "None")]
)
def test_a_pod_whose_job_is_suspended_or_requeued_is_stopped_naming_the_job(state: str, reason: str) -> None:
    stopped = job(7, "u1", state, reason=reason, nodes="c1")
    (action,) = plan(world(stopped, pods=[bound()]), OPTIONS)
    assert isinstance(action, DeletePod) and action.event == "SlurmJobStopped"
    assert action.why.startswith(f"Slurm job 7 is {state}")


def test_a_pod_whose_job_runs_elsewhere_is_stopped_and_one_running_here_is_left_alone() -> None:
    moved = job(7, "u1", "RUNNING", nodes="c2")
    (action,) = plan(world(moved, pods=[bound()]), OPTIONS)
    assert isinstance(action, DeletePod) and "runs on c2, no longer on c1" in action.why
    assert plan(world(job(7, "u1", "RUNNING", nodes="c[1-2]"), pods=[bound()]), OPTIONS) == []
    leaving = bound(deletionTimestamp="2027-02-01T00:00:00Z")  # already going: not deleted again
    assert plan(world(job(7, "u1", "SUSPENDED", nodes="c1"), pods=[leaving]), OPTIONS) == []
    done = pod("u1", node="c1", labels={JOB_ID_ANNOTATION: "7"}, status={"phase": "Succeeded"})
    (cancel,) = plan(world(job(7, "u1", "SUSPENDED", nodes="c1"), pods=[done]), OPTIONS)
    assert isinstance(cancel, Cancel)  # a finished pod frees its suspended job


# -- scheduling gates, DRA -----------------------------------------------------------------------------------


def test_a_gated_pod_waits_as_kube_scheduler_says_and_is_submitted_once_ungated() -> None:
    gated = pod(spec={"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]})
    assert plan(world(pods=[gated]), OPTIONS) == [
        Waiting("team-a/p-u1", "u1", GATED_MESSAGE, SCHEDULING_GATED)
    ]
    assert isinstance(plan(world(pods=[pod()]), OPTIONS)[0], Submit)


def test_a_pod_with_dra_claims_is_refused_with_a_clear_message() -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    (action,) = plan(world(pods=[pod(spec={"resourceClaims": claims})]), OPTIONS)
    assert isinstance(action, Refuse) and "Dynamic Resource Allocation" in action.reason
    assert "spec.resourceClaims (gpu)" in action.reason


def test_kubernetes_1_35_workload_gangs_are_refused_never_placed_by_halves() -> None:
    (action,) = plan(world(pods=[pod(spec={"workloadRef": {"name": "train", "podGroup": "w"}})]), OPTIONS)
    assert isinstance(action, Refuse) and "spec.workloadRef (train)" in action.reason


def test_a_kubernetes_podgroup_gang_is_one_job_and_a_basic_one_is_placed_pod_by_pod() -> None:
    """1.36's ``spec.schedulingGroup``: the PodGroup's gang ``minCount`` members are one job of that many
    nodes; a basic policy places each pod alone; unknown or missing groups wait."""
    members = [pod(f"w{i}", spec={"schedulingGroup": {"podGroupName": "train"}}) for i in range(3)]
    gang = plan(world(pods=members, scheduling_groups={("team-a", "train"): 2}), OPTIONS)
    submits = [a for a in gang if isinstance(a, Submit)]
    assert len(submits) == 1 and submits[0].request.nodes == 2 and submits[0].uids == ("w0", "w1")
    assert submits[0].group == "SchedulingGroup team-a/train"
    basic = plan(world(pods=members, scheduling_groups={("team-a", "train"): None}), OPTIONS)
    assert [type(a) for a in basic] == [Submit, Submit, Submit]
    assert all(a.group is None for a in basic if isinstance(a, Submit))
    unlisted = plan(world(pods=members), OPTIONS)
    assert {type(a) for a in unlisted} == {Waiting} and "not listed yet" in unlisted[0].message  # type: ignore[union-attr]
    missing = plan(world(pods=members, scheduling_groups={}), OPTIONS)
    assert "Kubernetes PodGroup team-a/train does not exist" in missing[0].message  # type: ignore[union-attr]
    off = plan(world(pods=members, scheduling_groups="Kubernetes PodGroups are off"), OPTIONS)
    assert "are off" in off[0].message  # type: ignore[union-attr]


def test_devices_slurm_is_not_asked_for_are_refused_naming_them() -> None:
    mig = [{"name": "m", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}]
    (action,) = plan(world(pods=[pod(spec={"containers": mig})]), OPTIONS)
    assert isinstance(action, Refuse) and action.reason.startswith("resource nvidia.com/mig-1g.5gb:")
    fine = [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}]
    (action,) = plan(world(pods=[pod(spec={"containers": fine})]), OPTIONS)
    assert isinstance(action, Submit) and action.request.gpus == 1


def test_devices_map_through_the_namespace_policy_to_slurm_gres() -> None:
    """The policy's ``devices``: a MIG profile (or any extended resource) becomes a typed GRES per node; in a
    gang each node gets the largest member's count; a bad map stops the policy with one line."""
    policy = parse_policy(
        {
            "namespaces": {
                "team-a": {
                    "user_id": 1001,
                    "partitions": ["cpu"],
                    "devices": {"nvidia.com/mig-1g.5gb": "gpu:1g.5gb", "example.com/fpga": "fpga"},
                }
            }
        }
    )
    options = BridgeOptions(instance="cluster-a", policy=policy)
    asks = {"nvidia.com/mig-1g.5gb": "2", "nvidia.com/gpu": "1", "example.com/fpga": "1"}
    mig = [{"name": "m", "resources": {"limits": asks}}]
    nodes = [
        k8s_node(n, allocatable={**ALLOCATABLE, "nvidia.com/mig-1g.5gb": "7", "example.com/fpga": "1"})
        for n in ("c1", "c2", "c3")
    ]
    (action,) = plan(world(pods=[pod(spec={"containers": mig})], nodes=nodes), options)
    assert isinstance(action, Submit) and action.request.gres == (("fpga", 1), ("gpu:1g.5gb", 2))
    body = submit_body(action.request, "v0.0.45", instance="cluster-a")["job"]
    assert body["tres_per_node"] == "gres/gpu:1,gres/fpga:1,gres/gpu:1g.5gb:2"
    (action,) = plan(world(pods=[pod(spec={"containers": mig})]), options)  # no node has the devices
    assert isinstance(action, Waiting) and "Insufficient example.com/fpga" in action.message
    big = gang_request(
        [replace(action_request(options, 1), gres=(("fpga", 1),)), action_request(options, 3)], "g"
    )
    assert not isinstance(big, Refusal) and big.gres == (("fpga", 1), ("gpu:1g.5gb", 3))
    for bad, why in (
        ({"nvidia.com/mig-1g.5gb": "gpu 1g"}, "a Slurm GRES"),
        ({"mig": "gpu"}, "not an extended resource name"),
        (["x"], "a mapping of extended resources"),
    ):
        doc = {"namespaces": {"team-a": {"user_id": 1, "partitions": ["cpu"], "devices": bad}}}
        with pytest.raises(PolicyError, match=why):
            parse_policy(doc)


def action_request(options: BridgeOptions, mig: int) -> JobRequest:
    containers = [{"name": "m", "resources": {"limits": {"nvidia.com/mig-1g.5gb": str(mig)}}}]
    got = admit(
        pod(spec={"containers": containers}),
        scheduler_name="slurm-bridge",
        own_namespace="x",
        policy=options.policy,
    )
    assert isinstance(got, JobRequest)
    return got


# -- every place the bridge deletes a pod --------------------------------------------------------------------

DELETES = {
    ("bridge/actions.py", "_single"): "its job ended as a verdict (scancel, deadline, time limit) before "
    "placement: ctx.ended says 'delete' only for VERDICTS not released by the bridge",
    ("bridge/actions.py", "_gang"): "the same verdict for a whole gang, every member still there",
    ("bridge/actions.py", "_bound_job"): "a bound pod whose job ended, is gone from Slurm or is not "
    "RUNNING on the pod's node (suspended, requeued, elsewhere): its node was given back or may be handed "
    "to another job; a pod that finished or is going away is left alone",
    ("bridge/controller.py", "_do"): "applies a DeletePod action, nothing else (uid precondition)",
}
"""(file, function) → why deleting a pod there is safe: never for anything kube-scheduler would leave
Pending (no node fits, a gate, a failed node, a failed binding)."""


def _deleting_functions() -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / "bridge").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                call = node.func if isinstance(node, ast.Call) else None
                name = (
                    call.id
                    if isinstance(call, ast.Name)
                    else call.attr
                    if isinstance(call, ast.Attribute)
                    else ""
                )
                if name in ("DeletePod", "delete_pod"):
                    rel = str(path.relative_to(ROOT))
                    found.add((rel, fn.name))
    return found


def test_every_place_the_bridge_deletes_a_pod_is_named_with_why_it_is_safe() -> None:
    found = {k for k in _deleting_functions() if k[0] != "bridge/kube.py"}
    assert found == set(DELETES), "a new place deletes pods: add it to DELETES with why it is safe"


def test_job_records_dropped_as_invalid_never_lead_to_a_deletion_or_a_second_job() -> None:
    """Partly invalid data: with job records dropped (the pod's job may be one of them), a bound pod whose
    job is missing is not deleted and a pod without a job is not submitted — it says why."""
    bound_pod = pod("u1", node="c1", labels={JOB_ID_ANNOTATION: "7"})
    partial = msgspec.structs.replace(snapshot(), dropped={"jobs": ("cpu",)})
    assert plan(world(pods=[bound_pod], snapshot=partial), OPTIONS) == []
    (waiting,) = plan(world(pods=[pod("u2")], snapshot=partial), OPTIONS)
    assert isinstance(waiting, Waiting) and "partly invalid" in waiting.message
    notes = {"slurm-keda.io/group": "g", "slurm-keda.io/group-size": "2"}
    gang = [pod(f"w{i}", annotations=notes) for i in range(2)]
    assert {type(a) for a in plan(world(pods=gang, snapshot=partial), OPTIONS)} == {Waiting}
    assert [type(a) for a in plan(world(pods=gang), OPTIONS)] == [Submit]
    whole = plan(world(pods=[bound_pod, pod("u2")]), OPTIONS)  # the same without the dropped records
    assert [type(a) for a in whole] == [DeletePod, Submit]


def test_nothing_kube_scheduler_would_leave_pending_deletes_a_pod() -> None:
    """The situations kube-scheduler leaves a pod Pending in, each through the plan: no DeletePod."""
    tainted = [
        k8s_node(n, taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}]) for n in ("c1", "c2", "c3")
    ]
    situations = {
        "fits nowhere": world(pods=[pod()], nodes=tainted),
        "fits nowhere, its job refused": world(
            job(7, "u1", "FAILED", reason="BadConstraints"), pods=[pod()], nodes=tainted
        ),
        "gated": world(pods=[pod(spec={"schedulingGates": [{"name": "g"}]})]),
        "node failed before binding": world(job(7, "u1", "NODE_FAIL"), pods=[pod()]),
        "boot failed three times": world(*(job(i, "u1", "BOOT_FAIL") for i in (7, 8, 9)), pods=[pod()]),
        "released: node ruled out": world(
            Job(job_id=7, state="CANCELLED", admin_comment=released_comment(comment("u1"), RELEASE_MOVED)),
            pods=[pod()],
        ),
        "released: not bindable": world(
            Job(job_id=7, state="CANCELLED", admin_comment=released_comment(comment("u1"), RELEASE_UNBOUND)),
            pods=[pod()],
        ),
        "DRA claims": world(pods=[pod(spec={"resourceClaims": [{"name": "c"}]})]),
        "claim missing": world(
            pods=[pod(spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "x"}}]})]
        ),
    }
    for what, w in situations.items():
        actions = plan(w, OPTIONS)
        assert not any(isinstance(a, DeletePod) for a in actions), (what, actions)
        assert actions, what  # and the pod is told why (Waiting / Refuse) or placed again
