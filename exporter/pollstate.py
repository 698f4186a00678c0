"""What the poller is told (:class:`PollerConfig`) and what it tells (:class:`PollStatus`: per endpoint
:class:`EndpointState`, the jobs kept between listings :class:`JobsSync`). Mutated only by the poller and
:class:`exporter.incremental.IncrementalJobs`; read by ``/metrics``, the status page and health."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .accounting import Accounting
from .errors import SlurmError
from .jobsync import JobSig, StatesRead
from .jobwatch import NOTHING, Found, JobCounts
from .logs import Conditions
from .model import ENDPOINTS, Diag, Envelope, Job, Node
from .validate import dropped_partitions, reason_of

log = logging.getLogger("exporter.poller")


@dataclass(frozen=True)
class PollerConfig:
    interval: float = 5.0
    """Seconds from the end of one poll to the start of the next (a floor, never overlapping)."""
    standby_interval: float = 0.0
    """Seconds from one poll's end to the next one's start while another replica leads (leader election:
    :attr:`exporter.poller.Poller.standby`): a standby writes nothing, so its data may be older — its
    ``/metrics`` and demand say how old; it polls at once when it takes the lead. 0 (or less than
    :attr:`interval`): as :attr:`interval`."""
    early_gap: float = 0.5
    """Seconds from one poll's start to the next one's at least, when
    :meth:`exporter.poller.Poller.poll_soon` asks early (a burst of submissions costs two polls a second,
    not one per submission)."""
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
    :attr:`jobs_listing_ratio` and :attr:`jobs_listing_max` allow one, else the rest are read in the next
    polls."""
    jobs_listing_max: int = 10_000
    """Jobs Slurm may hold for a full ``/jobs`` listing to be read for the first poll or a mass change (by
    ``/diag``'s counts and a ``/jobs/state`` read at the start, then its entries). Beyond, no
    listing: the first poll reads ``/jobs/state`` alone and the jobs one by one,
    :attr:`jobs_changes_limit` a poll, the data partial meanwhile (:attr:`JobsSync.backlog`) — slurmrestd
    renders a listing in memory it never gives back (~135 KB a job: 100,000 jobs, ~13 GB). 0: no limit
    (a listing asked for with :meth:`exporter.poller.Poller.refresh_jobs` is read whatever the count)."""
    jobs_states_targeted_min: int = 20_000
    """Entries the last whole ``/jobs/state`` answer listed from which a poll asks it only about the
    records that can have moved for what ``/diag``'s job counters counted, and nothing when none moved
    (:mod:`exporter.jobwatch`); fewer, the whole answer every poll (20,000 jobs: ~1 s of slurmrestd). 0:
    never."""
    jobs_states_full_every: float = 60.0
    """Seconds between whole ``/jobs/state`` answers at most while asking only about some records — or
    :data:`exporter.incremental.STATES_FULL_EVERY_RATIO` times what the last one took, if longer: what no
    counter sees (a requeue after a node failure, a preemption, a purge) waits this long at worst.
    Sooner when a count was not accounted for — but never sooner than
    :data:`exporter.incremental.STATES_FULL_SPACING` times the last one took."""
    jobs_states_pending_budget: int = 1_000
    """Pending records asked about, highest priority first, when ``/diag`` counted a start that the live
    and new records do not account for (a job started from the queue)."""
    endpoints: tuple[str, ...] = ENDPOINTS
    intervals: Mapping[str, float] = field(default_factory=lambda: {"shares": 60.0, "slurmdb_jobs": 30.0})
    """Seconds between fetches of endpoints whose data moves slowly (fair share is recomputed every
    ``PriorityCalcPeriod``, 5 minutes by default): fetched when due, their last data reused in between.
    The others are fetched every poll."""
    accounting_overlap: float = 120.0
    """Seconds each read of slurmdbd's ended jobs reaches back before the last one: slurmctld hands a job's
    end to slurmdbd through a queue (``sdiag``'s DBD agent queue), so a job may appear there late; each job
    is still counted once (:mod:`exporter.accounting`)."""
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
    (see :data:`exporter.poller.UPDATE_TIME_REJECTED`); the endpoint is then always fetched in full."""

    last_ok: bool = False
    """Whether the last finished fetch succeeded (or was answered "unchanged")."""
    dropped: int = 0
    """Records dropped for impossible values (:mod:`exporter.validate`), over all fetches."""
    dropped_by: Counter[str] = field(default_factory=Counter)
    """The same by reason (:func:`exporter.validate.reason_of`: the field, or ``undecodable``)."""
    dropped_partitions: frozenset[str] = frozenset()
    """Partitions named by the records dropped from the data held (see :attr:`Snapshot.dropped`)."""
    refused_now: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Reason → (records refused from the data held now, the first one's problem text)."""
    _fetch_dropped: frozenset[str] = frozenset()
    """The same as ``dropped_partitions`` for the fetch in progress (moved when its data is taken)."""
    _fetch_refused: dict[str, tuple[int, str]] = field(default_factory=dict)
    """The same as ``refused_now`` for the fetch in progress."""

    def record_ok(self, fetched_at: float, requested_at: float | None) -> None:
        """A fetch succeeded (or confirmed no change): its data is as of ``fetched_at``, and holds all
        Slurm accepted before ``requested_at`` (None: that stays as it was)."""
        self.successes += 1
        self.fetched_at = fetched_at
        if requested_at is not None:
            self.requested_at = requested_at
        self.last_ok = True

    def record_error(self, err: SlurmError, now: float) -> None:
        self.last_ok = False
        self.errors[err.kind] += 1
        self.last_error, self.last_error_kind, self.last_error_at = str(err), err.kind, now

    def note_dropped(self, dropped: Sequence[tuple[Job | Node, str]]) -> None:
        """Count the records one fetch dropped for impossible values, by reason; note the partitions they
        name and the reasons for the data this fetch brings (logged by :meth:`note_refused`)."""
        self._fetch_dropped = dropped_partitions(dropped)
        self._fetch_refused = refusals(why for _, why in dropped)
        if not dropped:
            return
        self.dropped += len(dropped)
        self.dropped_by.update(reason_of(why) for _, why in dropped)

    def take_fetched_refusals(self) -> None:
        """The data of the fetch in progress is taken: its refusals are those of the data held."""
        self.dropped_partitions = self._fetch_dropped
        self.refused_now = self._fetch_refused

    def note_refused(self, conditions: Conditions) -> None:
        """One log line per reason when records start being refused for it, one when none are any more
        (not one per record, nor per poll)."""
        prefix = f"{self.name} records refused for "
        for reason, (n, first) in self.refused_now.items():
            parts = ", ".join(p or "(none named: every partition)" for p in sorted(self.dropped_partitions))
            conditions.seen(
                prefix + reason,
                "refused",
                f"{n} in the data held (first: {first}); the targets of partition(s) {parts} are held, "
                "never lowered, while they are",
            )
        conditions.ended_except(prefix, (prefix + r for r in self.refused_now), "none any more")


