"""The poller: the only loop that reads slurmrestd; it owns the one current :class:`Snapshot`.

Each poll fetches every endpoint concurrently, builds a new immutable snapshot and swaps one
reference; waiters (:meth:`Poller.wait_next`) are woken on every swap. Polls never overlap: the
interval is a floor measured from the end of the previous poll.

Per endpoint the poller keeps the last good data (:class:`EndpointState`). A failed endpoint keeps
its previous data (its ``fetched_at`` stops moving, so staleness shows) and records the error;
when every endpoint fails no new snapshot is made at all. The poller never stops on an error.

``update_time``: ``nodes``, ``partitions`` and ``reservations`` (and ``jobs`` when listed each poll)
send Slurm's ``last_update`` of the data held; slurmrestd then answers 304 or an empty list when nothing
changed, and the held data is reused. A full fetch is forced every ``full_refresh`` seconds anyway,
because a few fields (node free memory and load) change without moving ``last_update``.

Jobs are kept incrementally (:mod:`exporter.jobsync`, API v0.0.41+): the first poll lists them, later
polls read ``/jobs/state`` and only the jobs whose state moved (``/job/{id}``), the ones whose reason
slurmctld is about to move, after a job-changing RPC the jobs it may have touched (newest first), and a
few more each poll in turn (the sweep: what changes without the state or an RPC). A full listing only at
the start, on request, for a mass change, or every ``jobs_full_refresh`` seconds if set (:class:`JobsSync`,
``docs/freshness.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from . import jobsync, versions
from .client import NotModified, version_key
from .errors import HTTPStatusError, SlurmError, SlurmReportedError
from .jobsync import JobSig
from .jsonsplit import SCAN_STEP_BYTES, StreamingArrayDecoder
from .model import ENDPOINTS, Diag, Envelope, Job, Node, Snapshot, wall_time
from .session import Negotiated, SlurmSession
from .source import LatestSnapshot
from .validate import check_jobs, check_nodes, dropped_partitions

log = logging.getLogger(__name__)

STREAMED_ENDPOINTS = frozenset({"jobs", "nodes", "partitions", "licenses", "reservations"})
"""Endpoints whose data is one array of records: streamed and decoded batch by batch (``_fetch_array``)."""

INCREMENTAL_ENDPOINTS = frozenset({"jobs", "nodes", "partitions", "reservations"})
"""Endpoints whose GET takes ``update_time``; "no change" is HTTP 304 (24.11+) or an empty list."""


INCREMENTAL_JOBS_SINCE = "v0.0.41"
HEAD_SECONDS = 5.0
"""An RPC during a recheck pass re-reads at most this many seconds' worth of the likeliest jobs first."""
Read = tuple[list[Job], list[tuple[Job, str]]]
"""One ``/job/{id}`` read: the valid records, and the refused ones with why."""
"""The first API version whose ``/jobs/state`` names every entry by its record's job id (Slurm 24.11)."""

UPDATE_TIME_REJECTED = frozenset({400, 422, 500})
"""Statuses that, for a request carrying ``update_time``, mean "this server can't do update_time":
Slurm 24.11's v0.0.40/41 reject the parameter itself ("Parsing of N for timestamp failed": 422 on
/jobs, 500 elsewhere) and its v0.0.42 /nodes answers 500 "Unable to query partitions" instead of 304."""


@dataclass(frozen=True)
class PollerConfig:
    interval: float = 5.0
    """Seconds from the end of one poll to the start of the next (a floor, never overlapping)."""
    standby_interval: float = 0.0
    """Seconds from one poll's end to the next one's start while another replica leads (leader election:
    :attr:`Poller.standby`): a standby writes nothing, so its data may be older — its ``/metrics`` and
    demand say how old; it polls at once when it takes the lead. 0 (or less than :attr:`interval`): as
    :attr:`interval`."""
    early_gap: float = 0.5
    """Seconds from one poll's start to the next one's at least, when :meth:`Poller.poll_soon` asks
    early (a burst of submissions costs two polls a second, not one per submission)."""
    use_update_time: bool = True
    full_refresh: float = 60.0
    """Seconds after which an endpoint is fetched in full even if ``last_update`` did not move."""
    incremental_jobs: bool = True
    """Between full ``/jobs`` listings, read ``/jobs/state`` and only the jobs whose state moved
    (:mod:`exporter.jobsync`); Slurm releases without ``/jobs/state`` (22.05) always list in full."""
    jobs_full_refresh: float = 0.0
    """Seconds between full ``/jobs`` listings while jobs are kept incrementally (and at least
    :attr:`jobs_listing_ratio` times the last listing's duration); 0: none for the period — the sweep
    (:attr:`jobs_sweep_rate`) keeps what changes without a state change. slurmrestd 26.05.5 keeps ~135 KB
    per job of every listing (+2.7 GB per 20,000-job listing, never given back)."""
    jobs_sweep_rate: float = 20.0
    """Jobs per second read again in turn, oldest first, whatever moved: a change no state or RPC tells
    (a pending job's reason or priority) is current within (jobs not yet ended) / rate seconds."""
    jobs_recheck_rate: float = 50.0
    """Jobs per second read again, newest first, after slurmctld counted a job-changing RPC (hold,
    release, ``scontrol update``), until as many changed jobs were found as RPCs were counted."""
    jobs_publish_every: float = 0.25
    """Seconds between snapshots published while the single-job reads of one poll go on (a burst of
    starts): the jobs read so far replace their records, the others stay as they were, and the jobs' "as
    of" stays the last complete read's; 0: publish only when every read is done."""
    jobs_listing_ratio: float = 10.0
    """A full listing starts no sooner than this many times its last duration after the last one ended
    (slurmrestd spends at most 1/ratio of its time listing for us); the first listing, a requested one
    and the retry of a failed one aside."""
    jobs_changes_limit: int = 1000
    """Jobs read one by one in one poll at most: more changed jobs mean a full listing when
    :attr:`jobs_listing_ratio` allows one, else the rest are read in the next polls."""
    endpoints: tuple[str, ...] = ENDPOINTS
    up_max_age: float = 30.0
    """Seconds the data of every :data:`REQUIRED_ENDPOINTS` endpoint may be old and Slurm still count as
    up (``slurm_up``): a poll stuck on a frozen slurmrestd, or jobs and nodes failing while licenses answer,
    turn it 0 by this age."""


