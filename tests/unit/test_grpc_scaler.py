"""The KEDA external scaler over real gRPC: a grpc.aio server on 127.0.0.1:0 and a grpc.aio client
that speaks KEDA's protocol (the generated messages, calls on ``/externalscaler.ExternalScaler/…``).

Snapshots come from a tiny in-test source (the ``SnapshotSource`` shape of the poller) holding a
recorded 26.05 lab payload or small synthetic snapshots, fed to the real ``DemandService``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from autoscaler._proto import externalscaler_pb2 as pb
from autoscaler.demand import NodeShape, Target, compute_demand
from autoscaler.grpc_scaler import (
    SERVICE_NAME,
    GrpcTLS,
    GrpcTLSError,
    ScalerServer,
    start_grpc_server,
)
from autoscaler.service import DemandService
from exporter.model import MIB, Job, Node, Partition, Snapshot
from testkit.keda import TIMEOUT, connect
from testkit.paths import ROOT
from testkit.pki import PKI, have_openssl, make_pki
from testkit.tools import SnapshotFeed, eventually, recorded_snapshot

RECORDED_2605 = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5" / "v0.0.45"
SHAPE = NodeShape(cpus=8, memory_bytes=16000 * MIB)
EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing in grpc-stubs
"""Seconds any one client call may take: a hang fails the test instead of stalling the run."""


# ---------------------------------------------------------------------------------- snapshots


def fetched(snap_time: float) -> dict[str, float]:
    return {"jobs": snap_time, "nodes": snap_time, "partitions": snap_time}


def synthetic(pending_cpus: list[int], taken_at: float) -> Snapshot:
    """Partition ``p`` with two idle 8-CPU nodes and one pending job per entry of ``pending_cpus``."""
    jobs = tuple(
        Job(job_id=i + 1, state="PENDING", reason="Resources", partitions=("p",), cpus=c,
            memory_per_node_bytes=100 * MIB)
        for i, c in enumerate(pending_cpus)
    )  # fmt: skip
    nodes = tuple(
        Node(name=f"n{i}", partitions=("p",), state="IDLE", cpus=8, memory_bytes=16000 * MIB) for i in (1, 2)
    )
    return Snapshot(
        taken_at=taken_at,
        api_version="v0.0.45",
        jobs=jobs,
        nodes=nodes,
        partitions=(Partition(name="p"),),
        fetched_at=fetched(taken_at),
    )


# ------------------------------------------------------------------------------------- client


async def next_message(call: Any, timeout: float = TIMEOUT) -> bool:
    msg = await asyncio.wait_for(call.read(), timeout)
    assert isinstance(msg, pb.IsActiveResponse), f"the stream ended: {msg!r}"
    return msg.result


# ------------------------------------------------------------------------------------ fixtures


@dataclass
class Scaler:
    source: SnapshotFeed
    service: DemandService
    server: ScalerServer

    @property
    def port(self) -> int:
        return self.server.port


@contextlib.asynccontextmanager
async def running_scaler(
    tls: GrpcTLS | None = None, *, stale_after: float = 60.0, clock: Any = time.time
) -> AsyncIterator[Scaler]:
    source = SnapshotFeed()
    service = DemandService(source, stale_after=stale_after, clock=clock)
    runner = asyncio.create_task(service.run(), name="demand-service")
    server = await start_grpc_server(service, "127.0.0.1:0", tls=tls)
    try:
        yield Scaler(source, service, server)
    finally:
        await server.stop(grace=2.0)
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner


@pytest.fixture
async def scaler() -> AsyncIterator[Scaler]:
    async with running_scaler() as s:
        yield s


async def settle(s: Scaler, snap: Snapshot) -> None:
    """Swap ``snap`` in and wait until the demand service has computed on it."""
    before = s.service.computations
    s.source.put(snap)
    await eventually(lambda: s.service.computations > before, 5.0, "the demand service's computation", 0.01)


# ---------------------------------------------------------------------------- generated code


def test_generated_code_is_reproducible(tmp_path: Path) -> None:
    """``make proto`` into a temporary directory gives the committed files byte for byte."""
    bin_dir = Path(sys.executable).parent
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (pip install -e '.[test]'): cannot regenerate")
    if not (bin_dir / "protoc-gen-mypy").exists():
        pytest.skip(f"mypy-protobuf's protoc-gen-mypy is not in {bin_dir}: cannot regenerate")
    if shutil.which("make") is None:
        pytest.skip("no make")
    out = tmp_path / "proto"
    subprocess.run(
        ["make", "-s", "-C", str(ROOT), "proto", f"PROTO_OUT={out}", f"BIN={bin_dir}"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for name in ("externalscaler_pb2.py", "externalscaler_pb2.pyi"):
        committed = (ROOT / "autoscaler" / "_proto" / name).read_bytes()
        assert (out / name).read_bytes() == committed, f"autoscaler/_proto/{name} is stale: run `make proto`"


def test_wire_contract_is_kedas() -> None:
    """Package, service, RPC shapes and field numbers/types as in KEDA's externalscaler.proto."""
    fd = pb.DESCRIPTOR
    assert fd.package == "externalscaler"
    svc = fd.services_by_name["ExternalScaler"]
    assert svc.full_name == SERVICE_NAME
    rpcs = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming, m.client_streaming)
        for m in svc.methods
    }
    assert rpcs == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False, False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True, False),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False, False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False, False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True, False),
    }
    entry = pb.ScaledObjectRef.DESCRIPTOR.fields_by_name["scalerMetadata"].message_type
    assert entry is not None and entry.GetOptions().map_entry  # map<string, string>

    def fields(msg: Any) -> dict[str, tuple[int, int, bool]]:
        return {x.name: (x.number, x.type, x.is_repeated) for x in msg.DESCRIPTOR.fields}

    S, B, I64, D, M = 9, 8, 3, 1, 11  # FieldDescriptor.TYPE_STRING, _BOOL, _INT64, _DOUBLE, _MESSAGE
    assert fields(pb.ScaledObjectRef) == {
        "name": (1, S, False),
        "namespace": (2, S, False),
        "scalerMetadata": (3, M, True),
    }
    assert fields(pb.IsActiveResponse) == {"result": (1, B, False)}
    assert fields(pb.GetMetricSpecResponse) == {"metricSpecs": (1, M, True)}
    assert fields(pb.MetricSpec) == {
        "metricName": (1, S, False),
        "targetSize": (2, I64, False),
        "targetSizeFloat": (3, D, False),
    }
    assert fields(pb.GetMetricsRequest) == {"scaledObjectRef": (1, M, False), "metricName": (2, S, False)}
    assert fields(pb.GetMetricsResponse) == {"metricValues": (1, M, True)}
    assert fields(pb.MetricValue) == {
        "metricName": (1, S, False),
        "metricValue": (2, I64, False),
        "metricValueFloat": (3, D, False),
    }


