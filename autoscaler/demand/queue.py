"""The pending queue as the model reads it: jobs collapsed into kinds, per partition, in Slurm's order.

Built once per snapshot (:class:`Queue`) and read by every target. Every job is read once
(:func:`scan`); jobs the model treats alike become one :class:`Kind` with a count and a lead job (the
one Slurm takes up first); per partition the pending jobs are listed in Slurm's scheduling order as
runs ``(kind, jobs)`` — job by job up to :data:`ORDER_JOBS` pending records, else one run per kind at
its lead job's place; beyond, where no key carries ``who``, the kinds are numpy columns instead
(:mod:`~autoscaler.demand.tables`, :meth:`Queue.table`). Why, and what it costs: ``docs/demand.md``,
"Scheduling order" and "Cost".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import count as counter
from itertools import islice, repeat
from operator import attrgetter, is_not, itemgetter
from types import ModuleType
from typing import Any

import numpy as np

from autoscaler.demand.hetjobs import merge_hetjobs
from autoscaler.demand.keys import REQUEST, JobKey, request_of
from autoscaler.demand.select import hosts
from autoscaler.demand.sizing import Request
from autoscaler.demand.tables import (
    KeyFacts,
    KindTable,
    PieceIds,
    first_seen,
    interned,
    kind_tables,
    lead_rank,
)
from autoscaler.eligibility import UNSETTLED, Bars, settled_reason
from autoscaler.limits import Budget
from autoscaler.reasons import Eligibility, classify
from exporter.model import Job, Node, NodeRequest, Partition, Snapshot

__all__ = [
    "ORDER_JOBS",
    "Draw",
    "JobKey",
    "Kind",
    "Owner",
    "Queue",
    "ScanCache",
    "first_partition",
    "job_label",
    "key_of",
    "rank",
    "request_of",
    "scan",
    "scan_cached",
    "tally",
]

ORDER_JOBS = 2000
"""Up to this many pending job records, the pending jobs are ordered job by job (runs = consecutive jobs
of one kind); beyond, each kind is one run at its lead job's place."""

HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})
"""Jobs in these states (or flagged COMPLETING) hold their nodes: SUSPENDED ones hold memory."""

Draw = tuple[tuple[str, ...], int, int, str]
"""``(budget key, limit, what one job draws, reason)``: one of a kind's :data:`autoscaler.limits.Budget`,
with the amount (jobs, CPUs or nodes) each of its jobs takes."""

Owner = tuple[str, bool]
"""``(user, exclusive)``: :attr:`Kind.owner`."""

Rank = tuple[int, float, int]
"""(−priority, submit time, job id): :func:`rank`."""

_I64 = np.ndarray[Any, np.dtype[np.int64]]
_I8 = np.ndarray[Any, np.dtype[np.int8]]

_native: ModuleType | None
try:  # the per-record loops compiled (_scan.c): built where a C compiler was at install time
    import autoscaler.demand._scan as _native
except ImportError:  # pragma: no cover - a build without a compiler
    _native = None

_GROUP = (1 << 31) - 1
"""The group bits of a :func:`scan` code (group 0: not pending)."""
_U32 = 0xFFFFFFFF


SCAN_FIELDS = (
    "state", "reason", "reservation", "required_nodes", "excluded_nodes", "licenses", "priority",
    "partitions", "features", "array_task_id", "array_task_string", "array_pending_tasks", "array_job_id",
    "array_max_tasks", "qos", "account", "user", *Request._fields,
)  # fmt: skip
"""The record fields :func:`scan` reads, in the order the compiled one (``_scan.c``) takes them."""
_FIELDS = tuple(Job.__dict__[name] for name in SCAN_FIELDS)  # their member descriptors


def scan(
    jobs: Iterable[Job], others: list[Job], bars: Bars, *, users: bool = False
) -> tuple[dict[JobKey, int], list[int] | _I64]:
    """One pass over the jobs: the pending ones grouped by :data:`JobKey`, the others appended to
    ``others``.

    Returns ``({key: group}, codes)``: ``group`` numbers the key (1 + the ordinal among pending jobs of
    its first job: below 2³¹); ``codes`` holds one int per job, in snapshot order: ``priority << 31 |
    group`` for a pending job (Slurm's priority is a uint32: the code fits an int64), 0 for the others
    (:func:`tally` reads them).

    The hot loop of the model: compiled where built (``_scan.c``: the codes an int64 array, the
    priority clamped into a uint32 as :func:`_code_array` does), else :func:`_scan_py`.
    """
    if _native is None:
        return _scan_py(jobs, others, bars, users=users)
    groups: dict[JobKey, int] = {}
    numbers, priorities, _ = _compiled_scan(jobs, bars, _every(bars, users), others, groups, True)
    number = np.frombuffer(numbers, dtype=np.int64)
    code = np.frombuffer(priorities, dtype=np.int64) << 31 | number
    code[number < 0] = 0
    return groups, code


def _compiled_scan(
    jobs: Iterable[Job],
    bars: Bars,
    every: bool,
    others: list[Job] | None,
    ids: dict[JobKey, int],
    ordinal: bool,
) -> tuple[bytearray, bytearray, bytearray]:
    """``_scan.scan`` with the model's fields and reasons (:data:`SCAN_FIELDS`, :data:`UNSETTLED`,
    :func:`settled_reason` of ``bars``): :func:`scan`'s and the cache's (:func:`_scan_ids`) one call."""
    assert _native is not None
    got: tuple[bytearray, bytearray, bytearray] = _native.scan(
        jobs, _FIELDS, "PENDING", UNSETTLED, partial(settled_reason, bars=bars), every, others, ids, ordinal
    )
    return got


