"""Builders of the records tests feed the product: Kubernetes pod and node documents, Slurm jobs and
snapshots, and the bridge's planning world (one place each, so a field added to a record is added once)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from bridge.actions import (
    BridgeOptions,
    World,
)
from bridge.pods import Pod, decode_node, decode_pod
from bridge.policy import parse_policy
from exporter.model import Job, Node, Snapshot

NOW = 1_800_000_000.0


OPTIONS = BridgeOptions(
    instance="cluster-a",
    policy=parse_policy({"namespaces": {"team-a": {"user_id": 1001, "partitions": ["cpu"]}}}),
)


def comment(uid: str, instance: str = "cluster-a") -> str:
    pods = [{"namespace": "team-a", "name": "p", "uid": uid}]
    return json.dumps({"slurm-keda": {"instance": instance, "pods": pods}}, separators=(",", ":"))


def job(job_id: int, uid: str, state: str = "PENDING", **kw: Any) -> Job:
    return Job(job_id=job_id, state=state, admin_comment=comment(uid, kw.pop("instance", "cluster-a")), **kw)


def snap(
    jobs: Iterable[Job] = (),
    nodes: Iterable[Node] = (),
    *,
    at: float = 0.0,
    fetched: Iterable[str] = (),
    requested: float | None = None,
) -> Snapshot:
    """A v0.0.45 snapshot taken ``at`` (epoch seconds) of ``jobs`` and ``nodes``; the ``fetched`` endpoints
    count as fetched then, and ``/jobs`` as requested at ``requested`` when given."""
    return Snapshot(
        taken_at=at,
        api_version="v0.0.45",
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        fetched_at=dict.fromkeys(fetched, at),
        requested_at={} if requested is None else {"jobs": requested},
    )


def snapshot(*jobs: Job, age: float = 1.0, slurm_nodes: tuple[str, ...] = ("c1", "c2", "c3")) -> Snapshot:
    nodes = tuple(Node(name=n, state="IDLE", partitions=("cpu",)) for n in slurm_nodes)
    return Snapshot(
        taken_at=NOW - age,
        api_version="v0.0.45",
        jobs=jobs,
        nodes=nodes,
        fetched_at={"jobs": NOW - age, "nodes": NOW - age, "partitions": NOW - age},
    )


def pod_doc(
    name: str = "p",
    namespace: str = "team-a",
    *,
    uid: str | None = None,
    scheduler: str = "slurm-bridge",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    node: str | None = None,
    status: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A v1 Pod as the API server stores it: one ``busybox`` container named ``main`` unless
    ``containers`` says otherwise; ``meta``/``spec`` add fields to metadata/spec."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        metadata["uid"] = uid
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    metadata.update(meta or {})
    body: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": containers if containers is not None else [{"name": "main", "image": "busybox"}],
        **(spec or {}),
    }
    if node:
        body["nodeName"] = node
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}
    if status is not None:
        doc["status"] = status
    return doc


def pod(
    uid: str = "u1",
    *,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    **meta: Any,
) -> Pod:
    """A decoded bridge pod ``team-a/p-<uid>`` (pending unless ``status`` says otherwise); ``spec`` adds
    fields to its spec."""
    doc = pod_doc(
        f"p-{uid}",
        uid=uid,
        labels=labels or {},
        containers=[{"name": "m"}],
        node=node,
        status=status if status is not None else {"phase": "Pending"},
        meta=meta,
        spec=spec,
    )
    return decode_pod(json.dumps(doc))


ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
"""What a test's Kubernetes nodes offer (a node always reports its allocatable; without it nothing fits)."""


def k8s_node(
    name: str,
    *,
    ready: bool = True,
    cordoned: bool = False,
    bridge: bool = True,
    taints: list[dict[str, str]] | None = None,
    allocatable: dict[str, str] | None = None,
    **labels: str,
) -> Any:
    doc = {
        "metadata": {
            "name": name,
            "labels": {**({"slurm-keda.io/bridge": "true"} if bridge else {}), **labels},
        },
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": dict(ALLOCATABLE if allocatable is None else allocatable),
        },
    }
    return decode_node(json.dumps(doc))


NODES = [k8s_node("c1"), k8s_node("c2"), k8s_node("c3")]


def world(*jobs: Job, pods: list[Any], nodes: list[Any] | None = None, **kw: Any) -> World:
    snap = kw.pop("snapshot", None) or snapshot(*jobs)
    return World(snap, pods, NODES if nodes is None else nodes, kw.pop("now", NOW), **kw)
