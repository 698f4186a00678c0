"""Faults between ``serve`` and the real 26.05 lab, and in the lab's own daemons: what the health signals,
the error counters and the scaler's answer do, and how fast ``serve`` recovers once the fault ends.

One ``serve`` (1 s polls, ``slurm_up`` 0 past 2.5 s of data age, demand flagged stale past 2.5 s) reads the
lab through :class:`testkit.fault_proxy.FaultProxy`. A job pending on the zero-node ``dyn`` partition keeps
the ``dyn`` target's desired nodes at a known non-zero value. For each fault: ``slurm_up`` must reach 0,
the fault's error kind must be counted, the desired value (on /metrics and through KEDA's gRPC protocol)
must hold and be flagged stale; after the fault ends ``slurm_up`` must be 1 again within two poll
intervals (plus the poll itself). The timings are logged and printed
as a "fault → what you see → time to recover" table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from lab import Lab
from testkit.fault_proxy import FaultProxy
from testkit.keda import connect
from testkit.loopback import RawServer
from testkit.scale_harness import ScalerProcess, metric_sample
from testkit.tools import eventually

log = logging.getLogger(__name__)

INTERVAL = 1.0
UP_MAX_AGE = 2.5
STALE_AFTER = 2.5
IDLE_TIMEOUT = 1.0
SERVE_ARGS = (
    *("--up-max-age", str(UP_MAX_AGE), "--demand-stale-after", str(STALE_AFTER)),
    *("--stream-idle-timeout", str(IDLE_TIMEOUT), "--request-timeout", "2.5", "--retries", "1"),
)
DETECT_WITHIN = UP_MAX_AGE + IDLE_TIMEOUT + 4.0
"""Seconds a fault may take to show as ``slurm_up 0``: data age past the limit, or a failed poll."""
RECOVER_WITHIN = 2 * INTERVAL + 1.5
"""Seconds from the fault's end to ``slurm_up 1``: two poll intervals, one retry's backoff, the poll."""
DYN = {"partition": "dyn", "cpusPerNode": "4", "memoryPerNode": "4096"}
"""The target the job pends on: the zero-node partition needs a node shape to count from zero."""


@dataclass(frozen=True)
class Fault:
    name: str
    expected_kind: str
    """The ``kind`` label counted on ``slurm_exporter_poll_errors_total{endpoint="jobs"}``."""
    proxy: str | None = None
    """A :data:`testkit.fault_proxy.FAULTS` name, or None for a daemon stopped with SIGSTOP."""
    only: str | None = None
    daemon: str | None = None


FAULTS = (
    Fault("slurmrestd frozen (no answer)", "timeout", proxy="freeze"),
    Fault("/jobs frozen, other endpoints fine", "timeout", proxy="freeze", only="/jobs"),
    Fault("/jobs drip-fed (1 byte / 50 ms)", "timeout", proxy="drip", only="/jobs"),
    Fault("HTTP 503 with errors[]", "http_503", proxy="status_503"),
    Fault("511 written twice (26.05, bad token)", "http_511", proxy="doubled_511"),
    Fault("302 to another origin", "http_302", proxy="redirect"),
    Fault("HTML instead of JSON", "not_json", proxy="garbage"),
    Fault("/jobs announcing 20 GiB", "too_large", proxy="oversize", only="/jobs"),
    Fault("connection reset", "unreachable", proxy="reset"),
    Fault("slurmrestd SIGSTOP", "timeout", daemon="slurmrestd-tcp"),
    Fault("slurmctld SIGSTOP", "", daemon="slurmctld"),
)


@dataclass
class Outcome:
    fault: Fault
    detected_after: float
    kinds: dict[str, float]
    held: bool
    """The desired value stayed what it was before the fault (on /metrics and gRPC), flagged stale."""
    recovered_after: float
    problems: list[str]


@contextlib.contextmanager
def stopped(lab: Lab, daemon: str) -> Iterator[None]:
    pid = lab._pid(daemon)
    assert pid is not None, f"the lab has no {daemon}"
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


class Reading:
    """One scrape of serve's /metrics."""

    def __init__(self, body: str) -> None:
        self.body = body

    def value(self, name: str, **labels: str) -> float | None:
        return metric_sample(self.body, name, **labels)

    @property
    def up(self) -> float | None:
        return self.value("slurm_up")

    @property
    def desired(self) -> float | None:
        return self.value("slurm_autoscaler_desired_nodes", target="dyn", partition="dyn")

    @property
    def stale(self) -> float | None:
        return self.value("slurm_autoscaler_stale")

    def error_kinds(self, endpoint: str = "jobs") -> dict[str, float]:
        out = {}
        prefix = f'slurm_exporter_poll_errors_total{{endpoint="{endpoint}",kind="'
        for line in self.body.splitlines():
            if line.startswith(prefix):
                kind = line[len(prefix) :].split('"', 1)[0]
                out[kind] = float(line.rsplit(" ", 1)[1])
        return out


