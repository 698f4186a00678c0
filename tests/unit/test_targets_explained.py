"""The project explains its scaling decisions (issue 41, item 1): the status page says, per target, what it
asks for and why, ``/targets`` says the same as JSON, and ``slurm-keda explain`` prints it for one target.

``slurm-keda serve`` runs as its console script over a fake slurmrestd serving the recorded 26.05 lab (the
cpu target: 3 busy + 3 needed, 2 pending jobs counted and 22 not — 18 waiting on their array's task limit);
KEDA's gRPC client asks for one target; ``slurm-keda explain`` runs through ``cli.main`` in the test's
process.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.keda import connect
from testkit.paths import RECORDED
from testkit.serve_process import run_command
from testkit.tools import free_port

SCRIPT = Path(sys.executable).parent / "slurm-keda"
DATA = RECORDED / "slurm-26.05.5"
pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)"),
    pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads"),
]
CPU = {"partition": "cpu"}
TARGETS = [
    "--target",
    "partition=cpu",
    "--target",
    "partition=dyn,nodeset=ns-dyn,cpusPerNode=8,memoryPerNode=16000",
]


async def _get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.text()


async def test_the_status_page_and_targets_say_why_each_target_asks_what_it_does() -> None:
    http, grpc = free_port(), free_port()
    async with serve(FakeSlurmrestd(DATA)) as url:
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            "serve",
            *("--slurmrestd-url", url, "--jwt", "good-token", "--listen-address", "127.0.0.1"),
            *("--listen-port", str(http), "--grpc-listen", f"127.0.0.1:{grpc}", *TARGETS),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            reports: list[dict[str, Any]] = []
            deadline = time.monotonic() + 20
            # until the demand service has taken the first snapshot (before, "desired since" is not known)
            while time.monotonic() < deadline and not (reports and all(r["changed_at"] for r in reports)):
                try:
                    status, body = await _get(http, "/targets")
                    reports = json.loads(body) if status == 200 else []
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            by_name = {r["target"]: r for r in reports}
            assert set(by_name) == {"cpu", "ns-dyn"}, reports
            cpu = by_name["cpu"]
            assert (cpu["desired"], cpu["busy"], cpu["needed"], cpu["nodes"]) == (6, 3, 3, 3)
            assert cpu["state"] == "ok" and cpu["why"] == "" and cpu["source"] == "configured"
            assert cpu["pending_counted"] == 2 and cpu["pending_not_counted"]["JobArrayTaskLimit"] == 18
            assert next(iter(cpu["pending_not_counted"])) == "JobArrayTaskLimit"  # the largest first
            assert cpu["changed_at"] is not None and cpu["asked_at"] is None
            assert cpu["explanation"][0] == "desired 6 = clamp(busy 3 + needed 3, min 0, max ∞)"
            dyn = by_name["ns-dyn"]
            assert dyn["nodeset"] == "ns-dyn" and dyn["desired"] == 1 and dyn["pending_counted"] == 1
            async with connect(grpc) as keda:
                answer = await keda.metrics(CPU)
            assert answer.metricValues[0].metricValue == 6
            _, page = await _get(http, "/")
            _, body = await _get(http, "/targets")
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
    assert (
        "target cpu (partition cpu, configured): desires 6 nodes = 3 busy + 3 needed (3 in Slurm); pending: "
        "2 counted, 22 not (18 JobArrayTaskLimit, " in page
    )
    assert "KEDA asked 0 s ago" in page and "KEDA never asked" in page  # cpu asked, ns-dyn not
    assert "target ns-dyn (partition dyn, NodeSet ns-dyn, configured): desires 1 nodes" in page
    assert 'href="/targets"' in page
    assert next(r for r in json.loads(body) if r["target"] == "cpu")["asked_at"] is not None


async def run_explain(url: str, *args: str) -> tuple[int, str, str]:
    argv = ["explain", "--slurmrestd-url", url, "--jwt", "good-token", "--retries", "0", *args]
    return await run_command(argv)


async def test_explain_prints_one_target_in_words() -> None:
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, out, err = await run_explain(url, *TARGETS, "ns-dyn")
        missing = await run_explain(url, *TARGETS, "nope")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        "target ns-dyn (partition dyn, NodeSet ns-dyn, configured): desires 1 nodes = 0 busy + 1 needed "
        "(0 in Slurm); pending: 1 counted"
    )
    assert "  desired 1 = clamp(busy 0 + needed 1, min 0, max ∞)" in lines
    assert not any(line.startswith("target cpu") for line in lines)
    assert missing[0] == 2 and "no target named 'nope' (targets: cpu, ns-dyn)" in missing[2]
