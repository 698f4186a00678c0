"""Kubernetes' placement rules in the bridge's plan: which Slurm nodes a submission excludes, when a pod
waits unschedulable, and what happens when Slurm starts a job on a node Kubernetes rules out."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from msgspec.structs import replace

from bridge.actions import UNSCHEDULABLE, Bind, Cancel, Exclude, PrepareVolume, Submit, Waiting, plan
from bridge.feasible import node_usage
from bridge.placement import Placements
from bridge.pods import Pod, decode_pod
from bridge.requests import RELEASE_MOVED, parse_admin_comment
from bridge.volumes import (
    SELECTED_NODE_ANNOTATION,
    Claim,
    PersistentVolume,
    StorageClass,
    Volumes,
    VolumeStep,
)
from exporter.model import Job
from testkit.builders import OPTIONS, job, k8s_node, pod_doc, snapshot, world

GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
CPU4 = {"name": "m", "resources": {"requests": {"cpu": "4"}}}


def bridge_pod(uid: str = "u1", **spec: Any) -> Pod:
    doc = pod_doc(f"p-{uid}", uid=uid, status={"phase": "Pending"}, spec=spec)
    doc["metadata"]["resourceVersion"] = "1"
    return decode_pod(json.dumps(doc))


def other_pod(name: str, node: str, cpu: str) -> Pod:
    """A pod the bridge does not schedule (a DaemonSet's, the slurmd pod) bound to ``node``."""
    containers = [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]
    doc = pod_doc(
        name, "kube-system", uid=name, scheduler="default-scheduler", containers=containers, node=node
    )
    doc["status"] = {"phase": "Running"}
    return decode_pod(json.dumps(doc))


def test_a_tainted_node_is_excluded_unless_the_pod_tolerates_it() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", taints=[GPU_TAINT]), k8s_node("c3")]
    (plain,) = plan(world(pods=[bridge_pod()], nodes=nodes), OPTIONS)
    assert isinstance(plain, Submit) and plain.excluded_nodes == ("c2",)
    assert plain.placement == "2/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}."
    tolerant = bridge_pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    (action,) = plan(world(pods=[tolerant], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ()


def test_a_node_selector_keeps_the_job_to_the_matching_nodes() -> None:
    nodes = [k8s_node("c1", rack="a"), k8s_node("c2", rack="b"), k8s_node("c3", rack="a")]
    (action,) = plan(world(pods=[bridge_pod(nodeSelector={"rack": "b"})], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c1", "c3")


def test_a_node_filled_by_pods_slurm_does_not_know_is_excluded() -> None:
    nodes = [k8s_node("c1", allocatable={"cpu": "4", "pods": "10"}), k8s_node("c2"), k8s_node("c3")]
    busy = [other_pod("ds-1", "c1", "3500m")]
    asking = bridge_pod(containers=[{"name": "m", "resources": {"requests": {"cpu": "1"}}}])
    w = world(pods=[asking], nodes=nodes, usage=node_usage(busy), others_usage=node_usage(busy))
    (action,) = plan(w, OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c1",)
    assert "1 Insufficient cpu" in action.placement


def test_a_node_filled_by_the_bridges_own_pods_is_left_to_slurm() -> None:
    nodes = [k8s_node("c1", allocatable={"cpu": "4", "pods": "10"}), k8s_node("c2"), k8s_node("c3")]
    ours = [
        decode_pod(
            json.dumps(pod_doc("b", uid="b", node="c1", containers=[CPU4], status={"phase": "Running"}))
        )
    ]
    asking = bridge_pod(containers=[{"name": "m", "resources": {"requests": {"cpu": "1"}}}])
    # Slurm holds c1 for the bound pod's job and gives it back when that ends: excluding it would be for good
    (action,) = plan(world(pods=[asking], nodes=nodes, usage=node_usage(ours)), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ()


def test_a_pending_jobs_exclusions_follow_kubernetes() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", taints=[GPU_TAINT]), k8s_node("c3")]
    pending = job(7, "u1", reason="Resources", excluded_nodes="")  # submitted before c2 was tainted
    exclude, waiting = plan(world(pending, pods=[bridge_pod()], nodes=nodes), OPTIONS)
    why = "2/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}."
    assert exclude == Exclude(7, ("c2",), "team-a/p-u1", why, ("u1",))
    assert isinstance(waiting, Waiting)
    current = job(7, "u1", reason="Resources", excluded_nodes="c2")
    assert [type(a) for a in plan(world(current, pods=[bridge_pod()], nodes=nodes), OPTIONS)] == [Waiting]
    untainted = [k8s_node("c1"), k8s_node("c2"), k8s_node("c3")]
    exclude, _ = plan(world(current, pods=[bridge_pod()], nodes=untainted), OPTIONS)
    assert exclude == Exclude(7, (), "team-a/p-u1", "3/3 nodes are available.", ("u1",))


def test_a_pod_no_node_may_take_stays_pending_and_nothing_is_submitted() -> None:
    """Slurm refuses a job whose partition's nodes are all excluded (HTTP 422, the job FAILED at once): the
    pod waits as kube-scheduler leaves it, Unschedulable with the reasons, and is placed once a node fits."""
    nodes = [k8s_node(n, taints=[GPU_TAINT]) for n in ("c1", "c2", "c3")]
    (action,) = plan(world(pods=[bridge_pod()], nodes=nodes), OPTIONS)
    why = "0/3 nodes are available: 3 node(s) had untolerated taint {gpu: true}."
    assert action == Waiting("team-a/p-u1", "u1", why, UNSCHEDULABLE)
    nodes[1] = k8s_node("c2")  # the taint removed from one node
    (action,) = plan(world(pods=[bridge_pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c1", "c3")
    full = [k8s_node(n, allocatable={"cpu": "1", "pods": "10"}) for n in ("c1", "c2", "c3")]
    asking = bridge_pod(containers=[{"name": "m", "resources": {"requests": {"cpu": "2"}}}])
    (action,) = plan(world(pods=[asking], nodes=full), OPTIONS)
    assert isinstance(action, Waiting) and action.reason == UNSCHEDULABLE
    assert action.message == "0/3 nodes are available: 3 Insufficient cpu."


def test_a_partition_that_can_grow_still_takes_the_job() -> None:
    """A NodeSet at zero (no Slurm node in the partition): Slurm takes the job (PartitionConfig, seen on the
    26.05 lab) and the demand grows it. Powered-down Slurm nodes without a Kubernetes node are not
    excluded: resumed, they get one. An up Slurm node without one (a slurmd outside Kubernetes) is."""
    nodes = [k8s_node(n, taints=[GPU_TAINT]) for n in ("c1", "c2", "c3")]
    empty = world(pods=[bridge_pod()], nodes=nodes, snapshot=snapshot(slurm_nodes=()))
    (action,) = plan(empty, OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ()
    four = snapshot(slurm_nodes=("c1", "c2", "c3", "c4"))
    c4 = replace(four.nodes[3], flags=("CLOUD", "POWERED_DOWN"))
    asleep = replace(four, nodes=(*four.nodes[:3], c4))
    (action,) = plan(world(pods=[bridge_pod()], nodes=nodes, snapshot=asleep), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c1", "c2", "c3")
    (action,) = plan(world(pods=[bridge_pod()], nodes=nodes, snapshot=four), OPTIONS)
    assert isinstance(action, Waiting) and action.reason == UNSCHEDULABLE


def test_a_pending_job_left_without_any_node_is_released_not_updated() -> None:
    """Every node ruled out while the job pends: Slurm would refuse the update; the job is released (its
    admin comment says so first) and the pod waits, Unschedulable, to be submitted again."""
    nodes = [k8s_node(n, taints=[GPU_TAINT]) for n in ("c1", "c2", "c3")]
    pending_job = job(7, "u1", reason="Resources", excluded_nodes="")
    release, _ = plan(world(pending_job, pods=[bridge_pod()], nodes=nodes), OPTIONS)
    assert isinstance(release, Cancel) and release.job_id == 7 and release.release == RELEASE_MOVED
    marked = parse_admin_comment(release.admin_comment)
    assert marked is not None and marked.release == RELEASE_MOVED and marked.pods[0][2] == "u1"
    ended = Job(job_id=7, state="CANCELLED", admin_comment=release.admin_comment)
    (action,) = plan(world(ended, pods=[bridge_pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Waiting) and action.reason == UNSCHEDULABLE  # kept, not deleted
    (action,) = plan(world(ended, pods=[bridge_pod()], nodes=[k8s_node("c1")]), OPTIONS)
    assert isinstance(action, Submit)


def test_a_pod_whose_claim_is_missing_or_unbound_waits_without_a_job() -> None:
    p = bridge_pod(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    (action,) = plan(world(pods=[p]), OPTIONS)
    assert action == Waiting(
        "team-a/p-u1", "u1", '0/3 nodes are available: persistentvolumeclaim "data" not found.', UNSCHEDULABLE
    )
    claim = msgspec.convert(
        {"metadata": {"name": "data", "namespace": "team-a"}, "spec": {"storageClassName": "std"}}, Claim
    )
    std = msgspec.convert({"metadata": {"name": "std"}, "volumeBindingMode": "Immediate"}, StorageClass)
    volumes = Volumes(claims={("team-a", "data"): claim}, classes={"std": std})
    (action,) = plan(world(pods=[p], volumes=volumes), OPTIONS)
    assert isinstance(action, Waiting) and "unbound immediate PersistentVolumeClaims" in action.message
    wffc = msgspec.convert(
        {"metadata": {"name": "std"}, "provisioner": "csi.x", "volumeBindingMode": "WaitForFirstConsumer"},
        StorageClass,
    )
    ready = Volumes(claims={("team-a", "data"): claim}, classes={"std": wffc})
    (action,) = plan(world(pods=[p], volumes=ready), OPTIONS)
    assert isinstance(action, Submit)


def test_a_job_started_where_a_taint_now_forbids_the_pod_is_released() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", taints=[GPU_TAINT])]  # tainted after the submission
    (action,) = plan(world(job(7, "u1", "RUNNING", nodes="c2"), pods=[bridge_pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Cancel) and action.job_id == 7
    assert action.why == (
        "Slurm placed it on c2, where Kubernetes cannot run team-a/p-u1:"
        " node(s) had untolerated taint {gpu: true}"
    )


def test_a_job_started_where_room_is_still_taken_waits_to_bind() -> None:
    nodes = [k8s_node("c1", allocatable={"cpu": "4", "pods": "10"})]
    leaving = [other_pod("old", "c1", "4")]  # e.g. a pod still Terminating there
    asking = bridge_pod(containers=[{"name": "m", "resources": {"requests": {"cpu": "2"}}}])
    w = world(job(7, "u1", "RUNNING", nodes="c1"), pods=[asking], nodes=nodes, usage=node_usage(leaving))
    (action,) = plan(w, OPTIONS)
    assert isinstance(action, Bind) and action.wait_for == "Insufficient cpu"
    (free,) = plan(world(job(7, "u1", "RUNNING", nodes="c1"), pods=[asking], nodes=nodes), OPTIONS)
    assert isinstance(free, Bind) and free.wait_for == ""


def test_pods_of_one_template_are_judged_once_per_pass() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", taints=[GPU_TAINT]), k8s_node("c3")]
    pods = [bridge_pod(f"u{i}") for i in range(50)] + [bridge_pod("gpu", nodeSelector={"x": "y"})]
    kept = Placements()
    actions = plan(world(pods=pods, nodes=nodes, placements=kept), OPTIONS)
    assert all(isinstance(a, Submit) and a.excluded_nodes == ("c2",) for a in actions[:50])
    assert isinstance(actions[50], Waiting) and actions[50].reason == UNSCHEDULABLE  # fits nowhere
    assert kept.judged == 2  # the 50 alike once, the other once


def pending(uid: str, excluded: str) -> Any:
    return job(int(uid[1:]) + 100, uid, "PENDING", reason="Resources", excluded_nodes=excluded)


def test_verdicts_are_kept_between_passes_until_a_node_or_others_usage_changes() -> None:
    nodes = [k8s_node("c1"), k8s_node("c2", taints=[GPU_TAINT]), k8s_node("c3")]
    nodes[0] = k8s_node("c1", rack="a")
    pods = [bridge_pod("u1"), bridge_pod("u2", nodeSelector={"rack": "a"})]
    kept = Placements()
    first = plan(world(pods=pods, nodes=nodes, placements=kept), OPTIONS)
    assert [a.excluded_nodes for a in first if isinstance(a, Submit)] == [("c2",), ("c2", "c3")]
    assert kept.judged == 2
    jobs = (pending("u1", "c2"), pending("u2", "c[2-3]"))  # they pend; each pass checks their exclusions
    for _ in range(3):
        assert not any(
            isinstance(a, Exclude)
            for a in plan(world(*jobs, pods=pods, nodes=nodes, placements=kept), OPTIONS)
        )
    assert kept.judged == 2  # nothing changed: nothing judged again
    tainted = [nodes[0], nodes[1], k8s_node("c3", taints=[GPU_TAINT])]
    again = plan(world(*jobs, pods=pods, nodes=tainted, placements=kept), OPTIONS)
    assert kept.judged == 4
    excludes = [a for a in again if isinstance(a, Exclude)]
    assert [(a.job_id, a.nodes) for a in excludes] == [(101, ("c2", "c3"))]  # u2's excludes every node
    filled = node_usage([other_pod("ds", "c1", "1")])
    plan(world(*jobs, pods=pods, nodes=tainted, placements=kept, others_usage=filled), OPTIONS)
    assert kept.judged == 6  # another pod's requests on a node: judged again


def test_a_verdict_no_pass_asked_for_is_forgotten() -> None:
    nodes = [k8s_node("c1", rack="a"), k8s_node("c2", rack="b")]
    a, b = bridge_pod("u1", nodeSelector={"rack": "a"}), bridge_pod("u2", nodeSelector={"rack": "b"})
    kept = Placements()
    plan(world(pods=[a, b], nodes=nodes, placements=kept), OPTIONS)
    plan(world(pods=[a], nodes=nodes, placements=kept), OPTIONS)  # u2 gone
    assert kept.judged == 2
    plan(world(pods=[a, b], nodes=nodes, placements=kept), OPTIONS)
    assert kept.judged == 3  # u2's spec was forgotten: judged again (memory follows the pods)


def test_the_same_verdicts_whether_kept_or_judged_afresh() -> None:
    nodes = [k8s_node("c1", rack="a"), k8s_node("c2", taints=[GPU_TAINT]), k8s_node("c3", rack="b")]
    pods = [bridge_pod(f"u{i}", nodeSelector={"rack": "ab"[i % 2]}) for i in range(6)]
    kept = Placements()
    for _ in range(2):
        assert plan(world(pods=pods, nodes=nodes, placements=kept), OPTIONS) == plan(
            world(pods=pods, nodes=nodes), OPTIONS
        )


def claim_doc(annotations: dict[str, str] | None = None, **spec: Any) -> Claim:
    doc = {
        "metadata": {"name": "data", "namespace": "team-a", "uid": "cu", "annotations": annotations or {}},
        "spec": {
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            **spec.pop("spec", {}),
        },
        "status": spec.pop("status", {"phase": "Pending"}),
    }
    return msgspec.convert(doc, Claim)


def local_pv(name: str, node: str, size: str) -> PersistentVolume:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    doc = {
        "metadata": {"name": name, "resourceVersion": f"rv-{name}"},
        "spec": {
            "storageClassName": "local",
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
        "status": {"phase": "Available"},
    }
    return msgspec.convert(doc, PersistentVolume)


def wffc(provisioner: str) -> StorageClass:
    doc = {
        "metadata": {"name": "local"},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    return msgspec.convert(doc, StorageClass)


MOUNTING = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
HOSTS = [k8s_node(n, **{"kubernetes.io/hostname": n}) for n in ("c1", "c2")]
WAITING = 'persistentvolumeclaim "data": waiting for its volume to be bound'


def test_a_claim_to_be_provisioned_gets_the_node_slurm_chose_before_the_pod_is_bound() -> None:
    volumes = Volumes(claims={("team-a", "data"): claim_doc()}, classes={"local": wffc("csi.example.com")})
    running = job(7, "u1", "RUNNING", nodes="c2")
    prepare, bind = plan(world(running, pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=volumes), OPTIONS)
    assert prepare == PrepareVolume("team-a/p-u1", "u1", VolumeStep("team-a", "data", "cu", "c2"))
    assert isinstance(bind, Bind) and bind.node == "c2" and bind.wait_for == WAITING
    # the annotation written: the binding waits for the provisioner and the PV controller
    chosen = Volumes(
        claims={("team-a", "data"): claim_doc({SELECTED_NODE_ANNOTATION: "c2"})}, classes=volumes.classes
    )
    (bind,) = plan(world(running, pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=chosen), OPTIONS)
    assert isinstance(bind, Bind) and bind.wait_for == WAITING
    bound = Volumes(
        claims={("team-a", "data"): claim_doc(spec={"volumeName": "pv-9"}, status={"phase": "Bound"})},
        volumes={"pv-9": local_pv("pv-9", "c2", "10Gi")},
        classes=volumes.classes,
    )
    (bind,) = plan(world(running, pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=bound), OPTIONS)
    assert isinstance(bind, Bind) and bind.wait_for == ""


def test_a_pod_with_claims_is_judged_again_every_pass() -> None:
    volumes = Volumes(claims={("team-a", "data"): claim_doc()}, classes={"local": wffc("csi.example.com")})
    kept = Placements()
    for n in (1, 2):
        (submit,) = plan(
            world(pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=volumes, placements=kept), OPTIONS
        )
        assert isinstance(submit, Submit) and kept.judged == n
    gone = Volumes(classes=volumes.classes)  # the claim deleted: not in the fingerprint, seen all the same
    (waiting,) = plan(
        world(pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=gone, placements=kept), OPTIONS
    )
    assert isinstance(waiting, Waiting) and waiting.reason == UNSCHEDULABLE


def test_an_available_local_volume_on_that_node_is_pre_bound_the_smallest_that_fits() -> None:
    pvs = {
        "big": local_pv("big", "c1", "100Gi"),
        "small": local_pv("small", "c1", "20Gi"),
        "tiny": local_pv("tiny", "c1", "5Gi"),
        "other": local_pv("other", "c2", "10Gi"),
    }
    volumes = Volumes(
        claims={("team-a", "data"): claim_doc()},
        volumes=pvs,
        classes={"local": wffc("kubernetes.io/no-provisioner")},
    )
    (submit,) = plan(world(pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=volumes), OPTIONS)
    assert isinstance(submit, Submit) and submit.excluded_nodes == ("c3",)  # c3 has no Kubernetes node
    running = job(7, "u1", "RUNNING", nodes="c1")
    prepare, bind = plan(world(running, pods=[bridge_pod(**MOUNTING)], nodes=HOSTS, volumes=volumes), OPTIONS)
    assert prepare == PrepareVolume(
        "team-a/p-u1", "u1", VolumeStep("team-a", "data", "cu", "c1", "small", "rv-small")
    )
    assert isinstance(bind, Bind) and bind.wait_for == WAITING
