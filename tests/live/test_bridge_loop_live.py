"""The loop closed: a bridge pod pending on a NodeSet at zero is a Slurm job like any other. One
``slurm-keda serve --bridge --grpc-listen`` process (the real console script) polls the 26.05 lab, answers
KEDA's external scaler protocol and runs the bridge against the fake Kubernetes API; the autoscale harness
plays KEDA, the HPA and Slinky's NodeSet operator around it (``testkit/scale_harness.py``). The operator's
Kubernetes node for each slurmd exists before that slurmd registers, labelled with its Slurm node name, as
a Slinky slurmd pod runs on a node that exists.

pod created → NodeSet scaled from 0 → node joined → pod bound there → pod deleted → job cancelled → back
to 0 replicas and no node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc.aio
import pytest

from bridge.actions import JOB_ID_ANNOTATION
from bridge.pods import SLINKY_NODE_LABEL
from lab import Lab
from testkit.bridge_lab import bridge_pod, squeue
from testkit.builders import ALLOCATABLE
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.scale_harness import (
    HPA,
    KEDA,
    PARTITION,
    SCALER_METADATA,
    SCRIPT,
    Autoscaler,
    NodeSetOperator,
    ScalerFeed,
    ScalerProcess,
)
from testkit.tools import eventually


class SlinkyOperator(NodeSetOperator):
    """The harness's NodeSet operator, also keeping the Kubernetes node of each slurmd in the fake API."""

    def __init__(self, lab: Lab, fake: FakeKube) -> None:
        super().__init__(lab)
        self.fake = fake

    async def _add(self, name: str) -> None:
        self.fake.put(
            "nodes",
            {
                "metadata": {
                    "name": f"k8s-{name}",
                    "labels": {SLINKY_NODE_LABEL: name, "slurm-keda.io/bridge": "true"},
                },
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": dict(ALLOCATABLE),
                },
            },
        )
        await super()._add(name)

    async def _remove(self, name: str) -> None:
        await super()._remove(name)
        if self.fake.get("nodes", "", f"k8s-{name}") is not None:
            self.fake.remove("nodes", "", f"k8s-{name}")


async def test_a_bridge_pod_scales_a_nodeset_from_zero_and_back(lab_2605: Lab, tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip("console script not installed (make venv)")
    lab = lab_2605
    assert not lab.run(["squeue", "-h", "-p", PARTITION], check=False).strip(), "leftover jobs in dyn"
    fake = FakeKube(token=TOKEN)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"namespaces:\n  team-a:\n    user_id: 0\n    partitions: [{PARTITION}]\n")
    operator = SlinkyOperator(lab, fake)
    marks: dict[str, float] = {}
    async with serve_kube(fake) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        bridge_flags = [
            *("--bridge", "--bridge-policy-file", str(policy), "--kubeconfig", str(kubeconfig)),
            *("--bridge-instance", "loop", "--bridge-namespace", "slurm-keda"),
        ]
        process = ScalerProcess(lab, tmp_path / "serve.log", args=bridge_flags)
        async with process as scaler, grpc.aio.insecure_channel(scaler.grpc_address) as channel:
            auto = Autoscaler(ScalerFeed(channel, SCALER_METADATA), operator, KEDA, HPA)
            try:
                async with auto.running():
                    await auto.ticks(keda=2, hpa=2)
                    assert auto.replicas == 0 and not operator.nodes  # nothing pends: at zero
                    start = time.monotonic()
                    fake.put("pods", bridge_pod("trainer", reservation=None))

                    def bound() -> dict[str, Any] | None:
                        if auto.first_active is not None and "scaled" not in marks:
                            # when KEDA saw it active and scaled from zero (exact, as "joined" is): a
                            # time sampled here every 0.1 s could fall after the node's registration
                            marks["scaled"] = auto.first_active - start
                        if operator.registered and "joined" not in marks:
                            marks["joined"] = operator.registered[0] - start
                        p = fake.get("pods", "team-a", "trainer")
                        return p if p and p["spec"].get("nodeName") else None

                    placed = await eventually(bound, 120.0, f"the pod bound (log {process.log})", 0.1)
                    marks["bound"] = time.monotonic() - start
                    (node,) = operator.nodes
                    assert placed["spec"]["nodeName"] == f"k8s-{node}"
                    job_id = placed["metadata"]["annotations"][JOB_ID_ANNOTATION]
                    assert squeue(lab, job_id) == f"{job_id}|RUNNING|{node}"

                    fake.remove("pods", "team-a", "trainer")
                    deleted = time.monotonic()
                    await eventually(lambda: squeue(lab, job_id) == "", 30.0, "the job cancelled", 0.2)
                    marks["cancelled"] = time.monotonic() - deleted

                    await eventually(
                        lambda: auto.replicas == 0 and not operator.nodes, 60.0, "back to zero", 0.2
                    )
                    marks["zero"] = time.monotonic() - deleted
            finally:
                await operator.shutdown()
    print("closed loop (s): " + ", ".join(f"{k} {v:.1f}" for k, v in marks.items()))
    assert not operator.errors, operator.errors
    assert operator.max_nodes == 1  # one pod, one node: never more
    assert set(marks) == {"scaled", "joined", "bound", "cancelled", "zero"}
    assert marks["scaled"] <= marks["joined"] <= marks["bound"]
