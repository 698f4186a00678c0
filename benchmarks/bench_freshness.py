"""Freshness at scale: how soon a job change reaches the snapshot — which ``/metrics``, the demand service
(its gRPC stream included) and the bridge all wake on — with 20,000 jobs queued, and what it costs
slurmrestd: incremental jobs (``/jobs/state`` + ``/job/{id}``) against full polling (a ``/jobs`` listing
whenever anything changed, as before), one after the other in one run, on the 26.05 lab (``--slurm
24.11``: the 24.11 lab).

Setup (kept between runs unless ``--clean``): ``--queue`` held jobs named ``bench-fresh-held`` in partition
``cpu``; two dynamic nodes ``fr-1``, ``fr-2`` (4 CPUs each) under the reservation ``bench-fresh`` with
``--parked`` jobs that wait for a begin time two days ahead (the hold/release targets).

Per mode, for ``--duration`` seconds: a fresh slurmrestd (its memory from zero), a poller in this process
(``--poll-interval``, default 1 s), churn — one event every ``--churn-interval`` s, in turn: a 3 s job into
the reservation (new, start, end), an array of 3 tasks (each task splits off as it starts), a hold of a
parked job, a release of one held for ``--hold-for`` seconds — and a watcher woken by every snapshot swap.
Each change's moment is slurmctld's own (its log, millisecond stamps: submit, Allocate/Started,
``_job_complete``, hold, release); its latency is the first swapped snapshot that shows it. Figures per
mode: p50/p99 per kind of change, slurmrestd's CPU (cores, averaged, from ``/proc/<pid>/stat``) and RSS
(start, end, peak), requests per minute by endpoint, our own CPU and peak RSS. ``two-replicas`` and
``two-replicas-slow``: incremental with a second, standby replica polling too (at ``--poll-interval``, or at
``--standby-interval``): what the bridge overlay's second replica costs slurmrestd; ``two-replicas-copy``: the
standby copies the leader's snapshots over HTTP instead (``--replica-copy``, the default), and how long after
the leader it serves each is printed. ``accounting``:
incremental with what ``serve --metrics-fairshare`` reads beside (``/shares``, slurmdbd's ended jobs, QOS and
associations at ``serve``'s default intervals): what they cost slurmrestd, slurmdbd and MariaDB (their
cores are printed for every mode).

Run (root): ``.venv/bin/python benchmarks/bench_freshness.py [--queue 20000 --duration 180]``
Smoke: ``.venv/bin/python benchmarks/bench_freshness.py --queue 500 --duration 30``

A job-changing RPC does not say which job it changed: the poller reads the live jobs again newest first,
those of the users whose RPCs moved with it first (``--owner ann --queue-owner bob``: the targets and the
queue belong to two users, as on a cluster with users; the lab's token is root's).
The hold/release targets are submitted after the queue unless ``--park-first`` (an empty lab): the run
prints how many queued jobs are newer than them.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import itertools
import logging
import os
import resource
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.follower import ReplicaFollower
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app
from exporter.session import SlurmSession
from lab import Lab
from slurm_keda.configs import poller_config
from slurm_keda.settings import PollSettings
from testkit.lab_queue import count_jobs, fill_held, reserve_new_nodes
from testkit.slurmctld_log import LOG_EVENTS, log_end, log_events, proc_cpu_seconds, proc_rss_bytes
from testkit.stats import pct
from testkit.tools import serve_app

HELD = "bench-fresh-held"
RESERVATION = "bench-fresh"
NODES = ["fr-1", "fr-2"]
PARKED = "bench-fresh-parked"
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"})

KINDS = tuple(LOG_EVENTS)
MODES: dict[str, dict[str, float]] = {
    "incremental": {},
    "whole-states": {"jobs_states_targeted_min": 0},  # /jobs/state whole every poll, whatever the count
    "some-states": {"jobs_states_targeted_min": 1},  # /jobs/state asked about some records from 1 job on
    "no-rereads": {"jobs_sweep_rate": 0.0, "jobs_recheck_rate": 0.0},  # states and follow-ups only
    "full": {},
    "two-replicas": {},
    "two-replicas-slow": {},
    "two-replicas-copy": {},
    "accounting": {},
}
"""Mode → the poller settings beside the defaults (``full``: a listing whenever anything changed)."""
STANDBY = {"two-replicas": 0.0, "two-replicas-slow": -1.0, "two-replicas-copy": -1.0}
"""Modes with a second, standby replica (the bridge overlay's) beside the incremental one → its
``standby_interval`` (-1: ``--standby-interval``). Only the leader's snapshots are watched for the
latencies."""
COPY = frozenset({"two-replicas-copy"})
"""Modes whose standby copies the leader's snapshots over HTTP (``--replica-copy``, the default) instead of
polling: it polls slurmrestd only if the leader stops answering. How long after the leader each of its
snapshots reaches the standby is measured too."""


# -- the lab --------------------------------------------------------------------------------------------


def add_nodes(lab: Lab, owner: str) -> None:
    users = "root" if owner == "root" else f"root,{owner}"
    reserve_new_nodes(lab, NODES, RESERVATION, cpus=4, memory_mb=400, minutes=1440, users=users)


def park(lab: Lab, n: int, owner: str) -> list[int]:
    where = ["-p", "dyn", f"--reservation={RESERVATION}", "-n1", "-J", PARKED, "--begin=now+2days"]
    return [lab.sbatch(*where, f"--uid={owner}", command="true") for _ in range(n)]


def hold(lab: Lab, owner: str, job_id: int, on: bool) -> None:
    """``scontrol hold|release`` as ``owner`` would run it: root's through scontrol, another user's through
    slurmrestd with their JWT (``scontrol -u`` is counted as root's RPC)."""
    if owner == "root":
        lab.run(["scontrol", "hold" if on else "release", str(job_id)])
        return
    version = "v0.0.45" if lab.flavor.name == "26.05" else "v0.0.42"  # the newest each offers
    answer = lab.post_as(owner, f"/slurm/{version}/job/{job_id}", {"hold": on})
    if answer.status != 200:
        raise RuntimeError(f"hold={on} of {job_id} as {owner}: HTTP {answer.status} {answer.body[:200]!r}")


# -- one mode -------------------------------------------------------------------------------------------


@dataclass
class Mode:
    name: str
    seen: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    """kind → job id → when a snapshot first showed it (new, start, end)."""
    held_seen: dict[int, list[tuple[float, bool]]] = field(default_factory=lambda: defaultdict(list))
    """Parked job → (when, held) each time a snapshot showed its hold state change."""
    events: list[tuple[str, int, float]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    missed: Counter[str] = field(default_factory=Counter)
    missed_ids: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Kind → the jobs no snapshot showed it for (printed by :func:`explain_slowest`)."""
    restd_cores: float = 0.0
    restd_rss: tuple[int, int, int] = (0, 0, 0)
    """slurmrestd RSS at the start, at the end, and the peak sampled."""
    ours_cores: float = 0.0
    accounting_cores: dict[str, float] = field(default_factory=dict)
    """slurmdbd's and MariaDB's cores, averaged (what slurmdbd reads cost beside slurmrestd)."""
    ours_rss_peak: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    listings: int = 0
    listing_seconds: float = 0.0
    asks: Counter[str] = field(default_factory=Counter)
    """Polls by what they asked /jobs/state (whole, some, none)."""
    errors: Counter[str] = field(default_factory=Counter)
    copy_lags: list[float] = field(default_factory=list)
    """Seconds from a leader's snapshot to the same snapshot on the copying standby."""
    standby_requests: Counter[str] = field(default_factory=Counter)
    """The standby's own requests to slurmrestd (in :attr:`requests` too)."""
    trace: list[tuple[float, bool, bool, int, tuple[tuple[str, int], ...], int]] = field(default_factory=list)
    """Per snapshot swap: (epoch seconds, counts unaccounted, whole answer in flight, records the last
    complete poll read, /jobs/state asks so far, changed records left for later polls) — what
    :func:`explain_slowest` prints around the slowest changes."""

    def watch(self, snap: Snapshot, now: float, mine: set[int], parked: set[int]) -> None:
        for job in snap.jobs:
            jid = job.job_id
            if jid in parked:
                held = job.reason in ("JobHeldUser", "JobHeldAdmin")
                history = self.held_seen[jid]
                if not history or history[-1][1] != held:
                    history.append((now, held))
                continue
            if jid not in mine and job.array_job_id not in mine:
                continue
            self.seen["new"].setdefault(jid, now)
            if job.state != "PENDING":
                self.seen["start"].setdefault(jid, now)
            if job.state in ENDED:
                self.seen["end"].setdefault(jid, now)

    def measure(self) -> None:
        for kind, jid, at in self.events:
            if kind in ("hold", "release"):
                want = kind == "hold"
                seen = next((t for t, held in self.held_seen.get(jid, []) if held == want and t >= at), None)
            else:
                seen = self.seen[kind].get(jid)
            if seen is None:  # not shown by any snapshot up to the end (the settling included)
                self.missed[kind] += 1
                self.missed_ids[kind].append(jid)
                continue
            self.latencies[kind].append(max(0.0, seen - at))


async def run_mode(lab: Lab, args: argparse.Namespace, name: str, parked: list[int]) -> Mode:
    mode = Mode(name)
    pid = lab.restart_restd()
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file), stream_timeout=900)
    log_path = lab.state_dir / "log" / "slurmctld.log"
    async with SlurmClient(cfg) as client, contextlib.AsyncExitStack() as stack:
        # the first poll lists whatever the count: the figures are of the steady state after it
        # (benchmarks/bench_start.py measures a start without a listing)
        config = PollerConfig(
            interval=args.poll_interval, incremental_jobs=name != "full", jobs_listing_max=0, **MODES[name]
        )
        if name == "accounting":  # the endpoints and intervals serve reads with --metrics-fairshare
            served = poller_config(PollSettings(), fairshare=True)
            config = dataclasses.replace(config, endpoints=served.endpoints, intervals=served.intervals)
        poller = Poller(SlurmSession(client), config)
        first = await poller.poll_once()  # the first listing is not part of the figures
        assert first is not None, poller.status.last_error
        clients = [client]
        standby: Poller | None = None
        follower: ReplicaFollower | None = None
        if name in STANDBY:  # the second replica, its first listing done before the figures too
            every = args.standby_interval if STANDBY[name] < 0 else STANDBY[name]
            clients.append(await stack.enter_async_context(SlurmClient(cfg)))
            standby = Poller(
                SlurmSession(clients[-1]), PollerConfig(interval=args.poll_interval, standby_interval=every)
            )
            standby.standby = True
            if name in COPY:  # it copies the leader's snapshots from the leader's HTTP server
                url = await stack.enter_async_context(serve_app(make_app(poller)))
                follower = ReplicaFollower(standby, lambda: url)
                standby.copy_fresh = follower.fresh
            else:
                assert await standby.poll_once() is not None, standby.status.last_error
        # a fresh slurmrestd again: the first listing's memory (13.5 GB at 100,000 jobs, never given back)
        # is not the steady state's
        pid = lab.restart_restd()
        rss0 = peak = proc_rss_bytes(pid)
        if config.incremental_jobs:  # the first incremental poll after a listing reads /jobs/state whole
            # (16–19 s at 100,000 jobs, in the poll): not the steady state either
            first = await poller.poll_once() or first
        mine: set[int] = set()
        parked_set = set(parked)
        held = {j.job_id: 0.0 for j in first.jobs if j.job_id in parked_set and j.reason == "JobHeldUser"}
        log_at = log_end(log_path)
        db_pids = {c: p for c in ("slurmdbd", "mariadbd") if (p := lab.pid(c)) is not None}
        db0 = {c: proc_cpu_seconds(p) for c, p in db_pids.items()}
        cpu0, ours0, t0 = proc_cpu_seconds(pid), time.process_time(), time.monotonic()
        requests0 = sum((Counter(c.requests_by_endpoint) for c in clients), Counter[str]())
        listings0 = sum(poller.status.jobs_sync.full_listings.values())
        asks0 = Counter(poller.status.jobs_sync.states_asks)
        stop = asyncio.Event()

        async def churn() -> None:
            where = ["-p", "dyn", f"--reservation={RESERVATION}", "-n1", "-J", "bench-fresh"]
            step = 0
            while not stop.is_set():
                action = ("job", "array", "hold", "release", "job")[step % 5]
                step += 1
                if action == "job":
                    mine.add(await asyncio.to_thread(lab.sbatch, *where, command="sleep 3"))
                elif action == "array":
                    mine.add(await asyncio.to_thread(lab.sbatch, *where, "-a", "1-3", command="sleep 2"))
                elif action == "hold" and (free := sorted(parked_set - held.keys())):
                    job_id = free[step % len(free)]
                    held[job_id] = time.monotonic()
                    await asyncio.to_thread(hold, lab, args.owner, job_id, True)
                elif action == "release" and held:
                    job_id, since = min(held.items(), key=lambda item: item[1])
                    if time.monotonic() - since >= args.hold_for:
                        del held[job_id]
                        await asyncio.to_thread(hold, lab, args.owner, job_id, False)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), args.churn_interval)

        published: dict[float, float] = {}
        """A leader snapshot's taken_at → when it was swapped in (monotonic)."""

        async def watcher() -> None:
            snap: Snapshot | None = first
            while True:
                snap = await poller.wait_next(snap)
                published[snap.taken_at] = time.monotonic()
                now = time.time()
                sync = poller.status.jobs_sync
                mode.trace.append(
                    (
                        now,
                        sync.unaccounted,
                        poller.whole_states_in_flight,
                        len(sync.last_read),
                        tuple(sorted(sync.states_asks.items())),
                        sync.backlog,
                    )
                )
                mode.watch(snap, now, mine, parked_set)

        async def copy_watcher() -> None:
            assert standby is not None
            snap: Snapshot | None = None
            while True:
                snap = await standby.wait_next(snap)
                if (at := published.get(snap.taken_at)) is not None:
                    mode.copy_lags.append(time.monotonic() - at)

        async def sampler() -> None:
            nonlocal peak
            next_report = args.report_every
            while True:
                rss = proc_rss_bytes(pid)
                peak = max(peak, rss)
                mode.ours_rss_peak = max(mode.ours_rss_peak, proc_rss_bytes(os.getpid()))
                elapsed = time.monotonic() - t0
                if args.report_every and elapsed >= next_report:
                    next_report += args.report_every
                    cores = (proc_cpu_seconds(pid) - cpu0) / elapsed
                    listings = sum(poller.status.jobs_sync.full_listings.values()) - listings0
                    print(
                        f"  {name} at {elapsed / 60:.0f} min: slurmrestd RSS {rss / 1e6:.0f} MB,"
                        f" {cores:.2f} cores on average, {listings} listing(s)",
                        flush=True,
                    )
                await asyncio.sleep(2.0)

        tasks = [
            asyncio.create_task(poller.run(), name="poller"),
            asyncio.create_task(watcher(), name="watcher"),
            asyncio.create_task(sampler(), name="sampler"),
            asyncio.create_task(churn(), name="churn"),
        ]
        if standby is not None:
            tasks.append(asyncio.create_task(standby.run(), name="standby-poller"))
        if follower is not None:
            tasks.append(asyncio.create_task(follower.run(), name="standby-follower"))
            tasks.append(asyncio.create_task(copy_watcher(), name="copy-watcher"))
        await asyncio.sleep(args.duration)
        stop.set()
        await asyncio.sleep(args.settle)  # the last changes may still arrive
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.monotonic() - t0
        mode.seconds = elapsed
        mode.restd_cores = (proc_cpu_seconds(pid) - cpu0) / elapsed
        mode.ours_cores = (time.process_time() - ours0) / elapsed
        mode.accounting_cores = {c: (proc_cpu_seconds(p) - db0[c]) / elapsed for c, p in db_pids.items()}
        mode.restd_rss = (rss0, proc_rss_bytes(pid), max(peak, proc_rss_bytes(pid)))
        mode.requests = sum((Counter(c.requests_by_endpoint) for c in clients), Counter[str]()) - requests0
        if len(clients) > 1:
            mode.standby_requests = Counter(clients[1].requests_by_endpoint)
        sync = poller.status.jobs_sync
        mode.listings = sum(sync.full_listings.values()) - listings0
        mode.listing_seconds = sync.listing_duration
        mode.asks = Counter(sync.states_asks) - asks0
        mode.errors = Counter(poller.status.endpoints["jobs"].errors)
        events, _ = log_events(log_path, log_at)
        ours = mine | set(mode.seen["new"])  # with the array tasks that split off
        mode.events = [
            (k, j, t) for k, j, t in events if (j in parked_set if k in ("hold", "release") else j in ours)
        ]
        mode.measure()
        with contextlib.suppress(Exception):
            lab.run(["scancel", "-n", "bench-fresh"], check=False)
    return mode