REQUIRED_ENDPOINTS = ("jobs", "nodes", "partitions")
"""What the product needs: health (``slurm_up``, ``/readyz``) is theirs, not any endpoint's."""


@dataclass
class EndpointState:
    """What the poller knows of one endpoint; mutated only by the poller."""

    name: str
    data: Any = None
    """The last good, translated data (tuple of records, or Diag); None until the first success."""
    envelope: Envelope | None = None
    fetched_at: float | None = None
    """When data was last fetched or confirmed unchanged, epoch seconds."""
    requested_at: float | None = None
    """When the request behind ``fetched_at`` was sent, epoch seconds."""
    full_fetch_at: float | None = None
    """When data was last fetched in full."""
    last_duration: float = 0.0
    """Seconds the last attempt took."""
    last_bytes: int = 0
    successes: int = 0
    unchanged: int = 0
    """Answers that said "no change since update_time"."""
    errors: Counter[str] = field(default_factory=Counter)
    """Failures by error kind (see :mod:`exporter.errors`)."""
    last_error: str = ""
    last_error_kind: str = ""
    last_error_at: float | None = None
    update_time_broken: bool = False
    """Set when this server failed a request only because it carried ``update_time``
    (see :data:`UPDATE_TIME_REJECTED`); the endpoint is then always fetched in full."""

    last_ok: bool = False
    """Whether the last finished fetch succeeded (or was answered "unchanged")."""
    dropped: int = 0
    """Records dropped for impossible values (:mod:`exporter.validate`), over all fetches."""
    dropped_partitions: frozenset[str] = frozenset()
    """Partitions named by the records dropped from the data held (see :attr:`Snapshot.dropped`)."""
    _fetch_dropped: frozenset[str] = frozenset()
    """The same for the fetch in progress (moved to ``dropped_partitions`` when its data is taken)."""

    def record_error(self, err: SlurmError, now: float) -> None:
        self.last_ok = False
        self.errors[err.kind] += 1
        self.last_error, self.last_error_kind, self.last_error_at = str(err), err.kind, now


@dataclass
class JobsSync:
    """How the jobs data is kept between full listings (:mod:`exporter.jobsync`); mutated only by the
    poller, read by /metrics and the status page."""

    incremental: bool = False
    """Whether the last jobs fetch was incremental (``/jobs/state`` and single-job reads)."""
    incremental_fetches: int = 0
    full_listings: Counter[str] = field(default_factory=Counter)
    """Full ``/jobs`` listings by why: ``first``, ``period``, ``changes`` (more than the limit changed),
    ``requested``
    (:meth:`Poller.refresh_jobs`), ``off`` (incremental reads off or not offered)."""
    state_reads: int = 0
    """``/jobs/state`` requests sent."""
    job_reads: int = 0
    """``/job/{id}`` requests sent."""
    last_changed: int = 0
    """Jobs read one by one by the last incremental fetch."""
    last_read: tuple[int, ...] = ()
    """The job ids the last incremental fetch read one by one."""
    last_gone: int = 0
    """Jobs the last incremental fetch dropped because Slurm no longer lists them."""
    backlog: int = 0
    """Changed jobs left for the next polls (more than the limit changed within a listing's spacing)."""
    listed_at: float | None = None
    """When the request of the last full listing was sent, epoch seconds."""
    listing_ended: float | None = None
    listing_duration: float = 0.0
    """Seconds the last full listing took."""
    update_rpcs: int | None = None
    """slurmctld's count of job-changing RPCs at the last look (:func:`exporter.jobsync.job_update_rpcs`)."""
    user_rpcs: dict[str, int] | None = None
    """slurmctld's count of RPCs per user at the last look."""
    movers: set[str] = field(default_factory=set)
    """Users whose RPCs moved with job-changing ones, their jobs not yet put first in the recheck."""
    recheck_new: bool = False
    """A job-changing RPC was counted since the recheck last looked."""
    head_budget: float = 0.0
    """Reads the recheck may spend re-reading the likeliest jobs (the movers' or the newest) when an RPC
    comes during a pass: half its rate accrues, at most :data:`HEAD_SECONDS` of its rate."""
    listing_requested: bool = False
    """:meth:`Poller.refresh_jobs` asked for a full listing at the next poll."""
    recheck_pending: bool = False
    """A job-changing RPC was seen: start a pass over the jobs not yet ended, newest first, once the pass
    in progress (if any) is done — restarting it at each RPC would never reach the oldest jobs under a
    steady stream of RPCs."""
    recheck: list[int] = field(default_factory=list)
    """Job ids left to re-read after a job-changing RPC, ascending (the newest popped first)."""
    recheck_wanted: int = 0
    """Job-changing RPCs counted since the re-reading began: it stops once as many jobs changed."""
    recheck_found: int = 0
    """Records found changed by an RPC (:meth:`Poller._count_updates`), kept one poll beyond the RPCs."""
    sweep: list[int] = field(default_factory=list)
    """Job ids left in this turn of the sweep, descending (the oldest popped first); refilled when empty."""
    sweep_period: float = 0.0
    """Seconds one turn of the sweep takes at the last refill: jobs not yet ended / rate."""
    partial_snapshots: int = 0
    """Snapshots published while a poll's single-job reads went on
    (:attr:`PollerConfig.jobs_publish_every`)."""
    rereads: Counter[str] = field(default_factory=Counter)
    """Jobs read again whatever their state by why: ``follow`` (a reason about to move), ``recheck``
    (after a job-changing RPC), ``sweep`` (in turn)."""
    quota_at: float | None = None
    """When the last incremental read took its re-read quotas (they accrue with time)."""
    quota_carry: dict[str, float] = field(default_factory=dict)
    follow: dict[int, int] = field(default_factory=dict)
    """Pending job → polls left to read it again: its reason is about to change without a state change or
    an RPC (:func:`exporter.jobsync.to_follow`)."""
    followed: set[int] = field(default_factory=set)
    """Jobs followed to the end (their reason did not move): not followed again for their begin time."""
    unreadable_entries: int = 0
    """Entries of the last ``/jobs/state`` whose job id could not be read (then no job was dropped)."""
    states_unsupported: bool = False
    """``/jobs/state`` answered 404: this server cannot do incremental reads."""
    refused: dict[int, JobSig] = field(default_factory=dict)
    """Job id → its signature when its record was refused (impossible values): not read again until it
    moves."""
    refused_partitions: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def listing_allowed(self, now: float, ratio: float) -> bool:
        """Whether a full listing may start now (:attr:`PollerConfig.jobs_listing_ratio`)."""
        return self.listing_ended is None or now - self.listing_ended >= ratio * self.listing_duration

    def quota(self, why: str, rate: float, elapsed: float, most: float) -> int:
        """Jobs ``why`` may read again now at ``rate`` per second, ``elapsed`` s after the last quota (at
        most ``most`` s of it: a slow poll must not earn a share that makes the next one slower still, as
        measured at 20,000 jobs); the fraction left carries over."""
        due = self.quota_carry.get(why, 0.0) + rate * min(max(elapsed, 0.0), most)
        n = int(due)
        self.quota_carry[why] = due - n
        return n

    def forget_rereads(self) -> None:
        """A full listing read everything: the recheck is done and the sweep starts over."""
        self.recheck_pending = False
        self.recheck.clear()
        self.movers.clear()
        self.recheck_new = False
        self.recheck_wanted = self.recheck_found = 0
        self.sweep.clear()


