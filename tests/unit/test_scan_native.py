"""The compiled per-record loops (``autoscaler/demand/_scan.c``) give the Python ones' answers.

``queue._scan_py``, ``tables._key_columns_py``, ``tables.interned``'s dict numbering and
``tables._lead_rank_py`` are the references; the compiled ones are compared with them on random job mixes
(every kind of key the model reads, priorities beyond Slurm's uint32 and int64, records of another type),
on keys holding what the compiled reading cannot hold (then the Python one answers), with the id dicts
already part full; and the whole model, compiled and not, gives the same demand. ``PieceIds`` (pieces
found by their bytes) against a plain dict.
"""

from __future__ import annotations

import gc
import random
import shutil
import sys
from typing import Any

import msgspec
import numpy as np
import pytest

from autoscaler.demand import ScanCache, Target, compute_demand, queue, sizing, tables
from autoscaler.demand.keys import REQUEST
from autoscaler.eligibility import Bars
from exporter.model import Job, NodeRequest
from testkit.budget import seeds
from tests.unit.test_kind_tables import SHAPE, varied_job
from tests.unit.test_scan_cache import TARGETS, next_jobs, random_job, snapshot

native: Any = queue._native
needs_native = pytest.mark.skipif(native is None, reason="built without a C compiler")


def test_it_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the Python loops are the only ones")
    assert queue._native is not None and tables._native is not None, (
        "a C compiler is here but autoscaler/demand/_scan.c was not built (make venv)"
    )


class Record(Job, frozen=True, gc=False, kw_only=True):
    """Not a :class:`Job` itself: the compiled scan reads its fields by name, not by the Job's slots."""


def jobs_of(seed: int, n: int = 300) -> list[Any]:
    """A mix of :func:`random_job`'s, with priorities beyond a uint32 and an int64 and some other
    records."""
    rng = random.Random(seed)
    out: list[Any] = []
    for i in range(1, n + 1):
        job = random_job(rng, i)
        x = rng.random()
        if x < 0.05:
            odd = rng.choice([-5, 1 << 32, (1 << 40) + 3, 1 << 70, -(1 << 70)])
            job = msgspec.structs.replace(job, priority=odd)
        elif x < 0.08:
            job = Record(**msgspec.structs.asdict(job))
        out.append(job)
    return out


def both_scans(jobs: list[Any], bars: Bars, users: bool) -> None:
    want_others: list[Any] = []
    got_others: list[Any] = []
    want_groups, want_codes = queue._scan_py(jobs, want_others, bars, users=users)
    got_groups, got_codes = queue.scan(jobs, got_others, bars, users=users)
    assert list(got_groups.items()) == list(want_groups.items())
    assert got_codes.tolist() == queue._code_array(want_codes).tolist()
    assert [id(j) for j in got_others] == [id(j) for j in want_others]


@needs_native
@pytest.mark.parametrize("seed", seeds(30))
def test_scan_groups_and_codes_as_python(seed: int) -> None:
    rng = random.Random(seed)
    jobs = jobs_of(seed)
    snap = snapshot([j for j in jobs if isinstance(j, Job)], rng, limits=seed % 2 == 0)
    both_scans(jobs, Bars.of(snap), users=seed % 3 == 0)


