"""A large queue's kinds as numpy columns: what :class:`~autoscaler.demand.queue.Kind` objects hold,
without an object per kind. Pure.

:class:`KeyFacts` (what the kinds need of each key, by key id), :func:`kind_tables` (keys merged and
ordered into one :class:`KindTable` per partition, as ``Kind`` objects are), :class:`PieceIds` (sizing
by request id). Counted by :func:`autoscaler.demand.compute._count_table`. Why and what it costs:
``docs/demand.md``, "Kinds as columns".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice, repeat
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from autoscaler.demand.keys import REQUEST, JobKey
from autoscaler.demand.packing import Piece
from autoscaler.demand.sizing import NUMBER_FIELDS, Request, number_columns, request_columns
from autoscaler.reasons import Eligibility, classify
from exporter.model import Job

__all__ = [
    "ELIGIBLE_CODE",
    "INELIGIBLE_CODE",
    "WHEN_EMPTY_CODE",
    "KeyFacts",
    "KindTable",
    "PieceIds",
    "empty_table",
    "first_seen",
    "interned",
    "kind_tables",
    "lead_rank",
]

INELIGIBLE_CODE, ELIGIBLE_CODE, WHEN_EMPTY_CODE = 0, 1, 2
"""A reason's class in :class:`KeyFacts` and :class:`KindTable` columns (:class:`Eligibility`)."""
_ELIG_CODE = {
    Eligibility.INELIGIBLE: INELIGIBLE_CODE,
    Eligibility.ELIGIBLE: ELIGIBLE_CODE,
    Eligibility.ELIGIBLE_WHEN_EMPTY: WHEN_EMPTY_CODE,
}

_I64 = np.ndarray[Any, np.dtype[np.int64]]

_native: ModuleType | None
try:  # the per-record loops compiled (_scan.c): built where a C compiler was at install time
    import autoscaler.demand._scan as _native
except ImportError:  # pragma: no cover - a build without a compiler
    _native = None