# ---------------------------------------------------------------------------------- answers


# metadata → the Target it must mean (built by hand, as in tests/unit/test_demand.py)
RECORDED_TARGETS: list[tuple[dict[str, str], Target]] = [
    ({"partition": "cpu", "max": "10"}, Target("cpu", "cpu", max_nodes=10)),
    ({"partition": "cpu", "max": "2"}, Target("cpu", "cpu", max_nodes=2)),
    ({"partition": "gpu", "max": "4"}, Target("gpu", "gpu", max_nodes=4)),
    (
        {"partition": "dyn", "max": "4", "cpusPerNode": "8", "memoryPerNode": "16000"},
        Target("dyn", "dyn", max_nodes=4, shape=SHAPE),
    ),
    ({"partition": "cloud"}, Target("cloud", "cloud")),
    ({"partition": "cloud", "nodeNames": "p[5-12]"}, Target("cloud", "cloud", node_names="p[5-12]")),  # 0
    ({"partition": "gpu", "min": "3"}, Target("gpu", "gpu", min_nodes=3)),
]


@pytest.mark.skipif(not RECORDED_2605.is_dir(), reason="no 26.05 recording")
async def test_every_rpc_answers_the_demand_model(scaler: Scaler) -> None:
    snap = recorded_snapshot(RECORDED_2605, "v0.0.45", taken_at=time.time())
    await settle(scaler, snap)
    seen_active = set()
    async with connect(scaler.port) as keda:
        for meta, target in RECORDED_TARGETS:
            want = compute_demand(snap, [target])[target.name].desired
            seen_active.add(want > 0)
            assert await keda.is_active(meta) is (want > 0), meta
            spec = await keda.metric_spec(meta)
            assert len(spec.metricSpecs) == 1
            (ms,) = spec.metricSpecs
            assert (ms.targetSize, ms.targetSizeFloat) == (1, 1.0)
            assert ms.metricName.startswith("slurm-desired-nodes-") and target.partition in ms.metricName
            # KEDA asks GetMetrics with the spec's name (its "sN-" prefix removed): echoed back
            (mv,) = (await keda.metrics(meta, ms.metricName)).metricValues
            assert (mv.metricName, mv.metricValue, mv.metricValueFloat) == (ms.metricName, want, float(want))
            # the same target asked under another name (an older spec) keeps that name
            (other,) = (await keda.metrics(meta, "renamed")).metricValues
            assert (other.metricName, other.metricValue) == ("renamed", want)
            # no name asked: the spec's name
            (unnamed,) = (await keda.metrics(meta)).metricValues
            assert unnamed.metricName == ms.metricName
    assert seen_active == {True, False}  # the table covers both answers
    # the hand-computed figures of tests/unit/test_demand.py, through gRPC
    async with connect(scaler.port) as keda:
        (cpu,) = (await keda.metrics({"partition": "cpu", "max": "10"})).metricValues
        (cpu2,) = (await keda.metrics({"partition": "cpu", "max": "2"})).metricValues
    assert (cpu.metricValue, cpu2.metricValue) == (6, 3)  # 3 busy + 3 needed; max 2 floored at busy 3
    # a partition Slurm does not have is a metadata error (no target, no series), not a quiet 0
    async with connect(scaler.port) as keda:
        for meta in ({"partition": "nosuch"}, {"partition": "nosuch", "min": "1"}):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await keda.is_active(meta)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "'partition'" in (err.value.details() or "") and "nosuch" in (err.value.details() or "")
    assert all(t.partition != "nosuch" for t in scaler.service.targets)


