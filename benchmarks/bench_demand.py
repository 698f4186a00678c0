"""Demand model cost: ``compute_demand`` on synthetic 100k-pending-job / 5k-node snapshots.

Snapshots, built in-process (seeded, so every run measures the same thing):

* **realistic**: 5000 nodes (cpu 3000 × 64 CPUs/250 GiB, highmem 500 × 64/1000 GiB, gpu 500 × 32/500 GiB/4
  GPUs split by feature a100/h100, debug 200 × 16/62.5 GiB, cloud 800 mostly powered down; 60%
  ALLOCATED, 25% MIXED, rest IDLE or DOWN/DRAIN), 10 000 running jobs holding 1–4 nodes, and 100 000
  pending job records: ~87% from 60 templates of identical jobs (Priority/Resources/None), 300 array
  records (100–1000 tasks each, a third ``%N``-throttled), 3000 split-out pending array tasks, and 10%
  variety (CPUs 1–64, ``--mem``/``--mem-per-cpu``/whole-node memory, 1–4 nodes, GPUs, constraints,
  every kind of reason, 30% of cpu jobs also naming highmem).
* **heavy**: the same with 27% variety and 15 000 running jobs (thousands of distinct job kinds).
* **distinct**: the worst case for packing: 100 000 pending jobs on the cpu partition, every one of a
  different size (CPUs 1–64 × a distinct ``--mem``), 80% Resources (packed onto new nodes), 20% None
  (fresh: first tried on the free room of the MIXED nodes); same nodes.
* **distinct-multi**: like distinct, a third of the jobs spanning 2–4 nodes.

Every pending job has a priority of its own (1000–100 000, as multifactor priorities are), so identical
jobs differ in where Slurm takes them up (the model's order of kinds: a kind's highest priority).

Targets: one per partition, two GPU NodeSets by feature, the cloud partition with a configured shape.

Baseline, measured in the same run: one pass over the snapshot's jobs reading three fields (``state``,
``partitions``, ``cpus``) — the floor of any model that looks at every job once. ``compute_demand`` is
timed *cold* (its cache of running jobs' node lists cleared), *warm* (the node lists of running jobs
already read) and *a later poll* (each of N successive polls, :func:`next_poll`, with the
:class:`ScanCache` of the poll before: what the service pays per snapshot). Prints best-of-N and median
(the VM is shared: the median moves with load), the spread (max − best), the ratio to the baseline, and
whether the 100 ms target per poll (with the cache, best of N) is met.

Run: ``.venv/bin/python benchmarks/bench_demand.py [--runs 5]``; ``--against REV`` alternates this tree's
model with git revision REV's (its ``autoscaler`` package exported to a temporary directory as
``old_autoscaler``) run by run in one process, cold, and prints best and median of both and their ratios;
``--polls`` alternates successive polls with the cache and without it (and the first poll's cost);
``--start CHUNK`` computes a start without a listing (:func:`start`) against the same snapshot cold.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from autoscaler import demand
from autoscaler.demand import Demand, NodeShape, ScanCache, Target, compute_demand
from exporter.model import MIB, Job, License, Node, Snapshot

TARGET_MS = 100.0
GIB = 1024 * MIB

PARTS: dict[str, tuple[int, int, int, int]] = {
    # partition: (nodes, cpus, memory MiB, gpus)
    "cpu": (3000, 64, 256_000, 0),
    "highmem": (500, 64, 1_024_000, 0),
    "gpu": (500, 32, 512_000, 4),
    "debug": (200, 16, 64_000, 0),
    "cloud": (800, 64, 256_000, 0),
}

TARGETS = [
    Target("cpu", "cpu"),
    Target("highmem", "highmem"),
    Target("gpu-a100", "gpu", nodeset_feature="a100"),
    Target("gpu-h100", "gpu", nodeset_feature="h100"),
    Target("debug", "debug", max_nodes=200),
    Target("cloud", "cloud", max_nodes=800, shape=NodeShape(64, 256_000 * MIB)),
]

ELIGIBLE_REASONS = ["Priority"] * 6 + ["Resources"] * 3 + ["None"]
OTHER_REASONS = [
    "Dependency",
    "JobHeldUser",
    "BeginTime",
    "QOSMaxCpuPerUserLimit",
    "AssocGrpCPUMinutesLimit",
    "ReqNodeNotAvail, UnavailableNodes:n[00001-00002]",
    "PartitionConfig",
    "Licenses",
]


def build_nodes(rng: random.Random) -> tuple[list[Node], dict[str, list[str]]]:
    nodes: list[Node] = []
    names: dict[str, list[str]] = {}
    i = 0
    for part, (count, cpus, mem, gpus) in PARTS.items():
        names[part] = []
        for k in range(count):
            name = f"n{i:05d}"
            i += 1
            names[part].append(name)
            if part == "cloud":
                state, flags, alloc = "IDLE", ("CLOUD", "POWERED_DOWN"), 0
                if k < 100:
                    state, flags, alloc = "ALLOCATED", ("CLOUD",), cpus
            else:
                x = rng.random()
                if x < 0.60:
                    state, flags, alloc = "ALLOCATED", (), cpus
                elif x < 0.85:
                    state, flags, alloc = "MIXED", (), rng.randint(1, cpus - 1)
                elif x < 0.95:
                    state, flags, alloc = "IDLE", (), 0
                else:
                    state, flags = rng.choice([("DOWN", ("NOT_RESPONDING",)), ("IDLE", ("DRAIN",))])
                    alloc = 0
            feats = (("a100",) if k % 2 else ("h100",)) if part == "gpu" else ()
            nodes.append(
                Node(
                    name=name,
                    state=state,
                    flags=flags,
                    cpus=cpus,
                    effective_cpus=cpus,
                    alloc_cpus=alloc,
                    memory_bytes=mem * MIB,
                    alloc_memory_bytes=(mem * alloc // cpus) * MIB,
                    gpus=gpus,
                    gpus_used=min(gpus, alloc // 8),
                    partitions=(part,),
                    features=feats,
                    active_features=feats,
                )
            )
    return nodes, names


def running_jobs(rng: random.Random, names: dict[str, list[str]], count: int) -> list[Job]:
    out = []
    for i in range(count):
        part = rng.choice(["cpu", "cpu", "cpu", "highmem", "gpu", "debug"])
        pool = names[part]
        width = rng.choice([1, 1, 1, 1, 2, 4])
        start = rng.randrange(len(pool) - width)
        first, last = pool[start], pool[start + width - 1]
        expr = first if width == 1 else f"n[{first[1:]}-{last[1:]}]"
        arr = rng.random() < 0.1
        out.append(
            Job(
                job_id=10_000_000 + i,
                state="RUNNING",
                partitions=(part,),
                cpus=rng.choice([1, 4, 16, 64]),
                min_nodes=width,
                nodes=expr,
                array_job_id=rng.randrange(300) if arr else None,
                array_task_id=i if arr else None,
            )
        )
    return out


def realistic(
    seed: int = 1, pending: int = 100_000, running: int = 10_000, variety: float = 0.10
) -> Snapshot:
    rng = random.Random(seed)
    nodes, names = build_nodes(rng)
    jobs = running_jobs(rng, names, running)
    templates = []
    for _ in range(60):
        part = rng.choice(["cpu"] * 5 + ["highmem", "gpu", "debug", "cloud"])
        cpus = rng.choice([1, 1, 2, 4, 8, 16])
        templates.append(
            dict(
                partitions=(part,),
                reason=rng.choice(ELIGIBLE_REASONS),
                cpus=cpus,
                memory_per_cpu_bytes=rng.choice([2000, 4000]) * MIB,
                memory_bytes=cpus * 4000 * MIB,
                gpus_per_node=1 if part == "gpu" else 0,
                gpus=1 if part == "gpu" else 0,
                features=rng.choice(["a100", "h100"]) if part == "gpu" else "",
            )
        )
    job_id = 0
    n_sweep = pending - int(pending * variety) - 3300
    for _ in range(n_sweep):
        job_id += 1
        jobs.append(Job(job_id=job_id, state="PENDING", **rng.choice(templates)))  # type: ignore[arg-type]
    for a in range(300):
        job_id += 1
        tasks = rng.randint(100, 1000)
        jobs.append(
            Job(
                job_id=job_id,
                state="PENDING",
                reason=rng.choice(["Priority", "Resources", "JobArrayTaskLimit"]),
                partitions=("cpu",),
                cpus=rng.choice([1, 2, 4]),
                memory_per_node_bytes=4000 * MIB,
                array_job_id=a,
                array_task_string=f"{1000 - tasks}-999",
                array_pending_tasks=tasks,
                array_max_tasks=rng.randint(5, 50) if a % 3 == 0 else None,
            )
        )
    for t in range(3000):
        job_id += 1
        jobs.append(
            Job(
                job_id=job_id,
                state="PENDING",
                reason="Priority",
                partitions=("cpu",),
                cpus=2,
                memory_per_node_bytes=8000 * MIB,
                array_job_id=1000 + t // 100,
                array_task_id=t % 100,
            )
        )
    while len(jobs) < running + pending:
        job_id += 1
        part = rng.choice(["cpu", "cpu", "highmem", "gpu", "debug", "cloud"])
        parts = (part, "highmem") if part == "cpu" and rng.random() < 0.3 else (part,)
        cpus = rng.choice([1, 2, 4, 8, 16, 32, 64])
        mem = rng.random()
        gpu = part == "gpu"
        jobs.append(
            Job(
                job_id=job_id,
                state="PENDING",
                reason=rng.choice(ELIGIBLE_REASONS + OTHER_REASONS),
                partitions=parts,
                cpus=cpus,
                min_nodes=rng.choice([1, 1, 1, 1, 2, 4]),
                memory_per_node_bytes=rng.choice([1000, 4000, 16000, 64000]) * MIB if mem < 0.5 else None,
                memory_per_cpu_bytes=rng.choice([1000, 2000, 4000]) * MIB if 0.5 <= mem < 0.9 else None,
                whole_node_memory=mem >= 0.9,
                memory_bytes=cpus * 2000 * MIB,
                gpus_per_node=rng.choice([1, 2]) if gpu else 0,
                gpus=2 if gpu else 0,
                features=rng.choice(["a100", "h100", "a100|h100", ""]) if gpu else "",
                exclusive=rng.random() < 0.02,
            )
        )
    rng.shuffle(jobs)  # interleave the kinds
    jobs = with_priorities(jobs, seed)
    return Snapshot(taken_at=time.time(), api_version="v0.0.45", jobs=tuple(jobs), nodes=tuple(nodes))


def with_priorities(jobs: list[Job], seed: int) -> list[Job]:
    """The jobs, rebuilt in this order (a decoded snapshot allocates its records in the order it iterates
    them, each record's field values just before it: memory locality matters at 100k records), the
    pending ones with a multifactor-like priority of their own (fairshare, age, QOS weights), drawn from a
    generator of its own, so the snapshots are otherwise the same with or without priorities."""
    rng = random.Random(seed + 1000)
    return [
        msgspec.structs.replace(j, priority=rng.randint(1_000, 100_000))
        if j.state == "PENDING"
        else msgspec.structs.replace(j)
        for j in jobs
    ]


LICENSE_POOLS = (
    License(name="matlab", total=200, used=150, free=50),
    License(name="ansys", total=40, free=40),
)
"""Two license pools for ``distinct-licenses``: fewer free than the jobs ask for (most are held back)."""


def distinct(seed: int = 2, pending: int = 100_000, multi: bool = False, licensed: float = 0.0) -> Snapshot:
    """Every pending job a different shape: CPUs 1–64 and a distinct --mem (MiB); ``licensed``: the share
    of jobs that also ask for one of :data:`LICENSE_POOLS`' licenses (handed out in Slurm's order)."""
    rng = random.Random(seed)
    nodes, _ = build_nodes(rng)
    mems = rng.sample(range(100, 250_000), pending)
    names = [lic.name for lic in LICENSE_POOLS]
    jobs = [
        Job(
            job_id=i,
            state="PENDING",
            reason="None" if rng.random() < 0.2 else "Resources",
            partitions=("cpu",),
            cpus=rng.randint(1, 64),
            min_nodes=rng.randint(2, 4) if multi and rng.random() < 1 / 3 else 1,
            memory_per_node_bytes=mems[i] * MIB,
            licenses=f"{rng.choice(names)}:{rng.randint(1, 2)}" if rng.random() < licensed else "",
        )
        for i in range(pending)
    ]
    jobs = with_priorities(jobs, seed)
    return Snapshot(
        taken_at=time.time(),
        api_version="v0.0.45",
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        licenses=LICENSE_POOLS if licensed else (),
    )


def baseline(snap: Snapshot) -> None:
    n = 0
    for j in snap.jobs:
        if j.state == "PENDING" and j.partitions and j.cpus:
            n += 1


def measure(f: Callable[[], object], runs: int) -> list[float]:
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        xs.append((time.perf_counter() - t) * 1000)
    return xs


def fmt(xs: list[float]) -> str:
    best, med = min(xs), statistics.median(xs)
    return f"best {best:7.1f} ms  median {med:7.1f} ms  spread {max(xs) - best:6.1f} ms"


PENDING = 100_000
"""Pending job records of every snapshot (``--pending``)."""

SNAPSHOTS: dict[str, Callable[[], Snapshot]] = {
    "realistic": lambda: realistic(pending=PENDING),
    "heavy": lambda: realistic(pending=PENDING, running=15_000, variety=0.267),
    "distinct": lambda: distinct(pending=PENDING),
    "distinct-multi": lambda: distinct(pending=PENDING, multi=True),
    "distinct-licenses": lambda: distinct(pending=PENDING, licensed=0.05),
}


def _how(d: Demand) -> str:
    if d.packing is None:
        return ""
    return "first fit" if d.packing.exact else f"best fit, {d.packing.runs} runs"


def run(runs: int) -> None:
    """Time every snapshot and print the figures."""
    for label, build in SNAPSHOTS.items():
        snap = build()
        pend = sum(1 for j in snap.jobs if j.state == "PENDING")
        base = measure(lambda snap=snap: baseline(snap), max(runs, 5))

        def cold(snap: Snapshot = snap) -> None:
            demand.clear_caches()  # node lists of running jobs read afresh
            compute_demand(snap, TARGETS)

        t_cold = measure(cold, runs)
        t_warm = measure(lambda snap=snap: compute_demand(snap, TARGETS), runs)
        out = compute_demand(snap, TARGETS)
        rng, cache, polled = random.Random(7), ScanCache(), snap
        compute_demand(polled, TARGETS, cache)  # the first poll: the cache fills
        t_poll = []
        for _ in range(runs):  # each later poll, as the service computes it
            polled = next_poll(polled, rng)
            t_poll.extend(measure(lambda s=polled, c=cache: compute_demand(s, TARGETS, c), 1))
        print(f"\n{label}: {len(snap.jobs)} job records ({pend} pending), {len(snap.nodes)} nodes")
        print(f"  baseline (read 3 fields/job)  {fmt(base)}")
        print(f"  compute_demand, cold          {fmt(t_cold)}   x baseline {min(t_cold) / min(base):5.1f}")
        print(f"  compute_demand, warm          {fmt(t_warm)}   x baseline {min(t_warm) / min(base):5.1f}")
        print(f"  a later poll (ScanCache)      {fmt(t_poll)}   x baseline {min(t_poll) / min(base):5.1f}")
        for name, d in out.items():
            print(
                f"    {name:9s} desired {d.desired:6d}  needed {d.needed:6d}  busy {d.busy:5d}  ({_how(d)})"
            )
        met = "met" if min(t_poll) <= TARGET_MS else "NOT met"
        print(f"  target <= {TARGET_MS:.0f} ms a poll (with the cache, best of {runs}): {met}")


def _old_model(
    rev: str, into: Path
) -> tuple[Callable[..., object], Callable[[], None], Callable[[], object]]:
    """``rev``'s ``autoscaler`` package as ``old_autoscaler`` (its imports renamed, its C modules built),
    importable beside this tree's in this process: (its compute_demand, its cache clear, its ScanCache)."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "autoscaler"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "autoscaler").rename(into / "old_autoscaler")
    for path in (into / "old_autoscaler").rglob("*.py"):
        text = path.read_text()
        text = text.replace("from autoscaler.", "from old_autoscaler.").replace(
            "from autoscaler import", "from old_autoscaler import"
        )
        path.write_text(text.replace("import autoscaler.", "import old_autoscaler."))
    _compile(into / "old_autoscaler" / "demand")
    sys.path.insert(0, str(into))
    old = importlib.import_module("old_autoscaler.demand")
    clear = getattr(old, "clear_caches", None) or old._hosts.cache_clear
    return old.compute_demand, clear, old.ScanCache


