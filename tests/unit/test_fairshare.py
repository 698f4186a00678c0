"""Fair share (/shares → exporter.versions.shares → exporter.fairshare): the answers recorded on the 24.11
and 26.05 labs with accounting, every API version, and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from exporter.collector import Cardinality, snapshot_families
from exporter.errors import ShapeError, SlurmError, SlurmReportedError
from exporter.model import Share, Snapshot
from exporter.versions import adapter_for
from testkit.paths import ROOT
from testkit.tools import registry_of

ACCOUNTING = ROOT / "tests" / "data" / "accounting"
SHARES = sorted(ACCOUNTING.glob("slurm-*/v0.0.*/shares.json"))


def _id(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.parent.name}"


def _number(v: Any) -> float | None:
    """A recorded number as sshare would print it: plain, or {set, infinite, number}."""
    if isinstance(v, dict):
        if v.get("infinite"):
            return math.inf
        return float(v["number"]) if v.get("set") else None
    return float(v)


@pytest.mark.parametrize("path", SHARES, ids=[_id(p) for p in SHARES])
def test_every_recorded_row_becomes_one_share_with_its_tree(path: Path) -> None:
    body = path.read_bytes()
    rows, env = adapter_for(path.parent.name).shares(body)
    raw = json.loads(body.replace(b"Infinity", b"1e999"))["shares"]["shares"]  # json reads 1e999 as inf
    assert len(rows) == len(raw) == 7
    assert env.slurm_version.startswith(path.parent.parent.name.removeprefix("slurm-")[:5])
    accounts = {r["name"]: r["parent"] for r in raw if "USER" not in r["type"]}
    for got, want in zip(rows, raw, strict=True):
        user = "USER" in want["type"]
        assert (got.account, got.user) == ((want["parent"], want["name"]) if user else (want["name"], ""))
        assert got.parent == (accounts[want["parent"]] if user else want["parent"])
        assert got.raw_usage == want["usage"]
        assert got.normalized_shares == _number(want["shares_normalized"])
        assert got.raw_shares == (None if want["name"] == "root" and not user else _number(want["shares"]))
        assert got.fairshare == (_number(want["fairshare"]["factor"]) if user else None)
    by = {(s.account, s.user): s for s in rows}
    assert by[("physics", "ann")].level_fs == math.inf  # no usage yet, in every version's spelling
    assert by[("root", "")].level_fs is None  # NO_VAL in v0.0.40/41, unset later
    assert by[("biology", "bob")].parent == "root"


def test_v0040s_bare_infinity_is_read_and_other_bad_input_fails_typed() -> None:
    body = (ACCOUNTING / "slurm-24.11.5/v0.0.40/shares.json").read_bytes()
    assert b": Infinity" in body  # not JSON: what slurmrestd 24.11 sends on v0.0.40
    adapter = adapter_for("v0.0.40")
    assert adapter.shares(body)[0]
    with pytest.raises(SlurmError):
        adapter.shares(b"{not json")
    with pytest.raises(ShapeError):
        adapter.shares(b'{"shares": {"shares": [{"name": 3}]}}')
    refused = {"errors": [{"description": "accounting storage is down", "error_number": 7000}]}
    with pytest.raises(SlurmReportedError, match="accounting storage is down"):
        adapter.shares(msgspec.json.encode(refused))
    with pytest.raises(SlurmError, match="has no /shares"):
        adapter_for("v0.0.38").shares(body)


def test_fairshare_families_are_opt_in_and_labelled_with_the_tree() -> None:
    snap = Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        shares=(
            Share(account="root", parent="", normalized_shares=1.0, raw_usage=100.0),
            Share(account="physics", parent="root", raw_shares=2, normalized_shares=0.5, raw_usage=60.0),
            Share(
                account="physics", user="ann", parent="root", raw_shares=1, fairshare=0.25, level_fs=math.inf
            ),
        ),
    )
    assert not any(m.name.startswith("slurm_share") for m in snapshot_families(snap))
    reg = registry_of(snapshot_families(snap, Cardinality(fairshare=True)))
    ann = {"account": "physics", "user": "ann", "parent": "root", "partition": ""}
    assert reg.get_sample_value("slurm_share_fairshare_factor", ann) == 0.25
    assert reg.get_sample_value("slurm_share_level_fs", ann) == math.inf
    physics = {**ann, "user": ""}
    assert reg.get_sample_value("slurm_share_raw_shares", physics) == 2
    assert reg.get_sample_value("slurm_share_raw_usage", physics) == 60
    assert reg.get_sample_value("slurm_share_fairshare_factor", physics) is None  # accounts have none
    root = {"account": "root", "user": "", "parent": "", "partition": ""}
    assert reg.get_sample_value("slurm_share_raw_shares", root) is None
