"""Which job records to ask ``/jobs/state`` about when Slurm holds so many that the whole answer is dear.

slurmrestd renders ``/jobs/state`` whole: ~1 s at 20,000 jobs, 16–19 s at 100,000 (measured on the 26.05
lab, ``docs/freshness.md``). Read every poll, a change would wait that long and slurmrestd would work
nearly a core. But ``/diag`` (a few ms) carries slurmctld's own counts of what happens to jobs
(``statistics.c``): ``jobs_submitted`` (an array by its tasks), ``jobs_started`` (``select_nodes``, every
record started), ``jobs_completed`` (a batch script or allocation done), ``jobs_failed`` (a launch
failed), ``jobs_canceled`` (a cancel RPC served). And ``/jobs/state?job_id=`` answers for the records
asked only. So, per poll:

- no count moved since the last look: nothing to ask (:func:`plan`: :attr:`Plan.quiet`);
- else ask about the records that can have moved for what was counted (:func:`plan`): the live ones
  that are not pending (what ends), the ids after the highest held (what was submitted — slurmctld gives
  ids in turn — and array tasks split off as they start), and when jobs started, pending ones by
  priority (slurmctld's main scheduler starts them in that order);
- then check that what the answer shows accounts for every count (:func:`accounted`); what does not —
  a pending job cancelled, a start the backfill made deep in the queue, a count slurmctld keeps
  differently — has the whole ``/jobs/state`` read as soon as its spacing allows.

What no count sees (a node failure's requeue, a preemption, a purge) waits for the whole answer, read
at the latest every :attr:`exporter.pollstate.PollerConfig.jobs_states_full_every` seconds. Pure: counts
and records in, ids and verdicts out.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from .jobsync import FINAL_STATES, JobSig, signature
from .model import Diag, Job


@dataclass(frozen=True)
class JobCounts:
    """slurmctld's job counters from one ``/diag`` (since its statistics were reset)."""

    submitted: int
    started: int
    completed: int
    failed: int
    canceled: int

    @classmethod
    def of(cls, diag: Diag | None) -> JobCounts | None:
        """The counters of ``diag``; None without one."""
        if diag is None:
            return None
        return cls(
            diag.jobs_submitted, diag.jobs_started, diag.jobs_completed, diag.jobs_failed, diag.jobs_canceled
        )


@dataclass(frozen=True)
class Moved:
    """How far each counter moved between two looks (never negative: see :func:`moved`)."""

    submitted: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    canceled: int = 0

    @property
    def quiet(self) -> bool:
        return not (self.submitted or self.started or self.completed or self.failed or self.canceled)


def moved(before: JobCounts | None, now: JobCounts | None) -> Moved | None:
    """What moved from ``before`` to ``now``; None when it cannot be told (a look missing, or a counter
    went down: slurmctld restarted or reset its statistics — at midnight, or ``sdiag -r``)."""
    if before is None or now is None:
        return None
    deltas = (
        now.submitted - before.submitted,
        now.started - before.started,
        now.completed - before.completed,
        now.failed - before.failed,
        now.canceled - before.canceled,
    )
    if min(deltas) < 0:
        return None
    return Moved(*deltas)


@dataclass(frozen=True)
class Plan:
    """The records to ask ``/jobs/state`` about for what moved."""

    live: tuple[int, ...]
    """Held records neither pending nor ended (running, suspended, completing, ...): what can end."""
    new: tuple[int, ...]
    """Ids no answer showed yet: below the highest held, then after it (what was submitted or split off
    since)."""
    pending: tuple[int, ...]
    """Pending records, highest priority first, when jobs started: what can have started."""
    top: int = 0
    """The highest id held (:func:`highest`: found on the way)."""

    @property
    def ids(self) -> tuple[int, ...]:
        return (*self.live, *self.new, *self.pending)


NEW_IDS_SLACK = 8
"""Ids asked beyond the counted submissions and starts: an id slurmctld gave to a submission it then
refused is never used, and a het job's components take one each."""


def highest(held: Iterable[Job]) -> int:
    """The highest id of the records ``held`` (0: none)."""
    return max((job.job_id for job in held), default=0)


