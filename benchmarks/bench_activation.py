"""Activation latency of the KEDA external-push path: a job is submitted → ``StreamIsActive`` says active.

On the 26.05 lab (root; ``python -m lab up --slurm 26.05`` is done if needed), which is **restarted fresh**
first (its demo and jobs are gone; the lab is left up): partition ``dyn`` has zero nodes. A real
``slurm-keda serve --poll-interval 1 --grpc-listen`` subprocess polls the lab's slurmrestd; a gRPC client
opens ``StreamIsActive`` for the dyn NodeSet exactly as KEDA's ``external-push`` trigger does (the metadata
of ``tests/live/test_autoscale_live.py``). Then, N times: wait a random 0–1 s (so submissions fall at
every phase of the 1 s polling), submit one 1-CPU job to ``dyn`` (``sbatch`` inside the lab), take the
time the stream says active, cancel the job and wait for the stream to say inactive.

Printed per submission and as p50/p90/min/max:

* ``active``: sbatch started → the pushed ``active`` message arrived (the figure; target p50 ≤ 1.5 s);
* ``visible`` (baseline, same run): sbatch started → the job is listed by slurmrestd, probed with
  ``GET /slurm/<version>/job/<id>`` every 50 ms — the floor for any scaler that reads slurmrestd;
* ``sbatch``: how long the submission itself took.

``active − visible`` is what the scaler adds: waiting for its next poll (0–1 s, 0.5 s on average), the poll
itself, the demand computation and the push.

Run (root): ``.venv/bin/python benchmarks/bench_activation.py [--submissions 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import grpc.aio
from aiohttp import ClientSession, ClientTimeout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

from lab import Lab
from testkit.scale_harness import SCALER_METADATA, ScalerFeed, ScalerProcess

TARGET_P50 = 1.5
PROBE_INTERVAL = 0.05
TIMEOUT = 30.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def next_push(stream: AsyncGenerator[bool, None], want: bool) -> float:
    """The time of the next pushed message equal to ``want`` (earlier other values are skipped)."""
    while True:
        got = await asyncio.wait_for(anext(stream), TIMEOUT)
        if got is want:
            return time.monotonic()


async def visible(http: ClientSession, lab: Lab, version: str, job_id: int) -> float:
    """When slurmrestd first lists the job (probed every PROBE_INTERVAL s)."""
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": lab.read_token()}
    url = f"{lab.url}/slurm/{version}/job/{job_id}"
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        async with http.get(url, headers=headers) as resp:
            if resp.status == 200 and (await resp.json()).get("jobs"):
                return time.monotonic()
        await asyncio.sleep(PROBE_INTERVAL)
    raise TimeoutError(f"job {job_id} never listed by slurmrestd")


async def one(
    lab: Lab, stream: AsyncGenerator[bool, None], http: ClientSession, version: str, i: int
) -> tuple[float, float, float]:
    await asyncio.sleep(random.uniform(0.0, 1.0))
    started = time.monotonic()
    sbatch = asyncio.create_task(
        asyncio.to_thread(
            lab.sbatch, "-p", "dyn", "-c1", "--mem=100", "-J", f"bench-act-{i}", command="sleep 600"
        )
    )
    active = asyncio.create_task(next_push(stream, True))
    job_id = await sbatch
    submitted = time.monotonic()
    seen = await visible(http, lab, version, job_id)
    t_active = await active
    await asyncio.to_thread(lab.run, ["scancel", str(job_id)])
    await next_push(stream, False)
    return t_active - started, seen - started, submitted - started


async def run(args: argparse.Namespace) -> int:
    lab = Lab("26.05")
    lab.up()
    lab.restart()
    version = lab.api_versions()[-1]
    print(
        f"lab 26.05: Slurm {lab.release()}, slurmrestd {version}; serve --poll-interval {args.poll_interval}"
    )
    log = Path(tempfile.mkdtemp(prefix="bench-activation-")) / "serve.log"
    rows: list[tuple[float, float, float]] = []
    async with (
        ScalerProcess(lab, log, poll_interval=args.poll_interval) as scaler,
        grpc.aio.insecure_channel(scaler.grpc_address) as channel,
        ClientSession(timeout=ClientTimeout(total=10)) as http,
    ):
        feed = ScalerFeed(channel, SCALER_METADATA, "bench")
        stream = feed.pushes()
        try:
            first = await asyncio.wait_for(anext(stream), TIMEOUT)
            assert first is False, "the dyn target is active before any job was submitted"
            print(f"{'#':>3} {'active s':>9} {'visible s':>10} {'sbatch s':>9}")
            for i in range(args.submissions):
                row = await one(lab, stream, http, version, i)
                rows.append(row)
                print(f"{i + 1:>3} {row[0]:>9.3f} {row[1]:>10.3f} {row[2]:>9.3f}", flush=True)
        finally:
            await stream.aclose()
    print()
    print(f"{'':<28} {'p50':>7} {'p90':>7} {'min':>7} {'max':>7} {'mean':>7}")
    for name, col in (("submit → pushed active", 0), ("submit → slurmrestd lists", 1), ("sbatch", 2)):
        values = [r[col] for r in rows]
        print(
            f"{name:<28} {pct(values, 50):>7.3f} {pct(values, 90):>7.3f} {min(values):>7.3f} "
            f"{max(values):>7.3f} {statistics.fmean(values):>7.3f}"
        )
    p50 = pct([r[0] for r in rows], 50)
    overhead = pct([r[0] - r[1] for r in rows], 50)
    verdict = "meets" if p50 <= TARGET_P50 else "MISSES"
    print(f"\nactivation p50 {p50:.3f} s {verdict} the target (≤ {TARGET_P50} s)")
    print(f"the scaler adds p50 {overhead:.3f} s to the job being listed by slurmrestd")
    return 0 if p50 <= TARGET_P50 else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--submissions", type=int, default=20)
    p.add_argument("--poll-interval", type=float, default=1.0)
    raise SystemExit(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