def explain_slowest(m: Mode, per_kind: int) -> None:
    """The slowest changes of each kind with what the polls did meanwhile (from the change to the snapshot
    that showed it): swaps, the longest gap between two, swaps whose counts were unaccounted for, with the
    whole answer in flight, the most records a poll read, /jobs/state asks, the largest backlog."""
    times = [t[0] for t in m.trace]
    print(f"{m.name}: the slowest changes (swaps, longest gap, unaccounted, whole, reads, asks, backlog)")
    for kind in KINDS:
        slow = []
        for k, jid, at in m.events:
            if k != kind:
                continue
            if kind in ("hold", "release"):
                want = kind == "hold"
                seen = next((t for t, held in m.held_seen.get(jid, []) if held == want and t >= at), None)
            else:
                seen = m.seen[kind].get(jid)
            if seen is not None:
                slow.append((seen - at, jid, at, seen))
        for lat, jid, at, seen in sorted(slow, reverse=True)[:per_kind]:
            lo, hi = bisect.bisect_left(times, at), bisect.bisect_right(times, seen)
            window = m.trace[lo:hi]
            stamps = [at, *(t[0] for t in window), seen]
            gap = max(b - a for a, b in itertools.pairwise(stamps))
            before = dict(m.trace[lo - 1][4]) if lo > 0 else {}
            asks = Counter(dict(window[-1][4])) - Counter(before) if window else Counter()
            print(
                f"  {kind:7s} job {jid} at {time.strftime('%H:%M:%S', time.localtime(at))}"
                f" +{lat:6.2f} s: {len(window)} swaps, gap {gap:5.2f} s,"
                f" unaccounted {sum(t[1] for t in window)}, whole {sum(t[2] for t in window)},"
                f" reads {max((t[3] for t in window), default=0)} at most, asks {dict(asks)},"
                f" backlog {max((t[5] for t in window), default=0)} at most"
            )
        if m.missed_ids.get(kind):
            print(f"  {kind:7s} never shown: jobs {m.missed_ids[kind]}")


