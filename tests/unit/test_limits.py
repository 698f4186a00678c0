"""QOS and association limits (exporter.versions.limits): slurmdbd's answers of every API version, recorded
on both labs with every limit read here set by ``sacctmgr``, checked against what ``sacctmgr -P show`` printed
at the same time; bad answers give typed errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from exporter.errors import ResponseError, ShapeError, SlurmReportedError
from exporter.model import MIB
from exporter.versions import adapter_for
from exporter.versions.limits import decode_associations, decode_qos
from testkit.lab_compare import compare_limits
from testkit.paths import ROOT

ACCOUNTING = ROOT / "tests" / "data" / "accounting"
RECORDED = sorted(p.parent for p in ACCOUNTING.glob("slurm-*/v0.0.*/qos.json"))
IDS = [f"{p.parent.name}/{p.name}" for p in RECORDED]


@pytest.mark.parametrize("version_dir", RECORDED, ids=IDS)
def test_limits_are_what_sacctmgr_printed(version_dir: Path) -> None:
    qos, _ = decode_qos((version_dir / "qos.json").read_bytes())
    associations, env = decode_associations((version_dir / "associations.json").read_bytes())
    release = version_dir.parent
    diffs = compare_limits(
        qos,
        associations,
        (release / "sacctmgr-qos.txt").read_text(),
        (release / "sacctmgr-assoc.txt").read_text(),
    )
    if version_dir.name in ("v0.0.40", "v0.0.41"):  # these carry no QOS GrpSubmitJobs (max.jobs.count)
        assert diffs == ["QOS high grpsubmit: sacctmgr '13' → 13, snapshot None"]
    else:
        assert diffs == []
    assert env.slurm_version == release.name.removeprefix("slurm-")
    # the recorded limits are set: the comparison was not between two empty sets
    normal = next(q for q in qos if q.name == "normal")
    assert normal.max_tres_per_user == {"cpu": 8, "gres/gpu": 1}
    assert normal.grp_tres == {"cpu": 20, "mem": 4096 * MIB}
    assert normal.max_wall_seconds == 7200 and normal.max_tres_per_job == {"node": 2}
    physics = next(a for a in associations if (a.account, a.user) == ("physics", ""))
    assert (physics.parent, physics.max_jobs, physics.grp_wall_seconds) == ("root", 4, 36000)
    gpu = next(a for a in associations if a.partition == "gpu")
    assert (gpu.account, gpu.user, gpu.max_jobs, gpu.grp_tres) == ("physics", "ann", 1, {"gres/gpu": 1})
    # the adapter of that version reads them the same
    adapter = adapter_for(version_dir.name)
    assert adapter.qos((version_dir / "qos.json").read_bytes())[0] == qos


def test_unset_and_infinite_limits_are_none() -> None:
    body = msgspec.json.encode(
        {
            "qos": [
                {
                    "name": "q",
                    "priority": {"set": False, "infinite": False, "number": 0},
                    "limits": {
                        "max": {
                            "jobs": {
                                "active_jobs": {"per": {"user": {"set": True, "infinite": True, "number": 0}}}
                            },
                            "wall_clock": {"per": {"job": {"set": False, "infinite": True, "number": 60}}},
                            "tres": {"per": {"job": [{"type": "cpu", "name": "", "count": -1}]}},
                        }
                    },
                }
            ],
            "associations": [{"account": "a"}],
        }
    )
    [q], _ = decode_qos(body)
    assert (q.priority, q.max_jobs_per_user, q.max_wall_seconds, q.max_tres_per_job) == (0, None, None, {})
    [a], _ = decode_associations(body)
    assert (a.account, a.user, a.max_jobs, a.grp_tres, a.qos) == ("a", "", None, {}, ())


@pytest.mark.parametrize("decode", [decode_qos, decode_associations], ids=["qos", "associations"])
def test_bad_answers_are_typed_errors(decode: object) -> None:
    assert callable(decode)
    with pytest.raises(ResponseError, match="JSON is malformed"):
        decode(b"{not json")
    with pytest.raises(ShapeError):
        decode(b'{"qos": [{"name": 5}], "associations": [{"account": 5}]}')
    # an answer without its list but with errors[]: Slurm's own words
    with pytest.raises(SlurmReportedError, match="Unable to connect to database"):
        decode(b'{"errors": [{"error": "Unable to connect to database", "error_number": 7000}]}')


def test_slurm_2205_does_not_read_them() -> None:
    from exporter.errors import VersionError

    with pytest.raises(VersionError, match=r"v0\.0\.40 on"):
        adapter_for("v0.0.38").qos(b"{}")
    with pytest.raises(VersionError, match=r"v0\.0\.40 on"):
        adapter_for("v0.0.38").associations(b"{}")
