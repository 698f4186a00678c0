"""Behaviour kept byte for byte: for every recorded lab answer in ``tests/data/recorded``, what the product
serves from it — ``/metrics`` (every family, the per-node/user/account/reason ones on), ``/snapshot``, the
demand as JSON and as the table, the KEDA external scaler's answers over real gRPC, and the bridge's planned
actions for a fixed set of pods — is compared with the files in ``tests/data/golden``.

These files were written before the layout moved (issue 21) and must not change without a reason: a
behaviour change shows here as a diff. ``SLURM_KEDA_WRITE_GOLDEN=1`` rewrites them (then read the diff).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc.aio
import msgspec
import pytest
from google.protobuf import text_format

from autoscaler.demand import Target
from autoscaler.grpc_scaler import start_grpc_server
from autoscaler.metrics import demand_families
from autoscaler.report import demand_json, demand_table
from autoscaler.service import DemandService, StaticSource
from autoscaler.targets import target_from_metadata
from bridge.actions import BridgeOptions, World, plan
from bridge.pods import decode_node, decode_pod
from bridge.policy import parse_policy
from exporter.collector import Cardinality
from exporter.model import Snapshot
from exporter.pollstate import EndpointState, PollStatus
from exporter.server import make_app
from exporter.versions import SUPPORTED_VERSIONS
from testkit.builders import ALLOCATABLE
from testkit.keda import connect
from testkit.paths import ROOT
from testkit.tools import recorded_snapshot, serve_app

RECORDED = ROOT / "tests" / "data" / "recorded"
GOLDEN = ROOT / "tests" / "data" / "golden"
VERSION_DIRS = sorted(
    d for d in RECORDED.glob("*/v0.0.*") if d.name in SUPPORTED_VERSIONS and (d / "jobs.json").is_file()
)
WRITE = os.environ.get("SLURM_KEDA_WRITE_GOLDEN") == "1"


def _taken_at(vdir: Path) -> float:
    return recorded_snapshot(vdir, vdir.name).taken_at


class _Source:
    """The poller's read side, frozen: one snapshot, one status."""

    def __init__(self, snap: Snapshot, status: PollStatus) -> None:
        self.snapshot = snap
        self.status = status

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        return self.snapshot


def _status(snap: Snapshot) -> PollStatus:
    st = PollStatus(
        api_version=snap.api_version,
        offered_versions=(snap.api_version,),
        jobs_api_version=snap.api_version,
        polls=1,
        last_poll_started=snap.taken_at - 1.0,
        last_poll_finished=snap.taken_at,
        last_poll_duration=1.0,
        last_poll_ok=True,
        last_success=snap.taken_at,
    )
    for name in snap.fetched_at:
        st.endpoints[name] = EndpointState(name, fetched_at=snap.taken_at, successes=1, last_ok=True)
    return st


def _targets(snap: Snapshot) -> list[Target]:
    """One target per partition, plus a NodeSet at zero with its shape from the metadata."""
    out = [target_from_metadata({"partition": p.name}) for p in snap.partitions]
    if snap.partitions:
        first = snap.partitions[0].name
        out.append(
            target_from_metadata(
                {"partition": first, "nodeset": "ns-dyn", "cpusPerNode": "8", "memoryPerNode": "16000"}
            )
        )
    return out