def report(modes: list[Mode], args: argparse.Namespace, queue: int) -> None:
    print(
        f"\n{queue} jobs in squeue; poll interval {args.poll_interval:g} s;"
        f" churn every {args.churn_interval:g} s; {args.duration:.0f} s per mode"
    )
    head = f"{'mode':<18} " + " ".join(f"{k + ' p50/p99 s':>20}" for k in KINDS)
    print(head)
    for m in modes:
        cells = []
        for k in KINDS:
            lat = m.latencies.get(k, [])
            missed = f" ({m.missed[k]} missed)" if m.missed[k] else ""
            cells.append(f"{pct(lat, 50):6.2f}/{pct(lat, 99):6.2f} n={len(lat):<3}{missed}".rjust(20))
        print(f"{m.name:<18} " + " ".join(cells))
    print(
        f"\n{'mode':<18} {'restd cores':>11} {'restd RSS MB start→end (peak)':>30} {'ours cores':>10}"
        f" {'ours RSS MB':>11} {'listings':>8} {'req/min':>8}  requests by endpoint"
    )
    for m in modes:
        rss = f"{m.restd_rss[0] / 1e6:.0f}→{m.restd_rss[1] / 1e6:.0f} ({m.restd_rss[2] / 1e6:.0f})"
        per_min = sum(m.requests.values()) / (m.seconds / 60)
        by = ", ".join(f"{e} {n}" for e, n in sorted(m.requests.items()))
        print(
            f"{m.name:<18} {m.restd_cores:11.2f} {rss:>30} {m.ours_cores:10.2f} {m.ours_rss_peak / 1e6:11.0f}"
            f" {m.listings:8d} {per_min:8.0f}  {by}"
        )
    for m in modes:
        db = ", ".join(f"{c} {cores:.3f}" for c, cores in m.accounting_cores.items()) or "no slurmdbd"
        print(f"{m.name}: accounting daemons' cores: {db}")
    for m in modes:
        errors = f"; jobs fetch errors {dict(m.errors)}" if m.errors else ""
        asks = ", ".join(f"{k} {n}" for k, n in sorted(m.asks.items())) or "none"
        print(f"{m.name}: last full listing took {m.listing_seconds:.1f} s; /jobs/state asks: {asks}{errors}")
    for m in modes:
        if m.standby_requests or m.name in STANDBY:
            by = ", ".join(f"{e} {n}" for e, n in sorted(m.standby_requests.items())) or "none"
            print(f"{m.name}: the standby's own requests to slurmrestd (the whole run): {by}")
    for m in modes:
        if m.copy_lags:
            print(
                f"{m.name}: the standby served {len(m.copy_lags)} of the leader's snapshots, "
                f"{pct(m.copy_lags, 50) * 1000:.0f}/{pct(m.copy_lags, 99) * 1000:.0f} ms (p50/p99) after it"
            )


