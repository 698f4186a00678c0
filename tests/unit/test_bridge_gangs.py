"""Gangs in the bridge's pure core: which pods form a group (bridge/groups.py), the gang's one job request
(bridge/requests.py), and the plan's rules for gangs (bridge/actions.py) — on hand-built worlds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.actions import Bind, BridgeOptions, Cancel, DeletePod, Refuse, Submit, Submitted, Waiting, plan
from bridge.groups import GroupError, GroupKey, group_size, membership
from bridge.jobdesc import submit_body
from bridge.pods import decode_pod
from bridge.policy import parse_policy
from bridge.requests import PREFIX, JobRequest, parse_admin_comment
from exporter.model import Job
from testkit.builders import NOW, OPTIONS, world
from testkit.paths import SHARED

LWS = "leaderworkerset.sigs.k8s.io/"


def member(
    name: str,
    uid: str | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    node: str | None = None,
    phase: str = "Pending",
    **meta: Any,
) -> Any:
    doc: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": meta.pop("namespace", "team-a"),
            "uid": uid or f"uid-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
            **meta,
        },
        "spec": {
            "schedulerName": "slurm-bridge",
            "containers": [{"name": "m", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }
    if node:
        doc["spec"]["nodeName"] = node
    return decode_pod(json.dumps(doc))


def grouped(name: str, group: str = "g", size: int = 2, **kw: Any) -> Any:
    notes = {PREFIX + "group": group, PREFIX + "group-size": str(size), **kw.pop("annotations", {})}
    return member(name, annotations=notes, **kw)


def lws_pod(group_index: int, worker: int, size: int = 3, **kw: Any) -> Any:
    labels = {
        LWS + "name": "llm",
        LWS + "group-index": str(group_index),
        LWS + "group-key": f"key{group_index}",
        LWS + "worker-index": str(worker),
    }
    name = f"llm-{group_index}" if worker == 0 else f"llm-{group_index}-{worker}"
    return member(name, labels=labels, annotations={LWS + "size": str(size)}, **kw)


def gang_job(
    job_id: int, uids: list[str], state: str = "PENDING", group: str = "group team-a/g", **kw: Any
) -> Job:
    pods = [{"namespace": "team-a", "name": u, "uid": u} for u in uids]
    doc = {"slurm-keda": {"instance": "cluster-a", "pods": pods, "group": group}}
    return Job(job_id=job_id, state=state, admin_comment=json.dumps(doc, separators=(",", ":")), **kw)


# -- membership -----------------------------------------------------------------------------------


def test_each_kind_of_group_and_its_rank_order() -> None:
    explicit = membership(grouped("w-10", size=4))
    assert explicit is not None and explicit.group == GroupKey("team-a", "group", "g") and explicit.size == 4
    pg = membership(member("a", labels={"scheduling.x-k8s.io/pod-group": "train"}))
    assert pg is not None and pg.group.kind == "PodGroup" and pg.size is None
    leader, worker = membership(lws_pod(1, 0)), membership(lws_pod(1, 2))
    assert leader is not None and worker is not None
    assert leader.group == worker.group == GroupKey("team-a", "LeaderWorkerSet", "llm-1", "key1")
    assert leader.size == 3 and leader.order() < worker.order()
    assert membership(lws_pod(0, 0)).group != leader.group  # type: ignore[union-attr]  # another replica
    job_labels = {"batch.kubernetes.io/job-name": "mpi", "batch.kubernetes.io/controller-uid": "j1"}
    indexed = [
        membership(
            member(
                f"mpi-{i}-x",
                labels=job_labels,
                annotations={"batch.kubernetes.io/job-completion-index": str(i), PREFIX + "group-size": "12"},
            )
        )
        for i in (10, 2)
    ]
    assert all(m is not None and m.group == GroupKey("team-a", "Job", "mpi", "j1") for m in indexed)
    assert indexed[1].order() < indexed[0].order()  # type: ignore[union-attr]  # index 2 before 10
    # names compare naturally when there is no index: w-2 before w-10
    assert membership(grouped("w-2")).order() < membership(grouped("w-10")).order()  # type: ignore[union-attr]
    assert membership(member("alone")) is None
    # an indexed Job without the annotation is not a gang: each pod alone
    assert membership(member("j", labels=job_labels)) is None


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (grouped("a", size=0), "between 1 and 1024"),
        (grouped("a", size=5000), "between 1 and 1024"),
        (
            member("a", annotations={PREFIX + "group": "g", PREFIX + "group-size": "two"}),
            "non-negative integer",
        ),
        (member("a", annotations={PREFIX + "group": "g"}), "missing"),
        (member("a", annotations={PREFIX + "group": "../x", PREFIX + "group-size": "2"}), "not a valid name"),
        (member("a", annotations={PREFIX + "group-size": "2"}), "needs slurm-keda.io/group"),
        (member("a", labels={LWS + "name": "x"}, annotations={LWS + "size": "2"}), "needs labels"),
        (
            member(
                "a", labels={"batch.kubernetes.io/job-name": "j"}, annotations={PREFIX + "group-size": "2"}
            ),
            "Indexed Job",
        ),
    ],
)
def test_malformed_group_annotations_are_refused_naming_them(pod: Any, why: str) -> None:
    with pytest.raises(GroupError, match=why):
        membership(pod)
    (action,) = plan(world(pods=[pod]), OPTIONS)
    assert isinstance(action, Refuse) and why in action.reason


def test_a_pod_groups_size_is_its_min_member() -> None:
    m = membership(member("a", labels={"scheduling.x-k8s.io/pod-group": "train"}))
    assert m is not None
    assert group_size(m, None) == "PodGroups are not listed yet"
    off = "PodGroups are off: the Kubernetes API has no scheduling.x-k8s.io/v1alpha1 podgroups"
    assert group_size(m, off) == off  # said as it is: no CRD (or --no-bridge-pod-groups)
    assert group_size(m, {}) == "PodGroup team-a/train does not exist"
    assert group_size(m, {("team-a", "train"): 2}) == 2
    assert group_size(m, {("other", "train"): 2}) == "PodGroup team-a/train does not exist"  # own namespace


# -- the gang's request ---------------------------------------------------------------------------------


def test_a_gang_is_one_job_of_one_node_per_member_in_rank_order() -> None:
    pods = [grouped("w-1", cpu="2"), grouped("w-0", cpu="500m")]
    (action,) = plan(world(pods=pods), OPTIONS)
    assert isinstance(action, Submit) and action.group == "group team-a/g"
    assert action.pod == "team-a/w-0" and action.uids == ("uid-w-0", "uid-w-1")  # the leader first
    r = action.request
    assert (r.nodes, r.cpus, r.name) == (2, 2, "k8s:team-a/g")  # the largest member on every node
    body = submit_body(r, "v0.0.45", instance="cluster-a")["job"]
    assert (body["minimum_nodes"], body["maximum_nodes"], body["tasks"], body["tasks_per_node"]) == (
        2,
        2,
        2,
        1,
    )
    comment = parse_admin_comment(body["admin_comment"])
    assert comment is not None and comment.group == "group team-a/g"
    assert [uid for _, _, uid in comment.pods] == ["uid-w-0", "uid-w-1"]


def test_members_that_disagree_on_the_partition_refuse_the_gang() -> None:
    policy = parse_policy({"namespaces": {"team-a": {"user_id": 1001, "partitions": ["cpu", "gpu"]}}})
    options = BridgeOptions(instance="cluster-a", policy=policy)
    pods = [grouped("w-0"), grouped("w-1", annotations={PREFIX + "partition": "gpu"})]
    actions = plan(world(pods=pods), options)
    assert [type(a) for a in actions] == [Refuse, Refuse]
    assert "different partitions" in actions[0].reason  # type: ignore[union-attr]


@pytest.mark.skipif(not (SHARED / "slurm-openapi").is_dir(), reason="../shared/slurm-openapi absent")
@pytest.mark.parametrize(("spec", "version"), [("26.05.5", "v0.0.45"), ("24.11.5", "v0.0.42")])
def test_gang_bodies_match_slurmrestds_schema(spec: str, version: str) -> None:
    import jsonschema

    (action,) = plan(world(pods=[grouped("w-0"), grouped("w-1")]), OPTIONS)
    assert isinstance(action, Submit) and isinstance(action.request, JobRequest)
    doc = json.loads((SHARED / "slurm-openapi" / f"slurmrestd-{spec}.json").read_text())
    schema = {"$ref": f"#/components/schemas/{version}_job_submit_req", "components": doc["components"]}
    jsonschema.validate(submit_body(action.request, version, instance="i"), schema)


# -- the gang's lifecycle --------------------------------------------------------------------------------


def test_an_incomplete_gang_waits_and_says_how_many_exist() -> None:
    actions = plan(world(pods=[grouped("w-0", size=3), grouped("w-1", size=3)]), OPTIONS)
    assert [type(a) for a in actions] == [Waiting, Waiting]
    assert "2 of 3 pods exist" in actions[0].message  # type: ignore[union-attr]


def test_a_gang_submission_not_yet_seen_is_not_repeated_whoever_leads() -> None:
    pods = [grouped("w-0"), grouped("w-1")]
    assert plan(world(pods=pods, submitted={"uid-w-1": Submitted(7, NOW - 0.5)}), OPTIONS) == []


def test_a_pending_gang_shows_slurms_reason_on_every_member() -> None:
    j = gang_job(7, ["uid-w-0", "uid-w-1"], reason="Resources")
    actions = plan(world(j, pods=[grouped("w-0"), grouped("w-1")]), OPTIONS)
    assert [a.message for a in actions] == ["Slurm job 7: Resources (group team-a/g, 2 nodes)"] * 2  # type: ignore[union-attr]


def test_a_running_gang_binds_rank_r_to_the_rth_node_of_slurms_host_list() -> None:
    j = gang_job(7, ["uid-w-0", "uid-w-1", "uid-w-2"], "RUNNING", nodes="c[1-3]")
    pods = [grouped("w-2", size=3), grouped("w-0", size=3), grouped("w-1", size=3)]
    actions = plan(world(j, pods=pods), OPTIONS)
    assert actions == [
        Bind("team-a/w-0", "uid-w-0", 7, "c1", "c1", 0, "c[1-3]"),
        Bind("team-a/w-1", "uid-w-1", 7, "c2", "c2", 1, "c[1-3]"),
        Bind("team-a/w-2", "uid-w-2", 7, "c3", "c3", 2, "c[1-3]"),
    ]
    # half bound already (a restart between bindings): the rest follow the same mapping
    bound = grouped("w-0", size=3, node="c1", labels={"slurm-keda.io/job-id": "7"})
    rest = plan(world(j, pods=[bound, pods[0], pods[2]]), OPTIONS)
    assert [(a.pod, a.node) for a in rest] == [("team-a/w-1", "c2"), ("team-a/w-2", "c3")]  # type: ignore[union-attr]


def test_a_gang_placed_on_an_unusable_node_is_cancelled_once() -> None:
    from testkit.builders import k8s_node

    j = gang_job(7, ["uid-w-0", "uid-w-1"], "RUNNING", nodes="c[1-2]")
    nodes = [k8s_node("c1"), k8s_node("c2", cordoned=True)]
    actions = plan(world(j, pods=[grouped("w-0"), grouped("w-1")], nodes=nodes), OPTIONS)
    assert len(actions) == 1 and isinstance(actions[0], Cancel) and "c2" in actions[0].why


def test_a_member_failing_or_deleted_before_the_gang_runs_cancels_its_job() -> None:
    j = gang_job(7, ["uid-w-0", "uid-w-1"], reason="Resources")
    failed = plan(world(j, pods=[grouped("w-0"), grouped("w-1", phase="Failed")]), OPTIONS)
    assert Cancel(7, "pod team-a/w-1 failed before it was placed", "team-a/w-1") in failed
    gone = plan(world(j, pods=[grouped("w-0")]), OPTIONS)
    assert Cancel(7, "its pod is gone") in gone


def test_a_gang_that_shrank_is_submitted_again_once_when_whole() -> None:
    cancelled = gang_job(7, ["uid-w-0", "uid-w-1"], "CANCELLED")
    # w-1 was replaced by a new pod (new uid): the cancelled job was not a verdict on the group
    pods = [grouped("w-0"), grouped("w-1", uid="uid-w-1b")]
    (action,) = plan(world(cancelled, pods=pods), OPTIONS)
    assert isinstance(action, Submit) and action.uids == ("uid-w-0", "uid-w-1b")
    # only once: the submission is remembered until the snapshot shows it
    assert plan(world(cancelled, pods=pods, submitted={"uid-w-0": Submitted(8, NOW - 0.5)}), OPTIONS) == []
    # shrunk and not yet replaced: it waits, it does not delete the survivor
    (waiting,) = plan(world(cancelled, pods=[grouped("w-0")]), OPTIONS)
    assert isinstance(waiting, Waiting) and "1 of 2 pods exist" in waiting.message


def test_a_gang_job_slurm_ended_before_placing_deletes_every_member() -> None:
    ended = gang_job(7, ["uid-w-0", "uid-w-1"], "CANCELLED", reason="None")
    actions = plan(world(ended, pods=[grouped("w-0"), grouped("w-1")]), OPTIONS)
    assert [type(a) for a in actions] == [DeletePod, DeletePod]
    assert "Slurm job 7 of group team-a/g ended CANCELLED" in actions[0].why  # type: ignore[union-attr]


def test_a_running_gang_follows_each_member() -> None:
    j = gang_job(7, ["uid-w-0", "uid-w-1"], "RUNNING", nodes="c[1-2]")
    labels = {"slurm-keda.io/job-id": "7"}
    w0, w1 = grouped("w-0", node="c1", labels=labels), grouped("w-1", node="c2", labels=labels)
    assert plan(world(j, pods=[w0, w1]), OPTIONS) == []
    failed = grouped("w-1", node="c2", labels=labels, phase="Failed")
    assert plan(world(j, pods=[w0, failed]), OPTIONS) == [Cancel(7, "pod team-a/w-1 failed", "team-a/w-1")]
    ended = gang_job(7, ["uid-w-0", "uid-w-1"], "CANCELLED", nodes="c[1-2]")
    deleted = plan(world(ended, pods=[w0, failed]), OPTIONS)
    assert [a.pod for a in deleted if isinstance(a, DeletePod)] == ["team-a/w-0"]  # the failed one stays


def test_pod_group_members_beyond_min_member_are_placed_alone_once_the_gang_runs() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "train"}
    pods = [member(f"t-{i}", labels=label) for i in range(3)]
    sizes = {("team-a", "train"): 2}
    (first,) = [a for a in plan(world(pods=pods, pod_groups=sizes), OPTIONS) if not isinstance(a, Waiting)]
    assert isinstance(first, Submit) and first.uids == ("uid-t-0", "uid-t-1") and first.request.nodes == 2
    pending = gang_job(7, ["uid-t-0", "uid-t-1"], group="PodGroup team-a/train")
    third = plan(world(pending, pods=pods, pod_groups=sizes), OPTIONS)[-1]
    assert isinstance(third, Waiting) and "waiting for the group's Slurm job 7" in third.message
    running = gang_job(7, ["uid-t-0", "uid-t-1"], "RUNNING", nodes="c[1-2]", group="PodGroup team-a/train")
    actions = plan(world(running, pods=pods, pod_groups=sizes), OPTIONS)
    assert [type(a) for a in actions] == [Bind, Bind, Submit]
    alone = actions[2]
    assert isinstance(alone, Submit) and alone.group is None and alone.uids == ("uid-t-2",)
    # unknown minMember: everyone waits, nothing is submitted
    unknown = plan(world(pods=pods), OPTIONS)
    assert {type(a) for a in unknown} == {Waiting}


def test_groups_are_per_namespace() -> None:
    policy = parse_policy(
        {
            "namespaces": {
                "team-a": {"user_id": 1, "partitions": ["cpu"]},
                "team-b": {"user_id": 2, "partitions": ["cpu"]},
            }
        }
    )
    options = BridgeOptions(instance="cluster-a", policy=policy)
    pods = [grouped("w-0"), grouped("w-1", namespace="team-b")]  # same group name, two namespaces
    actions = plan(world(pods=pods), options)
    assert [type(a) for a in actions] == [Waiting, Waiting]
    assert all("1 of 2" in a.message for a in actions)  # type: ignore[union-attr]


def test_a_lws_group_of_three_submits_with_the_leader_first() -> None:
    pods = [lws_pod(0, 2), lws_pod(0, 1), lws_pod(0, 0), lws_pod(1, 0)]
    actions = plan(world(pods=pods), OPTIONS)
    submits = [a for a in actions if isinstance(a, Submit)]
    assert len(submits) == 1 and submits[0].pod == "team-a/llm-0"
    assert submits[0].uids == ("uid-llm-0", "uid-llm-0-1", "uid-llm-0-2")
    assert [a.pod for a in actions if isinstance(a, Waiting)] == [
        "team-a/llm-1"
    ]  # the second replica: 1 of 3


def test_the_third_pod_of_a_pod_group_is_placed_once_the_gang_is_bound() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "train"}
    bound = {**label, "slurm-keda.io/job-id": "7"}
    pods = [member("t-0", labels=bound, node="c1"), member("t-1", labels=bound, node="c2")]
    pods.append(member("t-2", labels=label))
    running = gang_job(7, ["uid-t-0", "uid-t-1"], "RUNNING", nodes="c[1-2]", group="PodGroup team-a/train")
    (action,) = plan(world(running, pods=pods, pod_groups={("team-a", "train"): 2}), OPTIONS)
    assert isinstance(action, Submit) and action.uids == ("uid-t-2",) and action.group is None


def test_a_newcomer_to_a_running_gang_waits_for_its_job_to_end() -> None:
    labels = {"slurm-keda.io/job-id": "7"}
    w0 = grouped("w-0", node="c1", labels=labels)
    newcomer = grouped("w-1", uid="uid-w-1b")  # a replacement while the old job still runs
    j = gang_job(7, ["uid-w-0", "uid-w-1"], "RUNNING", nodes="c[1-2]")
    actions = plan(world(j, pods=[w0, newcomer]), OPTIONS)
    assert (
        Waiting("team-a/w-1", "uid-w-1b", "group team-a/g: waiting for the group's Slurm job 7 to end")
        in actions
    )
    assert Cancel(7, "its pod is gone") in actions  # the old member is gone


def test_a_jobsets_pods_rank_by_job_index_then_completion_index() -> None:
    def js(job: int, completion: int) -> Any:
        labels = {"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/job-global-index": str(job)}
        notes = {"batch.kubernetes.io/job-completion-index": str(completion), PREFIX + "group-size": "4"}
        return member(f"train-w-{job}-{completion}", labels=labels, annotations=notes)

    pods = [js(1, 0), js(0, 1), js(1, 1), js(0, 0)]
    (action,) = plan(world(pods=pods), OPTIONS)
    assert isinstance(action, Submit) and action.group == "JobSet team-a/train"
    assert [uid.removeprefix("uid-train-w-") for uid in action.uids] == ["0-0", "0-1", "1-0", "1-1"]