class KeyFacts:
    """What the kinds of a large queue need of each :data:`JobKey`, as numpy columns by key id (its
    index here), the values interned: ``partition`` (id in ``partitions``), ``name`` and ``elig`` (its
    reason's class: :func:`autoscaler.reasons.classify`, ``names``; codes :data:`ELIGIBLE_CODE` …),
    ``feature`` (``features``), ``tasks``, ``solo`` (an array record keyed apart: ``%N``), ``throttle_id``
    and ``throttle_limit`` (the array and its ``%N``; −1: none), ``request`` (``requests``).

    A key never changes, so neither do its facts: :class:`ScanCache` keeps them by its key ids;
    without a cache they are made for one snapshot's keys."""

    __slots__ = (
        "_ids",
        "_reasons",
        "elig",
        "feature",
        "features",
        "name",
        "names",
        "partition",
        "partitions",
        "request",
        "request_numbers",
        "request_plain",
        "requests",
        "solo",
        "tasks",
        "throttle_id",
        "throttle_limit",
    )

    def __init__(self) -> None:
        self.partitions: list[tuple[str, ...]] = []
        self.names: list[str] = []
        self.features: list[str] = []
        self.requests: list[tuple[Any, ...]] = []
        """Each request's fields (:class:`Request`'s, a plain tuple: :meth:`request_of`)."""
        self.request_numbers: _I64 = np.empty((0, len(NUMBER_FIELDS)), dtype=np.int64)
        """Per request id its :data:`~autoscaler.demand.sizing.NUMBER_FIELDS` (:func:`request_columns`)."""
        self.request_plain: np.ndarray[Any, np.dtype[np.bool_]] = np.empty(0, dtype=np.bool_)
        """Per request id: :func:`~autoscaler.demand.sizing.size_columns` may size it."""
        self._ids: tuple[dict[Any, int], ...] = (
            {},
            {},
            {},
            {},
            {},
        )  # partitions, reason, name, feature, request
        self._reasons: list[tuple[int, int]] = []  # reason id → (name id, elig code)
        empty = np.empty(0, dtype=np.int64)
        self.partition, self.name, self.elig, self.feature, self.tasks = empty, empty, empty, empty, empty
        self.throttle_id, self.throttle_limit, self.request = empty, empty, empty
        self.solo: np.ndarray[Any, np.dtype[np.bool_]] = np.empty(0, dtype=np.bool_)

    def __len__(self) -> int:
        return len(self.partition)

    def name_id(self, name: str) -> int:
        """The id of a reason class name (−1: no key has it)."""
        return self._ids[2].get(name, -1)

    def feature_id(self, features: str) -> int:
        """The id of a constraint (−1: no key has it)."""
        return self._ids[3].get(features, -1)

    def extend(self, keys: Sequence[JobKey]) -> None:
        """The facts of these keys, numbered on (keys without ``who``: :func:`scan` with ``who`` None).

        Read by ``_scan.key_facts`` where it is built (compiled), else by :func:`_key_columns_py`; each new
        reason classified once."""
        if not keys:
            return
        partition_ids, reason_ids, name_ids, feature_ids, request_ids = self._ids
        before = len(partition_ids), len(reason_ids), len(feature_ids)
        columns = _key_columns(keys, (partition_ids, reason_ids, feature_ids, request_ids))
        self.partitions += islice(partition_ids, before[0], None)
        for reason_ in islice(reason_ids, before[1], None):
            reason_name, reason_elig = classify(reason_)[:2]
            n = name_ids.get(reason_name)
            if n is None:
                n = name_ids[reason_name] = len(self.names)
                self.names.append(reason_name)
            self._reasons.append((n, _ELIG_CODE[reason_elig]))
        by_reason = np.array(self._reasons, dtype=np.int64).reshape(-1, 2)
        self.features += islice(feature_ids, before[2], None)
        self.requests += columns.new_requests
        self.request_numbers = np.concatenate([self.request_numbers, columns.numbers])
        self.request_plain = np.concatenate([self.request_plain, columns.plain])
        reason = columns.reason
        self.partition = np.concatenate([self.partition, columns.partition])
        self.name = np.concatenate([self.name, by_reason[reason, 0]])
        self.elig = np.concatenate([self.elig, by_reason[reason, 1]])
        self.feature = np.concatenate([self.feature, columns.feature])
        self.tasks = np.concatenate([self.tasks, columns.tasks])
        self.throttle_id = np.concatenate([self.throttle_id, columns.throttle_id])
        self.throttle_limit = np.concatenate([self.throttle_limit, columns.throttle_limit])
        self.request = np.concatenate([self.request, columns.request])
        self.solo = np.concatenate([self.solo, columns.solo])

    def request_of(self, request_id: int) -> Request:
        """The typed request of one request id."""
        return tuple.__new__(Request, self.requests[request_id])


class KeyColumns(NamedTuple):
    """What :meth:`KeyFacts.extend` reads of its keys: per key the ids of its partitions, reason,
    constraint and request (interned through the dicts given), its tasks, whether its array is keyed
    apart (``solo``) and its ``%N`` throttle (−1: none); the requests new to their dict, in order, with
    :func:`~autoscaler.demand.sizing.request_columns` of them."""

    partition: _I64
    reason: _I64
    feature: _I64
    tasks: _I64
    solo: np.ndarray[Any, np.dtype[np.bool_]]
    throttle_id: _I64
    throttle_limit: _I64
    request: _I64
    new_requests: list[tuple[Any, ...]]
    numbers: _I64
    plain: np.ndarray[Any, np.dtype[np.bool_]]


_Ids = tuple[dict[Any, int], dict[Any, int], dict[Any, int], dict[Any, int]]
"""The dicts a key's partitions, reason, constraint and request are interned through (value → id)."""


