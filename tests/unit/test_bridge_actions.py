"""The bridge's plan (bridge/actions.py): pods and Slurm jobs in, actions out — on hand-built worlds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from bridge.actions import (
    JOB_ID_ANNOTATION,
    JOB_ID_LABEL,
    Bind,
    BridgeOptions,
    Cancel,
    DeletePod,
    Label,
    Refuse,
    Submit,
    Submitted,
    Waiting,
    plan,
)
from bridge.pods import decode_pod
from bridge.policy import parse_policy
from bridge.requests import PREFIX, JobRequest
from exporter.model import Job, Snapshot
from testkit.builders import NOW, OPTIONS, job, k8s_node, pod, snapshot, world


def test_a_new_pod_is_submitted_with_unusable_nodes_excluded() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", cordoned=True), k8s_node("k8s-3", slinky_name="x")]
    # c3 has no Kubernetes node at all, c2 is cordoned: Slurm must not put the pod there
    (action,) = plan(world(pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit)
    assert action.excluded_nodes == ("c2", "c3")
    assert isinstance(action.request, JobRequest) and action.request.user_id == 1001


def test_a_submission_not_yet_in_the_snapshot_is_not_repeated() -> None:
    w = world(pods=[pod()], submitted={"u1": Submitted(7, NOW - 0.5)})  # after the snapshot's jobs fetch
    assert plan(w, OPTIONS) == []
    seen = world(pods=[pod()], submitted={"u1": Submitted(7, NOW - 2)})  # before it, and the job is not there
    assert [type(a) for a in plan(seen, OPTIONS)] == [Submit]


def test_stale_data_means_no_action_at_all() -> None:
    gone = job(5, "u-gone", "RUNNING", nodes="c1")
    stale = snapshot(gone, job(6, "u1", "COMPLETED"), age=31.0)
    bound = pod("u1", node="c1", labels={JOB_ID_LABEL: "6"})
    assert plan(world(pods=[pod("u2"), bound], snapshot=stale), OPTIONS) == []
    missing_nodes = Snapshot(taken_at=NOW, api_version="v0.0.45", jobs=(gone,), fetched_at={"jobs": NOW})
    assert plan(world(pods=[], snapshot=missing_nodes), OPTIONS) == []


def test_a_pending_job_is_mirrored_into_the_pod() -> None:
    start = datetime(2027, 1, 15, 12, 30, tzinfo=UTC).timestamp()
    (action,) = plan(world(job(7, "u1", reason="Priority", start_time=start), pods=[pod()]), OPTIONS)
    assert action == Waiting("team-a/p-u1", "u1", "Slurm job 7: Priority, expected start 12:30 UTC")


def test_a_running_job_binds_its_pod_to_the_node_slurm_chose() -> None:
    nodes = [k8s_node("worker-17", **{"slinky.slurm.net/slurm-nodename": "c2"})]
    (action,) = plan(world(job(7, "u1", "RUNNING", nodes="c2"), pods=[pod()], nodes=nodes), OPTIONS)
    assert action == Bind("team-a/p-u1", "u1", 7, "worker-17", "c2")


def test_a_job_placed_on_an_unusable_node_is_cancelled_to_be_resubmitted() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", ready=False)]
    (action,) = plan(world(job(7, "u1", "RUNNING", nodes="c2"), pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Cancel) and action.job_id == 7 and "c2" in action.why


def test_a_job_that_ended_before_binding_deletes_its_pod() -> None:
    (action,) = plan(world(job(7, "u1", "CANCELLED"), pods=[pod()]), OPTIONS)
    assert isinstance(action, DeletePod) and "ended CANCELLED" in action.why


def test_bound_pods_follow_their_job() -> None:
    labels = {JOB_ID_LABEL: "7"}
    ended = plan(
        world(job(7, "u1", "TIMEOUT", reason="TimeLimit"), pods=[pod(node="c1", labels=labels)]), OPTIONS
    )
    assert ended == [DeletePod("team-a/p-u1", "u1", "Slurm job 7 ended: TIMEOUT (TimeLimit)")]
    vanished = plan(world(pods=[pod(node="c1", labels=labels)]), OPTIONS)
    assert vanished == [DeletePod("team-a/p-u1", "u1", "Slurm job 7 is gone from Slurm")]
    running = job(7, "u1", "RUNNING", nodes="c1")
    assert plan(world(running, pods=[pod(node="c1", labels=labels)]), OPTIONS) == []
    done = pod(node="c1", labels=labels, status={"phase": "Succeeded"})
    assert plan(world(running, pods=[done]), OPTIONS) == [
        Cancel(7, "pod team-a/p-u1 succeeded", "team-a/p-u1")
    ]
    assert plan(world(running, pods=[pod(node="c1")]), OPTIONS) == []  # bound by someone else: not ours


def test_a_pod_bound_with_the_job_id_annotation_is_ours_and_gets_the_label() -> None:
    running = job(7, "u1", "RUNNING", nodes="c1")
    annotated = pod(node="c1", annotations={JOB_ID_ANNOTATION: "7"})
    assert plan(world(running, pods=[annotated]), OPTIONS) == [Label("team-a/p-u1", "u1", "7")]
    both = pod(node="c1", labels={JOB_ID_LABEL: "7"}, annotations={JOB_ID_ANNOTATION: "7"})
    assert plan(world(running, pods=[both]), OPTIONS) == []
    ended = pod(node="c1", annotations={JOB_ID_ANNOTATION: "7"}, status={"phase": "Succeeded"})
    assert plan(world(running, pods=[ended]), OPTIONS) == [  # no label on a pod that is done
        Cancel(7, "pod team-a/p-u1 succeeded", "team-a/p-u1")
    ]
    gone = plan(world(pods=[annotated]), OPTIONS)
    assert gone == [DeletePod("team-a/p-u1", "u1", "Slurm job 7 is gone from Slurm")]


def test_a_pod_stuck_terminating_frees_its_slurm_job_after_the_grace_period() -> None:
    running = job(7, "u1", "RUNNING", nodes="c1")
    ends = datetime.fromtimestamp(NOW - 10, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminating = pod(node="c1", labels={JOB_ID_LABEL: "7"}, deletionTimestamp=ends)
    assert plan(world(running, pods=[terminating]), OPTIONS) == []  # 10 s past: its containers may still stop
    later = plan(world(running, pods=[terminating], now=NOW + 25), OPTIONS)
    assert len(later) == 1 and isinstance(later[0], Cancel) and "stuck Terminating" in later[0].why


def test_jobs_without_pods_are_cancelled_only_from_a_complete_pod_list() -> None:
    orphan = job(9, "u-gone", "RUNNING", nodes="c3")
    assert plan(world(orphan, pods=[]), OPTIONS) == [Cancel(9, "its pod is gone")]
    assert plan(world(orphan, pods=[], pods_complete=False), OPTIONS) == []
    others = job(10, "u-gone", "RUNNING", nodes="c3", instance="cluster-b")  # another cluster's bridge
    assert plan(world(others, pods=[]), OPTIONS) == []
    foreign = Job(job_id=11, state="RUNNING", admin_comment="maintenance")
    assert plan(world(foreign, pods=[]), OPTIONS) == []


def test_duplicate_jobs_for_one_pod_keep_the_newest() -> None:
    actions = plan(world(job(7, "u1"), job(8, "u1", reason="Priority"), pods=[pod()]), OPTIONS)
    assert Cancel(7, "a newer job holds the same pod") in actions
    assert Waiting("team-a/p-u1", "u1", "Slurm job 8: Priority") in actions


def test_refused_pods_are_refused_not_submitted() -> None:
    bad = decode_pod(
        json.dumps(
            {
                "metadata": {
                    "name": "x",
                    "namespace": "team-a",
                    "uid": "u9",
                    "annotations": {PREFIX + "user": "0"},
                },
                "spec": {"schedulerName": "slurm-bridge", "containers": [{"name": "m"}]},
            }
        )
    )
    (action,) = plan(world(pods=[bad]), OPTIONS)
    assert isinstance(action, Refuse) and "cannot choose another" in action.reason


def test_a_namespace_selected_by_its_labels_is_managed() -> None:
    options = BridgeOptions(
        instance="cluster-a",
        policy=parse_policy(
            {"namespace_selectors": [{"selector": "tenant=ml", "user_id": 3003, "partitions": ["cpu"]}]}
        ),
    )
    p = decode_pod(
        json.dumps(
            {
                "metadata": {"name": "x", "namespace": "ml-prod", "uid": "u9"},
                "spec": {"schedulerName": "slurm-bridge", "containers": [{"name": "m"}]},
            }
        )
    )
    (taken,) = plan(world(pods=[p], namespaces={"ml-prod": {"tenant": "ml"}}), options)
    assert isinstance(taken, Submit) and taken.request.user_id == 3003
    (refused,) = plan(world(pods=[p], namespaces={"ml-prod": {"tenant": "web"}}), options)
    assert isinstance(refused, Refuse) and "not managed" in refused.reason


def test_a_listing_requested_before_a_submission_does_not_hide_it() -> None:
    # a 10,000-job /jobs takes seconds: a listing answered after the submission may still predate it
    slow = Snapshot(
        taken_at=NOW,
        api_version="v0.0.45",
        nodes=snapshot().nodes,
        fetched_at={"jobs": NOW - 1, "nodes": NOW - 1},
        requested_at={"jobs": NOW - 9, "nodes": NOW - 1.2},
    )
    w = world(pods=[pod()], snapshot=slow, submitted={"u1": Submitted(7, NOW - 5)})
    assert plan(w, OPTIONS) == []  # not submitted again: the listing was requested before job 7 existed
    later = world(pods=[pod()], snapshot=slow, submitted={"u1": Submitted(7, NOW - 10)})
    assert [type(a) for a in plan(later, OPTIONS)] == [Submit]


def test_admissions_are_remembered_per_pod_version() -> None:
    cache: dict[Any, Any] = {}
    first = pod(resourceVersion="5")
    (action,) = plan(world(pods=[first], admissions=cache), OPTIONS)
    assert isinstance(action, Submit) and len(cache) == 1
    # the same version again comes from the memo; a changed pod (new version) is admitted afresh
    changed = pod(resourceVersion="6", annotations={PREFIX + "user": "0"})
    (refused,) = plan(world(pods=[changed], admissions=cache), OPTIONS)
    assert isinstance(refused, Refuse) and len(cache) == 2
