"""The demand of every target, kept current from the poller's snapshots; what the scalers read.

* :meth:`DemandService.answer` returns the demand of a target on the current snapshot (computed
  once per snapshot and target; a target asked for once is recomputed on every new snapshot).
* :meth:`DemandService.run` follows the snapshot source: each new snapshot → one
  :func:`~autoscaler.demand.compute_demand` over all known targets, in a worker thread (kept off the
  event loop; job records read on earlier snapshots are not read again: a
  :class:`~autoscaler.demand.queue.ScanCache`), then waiters of :meth:`changes` wake up.
* **Missing data never scales down**: before the first snapshot with jobs *and* nodes there is no
  answer (:class:`NoSnapshotYet`); afterwards the poller keeps serving the last good data when
  slurmrestd fails, so the answer is held (``stale`` says so) and never drops to zero for lack
  of data.
* **Partial data never scales down**: while the jobs data is partial — jobs ``/jobs/state`` lists not
  read yet (:attr:`exporter.model.Snapshot.jobs_unread`: a start without a full listing, a mass change) —
  every target's answer may rise, never fall: ``desired`` = max(the model's count on the jobs read, the
  target's nodes in service, the last answer on complete data); :attr:`Demand.unread` says so.
* **Invalid data never scales down**: a snapshot whose jobs or nodes answer had records dropped as
  impossible (:attr:`exporter.model.Snapshot.dropped`) is *partly invalid* for every target whose
  partition a dropped record names (a record naming no partition: every target). Such a target's answer
  is trusted upward only: ``desired`` = max(the model's count on the valid rest, the last answer on a
  snapshot valid for it) — it may rise, never fall — and :attr:`Demand.held` keeps the model's count.
  With no earlier valid answer there is none (:class:`NoTrustedAnswer`: UNAVAILABLE to KEDA, no
  ``desired_nodes`` series). Targets of other partitions are answered as usual.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from autoscaler.demand import Demand, ScanCache, Target, compute_demand
from autoscaler.report import TargetReport, target_line, target_report
from exporter.model import Snapshot, wall_time
from exporter.notify import Notifier
from exporter.source import SnapshotSource

__all__ = [
    "MAX_ASKED",
    "Answer",
    "DemandService",
    "NoSnapshotYet",
    "NoTrustedAnswer",
    "StaticSource",
    "TooManyTargets",
    "UnknownPartition",
]

log = logging.getLogger(__name__)

REQUIRED_ENDPOINTS = ("jobs", "nodes")
"""A snapshot answers demand only once both were fetched (never 'no jobs' for lack of data)."""


class NoSnapshotYet(Exception):
    """No snapshot with jobs and nodes yet (the only time scalers answer UNAVAILABLE)."""


class NoTrustedAnswer(NoSnapshotYet):
    """The target's data is partly invalid and there is no answer on valid data to hold yet."""


def partly_invalid(snap: Snapshot, target: Target) -> bool:
    """Whether jobs or nodes records dropped from ``snap`` name ``target``'s partition (or none)."""
    for endpoint in REQUIRED_ENDPOINTS:
        names = snap.dropped.get(endpoint)
        if names and ("" in names or target.partition in names):
            return True
    return False


class UnknownPartition(ValueError):
    """A scaler asked about a partition the snapshot does not have (no target is made for it)."""


class TooManyTargets(Exception):
    """:data:`MAX_ASKED` targets asked for within ``forget_after``: no new one is taken."""


MAX_ASKED = 256
"""Most targets scalers may have asked for at once (each distinct metadata set is one, exported and kept
for ``forget_after``): 3,000 distinct ``max`` values once gave 3,006 series and 60–220 ms scrapes."""


