"""The compiled bounded best fit (``autoscaler/demand/_bestfit.c``) gives the Python one's answer.

``packing._best_fit_py`` is the reference; the compiled one is compared with it on random cases (one-node
and multi-node pieces, GPUs, memory, into existing room or new bins, rooms of no CPU or no bins) and on a
queue of all-different shapes like the benchmark's ``distinct``; numbers it cannot hold go to Python.
"""

from __future__ import annotations

import random
import shutil
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.demand import packing
from autoscaler.demand.packing import Bins, Piece, pack
from testkit.budget import examples

native: Any = packing._native
needs_native = pytest.mark.skipif(native is None, reason="built without a C compiler")

Order = list[tuple[Piece, int]]
Runs = list[list[int]]
Cap = tuple[int, int, int]


def test_it_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the Python best fit is the only one")
    assert packing.NATIVE, "a C compiler is here but autoscaler/demand/_bestfit.c was not built (make venv)"


def both(order: Order, runs: Runs, cap: Cap, open_new: bool) -> tuple[Any, Any]:
    want = packing._best_fit_py(order, [list(r) for r in runs], cap, open_new=open_new)
    got = native.best_fit(order, [list(r) for r in runs], cap, open_new)
    return got, want


def random_case(rng: random.Random, runs_at_most: int) -> tuple[Order, Runs, Cap, bool]:
    cap = (rng.choice([4, 8, 16, 64, 128]), rng.choice([16_000, 64_000, 256_000]), rng.choice([0, 0, 4, 8]))
    shapes = rng.randint(1, 12)  # few shapes: rooms merge and come back; many: all different
    menu = [
        (
            rng.choice([1, 1, 1, 2, 3, 5]),
            rng.randint(1, cap[0]),
            rng.choice([0, rng.randint(1, cap[1])]),
            rng.randint(0, cap[2]) if cap[2] and rng.random() < 0.5 else 0,
        )
        for _ in range(shapes if rng.random() < 0.5 else runs_at_most)
    ]
    order = [(rng.choice(menu), rng.randint(1, 30)) for _ in range(rng.randint(1, runs_at_most))]
    runs = [
        [rng.randint(-2, cap[0]), rng.randint(-5, cap[1]), rng.randint(0, cap[2]), rng.randint(0, 6)]
        for _ in range(rng.randint(0, runs_at_most // 2))
    ]
    return order, runs, cap, rng.random() < 0.5


@needs_native
def test_the_same_answer_on_random_cases() -> None:
    rng = random.Random(25)
    for case in range(examples(1500)):
        order, runs, cap, open_new = random_case(rng, 80 if case % 10 else 600)
        got, want = both(order, runs, cap, open_new)
        assert got == want, (case, order, runs, cap, open_new)


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(
    cap=st.tuples(st.integers(1, 16), st.integers(0, 64), st.integers(0, 4)),
    order=st.lists(
        st.tuples(
            st.tuples(st.integers(1, 4), st.integers(1, 16), st.integers(0, 64), st.integers(0, 4)),
            st.integers(0, 9),
        ),
        max_size=25,
    ),
    runs=st.lists(st.lists(st.integers(-3, 64), min_size=4, max_size=4), max_size=12),
    open_new=st.booleans(),
)
def test_the_same_answer_on_any_small_case(cap: Cap, order: Order, runs: Runs, open_new: bool) -> None:
    got, want = both(order, runs, cap, open_new)
    assert got == want


@needs_native
def test_the_same_answer_on_all_different_shapes() -> None:
    """Like the benchmark's ``distinct``: 20,000 jobs of their own CPUs and memory, into busy nodes' room
    then onto new nodes, and a third of them spanning 2–4 nodes."""
    rng = random.Random(7)
    cap = (64, 256_000 * 2**20, 0)
    mems = rng.sample(range(100, 250_000), 20_000)
    for multi in (False, True):
        order: Order = [
            (
                (
                    rng.randint(2, 4) if multi and rng.random() < 1 / 3 else 1,
                    rng.randint(1, 64),
                    m * 2**20,
                    0,
                ),
                1,
            )
            for m in mems
        ]
        room = [[rng.randint(1, 64), rng.randint(1, 256_000) * 2**20, 0, 1] for _ in range(3000)]
        got, want = both(order[:4000], room, cap, False)
        assert got == want and 0 < sum(got[1]) < 4000
        got, want = both(order, [], cap, True)
        assert got == want and got[0] > 1000


def test_numbers_it_cannot_hold_go_to_python() -> None:
    order: Order = [((1, 2, 2**63, 0), 3), ((1, 1, 1, 0), 2)]
    cap = (8, 2**64, 0)
    assert packing._best_fit(order, iter([[4, 2**64, 0, 1]]), cap, open_new=True) == packing._best_fit_py(
        order, [[4, 2**64, 0, 1]], cap, open_new=True
    )
    wide = [[100_000, 10, 0, 2]]  # a room of more free CPUs than the compiled index holds
    assert packing._best_fit([((1, 3, 1, 0), 5)], wide, (200_000, 10, 0), open_new=False) == (0, [0])
    if native is not None:
        with pytest.raises(OverflowError):
            native.best_fit(order, [], cap, True)
        with pytest.raises(OverflowError):
            native.best_fit([((2**31, 1, 0, 0), 2)], [], (8, 0, 0), True)  # more pieces than it counts


@needs_native
def test_bad_input_is_an_error_not_a_crash() -> None:
    with pytest.raises(TypeError):
        native.best_fit([(1, 2)], [], (8, 0, 0), True)
    with pytest.raises(TypeError):
        native.best_fit([((1, 1, 0, 0), 1)], [[1, 2, 3]], (8, 0, 0), True)
    with pytest.raises(TypeError):
        native.best_fit([((1, 1, 0, 0), "1")], [], (8, 0, 0), True)
    with pytest.raises(TypeError):
        native.best_fit([], [], [8, 0, 0], True)
    with pytest.raises(OverflowError):
        native.best_fit([((1, 0, 0, 0), 1)], [], (8, 0, 0), True)  # a piece of no CPU


@needs_native
def test_pack_on_its_bounded_path_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    cases = [random_case(rng, 200) for _ in range(40)]
    got = [pack(o, Bins([list(r) for r in b]), c, open_new=n, exact=False) for o, b, c, n in cases]
    monkeypatch.setattr(packing, "_native", None)
    want = [pack(o, Bins([list(r) for r in b]), c, open_new=n, exact=False) for o, b, c, n in cases]
    assert got == want


@needs_native
def test_columns_give_what_tuples_give() -> None:
    rng = random.Random(11)
    for case in range(400):
        order, runs, cap, open_new = random_case(rng, 120)
        columns = [np.array([piece[i] for piece, _ in order], dtype=np.int64) for i in range(4)]
        jobs = np.array([k for _, k in order], dtype=np.int64)
        got = native.best_fit_columns(*columns, jobs, [list(r) for r in runs], cap, open_new)
        assert got == native.best_fit(order, [list(r) for r in runs], cap, open_new), case


@needs_native
def test_columns_of_another_type_are_an_error() -> None:
    one = np.ones(3, dtype=np.int64)
    with pytest.raises(TypeError):
        native.best_fit_columns(one.astype(np.int32), one, one, one, one, [], (8, 0, 0), True)
    with pytest.raises(ValueError):
        native.best_fit_columns(one, one, one, one, one[:2], [], (8, 0, 0), True)
    with pytest.raises(OverflowError):  # a piece of no CPU
        native.best_fit_columns(one, one * 0, one, one, one, [], (8, 0, 0), True)


def test_pack_columns_is_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    cases = [random_case(rng, 150) for _ in range(60)]
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(packing, "_native", None)
        for order, runs, cap, open_new in cases:
            rows = np.array([piece for piece, _ in order], dtype=np.int64).reshape(-1, 4)
            jobs = np.array([k for _, k in order], dtype=np.int64)
            for exact in (True, False):
                bins = Bins([list(r) for r in runs])
                got = packing.pack_columns(rows, jobs, bins, cap, open_new=open_new, exact=exact)
                assert got == pack(order, Bins([list(r) for r in runs]), cap, open_new=open_new, exact=exact)