async def test_metric_name_from_metadata(scaler: Scaler) -> None:
    await settle(scaler, synthetic([4], time.time()))
    meta = {"partition": "p", "metricName": "my-metric"}
    async with connect(scaler.port) as keda:
        (ms,) = (await keda.metric_spec(meta)).metricSpecs
        (mv,) = (await keda.metrics(meta)).metricValues
    assert ms.metricName == mv.metricName == "my-metric"
    assert mv.metricValue == 1


async def test_kedas_own_trigger_keys_are_accepted(scaler: Scaler) -> None:
    """KEDA sends the whole trigger metadata, its own keys included."""
    await settle(scaler, synthetic([8, 8, 8], time.time()))
    meta = {
        "partition": "p",
        "scalerAddress": "slurm-keda.slurm.svc:9342",
        "enableTLS": "true",
        "unsafeSsl": "false",
    }
    async with connect(scaler.port) as keda:
        assert await keda.is_active(meta) is True
        (mv,) = (await keda.metrics(meta)).metricValues
    assert mv.metricValue == 3


# --------------------------------------------------------------------------------- errors


BAD_METADATA = [
    pytest.param({"max": "3"}, "partition", id="missing-partition"),
    pytest.param({"partition": "p", "min": "abc"}, "min", id="min-not-integer"),
    pytest.param({"partiton": "p"}, "partiton", id="unknown-key-typo"),
    pytest.param({"partition": "p", "min": "3", "max": "2"}, "max", id="max-below-min"),
    pytest.param({"partition": "p", "metricName": "m" * 1_000_000}, "metricName", id="metric-name-1MB"),
    pytest.param({"partition": "p", "metricName": "Bad Name!/x"}, "metricName", id="metric-name-chars"),
    pytest.param({"partition": "p", "metricName": ".."}, "metricName", id="metric-name-dotdot"),
]


