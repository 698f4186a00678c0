"""exporter.jobwatch: what to ask /jobs/state about from /diag's job counters, and whether an answer
accounts for them (the poller's use of it: tests/unit/test_jobsync.py)."""

from __future__ import annotations

from exporter.jobsync import merge
from exporter.jobwatch import (
    NEW_IDS_SLACK,
    UNSEEN_MAX,
    Found,
    JobCounts,
    Moved,
    accounted,
    highest,
    moved,
    plan,
    read_beyond,
    split_off,
    unseen,
    whole_view,
)
from exporter.model import Diag, Job


def job(job_id: int, state: str = "PENDING", priority: int = 1) -> Job:
    return Job(job_id=job_id, state=state, priority=priority)


HELD = (job(1, "COMPLETED"), job(2, "RUNNING"), job(3, priority=5), job(4, priority=9), job(5, "SUSPENDED"))


def test_counters_that_went_back_or_are_missing_tell_nothing() -> None:
    a = JobCounts(10, 5, 3, 1, 1)
    assert moved(a, JobCounts(12, 6, 3, 1, 2)) == Moved(submitted=2, started=1, canceled=1)
    assert moved(a, a) == Moved() and Moved().quiet
    assert moved(a, JobCounts(0, 0, 0, 0, 0)) is None  # slurmctld restarted, or midnight's reset
    assert moved(None, a) is None and JobCounts.of(None) is None
    assert JobCounts.of(Diag(jobs_submitted=7, jobs_canceled=2)) == JobCounts(7, 0, 0, 0, 2)


def test_what_is_asked_follows_what_moved() -> None:
    assert plan(HELD, Moved(completed=1), pending_budget=10).ids == (2, 5)  # what can end
    submitted = plan(HELD, Moved(submitted=2), pending_budget=10)
    assert submitted.live == () and submitted.pending == ()
    assert submitted.new == tuple(range(6, 6 + 2 + NEW_IDS_SLACK))
    started = plan(HELD, Moved(started=1), pending_budget=1)
    assert started.live == (2, 5) and started.pending == (4,)  # the highest priority first
    assert len(started.new) == 1 + NEW_IDS_SLACK


def test_an_answer_accounts_for_the_counts_or_not() -> None:
    held = {j.job_id: j for j in HELD}
    # job 3 started, job 2 ended, job 6 is new (pending, an array of 4 tasks)
    none: frozenset[str] = frozenset()
    states = {2: ("COMPLETED", none, 1), 3: ("RUNNING", none, 1), 6: ("PENDING", none, 4)}
    got = accounted(held, [2, 3, 6, 7], states)
    assert (got.started, got.ended, got.submitted) == (1, 1, 4)
    assert got.covers(Moved(submitted=4, started=1, completed=1))
    assert not got.covers(Moved(submitted=4, started=2, completed=1))  # a start elsewhere
    assert got.covers(Moved(completed=1, canceled=1))  # a running job cancelled: counted by both
    assert not got.covers(Moved(completed=1, canceled=2))  # and a pending one too, not asked about
    # a pending job cancelled never counts as started; a live record asked and missing has ended
    cancelled = accounted(held, [3, 5], {3: ("CANCELLED", frozenset(), 1)})
    assert (cancelled.started, cancelled.ended) == (0, 2)


def test_the_view_is_what_a_whole_answer_would_say() -> None:
    view = whole_view(HELD, {2: ("COMPLETED", frozenset(), 1), 9: ("RUNNING", frozenset(), 1)}, [2, 5, 8], {})
    assert view[2][0] == "COMPLETED" and view[9][0] == "RUNNING"  # answered, an array's task record too
    assert 5 not in view and 8 not in view  # asked, not answered: gone (or never there)
    assert view[3] == ("PENDING", frozenset(), 1) and view[1][0] == "COMPLETED"  # not asked: as held


