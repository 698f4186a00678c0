"""The bridge placing 1,000 pods (single pods and gangs) while 10,000 other jobs wait in Slurm's queue: ours,
which reads the poller's snapshot, against the Go bridge's approach — list every Slurm job for every pending
pod on every scheduling attempt — played by the same harness, in one run, on the 26.05 lab and the fake
Kubernetes API (``testkit/fake_kube.py``).

Setup (kept between runs unless ``--clean``): ``--queue`` held jobs (``sbatch -H`` in a loop inside the lab,
partition ``cpu``, named ``bench-bridge-held``); ``--nodes`` dynamic nodes ``bb-<i>`` of ``--cpus`` CPUs
under the reservation ``bench-bridge``. Pods: ``--gangs`` groups of ``--gang-size`` (``slurm-keda.io/group``)
and single pods up to ``--pods``, each 1 CPU and 10 MiB, sharing nodes (``share-node``), all created at once.

* **ours**: :class:`bridge.controller.Bridge` with its own poller (1 s interval) — every Slurm read is the
  poller's; a submission asks for an early poll.
* **go-approach**: kube-scheduler's loop as the Go bridge's plugin uses it: one pod at a time from the
  scheduling queue; an attempt submits the pod's placeholder job if its group has none yet (the same job
  body as ours), then lists every job (``GET /jobs``, decoded whole) to find it; RUNNING → bind (rank r of a
  gang on the r-th node), else back in the queue with kube-scheduler's backoff (1 s, doubling, at most 10 s).

Figures per approach: pods bound in ``--timeout`` s; Slurm RUNNING → bound p50 / p99 (the job's start time
from slurmctld's log, ms stamps; bound when the fake API server bound the pod; pods not bound
count as the timeout); slurmrestd requests per minute (the clients' ``requests_sent``; ours includes every
poll of every endpoint).

Run (root): ``.venv/bin/python benchmarks/bench_bridge.py [--pods 1000 --queue 10000]``
Smoke: ``.venv/bin/python benchmarks/bench_bridge.py --pods 40 --gangs 4 --queue 200 --timeout 60``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import json
import math
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

from bridge.actions import JOB_ID_ANNOTATION, BridgeOptions
from bridge.controller import Bridge
from bridge.groups import membership
from bridge.kube import Kube, load_configuration
from bridge.pods import Pod, decode_pod
from bridge.policy import Policy, parse_policy
from bridge.requests import PREFIX, JobRequest, admit, gang_request
from bridge.slurm import submit_job
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from exporter.slurmtext import hostlist_expand
from lab import Lab
from testkit.builders import ALLOCATABLE
from testkit.fake_kube import write_kubeconfig
from testkit.kube_process import KubeProcess
from testkit.lab_queue import count_jobs, fill_held, reserve_new_nodes
from testkit.slurmctld_log import log_end, log_events
from testkit.stats import pct

RESERVATION = "bench-bridge"
HELD = "bench-bridge-held"
NAMESPACE = "bench"
VERSION = "v0.0.45"


# -- the lab --------------------------------------------------------------------------------------------


def count(lab: Lab, *args: str) -> int:
    return count_jobs(lab, *args)


def fill_queue(lab: Lab, n: int) -> None:
    fill_held(lab, n, HELD)


def add_nodes(lab: Lab, names: list[str], cpus: int) -> None:
    reserve_new_nodes(lab, names, RESERVATION, cpus=cpus, memory_mb=cpus * 20, minutes=600)


def clear_placeholders(lab: Lab) -> None:
    lab.run(["scancel", f"--reservation={RESERVATION}"], check=False)
    for _ in range(120):
        if not count(lab, "-R", RESERVATION, "-t", "PD,R,CG"):
            return
        time.sleep(0.5)


# -- the workload ---------------------------------------------------------------------------------------


def pod_docs(pods: int, gangs: int, gang_size: int, tag: str) -> list[dict[str, Any]]:
    docs = []
    for i in range(pods):
        g, k = divmod(i, gang_size)
        notes = {PREFIX + "reservation": RESERVATION, PREFIX + "share-node": "true"}
        name = f"{tag}-s-{i}"
        if g < gangs:
            name = f"{tag}-g{g}-{k}"
            notes |= {PREFIX + "group": f"{tag}-g{g}", PREFIX + "group-size": str(gang_size)}
        container = {"name": "m", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}
        docs.append(
            {
                "metadata": {"name": name, "namespace": NAMESPACE, "annotations": notes},
                "spec": {"schedulerName": "slurm-bridge", "containers": [container]},
            }
        )
    return docs


def k8s_nodes(names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The Kubernetes nodes, Ready and labelled for the bridge."""
    return [
        (
            "nodes",
            {
                "metadata": {"name": name, "labels": {"slurm-keda.io/bridge": "true"}},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": dict(ALLOCATABLE),
                },
            },
        )
        for name in names
    ]