@pytest.mark.parametrize(("meta", "key"), BAD_METADATA)
async def test_bad_metadata_is_invalid_argument_naming_the_key(
    scaler: Scaler, meta: dict[str, str], key: str
) -> None:
    await settle(scaler, synthetic([1], time.time()))
    async with connect(scaler.port) as keda:
        calls = {
            "IsActive": keda.is_active(meta),
            "GetMetricSpec": keda.metric_spec(meta),
            "GetMetrics": keda.metrics(meta, "m"),
            "StreamIsActive": next_message(keda.stream_is_active(meta)),
        }
        for rpc, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, rpc
            details = e.value.details() or ""
            assert f"'{key}'" in details, (rpc, details)
            assert "slurm/slurm-cpu" in details  # which ScaledObject


async def test_a_bad_metric_name_from_keda_is_refused_not_echoed(scaler: Scaler) -> None:
    await settle(scaler, synthetic([1], time.time()))
    async with connect(scaler.port) as keda:
        for bad in ("x" * 300, "s0-a/b"):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await keda.metrics({"partition": "p"}, bad)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert len(e.value.details() or "") < 400
        (mv,) = (await keda.metrics({"partition": "p"}, "s0-slurm-desired-nodes-p")).metricValues
    assert mv.metricName == "s0-slurm-desired-nodes-p"


async def test_refused_calls_are_counted_and_logged_once_per_interval(
    scaler: Scaler, caplog: pytest.LogCaptureFixture
) -> None:
    """2,000 refused calls (a ScaledObject with a typo, retried in a loop): every one counted by code and
    reason, a handful of log lines — not one per call (28,107 lines in 12 s before)."""
    await settle(scaler, synthetic([1], time.time()))
    caplog.set_level("INFO", logger="autoscaler.grpc_scaler")
    n = 2000
    async with connect(scaler.port) as keda:

        async def refused(meta: dict[str, str]) -> None:
            with pytest.raises(grpc.aio.AioRpcError):
                await keda.is_active(meta)

        for i in range(0, n, 200):
            await asyncio.gather(*(refused({"partiton": "p"}) for _ in range(100)))
            await asyncio.gather(*(refused({"partition": f"nosuch{i}"}) for _ in range(100)))
    lines = [r for r in caplog.records if r.name == "autoscaler.grpc_scaler"]
    assert len(lines) <= 4, [r.getMessage() for r in lines]  # one per reason, the interval is 10 s
    assert {r.getMessage().split(": ")[2] for r in lines} >= {"metadata 'partiton'", "metadata 'partition'"}
    assert scaler.server.scaler.refused == {
        ("INVALID_ARGUMENT", "metadata"): n // 2,
        ("INVALID_ARGUMENT", "unknown_partition"): n // 2,
    }
    (fam,) = scaler.server.scaler.families()
    assert fam.name == "slurm_autoscaler_grpc_requests_refused"
    assert sum(s.value for s in fam.samples if s.name.endswith("_total")) == n


