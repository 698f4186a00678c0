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

Jobs are kept incrementally (API v0.0.41+, :mod:`exporter.incremental`): the first poll lists them, later
polls read ``/jobs/state`` and only the jobs whose state moved (``/job/{id}``), the ones whose reason
slurmctld is about to move, after a job-changing RPC the jobs it may have touched (newest first), and a
few more each poll in turn (the sweep: what changes without the state or an RPC). A full listing only at
the start, on request, for a mass change, or every ``jobs_full_refresh`` seconds if set
(``docs/freshness.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from . import versions
from .accounting import ENDED_STATES, Accounting, record_ended
from .backoff import Backoff
from .client import RETRY_BACKOFF_CAP, NotModified, QueryParams
from .errors import HTTPStatusError, ShapeError, SlurmError, SlurmReportedError
from .incremental import IncrementalJobs
from .jsonsplit import SCAN_STEP_BYTES, StreamingArrayDecoder
from .model import Diag, Envelope, Job, SlurmConfig, Snapshot, wall_time
from .pollstate import EndpointState, PollerConfig, PollStatus
from .session import Negotiated, SlurmSession
from .source import LatestSnapshot
from .validate import check_jobs, check_nodes, decode_each, job_stand_in, node_stand_in

log = logging.getLogger(__name__)

RENDER_SECONDS_PER_JOB = 0.01
"""Seconds slurmrestd may take per job to render a ``/jobs`` listing before its first byte: 7 times the
1.35 ms measured (20,000 jobs in 27 s, Slurm 26.05 on the 2-core lab machine, 2026-12-06). A listing that
has not begun by then is cut and retried (a hung one held the data stale for as long as it hung)."""

_ENDPOINT_PREFIX = re.compile(r"^[\w/:]+: ")
"""``jobs: `` before an error's text (the log line names the endpoint already)."""

STREAMED_ENDPOINTS = frozenset({"jobs", "nodes", "partitions", "licenses", "reservations"})
"""Endpoints whose data is one array of records: streamed and decoded batch by batch (``_fetch_array``)."""
STAND_INS: dict[str, Callable[[object], Any]] = {"jobs": job_stand_in, "nodes": node_stand_in}
"""Endpoints whose records that do not decode are refused alone (:func:`exporter.validate.decode_each`):
the others keep their data. Any other endpoint's answer fails whole."""
OFFERED_ONLY = frozenset({"slurmdb_jobs", "qos", "associations", "conf"})
"""Endpoints fetched only when slurmrestd's OpenAPI document lists them (no path to guess)."""

INCREMENTAL_ENDPOINTS = frozenset({"jobs", "nodes", "partitions", "reservations"})
"""Endpoints whose GET takes ``update_time``; "no change" is HTTP 304 (24.11+) or an empty list."""


UPDATE_TIME_REJECTED = frozenset({400, 422, 500})
"""Statuses that, for a request carrying ``update_time``, mean "this server can't do update_time":
Slurm 24.11's v0.0.40/41 reject the parameter itself ("Parsing of N for timestamp failed": 422 on
/jobs, 500 elsewhere) and its v0.0.42 /nodes answers 500 "Unable to query partitions" instead of 304."""


COPY_CHECK = 1.0
"""Seconds between two looks at a standby's copy while it is fresh (no poll): a copy gone stale is polled
for within this, not after a whole ``--standby-poll-interval``."""


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
        self._attempted: dict[str, float] = {}
        """Endpoint with an interval → when it was last fetched (or tried)."""
        self._accounting_started: float | None = None
        """When the first read of slurmdbd's jobs was sent: jobs that ended before are history, not counted
        (the last read's time is its endpoint's ``requested_at``)."""
        self._early = asyncio.Event()
        self.copy_fresh: Callable[[], bool] | None = None
        """While this returns True a standby does not poll: it serves a fresh copy of the leader's
        snapshots (:meth:`adopt`, :class:`exporter.follower.ReplicaFollower`) and asks slurmrestd nothing."""
        self.adopted = 0
        """Snapshots taken from the leader's copy (:meth:`adopt`)."""
        self.standby = False
        """A replica that does not hold the bridge's Lease: its jobs are kept from ``/jobs/state`` like the
        leader's, but listed in full only when it must (first, requested, too many changes), never for the
        period — the second replica does not double slurmrestd's listings."""
        self._listing: asyncio.Task[_Listed] | None = None
        """A full ``/jobs`` listing read beside the incremental reads (:meth:`_list_beside`)."""
        self._listing_failures = 0
        self._listing_retry_at = 0.0
        self._listing_backoff = Backoff(max(self.client.config.backoff, 0.1), RETRY_BACKOFF_CAP, jitter=0.5)
        self._rng = random.Random()
        self._jobs = IncrementalJobs(
            session,
            self.config,
            self.status.jobs_sync,
            clock=clock,
            publish=self._publish_jobs,
            conditions=self.status.conditions,
        )
        self._jobs.wake = self._early.set  # a whole /jobs/state read beside the polls ended: fold it in

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
        try:
            await self._run()
        finally:
            await self.close()

    async def _run(self) -> None:
        while True:
            began = time.monotonic()
            copying = self._copying()
            try:
                if not copying:
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
            if copying:  # no poll: look at the copy again soon (it may turn stale, or this replica lead)
                interval = min(interval, COPY_CHECK)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._early.wait()
            if self._early.is_set():  # a burst of early requests: at most one poll per early_gap
                await asyncio.sleep(
                    began + min(self.config.early_gap, self.config.interval) - time.monotonic()
                )
            self._early.clear()

    def _copying(self) -> bool:
        """A standby whose copy of the leader's snapshots is fresh: nothing to poll."""
        return self.standby and self.copy_fresh is not None and self.copy_fresh()

    def adopt(self, snap: Snapshot) -> bool:
        """A standby takes the leader's snapshot as its own: served as the current one, and held as if its
        own poll had read it — each endpoint's data, its times and ``last_update`` (a takeover then reads
        what changed since, ``/jobs/state`` against these jobs, not a first listing of everything).
        False (nothing done) once this replica leads: its own polls are the truth then."""
        if not self.standby:
            return False
        items: dict[str, Any] = {
            "jobs": snap.jobs,
            "nodes": snap.nodes,
            "partitions": snap.partitions,
            "licenses": snap.licenses,
            "reservations": snap.reservations,
            "shares": snap.shares,
            "qos": snap.qos,
            "associations": snap.associations,
            "diag": snap.diag,
            "conf": snap.config,
        }
        for name, st in self.status.endpoints.items():
            fetched = snap.fetched_at.get(name)
            if fetched is None or name not in items:
                continue
            st.data, st.fetched_at, st.requested_at = items[name], fetched, snap.requested_at.get(name)
            st.full_fetch_at, st.last_ok = fetched, True
            st.envelope = Envelope(
                last_update=snap.last_update.get(name), slurm_version=snap.slurm_version, cluster=snap.cluster
            )
        sync = self.status.jobs_sync
        if "jobs" in snap.listed_at:
            sync.listed_at, sync.unlisted = snap.listed_at["jobs"], False
        elif "jobs" in snap.fetched_at:
            sync.unlisted = True  # the leader started without a listing (too many jobs): neither lists
        sync.backlog = snap.jobs_unread
        status = self.status
        status.api_version = status.api_version or snap.api_version
        status.last_poll_ok, status.last_poll_finished = True, snap.taken_at
        self.adopted += 1
        self._swap(snap)
        return True

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
                except SlurmError as e:
                    self.status.conditions.seen("negotiate", e.kind, f"cannot choose an API version: {e}")
                    return None
                self.status.conditions.ended("negotiate")
            paths = negotiated.paths
            wanted = [e for e in self.config.endpoints if e in paths or (not paths and e not in OFFERED_ONLY)]
            if "slurmdb_jobs" in self.config.endpoints and "slurmdb_jobs" not in wanted:
                self.status.accounting_note = "not offered by slurmrestd (no openapi/slurmdbd)"
            due = [e for e in wanted if self._due(e, started)]
            first: list[bool] = []
            if "jobs" in wanted and "diag" in wanted and self._jobs.applies(negotiated):
                # /diag first (a few ms): its RPC counters tell whether a job changed without its state
                first.append(await self._fetch("diag", negotiated))
                if first[0]:
                    diag_st = self.status.endpoints["diag"]
                    diag = diag_st.data if isinstance(diag_st.data, Diag) else None
                    self._jobs.note_job_updates(diag, diag_st.requested_at)
                wanted = ["diag", *(e for e in wanted if e != "diag")]
            rest = [e for e in due if not (first and e == "diag")]
            results = [*first, *await asyncio.gather(*(self._fetch(e, negotiated) for e in rest))]
            self._note_conditions([*(["diag"] if first else []), *rest], results)
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

    def _note_conditions(self, fetched: Sequence[str], results: Sequence[bool]) -> None:
        """Log each endpoint's lasting failure when it starts, changes cause and ends (not every poll:
        an expired token is one line per endpoint, and one more when it is fixed)."""
        conditions = self.status.conditions
        for name, ok in zip(fetched, results, strict=True):
            st = self.status.endpoints[name]
            if ok:
                conditions.ended(f"poll {name}", "answering again")
            else:
                text = _ENDPOINT_PREFIX.sub("", st.last_error, count=1)
                conditions.seen(f"poll {name}", st.last_error_kind, f"failed: {text}")
        for name in ("jobs", "nodes"):
            if (held := self.status.endpoints.get(name)) is not None:
                held.note_refused(conditions)

    def _due(self, endpoint: str, now: float) -> bool:
        """Whether ``endpoint`` is fetched in this poll: always, unless :attr:`PollerConfig.intervals`
        gives it an interval that has not passed since its last attempt (success or not)."""
        every = self.config.intervals.get(endpoint)
        if every is None:
            return True
        last = self._attempted.get(endpoint)
        if last is not None and now - last < every:
            return False
        self._attempted[endpoint] = now
        return True

    def _swap(self, snap: Snapshot) -> None:
        self.status.last_success = snap.taken_at
        self._latest.put(snap)

    def _publish_jobs(self, jobs: tuple[Job, ...]) -> bool:
        """Swap in the current snapshot with ``jobs`` (a burst of single-job reads, read so far); False
        before the first snapshot."""
        snap = self.snapshot
        if snap is None:
            return False
        self._swap(msgspec.structs.replace(snap, jobs=jobs, taken_at=self._clock()))
        return True

    def _build(self, wanted: Sequence[str], negotiated: Negotiated) -> Snapshot:
        eps = self.status.endpoints
        env = next((eps[e].envelope for e in wanted if eps[e].envelope is not None), None)
        diag = eps["diag"].data if "diag" in eps else None
        conf = eps["conf"].data if "conf" in eps else None

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
            shares=items("shares"),
            qos=items("qos"),
            associations=items("associations"),
            config=conf if isinstance(conf, SlurmConfig) else None,
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
            jobs_unread=self.status.jobs_sync.backlog if "jobs" in wanted else 0,
        )

    def _listed_at(self) -> dict[str, float]:
        """When the held jobs were last listed in full (the request's start); the other endpoints are
        always fetched whole, so their ``requested_at`` says it."""
        at = self.status.jobs_sync.listed_at
        return {"jobs": at} if at is not None else {}

    async def _fetch(self, name: str, negotiated: Negotiated) -> bool:
        """Fetch one endpoint into its state; True on success (or confirmed no change)."""
        if name == "slurmdb_jobs":
            return await self._fetch_accounting(negotiated)
        if name == "jobs" and self._jobs.applies(negotiated):
            return await self._fetch_jobs(negotiated)
        if name == "jobs":
            self.status.jobs_sync.incremental = False
            self.status.jobs_sync.full_listings["off"] += 1
        return await self._fetch_listing(name, negotiated)

    # -- jobs, incrementally (exporter.jobsync) --------------------------------------------------------

    async def _fetch_jobs(self, negotiated: Negotiated) -> bool:
        """The jobs, read incrementally (:class:`exporter.incremental.IncrementalJobs`) — with a full
        listing beside the reads when one is due and jobs are held (:meth:`_list_beside`: the polls go on,
        a hung listing freezes nothing) — or listed in full in this poll (the first listing; no
        ``/jobs/state``)."""
        st, sync = self.status.endpoints["jobs"], self.status.jobs_sync
        self._take_listing(st)
        now = self._clock()
        reason = (
            None if self._listing is not None else self._jobs.listing_reason(st, now, standby=self.standby)
        )
        first = reason == "first" and st.data is None
        if first and await self._jobs.too_many_at_start(self._diag()):
            # too many jobs to list: /jobs/state and single reads from the start
            self._jobs.start_unlisted(st)
            reason = None
        if reason is not None and st.data is not None:
            self._list_beside(reason, negotiated, now)
            reason = None
        if reason is None:
            synced = await self._jobs.read(st, self.status.last_poll_duration)
            if synced is False:
                self.status.last_error = st.last_error
            if isinstance(synced, bool):
                now = self._clock()
                if (
                    sync.backlog
                    and self._listing is None
                    and sync.listing_allowed(now, self.config.jobs_listing_ratio)
                    and not sync.too_many_to_list(self.config.jobs_listing_max, None)
                ):
                    self._list_beside("changes", negotiated, now)  # more moved than the limit reads a poll
                return synced
            reason = synced
        sync.incremental = False
        sync.full_listings[reason] += 1
        return await self._fetch_listing(
            "jobs", negotiated, update_time=reason == "off", first_byte=self._listing_first_byte(st)
        )

    def _listing_first_byte(self, st: EndpointState) -> float | None:
        """Seconds a full ``/jobs`` listing may take to begin: the idle limit, plus what slurmrestd may
        take to render as many jobs as are held (or were last listed by ``/jobs/state``) at
        :data:`RENDER_SECONDS_PER_JOB`, or three times the last listing — whichever is more. None (the
        streaming limit alone) while the number of jobs is unknown. Before the first listing, ``/diag``'s
        counts stand for it: pending, running and ended since its statistics were reset (more than slurmctld
        keeps, which only makes the allowance longer)."""
        n = len(st.data) if isinstance(st.data, tuple) else self.status.jobs_sync.states_seen
        diag = self._diag()
        if n is None and diag is not None:
            n = diag.jobs_pending + diag.jobs_running + diag.jobs_ended
        if n is None:
            return None
        render = max(n * RENDER_SECONDS_PER_JOB, 3 * self.status.jobs_sync.listing_duration)
        return self.client.config.idle_timeout + render

    def _diag(self) -> Diag | None:
        """The last ``/diag`` read, if any."""
        st = self.status.endpoints.get("diag")
        return st.data if st is not None and isinstance(st.data, Diag) else None

    def _list_beside(self, reason: str, negotiated: Negotiated, now: float) -> None:
        """Start a full ``/jobs`` listing as its own task, the incremental reads going on meanwhile (what
        they read is laid over the listing when it ends: :meth:`exporter.incremental.IncrementalJobs.
        listed_beside`); not before the backoff after a failed one has passed."""
        if now < self._listing_retry_at:
            return
        self._jobs.listing_began()
        self._listing = asyncio.create_task(self._list_jobs(negotiated, reason), name="poller-jobs-listing")
        self._listing.add_done_callback(lambda _: self._early.set())  # fold it in at the next poll, soon

    async def _list_jobs(self, negotiated: Negotiated, reason: str) -> _Listed:
        st = self.status.endpoints["jobs"]
        path = negotiated.paths.get("jobs") or f"/slurm/{negotiated.jobs_version}/jobs"
        requested, t0 = self._clock(), time.perf_counter()
        records, env, nbytes, dropped = await self._fetch_array(
            "jobs", path, {}, negotiated.jobs_adapter, first_byte=self._listing_first_byte(st)
        )
        if env.errors:
            raise SlurmReportedError("; ".join(env.errors), endpoint="jobs")
        return _Listed(
            reason, records, env, nbytes, dropped, requested, self._clock(), time.perf_counter() - t0
        )

    def _take_listing(self, st: EndpointState) -> None:
        """Fold in the listing read beside the incremental reads, if it ended: its data (with what they
        read since laid over it), or its failure (counted, logged once, retried after a backoff)."""
        task = self._listing
        if task is None or not task.done():
            return
        self._listing = None
        sync, conditions = self.status.jobs_sync, self.status.conditions
        try:
            got = task.result()
        except (SlurmError, asyncio.CancelledError) as e:
            err = e if isinstance(e, SlurmError) else SlurmError("listing cancelled", endpoint="jobs")
            self._jobs.listing_failed()
            self._failed(st, err)
            delay = self._listing_backoff.delay(self._listing_failures, self._rng)
            self._listing_failures += 1
            self._listing_retry_at = self._clock() + delay
            conditions.seen(
                "jobs listing",
                err.kind,
                f"failed: {_ENDPOINT_PREFIX.sub('', str(err), count=1)}; the jobs are kept by single reads "
                f"meanwhile, listing again in {delay:.1f} s",
            )
            return
        self._listing_failures, self._listing_retry_at = 0, 0.0
        conditions.ended("jobs listing", "listed again")
        sync.incremental = True
        sync.full_listings[got.reason] += 1
        st.note_dropped(got.dropped)
        self._jobs.note_listing(got.dropped)
        st.data = self._jobs.listed_beside(got.records, got.requested, got.finished, got.duration)
        self._jobs.hold_refused(st)
        st.full_fetch_at, st.envelope, st.last_bytes = got.finished, got.env, got.nbytes
        st.record_ok(got.finished, max(st.requested_at or got.requested, got.requested))

    @property
    def whole_states_in_flight(self) -> bool:
        """Whether a whole ``/jobs/state`` answer is being read beside the incremental reads."""
        return self._jobs.whole_in_flight

    async def listing_settled(self) -> None:
        """Until the listing and the whole ``/jobs/state`` answer read beside the incremental reads (if
        any) have ended, ok or not; the next poll folds them in."""
        if self._listing is not None:
            await asyncio.wait([self._listing])
        await self._jobs.whole_settled()

    async def close(self) -> None:
        """Stop a listing (or whole ``/jobs/state`` answer) read beside the incremental reads (:meth:`run`
        does it when cancelled)."""
        task, self._listing = self._listing, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._jobs.listing_failed()
        await self._jobs.close()

    # -- slurmdbd's ended jobs (exporter.accounting) ----------------------------------------------------

    async def _fetch_accounting(self, negotiated: Negotiated) -> bool:
        """The jobs that ended since the last read (reaching back ``accounting_overlap`` seconds), added to
        the totals once each. The first read starts at this process's start: history is not counted."""
        st = self.status.endpoints["slurmdb_jobs"]
        now = self._clock()
        since = now if st.requested_at is None else st.requested_at  # the last read's window end
        overlap = self.config.accounting_overlap
        # the ended states only, each its own ``state=`` (a comma list is one unknown flag to slurmrestd:
        # HTTP 500), with an end time (without one slurmdbd takes end = start and finds nearly nothing):
        # the jobs that ended in the window, not every job that ran in it. The times relative to
        # slurmdbd's clock (sacct's ``now-N``): v0.0.40/v0.0.41 refuse every epoch number (HTTP 422,
        # "Parsing of ... for timestamp failed"), every version takes this (seen in the labs)
        params = [
            ("start_time", f"now-{max(int(now - since + overlap), 0)}"),
            ("end_time", "now+1"),
            *(("state", state) for state in sorted(ENDED_STATES)),
        ]
        t0 = time.perf_counter()
        try:
            jobs, env, nbytes = await self._get_parsed(
                "slurmdb_jobs", negotiated.paths["slurmdb_jobs"], params, negotiated
            )
        except SlurmError as e:
            return self._failed(st, e)
        finally:
            st.last_duration = time.perf_counter() - t0
        started = self._accounting_started = self._accounting_started or now
        fresh = [j for j in jobs if j.end_time is not None and j.end_time >= started]
        self.status.accounting = record_ended(
            self.status.accounting or Accounting(), fresh, keep_after=now - overlap
        )
        self.status.accounting_note = "on"
        st.last_bytes = nbytes
        st.envelope = env
        st.record_ok(now, now)
        return True

    # -- any endpoint, listed -------------------------------------------------------------------------

    async def _fetch_listing(
        self, name: str, negotiated: Negotiated, *, update_time: bool = True, first_byte: float | None = None
    ) -> bool:
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
        st.note_dropped(())
        try:
            try:
                data, env, nbytes = await self._get_parsed(name, path, params, negotiated, first_byte)
            except HTTPStatusError as e:
                if not params or e.status not in UPDATE_TIME_REJECTED:
                    raise
                params = {}
                incremental = False
                data, env, nbytes = await self._get_parsed(name, path, params, negotiated, first_byte)
                st.update_time_broken = True  # the same request without update_time worked
                log.warning("%s: %s with update_time; fetching in full from now on", name, e)
        except NotModified:
            st.unchanged += 1
            st.last_duration = time.perf_counter() - t0
            st.last_bytes = 0
            st.record_ok(self._clock(), now)
            return True
        except SlurmError as e:
            return self._failed(st, e)
        finally:
            st.last_duration = time.perf_counter() - t0
        st.last_bytes = nbytes
        finished = self._clock()
        if incremental and _is_empty(data) and st.data is not None and _unchanged(st.envelope, env):
            st.unchanged += 1
        else:
            st.data = tuple(data) if isinstance(data, list) else data  # shared by every later snapshot
            st.take_fetched_refusals()
            st.full_fetch_at = finished
            st.envelope = env
            if name == "jobs":
                self._jobs.listed(now, finished, time.perf_counter() - t0)
        st.record_ok(finished, now)
        return True

    def _failed(self, st: EndpointState, err: SlurmError) -> bool:
        """Record a failed fetch of ``st``'s endpoint (its data is kept); False."""
        st.record_error(err, self._clock())
        self.status.last_error = str(err)  # logged by _note_conditions when the failure starts or changes
        return False

    async def _get_parsed(
        self,
        name: str,
        path: str,
        params: QueryParams,
        negotiated: Negotiated,
        first_byte: float | None = None,
    ) -> tuple[Any, Envelope, int]:
        """GET and translate one endpoint. Retried as ``--retries`` says, with or without ``update_time``;
        only a status that means "this server can't do update_time" (:data:`UPDATE_TIME_REJECTED`) is not
        retried with it: :meth:`_fetch` falls back to a full fetch at once."""
        if name in STREAMED_ENDPOINTS:
            adapter = negotiated.jobs_adapter if name == "jobs" else negotiated.adapter
            data, env, nbytes, dropped = await self._fetch_array(
                name, path, params, adapter, first_byte=first_byte
            )
            if name in STAND_INS:
                self.status.endpoints[name].note_dropped(dropped)
            if name == "jobs":
                self._jobs.note_listing(dropped)
        else:
            final = UPDATE_TIME_REJECTED if params else frozenset()
            body = await self.client.get(path, endpoint=name, params=params, final_statuses=final)
            nbytes = len(body)
            data, env = _parse(negotiated.adapter, name, body)
        if env.errors:
            raise SlurmReportedError("; ".join(env.errors), endpoint=name)
        return data, env, nbytes

    async def _fetch_array(
        self,
        name: str,
        path: str,
        params: QueryParams,
        adapter: versions.Adapter,
        *,
        first_byte: float | None = None,
    ) -> tuple[list[Any], Envelope, int, list[tuple[Any, str]]]:
        """Stream an endpoint whose data is one array (``/jobs``, ``/nodes``, ...), decoding batches of
        records as they arrive: bounded memory, and no stall of the event loop whatever the body — where
        every byte must be scanned (before the array, a body the fast path cannot cut) the decoder works a
        bounded step at a time and the loop runs between steps. Impossible jobs and nodes are dropped."""
        decode_whole: Callable[[bytes], list[Any]] = (
            adapter.job_array if name == "jobs" else functools.partial(adapter.records, name)
        )
        check: Callable[[Sequence[Any]], tuple[Sequence[Any], list[tuple[Any, str]]]] | None = None
        if name == "jobs":
            check = check_jobs
        elif name == "nodes":
            check = check_nodes
        stand_in = STAND_INS.get(name)
        undecodable: list[tuple[Any, str]] = []

        def decode_batch(batch: bytes) -> list[Any]:
            try:
                return decode_whole(batch)
            except ShapeError:
                if stand_in is None:
                    raise
                good, bad = decode_each(batch, decode_whole, stand_in)  # refuse the bad records alone
                undecodable.extend(bad)
                return good

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
            path,
            endpoint=name,
            params=params,
            whole=name != "jobs",
            final_statuses=final,
            first_byte=first_byte,
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
        dropped.extend(undecodable)
        return records, env, decoder.bytes_seen, dropped


@dataclass(frozen=True)
class _Listed:
    """A full ``/jobs`` listing read beside the incremental reads."""

    reason: str
    records: list[Job]
    env: Envelope
    nbytes: int
    dropped: list[tuple[Job, str]]
    requested: float
    finished: float
    duration: float


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
        "shares": adapter.shares,
        "slurmdb_jobs": adapter.slurmdb_jobs,
        "conf": adapter.conf,
        "qos": adapter.qos,
        "associations": adapter.associations,
        "jobs": adapter.jobs,
    }
    return parsers[name](body)
