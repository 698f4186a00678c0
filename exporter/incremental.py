"""The jobs' part of a poll between full listings: ``/jobs/state``, then ``/job/{id}`` for the jobs whose
state moved, for the ones whose reason is about to move, after a job-changing RPC for the jobs it may have
touched (the likeliest first) and a few more in turn (the sweep). :mod:`exporter.jobsync` decides (pure);
this module reads and keeps the bookkeeping in :class:`exporter.pollstate.JobsSync`. The poller
(:class:`exporter.poller.Poller`) calls it and lists ``/jobs`` in full when it says so.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import jobsync, jobwatch
from .client import version_key
from .errors import HTTPStatusError, SlurmError
from .jobsync import JobSig
from .logs import Conditions
from .model import Diag, Job
from .pollstate import EndpointState, JobsSync, PollerConfig, refusals
from .session import Negotiated, SlurmSession

log = logging.getLogger("exporter.poller")

INCREMENTAL_JOBS_SINCE = "v0.0.41"
"""The first API version whose ``/jobs/state`` names every entry by its record's job id (Slurm 24.11)."""

HEAD_SECONDS = 5.0
"""An RPC during a recheck pass re-reads at most this many seconds' worth of the likeliest jobs first."""

STATES_FULL_SPACING = 3.0
"""While ``/jobs/state`` is asked about some records only (:mod:`exporter.jobwatch`), a count no answer
accounted for has the whole answer read once the last one is this many times as old as it took
(slurmrestd spends at most a third of its time on them: 100,000 jobs, every ~50 s)."""
STATES_FULL_EVERY_RATIO = 10.0
"""The whole answer no count asked for (:attr:`PollerConfig.jobs_states_full_every`) is read no sooner than
this many times as long as it took: 100,000 jobs, ~17 s, every ~3 minutes (a tenth of slurmrestd's time;
every 60 s it was 0.3 of a core, measured 2026-12-07)."""
CENSUS_JOBS = 250_000
"""The jobs a ``/jobs/state`` read is given the time to render (100 s beyond the idle limit) when none are
known yet: the count before the first listing (read because ``/diag``'s may be stale: after a burst of
100,000 submissions the small-request limit, 30 s, would cut it, and the listing it was to prevent would
follow) and the first read of a start without a listing."""
ASK_CHUNK = 2_000
"""Job ids one ``/jobs/state?job_id=`` request asks about (its URL ~28 KB; 10,000 ids are refused)."""
WHOLE_RETRY = 10.0
"""Seconds after a failed whole ``/jobs/state`` answer read beside the polls before another is started."""
STATES_REUSE = 10.0
"""While a backlog drains, a ``/jobs/state`` answer is used again for this many times the seconds it took
(:meth:`IncrementalJobs._reusable_states`)."""

STATES_SECONDS_PER_JOB = 0.0004
"""Seconds slurmrestd may take per job listed to render ``/jobs/state`` before its first byte: twice the
~0.19 ms a job measured at 100,000 jobs (26.05, the 2-core lab machine, 2026-12-06; ~0.05 ms at 20,000)."""

_START_ORDER = {"PENDING": 0, "RUNNING": 1}
"""The order of the first reads of a start without a listing: pending jobs (demand: scale from zero),
running ones, the rest (ended records)."""

Read = tuple[list[Job], list[tuple[Job, str]]]
"""One ``/job/{id}`` read: the valid records, and the refused ones with why."""

Publish = Callable[[tuple[Job, ...]], bool]
"""Swap in a snapshot with these jobs (the rest as the current snapshot holds it); False: no snapshot yet."""