def _compile(package: Path) -> None:
    """Build the C modules of an exported package in place, as ``setup.py`` does (``-O2``), so an old
    model runs compiled as it was installed — where no compiler is, its Python loops run, as this tree's."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return
    include, suffix = sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX")
    for source in package.glob("*.c"):
        subprocess.run(
            [
                cc,
                "-O2",
                "-shared",
                "-fPIC",
                f"-I{include}",
                str(source),
                "-o",
                str(source.with_suffix(suffix)),
            ],
            check=True,
        )


def _chosen(only: list[str]) -> Iterator[tuple[str, Snapshot]]:
    """The snapshots named in ``only`` (all when empty), built one at a time."""
    for label, build in SNAPSHOTS.items():
        if not only or label in only:
            yield label, build()


def against(rev: str, runs: int, only: list[str]) -> None:
    """This tree's model and ``rev``'s alternated run by run on the same snapshots, in one process, each
    run from a collected heap (``gc.collect()``) so neither side pays for the other's garbage: cold (no
    cache), and the first poll of the service (its :class:`ScanCache` empty: filled on the way)."""
    with tempfile.TemporaryDirectory() as tmp:
        old_compute, old_clear, old_cache = _old_model(rev, Path(tmp))
        print(f"old = {rev}, new = this tree; alternated, {runs} runs each (ms)")
        print(
            f"{'snapshot':16s} {'':12s} {'old best':>9s} {'new best':>9s} {'ratio':>6s}"
            f" {'old med':>9s} {'new med':>9s} {'ratio':>6s}"
        )
        for label, snap in _chosen(only):
            for how, cached in (("cold", False), ("first poll", True)):
                old_ms: list[float] = []
                new_ms: list[float] = []
                for r in range(runs):
                    sides = [
                        (old_ms, old_clear, old_compute, old_cache),
                        (new_ms, demand.clear_caches, compute_demand, ScanCache),
                    ]
                    for times, clear, compute, cache in sides if r % 2 == 0 else sides[::-1]:
                        clear()
                        memo = cache() if cached else None
                        gc.collect()
                        t = time.perf_counter()
                        compute(snap, TARGETS, memo)
                        times.append((time.perf_counter() - t) * 1000)
                ob, nb = min(old_ms), min(new_ms)
                om, nm = statistics.median(old_ms), statistics.median(new_ms)
                print(
                    f"{label:16s} {how:12s} {ob:9.1f} {nb:9.1f} {nb / ob:6.3f}"
                    f" {om:9.1f} {nm:9.1f} {nm / om:6.3f}"
                )


def next_poll(snap: Snapshot, rng: random.Random, changed: float = 0.01) -> Snapshot:
    """The snapshot a poll later, as the incremental poller makes it (:func:`exporter.jobsync.merge`):
    the same record objects in the same order, except ``changed`` of the pending records re-read (new
    objects: a priority a little higher, some a new reason), half as many started (new RUNNING objects in
    their place) and half as many new pending records at the end (copies under new ids)."""
    jobs = list(snap.jobs)
    pending = [i for i, j in enumerate(jobs) if j.state == "PENDING"]
    k = int(len(pending) * changed)
    for i in rng.sample(pending, k):
        j = jobs[i]
        jobs[i] = msgspec.structs.replace(
            j, priority=j.priority + 1, reason=rng.choice(["Priority", "Resources", j.reason])
        )
    for i in rng.sample(pending, k // 2):
        jobs[i] = msgspec.structs.replace(jobs[i], state="RUNNING", reason="None")
    top = max(j.job_id for j in jobs)
    for n, i in enumerate(rng.sample(pending, k // 2)):
        jobs.append(msgspec.structs.replace(jobs[i], job_id=top + 1 + n))
    return msgspec.structs.replace(snap, jobs=tuple(jobs))


def polls(runs: int, only: list[str]) -> None:
    """Every poll after the first, as the service computes it: with the :class:`ScanCache` of the poll
    before (records read once) against without (every record read), alternated, on ``runs`` successive
    polls of each snapshot (:func:`next_poll`); the answers compared. Both warm (running jobs' node lists
    read before), as every poll after the first is."""
    print(f"successive polls, 1% of pending records changed per poll; {runs} polls each")
    print(
        f"{'snapshot':16s} {'plain best':>10s} {'cache best':>10s} {'ratio':>6s}"
        f" {'plain med':>10s} {'cache med':>10s}"
    )
    for label, snap in _chosen(only):
        rng = random.Random(7)
        first_ms: list[float] = []
        for _ in range(3):  # the first poll: the cache fills (what it costs over the plain model)
            cache = ScanCache()
            gc.collect()
            t = time.perf_counter()
            compute_demand(snap, TARGETS, cache)
            first_ms.append((time.perf_counter() - t) * 1000)
        plain_ms: list[float] = []
        cache_ms: list[float] = []
        for r in range(runs):
            snap = next_poll(snap, rng)
            answers = []
            sides = [(plain_ms, None), (cache_ms, cache)]
            for times, memo in sides if r % 2 == 0 else sides[::-1]:
                gc.collect()  # the node lists of running jobs stay read, as in the service
                t = time.perf_counter()
                answers.append(compute_demand(snap, TARGETS, memo))
                times.append((time.perf_counter() - t) * 1000)
            assert answers[0] == answers[1], f"{label}: the cache changed the answer"
        pb, cb = min(plain_ms), min(cache_ms)
        pm, cm = statistics.median(plain_ms), statistics.median(cache_ms)
        print(
            f"{label:16s} {pb:10.1f} {cb:10.1f} {cb / pb:6.3f} {pm:10.1f} {cm:10.1f}"
            f"   (first poll, cache filling: best {min(first_ms):.1f})"
        )


def start(runs: int, only: list[str], chunk: int) -> None:
    """A start without a listing, as the service computes it: beyond ``--jobs-listing-max`` jobs the poller
    reads the jobs one by one, pending ones first, and publishes what it has read as it goes
    (``exporter.incremental``: at most ``--jobs-changes-limit`` (1,000) a poll, a snapshot every 0.25 s
    within one); the demand service computes each snapshot with its :class:`ScanCache`. Here the snapshot
    grows by ``chunk`` records a step (pending first), each computed through one cache; printed: the
    steps, the dearest, the median, the first complete snapshot's (the answer a scale from zero waits
    for), and against them the same complete snapshot cold (no cache: a standby's first copy, or a start
    that lists everything) — best of ``runs``, in the same run."""
    print(f"a start without a listing: the snapshot grows by {chunk} records a step, pending first")
    print(
        f"{'snapshot':16s} {'steps':>6s} {'max step':>9s} {'median':>7s} {'complete':>9s} {'sum':>8s}"
        f" {'cold':>7s}   (ms)"
    )
    for label, snap in _chosen(only):
        ordered = sorted(snap.jobs, key=lambda j: j.state != "PENDING")  # stable: pending first
        completes: list[float] = []
        steps: list[float] = []
        for _ in range(runs):
            cache = ScanCache()
            steps = []
            demand.clear_caches()
            for end in [*range(chunk, len(ordered), chunk), len(ordered)]:
                part = msgspec.structs.replace(snap, jobs=tuple(ordered[:end]))
                gc.collect()  # as the service: between snapshots, the collector runs
                t = time.perf_counter()
                compute_demand(part, TARGETS, cache)
                steps.append((time.perf_counter() - t) * 1000)
            completes.append(steps[-1])
        whole = msgspec.structs.replace(snap, jobs=tuple(ordered))

        def cold(snap: Snapshot = whole) -> None:
            demand.clear_caches()
            compute_demand(snap, TARGETS)

        t_cold = measure(cold, runs)
        print(
            f"{label:16s} {len(steps):6d} {max(steps):9.1f} {statistics.median(steps):7.1f}"
            f" {min(completes):9.1f} {sum(steps):8.0f} {min(t_cold):7.1f}"
            f"   (complete: best of {runs}; the steps of the last run)"
        )


def main() -> None:
    global PENDING
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (best-of and median)")
    ap.add_argument(
        "--snapshot", action="append", choices=list(SNAPSHOTS), help="with --against/--polls: only these"
    )
    ap.add_argument("--against", metavar="REV", help="alternate this tree with git revision REV's model")
    ap.add_argument(
        "--polls", action="store_true", help="successive polls: with the scan cache against without"
    )
    ap.add_argument(
        "--start",
        type=int,
        metavar="CHUNK",
        help="a start without a listing: the snapshot growing by CHUNK records a step, through one cache",
    )
    ap.add_argument(
        "--pending", type=int, default=PENDING, help="pending job records of every snapshot (100,000)"
    )
    args = ap.parse_args()
    PENDING = args.pending
    if args.start:
        start(args.runs, args.snapshot or [], args.start)
        return
    if args.polls:
        polls(args.runs, args.snapshot or [])
        return
    if args.against:
        against(args.against, args.runs, args.snapshot or [])
        return
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    run(args.runs)


if __name__ == "__main__":
    main()