def _key_columns(keys: Sequence[JobKey], ids: _Ids) -> KeyColumns:
    """:class:`KeyColumns` of ``keys``: compiled (``_scan.key_facts``) where built and the keys hold only
    what it reads exactly, else :func:`_key_columns_py`."""
    if _native is not None:
        got = _native.key_facts(keys if isinstance(keys, list) else list(keys), 0, *ids, REQUEST)
        if got is not None:
            partition, reason, feature, tasks, solo, throttle_id, throttle_limit, request = got[:8]
            new_requests, numbers, missing, plain = got[8:]
            width = len(NUMBER_FIELDS)
            number_rows, plain_rows = number_columns(
                np.frombuffer(numbers, dtype=np.int64).reshape(-1, width),
                np.frombuffer(missing, dtype=np.bool_).reshape(-1, width),
                np.frombuffer(plain, dtype=np.bool_),
            )
            return KeyColumns(
                _int64(partition), _int64(reason), _int64(feature), _int64(tasks),
                np.frombuffer(solo, dtype=np.bool_), _int64(throttle_id), _int64(throttle_limit),
                _int64(request), new_requests, number_rows, plain_rows,
            )  # fmt: skip
    return _key_columns_py(keys, ids)


def _int64(column: bytearray) -> _I64:
    """A compiled loop's int64 column as an array (over its bytes, writable)."""
    return np.frombuffer(column, dtype=np.int64)


def _key_columns_py(keys: Sequence[JobKey], ids: _Ids) -> KeyColumns:
    """:func:`_key_columns` in Python: the reference (``_scan.key_facts`` does the same).

    Column by column (the keys transposed once, each column interned through a dict in C): no Python
    loop over the keys, only over the values new to a column."""
    partition_ids, reason_ids, feature_ids, request_ids = ids
    fields = list(zip(*keys, strict=True))
    partitions_, reasons_, features_, tasks_, arrays_ = fields[:5]
    partition = interned(partitions_, partition_ids)[0]
    reason = interned(reasons_, reason_ids)[0]
    feature = interned(features_, feature_ids)[0]
    request, new_requests = interned(list(zip(*fields[REQUEST:], strict=True)), request_ids, few=False)
    numbers, plain = request_columns(new_requests)
    n_keys = len(keys)
    solo = np.fromiter(map(isinstance, arrays_, repeat(tuple)), dtype=np.bool_, count=n_keys)
    throttle_id = np.full(n_keys, -1, dtype=np.int64)
    throttle_limit = np.full(n_keys, -1, dtype=np.int64)
    for i in np.flatnonzero(solo).tolist():
        array = arrays_[i]
        if array[0] is not None:
            throttle_id[i], throttle_limit[i] = array[0], array[3]
    tasks = np.array(tasks_, dtype=np.int64)
    return KeyColumns(
        partition, reason, feature, tasks, solo, throttle_id, throttle_limit, request, new_requests, numbers,
        plain,
    )  # fmt: skip


def interned(values: Sequence[Any], ids: dict[Any, int], *, few: bool = True) -> tuple[_I64, list[Any]]:
    """Each value's id in ``ids`` (new values numbered on from ``len(ids)``), and the new values in their
    order. ``few`` distinct values (partitions, reasons, constraints): looked up in C (``map``), a Python
    step only per new value; else (requests: mostly new on a first poll) each value hashed once by
    ``dict.setdefault`` (a tuple does not keep its hash)."""
    before = len(ids)
    if few:
        got = list(map(ids.get, values))
        if None in got:
            for value in dict.fromkeys(v for v, g in zip(values, got, strict=True) if g is None):
                ids[value] = len(ids)
            got = list(map(ids.__getitem__, values))
        return np.array(got, dtype=np.int64), list(islice(ids, before, None))
    if _native is not None:
        out = np.frombuffer(_native.intern(values, ids), dtype=np.int64)
    else:
        put = ids.setdefault
        out = np.array([put(value, len(ids)) for value in values], dtype=np.int64)
    return out, list(islice(ids, before, None))