@dataclass
class PollStatus:
    """Health of the poller, read by /metrics and the status page."""

    api_version: str | None = None
    offered_versions: tuple[str, ...] = ()
    jobs_api_version: str | None = None
    """The version ``/jobs`` is listed with (differs from ``api_version`` on Slurm 26.05: job exclusivity)."""
    polls: int = 0
    last_poll_started: float | None = None
    last_poll_finished: float | None = None
    last_poll_duration: float = 0.0
    last_poll_ok: bool = False
    """True when the last poll produced a snapshot."""
    last_success: float | None = None
    """When the last snapshot was swapped in."""
    endpoints: dict[str, EndpointState] = field(default_factory=dict)
    negotiation: EndpointState = field(default_factory=lambda: EndpointState("openapi"))
    last_error: str = ""
    up_max_age: float = 30.0
    """:attr:`PollerConfig.up_max_age`."""
    jobs_sync: JobsSync = field(default_factory=JobsSync)

    def data_age(self, now: float) -> float | None:
        """Seconds since the oldest of the required endpoints' data was fetched (or confirmed unchanged);
        None until each of them was fetched once."""
        stamps = [st.fetched_at for e in REQUIRED_ENDPOINTS if (st := self.endpoints.get(e)) is not None]
        if not stamps or any(t is None for t in stamps):
            return None
        return max(0.0, now - min(t for t in stamps if t is not None))

    def up(self, now: float) -> bool:
        """Slurm is up for us: the last fetch of every required endpoint succeeded, and each answered
        within :attr:`up_max_age` seconds (a poll stuck on a frozen slurmrestd never finishes)."""
        age = self.data_age(now)
        ok = all(st.last_ok for e in REQUIRED_ENDPOINTS if (st := self.endpoints.get(e)) is not None)
        return ok and age is not None and age <= self.up_max_age


