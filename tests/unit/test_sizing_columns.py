"""``size_columns`` (many requests at once, numpy) against ``size`` (one request): the same piece for every
row it answers, and every row ``size`` finds a misfit left to ``size``."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.demand.sizing import NO_RULES, Request, SizeRules, request_columns, size, size_columns
from autoscaler.demand.types import Misfit, NodeShape
from exporter.model import MIB, NodeRequest
from testkit.budget import examples, seeds

GIB = 1024 * MIB

counts = st.integers(0, 70)
maybe_bytes = st.none() | st.sampled_from([0, 1, 500 * MIB, 2 * GIB, 7 * GIB, 64 * GIB, 300 * GIB])
requests = st.builds(
    Request,
    min_nodes=st.integers(0, 5),
    max_nodes=st.none() | st.integers(0, 6),
    cpus=counts,
    tasks=counts,
    cpus_per_task=st.integers(0, 40),
    memory_per_node_bytes=maybe_bytes,
    memory_per_cpu_bytes=maybe_bytes,
    whole_node_memory=st.booleans(),
    memory_bytes=st.sampled_from([0, 1, 3 * GIB, 100 * GIB, 1000 * GIB]),
    gpus_per_node=st.integers(0, 9),
    gpus=st.integers(0, 20),
    exclusive=st.booleans(),
    spread=st.booleans(),
    tasks_exact=st.booleans(),
    cpus_exact=st.booleans(),
    node_range=st.booleans(),
    node_request=st.none(),
)
shapes = st.builds(
    NodeShape,
    cpus=st.sampled_from([1, 8, 32, 64]),
    memory_bytes=st.sampled_from([0, 16 * GIB, 256 * GIB]),
    gpus=st.sampled_from([0, 1, 4, 8]),
)
rules = st.builds(SizeRules, largest_ranges=st.booleans(), cpus_per_gpu=st.sampled_from([0, 4]))


@settings(max_examples=examples(300))
@given(
    batch=st.lists(requests, min_size=1, max_size=40),
    shape=shapes,
    max_nodes=st.none() | st.integers(0, 8),
    rule=st.sampled_from([NO_RULES]) | rules,
)
def test_columns_size_as_size_does(
    batch: list[Request], shape: NodeShape, max_nodes: int | None, rule: SizeRules
) -> None:
    numbers, plain = request_columns(batch)
    assert plain.all()
    pieces, ok = size_columns(numbers, shape, max_nodes, rule)
    for request, piece, answered in zip(batch, pieces.tolist(), ok.tolist(), strict=True):
        one = size(request, shape, max_nodes, None, rule)
        if isinstance(one, Misfit):
            assert not answered, (request, one)
        else:
            assert answered, (request, one)
            assert tuple(piece) == one, request


@pytest.mark.parametrize("seed", seeds(3))
def test_many_requests_at_once(seed: int) -> None:
    """20,000 seeded requests over every field's edges, per shape, target maximum and rules: one call."""
    rng = random.Random(seed)
    pick = rng.choice
    batch = [
        Request(
            min_nodes=pick([0, 1, 1, 2, 4]),
            max_nodes=pick([None, None, 0, 1, 2, 3, 8, 40]),
            cpus=rng.randint(0, 80),
            tasks=rng.randint(0, 80),
            cpus_per_task=pick([0, 1, 1, 2, 3, 7, 16, 33]),
            memory_per_node_bytes=pick([None, None, 0, 1, 3 * GIB, 17 * GIB]),
            memory_per_cpu_bytes=pick([None, 0, 1, 2 * GIB, 3 * GIB, 7 * GIB, 9 * GIB, 20 * GIB]),
            whole_node_memory=rng.random() < 0.1,
            memory_bytes=pick([0, 0, 5 * GIB, 40 * GIB]),
            gpus_per_node=pick([0, 0, 0, 1, 2, 5]),
            gpus=pick([0, 0, 1, 3, 6, 13]),
            exclusive=rng.random() < 0.1,
            spread=rng.random() < 0.1,
            tasks_exact=rng.random() < 0.5,
            cpus_exact=rng.random() < 0.5,
            node_range=rng.random() < 0.3,
            node_request=None,
        )
        for _ in range(20_000)
    ]
    numbers, plain = request_columns(batch)
    assert plain.all()
    answered = 0
    for shape in (NodeShape(8, 16 * GIB, 4), NodeShape(64, 250 * GIB), NodeShape(6, 20 * GIB, 1)):
        for max_nodes in (None, 4):
            rule = SizeRules(largest_ranges=max_nodes is None, cpus_per_gpu=4 if shape.gpus == 4 else 0)
            pieces, ok = size_columns(numbers, shape, max_nodes, rule)
            for request, piece, good in zip(batch, pieces.tolist(), ok.tolist(), strict=True):
                one = size(request, shape, max_nodes, None, rule)
                assert good is not isinstance(one, Misfit), (request, one)
                if good:
                    assert tuple(piece) == one, (request, shape, max_nodes, rule)
            answered += int(ok.sum())
    assert answered > 10_000  # pieces, not only misfits


def test_rows_left_to_size() -> None:
    """A layout request, a None where none belongs, a count beyond int64 or a negative one: not plain."""
    base = Request(1, None, 2, 2, 1, None, None, False, 0, 0, 0, False, False, False, False, False, None)
    odd = [
        base,
        base._replace(node_request=NodeRequest(threads_per_core=1)),
        base._replace(cpus=None),  # type: ignore[arg-type]
        base._replace(memory_bytes=1 << 70),
        base._replace(tasks=-3),
        base._replace(max_nodes=None, memory_per_cpu_bytes=2 * GIB),
    ]
    numbers, plain = request_columns(odd)
    assert plain.tolist() == [True, False, False, False, False, True]
    assert numbers[5].tolist()[1] == -1 and numbers[5].tolist()[6] == 2 * GIB
    pieces, ok = size_columns(numbers[[0, 5]], NodeShape(8, 16 * GIB), None)
    assert ok.all()
    assert pieces.tolist() == [list(size(odd[0], NodeShape(8, 16 * GIB), None)), [1, 2, 4 * GIB, 0]]


def test_huge_counts_left_to_size() -> None:
    """Counts whose products could leave int64 are not answered (``size`` has Python's integers)."""
    base = Request(1, None, 2, 2, 1, None, 1 << 41, False, 0, 0, 0, False, False, False, False, False, None)
    numbers, plain = request_columns(
        [base._replace(cpus=1 << 40), base._replace(tasks=1 << 33, cpus_per_task=1 << 31)]
    )
    assert plain.all()
    _, ok = size_columns(numbers, NodeShape(64, 1 << 60), None)
    assert not ok.any()


def test_refuses_cores_of_several_threads() -> None:
    numbers, _ = request_columns(
        [Request(1, None, 2, 2, 1, None, None, False, 0, 0, 0, False, False, False, False, False, None)]
    )
    with pytest.raises(ValueError, match="one thread per core"):
        size_columns(numbers, NodeShape(8, GIB, threads_per_core=2), None)
    assert np.array_equal(numbers[0, :3], [1, -1, 2])
