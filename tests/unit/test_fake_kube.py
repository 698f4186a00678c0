"""The fake Kubernetes API server (testkit/fake_kube.py) behaves as the bridge needs, seen through the real
client library (kubernetes_asyncio, configured from a kubeconfig file as the bridge is)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

from testkit.builders import pod_doc
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[tuple[FakeKube, client.CoreV1Api]]:
    fake = FakeKube(token=TOKEN, history=50)
    async with serve_kube(fake) as url:
        cfg = client.Configuration()
        await config.load_kube_config(
            config_file=str(write_kubeconfig(tmp_path / "kubeconfig", url)), client_configuration=cfg
        )
        async with client.ApiClient(cfg) as api:
            yield fake, client.CoreV1Api(api)


def pod(name: str, ns: str = "team-a", **labels: str) -> dict[str, Any]:
    return pod_doc(name, ns, labels=labels)


async def raw_list(api: client.CoreV1Api, **kw: Any) -> dict[str, Any]:
    resp = await api.list_namespaced_pod("team-a", _preload_content=False, **kw)
    return json.loads(await resp.read())


async def test_create_get_list_with_selectors_and_resource_versions(
    kube: tuple[FakeKube, client.CoreV1Api],
) -> None:
    _, api = kube
    a = await api.create_namespaced_pod("team-a", pod("a", app="x"))
    b = await api.create_namespaced_pod("team-a", pod("b", app="y"))
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert a.metadata.uid and a.status.phase == "Pending"
    with pytest.raises(ApiException) as e:
        await api.create_namespaced_pod("team-a", pod("a"))
    assert e.value.status == 409
    listed = await raw_list(api, label_selector="app in (x,z)")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["a"]
    assert [p["metadata"]["name"] for p in (await raw_list(api, label_selector="app!=x"))["items"]] == ["b"]
    by_field = await raw_list(api, field_selector="spec.schedulerName=slurm-bridge,metadata.name!=a")
    assert [p["metadata"]["name"] for p in by_field["items"]] == ["b"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(b.metadata.resource_version)
    with pytest.raises(ApiException) as e:
        await api.read_namespaced_pod("nope", "team-a")
    assert e.value.status == 404


async def test_binding_status_patch_and_conflicts(kube: tuple[FakeKube, client.CoreV1Api]) -> None:
    _, api = kube
    await api.create_namespaced_pod("team-a", pod("a"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a"},
        "target": {"kind": "Node", "name": "c1"},
    }
    await api.create_namespaced_pod_binding("a", "team-a", binding, _preload_content=False)
    got = await api.read_namespaced_pod("a", "team-a")
    assert got.spec.node_name == "c1"
    assert [(c.type, c.status) for c in got.status.conditions] == [("PodScheduled", "True")]
    # raw answers (the client cannot read the Status a binding answers into V1Binding): check the status
    again = await api.create_namespaced_pod_binding("a", "team-a", binding, _preload_content=False)
    assert again.status == 409 and "already assigned" in await again.text()
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    await api.patch_namespaced_pod_status("a", "team-a", patch)  # strategic merge: conditions merge by type
    got = await api.read_namespaced_pod("a", "team-a")
    assert {c.type for c in got.status.conditions} == {"PodScheduled", "Ready"}
    with pytest.raises(ApiException) as e:  # a patch that names a stale resourceVersion
        await api.patch_namespaced_pod("a", "team-a", {"metadata": {"resourceVersion": "1"}})
    assert e.value.status == 409


async def test_watch_from_a_resource_version_and_410_after_compaction(
    kube: tuple[FakeKube, client.CoreV1Api],
) -> None:
    _, api = kube
    first = await api.create_namespaced_pod("team-a", pod("a"))
    rv = first.metadata.resource_version
    await api.create_namespaced_pod("team-a", pod("b"))
    await api.delete_namespaced_pod("a", "team-a")
    resp = await api.list_namespaced_pod(
        "team-a", watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    lines = [json.loads(line) async for line in resp.content if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "b"), ("DELETED", "a")]
    for i in range(60):  # more than the 50 events kept
        await api.create_namespaced_pod("team-a", pod(f"p{i}"))
    resp = await api.list_namespaced_pod(
        "team-a", watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    (event,) = [json.loads(line) async for line in resp.content if line.strip()]
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


async def test_a_forced_deletion_is_a_new_version_a_watch_from_the_last_list_sees(
    kube: tuple[FakeKube, client.CoreV1Api],
) -> None:
    """A deletion is a write of its own (etcd gives it a revision): a watch resuming from the version of a
    list taken just before it still sees the DELETED event, however the deletion was made."""
    fake, api = kube
    await api.create_namespaced_pod("team-a", pod("a"))
    listed = await raw_list(api)
    fake.remove("pods", "team-a", "a")  # the kubelet's final delete, before the watch is opened
    resp = await api.list_namespaced_pod(
        "team-a",
        watch=True,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=1,
        _preload_content=False,
    )
    lines = [json.loads(line) async for line in resp.content if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("DELETED", "a")]
    assert int(lines[0]["object"]["metadata"]["resourceVersion"]) > int(listed["metadata"]["resourceVersion"])


async def test_a_live_watch_sees_changes_and_ends_when_the_server_closes_it(
    kube: tuple[FakeKube, client.CoreV1Api],
) -> None:
    fake, api = kube
    await api.create_namespaced_pod("team-a", pod("a"))
    resp = await api.list_namespaced_pod("team-a", watch=True, _preload_content=False)
    assert json.loads(await resp.content.readline())["type"] == "ADDED"  # the current state first
    await api.create_namespaced_pod("team-a", pod("b"))
    event = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
    fake.close_watches()
    assert await asyncio.wait_for(resp.content.readline(), 5) == b""
    resp.release()


async def test_deleting_a_pod_on_a_dead_kubelet_leaves_it_terminating(
    kube: tuple[FakeKube, client.CoreV1Api],
) -> None:
    fake, api = kube
    await api.create_namespaced_pod("team-a", pod("a"))
    fake.update("pods", "team-a", "a", {"spec": {"nodeName": "c2"}})
    fake.kill_kubelet("c2")
    await api.delete_namespaced_pod("a", "team-a")
    stuck = await api.read_namespaced_pod("a", "team-a")
    assert stuck.metadata.deletion_timestamp is not None
    await api.delete_namespaced_pod("a", "team-a", grace_period_seconds=0)  # --force
    with pytest.raises(ApiException):
        await api.read_namespaced_pod("a", "team-a")


async def test_faults_and_auth(kube: tuple[FakeKube, client.CoreV1Api], tmp_path: Path) -> None:
    fake, api = kube
    fake.fail_next("GET", r"/pods$", 500)
    with pytest.raises(ApiException) as e:
        await api.list_namespaced_pod("team-a")
    assert e.value.status == 500
    await api.list_namespaced_pod("team-a")  # only the next one
    fake.down = True
    with pytest.raises(ApiException) as e:
        await api.list_namespaced_pod("team-a")
    assert e.value.status == 503
    fake.down = False
    fake.token = "another"
    with pytest.raises(ApiException) as e:
        await api.list_namespaced_pod("team-a")
    assert e.value.status == 401


async def test_events_leases_and_custom_resources(kube: tuple[FakeKube, client.CoreV1Api]) -> None:
    fake, api = kube
    event = {
        "metadata": {"generateName": "a."},
        "involvedObject": {"kind": "Pod", "name": "a", "namespace": "team-a"},
        "reason": "SlurmRefused",
        "message": "partition 'x' is not allowed",
        "type": "Warning",
    }
    await api.create_namespaced_event("team-a", event)
    assert [e["reason"] for e in fake.events_for("team-a", "a")] == ["SlurmRefused"]
    coord = client.CoordinationV1Api(api.api_client)
    lease = {
        "metadata": {"name": "slurm-bridge"},
        "spec": {"holderIdentity": "pod-1", "leaseDurationSeconds": 15},
    }
    made = await coord.create_namespaced_lease("slurm-keda", lease)
    made.spec.holder_identity = "pod-2"
    await coord.replace_namespaced_lease("slurm-bridge", "slurm-keda", made)
    made.spec.holder_identity = "pod-3"  # the same, now stale, resourceVersion: a lost race
    with pytest.raises(ApiException) as e:
        await coord.replace_namespaced_lease("slurm-bridge", "slurm-keda", made)
    assert e.value.status == 409
    custom = client.CustomObjectsApi(api.api_client)
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 2},
    }
    await custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "team-a", "podgroups", group
    )
    got = await custom.get_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "team-a", "podgroups", "g"
    )
    assert got["spec"]["minMember"] == 2


async def test_pod_validation_as_the_api_server_does_it(kube: tuple[FakeKube, client.CoreV1Api]) -> None:
    """A node field selector names metadata.name with one value for In / NotIn; scheduling gates may only
    be removed (kube-apiserver's ValidateNodeFieldSelectorRequirement, ValidatePodUpdate)."""
    fake, api = kube
    two = {"key": "metadata.name", "operator": "In", "values": ["c1", "c2"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [two]}]}
        }
    }
    with pytest.raises(ApiException) as e:
        await api.create_namespaced_pod("team-a", pod_doc("many", spec={"affinity": affinity}))
    assert e.value.status == 422 and "must be only one value" in e.value.body
    two["values"] = ["c1"]
    await api.create_namespaced_pod("team-a", pod_doc("one", spec={"affinity": affinity}))
    gated = pod_doc("gated", spec={"schedulingGates": [{"name": "a"}]})
    await api.create_namespaced_pod("team-a", gated)
    with pytest.raises(ApiException) as e:
        await api.patch_namespaced_pod(
            "gated", "team-a", {"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}
        )
    assert e.value.status == 422 and "only deletion is allowed" in e.value.body
    await api.patch_namespaced_pod("gated", "team-a", {"spec": {"schedulingGates": None}})
    assert not (fake.get("pods", "team-a", "gated") or {})["spec"].get("schedulingGates")