def _scan_py(
    jobs: Iterable[Job], others: list[Job], bars: Bars, *, users: bool = False
) -> tuple[dict[JobKey, int], list[int]]:
    """:func:`scan` in Python: the reference (``_scan.c`` does the same).

    One list comprehension of plain attribute reads, the key hashed once by ``dict.setdefault``; a job
    that is not pending is appended to ``others`` in passing (``append`` returns None).
    """
    other = others.append
    every = _every(bars, users)
    unsettled = UNSETTLED
    settle = partial(settled_reason, bars=bars)
    groups: dict[JobKey, int] = {}
    group = groups.setdefault
    ordinal = counter(1).__next__
    codes = [
        group(
            (
                j.partitions,
                j.reason if j.reason not in unsettled and not j.reservation and not j.required_nodes
                else settle(j),
                j.features,
                j.array_pending_tasks if j.array_task_id is None and j.array_task_string else 1,
                j.array_job_id if j.array_max_tasks is None
                else (j.array_job_id, j.array_task_id, j.array_task_string, j.array_max_tasks),
                (j.qos, j.account, j.user) if every else None,
                j.min_nodes, j.max_nodes, j.cpus, j.tasks, j.cpus_per_task, j.memory_per_node_bytes,
                j.memory_per_cpu_bytes, j.whole_node_memory, j.memory_bytes, j.gpus_per_node, j.gpus,
                j.exclusive, j.spread, j.tasks_exact, j.cpus_exact, j.node_range, j.node_request,
            ),
            ordinal(),
        ) | j.priority << 31
        if j.state == "PENDING"
        else other(j) or 0
        for j in jobs
    ]  # fmt: skip
    return groups, codes


