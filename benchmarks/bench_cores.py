"""How msgspec decoding of /jobs batches scales over worker processes on this machine.

msgspec holds the GIL, so only processes could spread decoding over cores. This measures one
recorded v0.0.45 batch (~2 MB) decoded repeatedly by 1 and by 2 worker processes: wall MB/s, and
each worker's own MB/s. On the 2-vCPU machines here two workers gave ~1.15x one worker (each
worker slowed from ~470 to ~280 MB/s), which is why slurm-keda decodes in-process.

Run: ``.venv/bin/python benchmarks/bench_cores.py``
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _work(batch: bytes) -> float:
    from exporter.versions import adapter_for

    t = time.perf_counter()
    adapter_for("v0.0.45").job_array(batch)
    return time.perf_counter() - t


def main() -> None:
    rec = sorted(ROOT.glob("tests/data/recorded/slurm-*/v0.0.45/jobs.json"))[-1]
    templates = json.loads(rec.read_bytes())["jobs"]
    batch = json.dumps([dict(templates[i % len(templates)], job_id=i) for i in range(220)], indent=2).encode()
    print(f"batch {len(batch) / 1e6:.1f} MB, 40 batches per run")
    for workers in (1, 2):
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
            list(ex.map(_work, [batch] * 4))
            t = time.perf_counter()
            own = list(ex.map(_work, [batch] * 40))
            wall = time.perf_counter() - t
        print(
            f"{workers} worker(s): wall {40 * len(batch) / wall / 1e6:.0f} MB/s, "
            f"per worker {len(batch) / (sum(own) / 40) / 1e6:.0f} MB/s"
        )


if __name__ == "__main__":
    main()