def refusals(whys: Iterable[str]) -> dict[str, tuple[int, str]]:
    """Reason → (how many of ``whys`` have it, the first of them)."""
    out: dict[str, tuple[int, str]] = {}
    for why in whys:
        reason = reason_of(why)
        n, first = out.get(reason, (0, why))
        out[reason] = (n + 1, first)
    return out


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
    (:meth:`exporter.poller.Poller.refresh_jobs`), ``off`` (incremental reads off or not offered)."""
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
    """Changed jobs left for the next polls (more than the limit changed within a listing's spacing, or
    the jobs not read yet of a start without a listing): the jobs data is partial while it is not 0."""
    unlisted: bool = False
    """The jobs were read one by one from the start: Slurm held more than
    :attr:`PollerConfig.jobs_listing_max` jobs at the first poll."""
    listed_at: float | None = None
    """When the request of the last full listing was sent, epoch seconds."""
    listing_ended: float | None = None
    listing_duration: float = 0.0
    """Seconds the last full listing took."""
    update_rpcs: int | None = None
    """slurmctld's count of job-changing RPCs at the last look (:func:`exporter.jobsync.job_update_rpcs`)."""
    user_rpcs: dict[str, int] | None = None
    """slurmctld's count of RPCs per user at the last look."""
    movers: dict[str, int] = field(default_factory=dict)
    """Users whose RPCs moved with job-changing ones → how many they sent, their jobs not yet put first in
    the recheck."""
    recheck_new: bool = False
    """A job-changing RPC was counted since the recheck last looked."""
    head_budget: float = 0.0
    """Reads the recheck may spend re-reading the likeliest jobs (the movers' or the newest) when an RPC
    comes during a pass: half its rate accrues, at most :data:`exporter.incremental.HEAD_SECONDS` of its
    rate."""
    listing_requested: bool = False
    """:meth:`exporter.poller.Poller.refresh_jobs` asked for a full listing at the next poll."""
    recheck_pending: bool = False
    """A job-changing RPC was seen: start a pass over the jobs not yet ended, newest first, once the pass
    in progress (if any) is done — restarting it at each RPC would never reach the oldest jobs under a
    steady stream of RPCs."""
    recheck: list[int] = field(default_factory=list)
    """Job ids left to re-read after a job-changing RPC, ascending (the newest popped first)."""
    recheck_wanted: int = 0
    """Job-changing RPCs counted since the re-reading began: it stops once as many jobs changed."""
    recheck_found: int = 0
    """Records found changed by an RPC (:meth:`exporter.incremental.IncrementalJobs.count_updates`), kept
    one poll beyond the RPCs."""
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
    counts: JobCounts | None = None
    """slurmctld's job counters (``/diag``) up to which the held jobs account for every counted event."""
    counts_at: float = 0.0
    """When the ``/diag`` with :attr:`counts` was requested, epoch seconds: the jobs are whole as of then."""
    carry: tuple[int, ...] = ()
    """Records the last read found changed but left for the next polls (:attr:`backlog`): asked about
    again while only some records are asked about, so none is lost when no counter moves meanwhile."""
    unseen: tuple[int, ...] = ()
    """Ids below the highest held that no answer showed yet: a record read along with another (an array
    task split off after the answer) came before a lower id, a job submitted meanwhile — ids are given in
    turn, so it exists or never will. Asked about in the next poll whatever the counts say."""
    found_beyond: Found = NOTHING
    """What the answers for some records, and the single-job reads after them
    (:func:`exporter.jobwatch.read_beyond`), found that :attr:`counts` do not include: changes made after
    a poll's ``/diag``, which the next ``/diag`` counts; while :attr:`unaccounted`, all they found since
    :attr:`counts` (so a change an answer shows a poll after its count accounts for it)."""
    unaccounted: bool = False
    """A count moved that no answer for some records accounted for: the whole answer is due."""
    full_states_at: float | None = None
    """When the last whole ``/jobs/state`` answer was requested, epoch seconds."""
    full_states_seconds: float = 0.0
    """Seconds it took."""
    states_asks: Counter[str] = field(default_factory=Counter)
    """Polls by what they asked ``/jobs/state``: ``whole``, ``some`` (the records that can have moved),
    ``none`` (no counter moved)."""
    last_states: StatesRead | None = None
    """The last ``/jobs/state`` answer (used again while a backlog drains: ``states_reused``)."""
    states_at: float | None = None
    """When it was requested, epoch seconds."""
    states_seconds: float = 0.0
    """Seconds it took."""
    states_reused: int = 0
    """Incremental reads that used the last ``/jobs/state`` answer again instead of reading it."""
    states_seen: int | None = None
    """Entries of the last ``/jobs/state`` (None before one was read): how many jobs a listing renders."""
    unreadable_entries: int = 0
    """Entries of the last ``/jobs/state`` whose job id could not be read (then no job was dropped)."""
    states_unsupported: bool = False
    """``/jobs/state`` answered 404: this server cannot do incremental reads."""
    refused: dict[int, tuple[JobSig, tuple[str, ...], str]] = field(default_factory=dict)
    """Job id → (its signature, the partitions it names, ``("",)`` for none, why) when its record was
    refused (impossible values): not read again until it moves; its partitions' demand is held meanwhile."""

    def listing_allowed(self, now: float, ratio: float) -> bool:
        """Whether a full listing may start now (:attr:`PollerConfig.jobs_listing_ratio`)."""
        return self.listing_ended is None or now - self.listing_ended >= ratio * self.listing_duration

    def too_many_to_list(self, most: int, diag: Diag | None) -> bool:
        """Whether Slurm holds more jobs than a listing may render (:attr:`PollerConfig.jobs_listing_max`):
        the last ``/jobs/state``'s entries, else :func:`jobs_alive_estimate` of ``diag`` (unknown: False)."""
        if most <= 0:
            return False
        if self.states_seen is not None:
            return self.states_seen > most
        return diag is not None and jobs_alive_estimate(diag) > most

    def quota(self, why: str, rate: float, span: float) -> int:
        """Jobs ``why`` may read again now at ``rate`` per second over ``span`` seconds (the time since the
        last quotas, clamped by the caller); the fraction left carries over."""
        due = self.quota_carry.get(why, 0.0) + rate * span
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