class ScanCache:
    """What :func:`scan_cached` read of each job record, kept from one snapshot to the next.

    The poller keeps unchanged job records as the same objects from poll to poll (incremental reads,
    :mod:`exporter.jobsync`), so each record is read once: its ``id`` leads to a row of columns (``ids``
    sorted, ``at``: their rows; found by bisection, vectorised) —
    ``kid``, its key's id (−1: not pending); ``priority``; ``volatile``: its key's reason is read from the
    snapshot (:func:`autoscaler.eligibility.settled_reason`: a reason in :data:`UNSETTLED`, a reservation,
    ``--nodelist``). ``jobs`` holds every row's record, so its id is never another object's while the row
    lives. Keys are interned as dense ids (``key_ids``, ``keys``).

    A volatile row's key is kept (its ``kid``; −2: read it again) only while nothing it was read from
    changes: the partitions that may bar a job and the per-job limits equal (``policy``), slurmctld's clock
    not gone back (``now``), and only for a record that names no reservation, node list, excluded nodes or
    licenses (those follow the nodes, the clock or licenses in use: ``settled``) and whose reason was not
    ``BeginTime`` (the clock). Emptied when the keys would hold other fields (``who`` on or off) and when
    most keys are of snapshots gone by; cut to the current snapshot's rows when a fifth are of records
    gone by (:meth:`compact`). Also the pieces sizing found per request (:meth:`sizes`).

    Not thread-safe: one caller at a time.
    """

    __slots__ = (
        "_pieces",
        "_sizes",
        "at",
        "current",
        "every",
        "exclusive",
        "facts",
        "ident",
        "ids",
        "jobs",
        "key_ids",
        "keys",
        "kid",
        "now",
        "policy",
        "priority",
        "settled",
        "submit",
        "volatile",
    )

    def __init__(self) -> None:
        self.ids: np.ndarray[Any, np.dtype[np.uint64]] = np.empty(0, dtype=np.uint64)
        self.at: np.ndarray[Any, np.dtype[np.int64]] = np.empty(0, dtype=np.int64)
        self.jobs: list[Job] = []
        self.kid: np.ndarray[Any, np.dtype[np.int64]] = np.empty(0, dtype=np.int64)
        self.priority: np.ndarray[Any, np.dtype[np.int64]] = np.empty(0, dtype=np.int64)
        self.volatile: np.ndarray[Any, np.dtype[np.bool_]] = np.empty(0, dtype=np.bool_)
        self.settled: np.ndarray[Any, np.dtype[np.bool_]] = np.empty(0, dtype=np.bool_)
        """Volatile rows whose key may be kept (the class docstring)."""
        self.submit: np.ndarray[Any, np.dtype[np.float64]] = np.empty(0, dtype=np.float64)
        self.ident: _I64 = np.empty(0, dtype=np.int64)
        """Per row its record's :func:`rank` less the priority: submit time, job id (an array's id); read
        when first asked for (:func:`_cached_rank`; ident −1: not yet)."""
        self.current: _I64 = np.empty(0, dtype=np.int64)
        """The rows of the snapshot last scanned, in its order."""
        self.key_ids: dict[JobKey, int] = {}
        self.keys: list[JobKey] = []
        self.exclusive: np.ndarray[Any, np.dtype[np.bool_]] = np.empty(0, dtype=np.bool_)
        """Per key id: its jobs share nodes only with their user's (``--exclusive=user|mcs``)."""
        self.every: bool | None = None
        """Whether the cached keys carry ``who`` (:func:`scan`)."""
        self.policy: tuple[Any, ...] | None = None
        self.now = 0.0
        self._sizes: dict[tuple[Any, ...], dict[Any, Any]] = {}
        self.facts = KeyFacts()
        """What the kinds of a large queue need of each key, by key id (:class:`KeyFacts`)."""
        self._pieces: dict[tuple[Any, ...], PieceIds] = {}

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def sizes(self, *context: Any) -> dict[Any, Any]:
        """The sizing memo of one context (shape, target maximum, ``MaxMemPerCPU``): request → piece or
        misfit (:func:`autoscaler.demand.compute._count`); started afresh beyond :data:`SIZES_KEPT`."""
        memo = self._sizes.get(context)
        if memo is None:
            if len(self._sizes) >= 64:
                self._sizes.clear()
            memo = self._sizes[context] = {}
        elif len(memo) > SIZES_KEPT:
            memo.clear()
        return memo

    def piece_ids(self, *context: Any) -> PieceIds:
        """The sizing memo of one context by request id of :attr:`facts` (:class:`PieceIds`)."""
        memo = self._pieces.get(context)
        if memo is None:
            if len(self._pieces) >= 64:
                self._pieces.clear()
            memo = self._pieces[context] = PieceIds()
        return memo

    def intern(self, keys: Sequence[JobKey]) -> _I64:
        """The id of each key, new keys numbered on."""
        out, new = interned(keys, self.key_ids, few=False)
        self.note(new)
        return out

    def note(self, new: list[JobKey]) -> None:
        """Keys just numbered in :attr:`key_ids` (in their order): listed, and their :attr:`exclusive`."""
        if new:
            self.keys.extend(new)
            flags = np.zeros(len(new), dtype=np.bool_)
            last = list(map(itemgetter(-1), new))  # node requests: None for most keys
            for i in np.flatnonzero(
                np.fromiter(map(is_not, last, repeat(None)), np.bool_, len(new))
            ).tolist():
                flags[i] = _exclusive(last[i])
            self.exclusive = np.concatenate([self.exclusive, flags])

    def rows_of(self, ids: np.ndarray[Any, np.dtype[np.uint64]]) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The row of each job record (``ids``: :func:`_ids`), −1 where it has none."""
        if not self.jobs:
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.searchsorted(self.ids, ids)
        np.minimum(at, len(self.ids) - 1, out=at)
        return np.where(self.ids[at] == ids, self.at[at], -1)

    def add(
        self, jobs: Sequence[Job], ids: np.ndarray[Any, np.dtype[np.uint64]]
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        """New rows for ``jobs`` (``ids``: theirs; their columns appended by the caller): their numbers."""
        first = len(self.jobs)
        self.jobs.extend(jobs)
        rows = np.arange(first, first + len(jobs), dtype=np.int64)
        order = np.argsort(ids)
        where = np.searchsorted(self.ids, ids[order])
        self.ids = np.insert(self.ids, where, ids[order])
        self.at = np.insert(self.at, where, rows[order])
        return rows

    def compact(
        self,
        jobs: Sequence[Job],
        ids: np.ndarray[Any, np.dtype[np.uint64]],
        rows: np.ndarray[Any, np.dtype[np.int64]],
    ) -> None:
        """Keep only the rows of ``jobs`` (``ids``, ``rows``: theirs), in their order: the records of
        snapshots gone by are let go."""
        self.jobs = list(jobs)
        self.kid, self.priority = self.kid[rows], self.priority[rows]
        self.volatile, self.settled = self.volatile[rows], self.settled[rows]
        self.submit, self.ident = self.submit[rows], self.ident[rows]
        self.current = np.arange(len(rows), dtype=np.int64)
        self.at = np.argsort(ids).astype(np.int64)
        self.ids = ids[self.at]

    def row_of(self, job: Job) -> int:
        """The row of one record (−1: none)."""
        return int(self.rows_of(_ids((job,)))[0])

    def follow(self, bars: Bars) -> None:
        """Forget the kept keys of volatile rows if what they were read from changed."""
        policy = (bars.partitions, bars.limits)
        if policy != self.policy or bars.now < self.now:
            self.kid[self.volatile] = _READ_AGAIN
            self.policy = policy
        self.now = bars.now

    def keep(self, rows: np.ndarray[Any, np.dtype[np.int64]], kids: Sequence[int]) -> None:
        """Keep the keys just read for volatile ``rows`` where they may be kept."""
        keys = self.keys
        begin = np.fromiter((keys[k][1] == "BeginTime" if k >= 0 else True for k in kids), dtype=np.bool_)
        self.kid[rows] = np.where(self.settled[rows] & ~begin, kids, _READ_AGAIN)


SIZES_KEPT = 1 << 18
"""Requests a :meth:`ScanCache.sizes` memo holds at most."""
_READ_AGAIN = -2


def scan_cached(
    jobs: Sequence[Job], others: list[Job], bars: Bars, cache: ScanCache, *, users: bool = False
) -> tuple[list[JobKey] | None, _I64, _I64, _I64 | None]:
    """:func:`scan` through ``cache``: its groups as the keys (or their ids in the cache) and their group
    numbers (an int64 array: no dict hashing every key again), and the same codes (an int64 array) —
    ``(None, numbers, codes, key ids)``, or ``(keys, numbers, codes, None)`` if the cache was emptied on
    the way; reading (by :func:`scan` itself) only the records the cache has not seen and the volatile
    ones it may not keep. Sets :attr:`ScanCache.current`."""
    every = _every(bars, users)
    if cache.every is not every:
        cache.clear()
        cache.every = every
    cache.follow(bars)
    n = len(jobs)
    ids = _ids(jobs)
    row = cache.rows_of(ids)
    missing = np.flatnonzero(row < 0)
    fresh_kid: np.ndarray[Any, np.dtype[np.int64]] | None = None
    if missing.size:
        fresh = [jobs[i] for i in missing.tolist()] if missing.size < n else list(jobs)
        fresh_kid, priority, how = _scan_ids(fresh, bars, cache, users)
        added = cache.add(fresh, ids[missing])
        cache.kid = np.concatenate([cache.kid, fresh_kid])
        cache.priority = np.concatenate([cache.priority, priority])
        cache.submit = np.concatenate([cache.submit, np.zeros(len(fresh), dtype=np.float64)])
        cache.ident = np.concatenate([cache.ident, np.full(len(fresh), -1, dtype=np.int64)])  # read if asked
        cache.volatile = np.concatenate([cache.volatile, how > 0])
        cache.settled = np.concatenate([cache.settled, how == 1])
        row[missing] = added
        fresh_volatile = np.flatnonzero(cache.volatile[added])
        if fresh_volatile.size:
            cache.keep(added[fresh_volatile], fresh_kid[fresh_volatile].tolist())
    cache.current = row
    kid = cache.kid[row]
    if fresh_kid is not None:
        kid[missing] = fresh_kid  # a volatile one's key as read now, kept or not
    redo = np.flatnonzero(kid == _READ_AGAIN)
    if redo.size:
        again = _scan_ids([jobs[i] for i in redo.tolist()], bars, cache, users, keep_rule=False)[0]
        kid[redo] = again
        cache.keep(row[redo], again.tolist())
    pending = kid >= 0
    others.extend([jobs[i] for i in np.flatnonzero(~pending).tolist()])
    code = np.zeros(n, dtype=np.int64)
    numbers = kids = np.empty(0, dtype=np.int64)
    if pending.any():
        pending_kid = kid[pending]
        leading, group = first_seen(pending_kid, len(cache.keys))  # each key's first job, in order
        numbers = leading + 1  # 1 + the ordinal among pending jobs of each key's first job, as scan's
        code[pending] = cache.priority[row[pending]] << 31 | numbers[group]
        kids = pending_kid[leading]
        keys = cache.keys
        if len(keys) > 2 * len(kids) + 1024:
            keys_in_order = [keys[k] for k in kids.tolist()]
            cache.clear()  # mostly keys of snapshots gone by: start afresh next time
            return keys_in_order, numbers, code, None
    if len(cache.jobs) > n + n // 4 + 1024:
        cache.compact(jobs, ids, row)  # records of snapshots gone by: keep this one's only
    return None, numbers, code, kids


def _scan_ids(
    jobs: Sequence[Job], bars: Bars, cache: ScanCache, users: bool, *, keep_rule: bool = True
) -> tuple[_I64, _I64, _I8]:
    """:func:`scan` of ``jobs``, as each job's key id in ``cache`` (−1: not pending), its priority, and
    how its key may be kept: 0 not volatile; 1 volatile, kept while nothing it was read from changes; 2
    read each time (:class:`ScanCache`). Without ``keep_rule`` (records read again: their rule is
    known) the Python loop leaves the third empty; the compiled one finds it in passing."""
    if _native is not None:
        before = len(cache.key_ids)
        numbers, priorities, keep = _compiled_scan(
            jobs, bars, _every(bars, users), None, cache.key_ids, False
        )
        cache.note(list(islice(cache.key_ids, before, None)))
        return (
            np.frombuffer(numbers, dtype=np.int64),
            np.frombuffer(priorities, dtype=np.int64),
            np.frombuffer(keep, dtype=np.int8),
        )
    groups, codes = _scan_py(jobs, [], bars, users=users)
    code = _code_array(codes)
    lut = np.full(len(jobs) + 1, -1, dtype=np.int64)  # group → key id (group 0: not pending)
    lut[np.fromiter(groups.values(), dtype=np.int64, count=len(groups))] = cache.intern(list(groups))
    if not keep_rule:
        return lut[code & _GROUP], code >> 31, np.empty(0, dtype=np.int8)
    unsettled = UNSETTLED
    how = np.fromiter(
        [
            0 if j.state != "PENDING"
            else 2 if j.reservation or j.required_nodes
            else 0 if j.reason not in unsettled
            else 2 if j.excluded_nodes or j.licenses
            else 1
            for j in jobs
        ],
        dtype=np.int8,
        count=len(jobs),
    )  # fmt: skip
    return lut[code & _GROUP], code >> 31, how


def _code_array(
    codes: Sequence[int] | np.ndarray[Any, np.dtype[np.int64]],
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """:func:`scan`'s codes as an int64 array, a priority outside Slurm's uint32 clamped into it (never
    seen: the same whatever else the codes hold)."""
    if isinstance(codes, np.ndarray):
        return codes
    try:
        code = np.fromiter(codes, dtype=np.int64, count=len(codes))
    except OverflowError:
        return np.fromiter(
            (c & _GROUP | min(max(c >> 31, 0), _U32) << 31 for c in codes), dtype=np.int64, count=len(codes)
        )
    priority = code >> 31
    if len(code) and (priority.min() < 0 or priority.max() > _U32):
        code = np.clip(priority, 0, _U32) << 31 | code & _GROUP
    return code


def _every(bars: Bars, users: bool) -> bool:
    """Whether every key carries its job's ``who``: limits on what runs are enforced, or ``users``."""
    return users or (bars.limits is not None and bars.limits.running)


