"""Slurm's text mini-languages (exporter.slurmtext)."""

from __future__ import annotations

import pytest

from exporter import slurmtext as st

MIB = 1_048_576
GIB = 1024 * MIB


# ------------------------------------------------------------------------------------ host lists


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("c1", ["c1"]),
        ("c[1-3,5],g1", ["c1", "c2", "c3", "c5", "g1"]),
        ("n[01-03]", ["n01", "n02", "n03"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a[1-2]-ib", ["a1-ib", "a2-ib"]),
        ("p[1-2],c[2-3]", ["p1", "p2", "c2", "c3"]),
        ("", []),
        ("(null)", []),
        ("N/A", []),
    ],
)
def test_hostlist_expand_and_count(expr: str, names: list[str]) -> None:
    assert st.hostlist_expand(expr) == names
    assert st.hostlist_count(expr) == len(names)


def test_hostlist_count_does_not_expand_huge_ranges() -> None:
    assert st.hostlist_count("n[0-999999],x[1-2]") == 1_000_002
    with pytest.raises(ValueError, match="more than"):
        st.hostlist_expand("n[0-999999]", limit=1000)


@pytest.mark.parametrize("bad", ["c[1-", "c[3-1]", "c[a-b]", "c1]"])
def test_hostlist_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        st.hostlist_count(bad)
    with pytest.raises(ValueError):
        st.hostlist_expand(bad)


# -------------------------------------------------------------------------------------------- TRES


def test_parse_tres_memory_in_bytes() -> None:
    assert st.parse_tres("cpu=8,mem=16000M,node=1,billing=8,gres/gpu=2") == {
        "cpu": 8,
        "mem": 16000 * MIB,
        "node": 1,
        "billing": 8,
        "gres/gpu": 2,
    }


@pytest.mark.parametrize(
    ("text", "mem"),
    [
        ("mem=16000M", 16000 * MIB),
        ("mem=2G", 2 * GIB),
        ("mem=1T", 1024 * GIB),
        ("mem=187.50G", int(187.5 * GIB)),  # seen in a real partition TRES (12 x 16000M)
        ("mem=512K", 512 * 1024),
        ("mem=100", 100 * MIB),  # no suffix: MiB
    ],
)
def test_parse_tres_memory_units(text: str, mem: int) -> None:
    assert st.parse_tres(text)["mem"] == mem


def test_parse_tres_tolerates_junk() -> None:
    assert st.parse_tres("") == {}
    assert st.parse_tres("cpu=2,,bogus,x=,=3,license/foo=abc,gres/gpu:a100=4") == {
        "cpu": 2,
        "gres/gpu:a100": 4,
    }


def test_tres_gpus_prefers_untyped_total() -> None:
    assert st.tres_gpus(st.parse_tres("cpu=1,gres/gpu=4,gres/gpu:a100=4")) == 4
    assert st.tres_gpus(st.parse_tres("cpu=1,gres/gpu:a100=2,gres/gpu:v100=1")) == 3
    assert st.tres_gpus(st.parse_tres("cpu=1,mem=1G")) == 0


# -------------------------------------------------------------------------------------------- GRES


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gpu:2", 2),
        ("gpu:tesla:2(S:0-1)", 2),
        ("gres/gpu:2", 2),
        ("gres:gpu:2", 2),
        ("gres/gpu=3", 3),
        ("gpu:2(IDX:0-1)", 2),
        ("gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:1)", 3),
        ("gpu:a100:2(IDX:0-1),mps:100", 2),
        ("gres/gpu:a100:4,gres/shard:8", 4),
        ("gpu", 1),
        ("gpu:tesla", 1),
        ("gpu:0", 0),
        ("gpu:tesla:0(IDX:N/A)", 0),
        ("mps:100", 0),
        ("", 0),
        ("N/A", 0),
        ("(null)", 0),
    ],
)
def test_gres_gpus(text: str, gpus: int) -> None:
    assert st.gres_gpus(text) == gpus