# -- measuring ------------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    pods: int
    bound_at: dict[str, float] = field(default_factory=dict)
    job_of: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    requests: int = 0
    megabytes: float = 0.0
    """Body bytes received from slurmrestd, MB."""
    latencies: list[float] = field(default_factory=list)
    starts_rel: list[float] = field(default_factory=list)
    """When Slurm started each bound pod's job, from the pods' creation."""
    seen_running: dict[int, float] = field(default_factory=dict)
    """ours: job id → when the poller's snapshot first showed it RUNNING."""
    polls: list[tuple[float, float]] = field(default_factory=list)
    """ours: (poll, jobs part) seconds of each poll during the run."""
    partial: int = 0
    """ours: snapshots published while a poll's single-job reads went on."""
    stages: dict[str, list[float]] = field(default_factory=dict)
    """ours: RUNNING → in a snapshot, in a snapshot → bound (s), per bound pod."""

    def every(self, timeout: float) -> list[float]:
        """The latencies, a pod never bound counting as the timeout."""
        return self.latencies + [timeout] * (self.pods - len(self.latencies))

    def row(self, timeout: float) -> str:
        minutes = max(1e-9, self.ended - self.started) / 60
        every = self.every(timeout)
        return (
            f"{self.name:<12} {len(self.bound_at):>5}/{self.pods:<5} {pct(every, 50):>8.2f}"
            f" {pct(every, 99):>8.2f} {self.ended - self.started:>8.1f} {self.requests:>9}"
            f" {self.requests / minutes:>10.0f} {self.megabytes / minutes:>9.0f}"
        )


async def wait_bound(kube: KubeProcess, total: int, timeout: float) -> None:
    """Until ``total`` pods are bound or ``timeout`` s passed (the fake records each binding's moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and await kube.bound() < total:
        await asyncio.sleep(0.2)


async def collect_bindings(kube: KubeProcess, result: Result) -> None:
    """Each bound pod's binding moment and Slurm job (its job-id annotation, written with the binding)."""
    for key, (at, notes) in (await kube.bindings()).items():
        name = key.partition("/")[2]
        result.bound_at[name] = at
        if notes.get(JOB_ID_ANNOTATION):
            result.job_of[name] = int(notes[JOB_ID_ANNOTATION])


async def start_times(slurm: SlurmClient, job_ids: set[int]) -> dict[int, float]:
    """Each bound pod's job's start (its own ``/job/{id}``, four at a time: a full listing after the run
    rendered for 30 s and more beside the queue and was retried until slurmrestd was killed for memory)."""
    out: dict[int, float] = {}
    todo = iter(sorted(job_ids))

    async def lane() -> None:
        for job_id in todo:
            doc = json.loads(await slurm.get(f"/slurm/{VERSION}/job/{job_id}", endpoint="bench-job"))
            for job in doc.get("jobs", []):
                start = job.get("start_time", {})
                if int(job["job_id"]) == job_id and start.get("set"):
                    out[job_id] = float(start["number"])

    await asyncio.gather(*(lane() for _ in range(4)))
    return out


