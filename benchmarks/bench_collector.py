"""Collector cost on a synthetic 100k-job / 5k-node snapshot: job aggregation, all families, and a
full ``generate_latest`` render with the default and the cardinality flags.

The snapshot: 10 partitions, 60% pending jobs (5% of them arrays of 100 tasks, 10% naming two
partitions, 10% whole-node memory), 2000 users, 200 accounts; 5000 nodes in 10 partitions.
Prints min and median over repeated runs (the machines here are shared: the median moves with load).

Run: ``.venv/bin/python benchmarks/bench_collector.py``
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import collector
from exporter.aggregate import aggregate_jobs
from exporter.model import MIB, Job, Node, Partition, Snapshot
from exporter.pollstate import PollStatus


def synthetic(jobs: int = 100_000, nodes: int = 5000, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    parts = [f"p{i}" for i in range(10)]
    node_list = tuple(
        Node(
            name=f"n{i:05d}",
            state=rng.choice(["IDLE", "MIXED", "ALLOCATED", "DOWN"]),
            flags=rng.choice([(), (), ("DRAIN",), ("CLOUD", "POWERED_DOWN")]),
            cpus=64,
            alloc_cpus=rng.randint(0, 64),
            effective_cpus=64,
            memory_bytes=256_000 * MIB,
            alloc_memory_bytes=rng.randint(0, 256_000) * MIB,
            free_memory_bytes=1000 * MIB,
            gpus=rng.choice([0, 4]),
            partitions=(parts[i % 10],),
            reason=rng.choice(["", "", "", "bad disk"]),
        )
        for i in range(nodes)
    )
    reasons = ["Resources", "Priority", "Dependency", "JobHeldUser", "QOSMaxCpuPerUserLimit"]
    job_list = []
    for i in range(jobs):
        pend = rng.random() < 0.6
        arr = pend and rng.random() < 0.05
        job_list.append(
            Job(
                job_id=i,
                state="PENDING" if pend else "RUNNING",
                reason=rng.choice(reasons) if pend else "None",
                partitions=tuple(rng.sample(parts, 2))
                if pend and rng.random() < 0.1
                else (rng.choice(parts),),
                user=f"u{rng.randrange(2000)}",
                account=f"a{rng.randrange(200)}",
                cpus=rng.choice([1, 2, 4, 8, 16]),
                min_nodes=rng.choice([1, 1, 1, 2]),
                memory_bytes=rng.choice([1000 * MIB, 4000 * MIB, 16000 * MIB]),
                whole_node_memory=rng.random() < 0.1,
                gpus=rng.choice([0, 0, 0, 1]),
                array_job_id=i if arr else None,
                array_task_string="1-100" if arr else "",
                array_pending_tasks=100 if arr else 0,
            )
        )
    return Snapshot(
        taken_at=time.time(),
        api_version="v0.0.45",
        jobs=tuple(job_list),
        nodes=node_list,
        partitions=tuple(Partition(name=p, total_cpus=32_000, total_nodes=500) for p in parts),
    )


class Exposition(Collector):
    """/metrics of one snapshot: the health block (an empty poller status), then the Slurm families."""

    def __init__(self, snap: Snapshot, flags: dict[str, Any]) -> None:
        self.snap, self.flags = snap, flags

    def collect(self) -> Iterable[Metric]:
        yield from collector.health_families(self.snap, PollStatus(), time.time())
        yield from collector.snapshot_families(self.snap, collector.Cardinality(**self.flags))


def timed(f: Callable[[], object], runs: int) -> str:
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        xs.append((time.perf_counter() - t) * 1000)
    return f"min {min(xs):7.1f} ms  median {statistics.median(xs):7.1f} ms"


def main() -> None:
    snap = synthetic()
    print(f"load average {os.getloadavg()[0]:.1f}; {len(snap.jobs)} job records, {len(snap.nodes)} nodes")
    print("aggregate_jobs, by partition        ", timed(lambda: aggregate_jobs(snap), 15))
    print(
        "aggregate_jobs, + account + user    ",
        timed(lambda: aggregate_jobs(snap, per_account=True, per_user=True), 7),
    )
    for flags in (
        {},
        {"per_node": False},
        {"per_user": True, "per_account": True, "node_reasons": True},
    ):
        reg = CollectorRegistry(auto_describe=False)
        reg.register(Exposition(snap, flags))
        size = len(generate_latest(reg)) / 1e6
        label = ",".join(f"{k}={v}" for k, v in flags.items()) or "defaults"
        print(
            f"generate_latest {label:<45}", timed(lambda reg=reg: generate_latest(reg), 5), f"{size:.2f} MB"
        )


if __name__ == "__main__":
    main()
