"""Log volume of ``slurm-keda serve`` under a flood of refused KEDA calls.

``serve`` runs as a child process with its gRPC scaler on, against the lab's recorded answers (an
in-process slurmrestd stand-in); this process makes ``--calls`` IsActive calls with bad metadata (a typo
key, an unknown partition, alternately), ``--concurrency`` at a time, through a real gRPC channel, then
prints how long they took, the log lines and bytes serve wrote meanwhile, lines per 10 s, and the refusal
counter on ``/metrics``.

Run: ``.venv/bin/python benchmarks/bench_refusals.py [--calls 10000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import time
from pathlib import Path

import aiohttp
import grpc
import grpc.aio
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hostile import DATA, free_port, stand_in

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoscaler._proto import externalscaler_pb2 as pb  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    runner = web.AppRunner(stand_in((DATA / "v0.0.44" / "jobs.json").read_bytes(), []), access_log=None)
    await runner.setup()
    rest_port, port, grpc_port = free_port(), free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", rest_port).start()
    env = {**os.environ, "SLURM_JWT": "x", "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "slurm_keda.cli", "serve", "--slurmrestd-url", f"http://127.0.0.1:{rest_port}",
        "--listen-address", "127.0.0.1", "--listen-port", str(port),
        "--grpc-listen", f"127.0.0.1:{grpc_port}",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[bytes] = []

    async def drain() -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            lines.append(line)

    reader = asyncio.create_task(drain())
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            before = len(lines)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                call = channel.unary_unary(
                    "/externalscaler.ExternalScaler/IsActive",
                    request_serializer=pb.ScaledObjectRef.SerializeToString,
                    response_deserializer=pb.IsActiveResponse.FromString,
                )

                async def refused(i: int) -> None:
                    meta = {"partiton": "cpu"} if i % 2 else {"partition": f"nosuch{i}"}
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        await call(pb.ScaledObjectRef(name="bad", namespace="ns", scalerMetadata=meta))

                t0 = time.perf_counter()
                for at in range(0, args.calls, args.concurrency):
                    await asyncio.gather(
                        *(refused(i) for i in range(at, min(args.calls, at + args.concurrency)))
                    )
                took = time.perf_counter() - t0
            await asyncio.sleep(0.5)
            logged = lines[before:]
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                body = await r.text()
        counted = sum(
            float(v)
            for v in re.findall(r"^slurm_autoscaler_grpc_requests_refused_total\{.*\} (\S+)$", body, re.M)
        )
        per10 = len(logged) / max(took, 1e-9) * 10
        print(f"{args.calls} refused calls in {took:.1f} s: {len(logged)} log lines, "
              f"{sum(len(x) for x in logged)} bytes, {per10:.1f} lines per 10 s; "
              f"slurm_autoscaler_grpc_requests_refused_total {counted:.0f}")  # fmt: skip
        for line in logged[:6]:
            print("  ", line.decode().rstrip()[:160])
    finally:
        proc.terminate()
        await proc.wait()
        reader.cancel()
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