# ------------------------------------------------------------------------------------- array tasks


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1-100%5", ("1-100", 100, 5)),
        ("3-20%2", ("3-20", 18, 2)),
        ("4-49%4", ("4-49", 46, 4)),
        ("3,5,7-9", ("3,5,7-9", 5, None)),
        ("1-20:2", ("1-20:2", 10, None)),
        ("0-9:3%2", ("0-9:3", 4, 2)),
        ("7", ("7", 1, None)),
        ("", ("", 0, None)),
        ("junk", ("junk", 0, None)),
    ],
)
def test_parse_array_tasks(text: str, expected: tuple[str, int, int | None]) -> None:
    assert st.parse_array_tasks(text) == expected


# ------------------------------------------------------------------------------------------ states


@pytest.mark.parametrize(
    ("states", "flags", "alloc", "expected"),
    [
        (["IDLE"], (), 0, ("IDLE", ())),
        (["IDLE", "DRAIN"], (), 0, ("IDLE", ("DRAIN",))),
        (["MIXED", "DRAIN"], (), 4, ("MIXED", ("DRAIN", "DRAINING"))),
        (["ALLOCATED", "DRAIN"], (), 8, ("ALLOCATED", ("DRAIN", "DRAINING"))),
        (["IDLE", "DRAIN", "COMPLETING"], (), 0, ("IDLE", ("DRAIN", "DRAINING", "COMPLETING"))),
        (["MIXED", "PLANNED"], (), 4, ("MIXED", ("PLANNED",))),
        (["IDLE", "CLOUD", "POWERED_DOWN"], (), 0, ("IDLE", ("CLOUD", "POWERED_DOWN"))),
        (["DOWN", "NOT_RESPONDING"], (), 0, ("DOWN", ("NOT_RESPONDING",))),
        ([], (), 0, ("UNKNOWN", ())),
        (["DRAIN"], (), 0, ("UNKNOWN", ("DRAIN",))),
        # v0.0.38: a lower-case base string plus a separate flag list
        ("allocated", ["DRAIN"], 8, ("ALLOCATED", ("DRAIN", "DRAINING"))),
        ("idle", [], 0, ("IDLE", ())),
        ("mixed", ["PLANNED"], 2, ("MIXED", ("PLANNED",))),
        ("idle+drain", [], 0, ("IDLE", ("DRAIN",))),
    ],
)
def test_node_state(
    states: list[str] | str, flags: list[str], alloc: int, expected: tuple[str, tuple[str, ...]]
) -> None:
    assert st.node_state(states, flags, alloc_cpus=alloc) == expected


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["PENDING"], ("PENDING", ())),
        (["RUNNING", "CONFIGURING", "POWER_UP_NODE"], ("RUNNING", ("CONFIGURING", "POWER_UP_NODE"))),
        (["COMPLETED", "COMPLETING"], ("COMPLETED", ("COMPLETING",))),
        (["PENDING", "REQUEUED"], ("PENDING", ("REQUEUED",))),
        ("RUNNING", ("RUNNING", ())),
        ("timeout", ("TIMEOUT", ())),
        (["SOMETHING_NEW"], ("SOMETHING_NEW", ())),
        # v0.0.38 prints the flag instead of the base: the same (base, flags) as v0.0.40+
        ("CONFIGURING", ("RUNNING", ("CONFIGURING",))),
        ("COMPLETING", ("COMPLETED", ("COMPLETING",))),
        ("REQUEUE_HOLD", ("PENDING", ("REQUEUE_HOLD",))),
    ],
)
def test_job_state(states: list[str] | str, expected: tuple[str, tuple[str, ...]]) -> None:
    assert st.job_state(states) == expected


def test_job_state_empty_is_an_error() -> None:
    with pytest.raises(ValueError):
        st.job_state([])


def test_split_list() -> None:
    assert st.split_list("a,b, c") == ("a", "b", "c")
    assert st.split_list(["x", "y"]) == ("x", "y")
    assert st.split_list("") == ()
    assert st.split_list(None) == ()