@needs_native
@pytest.mark.parametrize("seed", seeds(12))
def test_the_cache_keys_and_how_they_are_kept_as_python(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_scan_ids`` (the cache's path: keys numbered by the cache) compiled and not, poll after poll."""
    rng = random.Random(seed)
    jobs = [j for j in jobs_of(seed) if isinstance(j, Job)]
    bars = Bars.of(snapshot(jobs, rng, limits=seed % 2 == 0))
    fast, slow = ScanCache(), ScanCache()
    top = len(jobs)
    for _ in range(3):
        got = queue._scan_ids(jobs, bars, fast, seed % 3 == 0)
        with monkeypatch.context() as m:
            m.setattr(queue, "_native", None)
            want = queue._scan_ids(jobs, bars, slow, seed % 3 == 0)
            again = queue._scan_ids(jobs, bars, slow, seed % 3 == 0, keep_rule=False)  # keys known now
        for g, w in zip(got, want, strict=True):
            assert g.tolist() == w.tolist()
        assert [a.tolist() for a in again[:2]] == [w.tolist() for w in want[:2]] and not again[2].size
        assert fast.keys == slow.keys
        assert fast.exclusive.tolist() == slow.exclusive.tolist()
        jobs, top = next_jobs(jobs, rng, top)


def test_a_settle_that_raises_is_raised() -> None:
    if native is None:
        pytest.skip("built without a C compiler")
    job = Job(job_id=1, state="PENDING", reason="None", partitions=("a",))

    def settle(_: Any) -> str:
        raise LookupError("from settle")

    with pytest.raises(LookupError, match="from settle"):
        native.scan([job], queue._FIELDS, "PENDING", frozenset({"None"}), settle, False, [], {}, True)


@needs_native
def test_fields_that_are_not_member_descriptors_are_refused() -> None:
    with pytest.raises(TypeError):
        native.scan([], ("state",) * len(queue._FIELDS), "PENDING", frozenset(), str, False, [], {}, True)
    with pytest.raises(ValueError):
        native.scan([], queue._FIELDS[:3], "PENDING", frozenset(), str, False, [], {}, True)


@needs_native
def test_the_loops_keep_no_reference() -> None:
    """Every field read is let go: the refcounts of the records' values are what they were (values made
    for the test, none cached or interned)."""
    state, running = "".join(["PEND", "ING"]), "".join(["RUNN", "ING"])
    reason, partitions = "".join(["Prio", "rity"]), ("".join("ab"),)
    submit, array = float(10**9 + 0.5), 10**12 + 7
    users = ["".join(["user-", str(i)]) for i in range(20)]
    jobs = [
        Job(job_id=i, state=state if i % 3 else running, reason=reason, partitions=partitions,
            user=users[i % 20], features=users[(i + 1) % 20], licenses=users[(i + 2) % 20],
            submit_time=submit, array_job_id=array, min_nodes=array, node_request=None)
        for i in range(200)
    ]  # fmt: skip
    tracked = [state, running, reason, partitions, submit, array, *users]
    bars = Bars.of(snapshot(jobs, random.Random(1), limits=True))
    before: list[int] = []
    for run in range(6):  # the first run fills what the model caches (reasons classified)
        if run == 1:
            before = [sys.getrefcount(v) for v in tracked]
        queue.scan(jobs, [], bars, users=True)
        tables.KeyFacts().extend(list(queue.scan(jobs, [], bars)[0]))
        queue._scan_ids(jobs, bars, ScanCache(), False)
        tables.lead_rank(jobs, np.arange(len(jobs), dtype=np.int64))
    assert [sys.getrefcount(v) for v in tracked] == before


def keys_of(seed: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    jobs = [j for j in jobs_of(seed, 200) if isinstance(j, Job)]
    return list(queue._scan_py(jobs, [], Bars.of(snapshot(jobs, rng, limits=False)))[0])


def same_columns(keys: list[tuple[Any, ...]], warm: list[tuple[Any, ...]]) -> None:
    """The compiled and Python readings of ``keys`` through id dicts already holding ``warm``'s."""
    answers = []
    for reader in (tables._key_columns, tables._key_columns_py):
        ids: tables._Ids = ({}, {}, {}, {})
        if warm:
            tables._key_columns_py(warm, ids)
        columns = reader(keys, ids)
        answers.append(([list(d.items()) for d in ids], columns))
    (got_ids, got), (want_ids, want) = answers
    assert got_ids == want_ids
    for name, g, w in zip(tables.KeyColumns._fields, got, want, strict=True):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.tolist() == w.tolist(), name
        else:
            assert g == w, name


@needs_native
@pytest.mark.parametrize("seed", seeds(20))
def test_key_columns_as_python(seed: int) -> None:
    keys = keys_of(seed)
    same_columns(keys, [])
    same_columns(keys[len(keys) // 2 :], keys[: len(keys) // 3])  # some values known, numbered before


def with_request_value(key: tuple[Any, ...], field: str, value: Any) -> tuple[Any, ...]:
    at = REQUEST + sizing.Request._fields.index(field)
    return (*key[:at], value, *key[at + 1 :])


@needs_native
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_per_node_bytes", None),  # a None: the column read as floats, as Python's
        ("memory_bytes", 1 << 60),  # beyond 2**53 in a column with no None
        ("max_nodes", (1 << 55) + 1),  # beyond 2**53 in a nullable column with a None
        ("cpus", -3),
        ("cpus", 1 << 64),  # beyond int64: the Python reading answers
        ("cpus", 2.5),  # not an int: the Python reading answers
    ],
)
def test_key_columns_of_odd_numbers_as_python(field: str, value: Any) -> None:
    keys = keys_of(3)
    odd = [with_request_value(k, field, value) if i % 7 == 0 else k for i, k in enumerate(keys)]
    odd[1] = with_request_value(odd[1], "max_nodes", None)
    same_columns(odd, [])


@needs_native
def test_key_columns_of_what_it_cannot_hold_change_no_dict() -> None:
    keys = keys_of(4)
    keys.append(with_request_value(keys[0], "cpus", 1 << 64))
    ids: tables._Ids = ({}, {}, {}, {})
    assert native.key_facts(keys, 0, *ids, REQUEST) is None
    assert all(not d for d in ids)


@needs_native
@pytest.mark.parametrize("seed", seeds(10))
def test_intern_numbers_as_the_dict_does(seed: int) -> None:
    rng = random.Random(seed)
    values = [(rng.randrange(50), rng.choice("ab")) for _ in range(500)]
    fast: dict[Any, int] = {}
    slow: dict[Any, int] = {}
    for part in (values[:200], values[200:]):
        got = np.frombuffer(native.intern(part, fast), dtype=np.int64).tolist()
        want = [slow.setdefault(v, len(slow)) for v in part]
        assert got == want
        assert list(fast.items()) == list(slow.items())
    with pytest.raises(TypeError):
        native.intern([[1]], {})


@needs_native
@pytest.mark.parametrize("seed", seeds(10))
def test_lead_ranks_as_python(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [
        Job(job_id=i, state="PENDING", submit_time=rng.choice([None, 0.0, 12.5, 1e9 + i]),
            array_job_id=rng.choice([None, 0, 3, 1 << 40]))
        for i in range(1, 300)
    ]  # fmt: skip
    at = np.array([rng.randrange(len(jobs)) for _ in range(400)], dtype=np.int64)
    got = tables.lead_rank(jobs, at)
    want = tables._lead_rank_py(jobs, at)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    with pytest.raises(IndexError):
        tables.lead_rank(jobs, np.array([len(jobs)], dtype=np.int64))


@pytest.mark.parametrize("seed", seeds(10))
def test_piece_ids_number_pieces_as_a_dict(seed: int) -> None:
    rng = random.Random(seed)
    memo = tables.PieceIds()
    ref: dict[tuple[int, ...], int] = {}
    for _ in range(30):
        if rng.random() < 0.5:
            piece = (rng.randrange(1, 3), rng.randrange(1, 4), rng.choice([0, 1 << 40, 1 << 70]), 0)
            assert memo.add(piece) == ref.setdefault(piece, len(ref))
        else:
            rows = np.array(
                [(rng.randrange(1, 3), rng.randrange(1, 4), rng.choice([0, 1 << 40]), 0) for _ in range(20)],
                dtype=np.int64,
            )
            got = memo.add_rows(rows).tolist()
            assert got == [ref.setdefault(tuple(r), len(ref)) for r in rows.tolist()]
    assert len(memo) == len(ref)
    assert [memo.piece(i) for i in range(len(ref))] == list(ref)
    if any(p[2] >= 1 << 63 for p in ref):
        with pytest.raises(OverflowError):
            memo.columns()
    else:
        assert [tuple(r) for r in memo.columns().tolist()] == list(ref)


@pytest.mark.parametrize("seed", seeds(8))
def test_the_model_gives_the_same_demand_compiled_or_not(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole model poll after poll, with and without the cache: the compiled loops or the Python
    ones (where the compiled ones are not built, both sides run Python: still an answer) — on even seeds
    kinds as columns (no key carries ``who``: no limits, no ``--exclusive=user``), on odd ones as objects."""
    rng = random.Random(seed)
    columns = seed % 2 == 0
    monkeypatch.setattr(queue, "ORDER_JOBS", 0)  # kind by kind from the first pending record
    jobs = [varied_job(rng, i) for i in range(1, 1500)]
    if columns:
        jobs = [msgspec.structs.replace(j, node_request=None) for j in jobs]
    top = len(jobs)
    fast, slow = ScanCache(), ScanCache()
    wanted = [*TARGETS, Target("c", "c", shape=SHAPE)]
    for _ in range(3):
        snap = snapshot(jobs, rng, limits=not columns)
        assert (queue.Queue(snap, ["a", "b", "c"]).tables is not None) is columns
        got = compute_demand(snap, wanted), compute_demand(snap, wanted, fast)
        with monkeypatch.context() as m:
            m.setattr(queue, "_native", None)
            m.setattr(tables, "_native", None)
            want = compute_demand(snap, wanted), compute_demand(snap, wanted, slow)
        assert got == want
        jobs, top = next_jobs(jobs, rng, top)
        if columns:
            jobs = [msgspec.structs.replace(j, node_request=None) for j in jobs]


@needs_native
def test_plain_keys_and_requests_are_not_tracked_by_the_collector() -> None:
    """A key or request of plain values is made untracked (never in a cycle: the collector need not walk
    the 100,000s a cache keeps); one holding a container the collector tracks (a ``NodeRequest``) stays
    tracked, as CPython's own rule for tuples keeps it."""
    plain = Job(job_id=1, state="PENDING", reason="Priority", partitions=("".join("ab"),), cpus=3)
    laid = msgspec.structs.replace(plain, job_id=2, node_request=NodeRequest(exclusive_to="user"))
    array = msgspec.structs.replace(
        plain, job_id=3, array_job_id=3, array_max_tasks=2, array_task_string="1-4"
    )  # keyed apart: its array a tuple in the key
    bars = Bars.of(snapshot([plain, laid, array], random.Random(1), limits=False))
    keys = list(queue.scan([plain, laid, array], [], bars, users=True)[0])
    assert [gc.is_tracked(k) for k in keys] == [False, True, False]
    facts = tables.KeyFacts()
    facts.extend(list(queue.scan([plain, laid, array], [], bars)[0]))
    assert [gc.is_tracked(r) for r in facts.requests] == [False, True]


@needs_native
def test_key_facts_from_a_start_read_the_keys_after_it() -> None:
    keys = keys_of(5)
    got = native.key_facts(keys, 40, {}, {}, {}, {}, REQUEST)
    want = native.key_facts(keys[40:], 0, {}, {}, {}, {}, REQUEST)
    assert [bytes(c) if isinstance(c, bytearray) else c for c in got] == [
        bytes(c) if isinstance(c, bytearray) else c for c in want
    ]
    with pytest.raises(ValueError):
        native.key_facts(keys, len(keys) + 1, {}, {}, {}, {}, REQUEST)


@needs_native
def test_a_list_changed_by_python_code_during_a_loop_is_read_as_it_was() -> None:
    """The loops read a copy of a list they are given: code they call (``settle``) that empties it
    changes nothing read, and crashes nothing."""
    jobs = [Job(job_id=i, state="PENDING", reason="None", partitions=("a",), cpus=i) for i in range(1, 50)]

    def settle(job: Job) -> str:
        jobs.clear()
        return "Resources"

    groups: dict[Any, int] = {}
    unsettled = frozenset({"None"})
    numbers = native.scan(jobs, queue._FIELDS, "PENDING", unsettled, settle, False, [], groups, True)[0]
    assert len(groups) == 49 and np.frombuffer(numbers, dtype=np.int64).tolist() == list(range(1, 50))
    assert {key[1] for key in groups} == {"Resources"}
