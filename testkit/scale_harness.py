"""KEDA + HPA + the Slinky operator, played against the real Slurm lab
(see ``tests/live/test_autoscale_live.py``).

A NodeSet-like group of dynamic slurmd nodes (``slurmd -Z``, Feature ``dyn``, partition ``dyn`` of the 26.05
lab) starts at zero. Three parts scale it, each doing what its real counterpart documents:

**The trigger** (:class:`DemandFeed`) — what KEDA asks:

* :class:`ScalerFeed`, ours: a real gRPC client of a ``slurm-keda serve --grpc-listen`` subprocess polling
  the lab every second, speaking KEDA's external scaler protocol as an ``external-push`` trigger does:
  ``StreamIsActive`` (pushed activity), ``IsActive`` (polled every ``pollingInterval``), ``GetMetricSpec``
  (the HPA target, 1) and ``GetMetrics`` (desired nodes).
* :class:`PendingJobsFeed`, the naive trigger of SchedMD's Slinky autoscaling guide: a ``prometheus``
  trigger on the partition's pending-job count with a ``threshold``. The count is read from the same
  ``serve`` process's ``/metrics`` (``slurm_jobs{partition,state="pending"}``, a pending array counts each
  task) at every KEDA poll and HPA sync — fresher than a real Prometheus between scrapes, so the naive
  trigger is, if anything, favoured.

**KEDA** (:class:`Autoscaler`): every ``polling_interval`` (and at once on a pushed message) it asks the
trigger for activity. Active at 0 replicas → ``max(minReplicaCount, 1)``; inactive for ``cooldown``
seconds since the last activity at > 0 replicas (``minReplicaCount`` 0) → 0.

**HPA** (:func:`hpa_recommendation`, :class:`Stabilizer`): every ``sync_period`` while replicas ≥ 1, for an
External metric — target type ``AverageValue``: ``desired = ⌈metric / target⌉``, unchanged while
``|metric / (target × current) − 1| ≤ tolerance``; type ``Value``: ``desired = ⌈current × metric / target⌉``,
unchanged while ``|metric / target − 1| ≤ tolerance``. Then the stabilization windows (Kubernetes'
``stabilizeRecommendationWithBehaviors``): scale-up takes the *lowest* recommendation of its window (0 s:
the current one), scale-down the *highest* of its window; then clamp to ``[max(minReplicaCount, 1),
maxReplicaCount]``. Rate policies (pods/percent per period) are not modelled.

**The operator** (:class:`NodeSetOperator`): replicas above the live nodes → first undrain nodes being
drained, then start new dynamic nodes (``Lab.add_node(..., dynamic=True)``, names ``dyn-<ordinal>``, lowest
free ordinal, started in parallel). Replicas below → drain surplus nodes (idle ones first, then the highest
ordinal), and remove a draining node (stop slurmd, delete the node) only once it runs no job — Slinky
drains a node before it deletes its pod. Node-seconds of idle nodes (no allocated CPU: starting, idle or
drained) are integrated over time.

Blocking lab calls run in threads (``asyncio.to_thread``) so pushed messages are handled at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import statistics
import sys
import time
import urllib.request
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import grpc
import grpc.aio

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.session import SlurmSession
from lab import Lab
from lab.conf import DYN_FEATURE, NODE_CPUS, NODE_MEMORY_MB
from lab.record import parse_scontrol_oneliners
from slurm_keda.configs import poller_config
from slurm_keda.settings import PollSettings
from testkit.keda import KedaClient
from testkit.tools import eventually, free_port

T = TypeVar("T")

POLL = 0.2
"""Seconds between two looks at a condition."""
SCRIPT = Path(sys.executable).parent / "slurm-keda"
SCALER_START_TIMEOUT = 30.0


async def lab_snapshot(lab: Lab) -> Snapshot:
    """One poll of the lab's slurmrestd, of what ``serve`` reads by default (slurmdbd's limits and
    slurmctld's configuration included where offered)."""
    config = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    async with SlurmClient(config) as client:
        snap = await Poller(SlurmSession(client), poller_config(PollSettings())).poll_once()
    assert snap is not None, "no snapshot from the lab"
    return snap