def plan(held: Iterable[Job], delta: Moved, *, pending_budget: int, unseen: Collection[int] = ()) -> Plan:
    """The records to ask about for ``delta``: the live ones when anything ended or started (a start may
    be followed by its end within one poll), ``delta.submitted + delta.started`` + :data:`NEW_IDS_SLACK`
    ids after the highest held when anything was submitted or started (an array task splits off under a
    new id as it starts) and the ``unseen`` ids below it in any case, and up to ``pending_budget``
    pending records by priority (highest first, then the oldest) when jobs started."""
    live: list[int] = []
    pending: list[tuple[int, int]] = []
    top = 0
    for job in held:
        top = max(top, job.job_id)
        if job.state == "PENDING":
            pending.append((-(job.priority or 0), job.job_id))
        elif job.state not in FINAL_STATES:
            live.append(job.job_id)
    ends = delta.completed or delta.failed or delta.canceled
    new = tuple(sorted(unseen))
    if delta.submitted or delta.started:
        new += tuple(range(top + 1, top + 1 + delta.submitted + delta.started + NEW_IDS_SLACK))
    by_priority: tuple[int, ...] = ()
    if delta.started and pending_budget > 0:
        by_priority = tuple(job_id for _, job_id in heapq.nsmallest(pending_budget, pending))
    return Plan(tuple(live) if ends or delta.started else (), new, by_priority, top)


@dataclass(frozen=True)
class Found:
    """What an answer to a :class:`Plan` shows against the counts (:func:`accounted`)."""

    started: int
    """Asked records that left PENDING (new ones that are not pending count too)."""
    ended: int
    """Asked records that reached a final state (or are gone) since held."""
    submitted: int
    """Entries of the new records (a pending array's tasks each)."""

    def covers(self, delta: Moved) -> bool:
        """Whether every count is accounted for: the starts, the submissions, and the ends that a batch
        script's or an allocation's completion counts (``completed`` + ``failed``) or a cancel RPC counts
        (``canceled``) — a cancelled running job is counted by both, so the larger of the two stands."""
        return (
            self.started >= delta.started and self.submitted >= delta.submitted and self.ended >= _ends(delta)
        )

    def __add__(self, other: Found) -> Found:
        return Found(self.started + other.started, self.ended + other.ended, self.submitted + other.submitted)

    def without_submissions(self, n: int) -> Found:
        """These finds less ``n`` submissions (records counted as new that were no submission)."""
        return Found(self.started, self.ended, max(0, self.submitted - n)) if n else self

    def at_most(self, other: Found) -> Found:
        """Each count no more than ``other``'s."""
        return Found(
            min(self.started, other.started),
            min(self.ended, other.ended),
            min(self.submitted, other.submitted),
        )

    def beyond(self, delta: Moved) -> Found:
        """What was found beyond ``delta``'s counts: changes made between the ``/diag`` and the answer,
        which the next ``/diag`` counts although they are already read (kept for one poll)."""
        return Found(
            max(0, self.started - delta.started),
            max(0, self.ended - _ends(delta)),
            max(0, self.submitted - delta.submitted),
        )


NOTHING = Found(0, 0, 0)


def _ends(delta: Moved) -> int:
    return max(delta.completed + delta.failed, delta.canceled)


def accounted(held: Mapping[int, Job], asked: Collection[int], states: Mapping[int, JobSig]) -> Found:
    """Compare the held records with a ``/jobs/state`` answer for ``asked`` ids (record id → signature):
    a held record asked and missing from the answer is gone (purged), one not held and present is new."""
    found = NOTHING
    for job_id in asked:
        job = held.get(job_id)
        sig = states.get(job_id)
        step = _step(
            None if job is None else job.state, None if sig is None else sig[0], 0 if sig is None else sig[2]
        )
        if step is not NOTHING:  # most asked records did not move
            found += step
    return found