def _plain(value: Any) -> Any:
    """Actions (frozen dataclasses, msgspec structs, tuples) as JSON-ready data, fields in order."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"_": type(value).__name__, **{f.name: _plain(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, msgspec.Struct):
        return {"_": type(value).__name__, **{k: _plain(getattr(value, k)) for k in value.__struct_fields__}}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    return value


def _bridge_plan(snap: Snapshot) -> str:
    """The plan for pods beside the recorded jobs: a pod with a running job (bound), a job whose pod is
    gone (cancelled), new pods alone and as a gang (submitted), a bad annotation (refused)."""
    now = snap.taken_at + 1.0
    instance = "golden"
    running = next((j for j in snap.jobs if j.state == "RUNNING" and j.nodes), None)
    pending = next((j for j in snap.jobs if j.state == "PENDING"), None)

    def comment(uid: str) -> str:
        pods = [{"namespace": "team-a", "name": f"p-{uid}", "uid": uid}]
        return json.dumps({"slurm-keda": {"instance": instance, "pods": pods}}, separators=(",", ":"))

    jobs = list(snap.jobs)
    if running is not None:
        jobs[jobs.index(running)] = msgspec.structs.replace(running, admin_comment=comment("u-run"))
    if pending is not None:
        jobs[jobs.index(pending)] = msgspec.structs.replace(pending, admin_comment=comment("u-gone"))
    world_snap = msgspec.structs.replace(snap, jobs=tuple(jobs))

    def pod(uid: str, **kw: Any) -> Any:
        doc: dict[str, Any] = {
            "metadata": {
                "name": f"p-{uid}",
                "namespace": "team-a",
                "uid": uid,
                "labels": kw.get("labels", {}),
                "annotations": kw.get("annotations", {}),
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "schedulerName": "slurm-bridge",
                "containers": [{"name": "m", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            },
            "status": {"phase": "Pending"},
        }
        return decode_pod(json.dumps(doc))

    pods = [
        pod("u-new"),
        pod("u-bad", annotations={"slurm-keda.io/partition": "no such partition!"}),
        pod("u-g0", annotations={"slurm-keda.io/group": "g", "slurm-keda.io/group-size": "2"}),
        pod("u-g1", annotations={"slurm-keda.io/group": "g", "slurm-keda.io/group-size": "2"}),
    ]
    if running is not None:
        pods.append(pod("u-run"))
    k8s_nodes = []
    for i, n in enumerate(snap.nodes):
        doc = {
            "metadata": {"name": n.name, "labels": {"slurm-keda.io/bridge": "true"} if i % 4 != 1 else {}},
            "spec": {"unschedulable": i % 5 == 3},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": dict(ALLOCATABLE)},
        }
        k8s_nodes.append(decode_node(json.dumps(doc)))
    partitions = sorted({p.name for p in snap.partitions})
    options = BridgeOptions(
        instance=instance,
        policy=parse_policy({"namespaces": {"team-a": {"user_id": 1001, "partitions": partitions}}}),
        max_data_age=1e9,
    )
    actions = plan(World(world_snap, pods, k8s_nodes, now), options)
    return json.dumps(_plain(actions), indent=1, sort_keys=False) + "\n"


async def _metrics_and_snapshot(snap: Snapshot) -> tuple[bytes, bytes, bytes]:
    demand = DemandService(StaticSource(snap), targets=[], timer=lambda: 0.0)  # no measured seconds
    now = snap.taken_at + 2.0
    app = make_app(
        _Source(snap, _status(snap)),  # type: ignore[arg-type]
        clock=lambda: now,
        cardinality=Cardinality(per_node=True, per_user=True, per_account=True, node_reasons=True),
        extra_families=lambda s: demand_families(demand.demands_on(s), demand.label, demand.source),
        extra_health=demand.health_families,
    )
    async with serve_app(app) as url, aiohttp.ClientSession() as http:
        async with http.get(url + "/metrics") as r:
            text = await r.read()
        async with http.get(url + "/metrics", headers={"Accept": "application/openmetrics-text"}) as r:
            om = await r.read()
        async with http.get(url + "/snapshot") as r:
            snapshot = await r.read()
    return text, om, snapshot


async def _scaler_answers(snap: Snapshot, targets: list[Target]) -> str:
    service = DemandService(StaticSource(snap), targets=targets)
    await service.refresh(snap)
    server = await start_grpc_server(service, "127.0.0.1:0")
    out: list[str] = []
    try:
        async with connect(server.port) as keda:
            metas: list[dict[str, str]] = [{"partition": p.name} for p in snap.partitions]
            metas.append({"partition": "no-such-partition"})
            for meta in metas:
                out.append(f"== {meta}")
                try:
                    out.append(f"active: {await keda.is_active(meta)}")
                    spec = await keda.metric_spec(meta)
                    out.append(text_format.MessageToString(spec, as_one_line=True))
                    name = spec.metricSpecs[0].metricName if spec.metricSpecs else ""
                    got = await keda.metrics(meta, name)
                    out.append(text_format.MessageToString(got, as_one_line=True))
                except grpc.aio.AioRpcError as e:  # a refusal is an answer too
                    out.append(f"refused: {e.code()} {e.details()}")
    finally:
        await server.stop()
    return "\n".join(out) + "\n"


def _check(folder: Path, name: str, got: bytes | str) -> None:
    data = got.encode() if isinstance(got, str) else got
    path = folder / name
    if WRITE:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return
    assert path.is_file(), f"{path} missing: run with SLURM_KEDA_WRITE_GOLDEN=1 on the old tree"
    want = path.read_bytes()
    if data != want:
        diff = [
            f"{i}: -{a!r}\n   +{b!r}"
            for i, (a, b) in enumerate(zip(want.splitlines(), data.splitlines(), strict=False))
            if a != b
        ][:5]
        pytest.fail(f"{path} differs ({len(want)} → {len(data)} bytes); first lines:\n" + "\n".join(diff))


OUTPUTS: dict[str, Callable[[Snapshot], str]] = {
    "demand.json": lambda s: (
        json.dumps(demand_json(DemandService(StaticSource(s), targets=_targets(s)).demands_on(s)), indent=2)
        + "\n"
    ),
    "demand-default.txt": lambda s: demand_table(DemandService(StaticSource(s), targets=[]).demands_on(s)),
    "demand.txt": lambda s: demand_table(DemandService(StaticSource(s), targets=_targets(s)).demands_on(s)),
    "bridge-plan.json": _bridge_plan,
}


@pytest.mark.skipif(not VERSION_DIRS, reason="no lab recordings in tests/data/recorded")
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=[f"{d.parent.name}/{d.name}" for d in VERSION_DIRS])
async def test_served_outputs_are_unchanged(vdir: Path) -> None:
    snap = recorded_snapshot(vdir, vdir.name)
    folder = GOLDEN / vdir.parent.name / vdir.name
    text, om, snapshot = await _metrics_and_snapshot(snap)
    _check(folder, "metrics.txt", text)
    _check(folder, "metrics.openmetrics.txt", om)
    _check(folder, "snapshot.json", snapshot)
    for name, make in OUTPUTS.items():
        _check(folder, name, make(snap))
    _check(folder, "scaler.txt", await _scaler_answers(snap, _targets(snap)))