def jobs_alive_estimate(diag: Diag) -> int:
    """Jobs slurmctld holds, as far as ``/diag`` tells before any job is read: the larger of its pending +
    running counts and the jobs submitted less those ended since its statistics were reset.

    The first is a count slurmctld takes only every 30 s (``JOB_COUNT_INTERVAL`` in ``controller.c``): a
    burst submitted since is not in it. The second moves with every submission (an array by its tasks) and
    every end, but misses the jobs alive at the reset and counts a cancelled array once — so neither alone
    stands for the queue. A figure too high costs one ``/jobs/state`` read before the listing; too low, a
    listing of more than ``--jobs-listing-max`` jobs."""
    return max(diag.jobs_pending + diag.jobs_running, diag.jobs_submitted - diag.jobs_ended)


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
    accounting: Accounting | None = None
    """The ended jobs counted since the start (:mod:`exporter.accounting`); None while slurmdbd's jobs are
    not read (off, or slurmrestd does not serve ``openapi/slurmdbd``)."""
    accounting_note: str = "off"
    """What the status page says of accounting: ``off``, ``not offered by slurmrestd``, ``on``."""
    negotiation: EndpointState = field(default_factory=lambda: EndpointState("openapi"))
    last_error: str = ""
    up_max_age: float = 30.0
    """:attr:`PollerConfig.up_max_age`."""
    jobs_sync: JobsSync = field(default_factory=JobsSync)
    conditions: Conditions = field(default_factory=lambda: Conditions(log))
    """Lasting failures and refusals, logged when they start, change and end (:class:`Conditions`); the
    status page lists those that hold."""

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
