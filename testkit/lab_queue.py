"""A long queue in a lab, for the benchmarks at scale: held jobs submitted from inside the lab."""

from __future__ import annotations

import time

from lab import Lab


def count_jobs(lab: Lab, *args: str) -> int:
    """Jobs ``squeue`` lists with ``args``."""
    return len(lab.run(["squeue", "-h", "-o", "%i", *args], check=False).split())


def fill_held(lab: Lab, n: int, name: str, partition: str = "cpu") -> None:
    """Bring the lab to ``n`` held jobs named ``name`` (``sbatch -H`` in four loops inside the lab; those
    already there are kept)."""
    have = count_jobs(lab, "-n", name)
    if have >= n:
        print(f"queue: {have} held {name} jobs already there")
        return
    t = time.perf_counter()
    missing = n - have
    loops = 4
    script = " & ".join(
        f"(i=0; while [ $i -lt {missing // loops + (1 if k < missing % loops else 0)} ]; do"
        f" sbatch -H -p {partition} -J {name} -o /dev/null --wrap true >/dev/null || exit 1;"
        " i=$((i+1)); done)"
        for k in range(loops)
    )
    lab.run(["sh", "-c", script + " ; wait"], timeout=3600)
    took = time.perf_counter() - t
    print(f"queue: {count_jobs(lab, '-n', name)} held jobs ({missing} submitted in {took:.0f} s)")