@contextlib.asynccontextmanager
async def serve_through(lab: Lab, proxy_url: str, folder: Path) -> AsyncIterator[ScalerProcess]:
    targets = folder / "targets.yaml"
    targets.write_text("targets:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in DYN.items()) + "\n")
    args = (*SERVE_ARGS, "--autoscaler-targets-file", str(targets))
    async with ScalerProcess(lab, folder / "serve.log", INTERVAL, url=proxy_url, args=args) as scaler:
        yield scaler


async def run_fault(fault: Fault, lab: Lab, proxy: FaultProxy, scaler: ScalerProcess) -> Outcome:
    problems: list[str] = []

    async def reading() -> Reading:
        return Reading(await scaler.scrape())

    last: list[Reading] = []

    async def healthy() -> Reading | None:
        r = await reading()
        last[:] = [r]
        return r if r.up == 1 and r.stale == 0 and r.desired else None

    before = await eventually(healthy, 30.0, f"a healthy serve before '{fault.name}'", 0.1)
    desired = before.desired
    kinds_before = before.error_kinds()
    with contextlib.ExitStack() as stack:
        started = time.monotonic()
        if fault.proxy is not None:
            proxy.set(fault.proxy, fault.only)
        else:
            assert fault.daemon is not None
            stack.enter_context(stopped(lab, fault.daemon))

        async def down() -> Reading | None:
            r = await reading()
            return r if r.up == 0 else None

        await eventually(down, DETECT_WITHIN, f"slurm_up 0 under '{fault.name}'", 0.1)
        detected = time.monotonic() - started

        async def stale() -> Reading | None:
            r = await reading()
            return r if r.stale == 1 else None

        held_reading = await eventually(stale, STALE_AFTER + DETECT_WITHIN, "the demand flagged stale", 0.1)
        held = held_reading.desired == desired
        async with connect(scaler.grpc_port) as keda:
            answer = await keda.metrics(DYN)
        if answer.metricValues[0].metricValue != desired:
            held = False
            problems.append(f"gRPC answered {answer.metricValues[0].metricValue}, held value {desired}")
        if fault.expected_kind:

            async def counted() -> Reading | None:
                r = await reading()
                grew = r.error_kinds().get(fault.expected_kind, 0) > kinds_before.get(fault.expected_kind, 0)
                return r if grew else None

            try:
                await eventually(counted, 15.0, f"an error of kind {fault.expected_kind}", 0.2)
            except AssertionError as e:
                problems.append(str(e))
        kinds_now = (await reading()).error_kinds()
        ended = time.monotonic()
        proxy.clear()
    # the daemon got SIGCONT leaving the block
    try:
        await eventually(healthy, 30.0, f"recovery from '{fault.name}'", 0.05)
    except AssertionError as e:
        r = last[0]
        raise AssertionError(
            f"{e}: slurm_up {r.up}, stale {r.stale}, desired {r.desired} (held {desired})"
        ) from None
    recovered = time.monotonic() - ended
    grown = {k: v - kinds_before.get(k, 0) for k, v in kinds_now.items() if v > kinds_before.get(k, 0)}
    return Outcome(fault, detected, grown, held, recovered, problems)


async def test_faults_show_in_health_signals_hold_demand_and_recover(lab_2605: Lab, tmp_path: Path) -> None:
    job = lab_2605.sbatch("-p", "dyn", "-N", "1", "-J", "fault-hold")
    outcomes: list[Outcome] = []
    try:
        thief = RawServer(b"")  # a redirect's target: records any request it gets
        async with thief as thief_url:
            proxy = FaultProxy(lab_2605.url, thief=thief_url)
            async with proxy as proxy_url, serve_through(lab_2605, proxy_url, tmp_path) as scaler:

                async def desired_now() -> float | None:
                    r = Reading(await scaler.scrape())
                    return r.desired if r.up == 1 and r.desired else None

                await eventually(desired_now, 30.0, "the pending dyn job in the demand", 0.2)
                for fault in FAULTS:
                    outcomes.append(await run_fault(fault, lab_2605, proxy, scaler))
                    log.info("%s", outcomes[-1])
    finally:
        lab_2605.run(["scancel", str(job)], check=False)
    table = "\n".join(
        f"{o.fault.name:40} up=0 after {o.detected_after:4.1f} s  kinds {o.kinds}  held={o.held}"
        f"  recovered in {o.recovered_after:4.1f} s" + (f"  PROBLEMS {o.problems}" if o.problems else "")
        for o in outcomes
    )
    print(table)
    assert thief.requests == [], "a redirect was followed"
    bad = [
        o
        for o in outcomes
        if o.problems
        or not o.held
        or o.detected_after > DETECT_WITHIN
        or o.recovered_after > RECOVER_WITHIN
        or (o.fault.expected_kind and o.fault.expected_kind not in o.kinds)
    ]
    assert not bad, table


async def test_a_slurmctld_restart_is_seen_and_no_target_drops_below_its_busy_nodes(
    lab_2605: Lab, tmp_path: Path
) -> None:
    """What must keep holding (issue 40): slurmctld restarted under a running ``serve`` — ``slurm_up`` 0
    while it is down, 1 again once it is back, the cpu target's desired nodes never below its busy nodes,
    and the same process throughout (no restart needed)."""
    job = lab_2605.sbatch("-p", "cpu", "-N", "1", "-J", "busy-through-restart")
    samples: list[tuple[float | None, float | None, float | None]] = []
    try:
        targets = tmp_path / "targets.yaml"
        targets.write_text("targets:\n  - partition: cpu\n")
        args = (*SERVE_ARGS, "--autoscaler-targets-file", str(targets))
        async with ScalerProcess(lab_2605, tmp_path / "serve.log", INTERVAL, args=args) as scaler:

            async def sample() -> Reading:
                r = Reading(await scaler.scrape())
                busy = r.value("slurm_autoscaler_busy_nodes", target="cpu", partition="cpu")
                desired = r.value("slurm_autoscaler_desired_nodes", target="cpu", partition="cpu")
                samples.append((r.up, desired, busy))
                return r

            async def busy_up() -> Reading | None:
                r = await sample()
                return r if r.up == 1 and (samples[-1][2] or 0) >= 1 else None

            await eventually(busy_up, 30.0, "the running job's node busy", 0.2)
            pid = scaler.proc.pid
            await asyncio.to_thread(lab_2605.stop_ctld)

            async def down() -> Reading | None:
                r = await sample()
                return r if r.up == 0 else None

            await eventually(down, DETECT_WITHIN, "slurm_up 0 while slurmctld is down", 0.1)
            await asyncio.to_thread(lab_2605.start_ctld)

            async def back() -> Reading | None:
                r = await sample()
                return r if r.up == 1 and (samples[-1][2] or 0) >= 1 else None

            await eventually(back, 60.0, "slurm_up 1 again with the job's node busy", 0.1)
            assert scaler.proc.returncode is None and scaler.proc.pid == pid
    finally:
        if lab_2605.pid("slurmctld") is None:
            lab_2605.start_ctld()
        lab_2605.run(["scancel", str(job)], check=False)
    seen = [(d, b) for _, d, b in samples if d is not None and b is not None]
    assert seen and all(d >= b for d, b in seen), samples
    assert min(d for d, _ in seen) >= 1, samples  # the busy node was never given up
    ups = [u for u, _, _ in samples]
    assert 0.0 in ups and ups[-1] == 1.0
