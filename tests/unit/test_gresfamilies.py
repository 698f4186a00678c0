"""Generic resources by name and type (exporter.slurmtext.gres_by_type, exporter.gresfamilies)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.gresfamilies import gres_families
from exporter.model import Node, Snapshot
from exporter.slurmtext import gres_by_type, gres_gpus
from testkit.tools import registry_of


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("gpu:a100:2(S:0-1)", {("gpu", "a100"): 2}),
        ("gpu:2", {("gpu", ""): 2}),
        ("gpu:1g.5gb:7,gpu:2g.10gb:3", {("gpu", "1g.5gb"): 7, ("gpu", "2g.10gb"): 3}),
        ("gpu:(null):0(IDX:N/A)", {("gpu", ""): 0}),
        (
            "gpu:a100:1(IDX:0),gpu:v100:0(IDX:N/A),mps:100",
            {("gpu", "a100"): 1, ("gpu", "v100"): 0, ("mps", ""): 100},
        ),
        ("gres/gpu:h100=4", {("gpu", "h100"): 4}),
        ("shard:8(S:0)", {("shard", ""): 8}),
        ("mps:4K", {("mps", ""): 4096}),
        ("gpu", {("gpu", ""): 1}),
        ("gpu:tesla", {("gpu", "tesla"): 1}),
        ("(null)", {}),
        ("", {}),
    ],
)
def test_gres_strings_by_name_and_type(text: str, counts: dict[tuple[str, str], int]) -> None:
    assert gres_by_type(text) == counts


_types = st.sampled_from(["", "a100", "1g.5gb", "h100"])
_entries = st.lists(
    st.tuples(st.sampled_from(["gpu", "mps", "shard"]), _types, st.integers(0, 64)), max_size=4
)


@given(_entries)
def test_the_gpus_by_type_add_up_to_the_gpu_count(entries: list[tuple[str, str, int]]) -> None:
    text = ",".join(f"{n}:{t}:{c}(IDX:0)" if t else f"{n}:{c}" for n, t, c in entries)
    by_type = gres_by_type(text)
    assert sum(c for (name, _), c in by_type.items() if name == "gpu") == gres_gpus(text)


SNAP = Snapshot(
    taken_at=0.0,
    api_version="v0.0.45",
    nodes=(
        Node(
            name="g1",
            state="MIXED",
            partitions=("gpu", "all"),
            gres="gpu:a100:4(S:0-1)",
            gres_used="gpu:a100:1(IDX:0)",
        ),
        Node(
            name="g2",
            state="MIXED",
            partitions=("gpu",),
            gres="gpu:1g.5gb:7,gpu:a100:1",
            gres_used="gpu:1g.5gb:2(IDX:0-1),gpu:a100:0(IDX:N/A)",
        ),
        Node(name="c1", state="IDLE", partitions=("cpu", "all")),
    ),
)


def test_gres_per_node_and_partition_by_type() -> None:
    reg = registry_of(gres_families(SNAP))
    assert reg.get_sample_value("slurm_node_gres", {"node": "g1", "name": "gpu", "type": "a100"}) == 4
    assert reg.get_sample_value("slurm_node_gres_used", {"node": "g2", "name": "gpu", "type": "1g.5gb"}) == 2
    assert reg.get_sample_value("slurm_node_gres", {"node": "c1", "name": "gpu", "type": ""}) is None
    part = {"partition": "gpu", "name": "gpu"}
    assert reg.get_sample_value("slurm_partition_gres", {**part, "type": "a100"}) == 5
    assert reg.get_sample_value("slurm_partition_gres_used", {**part, "type": "a100"}) == 1
    assert reg.get_sample_value("slurm_partition_gres", {**part, "type": "1g.5gb"}) == 7
    assert (
        reg.get_sample_value("slurm_partition_gres", {"partition": "all", "name": "gpu", "type": "a100"}) == 4
    )


def test_without_types_one_series_per_name_and_without_per_node_no_node_series() -> None:
    reg = registry_of(gres_families(SNAP, per_node=False, by_type=False))
    assert reg.get_sample_value("slurm_partition_gres", {"partition": "gpu", "name": "gpu", "type": ""}) == 12
    assert (
        reg.get_sample_value("slurm_partition_gres_used", {"partition": "gpu", "name": "gpu", "type": ""})
        == 3
    )
    assert (
        reg.get_sample_value("slurm_partition_gres", {"partition": "gpu", "name": "gpu", "type": "a100"})
        is None
    )
    assert not any(m.name.startswith("slurm_node_gres") for m in reg.collect())