def read_beyond(
    states: Mapping[int, JobSig], asked: Iterable[int], read: Mapping[int, Iterable[Job]]
) -> Found:
    """What the single-job reads show beyond a ``/jobs/state`` answer (``states``: record id → the
    signature it gave, or the held one's for a record it was not asked about): a job that started or ended
    between the answer and its read, a record the answer did not list (an array task split off since),
    one gone since (``asked``: the ids read; ``read``: id → the records its read returned). Those changes
    are counted by a later ``/diag`` than the one the answer is compared with (:func:`accounted` counted
    the answer's own). A record two reads returned (its own ``/job/{id}`` and its array's, moments apart)
    counts as the last one read — the one :func:`exporter.jobsync.merge` holds: counted by the other, a
    change between the two reads would be held and never counted, and the next ``/diag`` would count an
    end no answer shows."""
    found = NOTHING
    kept: dict[int, Job] = {}  # a record two reads returned (its own and its array's): the one held
    for records in read.values():
        for job in records:
            kept[job.job_id] = job
    for job in kept.values():
        sig = states.get(job.job_id)
        found += _step(None if sig is None else sig[0], job.state, signature(job)[2])
    for job_id in asked:
        sig = states.get(job_id)
        if job_id not in kept and sig is not None:
            found += _step(sig[0], None, 0)  # gone since the answer listed it
    return found


def split_off(
    held: Collection[int],
    answered: Collection[int],
    states: Collection[int],
    read: Mapping[int, Iterable[Job]],
) -> tuple[int, int]:
    """Array tasks among the records ``read`` that split off a ``held`` array under a new id as they
    started, as (those the answer for some records listed — ``answered``: :func:`accounted` counted them —,
    those no answer listed — not in ``states``: :func:`read_beyond` counted them). Both count a new
    record's entries as submissions, but ``/diag`` counted the array's tasks when the array was submitted:
    a split-off is a start only (counted as a submission too, the surplus would account for a later
    submission no answer showed). An array submitted since is not held: its records are submissions."""
    listed = unlisted = 0
    seen: set[int] = set()
    for records in read.values():
        for job in records:
            array = job.array_job_id
            if array is None or array == job.job_id or job.job_id in seen or job.job_id in held:
                continue
            seen.add(job.job_id)
            if array not in held:
                continue
            if job.job_id in answered:
                listed += 1
            elif job.job_id not in states:
                unlisted += 1
    return listed, unlisted


UNSEEN_MAX = 1000
"""The most ids below a record read that :func:`unseen` names (the newest)."""


def unseen(top: int, states: Collection[int], read: Mapping[int, Iterable[Job]]) -> tuple[int, ...]:
    """Ids after ``top`` (the highest id held: :func:`highest`) and below the highest record ``read`` that
    neither the answer (``states``' ids) nor a read showed: a record read along with another (an array
    task split off after the answer, read with its array) came before them. Ids are given in turn, so
    each is a job submitted before that record (or an id slurmctld gave a submission it refused): to ask
    about."""
    new = {job.job_id for records in read.values() for job in records if job.job_id > top}
    if not new:
        return ()
    highest = max(new)
    low = max(top + 1, highest - UNSEEN_MAX)
    return tuple(i for i in range(low, highest) if i not in new and i not in states)


def _step(before: str | None, after: str | None, entries: int) -> Found:
    """What one record's move from base state ``before`` to ``after`` counts (None: no such record — new
    before, gone after; ``entries``: a new record's entries): a start when it leaves PENDING other than
    cancelled, an end when it reaches a final state or is gone unended, a submission per new entry."""
    if before is None:
        if after is None:
            return NOTHING
        return Found(int(after not in _NOT_STARTED), int(after in FINAL_STATES), entries)
    if after is None:
        return Found(0, int(before not in FINAL_STATES), 0)
    started = before == "PENDING" and after not in _NOT_STARTED
    ended = before not in FINAL_STATES and after in FINAL_STATES
    return Found(int(started), int(ended), 0) if started or ended else NOTHING


_NOT_STARTED = frozenset({"PENDING", "CANCELLED"})
"""States a record that left PENDING may show without having started: a cancelled one may never have
run (counted as no start: if it had, the count is unaccounted for and the whole answer is read)."""


def whole_view(
    held: Iterable[Job], answered: Mapping[int, JobSig], asked: Iterable[int], refused: Mapping[int, JobSig]
) -> dict[int, JobSig]:
    """What a whole ``/jobs/state`` answer would say, from an answer for ``asked`` ids only: every held
    record with its own signature (and the ``refused`` ones with theirs), an asked one missing from the
    answer gone, what was answered (an array's id brings its tasks' records) as answered."""
    view = {job.job_id: signature(job) for job in held}
    view.update(refused)
    for job_id in asked:
        if job_id not in answered:
            view.pop(job_id, None)
    view.update(answered)
    return view
