"""Decode benchmark: streamed /jobs → snapshot, against json.loads and orjson.loads of the same bytes.

Big /jobs bodies (10k, 50k, 100k jobs) are built by cloning the lab's recorded job records of each
API version and varying ids, users, partitions and times, in slurmrestd's own indented layout; they
are written to a temporary directory, never held in the measuring process. Every measurement runs
in a fresh child process so that its peak RSS is its own.

Prints, per version and size: body MB, decode+snapshot MB/s and µs/job (the poller's streaming
path), peak RSS of that process, json.loads and orjson.loads MB/s of the same bytes, and the ratio
to orjson. Also: how late a 100 ms tick task runs while a 100k-job body is decoded. Best of
``--repeat`` runs (this kind of VM is noisy).

Run: ``.venv/bin/python benchmarks/bench_decode.py [--sizes 10000,50000,100000] [--versions v0.0.45]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "recorded"
CHUNK = 256 << 10


def recorded_jobs_file(version: str) -> Path:
    found = sorted(RECORDED.glob(f"slurm-*/{version}/jobs.json"))
    if not found:
        sys.exit(f"no recorded jobs.json for {version} under {RECORDED}")
    return found[-1]


def build_body(version: str, n_jobs: int, out: Path) -> int:
    """Write a /jobs body of ``n_jobs`` cloned records (indent 2, like slurmrestd); return bytes."""
    doc = json.loads(recorded_jobs_file(version).read_bytes())
    templates = doc["jobs"]
    users = [f"user{i:03d}" for i in range(200)]
    with out.open("wb") as f:
        f.write(b'{\n  "jobs": [\n')
        for i in range(n_jobs):
            job = dict(templates[i % len(templates)])
            job["job_id"] = 1000 + i
            job["user_name"] = users[i % len(users)]
            job["name"] = f"job-{i}"
            text = json.dumps(job, indent=2)
            f.write(("    " + text.replace("\n", "\n    ")).encode())
            f.write(b",\n" if i + 1 < n_jobs else b"\n")
        f.write(b"  ],\n")
        rest = {k: v for k, v in doc.items() if k != "jobs"}
        f.write(json.dumps(rest, indent=2)[1:].encode())
    return out.stat().st_size


# -- child-process measurements ------------------------------------------------------------------

CHILD = r"""
import asyncio, json, resource, sys, time
sys.path.insert(0, {root!r})
mode, version, path = sys.argv[1], sys.argv[2], sys.argv[3]
CHUNK = {chunk}

def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def chunks_sync():
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            yield b

async def chunks_async():
    for b in chunks_sync():
        yield b
        await asyncio.sleep(0)

def main():
    base = rss_mb()
    if mode in ("stream", "lateness"):
        from exporter.jsonsplit import StreamingArrayDecoder
        from exporter.model import Snapshot
        from exporter.versions import adapter_for
        adapter = adapter_for(version)
        async def run():
            lateness = []
            stop = asyncio.Event()
            async def ticker():
                nxt = time.perf_counter() + 0.1
                while not stop.is_set():
                    await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
                    lateness.append(time.perf_counter() - nxt)
                    nxt += 0.1
            tick = asyncio.create_task(ticker()) if mode == "lateness" else None
            t0 = time.perf_counter()
            # the poller's path: chunks as they arrive, batches decoded as soon as they are complete
            dec = StreamingArrayDecoder(b"jobs", adapter.job_array)
            jobs = []
            async for chunk in chunks_async():
                got = dec.feed(chunk)
                if got:
                    jobs += got
                    await asyncio.sleep(0)
            envelope, rest = dec.finish()
            jobs += rest
            env = adapter.envelope(envelope, "jobs")
            snap = Snapshot(taken_at=time.time(), api_version=version, slurm_version=env.slurm_version,
                            jobs=tuple(jobs))
            dt = time.perf_counter() - t0
            stop.set()
            if tick:
                await tick
            return dt, len(snap.jobs), lateness, dec.cutter.rewinds
        dt, n, lateness, rewinds = asyncio.run(run())
        out = dict(seconds=dt, jobs=n, rss_mb=rss_mb(), base_rss_mb=base, rewinds=rewinds)
        if lateness:
            out["max_late_ms"] = max(lateness) * 1000
            out["ticks"] = len(lateness)
    else:
        data = open(path, "rb").read()
        if mode == "orjson":
            import orjson
            t0 = time.perf_counter(); doc = orjson.loads(data); dt = time.perf_counter() - t0
        else:
            t0 = time.perf_counter(); doc = json.loads(data); dt = time.perf_counter() - t0
        out = dict(seconds=dt, jobs=len(doc["jobs"]), rss_mb=rss_mb(), base_rss_mb=base)
    print(json.dumps(out))

main()
"""


def measure(mode: str, version: str, path: Path) -> dict[str, float]:
    code = CHILD.format(root=str(ROOT), chunk=CHUNK)
    res = subprocess.run(
        [sys.executable, "-c", code, mode, version, str(path)], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise SystemExit(f"{mode} {version} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def best(mode: str, version: str, path: Path, repeat: int) -> dict[str, float]:
    runs = [measure(mode, version, path) for _ in range(repeat)]
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,50000,100000")
    ap.add_argument("--versions", default="v0.0.38,v0.0.41,v0.0.45")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json-max", type=int, default=50000, help="largest size to time json.loads on")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; best of {args.repeat}")
    header = (
        f"{'version':<8} {'jobs':>7} {'MB':>6} | {'MB/s':>5} {'us/job':>6} {'peak RSS MB':>11} | "
        f"{'orjson MB/s':>11} {'json MB/s':>9} | {'x orjson':>8}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="slurm-keda-bench-") as tmp:
        for version in args.versions.split(","):
            for n in sizes:
                body = Path(tmp) / f"jobs-{version}-{n}.json"
                mb = build_body(version, n, body) / 1e6
                s = best("stream", version, body, args.repeat)
                o = best("orjson", version, body, 1)
                j = best("json", version, body, 1) if n <= args.json_max else None
                assert s["jobs"] == o["jobs"] == n
                json_rate = f"{mb / j['seconds']:>9.0f}" if j else f"{'-':>9}"
                print(
                    f"{version:<8} {n:>7} {mb:>6.0f} | {mb / s['seconds']:>5.0f} "
                    f"{s['seconds'] / n * 1e6:>6.1f} "
                    f"{s['rss_mb']:>11.0f} | {mb / o['seconds']:>11.0f} {json_rate} | "
                    f"{o['seconds'] / s['seconds']:>8.1f}",
                    flush=True,
                )
                body.unlink()
        version = args.versions.split(",")[-1]
        n = max(sizes)
        body = Path(tmp) / "lateness.json"
        build_body(version, n, body)
        late = measure("lateness", version, body)
        print(
            f"\nevent loop: a 100 ms tick task while {n} {version} jobs are decoded: "
            f"max lateness {late['max_late_ms']:.1f} ms over {late['ticks']:.0f} ticks (target <= 50 ms)"
        )


if __name__ == "__main__":
    main()
