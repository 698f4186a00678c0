"""slurmctld's RPC statistics as metric families (exporter.ctldstats): recorded /diag answers of every
Slurm generation, and the per-user cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.collector import Cardinality, snapshot_families
from exporter.ctldstats import rpc_families
from exporter.model import Diag
from exporter.versions import SUPPORTED_VERSIONS
from testkit.paths import RECORDED
from testkit.tools import recorded_snapshot, registry_of

VERSION_DIRS = sorted(
    d for d in RECORDED.glob("slurm-*/v0.0.*") if d.name in SUPPORTED_VERSIONS and (d / "diag.json").is_file()
)


@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=[f"{d.parent.name}/{d.name}" for d in VERSION_DIRS])
def test_rpc_counters_are_what_slurmctld_answered(vdir: Path) -> None:
    stats = json.loads((vdir / "diag.json").read_bytes())["statistics"]
    snap = recorded_snapshot(vdir, vdir.name, taken_at=1_800_000_000.0)
    reg = registry_of(snapshot_families(snap, Cardinality(per_user=True)))
    for raw in stats["rpcs_by_message_type"]:
        labels = {"type": raw["message_type"]}
        assert reg.get_sample_value("slurm_rpc_calls_total", labels) == raw["count"]
        assert reg.get_sample_value("slurm_rpc_time_seconds_total", labels) == pytest.approx(
            raw["total_time"] / 1e6
        )
        if "queued" in raw:  # 24.11+
            assert reg.get_sample_value("slurm_rpc_queued", labels) == raw["queued"]
            assert reg.get_sample_value("slurm_rpc_dropped_total", labels) == raw["dropped"]
    if "queued" not in stats["rpcs_by_message_type"][0]:  # 22.05: no such families rather than zeros
        assert reg.get_sample_value("slurm_rpc_queued", {"type": "REQUEST_PING"}) is None
        assert "slurm_agent_pending_rpcs" not in {m.name for m in reg.collect()}
    for raw in stats["rpcs_by_user"]:
        labels = {"user": raw["user"]}
        assert reg.get_sample_value("slurm_rpc_user_calls_total", labels) == raw["count"]
        assert reg.get_sample_value("slurm_rpc_user_time_seconds_total", labels) == pytest.approx(
            raw["total_time"] / 1e6
        )
    assert reg.get_sample_value("slurm_rpc_users_omitted") == 0


def test_per_user_series_are_opt_in_and_capped_to_the_busiest() -> None:
    diag = Diag(
        rpc_counts={"REQUEST_JOB_INFO": 10},
        rpc_seconds={"REQUEST_JOB_INFO": 0.5},
        rpc_user_counts={"alice": 5, "bob": 500, "carol": 50, "dave": 50},
        rpc_user_seconds={"alice": 0.1, "bob": 2.0, "carol": 0.4, "dave": 0.3},
    )
    assert not any(m.name.startswith("slurm_rpc_user") for m in rpc_families(diag))
    reg = registry_of(rpc_families(diag, per_user=True, top_users=2))
    users = {
        s.labels["user"]: s.value
        for m in reg.collect()
        if m.name == "slurm_rpc_user_calls"
        for s in m.samples
    }
    assert users == {"bob": 500, "carol": 50}  # dave ties with carol: the name decides, so the set is stable
    assert reg.get_sample_value("slurm_rpc_user_time_seconds_total", {"user": "bob"}) == 2.0
    assert reg.get_sample_value("slurm_rpc_users_omitted") == 2
    none = registry_of(rpc_families(diag, per_user=True, top_users=0))
    assert none.get_sample_value("slurm_rpc_users_omitted") == 4
