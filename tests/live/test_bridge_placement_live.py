"""Kubernetes' placement rules with Slurm placing: the 26.05 lab's scheduler chooses among the nodes the
bridge offers it (bridge.feasible), the pods live in the fake Kubernetes API server (real HTTP, real
client). Three dynamic nodes under a reservation of their own; their Kubernetes nodes carry a rack label;
what the pods ask for decides where Slurm may put them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bridge.actions import JOB_ID_ANNOTATION
from bridge.volumes import SELECTED_NODE_ANNOTATION
from exporter.slurmtext import hostlist_expand
from lab import Lab
from testkit.bridge_lab import lab_cluster, placed, reserved_nodes, reserved_pod, running_bridge
from testkit.fake_kube import FakeKube
from testkit.tools import eventually

RESERVATION = "place-e2e"
NODES = ["pl-1", "pl-2", "pl-3"]
RACKS = {"pl-1": "a", "pl-2": "b", "pl-3": "c"}
POLICY = {"namespaces": {"team-a": {"user_id": 0, "partitions": ["dyn"], "reservations": [RESERVATION]}}}
GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
STORAGE = "storage.k8s.io/v1"


def cluster(taints: dict[str, list[dict[str, str]]] | None = None) -> FakeKube:
    labels = {name: {"rack": RACKS[name], "kubernetes.io/hostname": name} for name in NODES}
    return lab_cluster(NODES, taints, labels)


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return reserved_pod(name, RESERVATION, **spec)


def wffc_claim(fake: FakeKube, name: str, storage_class: str, provisioner: str) -> None:
    """A WaitForFirstConsumer storage class and a 1 GiB claim of it in team-a, not bound yet."""
    doc = {"metadata": {"name": storage_class}, "volumeBindingMode": "WaitForFirstConsumer"}
    fake.put("storageclasses", {**doc, "provisioner": provisioner}, STORAGE)
    spec = {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"]}
    fake.put(
        "persistentvolumeclaims",
        {
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {**spec, "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"},
        },
    )


def mounting(name: str, claim: str) -> dict[str, Any]:
    return pod(name, volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": claim}}])


def exc_nodes(lab: Lab, job_id: str) -> str:
    for field in lab.run(["scontrol", "show", "job", job_id]).split():
        if field.startswith("ExcNodeList="):
            return field.removeprefix("ExcNodeList=")
    return ""


async def bound_to(fake: FakeKube, name: str) -> dict[str, Any]:
    return await eventually(lambda: placed(fake, name), 60.0, f"pod {name} to be bound", 0.2)


@pytest.fixture
def nodes(lab_2605: Lab) -> Any:
    with reserved_nodes(lab_2605, NODES, RESERVATION) as names:
        yield names


async def test_a_node_selector_and_taints_decide_which_node_slurm_may_use(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    fake = cluster({"pl-1": [GPU_TAINT], "pl-2": [GPU_TAINT]})
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        fake.put("pods", pod("plain"))  # tolerates nothing: only pl-3 is left
        got = await bound_to(fake, "plain")
        assert got["spec"]["nodeName"] == "pl-3"
        excluded = hostlist_expand(exc_nodes(lab_2605, got["metadata"]["annotations"][JOB_ID_ANNOTATION]))
        assert {"pl-1", "pl-2"} <= set(excluded)
        submitted = [e for e in fake.events_for("team-a", "plain") if e["reason"] == "SlurmSubmitted"]
        assert "2 node(s) had untolerated taint {gpu: true}" in submitted[0]["message"]
        # tolerating the taint and asking for rack b: the tainted pl-2, and nothing else
        tolerant = pod(
            "tolerant", nodeSelector={"rack": "b"}, tolerations=[{"key": "gpu", "operator": "Exists"}]
        )
        fake.put("pods", tolerant)
        assert (await bound_to(fake, "tolerant"))["spec"]["nodeName"] == "pl-2"
        assert not bridge.stats.errors, bridge.stats.errors


async def test_a_node_filled_by_a_pod_slurm_does_not_know_is_left_out(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    fake = cluster()
    for name in ("pl-1", "pl-2"):  # a DaemonSet-like pod takes all of pl-1's and pl-2's CPUs
        fake.put(
            "pods",
            {
                "metadata": {"name": f"agent-{name}", "namespace": "kube-system"},
                "spec": {
                    "nodeName": name,
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}],
                },
                "status": {"phase": "Running"},
            },
        )
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        fake.put("pods", pod("trainer"))
        got = await bound_to(fake, "trainer")
        assert got["spec"]["nodeName"] == "pl-3"
        job_id = got["metadata"]["annotations"][JOB_ID_ANNOTATION]
        assert "Insufficient cpu" in next(
            e["message"] for e in fake.events_for("team-a", "trainer") if e["reason"] == "SlurmSubmitted"
        )
        assert exc_nodes(lab_2605, job_id)  # Slurm was told
        assert not bridge.stats.errors, bridge.stats.errors


@pytest.mark.parametrize(("flavor", "version"), [("26.05", "v0.0.45"), ("24.11", "v0.0.42")])
async def test_a_node_tainted_while_the_job_pends_is_never_used(
    flavor: str, version: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The pending job's excluded nodes follow Kubernetes by a job update — on 24.11 as well, where
    slurmrestd answers a job that started meanwhile with HTTP 500 rather than 422 (same error 2073)."""
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")  # that one only
    with reserved_nodes(lab, NODES, RESERVATION):
        await _tainted_while_pending(lab, version, tmp_path)