async def run(args: argparse.Namespace) -> int:
    lab = Lab(args.slurm)
    lab.up()
    print(f"lab {args.slurm}: Slurm {lab.release()}")
    if args.park_first:  # the hold/release targets older than the queue: the recheck reaches them last
        add_nodes(lab, args.owner)
        parked = park(lab, args.parked, args.owner)
        fill_held(lab, args.queue, HELD, user=args.queue_owner)
    else:
        fill_held(lab, args.queue, HELD, user=args.queue_owner)
        add_nodes(lab, args.owner)
        parked = park(lab, args.parked, args.owner)
    if args.token_jobs:  # the poller's own user (root) owns pending jobs newer than the targets
        where = [
            "-p",
            "dyn",
            f"--reservation={RESERVATION}",
            "-n1",
            "-J",
            "bench-fresh-token",
            "--begin=now+2days",
        ]
        for _ in range(args.token_jobs):
            lab.sbatch(*where, command="true")
        print(f"{args.token_jobs} pending jobs of root, the token's user, newer than the targets")
    queue = count_jobs(lab)
    live = [int(j) for j in lab.run(["squeue", "-h", "-o", "%A"], check=False).split()]
    newer = sum(1 for j in live if j > max(parked))
    print(f"parked jobs {min(parked)}–{max(parked)}: {newer} of {len(live)} queued jobs are newer")
    modes: list[Mode] = []
    try:
        for name in args.modes.split(","):
            modes.append(await run_mode(lab, args, name, parked))
            m = modes[-1]
            print(f"  {name}: {sum(len(v) for v in m.latencies.values())} changes measured")
    finally:
        lab.run(["scancel", f"--reservation={RESERVATION}"], check=False)
        lab.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], check=False)
        for name in NODES:
            with contextlib.suppress(Exception):
                lab.remove_node(name)
        report(modes, args, queue)  # before the clean-up: cancelling 100,000 jobs takes minutes
        for m in modes:
            if args.explain_slowest:
                explain_slowest(m, args.explain_slowest)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        print(f"our peak RSS over the run (getrusage): {peak:.0f} MB", flush=True)
        if args.clean:
            lab.run(["scancel", "-n", HELD], check=False, timeout=1800)
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--queue", type=int, default=20000)
    p.add_argument("--parked", type=int, default=20)
    p.add_argument(
        "--token-jobs",
        type=int,
        default=0,
        help="pending jobs of root (the poller's token user) beside the targets: its RPCs move every poll",
    )
    p.add_argument("--duration", type=float, default=180.0, help="seconds per mode")
    p.add_argument("--settle", type=float, default=10.0, help="seconds after the churn stops")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--churn-interval", type=float, default=1.0)
    p.add_argument("--hold-for", type=float, default=10.0, help="seconds a parked job stays held")
    p.add_argument(
        "--report-every", type=float, default=0.0, help="print slurmrestd's RSS every N s (0: off)"
    )
    p.add_argument("--modes", default="incremental,full", help=f"some of {', '.join(MODES)}")
    p.add_argument(
        "--park-first",
        action="store_true",
        help="submit the hold/release targets before filling the queue (on a lab whose queue is empty):"
        " they are then older than every queued job",
    )
    p.add_argument("--clean", action="store_true", help="cancel the held jobs afterwards")
    p.add_argument("--log", type=Path, help="the poller's debug log to this file (a line per poll)")
    p.add_argument(
        "--explain-slowest", type=int, default=3, help="this many slowest changes of each kind, explained"
    )
    p.add_argument("--slurm", choices=("26.05", "24.11"), default="26.05", help="which lab")
    p.add_argument(
        "--owner", default="root", help="who owns, holds and releases the parked jobs (root, ann, bob)"
    )
    p.add_argument("--queue-owner", default="root", help="who owns the queued jobs (root, ann, bob)")
    p.add_argument(
        "--standby-interval", type=float, default=5.0, help="two-replicas-slow: the standby's poll interval"
    )
    args = p.parse_args()
    if args.log:
        handler = logging.FileHandler(args.log, mode="w")
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logging.getLogger("exporter").addHandler(handler)
        logging.getLogger("exporter").setLevel(logging.DEBUG)
    raise SystemExit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