@contextlib.asynccontextmanager
async def kube_for(nodes: list[str], tmp: Path) -> AsyncIterator[tuple[KubeProcess, Kube]]:
    """The fake API server in its own process (it must not share our CPU), and a client of it."""
    async with KubeProcess(k8s_nodes(nodes)) as fake:
        cfg = await load_configuration(write_kubeconfig(tmp / "kubeconfig", fake.url))
        async with client.ApiClient(cfg) as api:
            yield fake, Kube(api)


def measure(result: Result, starts: dict[int, float]) -> None:
    jobs = {p: result.job_of[p] for p in result.bound_at if result.job_of.get(p) in starts}
    result.latencies = [max(0.0, result.bound_at[p] - starts[j]) for p, j in jobs.items()]
    result.starts_rel = [starts[j] - result.started for j in jobs.values()]
    seen = result.seen_running
    if seen:
        both = {p: j for p, j in jobs.items() if j in seen}
        result.stages = {
            "RUNNING → in a snapshot": [max(0.0, seen[j] - starts[j]) for j in both.values()],
            "in a snapshot → bound": [max(0.0, result.bound_at[p] - seen[j]) for p, j in both.items()],
        }


def precise_starts(lab: Lab, offset: int, start_times: dict[int, float]) -> dict[int, float]:
    """Job id → when Slurm started it, to the millisecond where slurmctld's log (from byte ``offset``) says:
    its scheduler's ``Allocate``/``Started`` line; else, for a job whose ``start_time`` second is its
    submission's, the submission's stamp (slurmctld started it inside the submit RPC, which logs no
    start line); else the middle of the ``start_time`` second (the API's resolution, ±0.5 s)."""
    events, _ = log_events(lab.state_dir / "log" / "slurmctld.log", offset)
    logged: dict[int, float] = {}
    submitted: dict[int, float] = {}
    for kind, job_id, at in events:
        if kind == "start":
            logged.setdefault(job_id, at)
        elif kind == "new":
            submitted.setdefault(job_id, at)
    out = {}
    for job_id, second in start_times.items():
        if job_id in logged:
            out[job_id] = logged[job_id]
        elif job_id in submitted and math.floor(submitted[job_id]) == second:
            out[job_id] = submitted[job_id]
        else:
            out[job_id] = second + 0.5
    return out


async def watch_running(poller: Poller, result: Result) -> None:
    """Note when each job first shows RUNNING in the poller's snapshot."""
    snap = None
    status = poller.status
    while True:
        snap = await poller.wait_next(snap)
        now = time.time()
        started, finished = status.last_poll_started or 0.0, status.last_poll_finished or -1.0
        if finished >= started:  # a poll ended (not a snapshot published while its reads went on)
            result.polls.append((status.last_poll_duration, status.endpoints["jobs"].last_duration))
        else:
            result.partial += 1
        for job in snap.jobs:
            if job.state == "RUNNING":
                result.seen_running.setdefault(job.job_id, now)


def slurm_client(lab: Lab) -> SlurmClient:
    return SlurmClient(ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file)))


# -- ours -----------------------------------------------------------------------------------------------


async def run_ours(lab: Lab, args: argparse.Namespace, nodes: list[str], policy: Policy, tmp: Path) -> Result:
    result = Result("ours", args.pods)
    async with kube_for(nodes, tmp) as (fake, kube), slurm_client(lab) as slurm:
        session = SlurmSession(slurm, api_version=VERSION)
        poller = Poller(session, PollerConfig(interval=args.poll_interval))
        bridge = Bridge(
            poller,
            session,
            kube,
            BridgeOptions(
                instance="bench-ours", policy=policy, pod_groups=False, submit_lanes=args.submit_lanes
            ),
        )
        tasks = [
            asyncio.create_task(poller.run(), name="poller"),
            asyncio.create_task(bridge.run(), name="bridge"),
        ]
        await poller.wait_next(None)
        tasks.append(asyncio.create_task(watch_running(poller, result), name="watch-running"))
        log_offset = log_end(lab.state_dir / "log" / "slurmctld.log")
        before, bytes_before = slurm.requests_sent, slurm.bytes_received
        result.started = time.time()
        await fake.put("pods", pod_docs(args.pods, args.gangs, args.gang_size, "o"))
        await wait_bound(fake, args.pods, args.timeout)
        result.ended = time.time()
        await collect_bindings(fake, result)
        result.requests = slurm.requests_sent - before
        result.megabytes = (slurm.bytes_received - bytes_before) / 1e6
        jobs_poll, sync = poller.status.endpoints["jobs"], poller.status.jobs_sync
        print(
            f"  ours: jobs polled {jobs_poll.successes}x, {sum(sync.full_listings.values())} full listing(s)"
            f" ({dict(sync.full_listings)}, last {sync.listing_duration:.1f} s),"
            f" {sync.state_reads} /jobs/state and {sync.job_reads} /job/{{id}} reads"
        )
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        starts = await start_times(slurm, set(result.job_of.values()))
    measure(result, precise_starts(lab, log_offset, starts))
    return result


