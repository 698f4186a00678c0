"""Validation benchmark: what dropping impossible job records (``exporter/validate.py``) costs per poll,
against decoding the same jobs, measured in the same run.

Decodes a /jobs body of ``--jobs`` cloned records (built as ``bench_decode.py`` builds them) once, then
times, best of ``--repeat``: the decode itself (the poller's streaming path, 256 KiB chunks), ``check_jobs``
on all-valid jobs (the poller's path: one comprehension, nothing dropped), ``check_jobs`` with 1 % impossible
records (the full per-record check runs), and ``keep_valid(job_problem)`` (the full check on every job).

Run: ``.venv/bin/python benchmarks/bench_validate.py [--jobs 100000] [--version v0.0.45]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 256 << 10
sys.path.insert(0, str(ROOT))

from benchmarks.bench_decode import build_body  # noqa: E402
from exporter.jsonsplit import StreamingArrayDecoder  # noqa: E402
from exporter.model import Job  # noqa: E402
from exporter.validate import check_jobs, job_problem, keep_valid  # noqa: E402
from exporter.versions import adapter_for  # noqa: E402


def best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--version", default="v0.0.45")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    adapter = adapter_for(args.version)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.json"
        build_body(args.version, args.jobs, path)
        body = path.read_bytes()

    def decode() -> list[Job]:
        dec = StreamingArrayDecoder(b"jobs", adapter.job_array)
        out: list[Job] = []
        for at in range(0, len(body), CHUNK):
            out += dec.feed(body[at : at + CHUNK])
        return out + dec.finish()[1]

    jobs = decode()
    assert len(jobs) == args.jobs
    bad = list(jobs)
    for i in range(0, len(bad), 100):
        bad[i] = msgspec.structs.replace(bad[i], cpus=-9)

    rows = [
        ("decode /jobs (baseline)", best(decode, args.repeat)),
        ("check_jobs, all valid", best(lambda: check_jobs(jobs), args.repeat)),
        ("check_jobs, 1 % impossible", best(lambda: check_jobs(bad), args.repeat)),
        ("keep_valid(job_problem), all", best(lambda: keep_valid(jobs, job_problem), args.repeat)),
    ]
    base = rows[0][1]
    print(f"{args.jobs} jobs of {args.version} ({len(body) / 1e6:.0f} MB); best of {args.repeat}")
    print(f"{'step':32} {'ms':>8} {'us/job':>8} {'% of decode':>12}")
    for name, seconds in rows:
        per_job = seconds * 1e6 / args.jobs
        print(f"{name:32} {seconds * 1e3:8.1f} {per_job:8.2f} {100 * seconds / base:11.1f}%")


if __name__ == "__main__":
    main()
