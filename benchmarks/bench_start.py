"""The first poll at scale: how soon the jobs are served after a start, and what it costs slurmrestd — a
start without a full listing (``/jobs/state``, then every job read one by one: what the poller does beyond
``--jobs-listing-max`` jobs) against one with a listing (``--jobs-listing-max 0``), one after the other, each
with a fresh slurmrestd (its memory from zero), on the 26.05 lab.

Setup (kept between runs unless ``--clean``): ``--queue`` held jobs (``bench-fresh-held``, as
``bench_freshness.py``'s: one queue serves both).

Per mode: seconds to the first snapshot, seconds until the jobs are complete (no job left unread, or the
listing in), slurmrestd's CPU over that time (cores, seconds), its RSS at the start, peak and end, the
requests by endpoint; then ``--after`` seconds of polling every ``--poll-interval`` s on the complete data:
slurmrestd's cores and RSS at their end (does it stay flat?).

Run (root): ``.venv/bin/python benchmarks/bench_start.py --queue 100000 --modes unlisted``;
``--modes unlisted,listed --queue 20000`` side by side (a listing of 100,000 jobs takes slurmrestd to ~13 GB).
Smoke: ``--queue 2000 --listing-max 500 --after 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from lab import Lab
from testkit.lab_queue import count_jobs, fill_held
from testkit.slurmctld_log import proc_cpu_seconds, proc_rss_bytes

HELD = "bench-fresh-held"
MODES: dict[str, dict[str, int]] = {"unlisted": {}, "listed": {"jobs_listing_max": 0}}
"""Mode → the poller settings beside the defaults."""


@dataclass
class Start:
    name: str
    first: float = 0.0
    """Seconds to the first snapshot."""
    complete: float = 0.0
    """Seconds until no job was left unread (or the listing was in)."""
    polls: int = 0
    restd_cpu: float = 0.0
    """slurmrestd CPU seconds until complete."""
    rss: tuple[int, int, int] = (0, 0, 0)
    """slurmrestd RSS at the start, its peak until complete, at complete."""
    jobs: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    after_cores: float = 0.0
    after_rss: tuple[int, int] = (0, 0)
    """slurmrestd RSS at the start and the end of the steady polling after."""


async def run_mode(lab: Lab, args: argparse.Namespace, name: str) -> Start:
    out = Start(name)
    pid = lab.restart_restd()
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file), stream_timeout=1800)
    async with SlurmClient(cfg) as client:
        settings = {"jobs_listing_max": args.listing_max, **MODES[name]}
        config = PollerConfig(interval=args.poll_interval, jobs_sweep_rate=0.0, **settings)
        poller = Poller(SlurmSession(client), config)
        rss0 = peak = proc_rss_bytes(pid)
        cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
        stop = asyncio.Event()

        async def sampler() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, proc_rss_bytes(pid))
                await asyncio.sleep(1.0)

        sampling = asyncio.create_task(sampler(), name="sampler")
        while True:
            snap = await poller.poll_once()
            out.polls += 1
            if snap is not None and not out.first:
                out.first = time.monotonic() - t0
            if snap is not None and not snap.jobs_unread and snap.jobs_as_of > 0:
                break
            if args.progress and snap is not None:
                print(
                    f"  {name} {time.monotonic() - t0:6.0f} s: {len(snap.jobs)} jobs read, "
                    f"{snap.jobs_unread} left; slurmrestd RSS {proc_rss_bytes(pid) / 1e6:.0f} MB",
                    flush=True,
                )
            await asyncio.sleep(args.poll_interval)
        out.complete = time.monotonic() - t0
        out.restd_cpu = proc_cpu_seconds(pid) - cpu0
        out.rss = (rss0, max(peak, proc_rss_bytes(pid)), proc_rss_bytes(pid))
        out.jobs = len(snap.jobs)
        out.requests = Counter(client.requests_by_endpoint)
        stop.set()
        await sampling
        if args.after:
            rss1, cpu1, t1 = proc_rss_bytes(pid), proc_cpu_seconds(pid), time.monotonic()
            task = asyncio.create_task(poller.run(), name="poller")
            await asyncio.sleep(args.after)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            out.after_cores = (proc_cpu_seconds(pid) - cpu1) / (time.monotonic() - t1)
            out.after_rss = (rss1, proc_rss_bytes(pid))
    return out


def report(starts: list[Start], queue: int, args: argparse.Namespace) -> None:
    print(f"\n{queue} jobs in squeue; poll interval {args.poll_interval:g} s; --jobs-changes-limit 1000")
    print(
        "| start | first snapshot | complete | polls | slurmrestd CPU | cores | RSS start → peak → complete "
        f"| then {args.after:.0f} s polling: cores, RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s in starts:
        mb = [f"{x / 1e6:,.0f}" for x in s.rss]
        after = f"{s.after_cores:.2f}, {s.after_rss[0] / 1e6:,.0f} → {s.after_rss[1] / 1e6:,.0f} MB"
        print(
            f"| {s.name} | {s.first:.1f} s | {s.complete:.1f} s | {s.polls} | {s.restd_cpu:.0f} s "
            f"| {s.restd_cpu / s.complete:.2f} | {mb[0]} → {mb[1]} → {mb[2]} MB | {after} |"
        )
    for s in starts:
        reqs = ", ".join(f"{k} {v}" for k, v in sorted(s.requests.items()))
        print(f"  {s.name}: {s.jobs} job records; requests until complete: {reqs}")


async def run(args: argparse.Namespace) -> int:
    lab = Lab(args.slurm)
    lab.up()
    fill_held(lab, args.queue, HELD)
    queue = count_jobs(lab)
    starts = [await run_mode(lab, args, name) for name in args.modes.split(",")]
    report(starts, queue, args)
    if args.clean:
        lab.run(["scancel", "-n", HELD], check=False)
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queue", type=int, default=100_000)
    p.add_argument("--modes", default="unlisted", help=f"some of {', '.join(MODES)}")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--listing-max", type=int, default=10_000, help="--jobs-listing-max of the unlisted mode")
    p.add_argument("--after", type=float, default=120.0, help="seconds of polling after complete")
    p.add_argument("--progress", action="store_true", help="a line per poll until complete")
    p.add_argument("--clean", action="store_true", help="cancel the held jobs afterwards")
    p.add_argument("--slurm", choices=("26.05", "24.11"), default="26.05", help="which lab")
    sys.exit(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