# -- the Go bridge's approach ---------------------------------------------------------------------------


class _JobState(msgspec.Struct):
    job_id: int
    job_state: list[str] = []
    nodes: str = ""


class _Jobs(msgspec.Struct):
    jobs: list[_JobState] = []


_JOBS = msgspec.json.Decoder(_Jobs)


async def run_go_approach(
    lab: Lab, args: argparse.Namespace, nodes: list[str], policy: Policy, tmp: Path
) -> Result:
    result = Result("go-approach", args.pods)
    docs = pod_docs(args.pods, args.gangs, args.gang_size, "g")
    async with kube_for(nodes, tmp) as (fake, kube), slurm_client(lab) as slurm:
        pods = [decode_pod(json.dumps(doc)) for doc in await fake.put("pods", docs)]
        # what each pod's job is: one per single pod, one per gang (members in rank order)
        groups: dict[str, list[Pod]] = {}
        for p in pods:
            m = membership(p)
            groups.setdefault(m.group.name if m else p.metadata.uid, []).append(p)
        requests: dict[str, tuple[str, JobRequest, int]] = {}
        for key, members in groups.items():
            reqs = [
                admit(p, scheduler_name="slurm-bridge", own_namespace="x", policy=policy) for p in members
            ]
            assert all(isinstance(r, JobRequest) for r in reqs), reqs
            request = reqs[0] if len(reqs) == 1 else gang_request(reqs, f"group {NAMESPACE}/{key}")  # type: ignore[arg-type]
            assert isinstance(request, JobRequest)
            for rank, p in enumerate(members):
                requests[p.metadata.uid] = (key, request, rank)
        submitted: dict[str, int] = {}
        queue: list[tuple[float, int, Pod, float]] = []
        seq = itertools.count()
        result.started = time.time()
        for p in pods:
            heapq.heappush(queue, (time.monotonic(), next(seq), p, 1.0))
        deadline = time.monotonic() + args.timeout
        while queue and time.monotonic() < deadline:
            ready, _, p, backoff = heapq.heappop(queue)
            if ready > time.monotonic():
                await asyncio.sleep(ready - time.monotonic())
            key, request, rank = requests[p.metadata.uid]
            if key not in submitted:
                submitted[key] = await submit_job(slurm, VERSION, request, instance="bench-go")
            listing = _JOBS.decode(await slurm.get(f"/slurm/{VERSION}/jobs", endpoint="jobs"))
            job = next((j for j in listing.jobs if j.job_id == submitted[key]), None)
            if job is not None and "RUNNING" in job.job_state and job.nodes:
                host = hostlist_expand(job.nodes, limit=4096)[rank]
                await kube.bind(p, host, {JOB_ID_ANNOTATION: str(job.job_id)})
            else:
                heapq.heappush(queue, (time.monotonic() + backoff, next(seq), p, min(10.0, backoff * 2)))
        await wait_bound(fake, args.pods, 1.0)
        result.ended = time.time()
        await collect_bindings(fake, result)
        result.requests = slurm.requests_sent
        result.megabytes = slurm.bytes_received / 1e6
        starts = await start_times(slurm, set(result.job_of.values()))
    measure(result, starts)
    return result