def metric_sample(body: str, name: str, **labels: str) -> float | None:
    """The value of one series in a Prometheus text exposition (labels in any order), or None."""
    want = sorted(f'{k}="{v}"' for k, v in labels.items())
    for line in body.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if m and sorted(m.group(1).split(",") if m.group(1) else []) == want:
            return float(m.group(2))
    return None


# ------------------------------------------------------------------------------------ slurm-keda serve


class ScalerProcess:
    """``slurm-keda serve`` against a lab: /metrics on ``http_port``, KEDA's protocol on ``grpc_port``."""

    def __init__(
        self,
        lab: Lab,
        log: Path,
        poll_interval: float = 1.0,
        *,
        url: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.lab = lab
        self.log = log
        self.poll_interval = poll_interval
        self.url = url or lab.url
        """slurmrestd's URL as serve is given it (the lab's, or a proxy's in front of it)."""
        self.args = tuple(args)
        """More ``serve`` flags."""
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    async def __aenter__(self) -> ScalerProcess:
        with open(self.log, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                str(SCRIPT),
                "serve",
                "--slurmrestd-url",
                self.url,
                "--token-file",
                str(self.lab.token_file),
                "--listen-address",
                "127.0.0.1",
                "--listen-port",
                str(self.http_port),
                "--grpc-listen",
                self.grpc_address,
                "--poll-interval",
                str(self.poll_interval),
                "--log-level",
                "warning",
                *self.args,
                stdout=out,
                stderr=out,
            )
        await eventually(self._ready, SCALER_START_TIMEOUT, f"slurm-keda serve to be ready (log {self.log})")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.returncode is None, f"serve exited; see {self.log}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    async def scrape(self) -> str:
        def get() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        return await asyncio.to_thread(get)


# ------------------------------------------------------------------------------------------ triggers


class DemandFeed(Protocol):
    """The one way the harness learns demand: what KEDA (activity) and the HPA (metric, target) read."""

    name: str

    async def is_active(self) -> bool: ...

    async def metric(self) -> float: ...

    async def target(self) -> float:
        """The HPA's target value (AverageValue / Value) for :meth:`metric`."""
        ...

    def pushes(self) -> AsyncGenerator[bool, None] | None:
        """Activity pushed by the scaler (``external-push``), or None for a polled trigger."""
        ...


class ScalerFeed:
    """Our scaler, through KEDA's external scaler protocol (a real gRPC client of ``serve``)."""

    def __init__(self, channel: grpc.aio.Channel, metadata: Mapping[str, str], name: str = "ours") -> None:
        self.name = name
        self.client = KedaClient(channel, name=f"scale-{name}")
        self.metadata = dict(metadata)
        self._metric_name: str | None = None
        self._target: float | None = None

    async def is_active(self) -> bool:
        return await self.client.is_active(self.metadata)

    async def _load_spec(self) -> tuple[str, float]:
        if self._metric_name is None or self._target is None:
            (spec,) = (await self.client.metric_spec(self.metadata)).metricSpecs
            self._metric_name, self._target = spec.metricName, float(spec.targetSizeFloat or spec.targetSize)
        return self._metric_name, self._target

    async def target(self) -> float:
        return (await self._load_spec())[1]

    async def metric(self) -> float:
        name, _ = await self._load_spec()
        (value,) = (await self.client.metrics(self.metadata, name)).metricValues
        return float(value.metricValueFloat or value.metricValue)

    def pushes(self) -> AsyncGenerator[bool, None]:
        async def stream() -> AsyncGenerator[bool, None]:
            call = self.client.stream_is_active(self.metadata)
            try:
                async for msg in call:
                    yield bool(msg.result)
            finally:
                call.cancel()

        return stream()


class PendingJobsFeed:
    """The naive trigger: pending jobs of the partition, ``threshold`` per replica (activation above 0)."""

    def __init__(self, scaler: ScalerProcess, partition: str, threshold: float, name: str) -> None:
        self.name = name
        self.scaler = scaler
        self.partition = partition
        self.threshold = threshold

    async def metric(self) -> float:
        body = await self.scaler.scrape()
        return metric_sample(body, "slurm_jobs", partition=self.partition, state="pending") or 0.0

    async def is_active(self) -> bool:
        return await self.metric() > 0

    async def target(self) -> float:
        return self.threshold

    def pushes(self) -> None:
        return None


# ----------------------------------------------------------------------------------------- KEDA + HPA


@dataclass(frozen=True)
class KedaConfig:
    polling_interval: float = 1.0
    """``pollingInterval``: seconds between two activity checks (30 by default)."""
    cooldown: float = 5.0
    """``cooldownPeriod``: seconds without activity before 1 → 0 (300 by default)."""
    min_replicas: int = 0
    max_replicas: int = 10


@dataclass(frozen=True)
class HpaConfig:
    sync_period: float = 1.0
    """kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period`` (15 s by default)."""
    tolerance: float = 0.1
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    scale_up_window: float = 0.0
    scale_down_window: float = 5.0
    """``behavior.scaleDown.stabilizationWindowSeconds`` (300 by default)."""


def hpa_recommendation(metric: float, target: float, current: int, hpa: HpaConfig) -> int:
    """The HPA's replica count for one External metric (before stabilization and clamping)."""
    if hpa.metric_type == "AverageValue":
        if abs(metric / (target * current) - 1.0) <= hpa.tolerance:
            return current
        return math.ceil(metric / target)
    ratio = metric / target
    if abs(ratio - 1.0) <= hpa.tolerance:
        return current
    return math.ceil(current * ratio)


class Stabilizer:
    """Kubernetes' stabilization windows over the recommendations of the last window seconds."""

    def __init__(self, up_window: float, down_window: float) -> None:
        self.up_window = up_window
        self.down_window = down_window
        self.recs: deque[tuple[float, int]] = deque()

    def __call__(self, now: float, current: int, recommendation: int) -> int:
        keep = max(self.up_window, self.down_window)
        while self.recs and self.recs[0][0] < now - keep:
            self.recs.popleft()
        up = down = recommendation
        for at, rec in self.recs:
            if at > now - self.up_window:
                up = min(up, rec)
            if at > now - self.down_window:
                down = max(down, rec)
        self.recs.append((now, recommendation))
        result = current
        if result < up:
            result = up
        if result > down:
            result = down
        return result

    def clear(self) -> None:
        self.recs.clear()


# ------------------------------------------------------------------------------------------- operator


@dataclass
class NodeInfo:
    name: str
    ordinal: int
    phase: Literal["starting", "up", "draining"] = "starting"
    alloc_cpus: int = 0
    """CPUAlloc as Slurm last reported it."""
    completing: bool = False


class NodeSetOperator:
    """Starts/stops dynamic slurmd nodes of the lab to match ``replicas`` (Slinky's NodeSet controller)."""

    def __init__(self, lab: Lab, prefix: str = "dyn-", interval: float = 0.25) -> None:
        self.lab = lab
        self.prefix = prefix
        self.interval = interval
        self.replicas = 0
        self.nodes: dict[str, NodeInfo] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._removing: dict[str, asyncio.Task[None]] = {}
        self.idle_node_seconds = 0.0
        self.max_nodes = 0
        self.registered: list[float] = []
        """When each started node registered (monotonic)."""
        self._last: float | None = None
        self.errors: list[str] = []

    @property
    def live(self) -> list[NodeInfo]:
        """Nodes counted as replicas: starting or up, not draining."""
        return [n for n in self.nodes.values() if n.phase != "draining"]

    async def run(self) -> None:
        while True:
            await self.reconcile()
            await asyncio.sleep(self.interval)

    async def _states(self) -> dict[str, dict[str, str]]:
        text = await asyncio.to_thread(self.lab.run, ["scontrol", "show", "node", "-o"], check=False)
        return {row["NodeName"]: row for row in parse_scontrol_oneliners(text) if "NodeName" in row}

    async def reconcile(self) -> None:
        states = await self._states()
        now = time.monotonic()
        for node in self.nodes.values():
            row = states.get(node.name)
            if row is not None and node.phase != "starting":
                node.alloc_cpus = int(row.get("CPUAlloc", "0") or 0)
                node.completing = "COMPLETING" in row.get("State", "")
        if self._last is not None:
            idle = sum(1 for n in self.nodes.values() if n.alloc_cpus == 0 and not n.completing)
            self.idle_node_seconds += idle * (now - self._last)
        self._last = now
        live = self.live
        if len(live) < self.replicas:
            for node in sorted(
                (n for n in self.nodes.values() if n.phase == "draining" and n.name not in self._removing),
                key=lambda n: n.ordinal,
            )[: self.replicas - len(live)]:
                await asyncio.to_thread(
                    self.lab.run, ["scontrol", "update", f"nodename={node.name}", "state=resume"]
                )
                node.phase = "up"
            for _ in range(self.replicas - len(self.live)):
                self._start()
        elif len(live) > self.replicas:
            up = [n for n in live if n.phase == "up"]
            surplus = sorted(up, key=lambda n: (n.alloc_cpus > 0 or n.completing, -n.ordinal))
            for node in surplus[: len(live) - self.replicas]:
                reason = "reason=nodeset_scale_down"
                await asyncio.to_thread(
                    self.lab.run, ["scontrol", "update", f"nodename={node.name}", "state=drain", reason]
                )
                node.phase = "draining"
        for node in list(self.nodes.values()):
            if node.phase == "draining" and node.name not in self._removing:
                row = states.get(node.name, {})
                if int(row.get("CPUAlloc", "1") or 1) == 0 and "COMPLETING" not in row.get("State", ""):
                    self._removing[node.name] = asyncio.create_task(self._remove(node.name))
        self.max_nodes = max(self.max_nodes, len(self.nodes))

    def _start(self) -> None:
        used = {n.ordinal for n in self.nodes.values()}
        ordinal = next(i for i in range(len(used) + 1) if i not in used)
        name = f"{self.prefix}{ordinal}"
        self.nodes[name] = NodeInfo(name, ordinal)
        self._starting[name] = asyncio.create_task(self._add(name))

    async def _add(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.lab.add_node, name, dynamic=True)
        except Exception as e:  # reported by the test, never silently ignored
            self.errors.append(f"add {name}: {e}")
            self.nodes.pop(name, None)
            return
        finally:
            self._starting.pop(name, None)
        self.registered.append(time.monotonic())
        node = self.nodes.get(name)
        if node is not None and node.phase == "starting":
            node.phase = "up"

    async def _remove(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.lab.remove_node, name)
        except Exception as e:
            self.errors.append(f"remove {name}: {e}")
        finally:
            self.nodes.pop(name, None)
            self._removing.pop(name, None)

    async def shutdown(self) -> None:
        """Wait for node starts/removals in flight, then remove every node left."""
        for task in list(self._starting.values()) + list(self._removing.values()):
            with contextlib.suppress(Exception):
                await task
        for name in list(self.nodes):
            await asyncio.to_thread(self.lab.remove_node, name)
            self.nodes.pop(name, None)


@dataclass
class Sample:
    at: float
    replicas: int
    nodes: int
    busy: int


@dataclass
class Autoscaler:
    """KEDA's scale loop and the HPA it creates, over one :class:`DemandFeed`, driving ``operator``."""

    feed: DemandFeed
    operator: NodeSetOperator
    keda: KedaConfig = field(default_factory=KedaConfig)
    hpa: HpaConfig = field(default_factory=HpaConfig)
    last_active: float | None = None
    first_active: float | None = None
    """When KEDA first saw the trigger active (monotonic)."""
    active_seen: list[float] = field(default_factory=list)
    """Every time activity was reported True (pushed or polled)."""
    pushed: list[tuple[float, bool]] = field(default_factory=list)
    keda_checks: int = 0
    hpa_syncs: int = 0
    timeline: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stabilizer = Stabilizer(self.hpa.scale_up_window, self.hpa.scale_down_window)

    @property
    def replicas(self) -> int:
        return self.operator.replicas

    def _set(self, replicas: int) -> None:
        self.operator.replicas = replicas

    def on_activity(self, active: bool) -> None:
        now = time.monotonic()
        if active:
            self.active_seen.append(now)
            self.last_active = now
            if self.first_active is None:
                self.first_active = now
            if self.replicas == 0:
                self._set(max(self.keda.min_replicas, 1))
        elif (
            self.replicas > 0
            and self.keda.min_replicas == 0
            and (self.last_active is None or now - self.last_active >= self.keda.cooldown)
        ):
            self._set(0)
            self.stabilizer.clear()

    async def _keda_loop(self) -> None:
        while True:
            self.on_activity(await self.feed.is_active())
            self.keda_checks += 1
            await asyncio.sleep(self.keda.polling_interval)

    async def _push_loop(self, pushes: AsyncIterator[bool]) -> None:
        async for active in pushes:
            self.pushed.append((time.monotonic(), active))
            self.on_activity(active)

    async def _hpa_loop(self) -> None:
        while True:
            current = self.replicas
            if current > 0:
                metric, target = await self.feed.metric(), await self.feed.target()
                rec = hpa_recommendation(metric, target, current, self.hpa)
                desired = self.stabilizer(time.monotonic(), current, rec)
                desired = min(max(desired, max(self.keda.min_replicas, 1)), self.keda.max_replicas)
                if self.replicas > 0:  # KEDA may have scaled to zero while the metric was read
                    self._set(desired)
            self.hpa_syncs += 1
            await asyncio.sleep(self.hpa.sync_period)

    async def _sample_loop(self) -> None:
        while True:
            nodes = self.operator.nodes.values()
            busy = sum(1 for n in nodes if n.alloc_cpus > 0 or n.completing)
            self.timeline.append(Sample(time.monotonic(), self.replicas, len(nodes), busy))
            await asyncio.sleep(0.25)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Autoscaler]:
        """KEDA, the HPA, the operator and a sampler run while inside; all stopped (and awaited) after."""
        tasks = [
            asyncio.create_task(self._keda_loop(), name="keda"),
            asyncio.create_task(self._hpa_loop(), name="hpa"),
            asyncio.create_task(self.operator.run(), name="operator"),
            asyncio.create_task(self._sample_loop(), name="sampler"),
        ]
        pushes = self.feed.pushes()
        if pushes is not None:
            tasks.append(asyncio.create_task(self._push_loop(pushes), name="keda-push"))
        try:
            yield self
        finally:
            for t in tasks:
                t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            if pushes is not None:
                with contextlib.suppress(Exception):
                    await pushes.aclose()
            crashed = [
                r
                for r in results
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
            ]
            if crashed:
                raise crashed[0]

    async def ticks(self, keda: int, hpa: int, timeout: float = 30.0) -> None:
        """Wait until KEDA checked ``keda`` more times and the HPA synced ``hpa`` more times."""
        k0, h0 = self.keda_checks, self.hpa_syncs
        await eventually(
            lambda: self.keda_checks >= k0 + keda and self.hpa_syncs >= h0 + hpa,
            timeout,
            f"{keda} KEDA checks and {hpa} HPA syncs",
        )


