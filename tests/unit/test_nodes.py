"""Room a node offers new jobs (``autoscaler.nodes``): one rule for busy nodes' free room (the demand
model) and for nodes a ``--nodelist`` names (the eligibility bars)."""

from __future__ import annotations

import pytest

from autoscaler.demand.select import free_room
from autoscaler.eligibility import Bars
from autoscaler.nodes import POWERING_DOWN_FLAGS, UNUSABLE_NODE_FLAGS, UNUSABLE_NODE_STATES, free_cpus
from exporter.model import MIB, Node


def node(**kw: object) -> Node:
    base: dict[str, object] = {
        "name": "n1",
        "state": "MIXED",
        "cpus": 8,
        "alloc_cpus": 3,
        "memory_bytes": 16000 * MIB,
        "partitions": ("p",),
    }
    return Node(**(base | kw))  # type: ignore[arg-type]


def bars(n: Node) -> Bars:
    return Bars(now=0.0, partitions={}, licenses={}, reservations={}, nodes=(n,))


def test_free_cpus_of_a_usable_node() -> None:
    assert free_cpus(node()) == 5
    assert free_cpus(node(effective_cpus=6)) == 3  # CPUs kept for the system (CoreSpecCount) are not room
    assert free_cpus(node(), max_cpus=4) == 1  # MaxCPUsPerNode counts every allocated CPU
    assert free_cpus(node(alloc_cpus=8)) == 0
    assert free_cpus(node(alloc_cpus=9)) == 0  # never negative


@pytest.mark.parametrize("state", sorted(UNUSABLE_NODE_STATES))
def test_no_room_in_a_broken_state(state: str) -> None:
    assert free_cpus(node(state=state)) == 0
    assert not list(free_room([node(state=state)]).runs())


@pytest.mark.parametrize("flag", sorted(UNUSABLE_NODE_FLAGS))
def test_no_room_with_a_flag_that_keeps_jobs_off(flag: str) -> None:
    n = node(flags=(flag,))
    assert free_cpus(n) == 0
    assert not list(free_room([n]).runs())
    assert bars(n).free_cpus == {"n1": 0}  # a job naming it waits


@pytest.mark.parametrize("flag", sorted(POWERING_DOWN_FLAGS))
def test_power_saving_takes_busy_room_away_but_a_named_node_is_resumed(flag: str) -> None:
    n = node(flags=(flag,))
    assert not list(free_room([n]).runs())  # pending jobs do not start in its room
    assert free_cpus(n) == 5 and bars(n).free_cpus == {"n1": 5}  # a job naming it has it resumed


def test_free_room_keeps_memory_and_gpus() -> None:
    n = node(alloc_memory_bytes=4000 * MIB, gpus=4, gpus_used=1)
    assert [list(r) for r in free_room([n, n]).runs()] == [[5, 12000 * MIB, 3, 2]]
