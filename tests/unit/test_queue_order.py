"""``queue._by_lead`` (vectorised) orders kinds as sorting by priority, then by their leads' rank does."""

from __future__ import annotations

import random
from collections.abc import Sequence
from operator import attrgetter

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.demand.queue import Kind, _by_lead
from autoscaler.reasons import Eligibility
from exporter.model import Job
from testkit.budget import examples


def reference(kinds: list[Kind], jobs: Sequence[Job]) -> list[Kind]:
    """The rule in plain Python: priority descending (stable), kinds of one priority ≥ 0 by ``Kind.rank``."""
    kinds = sorted(kinds, key=attrgetter("priority"), reverse=True)
    out: list[Kind] = []
    i = 0
    while i < len(kinds):
        j = i
        while j < len(kinds) and kinds[j].priority == kinds[i].priority:
            j += 1
        group = kinds[i:j]
        out += sorted(group, key=lambda k: k.rank(jobs)) if kinds[i].priority >= 0 else group
        i = j
    return out


def make(rng: random.Random, n_kinds: int) -> tuple[list[Kind], list[Job]]:
    jobs = [
        Job(
            job_id=i + 1,
            state="PENDING",
            submit_time=rng.choice([None, 0.0, 1000.0, 1000.5, 2000.0 + rng.randint(0, 3)]),
            array_job_id=rng.choice([None, None, rng.randint(1, 50)]),
        )
        for i in range(rng.randint(1, 60))
    ]
    priorities = [-1] + [rng.randint(0, 6) for _ in range(4)]
    kinds: list[Kind] = []
    for k in range(n_kinds):
        key = (("p",), "Resources", "", 1, None, None)
        kind = Kind(
            key, None, "Resources", Eligibility.ELIGIBLE, 1, rng.choice(priorities), rng.randrange(len(jobs))
        )
        for _ in range(rng.choice([0, 0, 0, 1, 2])):  # merged keys: ties of the kind's priority, or not
            kind.add(
                key,
                1,
                rng.choice([kind.priority, kind.priority - 1, kind.priority + 1]),
                rng.randrange(len(jobs)),
            )
        kind.name = f"k{k}"  # told apart in a failure
        kinds.append(kind)
    return kinds, jobs


def test_the_same_order_as_sorting_by_rank() -> None:
    rng = random.Random(25)
    for case in range(600):
        kinds, jobs = make(rng, rng.randint(0, 40))
        got = [k.name for k in _by_lead(kinds, jobs)]
        assert got == [k.name for k in reference(kinds, jobs)], case


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 80))
def test_the_same_order_on_any_mix(seed: int, n_kinds: int) -> None:
    kinds, jobs = make(random.Random(seed), n_kinds)
    assert _by_lead(kinds, jobs) == reference(kinds, jobs)