def _ids(jobs: Sequence[Job]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The records' ids (what :class:`ScanCache` finds its rows by)."""
    return np.fromiter(map(id, jobs), dtype=np.uint64, count=len(jobs))


def key_of(job: Job, bars: Bars, *, users: bool = False) -> JobKey:
    """The :data:`JobKey` :func:`scan` groups a pending job under (with the same ``users``)."""
    (key,) = scan((job,), [], bars, users=users)[0]
    return key


def tally(
    numbers: Sequence[int] | _I64,
    codes: Sequence[int] | np.ndarray[Any, np.dtype[np.int64]],
    *,
    positions: bool = False,
) -> tuple[_I64, _I64, _I64, list[int]]:
    """Per group of :func:`scan` (``numbers``: the group numbers, in its order): pending jobs, index of
    its *lead* job in the snapshot, the lead's priority (int64 arrays); with ``positions``, also the
    snapshot indices of the pending jobs (else ``[]``).

    The lead is the job of the key that Slurm takes up first: the highest priority, and among those the
    first one listed (slurmctld lists job records in job id order, except an array's pending record,
    which moves to the end each time a task is split off: why each array's records are keyed apart).
    Vectorised (numpy).
    """
    if not len(numbers):
        none = np.empty(0, dtype=np.int64)
        return none, none, none, []
    code = _code_array(codes)
    n = len(codes)
    group = code & _GROUP  # 0 for the jobs that are not pending
    size = int(group.max()) + 1
    jobs = np.bincount(group, minlength=size)
    # per group the largest priority << 31 | (n − index): the highest priority, then the first listed
    best = code & ~_GROUP
    best |= np.arange(n, 0, -1, dtype=np.int64)
    top = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, group, best)
    keys = (
        numbers
        if isinstance(numbers, np.ndarray)
        else np.fromiter(numbers, dtype=np.int64, count=len(numbers))
    )
    top = top[keys]
    leads = n - (top & _GROUP)
    return jobs[keys], leads, top >> 31, np.flatnonzero(group).tolist() if positions else []