async def test_unavailable_before_the_first_snapshot_only(scaler: Scaler) -> None:
    meta = {"partition": "p"}
    async with connect(scaler.port) as keda:
        for call in (
            keda.is_active(meta),
            keda.metrics(meta, "m"),
            next_message(keda.stream_is_active(meta)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "snapshot" in (e.value.details() or "")
        # the spec needs no data: KEDA can create the HPA while the first poll runs
        (ms,) = (await keda.metric_spec(meta)).metricSpecs
        assert ms.targetSize == 1
        await settle(scaler, synthetic([8], time.time()))
        assert await keda.is_active(meta) is True


async def test_stale_snapshot_answers_the_held_value() -> None:
    """slurmrestd has been failing for an hour: the last data is served, not zero, not an error."""
    t0 = time.time() - 3600
    async with running_scaler(stale_after=60.0) as s:
        await settle(s, synthetic([8, 8], t0))
        target = Target("p", "p")
        assert s.service.answer(target).stale  # the scenario really is stale
        async with connect(s.port) as keda:
            assert await keda.is_active({"partition": "p"}) is True
            (mv,) = (await keda.metrics({"partition": "p"}, "m")).metricValues
            assert mv.metricValue == 2
            # a newer poll that got neither jobs nor nodes does not replace the held data
            empty = Snapshot(taken_at=time.time(), api_version="v0.0.45", fetched_at={"diag": time.time()})
            s.source.put(empty)
            await asyncio.sleep(0.05)
            (mv,) = (await keda.metrics({"partition": "p"}, "m")).metricValues
            assert mv.metricValue == 2


async def test_stream_metric_spec_is_unimplemented(scaler: Scaler) -> None:
    """KEDA treats UNIMPLEMENTED as "no pushed specs" and keeps using GetMetricSpec."""
    async with connect(scaler.port) as keda:
        call = keda.stream_metric_spec({"partition": "p"})
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call.read()
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    "wire",
    [b"\xff\xff\xff not protobuf", b"\x0a\x02\xff\xfe"],  # garbage; a string field that is not UTF-8
    ids=["garbage", "bad-utf8"],
)
@pytest.mark.parametrize("method", ["IsActive", "GetMetricSpec", "GetMetrics", "StreamIsActive"])
async def test_undecodable_requests_are_invalid_argument(scaler: Scaler, method: str, wire: bytes) -> None:
    # gRPC answers UNKNOWN, quoting a Python exception, when the request deserializer raises
    path = f"/{SERVICE_NAME}/{method}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            if method == "StreamIsActive":
                await channel.unary_stream(path)(wire).read()
            else:
                await channel.unary_unary(path)(wire)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request is not a valid externalscaler." in (e.value.details() or "")


# --------------------------------------------------------------------------------- push stream


async def test_stream_pushes_initial_state_then_changes_of_activity_only(scaler: Scaler) -> None:
    meta = {"partition": "p"}
    t = time.time()
    await settle(scaler, synthetic([], t))
    async with connect(scaler.port) as keda:
        call = keda.stream_is_active(meta)
        assert await next_message(call) is False  # the current state, at once
        await settle(scaler, synthetic([8], t + 1))  # desired 0 → 1: active
        assert await next_message(call) is True
        await settle(scaler, synthetic([8, 8], t + 2))  # desired 1 → 2: still active, no message
        (mv,) = (await keda.metrics(meta, "m")).metricValues
        assert mv.metricValue == 2  # the service did compute the new snapshot
        await settle(scaler, synthetic([4, 4], t + 3))  # desired 2 → 1: still active, no message
        await settle(scaler, synthetic([], t + 4))  # → 0: inactive
        # the next message is the change to inactive: no message came for the unchanged activity
        assert await next_message(call) is False
        with pytest.raises(asyncio.TimeoutError):
            await next_message(call, timeout=0.3)
        assert scaler.server.scaler.streams == 1
        call.cancel()
        # the server sees the cancel and its handler ends
        await eventually(lambda: scaler.server.scaler.streams == 0, 2.0, "the stream handler's end", 0.01)


async def test_streams_end_cleanly_when_the_server_stops() -> None:
    async with running_scaler() as s:
        await settle(s, synthetic([8], time.time()))
        async with connect(s.port) as keda:
            calls = [keda.stream_is_active({"partition": "p"}) for _ in range(3)]
            for call in calls:
                assert await next_message(call) is True
            t0 = time.monotonic()
            await s.server.stop(grace=5.0)
            took = time.monotonic() - t0
            for call in calls:
                assert await asyncio.wait_for(call.read(), TIMEOUT) is EOF
                assert await call.code() == grpc.StatusCode.OK  # KEDA reconnects after an EOF
    assert took < 2.0  # the streams ended at once, not after the grace period
    assert s.server.scaler.streams == 0


async def test_port_in_use_is_an_error(scaler: Scaler) -> None:
    with pytest.raises(RuntimeError, match=f"cannot listen on 127.0.0.1:{scaler.port}"):
        await start_grpc_server(scaler.service, f"127.0.0.1:{scaler.port}", tls=None)


# ------------------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    if not have_openssl():
        pytest.skip("no openssl CLI to make test certificates")
    return make_pki(tmp_path_factory.mktemp("grpc-pki"))


def client_creds(ca: Path, cert: tuple[bytes, bytes] | None = None) -> grpc.ChannelCredentials:
    chain, key = cert if cert is not None else (None, None)
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(), private_key=key, certificate_chain=chain
    )


