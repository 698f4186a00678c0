"""Scrape latency of ``slurm-keda serve`` while slurmrestd sends hostile ``/jobs`` bodies.

A small slurmrestd stand-in (aiohttp, in this process) answers every endpoint with the lab's recorded 26.05
answers, except one, which answers: the recorded ``/jobs`` (the baseline, same run), 32 MB of nested arrays
in the first job, 32 MB of nested arrays as the array's element, 32 MB of ``[],`` in a job, 32 MB of ``[],``
in a node (``/nodes``). The real
``slurm-keda serve`` runs as a child process (``--poll-interval 1``: every second a poll downloads and
refuses the body) while this process scrapes ``/metrics`` one request after another for ``--seconds``,
timing each. Prints per body: polls done, scrapes, p50 / p99 / max scrape latency, and p99 ÷ the
baseline's p99.

``--tree DIR`` runs the serve of another checkout (e.g. ``git worktree add /tmp/old <rev>``) to compare.

Run: ``.venv/bin/python benchmarks/bench_hostile.py [--seconds 20] [--tree DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from testkit.tools import free_port  # noqa: E402

DATA = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5"
MB = 32 << 20
ENDPOINTS = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations")


def bodies() -> dict[str, tuple[str, bytes]]:
    """Name → (the endpoint answering it, the body)."""
    half = MB // 2
    nest, flat = b"[" * half + b"]" * half, b"[]," * (MB // 3)
    return {
        "recorded (baseline)": ("jobs", (DATA / "v0.0.44" / "jobs.json").read_bytes()),
        "32 MB nested in a job": ("jobs", b'{"jobs": [{"job_id": 1, "x": ' + nest + b"}]}"),
        "32 MB nested element": ("jobs", b'{"jobs": [' + nest + b"]}"),
        "32 MB of [], in a job": ("jobs", b'{"jobs": [{"job_id": 1, "x": [' + flat + b"[]]}]}"),
        "32 MB of [], in a node": ("nodes", b'{"nodes": [{"name": "x", "x": [' + flat + b"[]]}]}"),
    }


def stand_in(jobs: bytes, polls: list[float], hostile: str = "jobs") -> web.Application:
    """slurmrestd 26.05 as recorded, the ``hostile`` endpoint (``/jobs``) answering ``jobs``."""
    versions = ("v0.0.44", "v0.0.45")

    async def openapi(_: web.Request) -> web.Response:
        paths = {f"/slurm/{v}/{e}/": {"get": {}} for v in versions for e in ENDPOINTS}
        return web.json_response({"openapi": "3.0.2", "paths": paths})

    async def endpoint(request: web.Request) -> web.StreamResponse:
        name, version = request.match_info["endpoint"], request.match_info["version"]
        if name == hostile:
            polls.append(time.monotonic())
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(jobs)
            await resp.prepare(request)
            view = memoryview(jobs)
            for at in range(0, len(jobs), 1 << 20):
                await resp.write(view[at : at + (1 << 20)])
            return resp
        path = DATA / version / f"{name}.json"
        if not path.exists():
            path = DATA / "v0.0.45" / f"{name}.json"
        return web.Response(body=path.read_bytes(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/openapi/v3", openapi)
    app.router.add_get(r"/slurm/{version}/{endpoint:[a-z]+}{slash:/?}", endpoint)
    return app


async def measure(tree: Path, endpoint: str, body: bytes, seconds: float) -> tuple[int, list[float]]:
    polls: list[float] = []
    runner = web.AppRunner(stand_in(body, polls, endpoint), access_log=None)
    await runner.setup()
    rest_port, port = free_port(), free_port()
    site = web.TCPSite(runner, "127.0.0.1", rest_port)
    await site.start()
    env = {**os.environ, "SLURM_JWT": "x", "PYTHONPATH": str(tree)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "slurm_keda.cli", "serve", "--slurmrestd-url", f"http://127.0.0.1:{rest_port}",
        "--listen-address", "127.0.0.1", "--listen-port", str(port), "--poll-interval", "1",
        "--retries", "0", "--log-level", "error",
        cwd=tree, env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    latencies: list[float] = []
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/metrics"
            for _ in range(200):  # until it serves
                try:
                    async with http.get(url) as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            first_poll = len(polls)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                t0 = time.perf_counter()
                async with http.get(url) as r:
                    await r.read()
                latencies.append(time.perf_counter() - t0)
        return len(polls) - first_poll, latencies
    finally:
        proc.terminate()
        await proc.wait()
        await runner.cleanup()


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose serve runs (default: this one)")
    args = ap.parse_args()
    print(f"serve from {args.tree}; {args.seconds:g} s of back-to-back scrapes per body; poll interval 1 s")
    head = ("/jobs body", "polls", "scrapes", "p50 ms", "p99 ms", "max ms", "p99/base")
    print(f"{head[0]:24} {head[1]:>5} {head[2]:>7} {head[3]:>7} {head[4]:>7} {head[5]:>7} {head[6]:>8}")
    base: float | None = None
    for name, (endpoint, body) in bodies().items():
        polls, lat = await measure(args.tree.resolve(), endpoint, body, args.seconds)
        p50, p99, top = pct(lat, 50) * 1000, pct(lat, 99) * 1000, max(lat) * 1000
        base = base or p99
        print(f"{name:24} {polls:5d} {len(lat):7d} {p50:7.1f} {p99:7.1f} {top:7.1f} {p99 / base:8.2f}")
    print("goal: p99 <= 50 ms whatever slurmrestd sends")


if __name__ == "__main__":
    asyncio.run(main())