def rank(job: Job) -> Rank:
    """Where Slurm's main scheduler takes ``job`` up (smaller first; within one partition): priority
    descending, then submit time, then job id (an array's tasks: the array's id), as slurmctld sorts its
    job queue (``sort_job_queue2``)."""
    return (-job.priority, job.submit_time or 0.0, job.array_job_id or job.job_id)


def _job_order(
    jobs: Sequence[Job],
    positions: Iterable[int],
    codes: Sequence[int] | np.ndarray[Any, np.dtype[np.int64]],
    key_index: Mapping[int, int],
) -> list[list[int]]:
    """The pending jobs at ``positions`` of the snapshot in Slurm's scheduling order (:func:`rank`;
    equal ranks — an array's tasks — in snapshot order), as runs ``[key index, jobs]`` of consecutive
    jobs of one key (``key_index``: a :func:`scan` group → the index of its key)."""
    runs: list[list[int]] = []
    for _, i in sorted([(rank(jobs[i]), i) for i in positions]):
        k = key_index[int(codes[i]) & _GROUP]
        if runs and runs[-1][0] == k:
            runs[-1][1] += 1
        else:
            runs.append([k, 1])
    return runs


def job_label(job: Job) -> str:
    """A job's id as Slurm prints it: ``12``, ``3_7``, ``3_[3-20]``."""
    if job.array_job_id is None:
        return str(job.job_id)
    if job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return f"{job.array_job_id}_[{job.array_task_string}]"


class Kind:
    """Pending jobs of one partition that the model treats alike.

    An ineligible kind is one reason (all that counts of it is how many); an eligible, unthrottled kind
    is one (fresh — reason None — or not, constraint, request); a throttled key (``%N``) stays its own
    kind, as the throttle's allowance is handed out in order. Its lead job is its keys' lead (:func:`tally`)
    that Slurm takes up first.
    """

    __slots__ = (
        "count",
        "draws",
        "elig",
        "features",
        "fresh",
        "keys",
        "lead",
        "name",
        "owner",
        "priority",
        "request",
        "throttle",
        "ties",
    )

    def __init__(
        self,
        key: JobKey,
        request: Request | None,
        name: str,
        elig: Eligibility,
        count: int,
        priority: int,
        lead: int,
    ) -> None:
        self.name = name
        """The reason it is classified by (:func:`autoscaler.reasons.classify`)."""
        self.elig = elig
        self.fresh = name == "None"
        """Not looked at by the scheduler yet (reason ``None``): may start on busy nodes' free room."""
        self.features: str = key[2]
        array = key[4]
        self.throttle: tuple[int, int] | None = (
            (array[0], array[3]) if type(array) is tuple and array[0] is not None else None
        )
        """(array job id, %N) of a throttled array."""
        self.draws: tuple[Draw, ...] = ()
        """The QOS/association budgets each of its jobs draws from
        (:meth:`autoscaler.limits.JobLimits.budgets`)."""
        self.owner: Owner | None = None
        """Where its jobs' user has ``--exclusive=user|mcs`` jobs pending: (user, whether its jobs are such,
        sharing nodes only with their user's); an MCS label is taken as the user's. None: a user without
        such jobs."""
        self.request = request
        """What sizing reads (None for an ineligible kind: never sized)."""
        self.count = count
        """Jobs (array tasks individually)."""
        self.priority = priority
        """The highest priority of its jobs (−1 if ineligible: never packed)."""
        self.lead = lead
        """Snapshot index of the lead job of its first key of that priority."""
        self.ties: list[int] | None = None
        """Those of its other keys with a lead of that priority (merged keys; rare)."""
        self.keys = [key]

    def rank(self, jobs: Sequence[Job]) -> Rank:
        """Its lead job's :func:`rank`."""
        lead = rank(jobs[self.lead])
        return lead if self.ties is None else min(lead, *(rank(jobs[i]) for i in self.ties))

    def add(self, key: JobKey, count: int, priority: int, lead: int) -> None:
        """Merge another key's jobs into this kind."""
        self.count += count
        self.keys.append(key)
        if priority > self.priority:
            self.priority, self.lead, self.ties = priority, lead, None
        elif priority == self.priority:
            if self.ties is None:
                self.ties = [lead]
            else:
                self.ties.append(lead)