class PieceIds:
    """The sizing of one context (shape, target maximum, ``MaxMemPerCPU``) by request id of
    :class:`KeyFacts`: ``ids`` the piece's id (−1: a misfit, in ``misfits``; −2: not sized yet).

    The pieces are int64 rows ``[nodes, cpus, memory, gpus]`` by id (:meth:`columns`), found by their
    bytes (``index``: a row's bytes → id; a piece beyond int64, never seen, by its tuple, kept apart) —
    no tuple per piece: a first poll of 100,000 distinct jobs makes as many pieces."""

    __slots__ = ("_big", "_columns", "_rows", "ids", "index", "misfits")

    def __init__(self) -> None:
        self.ids: _I64 = np.empty(0, dtype=np.int64)
        self.index: dict[bytes | tuple[int, ...], int] = {}
        self.misfits: dict[int, Any] = {}
        self._columns = np.empty((0, 4), dtype=np.int64)
        self._rows: list[Piece] = []
        """Rows added one by one (:meth:`add`) not yet in ``_columns``."""
        self._big: dict[int, Piece] = {}
        """The pieces beyond int64, by id (their row in ``_columns``: zeros)."""

    def __len__(self) -> int:
        return len(self.index)

    def columns(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The pieces as an int64 array ``[nodes, cpus, memory, gpus]`` by id (OverflowError: a piece
        beyond int64, never seen)."""
        self._flush()
        if self._big:
            raise OverflowError("a piece beyond int64")
        return self._columns

    def piece(self, piece_id: int) -> Piece:
        """One piece as a tuple."""
        big = self._big.get(piece_id)
        if big is not None:
            return big
        self._flush()
        nodes, cpus, memory, gpus = self._columns[piece_id].tolist()
        return (nodes, cpus, memory, gpus)

    def add(self, piece: Piece) -> int:
        """The id of one piece (a new one numbered on)."""
        try:
            row = np.array(piece, dtype=np.int64)
        except OverflowError:
            pid = self.index.get(piece)
            if pid is None:
                pid = self.index[piece] = len(self.index)
                self._big[pid] = piece
                self._rows.append((0, 0, 0, 0))
            return pid
        key = row.tobytes()
        pid = self.index.get(key)
        if pid is None:
            pid = self.index[key] = len(self.index)
            self._rows.append(piece)
        return pid

    def add_rows(self, rows: _I64) -> _I64:
        """The ids of pieces given as int64 rows ``[nodes, cpus, memory, gpus]`` (new ones numbered on, in
        the order of their first row)."""
        self._flush()
        before = len(self.index)
        keys = np.ascontiguousarray(rows, dtype=np.int64).view(_ROW).ravel().tolist()
        ids, new = interned(keys, self.index, few=False)
        if new:
            at = np.flatnonzero(ids >= before)  # new ids are numbered in the order of their first row
            first = first_seen(ids[at] - before, len(new))[0]
            self._columns = np.concatenate([self._columns, rows[at[first]]])
        return ids

    def _flush(self) -> None:
        if self._rows:
            added = np.array(self._rows, dtype=np.int64).reshape(-1, 4)
            self._columns = np.concatenate([self._columns, added])
            self._rows = []


_ROW = np.dtype((np.void, 4 * 8))
"""A piece's row as one value (its bytes)."""


class KindTable(NamedTuple):
    """One partition's kinds in Slurm's order, as columns (a large queue whose keys carry no ``who``:
    what :class:`Kind` objects hold, without an object per kind). Ids are :class:`KeyFacts`'."""

    jobs: _I64
    """Jobs (array tasks individually)."""
    elig: _I64
    """Code of its reason's class (:data:`INELIGIBLE_CODE` …)."""
    name: _I64
    fresh: np.ndarray[Any, np.dtype[np.bool_]]
    feature: _I64
    request: _I64
    throttle_id: _I64
    """Its throttled array (−1: none) and the array's ``%N``."""
    throttle_limit: _I64
    kind: _I64
    """Its number (:meth:`Queue.keys_of`)."""


def kind_tables(
    facts: KeyFacts,
    kids: np.ndarray[Any, np.dtype[np.int64]],
    wanted: Sequence[str],
    home_of: _I64,
    multiplicities: _I64,
    leads: _I64,
    priorities: _I64,
    lead_rank: Callable[[_I64], tuple[np.ndarray[Any, np.dtype[np.float64]], _I64]],
) -> tuple[dict[str, KindTable], np.ndarray[Any, np.dtype[np.int64]]]:
    """The kinds a queue makes of its keys (``kids``: their ids in ``facts``; ``home_of``: per partitions
    id of ``facts`` the index in ``wanted`` of the partition a job tries first, −1: none wanted; the
    rest: what :func:`~autoscaler.demand.queue.tally` gives for each key), as one :class:`KindTable` per
    wanted partition, merged and ordered as ``Kind`` objects are: a kind per (reason class or fresh,
    constraint, request) — per reason for an ineligible one, per key for an array keyed apart — its
    priority the highest of its keys', ordered by priority, then (kinds of one priority ≥ 0) by the first
    ``rank`` among the leads of its keys of that priority, then by its first key. Also each key's kind
    number (−1: no wanted partition)."""
    n_keys = len(kids)
    home = home_of[facts.partition[kids]]
    name, elig, feature = facts.name[kids], facts.elig[kids], facts.feature[kids]
    request, solo = facts.request[kids], facts.solo[kids]
    count = multiplicities * facts.tasks[kids]
    priority = np.where(elig == INELIGIBLE_CODE, -1, priorities)
    fresh = name == facts.name_id("None")
    index = np.arange(n_keys, dtype=np.int64)
    # what a kind merges by: (home, what, a, feature, request)
    what = np.where(
        elig == INELIGIBLE_CODE, 0, np.where(solo, 1, np.where(elig == ELIGIBLE_CODE, 2, 3))
    )  # 0 ineligible: by reason; 1 keyed apart; 2 eligible: fresh or not; 3 by reason
    a = np.where(what == 1, index, np.where(what == 2, fresh, name))
    merged = what >= 2
    feature_m = np.where(merged, feature, 0)
    request_m = np.where(merged, request, 0)
    keep = np.flatnonzero(home >= 0)
    by_merge = keep[np.lexsort((keep, request_m[keep], feature_m[keep], a[keep], what[keep], home[keep]))]
    key_kind = np.full(n_keys, -1, dtype=np.int64)
    if not by_merge.size:
        return {p: empty_table() for p in wanted}, key_kind
    change = np.zeros(len(by_merge), dtype=np.bool_)  # where a kind starts
    change[0] = True
    for column in (home, what, a, feature_m, request_m):
        c = column[by_merge]
        change[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(change)
    key_kind[by_merge] = np.cumsum(change) - 1
    first_key = by_merge[starts]  # the kind's first key (keys of one kind are in key order)
    kind_count = np.add.reduceat(count[by_merge], starts)
    kind_priority = np.maximum.reduceat(priority[by_merge], starts)
    kind_home = home[first_key]
    n_kinds = len(starts)
    # kinds by partition, priority (descending), first key; then each run of kinds that share their
    # priority (≥ 0) in their partition reordered by their leads' rank
    order = _order(kind_home, -kind_priority, first_key)
    homes, by_priority = kind_home[order], kind_priority[order]
    same = (homes[1:] == homes[:-1]) & (by_priority[1:] == by_priority[:-1]) & (by_priority[1:] >= 0)
    tied_at = np.zeros(n_kinds, dtype=np.bool_)  # positions in order
    tied_at[1:] |= same
    tied_at[:-1] |= same
    at_tied = np.flatnonzero(tied_at)
    if at_tied.size:
        tied = order[at_tied]
        shared = np.zeros(n_kinds, dtype=np.bool_)
        shared[tied] = True
        kk = np.maximum(key_kind, 0)
        ranked = np.flatnonzero((key_kind >= 0) & shared[kk] & (priority == kind_priority[kk]))
        submit, ident = lead_rank(leads[ranked])
        owner = key_kind[ranked]
        best = np.lexsort((ident, submit, owner))
        firsts = best[np.flatnonzero(np.r_[True, owner[best][1:] != owner[best][:-1]])]
        kind_submit = np.zeros(n_kinds, dtype=np.float64)
        kind_ident = np.zeros(n_kinds, dtype=np.int64)
        kind_submit[owner[firsts]] = submit[firsts]
        kind_ident[owner[firsts]] = ident[firsts]
        run = np.cumsum(~np.r_[False, same][at_tied])  # positions of one run are consecutive
        order[at_tied] = tied[_order(run, kind_submit[tied], kind_ident[tied], first_key[tied])]
    tables: dict[str, KindTable] = {}
    throttle_id, throttle_limit = facts.throttle_id[kids], facts.throttle_limit[kids]
    for h, p in enumerate(wanted):
        lo, hi = np.searchsorted(homes, [h, h + 1]).tolist()
        sel = order[lo:hi]
        at = first_key[sel]
        tables[p] = KindTable(
            jobs=kind_count[sel],
            elig=elig[at],
            name=name[at],
            fresh=fresh[at],
            feature=feature[at],
            request=request[at],
            throttle_id=throttle_id[at],
            throttle_limit=throttle_limit[at],
            kind=sel,
        )
    return tables, key_kind


def _order(*columns: np.ndarray[Any, Any]) -> _I64:
    """The order that sorts by these columns (integers, or floats: submit times), the first the most
    significant, the last unique — ``np.lexsort`` of them reversed: one int64 sort where each column's
    span in whole numbers fits, together, in 63 bits (submit times are whole seconds; a float's span
    within 2⁵³)."""
    if not len(columns[0]):
        return np.empty(0, dtype=np.int64)
    spans: list[tuple[np.ndarray[Any, Any], int, int]] = []
    for column in columns:
        low, high = column.min(), column.max()
        if column.dtype.kind == "f" and not (
            np.isfinite(low) and np.isfinite(high) and np.array_equal(column, np.floor(column))
        ):
            return np.lexsort(columns[::-1])
        width = (int(high) - int(low)).bit_length()
        if column.dtype.kind == "f" and width > 53:  # whole, but beyond a float's exact integers
            return np.lexsort(columns[::-1])
        spans.append((column, int(low), width))
    if sum(width for _, _, width in spans) > 63:
        return np.lexsort(columns[::-1])
    composite = np.zeros(len(columns[0]), dtype=np.int64)
    for column, low, width in spans:
        composite <<= width
        composite |= (column - low).astype(np.int64)
    return np.argsort(composite)


def first_seen(ids: _I64, size: int) -> tuple[_I64, _I64]:
    """Groups of equal ``ids`` (dense: each in ``[0, size)``) in the order of their first element: the
    positions of those first elements (ascending), and each element's group. Linear, no sort."""
    if not len(ids):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    place = np.arange(len(ids), dtype=np.int64)
    first = np.full(size, len(ids), dtype=np.int64)
    np.minimum.at(first, ids, place)  # per id the position of its first element
    first_of = first[ids]
    leading = np.flatnonzero(first_of == place)
    group = np.empty(size, dtype=np.int64)
    group[ids[leading]] = np.arange(len(leading), dtype=np.int64)
    return leading, group[ids]


def lead_rank(jobs: Sequence[Job], at: _I64) -> tuple[np.ndarray[Any, np.dtype[np.float64]], _I64]:
    """Submit time and job id (an array's: the array's) of the jobs at these snapshot indices (compiled
    where built: ``_scan.ranks``)."""
    if _native is not None:
        submit, ident = _native.ranks(jobs, np.ascontiguousarray(at, dtype=np.int64), _RANK_FIELDS)
        return np.frombuffer(submit, dtype=np.float64), np.frombuffer(ident, dtype=np.int64)
    return _lead_rank_py(jobs, at)


_RANK_FIELDS = (Job.__dict__["submit_time"], Job.__dict__["array_job_id"], Job.__dict__["job_id"])


def _lead_rank_py(jobs: Sequence[Job], at: _I64) -> tuple[np.ndarray[Any, np.dtype[np.float64]], _I64]:
    """:func:`lead_rank` in Python: the reference."""
    lead_jobs = [jobs[i] for i in at.tolist()]
    m = len(lead_jobs)
    submit = np.fromiter((job.submit_time or 0.0 for job in lead_jobs), dtype=np.float64, count=m)
    ident = np.fromiter((job.array_job_id or job.job_id for job in lead_jobs), dtype=np.int64, count=m)
    return submit, ident


def empty_table() -> KindTable:
    none = np.empty(0, dtype=np.int64)
    return KindTable(none, none, none, np.empty(0, dtype=np.bool_), none, none, none, none, none)
