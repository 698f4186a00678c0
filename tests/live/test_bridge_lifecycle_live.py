"""The bridge keeps Kubernetes' promises over the whole job lifecycle, with the 26.05 lab placing and the
fake API server (real HTTP, the real client) holding the pods: a pod no node may take stays Pending and
nothing is submitted; a suspended job's pod is stopped; a node failing before the binding gets the pod a
new job; gated pods wait for their gates; DRA claims are refused. Two dynamic nodes under a reservation of
their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.actions import GATED_MESSAGE, JOB_ID_ANNOTATION, SCHEDULING_GATED, UNSCHEDULABLE
from lab import Lab
from testkit.bridge_lab import lab_cluster, placed, reserved_nodes, reserved_pod, running_bridge, squeue
from testkit.fake_kube import FakeKube
from testkit.tools import eventually

RESERVATION = "life-e2e"
NODES = ["lc-1", "lc-2"]
POLICY = {"namespaces": {"team-a": {"user_id": 0, "partitions": ["dyn"], "reservations": [RESERVATION]}}}
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def cluster(tainted: tuple[str, ...] = ()) -> FakeKube:
    return lab_cluster(NODES, {name: [TAINT] for name in tainted})


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return reserved_pod(name, RESERVATION, **spec)


def condition(fake: FakeKube, name: str) -> dict[str, Any] | None:
    """The pod's PodScheduled condition."""
    p = fake.get("pods", "team-a", name) or {}
    return next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None)


def events(fake: FakeKube, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events_for("team-a", name) if e["reason"] == reason]


def reasons(fake: FakeKube, name: str) -> list[str]:
    return [e["reason"] for e in fake.events_for("team-a", name)]


OLDER: set[str] = set()
"""Jobs Slurm listed before a test began (an earlier run's, kept for MinJobAge under the same names)."""


def jobs_named(lab: Lab, name: str) -> str:
    """Every job of the pod Slurm lists (any state) that the test's bridge submitted."""
    argv = ["squeue", "-h", "-t", "all", "-n", f"k8s:team-a/{name}", "-o", "%i|%T"]
    lines = lab.run(argv, check=False).strip().splitlines()
    return "\n".join(line for line in lines if line.split("|")[0] not in OLDER)


@pytest.fixture
def nodes(lab_2605: Lab) -> Any:
    with reserved_nodes(lab_2605, NODES, RESERVATION) as names:
        OLDER.clear()
        OLDER.update(lab_2605.run(["squeue", "-h", "-t", "all", "-o", "%i"], check=False).split())
        yield names