async def _tainted_while_pending(lab: Lab, version: str, tmp_path: Path) -> None:
    fillers = {
        name: lab.sbatch(
            "-p",
            "dyn",
            f"--reservation={RESERVATION}",
            "-w",
            name,
            "--exclusive",
            "-J",
            "filler",
            command="sleep 300",
        )
        for name in NODES
    }
    await eventually(
        lambda: all(
            lab.run(["squeue", "-h", "-j", str(j), "-o", "%T"]).strip() == "RUNNING" for j in fillers.values()
        ),
        30.0,
        "the fillers to run",
        0.5,
    )
    fake = cluster()
    async with running_bridge(lab, version, tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        fake.put("pods", pod("waiter"))

        def job() -> str | None:
            events = [e for e in fake.events_for("team-a", "waiter") if e["reason"] == "SlurmSubmitted"]
            return events[0]["message"].split()[2] if events else None

        job_id = await eventually(job, 30.0, "the job to be submitted", 0.2)
        assert exc_nodes(lab, job_id) in ("", "(null)")
        fake.update("nodes", "", "pl-2", {"spec": {"taints": [GPU_TAINT]}})  # tainted while the job pends
        await eventually(lambda: exc_nodes(lab, job_id) == "pl-2", 30.0, "Slurm to exclude pl-2", 0.3)
        assert any(e["reason"] == "SlurmExcluded" for e in fake.events_for("team-a", "waiter"))
        lab.run(["scancel", str(fillers["pl-2"])])  # pl-2 is free: Slurm must not use it
        await asyncio.sleep(5.0)
        assert lab.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip() == "PENDING"
        lab.run(["scancel", str(fillers["pl-1"])])
        assert (await bound_to(fake, "waiter"))["spec"]["nodeName"] == "pl-1"
        assert not bridge.stats.errors, bridge.stats.errors
    lab.run(["scancel", "-n", "filler"], check=False)


async def test_a_wait_for_first_consumer_claim_gets_its_node_before_the_pod_is_bound(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    fake = cluster()
    wffc_claim(fake, "scratch", "zonal", "csi.example.com")
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        fake.put("pods", mounting("writer", "scratch"))

        def chosen() -> str | None:
            claim = fake.get("persistentvolumeclaims", "team-a", "scratch") or {}
            return (claim.get("metadata", {}).get("annotations") or {}).get(SELECTED_NODE_ANNOTATION)

        node = await eventually(chosen, 60.0, "the claim to get its node", 0.2)
        await asyncio.sleep(2.0)
        assert placed(fake, "writer") is None  # the binding waits for the volume
        # the provisioner and the PersistentVolume controller: a volume on that node, the claim bound
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        fake.put(
            "persistentvolumes",
            {
                "metadata": {"name": "pv-scratch"},
                "spec": {
                    "storageClassName": "zonal",
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                    "claimRef": {"namespace": "team-a", "name": "scratch"},
                },
                "status": {"phase": "Bound"},
            },
        )
        fake.update(
            "persistentvolumeclaims",
            "team-a",
            "scratch",
            {"spec": {"volumeName": "pv-scratch"}, "status": {"phase": "Bound"}},
        )
        got = await bound_to(fake, "writer")
        assert got["spec"]["nodeName"] == node
        selected = [e for e in fake.events_for("team-a", "writer") if e["reason"] == "SlurmVolumeSelected"]
        assert selected and node in selected[0]["message"]
        assert not bridge.stats.errors, bridge.stats.errors  # the binding waited: not an error


def local_volume(name: str, node: str, size: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {
        "metadata": {"name": name},
        "spec": {
            "storageClassName": "local",
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
        "status": {"phase": "Available"},
    }


async def test_a_local_volume_is_pre_bound_on_the_node_slurm_chose(
    lab_2605: Lab, nodes: list[str], tmp_path: Path
) -> None:
    """Static local volumes (no provisioner): pl-2 has none, so Slurm may not use it; on the node Slurm
    chose, the volume that fits is pre-bound to the claim (its claimRef) before the pod is bound, as
    kube-scheduler's VolumeBinding does; the PersistentVolume controller (played here) completes it."""
    fake = cluster()
    wffc_claim(fake, "cache", "local", "kubernetes.io/no-provisioner")
    fake.put("persistentvolumes", local_volume("pv-pl-1", "pl-1", "5Gi"))
    fake.put("persistentvolumes", local_volume("pv-pl-3", "pl-3", "5Gi"))
    fake.put("persistentvolumes", local_volume("pv-pl-2-tiny", "pl-2", "100Mi"))  # too small for the claim
    async with running_bridge(lab_2605, "v0.0.45", tmp_path, policy=POLICY, fake=fake) as (fake, bridge):
        fake.put("pods", mounting("reader", "cache"))

        def pre_bound() -> str | None:
            for name in ("pv-pl-1", "pv-pl-3"):
                pv = fake.get("persistentvolumes", "", name) or {}
                if (pv.get("spec", {}).get("claimRef") or {}).get("name") == "cache":
                    return name
            return None

        volume = await eventually(pre_bound, 60.0, "a volume to be pre-bound to the claim", 0.2)
        assert placed(fake, "reader") is None  # the binding waits for the claim to be bound
        tiny = fake.get("persistentvolumes", "", "pv-pl-2-tiny") or {}
        assert not tiny["spec"].get("claimRef")
        submitted = next(e for e in fake.events_for("team-a", "reader") if e["reason"] == "SlurmSubmitted")
        job_id = submitted["message"].split()[2]
        assert "pl-2" in hostlist_expand(exc_nodes(lab_2605, job_id))
        fake.update(  # the PersistentVolume controller binds the claim to the volume
            "persistentvolumeclaims",
            "team-a",
            "cache",
            {"spec": {"volumeName": volume}, "status": {"phase": "Bound"}},
        )
        fake.update("persistentvolumes", "", volume, {"status": {"phase": "Bound"}})
        got = await bound_to(fake, "reader")
        assert got["spec"]["nodeName"] == volume.removeprefix("pv-")
        assert not bridge.stats.errors, bridge.stats.errors
