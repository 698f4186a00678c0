"""slurmctld's configuration (exporter.versions.conf): the recorded 26.05 answer, the flags it may carry,
bad answers; and the poller reads it only where slurmrestd offers it."""

from __future__ import annotations

import json

import pytest

from exporter.errors import ResponseError, SlurmReportedError, VersionError
from exporter.model import ENDPOINTS
from exporter.versions import adapter_for
from exporter.versions.conf import decode_conf
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED, ROOT
from testkit.tools import Clock
from tests.unit.test_poller import _poller

CONF = ROOT / "tests" / "data" / "accounting" / "slurm-26.05.5" / "v0.0.45" / "conf.json"


def test_the_recorded_answer() -> None:
    # the lab's slurm.conf (lab/conf.py): no AccountingStorageEnforce, SelectTypeParameters=CR_Core_Memory
    conf, env = decode_conf(CONF.read_bytes())
    assert conf.accounting_storage_enforce == ()
    assert conf.priority_type == "priority/multifactor"
    assert conf.select_type_parameters == ("CR_CORE_MEMORY",)
    assert env.slurm_version == "26.05.5"
    assert adapter_for("v0.0.45").conf(CONF.read_bytes())[0] == conf


def test_enforced_limits_are_lower_case_flags() -> None:
    doc = json.loads(CONF.read_bytes())
    doc["slurm_conf"]["AccountingStorageEnforce"] = ["Associations", "Limits", "QOS", "Safe"]
    conf, _ = decode_conf(json.dumps(doc).encode())
    assert conf.accounting_storage_enforce == ("associations", "limits", "qos", "safe")


def test_the_cluster_wide_job_defaults() -> None:
    doc = json.loads(CONF.read_bytes())
    assert decode_conf(CONF.read_bytes())[0].default_cpus_per_gpu == 0  # the lab sets none
    doc["slurm_conf"]["JobDefaults"] = [  # slurm.conf JobDefaults=DefMemPerGPU=6000,DefCpuPerGPU=4 (OpenAPI)
        {"type": ["DefMemPerGPU"], "value": 6000},
        {"type": ["DefCpuPerGPU"], "value": 4},
    ]
    assert decode_conf(json.dumps(doc).encode())[0].default_cpus_per_gpu == 4
    doc["slurm_conf"]["JobDefaults"] = [{"type": ["DefCpuPerGPU"]}]
    assert decode_conf(json.dumps(doc).encode())[0].default_cpus_per_gpu == 0


def test_bad_answers() -> None:
    with pytest.raises(ResponseError, match="JSON is malformed"):
        decode_conf(b"{nope")
    with pytest.raises(SlurmReportedError, match="denied"):
        decode_conf(b'{"errors": [{"description": "denied", "error_number": 1}]}')
    with pytest.raises(VersionError, match="no /conf"):
        adapter_for("v0.0.38").conf(b"{}")


async def test_the_poller_reads_it_where_offered() -> None:
    fake = FakeSlurmrestd(RECORDED / "slurm-26.05.5")
    fake.override["conf"] = CONF.read_bytes()
    async with serve(fake) as url:
        p = _poller(url, Clock(1000.0), endpoints=(*ENDPOINTS, "conf"), intervals={"conf": 300.0})
        async with p.client:
            snap = await p.poll_once()
            assert snap is not None and snap.config is None  # not offered (24.11): nothing asked, no error
            assert not any(path.rstrip("/").endswith("/conf") for path, _, _ in fake.requests)
            fake.offered = (*fake.offered, "conf")
            p.session.forget()
            snap = await p.poll_once()
            assert snap is not None and snap.config is not None
            assert snap.config.select_type_parameters == ("CR_CORE_MEMORY",)