async def test_a_pod_no_node_may_take_stays_pending_until_a_taint_is_removed(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """Both nodes tainted, the pod tolerates nothing: Slurm would refuse its job (every node excluded:
    422, FAILED BadConstraints). kube-scheduler's answer instead: Pending, Unschedulable, FailedScheduling;
    once the taint leaves one node the pod is placed there — with the time limit SchedMD's annotation
    asks for."""
    fake = cluster(tainted=("lc-1", "lc-2"))
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        stuck = pod("stuck")
        stuck["metadata"]["annotations"]["slurmjob.slinky.slurm.net/timelimit"] = "7"  # SchedMD's spelling
        fake.put("pods", stuck)
        got = await eventually(
            lambda: (c := condition(fake, "stuck")) and c["reason"] == UNSCHEDULABLE and c,
            30.0,
            "Unschedulable",
        )
        assert got["status"] == "False"
        assert got["message"] == "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}."
        assert "FailedScheduling" in reasons(fake, "stuck")
        await eventually(lambda: bridge.stats.pods["unschedulable"] == 1, 10.0, "the phase counted")
        passes = bridge.passes
        await eventually(lambda: bridge.passes >= passes + 3, 30.0, "three more passes")
        assert fake.get("pods", "team-a", "stuck") is not None and placed(fake, "stuck") is None
        assert "SlurmSubmitted" not in reasons(fake, "stuck") and not jobs_named(lab_2605, "stuck")
        fake.update("nodes", "", "lc-2", {"spec": {"taints": []}})  # the taint removed
        bound = await eventually(lambda: placed(fake, "stuck"), 60.0, "the pod to be bound", 0.2)
        assert bound["spec"]["nodeName"] == "lc-2"
        shown = lab_2605.run(["scontrol", "show", "job", bound["metadata"]["annotations"][JOB_ID_ANNOTATION]])
        assert "TimeLimit=00:07:00" in shown
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_suspended_jobs_pod_is_stopped_with_an_event_naming_the_job(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """``scontrol suspend`` of a bound pod's job: Slurm may give the node's CPUs to another job, so the pod
    must not run on — it is deleted with an Event naming the job, and the job is then cancelled."""
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster()) as (fake, bridge):
        fake.put("pods", pod("sleeper"))
        bound = await eventually(lambda: placed(fake, "sleeper"), 60.0, "the pod to be bound", 0.2)
        job_id = bound["metadata"]["annotations"][JOB_ID_ANNOTATION]
        lab_2605.run(["scontrol", "suspend", job_id])
        await eventually(lambda: fake.get("pods", "team-a", "sleeper") is None, 30.0, "the pod to be deleted")
        stopped = [e for e in fake.events_for("team-a", "sleeper") if e["reason"] == "SlurmJobStopped"]
        assert stopped and stopped[0]["message"].startswith(f"Slurm job {job_id} is SUSPENDED")
        assert stopped[0]["type"] == "Warning"
        await eventually(lambda: not squeue(lab_2605, job_id), 30.0, "the suspended job to be cancelled")
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_node_failing_before_the_binding_gets_the_pod_a_new_job(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """The job runs but the binding is refused (the API server failing pods/binding); the node then goes
    DOWN: the job ends NODE_FAIL. The bridge keeps the pod (a bare pod is the user's only copy), submits it
    again, and binds it once the API server takes bindings."""
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster()) as (fake, bridge):
        fake.fail_always("POST", r"/pods/[^/]+/binding$", 500)
        fake.put("pods", pod("fragile"))

        def first_job() -> str | None:
            for line in jobs_named(lab_2605, "fragile").splitlines():
                job_id, state = line.split("|")
                if state == "RUNNING":
                    return job_id
            return None

        job_id = await eventually(first_job, 60.0, "the job to run", 0.3)
        node = squeue(lab_2605, job_id).split("|")[2]
        # the bridge has seen the job run and tried to bind the pod (refused): placed, not yet bound
        await eventually(lambda: bridge.stats.errors, 30.0, "a refused binding", 0.2)
        lab_2605.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=lifecycle-test"])
        try:
            await eventually(
                lambda: f"{job_id}|NODE_FAIL" in jobs_named(lab_2605, "fragile"), 30.0, "NODE_FAIL", 0.3
            )
            fake.heal()
            bound = await eventually(lambda: placed(fake, "fragile"), 60.0, "the pod to be bound", 0.2)
            assert bound["metadata"]["annotations"][JOB_ID_ANNOTATION] != job_id
            # (the node may be back already: the lab's ReturnToService=2 returns a DOWN node that registers)
            assert reasons(fake, "fragile").count("SlurmSubmitted") == 2
            assert "SlurmJobEnded" not in reasons(fake, "fragile")
            assert {action for action, _ in bridge.stats.errors} == {"bind"}  # the refused bindings only
        finally:
            lab_2605.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)


