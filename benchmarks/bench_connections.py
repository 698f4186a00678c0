"""What the HTTP connection cap costs and buys: ``slurm-keda serve`` (a child process, the lab's recorded
answers from an in-process slurmrestd stand-in) under many keep-alive scrapers, for several caps.

Per ``--http-max-connections``: the serve process's RSS with ``--idle`` kept-alive connections open (each
made one scrape), hence KiB per connection; the wall time for ``--scrapers`` concurrent keep-alive scrapers
(one connection each, one scrape each) to all be answered, beside ``--half-open`` connections that never
send a byte; how many were answered; the open descriptors at the end. The default cap is chosen from this
(docs/operations.md).

Run: ``.venv/bin/python benchmarks/bench_connections.py [--caps 256,512,1024,2048] [--scrapers 2000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hostile import DATA, free_port, stand_in

ROOT = Path(__file__).resolve().parents[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def scrape(http: aiohttp.ClientSession, url: str) -> int | str:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=120)) as r:
            await r.read()
            return r.status
    except (aiohttp.ClientError, TimeoutError) as e:
        return type(e).__name__


async def half_open(port: int, n: int) -> list[asyncio.StreamWriter]:
    out = []
    for _ in range(n):
        with contextlib.suppress(OSError):
            out.append((await asyncio.open_connection("127.0.0.1", port))[1])
    return out


async def one_cap(cap: int, args: argparse.Namespace, rest_port: int) -> str:
    port = free_port()
    env = {**os.environ, "SLURM_JWT": "x", "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "slurm_keda.cli", "serve", "--slurmrestd-url", f"http://127.0.0.1:{rest_port}",
        "--listen-address", "127.0.0.1", "--listen-port", str(port), "--poll-interval", "5",
        "--http-max-connections", str(cap), "--log-level", "error",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                if await scrape(http, url) == 200:
                    break
                await asyncio.sleep(0.1)
        base = rss_kib(proc.pid)
        idle = min(args.idle, cap)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            got = await asyncio.gather(*(scrape(http, url) for _ in range(idle)))
            await asyncio.sleep(0.5)
            per_conn = (rss_kib(proc.pid) - base) / max(1, got.count(200))
        cut = await half_open(port, args.half_open)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                t0 = time.perf_counter()
                results = await asyncio.gather(*(scrape(http, url) for _ in range(args.scrapers)))
                took = time.perf_counter() - t0
        finally:
            for w in cut:
                w.close()
        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        ok = results.count(200)
        if ok < len(results):
            print("  failures:", {r: results.count(r) for r in set(results) if r != 200})
        return (
            f"{cap:6d} {per_conn:9.1f} {took:8.2f} {ok:5d}/{args.scrapers:<5d} {fds:6d} "
            f"{rss_kib(proc.pid) / 1024:8.1f}"
        )
    finally:
        proc.terminate()
        await proc.wait()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", default="256,512,1024,2048")
    ap.add_argument("--scrapers", type=int, default=2000)
    ap.add_argument("--half-open", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=1000, help="kept-alive connections for the RSS figure")
    args = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    runner = web.AppRunner(stand_in((DATA / "v0.0.44" / "jobs.json").read_bytes(), []), access_log=None)
    await runner.setup()
    rest_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", rest_port).start()
    print(
        f"{args.scrapers} concurrent keep-alive scrapers beside {args.half_open} half-open connections; "
        f"RSS per kept-alive connection from {args.idle} of them"
    )
    print("   cap  KiB/conn  all in s  answered   fds  RSS MiB")
    try:
        for cap in (int(c) for c in args.caps.split(",")):
            print(await one_cap(cap, args, rest_port), flush=True)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