def test_what_the_reads_show_beyond_the_answer() -> None:
    """Each step once, from the answer's signature to the record read: a start and an end after the answer
    (one record), an end of a record the answer showed running, a record the answer did not list (new and
    already ended), one gone since the answer listed it live; an unchanged record counts nothing (nor
    twice when two reads return it), nor does a gone id the answer listed ended."""
    sig = {1: ("PENDING", frozenset(), 1), 2: ("RUNNING", frozenset(), 1), 3: ("PENDING", frozenset(), 1)}
    sig |= {4: ("RUNNING", frozenset(), 1), 5: ("COMPLETED", frozenset(), 1)}
    read = {1: [job(1, "COMPLETED")], 2: [job(2, "COMPLETED")], 3: [job(3)], 6: [job(6, "COMPLETED")]}
    read |= {4: [], 5: []}
    assert read_beyond(sig, [1, 2, 3, 4, 5, 6], read) == Found(started=2, ended=4, submitted=1)
    assert read_beyond(sig, [3], {3: [job(3), job(3)]}) == Found(0, 0, 0)


def test_a_record_two_reads_returned_counts_as_the_one_held() -> None:
    """An array task read on its own and with its array, moments apart, the job ending between the two:
    the step counted is to the record the merge holds (the last read), so what is held is what is counted
    (found at 500 and 100,000 jobs: a task held ended, its end never counted — the next /diag's completion
    unaccounted for until the whole answer)."""
    sig = {10: ("PENDING", frozenset(), 1), 12: ("RUNNING", frozenset(), 1)}
    array_first = {10: [job(10), task(12, 10)], 12: [task(12, 10, "COMPLETED")]}
    own_first = {12: [task(12, 10, "COMPLETED")], 10: [job(10), task(12, 10)]}
    for read in (array_first, own_first):
        held = {j.job_id: j for j in merge([job(10), task(12, 10)], read)}
        ended = int(held[12].state == "COMPLETED")
        assert read_beyond(sig, [10, 12], read) == Found(started=0, ended=ended, submitted=0)
    assert read_beyond(sig, [10, 12], array_first).ended == 1


def task(job_id: int, array: int, state: str = "RUNNING") -> Job:
    return Job(job_id=job_id, state=state, array_job_id=array, array_task_id=job_id - array)


def test_array_tasks_split_off_a_held_array_are_no_submissions() -> None:
    """By where they were counted: listed by the answer for some records, or by no answer (read along
    with their array); the array's own record, a held record, one twice, and the tasks of an array
    submitted since (not held) are not split-offs."""
    held = {1: job(1), 5: job(5), 6: job(6, "RUNNING")}
    answered = {12: ("RUNNING", frozenset(), 1), 20: ("PENDING", frozenset(), 1)}
    states = {**answered, 1: ("PENDING", frozenset(), 1), 5: ("PENDING", frozenset(), 1)}
    read = {
        5: [job(5), task(12, 5), task(13, 5), task(6, 5)],  # 12 listed, 13 not, 6 held
        12: [task(12, 5)],  # read twice: once
        20: [Job(job_id=20, state="PENDING", array_job_id=20), task(21, 20)],  # submitted since
    }
    assert split_off(held, answered, states, read) == (1, 1)
    assert Found(2, 0, 3).without_submissions(1) == Found(2, 0, 2)
    assert Found(2, 0, 1).without_submissions(2) == Found(2, 0, 0)


def test_ids_below_a_record_read_that_no_answer_showed() -> None:
    held = {3: job(3), 10: job(10)}
    top = highest(held.values())
    assert top == 10 and highest(()) == 0
    assert plan(held.values(), Moved(submitted=1), pending_budget=0).top == top
    states = {
        3: ("PENDING", frozenset(), 1),
        10: ("PENDING", frozenset(), 1),
        12: ("RUNNING", frozenset(), 1),
    }
    assert unseen(top, states, {12: [job(12)], 5: [job(5)]}) == (11,)  # the answer lists 12, not 11
    assert unseen(top, states, {11: [job(11)], 12: [job(12)]}) == ()
    assert unseen(top, states, {12: [job(12)], 7: [job(7), task(15, 7)]}) == (11, 13, 14)
    assert unseen(top, states, {}) == ()
    far = 10 + 5 * UNSEEN_MAX
    assert unseen(top, states, {7: [task(far, 7)]}) == tuple(range(far - UNSEEN_MAX, far))  # the newest