class Poller:
    """Polls slurmrestd through ``session`` and holds the current snapshot."""

    def __init__(
        self,
        session: SlurmSession,
        config: PollerConfig | None = None,
        *,
        clock: Callable[[], float] = wall_time,
    ) -> None:
        self.session = session
        self.client = session.client
        self.config = config or PollerConfig()
        self._clock = clock
        self.status = PollStatus(
            endpoints={e: EndpointState(e) for e in self.config.endpoints}, up_max_age=self.config.up_max_age
        )
        self._latest = LatestSnapshot()
        self._early = asyncio.Event()
        self.standby = False
        """A replica that does not hold the bridge's Lease: its jobs are kept from ``/jobs/state`` like the
        leader's, but listed in full only when it must (first, requested, too many changes), never for the
        period — the second replica does not double slurmrestd's listings."""
        self._listing_refused: dict[int, tuple[JobSig, tuple[str, ...]]] = {}
        """Jobs the last full listing dropped as impossible: id → (signature, partitions)."""

    # -- reading ------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        """The current snapshot (None before the first good poll)."""
        return self._latest.snapshot

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        """Return the current snapshot once it is not ``after`` (waits for the next swap)."""
        return await self._latest.wait_next(after)

    # -- polling ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Poll forever; cancel the task to stop. Never returns, never raises on poll errors."""
        while True:
            began = time.monotonic()
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug, not bad input: keep serving the last snapshot
                log.exception("poll failed unexpectedly")
                self.status.last_error = f"internal: {e!r}"
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives as the
            # event is set (a burst of poll_soon), and the stopped poller then slept a whole interval
            interval = self.config.interval
            if self.standby:
                interval = max(interval, self.config.standby_interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._early.wait()
            if self._early.is_set():  # a burst of early requests: at most one poll per early_gap
                await asyncio.sleep(
                    began + min(self.config.early_gap, self.config.interval) - time.monotonic()
                )
            self._early.clear()

    def refresh_jobs(self) -> None:
        """List the jobs in full at the next poll (what changes without a job's state is then current)."""
        self.status.jobs_sync.listing_requested = True

    def poll_soon(self) -> None:
        """Start the next poll now instead of after the interval (the bridge after a submission: the job's
        placement shows a whole interval earlier). A poll in progress is not interrupted."""
        self._early.set()

    async def negotiate(self) -> Negotiated:
        """Negotiate the session's API version, counted as the ``openapi`` endpoint. Raises SlurmError."""
        st = self.status.negotiation
        t0 = time.perf_counter()
        try:
            negotiated = await self.session.negotiate()
        except SlurmError as e:
            st.record_error(e, self._clock())
            self.status.last_error = str(e)
            raise
        finally:
            st.last_duration = time.perf_counter() - t0
        st.successes += 1
        st.fetched_at = self._clock()
        self.status.jobs_sync.states_unsupported = False  # an upgraded slurmrestd may offer /jobs/state now
        self.status.offered_versions = negotiated.offered
        self.status.api_version = negotiated.version
        self.status.jobs_api_version = negotiated.jobs_version
        return negotiated

    async def poll_once(self) -> Snapshot | None:
        """One poll: fetch every endpoint, swap in a new snapshot; None if nothing succeeded."""
        self.status.polls += 1
        started = self._clock()
        self.status.last_poll_started = started
        ok = False  # last_poll_ok changes only when a poll ends: slurm_up must not dip during a poll
        t0 = time.perf_counter()
        try:
            negotiated = self.session.negotiated
            if negotiated is None:
                try:
                    negotiated = await self.negotiate()
                except SlurmError:
                    return None
            paths = negotiated.paths
            wanted = [e for e in self.config.endpoints if not paths or e in paths]
            first: list[bool] = []
            if "jobs" in wanted and "diag" in wanted and self._jobs_incremental(negotiated):
                # /diag first (a few ms): its RPC counters tell whether a job changed without its state
                first.append(await self._fetch("diag", negotiated))
                if first[0]:
                    self._note_job_updates()
                wanted = ["diag", *(e for e in wanted if e != "diag")]
            rest = wanted[len(first) :]
            results = [*first, *await asyncio.gather(*(self._fetch(e, negotiated) for e in rest))]
            if not any(results):
                if all(self.status.endpoints[e].last_error_kind == "http_404" for e in wanted):
                    self.session.forget()  # slurmrestd was upgraded: negotiate again next poll
                return None
            snap = self._build(wanted, negotiated)
            self._swap(snap)
            ok = True
            return snap
        finally:
            self.status.last_poll_ok = ok
            self.status.last_poll_finished = self._clock()
            self.status.last_poll_duration = time.perf_counter() - t0

    def _swap(self, snap: Snapshot) -> None:
        self.status.last_success = snap.taken_at
        self._latest.put(snap)

    def _build(self, wanted: Sequence[str], negotiated: Negotiated) -> Snapshot:
        eps = self.status.endpoints
        env = next((eps[e].envelope for e in wanted if eps[e].envelope is not None), None)
        diag = eps["diag"].data if "diag" in eps else None

        def items(name: str) -> tuple[Any, ...]:
            st = eps.get(name)
            return st.data if st is not None and isinstance(st.data, tuple) else ()

        return Snapshot(
            taken_at=self._clock(),
            api_version=negotiated.version,
            slurm_version=env.slurm_version if env else "",
            cluster=env.cluster if env else "",
            jobs=items("jobs"),
            nodes=items("nodes"),
            partitions=items("partitions"),
            diag=diag if isinstance(diag, Diag) else None,
            licenses=items("licenses"),
            reservations=items("reservations"),
            fetched_at={e: st.fetched_at for e, st in eps.items() if st.fetched_at is not None},
            requested_at={e: st.requested_at for e, st in eps.items() if st.requested_at is not None},
            listed_at=self._listed_at(),
            last_update={
                e: st.envelope.last_update
                for e, st in eps.items()
                if st.envelope is not None and st.envelope.last_update is not None
            },
            dropped={
                e: tuple(sorted(st.dropped_partitions)) for e, st in eps.items() if st.dropped_partitions
            },
        )

    def _listed_at(self) -> dict[str, float]:
        """When the held jobs were last listed in full (the request's start); the other endpoints are
        always fetched whole, so their ``requested_at`` says it."""
        at = self.status.jobs_sync.listed_at
        return {"jobs": at} if at is not None else {}

    async def _fetch(self, name: str, negotiated: Negotiated) -> bool:
        """Fetch one endpoint into its state; True on success (or confirmed no change)."""
        if name == "jobs" and self._jobs_incremental(negotiated):
            return await self._fetch_jobs(negotiated)
        if name == "jobs":
            self.status.jobs_sync.incremental = False
            self.status.jobs_sync.full_listings["off"] += 1
        return await self._fetch_listing(name, negotiated)

    # -- jobs, incrementally (exporter.jobsync) --------------------------------------------------------

    def _jobs_incremental(self, negotiated: Negotiated) -> bool:
        """Whether jobs are kept from ``/jobs/state`` between listings: v0.0.41+ (v0.0.40 has the endpoint
        but names a split-off array task by its array's id, ``3_1``, not its own record's, ``6_1``)."""
        return (
            self.config.incremental_jobs
            and not self.status.jobs_sync.states_unsupported
            and version_key(negotiated.jobs_version) >= version_key(INCREMENTAL_JOBS_SINCE)
        )

    def _note_job_updates(self) -> None:
        """Look at slurmctld's count of job-changing RPCs in the /diag just read: when it moved, a job may
        have changed without its state (hold, release, ``scontrol update``): read jobs again."""
        diag = self.status.endpoints["diag"].data
        diag = diag if isinstance(diag, Diag) else None
        rpcs = jobsync.job_update_rpcs(diag)
        sync = self.status.jobs_sync
        users = diag.rpc_user_counts if diag is not None else {}
        moved = jobsync.users_moved(sync.user_rpcs, users)
        if users:
            sync.user_rpcs = dict(users)
        if rpcs is None:
            return
        if sync.update_rpcs is not None and rpcs != sync.update_rpcs:
            sync.recheck_pending = sync.recheck_new = True  # a lower count: slurmctld restarted
            sync.recheck_wanted += max(1, rpcs - sync.update_rpcs)
            sync.movers |= moved
        sync.update_rpcs = rpcs

    def _listing_reason(self, st: EndpointState, now: float) -> str | None:
        """Why the jobs must be listed in full now; None when an incremental read will do."""
        sync, cfg = self.status.jobs_sync, self.config
        if st.data is None or sync.listed_at is None:
            return "first"
        if sync.listing_requested:
            return "requested"
        period = max(cfg.jobs_full_refresh, cfg.jobs_listing_ratio * sync.listing_duration)
        if cfg.jobs_full_refresh > 0 and now - sync.listed_at >= period and not self.standby:
            return "period"
        return None

    async def _fetch_jobs(self, negotiated: Negotiated) -> bool:
        """The jobs, read incrementally or listed in full (:meth:`_listing_reason`, :meth:`_sync_jobs`)."""
        st, sync = self.status.endpoints["jobs"], self.status.jobs_sync
        reason = self._listing_reason(st, self._clock())
        if reason is None:
            synced = await self._sync_jobs(st)
            if isinstance(synced, bool):
                return synced
            reason = synced
        sync.incremental = False
        sync.full_listings[reason] += 1
        return await self._fetch_listing("jobs", negotiated, update_time=reason == "off")

    async def _sync_jobs(self, st: EndpointState) -> bool | str:
        """One incremental read: ``/jobs/state``, then ``/job/{id}`` for each job whose state moved (at
        most :attr:`PollerConfig.jobs_changes_limit`), folded into the held jobs only when every read
        succeeded. True/False: done, succeeded or not; a string: list in full instead, and why."""
        sync, cfg = self.status.jobs_sync, self.config
        held: tuple[Job, ...] = st.data
        now = self._clock()
        t0 = time.perf_counter()
        rechecked: list[int] = []
        swept: list[int] = []
        progress: _Progress | None = None
        moved: list[int] = []
        try:
            try:
                answer = await self.session.job_states()
            except HTTPStatusError as e:
                if e.status != 404:
                    raise
                sync.states_unsupported = True
                log.warning("jobs/state: %s; listing /jobs in full from now on", e)
                return "off"
            finally:
                sync.state_reads += 1
            states = answer.states
            sync.unreadable_entries = answer.unreadable
            if answer.unreadable:
                log.warning(
                    "jobs/state: %d entries with an unreadable job id; no job is taken as gone this poll",
                    answer.unreadable,
                )
            found = jobsync.changes(held, states, sync.refused, complete=not answer.unreadable)
            # jobs that started first: what the bridge binds and the demand stops counting (reads of a
            # burst are published as they come, _Progress)
            fetch = sorted(found.fetch, key=lambda j: states[j][0] != "RUNNING")
            sync.backlog = max(0, len(fetch) - cfg.jobs_changes_limit)
            if sync.backlog:
                if sync.listing_allowed(now, cfg.jobs_listing_ratio):
                    return "changes"
                fetch = fetch[: cfg.jobs_changes_limit]
            chosen = set(fetch)
            moved = list(fetch)  # read first; published as soon as they are in (_Progress)
            followed = [j for j in sync.follow if j in states and j not in chosen]
            if len(fetch) + len(followed) > cfg.jobs_changes_limit:
                followed = []  # they wait: changes go first
            fetch += followed
            chosen.update(followed)
            rechecked, swept = self._rereads(held, states, chosen, now, len(moved))
            fetch += rechecked + swept
            progress = _Progress(
                self, held, frozenset(found.gone), set(moved), len(fetch), cfg.jobs_publish_every
            )
            read = await self._read_jobs(fetch, progress)
        except SlurmError as e:
            if progress is not None and progress.jobs is not None:  # published: the data never steps back
                st.data = progress.jobs
            sync.recheck.extend(reversed(rechecked))  # read them next time
            sync.sweep.extend(reversed(swept))
            st.record_error(e, self._clock())
            self.status.last_error = str(e)
            log.warning("poll jobs (incremental) failed: %s", e)
            return False
        finally:
            st.last_duration = time.perf_counter() - t0
        sync.job_reads += len(fetch)
        fetched: dict[int, list[Job]] = {}
        dropped: list[tuple[Job, str]] = []
        for job_id, (good, bad) in read.items():
            fetched[job_id] = good
            sync.refused.pop(job_id, None)
            sync.refused_partitions.pop(job_id, None)
            dropped.extend(bad)
        for job, _ in dropped:
            sync.refused[job.job_id] = states.get(job.job_id) or jobsync.signature(job)
            sync.refused_partitions[job.job_id] = job.partitions or ("",)
        for job_id in [j for j in sync.refused if j not in states]:
            del sync.refused[job_id]
            sync.refused_partitions.pop(job_id, None)
        if dropped:
            self._note_dropped("jobs", dropped)
        st.dropped_partitions = frozenset(p for parts in sync.refused_partitions.values() for p in parts)
        st.data = jobsync.merge(held, fetched, found.gone)
        self._follow(held, fetched, st.data, set(states))
        sync.rereads.update({"follow": len(followed), "recheck": len(rechecked), "sweep": len(swept)})
        self._count_updates(jobsync.moved(held, fetched, fetch))
        sync.incremental = True
        sync.incremental_fetches += 1
        sync.last_changed, sync.last_gone, sync.last_read = len(fetch), len(found.gone), tuple(fetch)
        st.last_bytes = 0
        st.successes += 1
        st.fetched_at = self._clock()
        if not sync.backlog:  # with jobs left unread, the data holds all Slurm accepted only as of before
            st.requested_at = now
        st.last_ok = True
        return True

    def _follow(
        self,
        before: Sequence[Job],
        fetched: Mapping[int, Sequence[Job]],
        after: Sequence[Job],
        listed: set[int],
    ) -> None:
        """Count down the followed jobs that were read (one whose reason moved, or that left PENDING, is
        done), and follow the ones :func:`exporter.jobsync.to_follow` names now. ``listed``: the ids
        ``/jobs/state`` listed."""
        sync = self.status.jobs_sync
        follow, followed = sync.follow, sync.followed
        held_ids = {j.job_id for j in before}
        reasons = {j.job_id: j.reason for j in before if j.job_id in follow}
        read = [job for records in fetched.values() for job in records]
        for job in read:
            if job.job_id in follow:
                left = follow.pop(job.job_id) - 1
                if job.state == "PENDING" and job.reason == reasons.get(job.job_id):
                    if left > 0:
                        follow[job.job_id] = left
                    else:
                        followed.add(job.job_id)
        fresh = {j.job_id for j in read if j.job_id not in held_ids}
        for job_id in jobsync.to_follow(read, fresh, after, self._clock(), followed):
            follow.setdefault(job_id, jobsync.FOLLOW_READS)
        for job_id in [j for j in follow if j not in listed]:
            del follow[job_id]
        followed.intersection_update(listed)

    def _count_updates(self, found: int) -> None:
        """Book ``found`` records an RPC changed (:func:`exporter.jobsync.updated`, among every record
        read this poll) against the job-changing RPCs counted. As many found: the recheck ends, and what
        was found beyond is kept for one poll — an RPC made between this poll's ``/diag`` and its reads is
        counted by the next ``/diag`` although its change is already read (measured at 20,000 jobs: such
        an RPC sent the recheck through every job while later holds waited)."""
        sync = self.status.jobs_sync
        total = sync.recheck_found + found
        if found or sync.recheck:
            log.debug(
                "recheck: %d of %d RPCs found, %d jobs left", total, sync.recheck_wanted, len(sync.recheck)
            )
        if total >= sync.recheck_wanted:  # as many jobs changed as RPCs were counted
            sync.recheck.clear()
            sync.recheck_pending = False
            sync.recheck_wanted, sync.recheck_found = 0, min(found, total - sync.recheck_wanted)
        elif not sync.recheck and not sync.recheck_pending:  # all read, no RPC since the pass began
            sync.recheck_wanted = sync.recheck_found = 0
        else:
            sync.recheck_found = total

    def _rereads(
        self, held: Sequence[Job], states: Mapping[int, JobSig], chosen: set[int], now: float, changes: int
    ) -> tuple[list[int], list[int]]:
        """The jobs to read again this poll whatever their state, within the room
        :attr:`PollerConfig.jobs_changes_limit` leaves after ``chosen``: after a job-changing RPC the
        likeliest first (:attr:`PollerConfig.jobs_recheck_rate`), then the sweep's next ones, oldest first
        (:attr:`PollerConfig.jobs_sweep_rate`, less one per state ``changes`` read this poll). Added to
        ``chosen``."""
        sync, cfg = self.status.jobs_sync, self.config
        elapsed = 0.0 if sync.quota_at is None else now - sync.quota_at
        sync.quota_at = now
        # one poll's share: the time since the last one — the interval and that poll — but a slow poll
        # counts for at most two intervals, so it cannot earn a share that makes the next one slower still
        most = cfg.interval + min(self.status.last_poll_duration, 2 * cfg.interval)
        live = jobsync.live_ids(held, states)
        if sync.recheck_pending and sync.recheck_found >= sync.recheck_wanted:  # already read (above)
            sync.recheck_pending = False
            sync.recheck_wanted = sync.recheck_found = 0
        # half the recheck's reads may go to re-reading the likeliest jobs first after an RPC during a pass
        sync.head_budget = min(
            sync.head_budget + cfg.jobs_recheck_rate / 2 * min(max(elapsed, 0.0), most),
            cfg.jobs_recheck_rate * HEAD_SECONDS,
        )
        likeliest = _owned_by(held, sync.movers, live)
        if len(likeliest) > len(live) / 2:  # users whose jobs are most of the queue (the token's own)
            likeliest = set()
        if sync.recheck_pending and not sync.recheck:  # an RPC during a pass: another pass after it
            sync.recheck = jobsync.recheck_order(live, likeliest)
            sync.recheck_pending = False
            log.debug(
                "recheck: a pass over %d jobs for %d RPCs, first %d of %s",
                len(live),
                sync.recheck_wanted,
                len(likeliest),
                sorted(sync.movers),
            )
        elif sync.recheck_new and sync.recheck:  # the pass goes on, after the likeliest jobs again
            head = heapq.nlargest(int(sync.head_budget), likeliest or live)
            sync.head_budget -= len(head)
            sync.recheck = jobsync.recheck_order(live, head, sync.recheck)
            log.debug("recheck: an RPC during the pass; %d jobs first again", len(head))
        sync.movers.clear()
        sync.recheck_new = False
        room = max(0, cfg.jobs_changes_limit - len(chosen))
        rechecked: list[int] = []
        if sync.recheck:
            n = min(room, sync.quota("recheck", cfg.jobs_recheck_rate, elapsed, most))
            rechecked = jobsync.take(sync.recheck, n, live, chosen)
            chosen.update(rechecked)
            room -= len(rechecked)
        if not sync.sweep:
            sync.sweep = sorted(live, reverse=True)
            sync.sweep_period = len(live) / cfg.jobs_sweep_rate if cfg.jobs_sweep_rate > 0 else 0.0
        # the sweep yields to the changes: a burst of starts is read, and published, in a shorter poll
        n = max(0, min(room, sync.quota("sweep", cfg.jobs_sweep_rate, elapsed, most)) - changes)
        swept = jobsync.take(sync.sweep, n, live, chosen)
        chosen.update(swept)
        return rechecked, swept

    async def _read_jobs(
        self, ids: Sequence[int], progress: Callable[[Mapping[int, Read], int], None] | None = None
    ) -> dict[int, Read]:
        """``/job/{id}`` for each id, ``--max-concurrency`` at a time, ``progress`` called after each read
        with what was read so far and the id just read; raises the first SlurmError (the other reads are
        cancelled)."""
        out: dict[int, Read] = {}
        if not ids:
            return out
        todo = iter(ids)

        async def lane(index: int) -> None:
            for job_id in todo:  # one shared iterator: each id is read once
                out[job_id] = await self.session.job_records(job_id, lane=index)
                if progress is not None:
                    progress(out, job_id)

        lanes = max(1, min(len(ids), self.client.config.max_concurrency))
        tasks = [asyncio.create_task(lane(i), name=f"poller-job-read-{i}") for i in range(lanes)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return out

    # -- any endpoint, listed -------------------------------------------------------------------------

    async def _fetch_listing(self, name: str, negotiated: Negotiated, *, update_time: bool = True) -> bool:
        """Fetch one endpoint in one request (``update_time`` sent when allowed and due)."""
        st = self.status.endpoints[name]
        path = negotiated.paths.get(name) or f"/slurm/{negotiated.version}/{name}"
        params: dict[str, str] = {}
        now = self._clock()
        incremental = (
            update_time
            and self.config.use_update_time
            and name in INCREMENTAL_ENDPOINTS
            and not st.update_time_broken
            and st.envelope is not None
            and st.envelope.last_update
            and st.full_fetch_at is not None
            and now - st.full_fetch_at < self.config.full_refresh
        )
        if incremental:
            assert st.envelope is not None and st.envelope.last_update is not None
            params["update_time"] = str(int(st.envelope.last_update))
        t0 = time.perf_counter()
        st._fetch_dropped = frozenset()
        try:
            try:
                data, env, nbytes = await self._get_parsed(name, path, params, negotiated)
            except HTTPStatusError as e:
                if not params or e.status not in UPDATE_TIME_REJECTED:
                    raise
                params = {}
                incremental = False
                data, env, nbytes = await self._get_parsed(name, path, params, negotiated)
                st.update_time_broken = True  # the same request without update_time worked
                log.warning("%s: %s with update_time; fetching in full from now on", name, e)
        except NotModified:
            st.unchanged += 1
            st.successes += 1
            st.last_duration = time.perf_counter() - t0
            st.last_bytes = 0
            st.fetched_at = self._clock()
            st.requested_at = now
            st.last_ok = True
            return True
        except SlurmError as e:
            st.record_error(e, self._clock())
            self.status.last_error = str(e)
            log.warning("poll %s failed: %s", name, e)
            return False
        finally:
            st.last_duration = time.perf_counter() - t0
        st.last_bytes = nbytes
        finished = self._clock()
        if incremental and _is_empty(data) and st.data is not None and _unchanged(st.envelope, env):
            st.unchanged += 1
        else:
            st.data = tuple(data) if isinstance(data, list) else data  # shared by every later snapshot
            st.dropped_partitions = st._fetch_dropped
            st.full_fetch_at = finished
            st.envelope = env
            if name == "jobs":
                self._listed_jobs(now, finished, time.perf_counter() - t0)
        st.successes += 1
        st.fetched_at = finished
        st.requested_at = now
        st.last_ok = True
        return True

    def _listed_jobs(self, requested: float, finished: float, duration: float) -> None:
        sync = self.status.jobs_sync
        sync.listed_at, sync.listing_ended, sync.listing_duration = requested, finished, duration
        sync.quota_at = requested  # the re-read quotas accrue from the listing's data on
        sync.listing_requested = False
        sync.forget_rereads()
        sync.backlog = 0
        sync.refused = {job_id: sig for job_id, (sig, _) in self._listing_refused.items()}
        sync.refused_partitions = {
            job_id: parts or ("",) for job_id, (_, parts) in self._listing_refused.items()
        }

    async def _get_parsed(
        self, name: str, path: str, params: dict[str, str], negotiated: Negotiated
    ) -> tuple[Any, Envelope, int]:
        """GET and translate one endpoint. Retried as ``--retries`` says, with or without ``update_time``;
        only a status that means "this server can't do update_time" (:data:`UPDATE_TIME_REJECTED`) is not
        retried with it: :meth:`_fetch` falls back to a full fetch at once."""
        if name in STREAMED_ENDPOINTS:
            adapter = negotiated.jobs_adapter if name == "jobs" else negotiated.adapter
            data, env, nbytes = await self._fetch_array(name, path, params, adapter)
        else:
            final = UPDATE_TIME_REJECTED if params else frozenset()
            body = await self.client.get(path, endpoint=name, params=params, final_statuses=final)
            nbytes = len(body)
            data, env = _parse(negotiated.adapter, name, body)
        if env.errors:
            raise SlurmReportedError("; ".join(env.errors), endpoint=name)
        return data, env, nbytes

    async def _fetch_array(
        self, name: str, path: str, params: dict[str, str], adapter: versions.Adapter
    ) -> tuple[list[Any], Envelope, int]:
        """Stream an endpoint whose data is one array (``/jobs``, ``/nodes``, ...), decoding batches of
        records as they arrive: bounded memory, and no stall of the event loop whatever the body — where
        every byte must be scanned (before the array, a body the fast path cannot cut) the decoder works a
        bounded step at a time and the loop runs between steps. Impossible jobs and nodes are dropped."""
        decode_batch: Callable[[bytes], list[Any]] = (
            adapter.job_array if name == "jobs" else functools.partial(adapter.records, name)
        )
        check: Callable[[Sequence[Any]], tuple[Sequence[Any], list[tuple[Any, str]]]] | None = None
        if name == "jobs":
            check = check_jobs
        elif name == "nodes":
            check = check_nodes
        cap = self.client.config.max_record_bytes
        decoder = StreamingArrayDecoder(
            name.encode(), decode_batch, max_element_bytes=cap, max_envelope_bytes=cap
        )
        records: list[Any] = []
        dropped: list[tuple[Any, str]] = []

        def keep(batch: list[Any]) -> None:
            if check is None:
                records.extend(batch)
                return
            good, bad = check(batch)  # batch by batch: no long stall at 100k jobs
            records.extend(good)
            dropped.extend(bad)

        final = UPDATE_TIME_REJECTED if params else frozenset()
        step = SCAN_STEP_BYTES
        stream = self.client.stream(
            path, endpoint=name, params=params, whole=name != "jobs", final_statuses=final
        )
        async with contextlib.aclosing(stream) as chunks:  # a decode error ends the request, frees its lane
            async for chunk in chunks:
                at = 0
                while at < len(chunk):
                    n = step if decoder.slow else len(chunk) - at
                    keep(decoder.feed(chunk[at : at + n]))
                    at += n
                    while decoder.backlog:
                        await asyncio.sleep(0)
                        keep(decoder.feed(b""))
                    if at < len(chunk):
                        await asyncio.sleep(0)
        envelope_bytes, rest = decoder.finish()
        if not decoder.found_array:  # no "<name>": [...] at all: let the full parser say why
            whole, env = _parse(adapter, name, envelope_bytes)
            keep(whole)
        else:
            keep(rest)
            env = adapter.envelope(envelope_bytes, name)
        if check is not None:
            self._note_dropped(name, dropped)
        if name == "jobs":
            self._listing_refused = {
                job.job_id: (jobsync.signature(job), job.partitions) for job, _ in dropped
            }
        return records, env, decoder.bytes_seen

    def _note_dropped(self, name: str, dropped: Sequence[tuple[Job | Node, str]]) -> None:
        """Count (and log once per poll) records of ``name`` dropped for impossible values; note the
        partitions they name for the data this fetch brings."""
        if dropped:
            st = self.status.endpoints[name]
            st.dropped += len(dropped)
            st._fetch_dropped = dropped_partitions(dropped)
            log.warning(
                "%s: dropped %d record(s) with impossible values (first: %s); demand for partition(s) %s "
                "is held, never lowered, while they are",
                name,
                len(dropped),
                dropped[0][1],
                ", ".join(p or "(none)" for p in sorted(st._fetch_dropped)),
            )


def _owned_by(held: Sequence[Job], users: Collection[str], among: Collection[int]) -> set[int]:
    """Ids in ``among`` of the held jobs that ``users`` own (none without users)."""
    if not users:
        return set()
    return {j.job_id for j in held if j.user in users and j.job_id in among}


class _Progress:
    """Called after each single-job read of one poll: once every job whose state moved is read (while
    re-reads go on), and every ``every`` seconds of reads, publishes a snapshot with the jobs read so far
    folded in — the last snapshot's other parts and "as of" times kept, so jobs not read yet are as
    current as before (like a backlog). A read with refused records waits for the end of the poll (its
    job is dropped and remembered there). ``jobs``: the last published jobs, kept when a later read fails
    (the data never steps back)."""

    def __init__(
        self,
        poller: Poller,
        held: Sequence[Job],
        gone: frozenset[int],
        moved: set[int],
        total: int,
        every: float,
    ) -> None:
        self.poller, self.held, self.gone, self.every = poller, held, gone, every
        self.moved, self.total = moved, total
        """The ids whose state moved, not read yet; how many reads the poll makes."""
        self.last = time.perf_counter()
        self.published = 0
        self.jobs: tuple[Job, ...] | None = None

    def __call__(self, read: Mapping[int, Read], job_id: int) -> None:
        now = time.perf_counter()
        boundary = False
        if job_id in self.moved:
            self.moved.discard(job_id)
            boundary = not self.moved and len(read) < self.total  # the changes are in; re-reads go on
        snap = self.poller.snapshot
        due = boundary or now - self.last >= self.every
        if self.every <= 0 or not due or len(read) == self.published or snap is None:
            return
        self.last, self.published = now, len(read)
        good = {job_id: records for job_id, (records, bad) in read.items() if not bad}
        self.jobs = jobsync.merge(self.held, good, self.gone)
        self.poller.status.jobs_sync.partial_snapshots += 1
        self.poller._swap(msgspec.structs.replace(snap, jobs=self.jobs, taken_at=self.poller._clock()))


def _is_empty(data: Any) -> bool:
    return isinstance(data, list | tuple) and not data


def _unchanged(held: Envelope | None, got: Envelope) -> bool:
    """An empty answer to an ``update_time`` request means "no change" unless Slurm's
    ``last_update`` moved past the data held (then the list really became empty)."""
    if held is None or held.last_update is None:
        return False
    return got.last_update is None or got.last_update <= held.last_update


def _parse(adapter: versions.Adapter, name: str, body: bytes) -> tuple[Any, Envelope]:
    parsers: dict[str, Callable[[bytes], tuple[Any, Envelope]]] = {
        "nodes": adapter.nodes,
        "partitions": adapter.partitions,
        "diag": adapter.diag,
        "licenses": adapter.licenses,
        "reservations": adapter.reservations,
        "jobs": adapter.jobs,
    }
    return parsers[name](body)