_by_priority = attrgetter("priority")
_by_lead_job = attrgetter("lead")


def _by_lead(kinds: list[Kind], jobs: Sequence[Job]) -> list[Kind]:
    """``kinds`` in the order Slurm takes their lead jobs up: by priority, and kinds of equal priority
    by their leads' :func:`rank` (read only for those: most kinds differ in priority). Stable.

    Vectorised (numpy ``lexsort``), every object read in the order it was made (``kinds``: their keys'
    order; their leads: snapshot order) — read in priority order instead, 100k kinds cost ~10× more in
    cache misses (``docs/demand.md``, "Cost")."""
    n = len(kinds)
    if n < 2:
        return list(kinds)
    priority = np.fromiter(map(_by_priority, kinds), dtype=np.int64, count=n)
    _, inverse, counts = np.unique(priority, return_inverse=True, return_counts=True)
    shared = (counts[inverse.ravel()] > 1) & (priority >= 0)  # shares its priority (≥ 0) with another kind
    submit = np.zeros(n, dtype=np.float64)
    ident = np.zeros(n, dtype=np.int64)
    at = np.flatnonzero(shared).tolist()
    if at:
        tied = [kinds[i] for i in at]
        submit[at], ident[at] = lead_rank(
            jobs, np.fromiter(map(_by_lead_job, tied), dtype=np.int64, count=len(at))
        )
        for i, kind in zip(at, tied, strict=True):
            if kind.ties is not None:  # merged keys with leads of that priority (rare): the first of them
                _, submit[i], ident[i] = kind.rank(jobs)
    order = np.lexsort((ident, submit, -priority))  # stable: equal ranks keep the kinds' order
    by_order = np.empty(n, dtype=object)
    by_order[:] = kinds
    out: list[Kind] = by_order[order].tolist()
    return out


TABLES = True
"""Whether large queues without ``who`` become :class:`KindTable` columns (tests turn it off to compare
with :class:`Kind` objects, the reference)."""


def _cached_rank(cache: ScanCache, at: _I64) -> tuple[np.ndarray[Any, np.dtype[np.float64]], _I64]:
    """:func:`~autoscaler.demand.tables.lead_rank` from the cache's rows (:attr:`ScanCache.current`: the
    snapshot just scanned)."""
    rows = cache.current[at]
    unread = rows[cache.ident[rows] < 0]
    if unread.size:
        unread = np.unique(unread)
        cache.submit[unread], cache.ident[unread] = lead_rank(cache.jobs, unread)
    return cache.submit[rows], cache.ident[rows]


def _draws(budgets: Sequence[Budget], request: Request) -> tuple[Draw, ...]:
    """The budgets with what one job of ``request`` draws from each: 1 job, its CPUs, its nodes, its memory
    and its GPUs (:data:`autoscaler.limits.JOBS` …); a budget it draws nothing from (no GPUs, no memory
    in its TRES) left out."""
    if not budgets:
        return ()
    draw = (
        1,
        max(request.cpus, request.tasks * request.cpus_per_task, 1),
        max(request.min_nodes, 1),
        request.memory_bytes,
        request.gpus,
    )
    return tuple((key, limit, draw[what], reason) for key, limit, what, reason in budgets if draw[what] > 0)


_node_request = itemgetter(-1)
"""A key's ``node_request`` (the last field of its request)."""


def _exclusive(node_request: NodeRequest | None) -> bool:
    """Whether a job of this node request shares nodes only with its own user's (``--exclusive=user|mcs``)."""
    return node_request is not None and node_request.exclusive_to is not None


def _exclusive_to(key: JobKey) -> bool:
    """:func:`_exclusive` of the key's request (its ``node_request``, the last field)."""
    return _exclusive(key[-1])


def first_partition(partitions: tuple[str, ...], tiers: Mapping[str, int]) -> str | None:
    """The partition Slurm tries a pending job in first: the highest ``PriorityTier``, then the job's own
    order. A job pending in several partitions counts in that one only, so two NodeSets never both scale
    up for it."""
    if len(partitions) < 2:
        return partitions[0] if partitions else None
    return max(enumerate(partitions), key=lambda ip: (tiers.get(ip[1], 0), -ip[0]))[1]


