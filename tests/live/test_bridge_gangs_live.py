"""Gangs end to end: the 26.05 lab's Slurm places whole groups of pods that live in the fake Kubernetes API.

The seed's demo 2 — a 3-node partition and two 2-pod gangs: the first gang's pods are bound to two
distinct nodes (rank 0 on the first node of the job's host list), the second gang waits in Slurm with
nothing bound; when the first gang's pods finish, the second binds both together. Then a LeaderWorkerSet
group of 3 (leader on the first node) and a coscheduling PodGroup with ``minMember`` 2 of 3 pods (two as
the gang, the third alone once the gang runs).

The three Slurm nodes are dynamic nodes of the lab's ``dyn`` partition under one reservation (other
tests' jobs cannot take them); the pods name the reservation by annotation, as the policy allows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bridge.actions import NODES_ANNOTATION, RANK_ANNOTATION, SLURM_NODE_ANNOTATION
from exporter.slurmtext import hostlist_expand
from lab import Lab
from testkit.bridge_lab import (
    RESERVATION,
    all_bound,
    bridge_pod,
    finish,
    gang_pod,
    job_of,
    placed,
    reserved_nodes,
    running_bridge,
    squeue,
)
from testkit.tools import eventually

log = logging.getLogger(__name__)

NODES = ["gang-1", "gang-2", "gang-3"]
LWS = "leaderworkerset.sigs.k8s.io/"
POLICY = {"namespaces": {"team-a": {"user_id": 0, "partitions": ["dyn"], "reservations": [RESERVATION]}}}


def lws_pod(worker: int, size: int = 3) -> dict[str, Any]:
    p = bridge_pod("llm-0" if worker == 0 else f"llm-0-{worker}", RESERVATION)
    p["metadata"]["labels"] = {
        LWS + "name": "llm",
        LWS + "group-index": "0",
        LWS + "group-key": "0a1b2c",
        LWS + "worker-index": str(worker),
    }
    p["metadata"]["annotations"][LWS + "size"] = str(size)
    return p


def pod_group_pod(name: str) -> dict[str, Any]:
    p = bridge_pod(name, RESERVATION)
    p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    return p


def assert_rank_order(lab: Lab, pods: list[dict[str, Any]]) -> None:
    """One job for all, each on its own node, rank r on the r-th node of the job's host list (squeue's)."""
    (job_id,) = {job_of(p) for p in pods}
    _, state, nodelist = squeue(lab, job_id).split("|")
    hosts = hostlist_expand(nodelist, limit=10)
    assert state == "RUNNING" and len(hosts) == len(pods)
    for rank, p in enumerate(pods):
        notes = p["metadata"]["annotations"]
        assert p["spec"]["nodeName"] == hosts[rank] == notes[SLURM_NODE_ANNOTATION]
        assert notes[RANK_ANNOTATION] == str(rank) and notes[NODES_ANNOTATION] == nodelist


async def test_demo_2_gangs_are_placed_whole_or_not_at_all(lab_2605: Lab, tmp_path: Path) -> None:
    lab = lab_2605
    with reserved_nodes(lab, NODES, RESERVATION):
        async with running_bridge(lab, "v0.0.45", tmp_path, policy=POLICY, nodes=tuple(NODES)) as (
            fake,
            bridge,
        ):
            # -- demo 2: two 2-pod gangs on three nodes
            for name in ("a-0", "a-1"):
                fake.put("pods", gang_pod(name, "gang-a", 2))
            a = await all_bound(fake, ["a-0", "a-1"], "gang A bound")
            assert_rank_order(lab, a)
            assert a[0]["spec"]["nodeName"] != a[1]["spec"]["nodeName"]
            for name in ("b-0", "b-1"):
                fake.put("pods", gang_pod(name, "gang-b", 2))

            def b_waits() -> str | None:
                p = fake.get("pods", "team-a", "b-0") or {}
                conditions = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
                text = str(conditions.get("PodScheduled", {}).get("message", ""))
                return text if "Resources" in text or "Reservation" in text else None

            message = await eventually(b_waits, 30.0, "gang B to show Slurm's reason", 0.2)
            log.info("gang B waits: %s", message)
            assert "2 nodes" in message and placed(fake, "b-0") is None and placed(fake, "b-1") is None
            b_job = message.split()[2].rstrip(":")
            assert squeue(lab, b_job).split("|")[1] == "PENDING"  # one node free, the gang needs two

            finish(fake, ["a-0", "a-1"])  # gang A's pods end → its job is cancelled → B gets two nodes
            b = await all_bound(fake, ["b-0", "b-1"], "gang B bound once A ended")
            assert_rank_order(lab, b)
            assert job_of(b[0]) == b_job
            assert squeue(lab, job_of(a[0])) == ""
            assert fake.get("pods", "team-a", "a-0") is not None  # a finished pod stays (its record)

            # -- a LeaderWorkerSet group of 3: the leader on the first node
            finish(fake, ["b-0", "b-1"])
            for worker in (2, 1, 0):  # the workers may come before the leader
                fake.put("pods", lws_pod(worker))
            names = ["llm-0", "llm-0-1", "llm-0-2"]
            lws = await all_bound(fake, names, "the LeaderWorkerSet group bound")
            assert_rank_order(lab, lws)

            # -- a PodGroup, minMember 2 of 3 pods: the gang of two, then the third alone
            finish(fake, names)
            fake.put(
                "podgroups",
                {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minMember": 2}},
                prefix="scheduling.x-k8s.io/v1alpha1",
            )
            for name in ("t-0", "t-1", "t-2"):
                fake.put("pods", pod_group_pod(name))
            gang = await all_bound(fake, ["t-0", "t-1"], "the PodGroup's gang bound")
            assert_rank_order(lab, gang)
            (third,) = await all_bound(fake, ["t-2"], "the third pod bound alone")
            assert job_of(third) != job_of(gang[0])
            assert third["spec"]["nodeName"] not in {p["spec"]["nodeName"] for p in gang}
            assert not bridge.stats.errors, bridge.stats.errors

            # a member deleted while the gang runs: the gang's job is cancelled and its other member deleted
            fake.remove("pods", "team-a", "t-1")
            await eventually(
                lambda: squeue(lab, job_of(gang[0])) == "", 30.0, "the gang's job cancelled", 0.5
            )
            await eventually(
                lambda: fake.get("pods", "team-a", "t-0") is None, 30.0, "the other member deleted", 0.2
            )
