"""The bridge's Kubernetes calls (bridge/kube.py) against the fake API server, through kubernetes_asyncio
configured from a kubeconfig file."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from bridge.kube import Gone, Kube, KubeError, load_configuration
from bridge.pods import Pod, created_at, decode_pod
from testkit.builders import pod_doc as pod
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[tuple[FakeKube, Kube]]:
    fake = FakeKube(token=TOKEN, history=20)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            yield fake, Kube(api)


async def test_list_and_watch_only_the_bridges_pods(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    fake.put("pods", pod("a"))
    fake.put("pods", pod("other", scheduler="default-scheduler"))
    pods, rv = await k.list_pods("slurm-bridge")
    assert [p.metadata.name for p in pods] == ["a"]
    fake.put("pods", pod("b", "team-b"))
    fake.update("pods", "team-a", "a", {"metadata": {"labels": {"x": "1"}}})
    events = [(kind, p.key) async for kind, p in k.watch_pods("slurm-bridge", rv, timeout=1)]
    assert events == [("ADDED", "team-b/b"), ("MODIFIED", "team-a/a")]
    # the API server's creation time comes through: the "waiting since" metric is read from it
    created = created_at(pods[0])
    assert created is not None and abs(created - time.time()) < 60


def test_created_at_reads_rfc3339_and_refuses_anything_else() -> None:
    def with_stamp(stamp: str | None) -> Pod:
        return decode_pod(json.dumps({"metadata": {"name": "p", "creationTimestamp": stamp}}))

    assert created_at(with_stamp("2026-12-01T17:00:00Z")) == 1796144400.0
    for bad in (None, "", "yesterday", "2026-12-01T17:00:00"):  # no zone: not what the API server sends
        assert created_at(with_stamp(bad)) is None


async def test_a_compacted_watch_is_gone(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    _, rv = await k.list_pods("slurm-bridge")
    for i in range(30):
        fake.put("pods", pod(f"p{i}"))
    with pytest.raises(Gone):
        async for _ in k.watch_pods("slurm-bridge", rv, timeout=1):
            pass


async def test_bind_mark_condition_event_delete(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    obj = fake.put("pods", pod("a"))
    p = (await k.list_pods("slurm-bridge"))[0][0]
    await k.bind(p, "c1")
    await k.bind(p, "c1")  # again, to the same node: fine
    with pytest.raises(KubeError) as e:
        await k.bind(p, "c2")
    assert e.value.status == 409
    assert await k.mark(p, {"slurm-keda.io/job-id": "42"}, {"slurm-keda.io/slurm-node": "c1"}) is True
    stored = fake.get("pods", "team-a", "a")
    assert stored is not None
    assert stored["metadata"]["labels"]["slurm-keda.io/job-id"] == "42"
    assert stored["spec"]["nodeName"] == "c1"
    await k.unschedulable(p, "SlurmPending", "Slurm job 42: Priority")
    stored = fake.get("pods", "team-a", "a")
    assert stored is not None
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["PodScheduled"]["message"] == "Slurm job 42: Priority"
    await k.event(p, "SlurmBound", "bound to c1 (Slurm job 42)")
    (event,) = fake.events_for("team-a", "a")
    assert (event["reason"], event["type"], event["involvedObject"]["uid"]) == (
        "SlurmBound",
        "Normal",
        obj["metadata"]["uid"],
    )
    assert await k.delete_pod(p) is True
    assert await k.delete_pod(p) is False  # gone already


async def test_a_binding_writes_its_annotations_in_the_same_write(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    fake.put("pods", pod("a"))
    p = (await k.list_pods("slurm-bridge"))[0][0]
    _, rv = await k.list_pods("slurm-bridge")
    await k.bind(p, "c1", {"slurm-keda.io/job-id": "42"})
    events = [(kind, q) async for kind, q in k.watch_pods("slurm-bridge", rv, timeout=1)]
    assert len(events) == 1  # one write: node and annotation arrive together
    (_, seen) = events[0]
    assert (seen.spec.nodeName, seen.metadata.annotations) == ("c1", {"slurm-keda.io/job-id": "42"})


async def test_a_binding_is_refused_as_the_api_server_refuses_it(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    fake.put("pods", pod("a"))
    old = (await k.list_pods("slurm-bridge"))[0][0]
    fake.remove("pods", "team-a", "a")
    fake.put("pods", pod("a"))  # recreated: the binding's uid precondition fails
    with pytest.raises(KubeError) as e:
        await k.bind(old, "c1")
    assert e.value.status == 409 and "Precondition failed: UID" in str(e.value)
    fake.put("pods", pod("b", meta={"deletionTimestamp": "2026-12-02T00:00:00Z"}))
    going = next(p for p in (await k.list_pods("slurm-bridge"))[0] if p.metadata.name == "b")
    with pytest.raises(KubeError) as e:
        await k.bind(going, "c1")
    assert e.value.status == 409 and "is being deleted" in str(e.value)
    gated = pod("g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    fake.put("pods", gated)
    held = next(p for p in (await k.list_pods("slurm-bridge"))[0] if p.metadata.name == "g")
    with pytest.raises(KubeError) as e:
        await k.bind(held, "c1")
    assert e.value.status == 409 and "schedulingGates" in str(e.value)
    assert all(not (fake.get("pods", "team-a", n) or {})["spec"].get("nodeName") for n in ("a", "b", "g"))


async def test_writes_never_touch_a_new_pod_of_the_same_name(kube: tuple[FakeKube, Kube]) -> None:
    fake, k = kube
    fake.put("pods", pod("a"))
    old = (await k.list_pods("slurm-bridge"))[0][0]
    fake.remove("pods", "team-a", "a")
    fake.put("pods", pod("a"))  # recreated: a new uid
    assert await k.delete_pod(old) is False
    with pytest.raises(KubeError) as e:
        await k.mark(old, {"x": "1"}, {})
    assert e.value.status == 409
    assert fake.get("pods", "team-a", "a") is not None
    fake.remove("pods", "team-a", "a")
    assert await k.mark(old, {"x": "1"}, {}) is False  # gone (404): nothing to mark, no error


async def test_api_failures_are_kube_errors(kube: tuple[FakeKube, Kube], tmp_path: Path) -> None:
    fake, k = kube
    fake.down = True
    with pytest.raises(KubeError) as e:
        await k.list_pods("slurm-bridge")
    assert e.value.kind == "http_503"
    cfg = await load_configuration(write_kubeconfig(tmp_path / "dead", "http://127.0.0.1:9"))
    async with client.ApiClient(cfg) as api:
        with pytest.raises(KubeError) as e:
            await Kube(api).list_pods("slurm-bridge")
    assert e.value.kind == "unreachable"


async def test_configuration_is_in_cluster_or_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "KUBECONFIG", str(write_kubeconfig(tmp_path / "env-kubeconfig", "http://127.0.0.1:1234"))
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert (await load_configuration()).host == "http://127.0.0.1:1234"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubeError, match="no usable kubeconfig"):
        await load_configuration()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod without a service account token
    with pytest.raises(KubeError, match="in-cluster"):
        await load_configuration()
    (tmp_path / "bad").write_text(json.dumps({"kind": "Config"}))
    with pytest.raises(KubeError):
        await load_configuration(tmp_path / "bad")