@dataclass(frozen=True)
class Answer:
    """The demand of one target on one snapshot."""

    target: Target
    demand: Demand
    taken_at: float
    """When the jobs/nodes data behind it were fetched (the older of the two), epoch seconds."""
    stale: bool
    """The data is older than ``stale_after``: slurmrestd is failing; the value is held."""

    @property
    def desired(self) -> int:
        return self.demand.desired

    @property
    def active(self) -> bool:
        return self.demand.desired > 0


def _usable(snap: Snapshot | None) -> bool:
    return snap is not None and all(e in snap.fetched_at for e in REQUIRED_ENDPOINTS)


def data_time(snap: Snapshot) -> float:
    """When the older of the jobs/nodes data of ``snap`` was fetched, epoch seconds."""
    return min(snap.fetched_at.get(e, snap.taken_at) for e in REQUIRED_ENDPOINTS)


class DemandService:
    """Demand per target over the latest usable snapshot of ``source``."""

    def __init__(
        self,
        source: SnapshotSource,
        *,
        stale_after: float = 60.0,
        forget_after: float = 3600.0,
        targets: Iterable[Target] = (),
        clock: Callable[[], float] = wall_time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._source = source
        self.stale_after = stale_after
        self._clock = clock
        self._timer = timer
        """Times the model's runs (``slurm_autoscaler_computation_seconds_total``)."""
        self._targets: dict[Target, None] = dict.fromkeys(targets)
        self._configured = bool(self._targets)
        self._fixed = frozenset(self._targets)
        self.forget_after = forget_after
        self._asked: dict[Target, float] = {}
        """Targets asked for by a scaler (not configured): when last asked, epoch seconds."""
        self._memo_lock = threading.Lock()
        self._scan_cache = ScanCache()
        """Job records read on earlier snapshots (used under ``_memo_lock``: one computation at a time)."""
        self._trusted: dict[Target, tuple[float, int]] = {}
        """Target → (taken_at, desired) of its last answer on a snapshot valid for it."""
        self._trust_lock = threading.Lock()
        self._memo: tuple[Snapshot, tuple[Target, ...], dict[Target, Demand]] | None = None
        self._snap: Snapshot | None = None
        self._demands: dict[Target, Demand] = {}
        self._updated = Notifier()
        self._following = False
        self._stale = False
        self.computations = 0
        """Refreshes on a new snapshot (the model runs in the first of them or the renderer to ask)."""
        self.model_runs = 0
        """Runs of the model over every target on a new snapshot (:meth:`demands_on`)."""
        self.model_seconds = 0.0
        """Seconds those runs took, in all."""
        self._changed: dict[Target, tuple[int, float]] = {}
        """Target → (its desired count, since when: the taken_at of the snapshot it first had it on)."""
        self._keda_asked: dict[Target, float] = {}
        """Target → when KEDA's scaler (gRPC) last asked for its answer, epoch seconds."""

    @property
    def targets(self) -> list[Target]:
        """Every target configured or asked for so far, in first-seen order."""
        return list(self._targets)

    def _current(self) -> Snapshot:
        if self._following and self._snap is not None:
            return self._snap  # run() moves to a new snapshot once its demand is computed
        snap = self._source.snapshot
        if _usable(snap):
            assert snap is not None
            if snap is not self._snap:
                self._snap, self._demands = snap, {}
            return snap
        if self._snap is None:
            raise NoSnapshotYet("no snapshot with jobs and nodes from slurmrestd yet")
        return self._snap  # a newer snapshot lacks jobs or nodes: keep the last usable one

    def data_age(self, now: float | None = None) -> float | None:
        """Seconds since the jobs/nodes data the answers are computed from was fetched (None before the
        first usable snapshot); logs once when it passes ``stale_after`` and once when it is fresh again."""
        snap = self._snap if self._snap is not None else self._source.snapshot
        if not _usable(snap):
            return None
        assert snap is not None
        age = max(0.0, (self._clock() if now is None else now) - data_time(snap))
        self._judge(age)
        return age

    def _judge(self, age: float) -> bool:
        """Whether data ``age`` seconds old is stale; logs the changes between fresh and stale."""
        stale = age > self.stale_after
        if stale != self._stale:
            self._stale = stale
            if stale:
                log.warning(
                    "demand is held on data %.0f s old (--demand-stale-after %.0f s): slurmrestd is failing",
                    age,
                    self.stale_after,
                )
            else:
                log.info("demand data is fresh again (%.1f s old)", age)
        return stale

    def health_families(self, now: float) -> list[Metric]:
        """Per scrape (time passes without a new snapshot): ``slurm_autoscaler_stale``, and the model's
        runs and the time they took (``slurm_autoscaler_computations_total``,
        ``slurm_autoscaler_computation_seconds_total``: their rates' ratio is the time per snapshot)."""
        fam = GaugeMetricFamily(
            "slurm_autoscaler_stale",
            "1 while the demand served to KEDA and on /metrics is held on jobs/nodes data older than "
            "--demand-stale-after seconds (slurmrestd failing; the value is held, never dropped), else 0",
        )
        age = self.data_age(now)
        if age is not None:
            fam.add_metric([], 1.0 if age > self.stale_after else 0.0)
        runs = CounterMetricFamily(
            "slurm_autoscaler_computations",
            "Runs of the demand model over every target, one per new snapshot with jobs and nodes",
            value=self.model_runs,
        )
        seconds = CounterMetricFamily(
            "slurm_autoscaler_computation_seconds",
            "Seconds the demand model's runs took (job records read on an earlier snapshot are not read "
            "again)",
            value=self.model_seconds,
        )
        return [fam, runs, seconds]

    def status_line(self, now: float) -> str:
        """One line for the status page."""
        age = self.data_age(now)
        if age is None:
            return "demand: no snapshot with jobs and nodes yet"
        held = f"HELD: older than {self.stale_after:.0f} s" if age > self.stale_after else "fresh"
        snap = self._snap if self._snap is not None else self._source.snapshot
        served = self.metric_targets(snap) if snap is not None else tuple(self._targets)
        kind = "configured" if self._configured else "one per partition, and those KEDA asked for"
        line = (
            f"demand: {len(served)} target{'' if len(served) == 1 else 's'} ({kind}); "
            f"jobs/nodes data {age:.1f} s old ({held})"
        )
        invalid = sorted(t.name for t in served if snap is not None and partly_invalid(snap, t))
        if invalid:
            line += f"; HELD on records dropped as impossible: {', '.join(invalid)}"
        return line

    def target_reports(self, now: float) -> list[TargetReport]:
        """Why each exported target asks for what it does, as of ``now`` (the status page, ``/targets``):
        its numbers, held or stale and why, the pending jobs counted and not, the blockers, when its
        desired count last changed and when KEDA last asked. Empty before the first usable snapshot."""
        snap = self._snap if self._snap is not None else self._source.snapshot
        if snap is None or not _usable(snap):
            return []
        age = self.data_age(now)
        stale = age is not None and age > self.stale_after
        out = []
        for t, d in self.demands_on(snap).items():
            changed = self._changed.get(t)
            out.append(
                target_report(
                    t,
                    d,
                    label=self.label(t),
                    source=self.source(t),
                    stale_for=age if stale else None,
                    stale_after=self.stale_after,
                    changed_at=changed[1] if changed is not None and changed[0] == d.desired else None,
                    asked_at=self._keda_asked.get(t),
                    now=now,
                )
            )
        return out

    def status_lines(self, now: float) -> list[str]:
        """The status page's lines: the summary, then one line per target (:func:`target_line`)."""
        return [self.status_line(now), *(target_line(r) for r in self.target_reports(now))]

    def answer(self, target: Target) -> Answer:
        """The demand of ``target`` now; raises :class:`NoSnapshotYet` before the first poll."""
        snap = self._current()
        if target not in self._targets:
            self._admit(target, snap)
        if target not in self._fixed:
            self._asked[target] = self._clock()
        self._keda_asked[target] = self._clock()
        demand = self._demands.get(target)
        if demand is None:
            demand = self._demands[target] = self.judged(
                snap, target, compute_demand(snap, [target])[target.name]
            )
        if not demand.answered:
            raise NoTrustedAnswer(
                f"records of partition {target.partition!r} were dropped as impossible and there is no "
                "answer on valid data to hold yet"
            )
        when = data_time(snap)
        return Answer(target, demand, when, self._judge(self._clock() - when))

    def judged(self, snap: Snapshot, target: Target, demand: Demand) -> Demand:
        """``demand`` (computed on ``snap``) as it may be served: on a snapshot valid for ``target``, as it
        is (and remembered); on a partly invalid one, held at the last valid answer or above."""
        with self._trust_lock:
            prior = self._trusted.get(target)
            if not partly_invalid(snap, target):
                if snap.jobs_unread:  # partial: upward only, from what is there and the last complete answer
                    floor = max(demand.in_service, prior[1] if prior is not None else 0)
                    return replace(
                        demand,
                        held=demand.desired,
                        unread=snap.jobs_unread,
                        desired=max(demand.desired, floor),
                    )
                if prior is None or prior[0] <= snap.taken_at:
                    self._trusted[target] = (snap.taken_at, demand.desired)
                return demand
        if prior is None:
            return replace(demand, held=demand.desired, answered=False)
        return replace(demand, held=demand.desired, desired=max(demand.desired, prior[1]))

    def _admit(self, target: Target, snap: Snapshot) -> None:
        """Take a target a scaler asks about for the first time, if its partition exists and the
        bound allows; else :class:`UnknownPartition` / :class:`TooManyTargets`."""
        if "partitions" in snap.fetched_at and all(p.name != target.partition for p in snap.partitions):
            raise UnknownPartition(f"partition {target.partition!r} does not exist in Slurm")
        if len(self._asked) >= MAX_ASKED:
            self._forget_unasked()
            if len(self._asked) >= MAX_ASKED:
                raise TooManyTargets(
                    f"{MAX_ASKED} targets were asked for within {self.forget_after:.0f} s; no more are taken"
                )
        self._targets[target] = None

    def _forget_unasked(self) -> None:
        """Drop asked-for targets no scaler asked about for ``forget_after`` s (a deleted ScaledObject)."""
        cutoff = self._clock() - self.forget_after
        for t in [t for t, at in self._asked.items() if at < cutoff]:
            del self._asked[t]
            self._targets.pop(t, None)
            log.info("forgetting target %s: not asked for %.0f s", t.name, self.forget_after)

    def label(self, target: Target) -> str:
        """The ``target`` label of ``target``'s series: unique among exported targets, and stable (the
        same definition gives the same label in every process). A configured target, or without a
        configuration the default target of a partition, is labelled by its name; any other target a
        scaler asked for — another ScaledObject on the same partition or NodeSet with other settings —
        by its name and a digest of its definition (``cpu-1a2b3c4d``), so two definitions never share
        a series (a prometheus trigger reading the one would otherwise read the other's value)."""
        if target in self._fixed or (
            not self._configured and target == Target(target.partition, target.partition)
        ):
            return target.name
        digest = hashlib.sha256(repr(target).encode()).hexdigest()[:8]
        return f"{target.name}-{digest}"

    def source(self, target: Target) -> str:
        """Where ``target`` comes from: ``configured`` (the targets file), ``scaler`` (a KEDA trigger asked
        for it) or ``default`` (one per partition, exported only while nothing is configured — such a
        target is informational: no ScaledObject need scale it)."""
        if target in self._fixed:
            return "configured"
        return "scaler" if target in self._targets else "default"

    def metric_targets(self, snap: Snapshot) -> tuple[Target, ...]:
        """Targets exported as metrics: configured and asked-for ones; without a configuration,
        also one target per partition of ``snap`` (named after it)."""
        known = list(self._targets)
        if not self._configured:  # a scaler's own definition on the partition is another series (label)
            have = set(known)
            known += [d for d in (Target(p.name, p.name) for p in snap.partitions) if d not in have]
        return tuple(known)

    def demands_on(self, snap: Snapshot) -> dict[Target, Demand]:
        """Demand of every :meth:`metric_targets` target on ``snap`` (memoised for the latest
        snapshot; safe to call from the metrics render thread). Empty without jobs/nodes data."""
        if not _usable(snap):
            return {}
        targets = self.metric_targets(snap)
        with self._memo_lock:  # the render thread and refresh() ask at the same moment: compute once
            memo = self._memo
            if memo is not None and memo[0] is snap and memo[1] == targets:
                return memo[2]
            started = self._timer()
            computed = _compute(snap, list(targets), self._scan_cache)
            self.model_runs += 1
            self.model_seconds += self._timer() - started
            out = {t: self.judged(snap, t, d) for t, d in computed.items()}
            self._memo = (snap, targets, out)
            return out

    def answers(self) -> list[Answer]:
        """Answers for every known target that has one (empty before the first snapshot)."""
        out = []
        for t in self._targets:
            try:
                out.append(self.answer(t))
            except NoTrustedAnswer:
                continue
            except NoSnapshotYet:
                return []
        return out

    async def refresh(self, snap: Snapshot) -> None:
        """Compute every known target on ``snap`` (in a thread) and wake :meth:`changes` waiters."""
        if not _usable(snap):
            return
        self._forget_unasked()
        by_name = dict(await asyncio.to_thread(self.demands_on, snap))
        self.computations += 1
        for t in self._targets:  # targets first asked for while the thread ran
            if t not in by_name:
                by_name[t] = self.judged(snap, t, compute_demand(snap, [t])[t.name])
        self._snap, self._demands = snap, by_name
        for t, d in by_name.items():
            known = self._changed.get(t)
            if known is None or known[0] != d.desired:
                self._changed[t] = (d.desired, snap.taken_at)
        self._updated.notify()

    async def run(self) -> None:
        """Follow the source forever (cancel to stop)."""
        seen: Snapshot | None = None
        self._following = True
        try:
            while True:
                seen = await self._source.wait_next(seen)
                try:
                    await self.refresh(seen)
                except Exception:  # a model bug must not stop the exporter; the last answers stay
                    log.exception("demand computation failed; holding the previous answers")
        finally:
            self._following = False

    async def changes(self, target: Target) -> AsyncGenerator[Answer, None]:
        """The current answer at once, then each answer whose desired count differs."""
        last: Answer | None = None
        while True:
            updated = self._updated.next()
            try:
                ans = self.answer(target)
            except NoSnapshotYet:
                ans = None
            if ans is not None and (last is None or ans.desired != last.desired):
                last = ans
                yield ans
            await updated.wait()


def _compute(snap: Snapshot, targets: list[Target], cache: ScanCache | None = None) -> dict[Target, Demand]:
    """One model run for all targets; targets sharing a name are computed apart."""
    out: dict[Target, Demand] = {}
    by_name: dict[str, list[Target]] = {}
    for t in targets:
        by_name.setdefault(t.name, []).append(t)
    while by_name:
        batch = [ts.pop() for ts in by_name.values()]
        result = compute_demand(snap, batch, cache)
        for t in batch:
            out[t] = result[t.name]
        by_name = {k: v for k, v in by_name.items() if v}
    return out


class StaticSource:
    """A source holding one snapshot (``slurm-keda demand``, tests)."""

    def __init__(self, snap: Snapshot | None) -> None:
        self.snapshot = snap

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        if self.snapshot is None or self.snapshot is after:
            await asyncio.Event().wait()  # never changes: wait until cancelled
        assert self.snapshot is not None
        return self.snapshot