# ------------------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class WorkJob:
    key: str
    args: str
    """sbatch arguments; ``{key}`` is replaced by that job's id."""
    seconds: int = 0
    """How long it sleeps; 0 for a job that must never start (held, dependent, begin time)."""


def submit(
    lab: Lab, partition: str, jobs: Iterable[WorkJob], ids: dict[str, int] | None = None
) -> dict[str, int]:
    ids = {} if ids is None else ids
    for job in jobs:
        argv = job.args.format(**ids).split()
        command = f"sleep {job.seconds}" if job.seconds else "sleep 3600"
        ids[job.key] = lab.sbatch("-p", partition, "-t", "10", "-J", job.key, *argv, command=command)
    return ids


def job_states(lab: Lab, ids: Sequence[int]) -> dict[int, str]:
    """Base state of each job (``squeue -t all``; a job slurmctld forgot counts as COMPLETED)."""
    text = lab.run(["squeue", "-h", "-t", "all", "-j", ",".join(map(str, ids)), "-o", "%i|%T"], check=False)
    seen = {int(i): s for i, s in (line.split("|") for line in text.splitlines() if line)}
    return {i: seen.get(i, "COMPLETED") for i in ids}


def summarize(values: Sequence[float]) -> tuple[float, float]:
    """(mean, max); (nan, nan) for none."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), max(values)


# ------------------------------------------------------------------------------------------- scenario

FeedFactory = Callable[[ScalerProcess, grpc.aio.Channel], DemandFeed]


@dataclass
class RunResult:
    """What one scenario run measured; times in seconds from the eligible jobs' submission."""

    name: str
    held_phase_replicas: int
    """Most replicas while only held/dependent/begin-time jobs were queued."""
    held_phase_active: bool
    """Whether the trigger reported activity then."""
    window_attempts: int
    """Submissions of the held-phase jobs until serve's first snapshot of them was inside the window."""
    activation: float | None
    """Until KEDA first saw the trigger active (pushed or polled) after the submission."""
    first_node: float | None
    """Until the first node registered with slurmctld."""
    peak_replicas: int
    peak_at: float | None
    all_started: float | None
    """Until every eligible job had started (observed by the harness)."""
    jobs_done: float
    zero_at: float | None
    """Until replicas and nodes were back at zero after the jobs (None: not within the window)."""
    window: float
    """Seconds measured in all (held phase + jobs + settle)."""
    idle_node_minutes: float
    max_nodes: int
    waits: list[float]
    """Slurm's start − submit time of each eligible job (1 s resolution)."""
    never_started: list[str]
    """Ineligible jobs still pending at the end (all of them, when nothing went wrong)."""
    operator_errors: list[str]
    timeline: list[Sample]

    COLUMNS = (
        ("trigger", 10),
        ("held", 5),
        ("active", 6),
        ("node1", 6),
        ("peak", 5),
        ("at", 6),
        ("started", 7),
        ("wait", 6),
        ("max", 5),
        ("idle n·min", 10),
        ("zero", 6),
        ("window", 6),
    )
    """The side-by-side table: replicas during the held phase; seconds from the eligible submission to
    activity, first node, peak replicas, all jobs started; job wait mean/max; idle node-minutes; seconds
    until back at zero; seconds measured."""

    @classmethod
    def header(cls) -> str:
        return " ".join(f"{title:>{width}}" for title, width in cls.COLUMNS)

    def row(self) -> str:
        mean, worst = summarize(self.waits)

        def f(v: float | None) -> str:
            return "-" if v is None or math.isnan(v) else f"{v:.1f}"

        cells = (
            self.name,
            str(self.held_phase_replicas),
            f(self.activation),
            f(self.first_node),
            str(self.peak_replicas),
            f(self.peak_at),
            f(self.all_started),
            f(mean),
            f(worst),
            f"{self.idle_node_minutes:.2f}",
            f(self.zero_at),
            f(self.window),
        )
        return " ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, self.COLUMNS, strict=True))


