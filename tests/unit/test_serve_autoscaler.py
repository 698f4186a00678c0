"""``serve`` with the autoscaler: demand families on /metrics, and the real console script serving
KEDA's external scaler protocol next to /metrics (a real gRPC client, a fake slurmrestd)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import grpc
import pytest
from freezegun import freeze_time

from autoscaler.grpc_scaler import start_grpc_server
from autoscaler.metrics import demand_families
from autoscaler.service import DemandService
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app, start
from exporter.session import SlurmSession
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.keda import connect
from testkit.paths import ROOT
from testkit.tools import eventually, free_port, promtool_path

DATA = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5"
SCRIPT = Path(sys.executable).parent / "slurm-keda"


def sample_plain(body: str, name: str) -> float | None:
    """The value of a label-less series."""
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def sample(body: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in body.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return None


async def test_demand_families_on_metrics_and_promtool_clean() -> None:
    async with serve(FakeSlurmrestd(DATA)) as url:
        client = SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="good-token"), retries=0))
        async with client:
            poller = Poller(SlurmSession(client), PollerConfig())
            demand = DemandService(poller)
            app = make_app(
                poller,
                extra_families=lambda s: demand_families(demand.demands_on(s), demand.label),
                extra_health=demand.health_families,
            )
            http_server = await start(app, "127.0.0.1", 0)
            try:
                await poller.poll_once()
                async with aiohttp.ClientSession() as http, http.get(http_server.urls[0] + "/metrics") as r:
                    body = await r.text()
            finally:
                await http_server.close()
    # the hand-computed cpu numbers of tests/unit/test_demand.py::test_recorded_2605_cpu_and_gpu
    assert sample(body, "slurm_autoscaler_desired_nodes", target="cpu", partition="cpu") == 6
    assert sample(body, "slurm_autoscaler_busy_nodes", target="cpu", partition="cpu") == 3
    assert sample(body, "slurm_autoscaler_needed_nodes", target="cpu", partition="cpu") == 3
    assert (
        sample(
            body, "slurm_autoscaler_pending_ignored_jobs", target="cpu", partition="cpu", reason="Dependency"
        )
        == 1
    )
    assert sample(body, "slurm_autoscaler_desired_nodes", target="gpu", partition="gpu") == 2
    assert re.search(r"^slurm_autoscaler_stale 0\.0$", body, re.M)  # fresh data, rendered per scrape
    out = subprocess.run(
        [promtool_path(), "check", "metrics"], input=body.encode(), capture_output=True, timeout=60
    )
    assert out.stdout + out.stderr == b"" and out.returncode == 0


@contextlib.asynccontextmanager
async def serve_process(url: str, *extra: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, int]]:
    http_port, grpc_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "serve",
        "--slurmrestd-url",
        url,
        "--jwt",
        "good-token",
        "--listen-address",
        "127.0.0.1",
        "--listen-port",
        str(http_port),
        "--grpc-listen",
        f"127.0.0.1:{grpc_port}",
        "--poll-interval",
        "1",
        *extra,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc, http_port, grpc_port
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")
async def test_console_script_serves_keda_and_metrics_from_one_snapshot() -> None:
    meta = {"partition": "cpu", "max": "10", "scalerAddress": "slurm-keda.slurm.svc:9342"}
    async with serve(FakeSlurmrestd(DATA)) as url, serve_process(url) as (proc, http_port, grpc_port):
        async with connect(grpc_port) as keda:
            await asyncio.wait_for(keda.channel.channel_ready(), 30)
            deadline = asyncio.get_running_loop().time() + 30
            while True:  # UNAVAILABLE until the first poll is in
                try:
                    active = await keda.is_active(meta)
                    break
                except grpc.aio.AioRpcError as e:
                    assert e.code() == grpc.StatusCode.UNAVAILABLE, e
                    assert asyncio.get_running_loop().time() < deadline, "no answer within 30 s"
                    await asyncio.sleep(0.2)
            assert active is True
            (ms,) = (await keda.metric_spec(meta)).metricSpecs
            assert (ms.metricName, ms.targetSize) == ("slurm-desired-nodes-cpu", 1)
            got = await keda.metrics(meta, ms.metricName)
            assert [(v.metricName, v.metricValue) for v in got.metricValues] == [
                ("slurm-desired-nodes-cpu", 6)
            ]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await keda.is_active({"partition": "cpu", "min": "x"})
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'min'" in (
                err.value.details() or ""
            )
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{http_port}/metrics") as r,
        ):
            body = await r.text()
        # the partition's default target keeps its series whether or not a poll since the gRPC ask rendered
        # the asked one (max 10: another definition, its own label — before, it took the default's place)
        assert sample(body, "slurm_autoscaler_desired_nodes", target="cpu", partition="cpu") == 6
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 15)
        assert proc.stderr is not None
        err_text = (await proc.stderr.read()).decode()
        assert code == 0, err_text
        assert "good-token" not in err_text


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")
@pytest.mark.parametrize("which", ["http", "grpc"])
def test_a_port_in_use_is_one_clear_line(which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        free = free_port()
        http, grpc_port = (busy, free) if which == "http" else (free, busy)
        argv = [
            str(SCRIPT),
            "serve",
            "--slurmrestd-url",
            "http://127.0.0.1:9",
            "--listen-address",
            "127.0.0.1",
        ]
        result = subprocess.run(
            [*argv, "--listen-port", str(http), "--grpc-listen", f"127.0.0.1:{grpc_port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    # one line, before anything claims to serve: no "serving on", no gRPC C-core lines
    assert len(lines) == 1 and str(busy) in lines[0] and lines[0].startswith("slurm-keda:"), result.stderr


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")
def test_one_port_for_http_and_grpc_is_refused_before_starting() -> None:
    port = free_port()
    result = subprocess.run(
        [str(SCRIPT), "serve", "--slurmrestd-url", "http://127.0.0.1:9", "--listen-port", str(port),
         "--grpc-listen", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"slurm-keda: --listen-port and --grpc-listen both name port {port}: each server needs a port"
    ]


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")
async def test_the_token_appears_in_no_log_metric_page_or_error() -> None:
    # serve at debug level while slurmrestd first refuses the token, then answers; every page, the
    # scrape, a gRPC error and the whole log are searched for the token
    fake = FakeSlurmrestd(DATA, token="rotated-elsewhere")  # refuses good-token: 401s, logged
    pages: list[str] = []
    async with serve(fake) as url, serve_process(url, "--log-level", "debug") as (proc, http_port, grpc_port):
        base = f"http://127.0.0.1:{http_port}"
        async with aiohttp.ClientSession() as http:

            async def until(path: str, done: Callable[[int, str], bool]) -> None:
                for _ in range(300):  # 30 s: serve starting, then polling every second
                    with contextlib.suppress(aiohttp.ClientConnectionError):
                        async with http.get(base + path) as r:
                            if done(r.status, await r.text()):
                                return
                    await asyncio.sleep(0.1)
                pytest.fail(f"{path} never got there")

            await until("/metrics", lambda _, body: 'kind="http_401"' in body)  # a refused poll counted
            fake.token = "good-token"
            await until("/readyz", lambda status, _: status == 200)  # a snapshot served
            for path in ("/metrics", "/", "/snapshot", "/readyz", "/healthz"):
                async with http.get(base + path) as r:
                    pages.append(await r.text())
        async with connect(grpc_port) as keda:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await keda.is_active({"partition": "cpu", "min": "x"})
            pages.append(err.value.details() or "")
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 15)
        assert proc.stderr is not None
        log_text = (await proc.stderr.read()).decode()
    assert "token refused" in log_text or "401" in log_text  # the refusals were logged ...
    for text in (log_text, *pages):
        assert "good-token" not in text  # ... without the token


async def test_one_timeline_in_frozen_wall_time() -> None:
    """Health, staleness and target expiry over 61 minutes of frozen wall-clock time, with every component
    on its default clock (time.time) and no sleeps: slurm_up goes 0 past --up-max-age, the demand is
    flagged stale (value held) past --demand-stale-after, fresh data clears both, and a target a scaler
    stopped asking about is forgotten after an hour."""
    asked = {"partition": "cpu", "max": "4"}
    # frozen at the real now: gRPC computes call deadlines from time.time() and checks them on the real clock,
    # so a frozen time in the past would fail every call at once (and one in the future pass by luck)
    with freeze_time(datetime.now(UTC), real_asyncio=True) as frozen:
        async with serve(FakeSlurmrestd(DATA)) as url:
            client = SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="good-token"), retries=0))
            async with client:
                poller = Poller(SlurmSession(client), PollerConfig(up_max_age=30.0))
                demand = DemandService(poller, stale_after=60.0, forget_after=3600.0)
                app = make_app(
                    poller,
                    extra_families=lambda s: demand_families(demand.demands_on(s), demand.label),
                    extra_health=demand.health_families,
                    status_lines=lambda now: [demand.status_line(now)],
                )
                http_server = await start(app, "127.0.0.1", 0)
                grpc_server = await start_grpc_server(demand, "127.0.0.1:0")
                base = http_server.urls[0]

                async def scrape(path: str = "/metrics") -> str:
                    async with aiohttp.ClientSession() as http, http.get(base + path) as r:
                        return await r.text()

                async def poll() -> None:
                    snap = await poller.poll_once()
                    assert snap is not None
                    await demand.refresh(snap)

                def asked_series(body: str) -> list[str]:
                    series = r'^slurm_autoscaler_desired_nodes\{partition="cpu",target="(cpu-\w+)"\}'
                    return re.findall(series, body, re.M)

                try:
                    await poll()
                    async with connect(grpc_server.port) as keda:
                        held = (await keda.metrics(asked)).metricValues[0].metricValue
                        body = await scrape()
                        assert sample_plain(body, "slurm_up") == 1
                        assert sample_plain(body, "slurm_autoscaler_stale") == 0
                        assert len(asked_series(body)) == 1  # the asked-for target is exported

                        frozen.tick(31)
                        body = await scrape()
                        assert sample_plain(body, "slurm_up") == 0  # data older than --up-max-age
                        assert sample_plain(body, "slurm_exporter_data_age_seconds") == 31
                        assert sample_plain(body, "slurm_autoscaler_stale") == 0

                        frozen.tick(30)
                        body = await scrape()
                        assert sample_plain(body, "slurm_autoscaler_stale") == 1
                        assert "HELD: older than 60 s" in await scrape("/")
                        assert (await keda.metrics(asked)).metricValues[0].metricValue == held

                    await poll()
                    body = await scrape()
                    assert sample_plain(body, "slurm_up") == 1
                    assert sample_plain(body, "slurm_autoscaler_stale") == 0

                    frozen.tick(3601)  # nobody asked about the ad-hoc target for an hour
                    await poll()
                    assert demand.targets == []

                    async def gone() -> bool:  # once the new snapshot's families are rendered
                        return asked_series(await scrape()) == []

                    await eventually(gone, 10.0, "the forgotten target's series to go")
                finally:
                    await grpc_server.stop(grace=1.0)
                    await http_server.close()