class IncrementalJobs:
    """Keeps the jobs between full listings for one poller: its ``session``, ``config`` and the
    :class:`JobsSync` it reports; ``publish`` swaps in the jobs read so far while a burst of reads goes on."""

    def __init__(
        self,
        session: SlurmSession,
        config: PollerConfig,
        sync: JobsSync,
        *,
        clock: Callable[[], float],
        publish: Publish,
        conditions: Conditions,
    ) -> None:
        self.session, self.config, self.sync = session, config, sync
        self.conditions = conditions
        self._clock, self._publish = clock, publish
        self._listing_refused: dict[int, tuple[JobSig, tuple[str, ...], str]] = {}
        """Jobs the fetch of a full listing dropped as impossible, as :attr:`JobsSync.refused`."""
        self.beside: _Beside | None = None
        """What the incremental reads found while a full listing is read beside them; None when none is."""
        self._census: jobsync.StatesRead | None = None
        """The ``/jobs/state`` answer :meth:`too_many_at_start` read, for the first incremental read."""
        self._fresh_counts: tuple[jobwatch.JobCounts, float] | None = None
        """slurmctld's job counters from this poll's ``/diag`` and when it was requested (None: not read)."""
        self._whole: _WholeBeside | None = None
        """The whole ``/jobs/state`` answer read beside the polls, while it is (:meth:`_start_whole`)."""
        self._whole_retry_at = 0.0
        """No whole answer is read beside the polls before this time (after a failed one)."""
        self.wake: Callable[[], None] = lambda: None
        """Called when a whole answer read beside the polls ended (the poller polls soon)."""

    def applies(self, negotiated: Negotiated) -> bool:
        """Whether jobs are kept from ``/jobs/state`` between listings: v0.0.41+ (v0.0.40 has the endpoint
        but names a split-off array task by its array's id, ``3_1``, not its own record's, ``6_1``)."""
        return (
            self.config.incremental_jobs
            and not self.sync.states_unsupported
            and version_key(negotiated.jobs_version) >= version_key(INCREMENTAL_JOBS_SINCE)
        )

    def note_job_updates(self, diag: Diag | None, requested_at: float | None = None) -> None:
        """Look at slurmctld's count of job-changing RPCs in the /diag just read: when it moved, a job may
        have changed without its state (hold, release, ``scontrol update``): read jobs again. Its job
        counters (requested at ``requested_at``) tell this poll's read what to ask ``/jobs/state``
        (:mod:`exporter.jobwatch`)."""
        counts = jobwatch.JobCounts.of(diag)
        self._fresh_counts = (counts, requested_at) if counts is not None and requested_at else None
        rpcs = jobsync.job_update_rpcs(diag)
        sync = self.sync
        users = diag.rpc_user_counts if diag is not None else {}
        moved = jobsync.users_moved(sync.user_rpcs, users)
        if users:
            sync.user_rpcs = dict(users)
        if rpcs is None:
            return
        if sync.update_rpcs is not None and rpcs != sync.update_rpcs:
            sync.recheck_pending = sync.recheck_new = True  # a lower count: slurmctld restarted
            sync.recheck_wanted += max(1, rpcs - sync.update_rpcs)
            for user, sent in moved.items():
                sync.movers[user] = sync.movers.get(user, 0) + sent
        sync.update_rpcs = rpcs

    def listing_reason(self, st: EndpointState, now: float, *, standby: bool) -> str | None:
        """Why the jobs must be listed in full now; None when an incremental read will do."""
        sync, cfg = self.sync, self.config
        if st.data is None or (sync.listed_at is None and not sync.unlisted):
            return "first"
        if sync.listing_requested:
            return "requested"
        period = max(cfg.jobs_full_refresh, cfg.jobs_listing_ratio * sync.listing_duration)
        if (
            cfg.jobs_full_refresh > 0
            and not standby
            and sync.listed_at is not None
            and now - sync.listed_at >= period
            and not sync.too_many_to_list(cfg.jobs_listing_max, None)
        ):
            return "period"
        return None

    def start_unlisted(self, st: EndpointState) -> None:
        """Start without a listing (Slurm holds more jobs than one may render): no job held, and the data
        holds nothing as of any time (``requested_at`` 0, what the bridge reads) until every job
        ``/jobs/state`` lists was read one by one (:attr:`JobsSync.backlog` 0)."""
        st.data, st.requested_at = (), 0.0
        self.sync.unlisted = True
        log.info(
            "more than %d jobs in Slurm: reading them one by one from /jobs/state (at most %d a poll), "
            "no full /jobs listing; the jobs data is partial until every job was read",
            self.config.jobs_listing_max,
            self.config.jobs_changes_limit,
        )

    def note_listing(self, dropped: Sequence[tuple[Job, str]]) -> None:
        """The records a full listing dropped as impossible: not read again until their state moves."""
        self._listing_refused = {
            job.job_id: (jobsync.signature(job), job.partitions or ("",), why) for job, why in dropped
        }

    def listed(self, requested: float, finished: float, duration: float) -> None:
        """A full listing (requested at ``requested``) is the held data now: what it read replaces every
        re-read's bookkeeping."""
        sync = self.sync
        self._drop_whole()
        sync.listed_at, sync.listing_ended, sync.listing_duration = requested, finished, duration
        sync.quota_at = requested  # the re-read quotas accrue from the listing's data on
        sync.listing_requested = False
        sync.forget_rereads()
        sync.backlog = 0
        sync.refused = dict(self._listing_refused)

    def hold_refused(self, st: EndpointState) -> None:
        """:attr:`JobsSync.refused` as the refusals of the jobs held (``st``'s partitions held, reasons)."""
        refused = self.sync.refused.values()
        st.dropped_partitions = frozenset(p for _, parts, _ in refused for p in parts)
        st.refused_now = refusals(why for _, _, why in refused)

    def listing_began(self) -> None:
        """A full listing is being read beside the incremental reads: remember what they read from now on,
        to lay it over the listing's older records (:meth:`listed_beside`)."""
        self.beside = _Beside(rpcs=self.sync.update_rpcs)

    def listing_failed(self) -> None:
        self.beside = None

    def listed_beside(
        self, jobs: Sequence[Job], requested: float, finished: float, duration: float
    ) -> tuple[Job, ...]:
        """A full listing read beside the incremental reads ended: its records with what those reads found
        since it was requested laid over them (a job read or gone since is as they found it), and its
        refusals joined to theirs. A job-changing RPC counted since it was requested keeps the recheck
        going (the listing may have been rendered before the change)."""
        beside, sync = self.beside, self.sync
        assert beside is not None
        self.beside = None
        recheck = (sync.recheck_pending, list(sync.recheck), sync.recheck_wanted, sync.recheck_found)
        self.listed(requested, finished, duration)
        for job_id in beside.read:
            sync.refused.pop(job_id, None)
        sync.refused.update(beside.refused)
        if sync.update_rpcs != beside.rpcs:
            sync.recheck_pending, sync.recheck, sync.recheck_wanted, sync.recheck_found = recheck
        return jobsync.merge(jobs, beside.read, beside.gone)

    async def read(self, st: EndpointState, last_poll: float) -> bool | str:
        """One incremental read: ``/jobs/state``, then ``/job/{id}`` for each job whose state moved (at
        most :attr:`PollerConfig.jobs_changes_limit`), folded into the held jobs only when every read
        succeeded. True/False: done, succeeded or not; ``"off"``: this server has no ``/jobs/state``, list
        in full. More changed jobs than :attr:`PollerConfig.jobs_changes_limit`: the limit's worth is read,
        :attr:`JobsSync.backlog` says how many wait (the poller lists beside the reads when it may)."""
        sync, cfg = self.sync, self.config
        held: tuple[Job, ...] = st.data
        now = self._clock()
        t0 = time.perf_counter()
        rechecked: list[int] = []
        swept: list[int] = []
        progress: _Progress | None = None
        moved: list[int] = []
        verdict: _Verdict | None = None
        try:
            census, self._census = self._census, None
            fresh, self._fresh_counts = self._fresh_counts, None
            reused = None if census is not None else self._reusable_states(now)
            taken = None if census is not None or reused is not None else self._take_whole(st, fresh, now)
            delta, due = (
                self._delta(st, fresh, now)
                if census is None and reused is None and taken is None
                else (None, False)
            )
            whole_here = False
            if census is not None:  # read just before, to decide how to start
                answer, as_of = census, sync.states_at
                whole_here = True
            elif reused is not None:  # a backlog drains: the last answer still names what is left to read
                answer, as_of = reused, sync.states_at
                sync.states_reused += 1
            elif taken is not None and fresh is not None:  # the whole answer read beside: with the asks
                answer, verdict = await self._ask_some(held, taken[1], fresh, taken[0])
                as_of = sync.counts_at
            elif delta is not None and fresh is not None:  # only what can have moved for what was counted
                answer, verdict = await self._ask_some(held, delta, fresh)
                as_of = sync.counts_at
                if due:  # what no count shows: the whole answer, read beside the polls (none waits for it)
                    self._start_whole(fresh, len(held))
            else:
                self._drop_whole()  # this one is newer
                # none held (a start without a listing): the count is unknown, allow for many
                read_states = await self._read_states(now, len(held) or CENSUS_JOBS)
                if read_states is None:
                    return "off"
                answer, as_of = read_states, now
                whole_here = True
            if whole_here:  # a whole answer read in this poll: every count in it
                sync.states_asks["whole"] += 1
                sync.counts, sync.counts_at = fresh if fresh is not None else (None, 0.0)
                sync.unaccounted = False
                sync.found_beyond = jobwatch.NOTHING
                sync.full_states_at, sync.full_states_seconds = sync.states_at, sync.states_seconds
            states = answer.states
            sync.unreadable_entries = answer.unreadable
            if answer.unreadable:
                self.conditions.seen(
                    "jobs/state",
                    "unreadable",
                    f"{answer.unreadable} entries with an unreadable job id; no job is taken as gone",
                )
            else:
                self.conditions.ended("jobs/state", "every job id readable again")
            refused = {job_id: sig for job_id, (sig, _, _) in sync.refused.items()}
            found = jobsync.changes(held, states, refused, complete=not answer.unreadable and reused is None)
            # jobs that started first: what the bridge binds and the demand stops counting (reads of a
            # burst are published as they come, _Progress)
            if st.requested_at == 0.0:  # a start without a listing, not complete yet: what demand needs first
                fetch = sorted(found.fetch, key=lambda j: _START_ORDER.get(states[j][0], 2))
            else:
                fetch = sorted(found.fetch, key=lambda j: states[j][0] != "RUNNING")
            sync.backlog = max(0, len(fetch) - cfg.jobs_changes_limit)
            sync.carry = tuple(fetch[cfg.jobs_changes_limit :])
            if sync.backlog:  # the poller lists beside the reads when it may (the limit's worth meanwhile)
                fetch = fetch[: cfg.jobs_changes_limit]
            chosen = set(fetch)
            moved = list(fetch)  # read first; published as soon as they are in (_Progress)
            followed = [j for j in sync.follow if j in states and j not in chosen]
            if len(fetch) + len(followed) > cfg.jobs_changes_limit:
                followed = []  # they wait: changes go first
            fetch += followed
            chosen.update(followed)
            rechecked, swept = self._rereads(held, states, chosen, now, len(moved), last_poll)
            fetch += rechecked + swept
            progress = _Progress(
                self._publish,
                sync,
                held,
                frozenset(found.gone),
                set(moved),
                len(fetch),
                cfg.jobs_publish_every,
            )
            read = await self._read_jobs(fetch, progress)
        except SlurmError as e:
            if verdict is not None:  # the reads failed: settled on what the answer showed
                self._settle(verdict, answer, 0)
            if progress is not None and progress.jobs is not None:  # published: the data never steps back
                st.data = progress.jobs
            sync.recheck.extend(reversed(rechecked))  # read them next time
            sync.sweep.extend(reversed(swept))
            st.record_error(e, self._clock())  # logged by the poller when the failure starts or changes
            return False
        finally:
            st.last_duration = time.perf_counter() - t0
        sync.job_reads += len(fetch)
        records = {j: good + [job for job, _ in bad] for j, (good, bad) in read.items()}
        unlisted_splits = 0
        if verdict is not None:  # what the answer found, less the array tasks its reads show split off
            listed_splits, unlisted_splits = jobwatch.split_off(
                verdict.held, verdict.answered, states, records
            )
            as_of = self._settle(verdict, answer, listed_splits)
            sync.unseen = jobwatch.unseen(verdict.top, states, records)
        elif whole_here:
            sync.unseen = ()
        # what the reads show beyond the answer (a job that ended between the two): counted by the next
        # /diag, so kept with what this answer found beyond its counts
        beyond = jobwatch.read_beyond(states, fetch, records).without_submissions(unlisted_splits)
        sync.found_beyond += beyond
        if beyond != jobwatch.NOTHING and log.isEnabledFor(logging.DEBUG):
            shown = {
                job.job_id: (listed, job.state)
                for got in records.values()
                for job in got
                if (listed := (states.get(job.job_id) or ("-",))[0]) != job.state
            }
            log.debug("jobs: the reads found %s beyond the answer: %s", beyond, _some(shown))
        if self._whole is not None:
            self._whole.found += beyond
        fetched: dict[int, list[Job]] = {}
        dropped: list[tuple[Job, str]] = []
        for job_id, (good, bad) in read.items():
            fetched[job_id] = good
            sync.refused.pop(job_id, None)
            dropped.extend(bad)
        for job, why in dropped:
            sig = states.get(job.job_id) or jobsync.signature(job)
            sync.refused[job.job_id] = (sig, job.partitions or ("",), why)
        for job_id in [j for j in sync.refused if j not in states]:
            del sync.refused[job_id]
        st.note_dropped(dropped)
        self.hold_refused(st)
        st.data = jobsync.merge(held, fetched, found.gone)
        if self.beside is not None:
            self.beside.took(fetched, found.gone, {j: sync.refused[j] for j in fetched if j in sync.refused})
        if self._whole is not None:  # read after the whole answer was requested: newer than what it says
            self._whole.took(fetched, found.gone)
        self._follow(held, fetched, st.data, set(states))
        sync.rereads.update({"follow": len(followed), "recheck": len(rechecked), "sweep": len(swept)})
        log.debug(
            "jobs: %d read (%d moved, %d followed, %d rechecked, %d swept), %d gone, %d left for later,"
            " %d unseen ids to ask; counts %s, whole answer %s",
            len(fetch),
            len(moved),
            len(followed),
            len(rechecked),
            len(swept),
            len(found.gone),
            sync.backlog,
            len(sync.unseen),
            "unaccounted" if sync.unaccounted else "accounted",
            "read beside" if self._whole is not None else "not read",
        )
        self.count_updates(jobsync.moved(held, fetched, fetch))
        sync.incremental = True
        sync.incremental_fetches += 1
        sync.last_changed, sync.last_gone, sync.last_read = len(fetch), len(found.gone), tuple(fetch)
        st.last_bytes = 0
        # with jobs left unread, the data holds all Slurm accepted only as of before
        st.record_ok(self._clock(), None if sync.backlog else as_of)
        return True

    def _delta(
        self, st: EndpointState, fresh: tuple[jobwatch.JobCounts, float] | None, now: float
    ) -> tuple[jobwatch.Moved | None, bool]:
        """What moved since the held jobs last accounted for every count, when this poll may ask
        ``/jobs/state`` about some records only (:attr:`PollerConfig.jobs_states_targeted_min`) — None:
        the whole answer in this poll: too few jobs for it to matter, no fresh ``/diag`` or counters that
        went back, the start without a listing not done — and whether the whole answer is due beside the
        polls (:meth:`_start_whole`): :attr:`PollerConfig.jobs_states_full_every` passed (and
        :data:`STATES_FULL_EVERY_RATIO` times the last whole answer's duration), or a count unaccounted
        for and the last whole answer :data:`STATES_FULL_SPACING` times its duration old; not while one
        is read, nor before :data:`WHOLE_RETRY` after a failed one."""
        sync, cfg = self.sync, self.config
        most = cfg.jobs_states_targeted_min
        if most <= 0 or sync.states_seen is None or sync.states_seen < most or fresh is None:
            return None, False
        if st.requested_at == 0.0 or sync.full_states_at is None:
            return None, False
        delta = jobwatch.moved(sync.counts, fresh[0])
        if delta is None or self._whole is not None or now < self._whole_retry_at:
            return delta, False
        age = now - sync.full_states_at
        periodic = age >= max(cfg.jobs_states_full_every, STATES_FULL_EVERY_RATIO * sync.full_states_seconds)
        return delta, periodic or (sync.unaccounted and age >= STATES_FULL_SPACING * sync.full_states_seconds)

    def _start_whole(self, fresh: tuple[jobwatch.JobCounts, float], held: int) -> None:
        """Read the whole ``/jobs/state`` answer as its own task, the polls going on meanwhile: it accounts
        for every count up to this poll's ``/diag`` (``fresh``), what the polls read after its request is
        newer than what it says (:class:`_WholeBeside`). ``held``: the jobs it may list."""
        requested = self._clock()
        task = asyncio.create_task(self._whole_answer(held, "whole"), name="poller-jobs-state-whole")
        task.add_done_callback(self._whole_ended)
        self._whole = _WholeBeside(task, requested, *fresh)

    def _whole_ended(self, task: asyncio.Task[tuple[jobsync.StatesRead, float]]) -> None:
        """Its end wakes the poller; its failure is looked at here too (taken by :meth:`_take_whole`, or
        not at all when the poller stops first)."""
        if not task.cancelled():
            task.exception()
        self.wake()

    def _take_whole(
        self, st: EndpointState, fresh: tuple[jobwatch.JobCounts, float] | None, now: float
    ) -> tuple[_TakenWhole, jobwatch.Moved] | None:
        """The whole answer read beside the polls, once it ended, with what moved since the ``/diag`` it
        accounts for; None while it is read, or when it failed (counted among ``st``'s errors, said once,
        tried again after :data:`WHOLE_RETRY`; the jobs' data stays as the polls keep it), or when this
        poll cannot tell what moved (no fresh ``/diag``, counters that went back: the whole answer is read
        in this poll instead)."""
        w = self._whole
        if w is None or not w.task.done():
            return None
        self._whole = None
        try:
            answer, seconds = w.task.result()
        except (SlurmError, asyncio.CancelledError) as e:
            kind = e.kind if isinstance(e, SlurmError) else "cancelled"
            st.errors[kind] += 1
            self._whole_retry_at = now + WHOLE_RETRY
            self.conditions.seen(
                "jobs/state whole", kind, f"the whole answer read beside the polls failed: {e}"
            )
            return None
        self.conditions.ended("jobs/state whole", "read again")
        delta = jobwatch.moved(w.counts, fresh[0]) if fresh is not None else None
        if delta is None:
            return None
        return _TakenWhole(answer, seconds, w), delta

    def _drop_whole(self) -> None:
        """Forget the whole answer read beside the polls (a newer whole answer or listing replaces it)."""
        w, self._whole = self._whole, None
        if w is not None:
            w.task.cancel()

    @property
    def whole_in_flight(self) -> bool:
        """Whether a whole ``/jobs/state`` answer is being read beside the polls."""
        return self._whole is not None and not self._whole.task.done()

    async def whole_settled(self) -> None:
        """Until the whole answer read beside the polls (if one is) has ended, ok or not."""
        if self._whole is not None:
            await asyncio.wait([self._whole.task])

    async def close(self) -> None:
        """Stop the whole answer read beside the polls, if one is."""
        w, self._whole = self._whole, None
        if w is not None:
            w.task.cancel()
            await asyncio.gather(w.task, return_exceptions=True)

    async def _ask_some(
        self,
        held: Sequence[Job],
        delta: jobwatch.Moved,
        fresh: tuple[jobwatch.JobCounts, float],
        whole: _TakenWhole | None = None,
    ) -> tuple[jobsync.StatesRead, _Verdict | None]:
        """Ask ``/jobs/state`` about the records that can have moved for ``delta``
        (:func:`exporter.jobwatch.plan`, :data:`ASK_CHUNK` ids a request; nothing when no count moved).
        The answer is returned as a whole one would be — every held record with its signature, those
        asked replaced by what was answered (gone when not) — with what it found against the counts,
        settled once its reads are in (:meth:`_settle`; None: no count moved, nothing asked, the jobs
        whole as of this poll's ``/diag``). Raises SlurmError.

        With ``whole`` (the whole answer read beside the polls; ``delta``: what moved since the ``/diag``
        it accounts for) the records not read since its request are as it says, and the counts are
        accounted for by this answer and what the polls found since its request; else the jobs are whole
        as of its ``/diag``."""
        sync, cfg = self.sync, self.config
        counts, diag_at = fresh
        quiet = delta.quiet and not sync.carry and not sync.unseen
        if quiet and whole is None:
            sync.states_asks["none"] += 1
            sync.counts, sync.counts_at = counts, diag_at
            sync.found_beyond = jobwatch.NOTHING
            read = jobsync.StatesRead(jobwatch.whole_view(held, {}, (), self._refused_sigs()), 0)
            self._keep(read)
            return read, None
        asked: tuple[int, ...] = ()
        answered: dict[int, JobSig] = {}
        unreadable = 0
        if not quiet:
            plan = jobwatch.plan(
                held, delta, pending_budget=cfg.jobs_states_pending_budget, unseen=sync.unseen
            )
            # with the changes found before and not read yet (more than --jobs-changes-limit): asked again
            asked = tuple(dict.fromkeys((*plan.ids, *sync.carry)))
            top = plan.top
        else:
            top = jobwatch.highest(held)
        for i in range(0, len(asked), ASK_CHUNK):
            try:
                part = await self.session.job_states(ids=asked[i : i + ASK_CHUNK])
            finally:
                sync.state_reads += 1
            answered.update(part.states)
            unreadable += part.unreadable
        held_by_id = {job.job_id: job for job in held}
        here = jobwatch.accounted(held_by_id, asked, answered)
        refused = self._refused_sigs()
        if whole is None:
            sync.states_asks["some"] += 1
            # with what the last answer found beyond its counts: made after that /diag, counted by this one
            found = here + sync.found_beyond
            view = jobwatch.whole_view(held, answered, asked, refused)
        else:
            sync.states_asks["whole"] += 1
            sync.full_states_at, sync.full_states_seconds = whole.beside.requested, whole.seconds
            sync.states_seconds = whole.seconds
            sync.states_seen = len(whole.answer.states) + whole.answer.unreadable
            found = here + whole.beside.found
            unreadable += whole.answer.unreadable
            view = whole.view(held_by_id, refused)
            if log.isEnabledFor(logging.DEBUG):
                ended = [
                    j
                    for j, sig in view.items()
                    if sig[0] in jobsync.FINAL_STATES
                    and (job := held_by_id.get(j)) is not None
                    and job.state not in jobsync.FINAL_STATES
                ]
                log.debug("jobs/state whole: %d held live shown ended %s", len(ended), sorted(ended)[:20])
            for job_id in asked:
                if job_id not in answered:
                    view.pop(job_id, None)
            view.update(answered)
        beside = self._whole if whole is None else None
        verdict = _Verdict(
            delta, fresh, found, here, held_by_id, top, answered, len(asked), unreadable, whole, beside
        )
        return jobsync.StatesRead(view, unreadable), verdict

    def _settle(self, v: _Verdict, answer: jobsync.StatesRead, listed_splits: int) -> float:
        """Whether an answer for some records (:meth:`_ask_some`), less the ``listed_splits`` its reads
        showed were array tasks split off (:func:`exporter.jobwatch.split_off`), accounts for every count;
        the answer kept as the last one; the time the jobs are whole as of: this poll's ``/diag`` when it
        does, else still the last such time (and the whole answer is due: :attr:`JobsSync.unaccounted`)."""
        sync = self.sync
        found = v.found.without_submissions(listed_splits)
        here = v.here.without_submissions(listed_splits)
        if v.beside is not None and v.beside is self._whole:
            v.beside.found += here
        elif v.beside is None and v.whole is None and self._whole is not None:
            # the whole answer was asked for in this poll: it accounts for the counts up to this /diag, so
            # what this answer found beyond them counts for it as the polls' finds since do
            self._whole.found += found.beyond(v.delta).at_most(here)
        if not v.unreadable and found.covers(v.delta):
            sync.counts, sync.counts_at = v.fresh
            sync.unaccounted = False
            # what this answer found beyond the counts: made after this /diag, counted by the next one — at
            # most what it found itself, so a surplus no /diag counts (a record taken for a submission that
            # was none) is carried one poll, not poll after poll where it would stand for later changes
            sync.found_beyond = found.beyond(v.delta).at_most(here)
            if sync.found_beyond.submitted and log.isEnabledFor(logging.DEBUG):
                new = sorted(j for j in v.answered if j not in v.held)
                log.debug(
                    "jobs/state: %s found beyond %s; %d new records, the first %s",
                    sync.found_beyond,
                    v.delta,
                    len(new),
                    new[:50],
                )
        else:
            # the counts stay where they were last accounted for (with the whole answer: its /diag's), and
            # so does what was found since: a change the next answers show (a record that showed its end
            # a poll late) accounts for its count then, without the whole answer
            sync.found_beyond = found
            if v.whole is not None:  # whole as of its /diag: what moved since is asked from there
                sync.counts, sync.counts_at = v.whole.beside.counts, v.whole.beside.diag_at
            if not sync.unaccounted:
                log.debug("jobs/state: %s not accounted for by %s (%d asked)", v.delta, found, v.asked)
                moved = {
                    j: (held, sig[0])
                    for j, sig in v.answered.items()
                    if (held := (job.state if (job := v.held.get(j)) is not None else None)) != sig[0]
                }
                log.debug("jobs/state: records that moved in the answer (held → answered) %s", _some(moved))
            sync.unaccounted = True
        return self._keep(answer)

    def _keep(self, read: jobsync.StatesRead) -> float:
        """An answer made from one for some records, kept as the last answer (a backlog drains from it,
        :meth:`_reusable_states`) "as of" when the jobs were last whole; that time."""
        sync = self.sync
        sync.last_states, sync.states_at = read, sync.counts_at
        return sync.counts_at

    def _refused_sigs(self) -> dict[int, JobSig]:
        """The refused records' signatures (not held: kept in a view made from the held records)."""
        return {job_id: sig for job_id, (sig, _, _) in self.sync.refused.items()}

    async def too_many_at_start(self, diag: Diag | None) -> bool:
        """Whether the first poll starts without a listing (:meth:`start_unlisted`): Slurm holds more than
        :attr:`PollerConfig.jobs_listing_max` jobs by ``/diag``
        (:func:`exporter.pollstate.jobs_alive_estimate`), or else by a ``/jobs/state`` read — exact and
        current where ``/diag``'s pending and running counts are slurmctld's tally of up to 30 s ago, which
        a burst since misses; the answer then serves the first incremental read. That read failing:
        ``/diag``'s word stands (one log line per cause)."""
        most, sync = self.config.jobs_listing_max, self.sync
        if most <= 0:
            return False
        if sync.too_many_to_list(most, diag):
            return True
        try:  # as many jobs as it takes to render: /diag's count may be what is wrong
            states = await self._read_states(self._clock(), CENSUS_JOBS)
        except SlurmError as e:
            self.conditions.seen("jobs census", "failed", f"/jobs/state: {e}; listing as /diag's counts say")
            return False
        if states is None:
            return False
        self.conditions.ended("jobs census", "/jobs/state read")
        if not sync.too_many_to_list(most, None):
            return False
        self._census = states
        return True

    async def _read_states(self, now: float, jobs: int) -> jobsync.StatesRead | None:
        """``/jobs/state``, kept as :attr:`JobsSync.last_states` (read at ``now``; ``jobs``: how many it may
        list, beside the last answer's count, for the time it may take to begin); None when this
        slurmrestd has no such endpoint (:attr:`JobsSync.states_unsupported`: list in full from now on).
        Raises SlurmError."""
        sync = self.sync
        try:
            answer, sync.states_seconds = await self._whole_answer(jobs)
        except HTTPStatusError as e:
            if e.status != 404:
                raise
            sync.states_unsupported = True
            log.warning("%s; listing /jobs in full from now on", e)
            return None
        sync.last_states, sync.states_at = answer, now
        sync.states_seen = len(answer.states) + answer.unreadable
        return answer

    async def _whole_answer(self, jobs: int, lane: str = "") -> tuple[jobsync.StatesRead, float]:
        """The whole ``/jobs/state`` answer (``jobs``: how many it may list, for the time it may take to
        begin; ``lane``: a request lane of its own) and the seconds it took; counted among the state reads
        whether it succeeds or not. Raises SlurmError."""
        t0 = time.perf_counter()
        try:
            answer = await self.session.job_states(self._states_first_byte(jobs), lane=lane)
        finally:
            self.sync.state_reads += 1
        return answer, time.perf_counter() - t0

    def _states_first_byte(self, jobs: int) -> float | None:
        """Seconds ``/jobs/state`` may take to begin: the idle limit plus three times what it took last,
        or :data:`STATES_SECONDS_PER_JOB` per job it listed (or ``jobs``, if more), whichever is more;
        None (the small-request limits) while that is under a second."""
        sync = self.sync
        listed = max(sync.states_seen or 0, jobs)
        render = max(3 * sync.states_seconds, listed * STATES_SECONDS_PER_JOB)
        if render < 1.0:
            return None
        return self.session.client.config.idle_timeout + render

    def _reusable_states(self, now: float) -> jobsync.StatesRead | None:
        """The last ``/jobs/state`` answer, while a backlog drains and it is younger than
        :data:`STATES_REUSE` times what it took (slurmrestd spends at most a tenth of the drain rendering
        it: 100,000 jobs take it ~16 s); None: read it again."""
        sync = self.sync
        if not sync.backlog or sync.last_states is None or sync.states_at is None:
            return None
        if now - sync.states_at >= STATES_REUSE * sync.states_seconds:
            return None
        return sync.last_states

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
        sync = self.sync
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

    def count_updates(self, found: int) -> None:
        """Book ``found`` records an RPC changed (:func:`exporter.jobsync.updated`, among every record
        read this poll) against the job-changing RPCs counted. As many found: the recheck ends, and what
        was found beyond is kept for one poll — an RPC made between this poll's ``/diag`` and its reads is
        counted by the next ``/diag`` although its change is already read (measured at 20,000 jobs: such
        an RPC sent the recheck through every job while later holds waited)."""
        sync = self.sync
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
        self,
        held: Sequence[Job],
        states: Mapping[int, JobSig],
        chosen: set[int],
        now: float,
        changes: int,
        last_poll: float,
    ) -> tuple[list[int], list[int]]:
        """The jobs to read again this poll whatever their state, within the room
        :attr:`PollerConfig.jobs_changes_limit` leaves after ``chosen``: after a job-changing RPC the
        likeliest first (:attr:`PollerConfig.jobs_recheck_rate`), then the sweep's next ones, oldest first
        (:attr:`PollerConfig.jobs_sweep_rate`, less one per state ``changes`` read this poll). Added to
        ``chosen``. ``last_poll``: seconds the last poll took."""
        sync, cfg = self.sync, self.config
        elapsed = 0.0 if sync.quota_at is None else now - sync.quota_at
        sync.quota_at = now
        # one poll's share: the time since the last one — the interval and that poll — but a slow poll
        # counts for at most two intervals, so it cannot earn a share that makes the next one slower still
        # (measured at 20,000 jobs)
        span = min(max(elapsed, 0.0), cfg.interval + min(last_poll, 2 * cfg.interval))
        live = jobsync.live_ids(held, states)
        if sync.recheck_pending and sync.recheck_found >= sync.recheck_wanted:  # already read (above)
            sync.recheck_pending = False
            sync.recheck_wanted = sync.recheck_found = 0
        # half the recheck's reads may go to re-reading the likeliest jobs first after an RPC during a pass
        sync.head_budget = min(
            sync.head_budget + cfg.jobs_recheck_rate / 2 * span,
            cfg.jobs_recheck_rate * HEAD_SECONDS,
        )
        likeliest = jobsync.likeliest(held, sync.movers, live)
        if len(likeliest) > len(live) / 2:  # users whose jobs are most of the queue (the token's own)
            likeliest = []
        if sync.movers and not likeliest and (sync.recheck_pending or sync.recheck_new):
            # the RPCs' senders are known and own none of the jobs (or most): an administrator's, maybe
            likeliest = jobsync.likeliest_unowned(held, live, int(cfg.jobs_recheck_rate * HEAD_SECONDS))
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
            n = int(sync.head_budget)
            head = likeliest[len(likeliest) - n :] if likeliest else sorted(heapq.nlargest(n, live))
            sync.head_budget -= len(head)
            sync.recheck = jobsync.recheck_order(live, head, sync.recheck)
            log.debug("recheck: an RPC during the pass; %d jobs first again", len(head))
        sync.movers.clear()
        sync.recheck_new = False
        room = max(0, cfg.jobs_changes_limit - len(chosen))
        rechecked: list[int] = []
        if sync.recheck:
            n = min(room, sync.quota("recheck", cfg.jobs_recheck_rate, span))
            rechecked = jobsync.take(sync.recheck, n, live, chosen)
            chosen.update(rechecked)
            room -= len(rechecked)
        if not sync.sweep:
            sync.sweep = sorted(live, reverse=True)
            sync.sweep_period = len(live) / cfg.jobs_sweep_rate if cfg.jobs_sweep_rate > 0 else 0.0
        # the sweep yields to the changes: a burst of starts is read, and published, in a shorter poll
        n = max(0, min(room, sync.quota("sweep", cfg.jobs_sweep_rate, span)) - changes)
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

        lanes = max(1, min(len(ids), self.session.client.config.max_concurrency))
        tasks = [asyncio.create_task(lane(i), name=f"poller-job-read-{i}") for i in range(lanes)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return out


def _some(moves: Mapping[int, tuple[str | None, str]], most: int = 50) -> str:
    """A debug line's list of records that moved (id → before, after): the first ``most`` of them."""
    items = list(moves.items())
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return f"{dict(items[:most])}{more}"


@dataclass(frozen=True)
class _Verdict:
    """What an answer for some records found against the counts (:meth:`IncrementalJobs._ask_some`),
    settled once the reads are in (:meth:`IncrementalJobs._settle`): only a record's read tells an array
    task split off (a start) from a submission."""

    delta: jobwatch.Moved
    """What the counts moved since they were last accounted for (or since the whole answer's ``/diag``)."""
    fresh: tuple[jobwatch.JobCounts, float]
    """This poll's counts and when their ``/diag`` was requested."""
    found: jobwatch.Found
    """What the answer found with what counts since then (found beyond, or the whole answer's polls')."""
    here: jobwatch.Found
    """What this answer found."""
    held: Mapping[int, Job]
    """The records held before the poll, by id."""
    top: int
    """The highest id among them (0: none)."""
    answered: Mapping[int, JobSig]
    """The answer for the ids asked."""
    asked: int
    unreadable: int
    whole: _TakenWhole | None
    """The whole answer read beside the polls this answer completes, if it does."""
    beside: _WholeBeside | None
    """The whole answer being read beside the polls when this one was asked (it counts what this found)."""


class _Beside:
    """What the incremental reads found since a full listing beside them was requested."""

    def __init__(self, rpcs: int | None) -> None:
        self.rpcs = rpcs
        """slurmctld's job-changing RPC count when the listing was requested."""
        self.read: dict[int, list[Job]] = {}
        self.gone: set[int] = set()
        self.refused: dict[int, tuple[JobSig, tuple[str, ...], str]] = {}

    def took(
        self,
        fetched: Mapping[int, list[Job]],
        gone: Sequence[int] | frozenset[int] | set[int],
        refused: Mapping[int, tuple[JobSig, tuple[str, ...], str]],
    ) -> None:
        for job_id, records in fetched.items():
            self.read[job_id] = records
            self.gone.discard(job_id)
            self.refused.pop(job_id, None)
        self.refused.update(refused)
        self.gone.update(gone)
        for job_id in gone:
            self.read.pop(job_id, None)


class _WholeBeside:
    """A whole ``/jobs/state`` answer read beside the polls, and what they found since it was requested."""

    def __init__(
        self,
        task: asyncio.Task[tuple[jobsync.StatesRead, float]],
        requested: float,
        counts: jobwatch.JobCounts,
        diag_at: float,
    ) -> None:
        self.task = task
        self.requested = requested
        """When it was requested (the poller's clock, epoch seconds)."""
        self.counts, self.diag_at = counts, diag_at
        """slurmctld's counters from the ``/diag`` before it (and when that was requested): it accounts
        for every count up to them."""
        self.touched: set[int] = set()
        """Records read or gone since: what it says of them is older than what is held."""
        self.found = jobwatch.NOTHING
        """What the polls' answers found since (:func:`exporter.jobwatch.accounted`)."""

    def took(self, fetched: Mapping[int, list[Job]], gone: Iterable[int]) -> None:
        self.touched.update(fetched)
        self.touched.update(job.job_id for records in fetched.values() for job in records)
        self.touched.update(gone)


@dataclass(frozen=True)
class _TakenWhole:
    """A whole answer read beside the polls, ended: what it said and how long it took."""

    answer: jobsync.StatesRead
    seconds: float
    beside: _WholeBeside

    def view(self, held: Mapping[int, Job], refused: Mapping[int, JobSig]) -> dict[int, JobSig]:
        """What a whole answer would say now: the answer, with each record read or gone since its request
        as it is held (or refused) now."""
        view = dict(self.answer.states)
        for job_id in self.beside.touched:
            job = held.get(job_id)
            if job is not None:
                view[job_id] = jobsync.signature(job)
            elif job_id in refused:
                view[job_id] = refused[job_id]
            else:
                view.pop(job_id, None)
        return view


class _Progress:
    """Called after each single-job read of one poll: once every job whose state moved is read (while
    re-reads go on), and every ``every`` seconds of reads, publishes the jobs read so far folded in —
    the snapshot's other parts and "as of" times kept, so jobs not read yet are as current as before
    (like a backlog). A read with refused records waits for the end of the poll (its job is dropped and
    remembered there). ``jobs``: the last published jobs, kept when a later read fails (the data never
    steps back)."""

    def __init__(
        self,
        publish: Publish,
        sync: JobsSync,
        held: Sequence[Job],
        gone: frozenset[int],
        moved: set[int],
        total: int,
        every: float,
    ) -> None:
        self.publish, self.sync, self.held, self.gone, self.every = publish, sync, held, gone, every
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
        due = boundary or now - self.last >= self.every
        if self.every <= 0 or not due or len(read) == self.published:
            return
        good = {job_id: records for job_id, (records, bad) in read.items() if not bad}
        jobs = jobsync.merge(self.held, good, self.gone)
        if not self.publish(jobs):
            return
        self.last, self.published, self.jobs = now, len(read), jobs
        self.sync.partial_snapshots += 1