WINDOW_LEAD = 0.1
"""Seconds before serve's next poll at which the held-phase jobs are submitted (three ``sbatch`` take
~30 ms), so that poll reads them before slurmctld's next pass gives them their reason."""
WINDOW_ATTEMPTS = 10
WINDOW_SCRAPE = 0.02
"""Seconds between scrapes while a snapshot is awaited: a snapshot is served for about a second."""


async def _queued(scaler: ScalerProcess, partition: str, count: int) -> str | None:
    """serve's /metrics once a snapshot shows ``count`` pending jobs in ``partition``, else None."""
    body = await scaler.scrape()
    pending = metric_sample(body, "slurm_jobs", partition=partition, state="pending")
    return body if pending == count else None


async def _submit_in_window(
    lab: Lab,
    scaler: ScalerProcess,
    partition: str,
    jobs: Sequence[WorkJob],
    ids: dict[str, int],
    in_window: int | None,
) -> int:
    """Submit ``jobs`` (at once, with ``in_window`` None) so that the first snapshot of serve holding them was
    taken inside slurmctld's first-pass window: ``in_window`` of them still show ``PartitionConfig`` there
    (a dependency or begin-time job on a NodeSet at zero, ``docs/eligibility.md``). Returns the attempts
    used.

    The jobs go in :data:`WINDOW_LEAD` s before serve's next poll (the last one's end, read off /metrics, plus
    the poll interval). Whether the window was hit is read, not assumed: when slurmctld's pass came between
    the submission and the poll, the jobs are cancelled and the attempt repeated (the two loops drift apart
    by serve's poll time each second), up to :data:`WINDOW_ATTEMPTS` times; then AssertionError.
    """

    async def poll_end(after: float | None) -> float | None:
        body = await scaler.scrape()
        end = metric_sample(body, "slurm_exporter_last_success_timestamp_seconds")
        return end if end is not None and end != after else None

    if in_window is None:
        await asyncio.to_thread(submit, lab, partition, jobs, ids)
        await eventually(lambda: _queued(scaler, partition, len(jobs)), 30.0, f"{len(jobs)} pending jobs")
        return 1
    seen: list[float | None] = []
    for attempt in range(1, WINDOW_ATTEMPTS + 1):
        last = await poll_end(None)
        end = await eventually(
            lambda last=last: poll_end(last), 10.0, "a poll of serve", interval=WINDOW_SCRAPE
        )
        await asyncio.sleep(max(0.0, end + scaler.poll_interval - WINDOW_LEAD - time.time()))
        await asyncio.to_thread(submit, lab, partition, jobs, ids)
        body = await eventually(
            lambda: _queued(scaler, partition, len(jobs)),
            30.0,
            f"serve to show {len(jobs)} pending jobs in {partition}",
            interval=WINDOW_SCRAPE,
        )
        unsettled = metric_sample(body, "slurm_jobs_pending", partition=partition, reason="PartitionConfig")
        if unsettled == in_window:
            return attempt
        seen.append(unsettled)
        wanted = [str(ids[j.key]) for j in jobs]
        await asyncio.to_thread(lab.run, ["scancel", *wanted], check=False)
        await eventually(
            lambda: _queued(scaler, partition, 0), 30.0, f"serve to show no job pending in {partition}"
        )
    raise AssertionError(
        f"no poll of serve landed in slurmctld's first-pass window in {WINDOW_ATTEMPTS} attempts"
        f" (PartitionConfig jobs in its first snapshot of them: {seen}, {in_window} wanted)"
    )