async def run(args: argparse.Namespace) -> int:
    lab = Lab("26.05")
    lab.up()
    nodes = [f"bb-{i}" for i in range(1, args.nodes + 1)]
    print(f"lab 26.05: Slurm {lab.release()}; {args.nodes} nodes of {args.cpus} CPUs; {args.pods} pods")
    fill_queue(lab, args.queue)
    add_nodes(lab, nodes, args.cpus)
    print(f"queue: {count(lab)} jobs in squeue during the runs")
    policy = parse_policy(
        {
            "namespaces": {
                NAMESPACE: {
                    "user_id": 0,
                    "partitions": ["dyn"],
                    "reservations": [RESERVATION],
                    "allow_shared_nodes": True,
                }
            }
        }
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    results = []
    try:
        runners = {"ours": run_ours, "go-approach": run_go_approach}
        for runner in (runners[name] for name in args.approaches.split(",")):
            clear_placeholders(lab)
            lab.restart_restd()  # each approach from a fresh slurmrestd: it keeps GBs of every listing
            results.append(await runner(lab, args, nodes, policy, tmp))
            print(f"  {results[-1].name}: {len(results[-1].bound_at)} bound")
    finally:
        clear_placeholders(lab)
        lab.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], check=False)
        for name in nodes:
            with contextlib.suppress(Exception):
                lab.remove_node(name)
        if args.clean:
            lab.run(["scancel", "-n", HELD], check=False)
    gangs = f"{args.gangs} gangs of {args.gang_size} + {args.pods - args.gangs * args.gang_size} single pods"
    print(f"\n{args.pods} pods ({gangs}), {args.queue} other jobs queued; timeout {args.timeout:.0f} s")
    head = f"{'approach':<12} {'bound':>11} {'p50 s':>8} {'p99 s':>8} {'total s':>8} {'requests':>9}"
    print(head + f" {'req/min':>10} {'MB/min':>9}")
    for r in results:
        print(r.row(args.timeout))
    for r in results:
        started = sorted(r.starts_rel)
        bound = sorted(at - r.started for at in r.bound_at.values())
        if started and bound:
            print(
                f"{r.name}: Slurm started the jobs {started[0]:.1f}–{started[-1]:.1f} s after the pods were"
                f" created; bound {bound[0]:.1f}–{bound[-1]:.1f} s"
            )
    for r in results:
        for stage, values in r.stages.items():
            print(f"{r.name}: {stage}: p50 {pct(values, 50):.2f} s, p99 {pct(values, 99):.2f} s")
        if r.polls:
            polls, jobs = [p for p, _ in r.polls], [j for _, j in r.polls]
            print(
                f"{r.name}: {len(polls)} polls, each p50 {pct(polls, 50):.2f} s (jobs {pct(jobs, 50):.2f} s),"
                f" max {max(polls):.2f} s; {r.partial} snapshots published during polls' reads"
            )
    if len(results) == 2 and results[0].latencies and results[1].latencies:
        ours, go = results
        p50 = pct(go.every(args.timeout), 50) / max(0.01, pct(ours.every(args.timeout), 50))
        per_minute = [r.megabytes / max(1e-9, r.ended - r.started) for r in (go, ours)]
        mb = per_minute[0] / max(1e-9, per_minute[1])
        print(f"ratio go-approach / ours: p50 ≥ {p50:.1f}x, MB read from slurmrestd per minute {mb:.1f}x")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--gangs", type=int, default=50)
    p.add_argument("--gang-size", type=int, default=4)
    p.add_argument("--queue", type=int, default=10000)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--cpus", type=int, default=256)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--clean", action="store_true", help="cancel the held jobs afterwards")
    p.add_argument("--approaches", default="ours,go-approach")
    p.add_argument("--poll-interval", type=float, default=10.0, help="ours: the poller's interval (s)")
    p.add_argument("--submit-lanes", type=int, default=4, help="ours: submissions in flight at once")
    raise SystemExit(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
