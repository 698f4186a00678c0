"""deploy/components/bridge: the ClusterRole grants exactly the calls the bridge makes (recorded by the fake
API server while every Kube method runs), and the example policy loads."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from bridge.kube import Kube, load_configuration
from bridge.lease import LeaderElector, LeaseOptions
from bridge.policy import parse_policy
from testkit.builders import pod_doc as pod
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.paths import ROOT

DEPLOY = ROOT / "deploy" / "components" / "bridge"


def granted() -> set[tuple[str, str, str, str]]:
    """(namespace or "*", API group, resource, verb) of every rule in the ClusterRole and the Role."""
    docs = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    out = set()
    for role in (d for d in docs if d["kind"] in ("ClusterRole", "Role")):
        where = role["metadata"].get("namespace", "*") if role["kind"] == "Role" else "*"
        for rule in role["rules"]:
            (group,) = rule["apiGroups"]
            out |= {(where, group, r, v) for r in rule["resources"] for v in rule["verbs"]}
    return out


def verb(method: str, path: str, query_watch: bool) -> tuple[str, str, str, str]:
    m = re.match(
        r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>\w+)"
        r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>\w+))?$",
        path,
    )
    assert m, path
    resource = f"{m['resource']}/{m['sub']}" if m["sub"] else m["resource"]
    # pod writes name the pod's namespace: the ClusterRole covers them; the Lease is in the bridge's own
    where = m["ns"] if m["resource"] == "leases" else "*"
    if method == "GET":
        action = ("watch" if query_watch else "list") if m["name"] is None else "get"
    else:
        action = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
    return where, m["group"] or "", resource, action


async def test_the_roles_are_exactly_what_the_bridge_calls(tmp_path: Path) -> None:
    fake = FakeKube(token=TOKEN)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            k = Kube(api)
            fake.put("pods", pod("a"))
            pods, rv = await k.list_pods("slurm-bridge")
            watches: list[AsyncIterator[Any]] = [k.watch_pods("slurm-bridge", rv, timeout=1)]
            watches.append(k.watch_nodes((await k.list_nodes())[1], timeout=1))
            watches.append(k.watch_namespaces((await k.list_namespaces())[1], timeout=1))
            watches.append(k.watch_pod_groups((await k.list_pod_groups())[1], timeout=1))
            for lister, watcher in (
                (k.list_assigned_pods, k.watch_assigned_pods),
                (k.list_claims, k.watch_claims),
                (k.list_volumes, k.watch_volumes),
                (k.list_storage_classes, k.watch_storage_classes),
                (k.list_jobs, k.watch_jobs),
                (k.list_scheduling_groups, k.watch_scheduling_groups),
                (k.list_jobsets, k.watch_jobsets),
                (k.list_leader_worker_sets, k.watch_leader_worker_sets),
            ):
                watches.append(watcher((await lister())[1], timeout=1))

            async def drain(watch: AsyncIterator[Any]) -> None:
                async for _ in watch:
                    pass

            await asyncio.gather(*map(drain, watches))  # each watch ends after its 1 s timeout: at once
            fake.put("persistentvolumeclaims", {"metadata": {"name": "c", "namespace": "ns", "uid": "cu"}})
            await k.select_node("ns", "c", "cu", "c1")
            pv = fake.put("persistentvolumes", {"metadata": {"name": "pv"}, "spec": {}})
            pv_rv = pv["metadata"]["resourceVersion"]
            await k.prebind_volume("pv", pv_rv, "ns", "c", "cu")
            fake.put(
                "podgroups", {"metadata": {"name": "g", "namespace": "ns"}}, "scheduling.x-k8s.io/v1alpha1"
            )
            await k.pod_group_status("ns", "g", {"phase": "Pending"})
            p = pods[0]
            await k.mark(p, {"slurm-keda.io/job-id": "1"}, {})
            await k.bind(p, "c1")
            await k.unschedulable(p, "SlurmPending", "x")
            await k.event(p, "SlurmBound", "x")
            await k.delete_pod(p)
            elector = LeaderElector(
                k, LeaseOptions("slurm-keda-bridge-default", "slurm", "me", 3.0, 2.0, 1.0)
            )
            assert await elector._try() == "ours"  # create
            assert await elector._try() == "ours"  # get, update
    used = {verb(m, path, w) for m, path, w in fake.requests}
    assert used == granted(), used ^ granted()


def test_the_example_policy_loads() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "policy.yaml").read_text()))
    policy = parse_policy(yaml.safe_load(docs[0]["data"]["policy.yaml"]))
    assert policy.of("ml-team") is not None


def granted_shared_nodes() -> set[tuple[str, str, str, str]]:
    docs = list(yaml.safe_load_all((DEPLOY.parent / "bridge-shared-nodes" / "rbac.yaml").read_text()))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    return {
        ("*", g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


async def test_shared_nodes_add_exactly_the_node_patch(tmp_path: Path) -> None:
    """--bridge-shared-nodes: its one Kubernetes write (a node's taints) is what its component grants."""
    fake = FakeKube(token=TOKEN)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            node = fake.put("nodes", {"metadata": {"name": "c1"}, "spec": {}})
            taints = [{"key": "slurm-keda.io/slurm-managed", "value": "true", "effect": "NoSchedule"}]
            await Kube(api).set_node_taints("c1", node["metadata"]["resourceVersion"], taints)
    assert (fake.get("nodes", "", "c1") or {})["spec"]["taints"] == taints
    assert {verb(m, path, w) for m, path, w in fake.requests} == granted_shared_nodes()