async def refused(port: int, creds: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    async with connect(port, creds) as keda:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await keda.is_active({"partition": "p"})
    return e.value.code()


async def test_tls(pki: PKI) -> None:
    """KEDA's ``caCert`` = the CA of our certificate; a plaintext or wrong-CA client gets nowhere."""
    async with running_scaler(GrpcTLS(pki.server.crt, pki.server.key)) as s:
        await settle(s, synthetic([8], time.time()))
        async with connect(s.port, client_creds(pki.ca)) as keda:
            assert await keda.is_active({"partition": "p"}) is True
        assert await refused(s.port, None) == grpc.StatusCode.UNAVAILABLE
        assert await refused(s.port, client_creds(pki.ca2)) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_requires_a_client_certificate_from_the_ca(pki: PKI) -> None:
    """KEDA's ``tlsClientCert``/``tlsClientKey`` must be signed by our client CA."""
    async with running_scaler(GrpcTLS(pki.server.crt, pki.server.key, client_ca_file=pki.ca)) as s:
        await settle(s, synthetic([8], time.time()))
        async with connect(s.port, client_creds(pki.ca, pki.client.read())) as keda:
            assert await keda.is_active({"partition": "p"}) is True
            call = keda.stream_is_active({"partition": "p"})
            assert await next_message(call) is True
            call.cancel()
        assert await refused(s.port, client_creds(pki.ca)) == grpc.StatusCode.UNAVAILABLE  # no cert
        assert await refused(s.port, client_creds(pki.ca, pki.rogue.read())) == grpc.StatusCode.UNAVAILABLE
        assert await refused(s.port, None) == grpc.StatusCode.UNAVAILABLE


async def test_rotated_certificate_is_served_to_new_connections(pki: PKI, tmp_path: Path) -> None:
    """A rotated Secret (new files in place) is used without a restart; a half-written one is not."""
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server.crt, crt)
    shutil.copy(pki.server.key, key)
    async with running_scaler(GrpcTLS(crt, key)) as s:
        await settle(s, synthetic([8], time.time()))
        async with connect(s.port, client_creds(pki.ca)) as keda:
            assert await keda.is_active({"partition": "p"}) is True
        assert await refused(s.port, client_creds(pki.ca2)) == grpc.StatusCode.UNAVAILABLE
        # half a rotation: the new certificate with the old key → not used, the old one stays
        shutil.copy(pki.server2.crt, crt)
        os.utime(crt, ns=(time.time_ns(), time.time_ns() + 1_000_000))
        async with connect(s.port, client_creds(pki.ca)) as keda:
            assert await keda.is_active({"partition": "p"}) is True
        # the rotation completes: new connections get the certificate of the new CA
        shutil.copy(pki.server2.key, key)
        async with connect(s.port, client_creds(pki.ca2)) as keda:
            assert await keda.is_active({"partition": "p"}) is True
        assert await refused(s.port, client_creds(pki.ca)) == grpc.StatusCode.UNAVAILABLE
        assert s.server.reloader is not None and s.server.reloader.reloads == 1


def test_unusable_tls_files_fail_at_start(pki: PKI, tmp_path: Path) -> None:
    with pytest.raises(GrpcTLSError, match=r"cannot use certificate .*server\.crt with key .*client\.key"):
        GrpcTLS(pki.server.crt, pki.client.key).load()
    with pytest.raises(GrpcTLSError, match=r"cannot read .*nope\.crt"):
        GrpcTLS(tmp_path / "nope.crt", pki.server.key).load()
    bad = tmp_path / "bad-ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(GrpcTLSError, match=r"cannot use client CA .*bad-ca\.pem"):
        GrpcTLS(pki.server.crt, pki.server.key, client_ca_file=bad).load()


async def test_start_refuses_unusable_tls_files(pki: PKI) -> None:
    service = DemandService(SnapshotFeed())
    with pytest.raises(GrpcTLSError):
        await start_grpc_server(service, "127.0.0.1:0", tls=GrpcTLS(pki.server.crt, pki.client.key))