async def _run_jobs(lab: Lab, name: str, ids: Sequence[int], t0: float, timeout: float) -> float | None:
    """Until every job completed; returns when all had started (seconds after ``t0``)."""
    all_started: float | None = None
    while True:
        states = await asyncio.to_thread(job_states, lab, ids)
        now = time.monotonic()
        if all_started is None and all(s != "PENDING" for s in states.values()):
            all_started = now - t0
        if all(s == "COMPLETED" for s in states.values()):
            return all_started
        bad = {i: s for i, s in states.items() if s not in _LIVE_STATES}
        assert not bad, f"{name}: jobs ended badly: {bad}"
        assert now < t0 + timeout, f"{name}: jobs not done after {timeout:.0f} s: {states}"
        await asyncio.sleep(0.5)


_LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "COMPLETED"})


async def run_scenario(
    lab: Lab,
    name: str,
    make_feed: FeedFactory,
    *,
    ineligible: Sequence[WorkJob],
    eligible: Sequence[WorkJob],
    partition: str,
    log_dir: Path,
    keda: KedaConfig,
    hpa: HpaConfig,
    in_window: int | None,
    job_timeout: float = 180.0,
) -> RunResult:
    """One run on a fresh lab and scaler.

    1. Held phase: the ineligible jobs alone, submitted so that serve's first snapshot holding them is
       inside slurmctld's first-pass window, where ``in_window`` of them show no reason of their own yet
       (:func:`_submit_in_window`; None: at once — a trigger that scales up for them gives the NodeSet
       nodes, and with nodes Slurm gives every job its reason at submission); then KEDA checked and the
       HPA synced twice more (both acted on a snapshot holding them).
    2. The eligible jobs (time 0), until all of them completed.
    3. Settle: ``cooldown + scale-down window + 10 s`` for the group to get back to zero (it may not:
       the naive trigger keeps nodes for the held jobs); the window ends then, or at zero.
    """
    await asyncio.to_thread(lab.restart)
    settle = keda.cooldown + hpa.scale_down_window + 10.0
    operator = NodeSetOperator(lab)
    ids: dict[str, int] = {}
    scaler_process = ScalerProcess(lab, log_dir / f"serve-{name}.log")
    async with scaler_process as scaler, grpc.aio.insecure_channel(scaler.grpc_address) as channel:
        auto = Autoscaler(make_feed(scaler, channel), operator, keda, hpa)
        try:
            async with auto.running():
                begin = time.monotonic()
                attempts = await _submit_in_window(lab, scaler, partition, ineligible, ids, in_window)
                await auto.ticks(keda=2, hpa=2)
                held_replicas = max((s.replicas for s in auto.timeline), default=0)
                held_active = bool(auto.active_seen)

                t0 = time.monotonic()
                await asyncio.to_thread(submit, lab, partition, eligible, ids)
                wanted = [ids[j.key] for j in eligible]
                all_started = await _run_jobs(lab, name, wanted, t0, job_timeout)
                jobs_done = time.monotonic() - t0
                zero_at: float | None = None
                end = time.monotonic() + settle
                while time.monotonic() < end:
                    if operator.replicas == 0 and not operator.nodes:
                        zero_at = time.monotonic() - t0
                        break
                    await asyncio.sleep(POLL)
                window = time.monotonic() - begin
                idle = operator.idle_node_seconds / 60.0
            snap = await lab_snapshot(lab)
        finally:
            await asyncio.to_thread(lab.run, ["scancel", "-p", partition], check=False)
            await operator.shutdown()
    by_id = {j.job_id: j for j in snap.jobs}
    waits = []
    for job in eligible:
        rec = by_id.get(ids[job.key])
        assert rec is not None and rec.submit_time is not None and rec.start_time is not None, job.key
        waits.append(rec.start_time - rec.submit_time)
    never = [j.key for j in ineligible if (r := by_id.get(ids[j.key])) is not None and r.state == "PENDING"]
    peak = max((s.replicas for s in auto.timeline), default=0)
    return RunResult(
        name=name,
        held_phase_replicas=held_replicas,
        held_phase_active=held_active,
        window_attempts=attempts,
        activation=next((t - t0 for t in auto.active_seen if t >= t0), None),
        first_node=next((t - t0 for t in operator.registered if t >= t0), None),
        peak_replicas=peak,
        peak_at=next((s.at - t0 for s in auto.timeline if s.replicas == peak and s.at >= t0), None),
        all_started=all_started,
        jobs_done=jobs_done,
        zero_at=zero_at,
        window=window,
        idle_node_minutes=idle,
        max_nodes=operator.max_nodes,
        waits=waits,
        never_started=never,
        operator_errors=list(operator.errors),
        timeline=list(auto.timeline),
    )


PARTITION = "dyn"


KEDA = KedaConfig(polling_interval=1.0, cooldown=5.0, min_replicas=0, max_replicas=10)


HPA = HpaConfig(sync_period=1.0, tolerance=0.1, metric_type="AverageValue", scale_down_window=5.0)


SCALER_METADATA = {
    "partition": PARTITION,
    "nodeset": DYN_FEATURE,
    "cpusPerNode": str(NODE_CPUS),
    "memoryPerNode": str(NODE_MEMORY_MB),
    "max": str(KEDA.max_replicas),
}
"""The external-push trigger's metadata: the dyn NodeSet, its node shape for scale from zero."""