async def test_gated_pods_wait_for_their_gates_dra_claims_and_1_35_workload_gangs_are_refused(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """A pod with scheduling gates (Kueue's) is not submitted until they are gone, and says so as
    kube-scheduler does; a pod with DRA resource claims, or in a Kubernetes 1.35 Workload gang
    (``spec.workloadRef``), is refused with a message, never bound."""
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster()) as (fake, bridge):
        fake.put("pods", pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
        fake.put(
            "pods", pod("claims", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        )
        fake.put("pods", pod("k8s-gang", workloadRef={"name": "train", "podGroup": "workers"}))
        mig = [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}]
        fake.put("pods", pod("mig", containers=mig))  # not in the namespace's devices
        got = await eventually(
            lambda: (c := condition(fake, "gated")) and c["reason"] == SCHEDULING_GATED and c,
            30.0,
            "gated",
        )
        assert got["message"] == GATED_MESSAGE
        await eventually(lambda: bridge.stats.pods["gated"] == 1, 10.0, "the phase counted")
        refused = await eventually(
            lambda: [e for e in fake.events_for("team-a", "claims") if e["reason"] == "SlurmRefused"],
            30.0,
            "DRA",
        )
        assert "Dynamic Resource Allocation" in refused[0]["message"]
        gang = await eventually(lambda: events(fake, "k8s-gang", "SlurmRefused"), 30.0, "1.35 gang refused")
        assert "spec.workloadRef (train)" in gang[0]["message"]
        device = await eventually(lambda: events(fake, "mig", "SlurmRefused"), 30.0, "the MIG pod refused")
        assert device[0]["message"].startswith("resource nvidia.com/mig-1g.5gb: not mapped")
        passes = bridge.passes
        await eventually(lambda: bridge.passes >= passes + 3, 30.0, "three more passes")
        assert not any(jobs_named(lab_2605, name) for name in ("gated", "claims", "k8s-gang", "mig"))
        fake.update("pods", "team-a", "gated", {"spec": {"schedulingGates": None}})  # Kueue admits it
        bound = await eventually(lambda: placed(fake, "gated"), 60.0, "the ungated pod to be bound", 0.2)
        assert bound["spec"]["nodeName"] in NODES
        assert placed(fake, "claims") is None and placed(fake, "k8s-gang") is None
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_jobs_annotations_and_deadline_reach_its_pods_job(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """Annotations on the Job (SchedMD's spelling) and its ``activeDeadlineSeconds`` — which the Job
    controller does not copy into its pods — become the pod's Slurm job's time limit: 600 s → 10 minutes.
    Before, the job had TimeLimit UNLIMITED."""
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster()) as (fake, bridge):
        job = fake.put(
            "jobs",
            {
                "metadata": {
                    "name": "train",
                    "namespace": "team-a",
                    "annotations": {"slurmjob.slinky.slurm.net/reservation": RESERVATION},
                },
                "spec": {"activeDeadlineSeconds": 600, "template": {"spec": {}}},
            },
            "batch/v1",
        )
        worker = pod("train-x7k2p")
        worker["metadata"]["annotations"] = {}  # the reservation comes from the Job
        worker["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job["metadata"]["uid"]}
            | {"controller": True, "blockOwnerDeletion": True}
        ]
        fake.put("pods", worker)
        bound = await eventually(lambda: placed(fake, "train-x7k2p"), 60.0, "the Job's pod to be bound", 0.2)
        shown = lab_2605.run(["scontrol", "show", "job", bound["metadata"]["annotations"][JOB_ID_ANNOTATION]])
        assert "TimeLimit=00:10:00" in shown and f"Reservation={RESERVATION}" in shown
        assert not bridge.stats.errors, bridge.stats.errors


def taint_keys(fake: FakeKube, name: str) -> set[str]:
    node = fake.get("nodes", "", name) or {}
    return {t["key"] for t in (node.get("spec") or {}).get("taints") or []}


def slurm_node(lab: Lab, name: str) -> dict[str, str]:
    """``scontrol show node``'s fields (State=IDLE+DRAIN, Reason=...: the reason runs to the line's end)."""
    out: dict[str, str] = {}
    for line in lab.run(["scontrol", "show", "node", name]).splitlines():
        line = line.strip()
        if line.startswith("Reason="):
            out["Reason"] = line.removeprefix("Reason=")
            continue
        for field in line.split():
            key, _, value = field.partition("=")
            out.setdefault(key, value)
    return out


async def test_shared_nodes_agree_on_cordons_drains_and_the_default_schedulers_pods(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """--bridge-shared-nodes: both nodes get the managed taint; cordoning lc-1 drains its Slurm node naming
    the cordon, uncordoning resumes it; an admin's Slurm drain of lc-2 taints its Kubernetes node until
    resumed — and a bridge pod is placed meanwhile, on lc-1 (the managed taint tolerated, lc-2 ruled out)."""
    async with running_bridge(
        lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster(), shared_nodes=True
    ) as (fake, bridge):
        managed = "slurm-keda.io/slurm-managed"
        await eventually(lambda: all(managed in taint_keys(fake, n) for n in NODES), 30.0, "managed taints")
        fake.update("nodes", "", "lc-1", {"spec": {"unschedulable": True}})  # kubectl cordon lc-1
        drained = await eventually(
            lambda: (n := slurm_node(lab_2605, "lc-1")) and "DRAIN" in n["State"] and n, 30.0, "lc-1 drained"
        )
        assert drained["Reason"].startswith("slurm-keda: Kubernetes node lc-1 is cordoned")
        fake.update("nodes", "", "lc-1", {"spec": {"unschedulable": False}})  # kubectl uncordon lc-1
        await eventually(lambda: "DRAIN" not in slurm_node(lab_2605, "lc-1")["State"], 30.0, "lc-1 resumed")
        lab_2605.run(["scontrol", "update", "nodename=lc-2", "state=drain", "reason=maintenance"])
        try:
            await eventually(lambda: "slurm-keda.io/slurm-drained" in taint_keys(fake, "lc-2"), 30.0, "taint")
            fake.put("pods", pod("shared"))
            bound = await eventually(lambda: placed(fake, "shared"), 60.0, "the pod to be bound", 0.2)
            assert bound["spec"]["nodeName"] == "lc-1"
        finally:
            lab_2605.run(["scontrol", "update", "nodename=lc-2", "state=resume"], check=False)
        await eventually(
            lambda: "slurm-keda.io/slurm-drained" not in taint_keys(fake, "lc-2"), 30.0, "the taint removed"
        )
        assert managed in taint_keys(fake, "lc-2")
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_kubernetes_1_36_podgroup_gang_runs_as_one_job_on_two_nodes(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """Two pods with ``spec.schedulingGroup`` naming a Kubernetes PodGroup (``scheduling.k8s.io/v1alpha2``)
    of gang ``minCount`` 2: one Slurm job of two nodes, rank 0 on the first node of its host list."""
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=cluster()) as (fake, bridge):
        fake.put(
            "podgroups",
            {
                "metadata": {"name": "train-0", "namespace": "team-a"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
            "scheduling.k8s.io/v1alpha2",
        )
        for name in ("train-0-a", "train-0-b"):
            fake.put("pods", pod(name, schedulingGroup={"podGroupName": "train-0"}))

        def both() -> list[dict[str, Any]] | None:
            got = [placed(fake, n) for n in ("train-0-a", "train-0-b")]
            return got if all(got) else None  # type: ignore[return-value]

        a, b = await eventually(both, 60.0, "both members bound", 0.2)
        assert (
            a["metadata"]["annotations"][JOB_ID_ANNOTATION] == b["metadata"]["annotations"][JOB_ID_ANNOTATION]
        )
        assert {a["spec"]["nodeName"], b["spec"]["nodeName"]} == set(NODES)
        assert a["metadata"]["annotations"]["slurm-keda.io/rank"] == "0"
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_requeued_batch_placeholders_pod_is_stopped_on_24_11(lab_2411: Lab, tmp_path: Path) -> None:
    """24.11 has no EXTERNAL_JOB: the placeholder is a batch job, which ``scontrol requeue`` sends back to
    PENDING — its node given back, so the pod must not run on (26.05's external jobs refuse a requeue)."""
    with reserved_nodes(lab_2411, NODES, RESERVATION):
        OLDER.clear()
        OLDER.update(lab_2411.run(["squeue", "-h", "-t", "all", "-o", "%i"], check=False).split())
        async with running_bridge(lab_2411, "v0.0.42", tmp_path, policy=POLICY, fake=cluster()) as (
            fake,
            bridge,
        ):
            fake.put("pods", pod("requeued"))
            bound = await eventually(lambda: placed(fake, "requeued"), 60.0, "the pod to be bound", 0.2)
            job_id = bound["metadata"]["annotations"][JOB_ID_ANNOTATION]
            lab_2411.run(["scontrol", "requeue", job_id])
            await eventually(lambda: fake.get("pods", "team-a", "requeued") is None, 30.0, "the pod deleted")
            stopped = events(fake, "requeued", "SlurmJobStopped")
            assert stopped and stopped[0]["message"].startswith(f"Slurm job {job_id} is ")
            await eventually(lambda: not squeue(lab_2411, job_id), 30.0, "the requeued job to be cancelled")
            assert not bridge.stats.errors, bridge.stats.errors
