"""Incremental job listing: which held job records are out of date, from ``GET /jobs/state``.

A full ``/jobs`` listing costs slurmrestd about 1.4 ms of CPU per job (27 s at 20,000 jobs) and
``update_time`` does not narrow it (any change returns every job). ``/jobs/state`` lists every job
record's id and state only (1.6 MB for 20,000 jobs); ``/job/{id}`` returns one job (an array's or a het
job's leader id returns all of its records). The poller compares the two and reads only the records
whose state moved (:func:`changes`), then folds them into the records it holds (:func:`merge`).

What ``/jobs/state`` cannot see — a change that leaves the state alone (a pending job's reason or
priority, ``scontrol update``, hold and release) — is found by reading jobs again whatever moved: after a
job-changing RPC (slurmctld's counters, :func:`job_update_rpcs`) newest first until as many jobs changed
as RPCs were counted, and all the time in turn at a low rate (the sweep), :func:`take` picking them.
Everything here is pure: bytes and records in, the answer out.

``/jobs/state`` names an entry ``N`` (a job), ``N_T`` (array task ``T`` held by record ``N``; a pending
array record lists each pending task) or ``N+K`` (component ``K`` of a het job, record ``N``); ``N`` is
always the record's own ``job_id``.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from . import errors, slurmtext
from .model import Diag, Job
from .versions._common import decode

JobSig = tuple[str, frozenset[str], int]
"""What ``/jobs/state`` says of one job record: base state, state flags, number of entries (the pending
tasks of a pending array record, else 1)."""

JOB_UPDATE_RPCS = frozenset({"REQUEST_UPDATE_JOB", "REQUEST_TOP_JOB"})
"""slurmctld RPCs that can change a job without changing its state (hold, release, ``scontrol update`` of
partition, priority, limits, ...; ``scontrol top``)."""


UNREAD_STATE: JobSig = ("", frozenset(), 0)
"""The signature of an entry whose state could not be read: never a held record's, so the record is read
with ``/job/{id}`` (whose validation keeps or refuses it) instead of being taken as gone."""


@dataclass(frozen=True)
class StatesRead:
    """One ``/jobs/state`` answer, parsed."""

    states: dict[int, JobSig]
    """Record id → :data:`JobSig` (:data:`UNREAD_STATE` where the id was readable but not the state)."""
    unreadable: int = 0
    """Entries whose job id could not be read: any held record may be one of them, so none is taken as
    gone from this answer."""


@dataclass(frozen=True)
class JobChanges:
    """What one ``/jobs/state`` read says must change in the held records."""

    fetch: tuple[int, ...]
    """Record ids to read again with ``/job/{id}`` (new, or their state moved), ascending."""
    gone: frozenset[int]
    """Held record ids Slurm no longer lists (purged after MinJobAge, or folded back into their array)."""


def parse_states(body: bytes) -> StatesRead:
    """A ``/jobs/state`` answer → record id → :data:`JobSig`. Raises :class:`errors.SlurmError` for a
    body that is not such an answer (or names errors); an entry whose state cannot be read gets
    :data:`UNREAD_STATE`, one whose id cannot be read is counted (:attr:`StatesRead.unreadable`). Hot:
    20,000 entries per poll, so each distinct state list is normalised once."""
    answer = decode(_JOB_STATES, body, "jobs/state")
    if answer.errors:
        text = "; ".join(_error_text(e) for e in answer.errors)
        raise errors.SlurmReportedError(text, endpoint="jobs/state")
    out: dict[int, JobSig] = {}
    normal: dict[tuple[str, ...] | str, JobSig | None] = {}
    unreadable = 0
    for entry in answer.jobs:
        jid = entry.job_id
        record = int(jid) if type(jid) is str and jid.isdigit() else _record_id(jid)
        if not record:
            unreadable += 1
            continue
        if entry.state in normal:
            sig = normal[entry.state]
        else:
            sig = normal[entry.state] = _one_entry(entry.state)
        held = out.get(record)
        if sig is None or held == UNREAD_STATE:
            out[record] = UNREAD_STATE
        else:
            out[record] = sig if held is None else (held[0], held[1], held[2] + 1)  # another array task
    return StatesRead(out, unreadable)


def _one_entry(state: tuple[str, ...] | str) -> JobSig | None:
    if not state:
        return None
    try:
        base, flags = slurmtext.job_state(state)
    except ValueError:
        return None
    return (base, frozenset(flags), 1)


def signature(job: Job) -> JobSig:
    """What ``/jobs/state`` lists for ``job`` while the record is unchanged."""
    entries = job.array_pending_tasks if job.array_task_string and job.array_task_id is None else 1
    flags = _FLAG_SETS.get(job.state_flags)
    if flags is None:
        flags = _FLAG_SETS[job.state_flags] = frozenset(job.state_flags)
    return (job.state, flags, max(1, entries))


_FLAG_SETS: dict[tuple[str, ...], frozenset[str]] = {(): frozenset()}
"""State flags → their set (a handful of distinct ones; bounded by Slurm's flag words)."""


def changes(
    held: Iterable[Job],
    states: Mapping[int, JobSig],
    refused: Mapping[int, JobSig] | None = None,
    *,
    complete: bool = True,
) -> JobChanges:
    """Compare the held records with a ``/jobs/state`` read. ``refused``: record id → the signature it had
    when its record was last read and refused (impossible values): not read again until it moves.
    ``complete`` False (some entries' ids could not be read): no held record is taken as gone."""
    refused = refused or {}
    held_sigs = {job.job_id: signature(job) for job in held}
    fetch = sorted(
        job_id
        for job_id, sig in states.items()
        if held_sigs.get(job_id) != sig and refused.get(job_id) != sig
    )
    gone = frozenset(job_id for job_id in held_sigs if job_id not in states) if complete else frozenset()
    return JobChanges(fetch=tuple(fetch), gone=gone)


def merge(
    held: Sequence[Job],
    fetched: Mapping[int, Sequence[Job]],
    gone: Iterable[int] = (),
) -> tuple[Job, ...]:
    """The held records with ``fetched`` folded in: requested id → the (valid) records ``/job/{id}``
    returned, empty when Slurm no longer knows the job. Every returned record replaces the held one with
    its id (an array's or het job's siblings come along and are fresher too); a requested id that came
    back without its own record is dropped, as is every id in ``gone``. Held order is kept; records not
    held before follow, in the order read."""
    fresh: dict[int, Job] = {}
    for records in fetched.values():
        for job in records:
            fresh[job.job_id] = job
    drop = set(gone)
    drop.update(job_id for job_id in fetched if job_id not in fresh)
    out: list[Job] = []
    for job in held:
        if job.job_id in drop:
            continue
        out.append(fresh.pop(job.job_id, job))
    out.extend(job for job_id, job in fresh.items() if job_id not in drop)
    return tuple(out)


FINAL_STATES = frozenset(
    {
        *("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"),
        *("PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"),
    }
)
"""Base states a job record never leaves (only its purge, which ``/jobs/state`` shows, remains)."""


def live_ids(held: Iterable[Job], listed: Collection[int]) -> set[int]:
    """Ids of the held records ``/jobs/state`` still lists whose state is not final: the records a change
    without a state change can still touch."""
    return {j.job_id for j in held if j.state not in FINAL_STATES and j.job_id in listed}


def take(queue: list[int], n: int, wanted: Collection[int], skip: Collection[int]) -> list[int]:
    """Pop up to ``n`` ids off the end of ``queue`` that are in ``wanted`` and not in ``skip`` (the others
    popped are dropped: gone, final, or read anyway)."""
    out: list[int] = []
    while queue and len(out) < n:
        job_id = queue.pop()
        if job_id in wanted and job_id not in skip:
            out.append(job_id)
    return out


HOLD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

UPDATE_ONLY_FIELDS = (
    *("name", "partitions", "account", "qos", "min_nodes", "max_nodes", "cpus", "tasks", "cpus_per_task"),
    *("memory_per_node_bytes", "memory_per_cpu_bytes", "gpus_per_node", "gpus", "tres_per_node"),
    *("tres_per_job", "time_limit_seconds", "required_nodes", "excluded_nodes", "features", "licenses"),
    *("reservation", "exclusive", "admin_comment", "comment"),
)
""":class:`Job` fields only a job-changing RPC moves (``scontrol update``); the scheduler's own bookkeeping —
a pending job's reason, priority, start and end estimates, eligible time, a dependency met — is not here."""


def updated(before: Job | None, after: Job | None) -> bool:
    """Whether a record read again in the same state shows what a job-changing RPC does — a hold or
    release, or a change of :data:`UPDATE_ONLY_FIELDS` — not the scheduler's own bookkeeping, which
    drifts all the time and would end a recheck before it reached the job the RPC changed. A record new
    or gone is not an update."""
    if before is None or after is None:
        return False
    if before.state != after.state:  # moved by the scheduler or another RPC (a start, a requeue-hold)
        return False
    if (before.reason in HOLD_REASONS) != (after.reason in HOLD_REASONS):
        return True
    return any(getattr(before, name) != getattr(after, name) for name in UPDATE_ONLY_FIELDS)


def moved(held: Iterable[Job], fetched: Mapping[int, Sequence[Job]], ids: Collection[int]) -> int:
    """How many of the held records ``ids`` read again were :func:`updated`."""
    wanted = set(ids)
    before = {j.job_id: j for j in held if j.job_id in wanted}
    after = {j.job_id: j for job_id in wanted for j in fetched.get(job_id, ()) if j.job_id == job_id}
    return sum(1 for job_id in wanted if updated(before.get(job_id), after.get(job_id)))


UNSETTLED_REASONS = frozenset({"None", "PartitionConfig"})
"""Reasons a pending job shows before slurmctld's first scheduling pass over it (lab: 0.1–1 s)."""
FOLLOW_READS = 3
"""Polls a job that :func:`to_follow` names is read again at most (its reason changes about a second on)."""
_JOB_IDS = re.compile(r"\d+")


def to_follow(
    read: Iterable[Job], fresh: Collection[int], held: Iterable[Job], now: float, done: Collection[int] = ()
) -> set[int]:
    """Pending jobs whose reason slurmctld is about to change without a state change or an RPC, to be read
    again in the next polls: jobs read for the first time (ids in ``fresh``) whose reason is not settled yet
    (:data:`UNSETTLED_REASONS`); jobs waiting (``Dependency``) on a job of ``read`` that left PENDING (their
    dependency text names it); jobs whose begin time has come (``BeginTime``, ``eligible_time`` ≤ ``now``,
    epoch seconds) unless in ``done`` (already followed to the end)."""
    read = list(read)
    out = {
        j.job_id for j in read if j.job_id in fresh and j.state == "PENDING" and j.reason in UNSETTLED_REASONS
    }
    moved = {str(i) for j in read if j.state != "PENDING" for i in (j.job_id, j.array_job_id) if i}
    for job in held:
        if job.state != "PENDING":
            continue
        if job.reason == "BeginTime" and job.eligible_time is not None and job.eligible_time <= now:
            if job.job_id not in done:
                out.add(job.job_id)
        elif moved and job.reason == "Dependency" and moved.intersection(_JOB_IDS.findall(job.dependency)):
            out.add(job.job_id)
    return out


def job_update_rpcs(diag: Diag | None) -> int | None:
    """How many job-changing RPCs (:data:`JOB_UPDATE_RPCS`) slurmctld served since its counters were
    reset; None when the answer has no per-type counts (then nothing can be concluded from it)."""
    if diag is None or not diag.rpc_counts:
        return None
    return sum(diag.rpc_counts.get(name, 0) for name in JOB_UPDATE_RPCS)


def users_moved(before: Mapping[str, int] | None, now: Mapping[str, int]) -> dict[str, int]:
    """User → how many RPCs slurmctld served them between two ``/diag`` answers, for the users whose count
    moved (a lower count — counters reset — counts as its new value); none without an earlier answer."""
    if before is None:
        return {}
    out = {}
    for user, n in now.items():
        was = before.get(user, 0)
        if n != was:
            out[user] = n - was if n > was else n
    return out


def likeliest(held: Iterable[Job], movers: Mapping[str, int], among: Collection[int]) -> list[int]:
    """The jobs among ``among`` of the users in ``movers`` (user → RPCs they sent), the likeliest to have
    been changed last (a recheck pops from the end): the users who sent the fewest RPCs last — a person's
    ``scontrol hold`` is a few RPCs, the poller's own user sends hundreds each poll, so its jobs must not
    crowd out theirs — and each user's newest job last."""
    if not movers:
        return []
    owner = {j.job_id: j.user for j in held if j.user in movers and j.job_id in among}
    return sorted(owner, key=lambda job_id: (-movers[owner[job_id]], job_id))


def likeliest_unowned(held: Iterable[Job], among: Collection[int], n: int) -> list[int]:
    """When no user who sent the job-changing RPCs owns the jobs (an administrator, a service account — or
    the token's own user, whose jobs are most of the queue), what an administrator acts on first, to pop
    from the end: the jobs an administrator held (``JobHeldAdmin``: only one may release them), then the
    ``n`` pending jobs of highest priority — the oldest under age priority, the head of the queue that
    the demand counts first — highest last."""
    admin_held: list[int] = []
    pending: list[tuple[int, int]] = []
    for job in held:
        if job.state != "PENDING" or job.job_id not in among:
            continue
        if job.reason == "JobHeldAdmin":
            admin_held.append(job.job_id)
        elif job.priority:
            pending.append((job.priority, -job.job_id))
    top = [-neg for _, neg in heapq.nlargest(n, pending)]
    return [*reversed(top), *reversed(admin_held)]


def recheck_order(live: Collection[int], first: Sequence[int], queue: Sequence[int] = ()) -> list[int]:
    """A recheck pass to pop from the end: ``first`` (:func:`likeliest`: the jobs of users whose RPCs moved
    with the job-changing ones — users hold and release their own jobs) in its order, last popped first,
    then the rest of ``queue`` — or, without one, of ``live`` — newest first. ``first`` ids not live are left
    out."""
    ahead = [j for j in first if j in live]
    pulled = set(ahead)
    rest = [j for j in queue if j not in pulled] if queue else sorted(j for j in live if j not in pulled)
    return rest + ahead


def _record_id(entry_id: int | str) -> int | None:
    if isinstance(entry_id, int):
        return entry_id if entry_id > 0 else None
    digits = entry_id.partition("_")[0].partition("+")[0]
    if not digits.isdigit():
        return None
    record = int(digits)
    return record if record > 0 else None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("description") or error.get("error") or error)
    return str(error)


class _JobState(msgspec.Struct):
    job_id: int | str = ""
    state: tuple[str, ...] | str = ()


class _JobStates(msgspec.Struct):
    jobs: list[_JobState] = []
    errors: list[Any] = []


_JOB_STATES = msgspec.json.Decoder(_JobStates)