class Queue:
    """What every target needs from the snapshot, built once per snapshot: per partition its pending
    jobs as runs ``(kind, jobs)`` in Slurm's order (:meth:`runs`) or as kind columns (:meth:`table`), its
    nodes, and which nodes jobs hold."""

    def __init__(self, snapshot: Snapshot, partitions: Iterable[str], cache: ScanCache | None = None) -> None:
        wanted = frozenset(partitions)
        self.cache = cache
        """Kept from the previous snapshot (:class:`ScanCache`), or None."""
        self.jobs = jobs = merge_hetjobs(snapshot.jobs)
        others: list[Job] = []
        self.bars = Bars.of(snapshot)
        conf = snapshot.config
        self.cpus_by_thread = conf is not None and any(
            p.startswith("CR_CPU") for p in conf.select_type_parameters
        )
        """slurmctld allocates threads, not whole cores (``SelectTypeParameters=CR_CPU*``, where /conf
        says)."""
        self.cpus_per_gpu = conf.default_cpus_per_gpu if conf is not None else 0
        """The cluster-wide ``DefCpuPerGPU`` (where /conf says; 0: none): a target without its own
        ``cpusPerGpu`` sizes GPU jobs with it."""
        self.partitions: dict[str, Partition] = {p.name: p for p in snapshot.partitions if p.name in wanted}
        """The wanted partitions the snapshot has (their limits: ``MaxCPUsPerNode``, ``MaxMemPerCPU``)."""
        listed: list[JobKey] | None
        numbers: Sequence[int] | np.ndarray[Any, np.dtype[np.int64]]
        codes: Sequence[int] | np.ndarray[Any, np.dtype[np.int64]]
        kids: np.ndarray[Any, np.dtype[np.int64]] | None = None
        if cache is not None:
            listed, numbers, codes, kids = scan_cached(jobs, others, self.bars, cache)
        else:
            by_key, codes = scan(jobs, others, self.bars)
            listed, numbers = list(by_key), list(by_key.values())
        if listed is None:  # the keys by their ids in the cache: listed only if read (:meth:`_keys`)
            assert cache is not None and kids is not None
            self._users = bool(cache.exclusive[kids].any())
        else:
            # the keys' node requests: few distinct, most None (read in C)
            self._users = any(map(_exclusive, set(map(_node_request, listed))))
        self._listed = listed
        self._key_ids = (cache.keys, kids) if cache is not None and kids is not None else None
        owners: frozenset[str] = frozenset()
        if self._users:  # (rare) every job's user is needed: a user's plain jobs go with its exclusive ones
            others.clear()
            by_key, codes = scan(jobs, others, self.bars, users=True)
            self._listed, numbers = list(by_key), list(by_key.values())
            owners = frozenset(key[5][2] for key in self._listed if _exclusive_to(key))
        self.by_job = by_job = len(codes) - len(others) <= ORDER_JOBS
        """Whether the pending jobs are ordered job by job (else kind by kind)."""
        multiplicities, leads, priorities, positions = tally(numbers, codes, positions=by_job)
        tiers = {p.name: p.priority_tier for p in snapshot.partitions}
        limits = self.bars.limits
        self._order: dict[str, list[tuple[Kind, int]]] = {}
        self._kinds: dict[str, list[Kind]] = {}
        self.tables: dict[str, KindTable] | None = None
        """Per partition its kinds as columns (:class:`KindTable`): beyond :data:`ORDER_JOBS` pending
        records where no key carries ``who`` (else :meth:`runs`)."""
        self.facts: KeyFacts | None = None
        self._key_kind: np.ndarray[Any, np.dtype[np.int64]] | None = None
        if not by_job and not _every(self.bars, self._users) and TABLES:
            ranks = partial(lead_rank, jobs)
            if cache is not None and kids is not None and len(cache.keys) >= len(cache.facts):
                facts = cache.facts
                facts.extend(cache.keys[len(facts) :])
                ranks = partial(_cached_rank, cache)
            else:  # no cache, or emptied on the way: this snapshot's keys only
                groups = self._keys()
                facts, kids = KeyFacts(), np.arange(len(groups), dtype=np.int64)
                facts.extend(groups)
            self.facts = facts
            homes = sorted(wanted)
            index_of = {p: i for i, p in enumerate(homes)}
            tried = [first_partition(partitions_, tiers) or "" for partitions_ in facts.partitions]
            home_ids = np.array([index_of.get(p, -1) for p in tried], dtype=np.int64)
            self.tables, self._key_kind = kind_tables(
                facts, kids, homes, home_ids, multiplicities, leads, priorities, ranks
            )
        else:
            groups = self._keys()
            kinds: dict[str, list[Kind]] = {p: [] for p in wanted}
            kind_at: dict[str, dict[int, Kind]] = {p: {} for p in wanted}  # key index → its kind
            merged: dict[str, dict[Any, Kind]] = {p: {} for p in wanted}
            home_of: dict[tuple[str, ...], str | None] = {}
            class_of: dict[str, tuple[str, Eligibility]] = {}
            ineligible, eligible = Eligibility.INELIGIBLE, Eligibility.ELIGIBLE
            new_tuple = tuple.__new__
            for k, (key, multiplicity, lead, priority) in enumerate(
                zip(groups, multiplicities.tolist(), leads.tolist(), priorities.tolist(), strict=True)
            ):
                partitions_, reason, features, tasks, array, who = key[:REQUEST]
                home = home_of.get(partitions_, "")  # "": not seen yet; None: not a wanted partition
                if not home:
                    if home is None:
                        continue
                    first = first_partition(partitions_, tiers)
                    home = home_of[partitions_] = first if first in wanted else None
                    if home is None:
                        continue
                cls = class_of.get(reason)
                if cls is None:
                    cls = class_of[reason] = classify(reason)[:2]
                name, elig = cls
                count = multiplicity * tasks
                request: Request | None = None
                draws: tuple[Draw, ...] = ()
                owner: Owner | None = None
                mkey: Any
                if elig is ineligible:
                    mkey = name  # all that counts is how many
                    priority = -1
                else:
                    request = new_tuple(Request, key[REQUEST:])  # request_of, without its frame
                    if who is not None:
                        qos, account, user = who
                        if limits is not None:
                            draws = _draws(limits.budgets(qos, account, user, home), request)
                        if user in owners:
                            owner = (user, _exclusive(request.node_request))
                    if type(array) is tuple:
                        mkey = None  # %N: keeps its place in the order
                    elif elig is eligible:  # fresh or not, constraint, request, budgets, owner
                        mkey = (name == "None", features, request, draws, owner)
                    else:
                        mkey = (name, features, request, draws, owner)
                if mkey is None:
                    kind = Kind(key, request, name, elig, count, priority, lead)
                    kind.draws, kind.owner = draws, owner
                else:
                    same = merged[home]
                    seen = same.get(mkey)
                    if seen is not None:
                        seen.add(key, count, priority, lead)
                        if by_job:
                            kind_at[home][k] = seen
                        continue
                    kind = same[mkey] = Kind(key, request, name, elig, count, priority, lead)
                    kind.draws, kind.owner = draws, owner
                kinds[home].append(kind)
                if by_job:
                    kind_at[home][k] = kind
            if by_job:
                key_index = {g: k for k, g in enumerate(np.asarray(numbers).tolist())}
                tasks_of = [key[3] for key in groups]
                job_runs = _job_order(jobs, positions, codes, key_index)
                for p in wanted:
                    at = kind_at[p]
                    order: list[list[Any]] = []
                    for k, n in job_runs:
                        run_kind = at.get(k)
                        if run_kind is None:
                            continue
                        if order and order[-1][0] is run_kind:
                            order[-1][1] += n * tasks_of[k]
                        else:
                            order.append([run_kind, n * tasks_of[k]])
                    self._order[p] = [(run_kind, n) for run_kind, n in order]
            else:
                self._kinds = {p: _by_lead(kinds[p], jobs) for p in wanted}
        holding = [j for j in others if j.state in HOLDING_STATES or "COMPLETING" in j.state_flags]
        self.array_running: Counter[int] = Counter(
            j.array_job_id for j in holding if j.array_task_id is not None and j.array_job_id is not None
        )
        """Array job id → its tasks that hold nodes (for ``%N`` throttles)."""
        self.budget_used: dict[tuple[str, ...], int] = (
            limits.usage(holding) if limits is not None and limits.running else {}
        )
        """Budget key → what running jobs hold of it (:meth:`autoscaler.limits.JobLimits.usage`)."""
        self._held_exprs = {j.nodes for j in holding if j.nodes and not wanted.isdisjoint(j.partitions)}
        self._held: set[str] | None = None
        self._owned_exprs = {
            j.nodes for j in holding if j.nodes and j.node_request is not None and j.node_request.exclusive_to
        }
        self._owned: set[str] | None = None
        self.nodes: dict[str, list[Node]] = {p: [] for p in wanted}
        """Per partition, its nodes in snapshot order."""
        for node in snapshot.nodes:
            for p in node.partitions:
                lst = self.nodes.get(p)
                if lst is not None:
                    lst.append(node)

    def runs(self, partition: str) -> Iterable[tuple[Kind, int]]:
        """The partition's pending jobs in Slurm's scheduling order as runs ``(kind, jobs)`` (array tasks
        counted individually): consecutive jobs of one kind, or (beyond :data:`ORDER_JOBS`) one run per
        kind at its lead job's place (made as read: 100k kept tuples would cost the garbage collector)."""
        if self.by_job:
            return self._order[partition]
        return ((kind, kind.count) for kind in self._kinds[partition])

    def table(self, partition: str) -> KindTable | None:
        """The partition's kinds as columns (:attr:`tables`), or None: read :meth:`runs`."""
        return self.tables[partition] if self.tables is not None else None

    def keys_of(self, kinds: Iterable[int]) -> dict[int, list[JobKey]]:
        """The keys of each of these kinds of :attr:`tables` (:attr:`KindTable.kind`), in key order; one
        pass over the keys for all of them."""
        assert self._key_kind is not None
        at = np.flatnonzero(np.isin(self._key_kind, np.fromiter(kinds, dtype=np.int64)))
        keys = self._keys()
        out: dict[int, list[JobKey]] = {}
        for i, kind in zip(at.tolist(), self._key_kind[at].tolist(), strict=True):
            out.setdefault(kind, []).append(keys[i])
        return out

    def _keys(self) -> list[JobKey]:
        """The pending jobs' keys in :func:`scan`'s order (listed from the cache's ids when first read)."""
        if self._listed is None:
            assert self._key_ids is not None
            keys, kids = self._key_ids
            self._listed = [keys[k] for k in kids.tolist()]
        return self._listed

    def held_nodes(self) -> set[str]:
        """Names of nodes held by jobs (RUNNING, SUSPENDED, COMPLETING) of the wanted partitions."""
        if self._held is None:
            self._held = set().union(*map(hosts, self._held_exprs))
        return self._held

    def owned_nodes(self) -> set[str]:
        """Names of nodes held by ``--exclusive=user|mcs`` jobs: their free room is their user's only."""
        if self._owned is None:
            self._owned = set().union(*map(hosts, self._owned_exprs))
        return self._owned

    def jobs_of(self, keys: Mapping[JobKey, Any], partition: str) -> list[tuple[Job, Any]]:
        """The pending jobs of ``partition`` with these keys, each with its key's value (rare: too-large
        jobs), grouped like job by job — by all their fields, groups in order of first appearance."""
        cpus = {request_of(key).cpus for key in keys}
        groups: dict[tuple[Any, ...], list[tuple[Job, Any]]] = {}
        for job in self.jobs:
            if job.cpus in cpus and job.state == "PENDING" and partition in job.partitions:
                key = key_of(job, self.bars, users=self._users)
                if key in keys:
                    full = (
                        key,
                        job.array_job_id,
                        job.array_task_id,
                        job.array_task_string,
                        job.array_pending_tasks,
                    )
                    groups.setdefault(full, []).append((job, keys[key]))
        return [item for group in groups.values() for item in group]
