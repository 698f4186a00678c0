"""JSON → model translation for every supported slurmrestd API version (exporter.versions).

Three groups:

* recorded lab answers in ``tests/data/recorded/slurm-<release>/<version>/*.json``, checked
  field by field against ``scontrol show job/node -o``, ``squeue`` and ``sinfo`` text taken at
  the same moment (skipped only while that directory holds no recordings);
* small synthetic bodies for the semantics (number structs, sentinels, arrays, GPUs...) and for
  every kind of bad input;
* an optional smoke test over ``/work/shared/slurm-payloads`` that skips when it is absent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from exporter import errors, slurmtext
from exporter.model import MIB, Job, Node
from exporter.versions import SUPPORTED_VERSIONS, adapter_for
from testkit.paths import ROOT, SHARED

RECORDED = ROOT / "tests" / "data" / "recorded"
SHARED = SHARED / "slurm-payloads"
ENDPOINTS = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations")


def _version_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(
        d
        for d in root.glob("slurm-*/v0.0.*")
        if d.is_dir() and d.name in SUPPORTED_VERSIONS and (d / "jobs.json").is_file()
    )


RECORDED_DIRS = _version_dirs(RECORDED)
needs_recordings = pytest.mark.skipif(
    not RECORDED_DIRS, reason="no lab recordings in tests/data/recorded yet"
)


def _ids(dirs: list[Path]) -> list[str]:
    return [f"{d.parent.name}/{d.name}" for d in dirs]


# --------------------------------------------------------------------------- CLI text parsing


def _kv_line(line: str) -> dict[str, str]:
    """``scontrol ... -o`` line → {key: value}; first occurrence wins (SubmitLine has '=')."""
    out: dict[str, str] = {}
    for tok in line.split():
        m = re.fullmatch(r"([A-Za-z][\w/:]*)=(.*)", tok)
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def _scontrol(path: Path, key: str) -> dict[str, dict[str, str]]:
    if not path.is_file():
        return {}
    recs = [_kv_line(line) for line in path.read_text().splitlines() if line.strip()]
    return {r[key]: r for r in recs if key in r}


def _slurm_duration(text: str) -> int | None:
    """``[D-]HH:MM:SS`` / ``MM:SS`` / ``UNLIMITED`` → seconds."""
    if text in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", "Partition_Limit"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def _null(v: str) -> str:
    return "" if v in ("(null)", "N/A", "None") else v


def _squeue(path: Path) -> list[list[str]]:
    """squeue text with the lab's ``%i|%A|%F|%K|%T|%r|%P|...`` format (no header), else []."""
    if not path.is_file():
        return []
    rows = [line.split("|") for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if len(r) >= 17 and r[1].isdigit()]


def _load(d: Path) -> dict[str, Any]:
    a = adapter_for(d.name)
    return {ep: getattr(a, ep)((d / f"{ep}.json").read_bytes()) for ep in ENDPOINTS}


# --------------------------------------------------------------------------- recorded: jobs


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_every_endpoint_decodes(vdir: Path) -> None:
    release = vdir.parent.name.removeprefix("slurm-")
    for ep in ENDPOINTS:
        data, env = getattr(adapter_for(vdir.name), ep)((vdir / f"{ep}.json").read_bytes())
        assert env.slurm_version == release
        assert env.errors == ()
        assert data is not None
        env2 = adapter_for(vdir.name).envelope((vdir / f"{ep}.json").read_bytes(), ep)
        assert env2 == env


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_jobs_match_scontrol(vdir: Path) -> None:
    sc = _scontrol(vdir.parent / "scontrol-jobs.txt", "JobId")
    if not sc:
        pytest.skip("no scontrol-jobs.txt recorded")
    jobs, env = adapter_for(vdir.name).jobs((vdir / "jobs.json").read_bytes())
    assert {str(j.job_id) for j in jobs} == set(sc), "same job records as scontrol"
    assert env.last_update is not None or vdir.name == "v0.0.38"
    for j in jobs:
        s = sc[str(j.job_id)]
        what = f"job {j.job_id}"
        # state: scontrol prints the flag that dominates (CONFIGURING, COMPLETING) or the base
        assert s["JobState"] in (j.state, *j.state_flags), what
        assert j.reason == s["Reason"], what
        assert j.partitions == tuple(s["Partition"].split(",")), what
        assert j.priority == int(s["Priority"]), what
        assert j.nodes == _null(s.get("NodeList", "")), what
        lo, _, hi = s["NumNodes"].partition("-")
        assert j.min_nodes == int(lo), what
        if hi and hi != "*":
            # a pending job packed as max(minimum, 0) when it asked no maximum: read as none
            packed = hi == lo and j.state == "PENDING"
            assert j.max_nodes in ((int(hi), None) if packed else (int(hi),)), what
        assert j.cpus == int(s["NumCPUs"].split("-")[0]), what
        if "NumTasks" in s:
            assert j.tasks == int(s["NumTasks"]), what
        assert j.cpus_per_task == int(s["CPUs/Task"]), what
        if "ReqTRES" in s or "AllocTRES" in s:
            req = _null(s.get("ReqTRES", ""))
            assert dict(j.tres_requested) == slurmtext.parse_tres(req), what
            alloc = _null(s.get("AllocTRES", ""))
            assert dict(j.tres_allocated) == slurmtext.parse_tres(alloc), what
        else:  # 22.05 prints one TRES=: the allocated TRES once allocated, else the requested
            req = alloc = _null(s.get("TRES", ""))
            assert dict(j.tres_allocated or j.tres_requested) == slurmtext.parse_tres(alloc), what
        assert j.memory_bytes == slurmtext.parse_tres(alloc or req).get("mem", 0), what
        assert j.time_limit_seconds == _slurm_duration(s["TimeLimit"]), what
        assert j.tres_per_node == _null(s.get("TresPerNode", "")), what
        assert j.gpus_per_node == slurmtext.gres_gpus(s.get("TresPerNode", "")), what
        # memory: MinMemoryNode=0 means the whole memory of each node
        if "MinMemoryNode" in s:
            mem = slurmtext.parse_size(s["MinMemoryNode"])
            assert j.whole_node_memory == (mem == 0), what
            assert j.memory_per_node_bytes == (mem or None), what
            assert j.memory_per_cpu_bytes is None, what
        elif "MinMemoryCPU" in s:
            assert j.memory_per_cpu_bytes == slurmtext.parse_size(s["MinMemoryCPU"]), what
        # arrays
        if "ArrayJobId" in s:
            assert j.array_job_id == int(s["ArrayJobId"]), what
            tid = s["ArrayTaskId"]
            if tid.isdigit():
                assert j.array_task_id == int(tid), what
                assert j.task_count == 1, what
            else:
                tasks, count, throttle = slurmtext.parse_array_tasks(tid)
                assert j.array_task_id is None, what
                assert j.array_task_string == tasks, what
                assert j.array_pending_tasks == count == j.task_count, what
                assert j.array_max_tasks == throttle, what
            if "ArrayTaskThrottle" in s and s["ArrayTaskThrottle"] != "0":
                assert j.array_max_tasks == int(s["ArrayTaskThrottle"]), what
        else:
            assert j.array_job_id is None and j.array_task_id is None, what
            assert j.task_count == 1, what
        # exclusive: scontrol 26.05 prints Exclusive=NODE; 24.11 prints OverSubscribe=NO.
        # v0.0.45 no longer reports it in the job record (its `shared` is always empty).
        if vdir.name != "v0.0.45":
            expect = (s["Exclusive"] != "NO") if "Exclusive" in s else s["OverSubscribe"] == "NO"
            assert j.exclusive == expect, what
        if s.get("Dependency", "(null)") != "(null)":
            assert j.dependency == s["Dependency"], what


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_jobs_match_squeue(vdir: Path) -> None:
    rows = _squeue(vdir.parent / "squeue.txt")
    rows_r = _squeue(vdir.parent / "squeue-r.txt")
    if not rows:
        pytest.skip("no squeue.txt in the lab's format")
    jobs = {j.job_id: j for j in adapter_for(vdir.name).jobs((vdir / "jobs.json").read_bytes())[0]}
    # squeue may hide records (e.g. jobs of a partition with no nodes on 24.11): compare what it shows
    assert len(rows) <= len(jobs)
    assert len({r[1] for r in rows}) == len(rows)
    for r in rows:
        j = jobs[int(r[1])]
        what = f"squeue {r[0]}"
        assert r[4] in (j.state, *j.state_flags), what
        assert j.reason == r[5], what
        assert j.partitions == tuple(r[6].split(",")), what
        assert j.min_nodes == int(r[10]), what
        assert j.cpus == int(r[11]), what
        assert j.tres_per_node == _null(r[13]), what
        assert j.priority == int(r[15]), what
        assert j.nodes == r[16], what
        # the pending array record stands for as many tasks as squeue -r lists as pending
        if j.array_job_id is not None and j.array_task_id is None:
            pending = [x for x in rows_r if x[2] == str(j.array_job_id) and x[4] == "PENDING"]
            assert j.task_count == len(pending), what
    # all task-level rows of squeue -r are accounted for by the records
    if rows_r:
        shown = {int(r[1]) for r in rows}
        assert sum(jobs[i].task_count for i in shown) == len(rows_r)


# --------------------------------------------------------------------------- recorded: nodes


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_nodes_match_scontrol(vdir: Path) -> None:
    sc = _scontrol(vdir.parent / "scontrol-nodes.txt", "NodeName")
    if not sc:
        pytest.skip("no scontrol-nodes.txt recorded")
    nodes, _ = adapter_for(vdir.name).nodes((vdir / "nodes.json").read_bytes())
    assert {n.name for n in nodes} == set(sc)
    for n in nodes:
        s = sc[n.name]
        what = f"node {n.name}"
        words = s["State"].rstrip("*~#!%$@^-").split("+")
        assert n.state == words[0], what
        assert set(n.flags) - {"DRAINING"} == set(words[1:]), what
        if "DRAIN" in n.flags:
            assert ("DRAINING" in n.flags) == (n.alloc_cpus > 0 or n.state in ("ALLOCATED", "MIXED"))
        assert n.cpus == int(s["CPUTot"]), what
        assert n.alloc_cpus == int(s["CPUAlloc"]), what
        if "CPUEfctv" in s:
            assert n.effective_cpus == int(s["CPUEfctv"]), what
        assert n.memory_bytes == int(s["RealMemory"]) * MIB, what
        assert n.alloc_memory_bytes == int(s["AllocMem"]) * MIB, what
        free = s["FreeMem"]
        assert n.free_memory_bytes == (None if free == "N/A" else int(free) * MIB), what
        assert n.gres == _null(s["Gres"]), what
        assert n.gpus == slurmtext.gres_gpus(s["Gres"]), what
        assert n.partitions == tuple(
            _null(s.get("Partitions", "")).split(",") if _null(s.get("Partitions", "")) else ()
        ), what
        if s.get("CPULoad", "N/A") != "N/A":
            assert n.cpu_load == pytest.approx(float(s["CPULoad"])), what
        assert n.weight == int(s["Weight"]), what
        feats = _null(s.get("AvailableFeatures", ""))
        assert n.features == (tuple(feats.split(",")) if feats else ()), what


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_nodes_match_sinfo(vdir: Path) -> None:
    path = vdir.parent / "sinfo.txt"
    rows = [line.split("|") for line in path.read_text().splitlines()] if path.is_file() else []
    rows = [r for r in rows if len(r) >= 8]
    if not rows:
        pytest.skip("no sinfo.txt in the lab's format")
    nodes = {n.name: n for n in adapter_for(vdir.name).nodes((vdir / "nodes.json").read_bytes())[0]}
    parts, _ = adapter_for(vdir.name).partitions((vdir / "partitions.json").read_bytes())
    for r in rows:
        n = nodes[r[0]]
        alloc, _idle, _other, total = (int(x) for x in r[3].split("/"))
        assert (n.alloc_cpus, n.cpus) == (alloc, total), r[0]
        assert n.gpus_used == slurmtext.gres_gpus(r[7]), r[0]
    # the default partition (starred in sinfo) is only reported by v0.0.38 and v0.0.45+
    starred = {r[1].rstrip("*") for r in rows if r[1].endswith("*")}
    if vdir.name in ("v0.0.38", "v0.0.45"):
        assert {p.name for p in parts if p.is_default} == starred
    for p in parts:
        members = {r[0] for r in rows if r[1].rstrip("*") == p.name}
        assert p.total_nodes == len(members) == slurmtext.hostlist_count(p.nodes), p.name


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_partitions_diag_licenses_reservations(vdir: Path) -> None:
    got = _load(vdir)
    raw = {ep: json.loads((vdir / f"{ep}.json").read_bytes()) for ep in ENDPOINTS}
    parts = got["partitions"][0]
    assert [p.name for p in parts] == [p["name"] for p in raw["partitions"]["partitions"]]
    for p in parts:
        assert p.state in ("UP", "DOWN", "DRAIN", "INACTIVE")
        assert p.max_time_seconds is None or p.max_time_seconds % 60 == 0
        assert p.total_cpus >= 0
    diag = got["diag"][0]
    stats = raw["diag"]["statistics"]
    assert diag.jobs_submitted == stats["jobs_submitted"]
    assert diag.schedule_cycle_max_seconds == stats["schedule_cycle_max"] / 1e6
    assert diag.backfill_cycle_count == stats["bf_cycle_counter"]
    assert diag.stats_time is not None
    lics = got["licenses"][0]
    assert [(lic.name, lic.total, lic.used, lic.free) for lic in lics] == [
        (x["LicenseName"], x["Total"], x["Used"], x["Free"]) for x in raw["licenses"]["licenses"]
    ]
    resv = got["reservations"][0]
    assert [(r.name, r.nodes, r.node_count) for r in resv] == [
        (x["name"], x["node_list"], x["node_count"]) for x in raw["reservations"]["reservations"]
    ]
    for r in resv:
        assert r.node_count == slurmtext.hostlist_count(r.nodes)
        assert r.start_time is not None and r.end_time is not None and r.start_time < r.end_time


@needs_recordings
@pytest.mark.parametrize("vdir", RECORDED_DIRS, ids=_ids(RECORDED_DIRS))
def test_recorded_job_array_equals_jobs(vdir: Path) -> None:
    """The streaming splitter's slices of /jobs translate exactly like the whole body."""
    body = (vdir / "jobs.json").read_bytes()
    a = adapter_for(vdir.name)
    whole, _ = a.jobs(body)
    records = json.loads(body)["jobs"]
    half = len(records) // 2
    sliced = a.job_array(json.dumps(records[:half]).encode()) + a.job_array(
        json.dumps(records[half:]).encode()
    )
    assert sliced == whole


# --------------------------------------------------------------------------- synthetic bodies


def num(n: int | None, *, infinite: bool = False) -> dict[str, Any]:
    if infinite:
        return {"set": False, "infinite": True, "number": 0}
    if n is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": n}


META40 = {
    "plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.45"},
    "slurm": {
        "version": {"major": "26", "micro": "5", "minor": "05"},
        "release": "26.05.5",
        "cluster": "lab",
    },
}


def job40(**over: Any) -> dict[str, Any]:
    j: dict[str, Any] = {
        "job_id": 42,
        "job_state": ["PENDING"],
        "state_reason": "Resources",
        "partition": "cpu,gpu",
        "user_name": "alice",
        "user_id": 1000,
        "account": "physics",
        "qos": "normal",
        "priority": num(100),
        "node_count": num(2),
        "max_nodes": num(0),
        "cpus": num(16),
        "tasks": num(4),
        "cpus_per_task": num(4),
        "memory_per_node": num(None),
        "memory_per_cpu": num(2000),
        "tres_req_str": "cpu=16,mem=32000M,node=2,billing=16,gres/gpu=4",
        "tres_alloc_str": "",
        "tres_per_node": "gres/gpu:2",
        "tres_per_job": "",
        "time_limit": num(None, infinite=True),
        "submit_time": num(1_700_000_000),
        "start_time": num(0),
        "end_time": num(0),
        "eligible_time": num(1_700_000_001),
        "array_job_id": num(0),
        "array_task_id": num(None),
        "array_max_tasks": num(0),
        "array_task_string": "",
        "shared": [],
        "job_resources": {"nodes": {"allocation": [{"cpus": {"count": 8}}]}},  # skipped
        "unknown_future_field": {"deep": [1, 2, {"x": None}]},
    }
    j.update(over)
    return j


def body40(jobs: list[dict[str, Any]], **over: Any) -> bytes:
    b: dict[str, Any] = {
        "jobs": jobs,
        "last_backfill": num(1_700_000_100),
        "last_update": num(1_700_000_200),
        "meta": META40,
        "errors": [],
        "warnings": [{"description": "be careful", "source": ""}],
    }
    b.update(over)
    return json.dumps(b).encode()


def test_supported_versions_ascending_and_adapters() -> None:
    assert tuple(sorted(SUPPORTED_VERSIONS, key=lambda v: int(v.split(".")[-1]))) == SUPPORTED_VERSIONS
    assert SUPPORTED_VERSIONS[0] == "v0.0.38" and SUPPORTED_VERSIONS[-1] == "v0.0.45"
    for v in SUPPORTED_VERSIONS:
        a = adapter_for(v)
        assert a.version == v
        assert adapter_for(v) is a


@pytest.mark.parametrize("version", ["v0.0.37", "v0.0.39", "v0.0.46", "", "latest"])
def test_unknown_version(version: str) -> None:
    with pytest.raises(errors.VersionError, match="unsupported slurmrestd API version") as ei:
        adapter_for(version)
    assert ei.value.kind == "version"


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if v != "v0.0.38"])
def test_v40_job_semantics(version: str) -> None:
    jobs, env = adapter_for(version).jobs(body40([job40()]))
    assert env.last_update == 1_700_000_200.0
    assert env.warnings == ("be careful",)
    assert (env.slurm_version, env.cluster) == ("26.05.5", "lab")
    (j,) = jobs
    assert isinstance(j, Job)
    assert (j.job_id, j.state, j.state_flags, j.reason) == (42, "PENDING", (), "Resources")
    assert j.partitions == ("cpu", "gpu")
    assert (j.user, j.user_id, j.account, j.qos, j.priority) == ("alice", 1000, "physics", "normal", 100)
    assert (j.min_nodes, j.max_nodes, j.cpus, j.tasks, j.cpus_per_task) == (2, None, 16, 4, 4)
    assert j.memory_per_cpu_bytes == 2000 * MIB
    assert j.memory_per_node_bytes is None and not j.whole_node_memory
    assert j.memory_bytes == 32000 * MIB
    assert (j.gpus_per_node, j.gpus) == (2, 4)
    assert j.tres_requested["gres/gpu"] == 4 and j.tres_allocated == {}
    assert j.time_limit_seconds is None  # infinite
    assert (j.submit_time, j.start_time, j.end_time) == (1_700_000_000.0, None, None)
    assert j.eligible_time == 1_700_000_001.0
    assert j.array_job_id is None and j.task_count == 1
    assert not j.exclusive


def test_v40_running_array_whole_node_exclusive() -> None:
    a = adapter_for("v0.0.41")
    pending = job40(
        job_id=7,
        array_job_id=num(7),
        array_task_string="3,5,7-9%2",
        array_max_tasks=num(2),
        memory_per_node=num(0),
        memory_per_cpu=num(None),
        shared=["none"],
        exclusive=["true"],
        time_limit=num(30),
        max_nodes=num(4),
        flags=["EXACT_MEMORY_REQUESTED"],  # --mem=0
    )
    running = job40(
        job_id=9,
        job_state=["RUNNING", "CONFIGURING"],
        array_job_id=num(7),
        array_task_id=num(1),
        array_max_tasks=num(2),
        tres_req_str="cpu=8,mem=16G,node=2,billing=8",
        tres_alloc_str="cpu=8,mem=16G,node=2,billing=8",
        tres_per_node="",
        tres_per_job="gres/gpu:3",
        nodes="c[1-2]",
        start_time=num(1_700_000_050),
    )
    p, r = a.jobs(body40([pending, running]))[0]
    assert (p.array_job_id, p.array_task_id, p.array_task_string) == (7, None, "3,5,7-9")
    assert (p.array_max_tasks, p.array_pending_tasks, p.task_count) == (2, 5, 5)
    assert p.whole_node_memory and p.memory_per_node_bytes is None
    assert p.exclusive and p.max_nodes == 4 and p.time_limit_seconds == 1800
    assert (r.state, r.state_flags) == ("RUNNING", ("CONFIGURING",))
    assert (r.array_job_id, r.array_task_id, r.task_count, r.array_max_tasks) == (7, 1, 1, 2)
    assert r.memory_bytes == 16 * 1024 * MIB  # from the allocation
    assert r.gpus == 3  # tres_per_job when the TRES strings carry no gres/gpu
    assert r.nodes == "c[1-2]" and r.start_time == 1_700_000_050.0


def test_v40_shares_translated_values() -> None:
    jobs, _ = adapter_for("v0.0.44").jobs(body40([job40(job_id=i) for i in range(1, 4)]))
    assert jobs[0].tres_requested is jobs[2].tres_requested
    assert jobs[0].partitions is jobs[1].partitions
    assert jobs[0].user is jobs[2].user


def test_v40_nodes_partitions_diag_minimal() -> None:
    a = adapter_for("v0.0.45")
    nodes_body = json.dumps(
        {
            "nodes": [
                {
                    "name": "g1",
                    "state": ["MIXED", "DRAIN"],
                    "cpus": 8,
                    "alloc_cpus": 2,
                    "effective_cpus": 6,
                    "real_memory": 16000,
                    "alloc_memory": 2000,
                    "free_mem": num(None),
                    "gres": "gpu:a100:4(S:0-1)",
                    "gres_used": "gpu:a100:1(IDX:0)",
                    "partitions": ["gpu"],
                    "features": ["a100", "ib"],
                    "active_features": ["a100"],
                    "reason": "maint",
                    "reason_changed_at": num(1_700_000_000),
                    "cpu_load": 250,
                },
                {"name": "bare"},
            ],
            "last_update": num(5),
            "meta": META40,
        }
    ).encode()
    (g, bare), env = a.nodes(nodes_body)
    assert isinstance(g, Node)
    assert (g.state, g.flags) == ("MIXED", ("DRAIN", "DRAINING"))
    assert (g.cpus, g.alloc_cpus, g.effective_cpus) == (8, 2, 6)
    assert (g.memory_bytes, g.alloc_memory_bytes, g.free_memory_bytes) == (16000 * MIB, 2000 * MIB, None)
    assert (g.gpus, g.gpus_used) == (4, 1)
    assert g.features == ("a100", "ib") and g.active_features == ("a100",)
    assert g.cpu_load == 2.5 and g.reason_time == 1_700_000_000.0
    assert (bare.state, bare.cpus, bare.weight, bare.cpu_load) == ("UNKNOWN", 0, 1, None)
    assert env.last_update == 5.0

    parts_body = json.dumps(
        {
            "partitions": [
                {
                    "name": "cpu",
                    "nodes": {"configured": "c[1-3]", "total": 3},
                    "cpus": {"total": 24},
                    "maximums": {
                        "nodes": num(2),
                        "time": num(120),
                        "cpus_per_node": num(None, infinite=True),
                        "partition_memory_per_node": num(0),
                        "partition_memory_per_cpu": num(4000),
                    },
                    "defaults": {"time": num(30), "partition_memory_per_cpu": num(1000)},
                    "minimums": {"nodes": 1},
                    "partition": {"state": ["DRAIN"]},
                    "flags": ["DEFAULT"],
                    "priority": {"tier": 5},
                    "tres": {"configured": "cpu=24"},
                    "qos": {"allowed": "", "deny": "", "assigned": "gpuq"},
                },
                {
                    "name": "dyn",
                    "maximums": {"nodes": num(None, infinite=True), "time": num(None, infinite=True)},
                },
            ],
            "meta": META40,
        }
    ).encode()
    (p, d), _ = a.partitions(parts_body)
    assert (p.state, p.nodes, p.total_nodes, p.total_cpus) == ("DRAIN", "c[1-3]", 3, 24)
    assert (p.max_nodes_per_job, p.min_nodes_per_job, p.max_cpus_per_node) == (2, 1, None)
    assert (p.max_time_seconds, p.default_time_seconds) == (7200, 1800)
    assert p.max_memory_per_node_bytes is None and p.max_memory_per_cpu_bytes == 4000 * MIB
    assert p.default_memory_per_cpu_bytes == 1000 * MIB
    assert p.is_default and p.priority_tier == 5 and p.tres == "cpu=24"
    assert (p.qos, d.qos) == ("gpuq", "")  # the partition's QOS (qos.assigned)
    assert (d.max_nodes_per_job, d.max_time_seconds, d.is_default, d.state) == (None, None, False, "UP")

    diag_body = json.dumps(
        {
            "statistics": {
                "req_time": num(100),
                "req_time_start": num(50),
                "schedule_cycle_last": 1500,
                "schedule_cycle_total": 7,
                "bf_cycle_max": 2_000_000,
                "bf_active": True,
                "jobs_pending": 3,
            },
            "meta": META40,
        }
    ).encode()
    diag, _ = a.diag(diag_body)
    assert diag.schedule_cycle_last_seconds == 0.0015 and diag.schedule_cycle_count == 7
    assert diag.backfill_cycle_max_seconds == 2.0 and diag.backfill_active
    assert (diag.stats_time, diag.stats_reset_time, diag.jobs_pending) == (100.0, 50.0, 3)


def test_v40_licenses_reservations() -> None:
    a = adapter_for("v0.0.42")
    lic, _ = a.licenses(
        json.dumps(
            {
                "licenses": [
                    {
                        "LicenseName": "matlab",
                        "Total": 10,
                        "Used": 3,
                        "Free": 7,
                        "Reserved": 1,
                        "Remote": True,
                    }
                ]
            }
        ).encode()
    )
    assert [(x.name, x.total, x.used, x.free, x.reserved, x.remote) for x in lic] == [
        ("matlab", 10, 3, 7, 1, True)
    ]
    resv, _ = a.reservations(
        json.dumps(
            {
                "reservations": [
                    {
                        "name": "maint",
                        "node_list": "c[1-2]",
                        "node_count": 2,
                        "core_count": 16,
                        "start_time": num(10),
                        "end_time": num(20),
                        "flags": ["MAINT", "IGNORE_JOBS"],
                        "partition": "cpu",
                        "users": "root",
                    }
                ]
            }
        ).encode()
    )
    (r,) = resv
    assert (r.name, r.nodes, r.node_count, r.core_count) == ("maint", "c[1-2]", 2, 16)
    assert (r.start_time, r.end_time, r.flags, r.users) == (10.0, 20.0, ("MAINT", "IGNORE_JOBS"), "root")


# v0.0.38 ----------------------------------------------------------------------------------------

META38 = {
    "plugin": {"type": "openapi/v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}


def job38(**over: Any) -> dict[str, Any]:
    j: dict[str, Any] = {
        "job_id": 5,
        "job_state": "PENDING",
        "state_reason": "Priority",
        "partition": "cpu",
        "user_name": "root",
        "user_id": 0,
        "array_job_id": 0,
        "array_task_id": None,
        "array_max_tasks": 0,
        "array_task_string": "",
        "cpus": 2,
        "tasks": 2,
        "cpus_per_task": None,
        "node_count": 2,
        "max_nodes": 2,
        "memory_per_node": None,
        "memory_per_cpu": None,
        "shared": None,
        "priority": 4294901752,
        "time_limit": 5,
        "start_time": 1795968000,
        "submit_time": 1795966845,
        "end_time": 0,
        "tres_req_str": "cpu=2,mem=32000M,node=2,billing=2",
        "tres_alloc_str": "",
        "tres_per_node": "gres:gpu:1",
        "nodes": "",
        "job_resources": {},
    }
    j.update(over)
    return j


def test_v38_jobs() -> None:
    a = adapter_for("v0.0.38")
    body = json.dumps(
        {
            "meta": META38,
            "errors": [],
            "jobs": [
                job38(),
                job38(
                    job_id=6,
                    job_state="RUNNING",
                    array_job_id=6,
                    array_task_id=3,
                    array_max_tasks=4,
                    memory_per_node=1000,
                    cpus_per_task="2",
                    shared="none",
                    time_limit=None,
                    tres_alloc_str="cpu=2,mem=1000M,node=1,gres/gpu=1",
                ),
                job38(job_id=7, array_job_id=7, array_task_string="1-10%3", tres_per_node=""),
            ],
        }
    ).encode()
    (p, r, arr), env = a.jobs(body)
    assert env == type(env)(slurm_version="22.05.8")
    assert (p.state, p.reason, p.min_nodes, p.max_nodes, p.cpus, p.cpus_per_task) == (
        "PENDING",
        "Priority",
        2,
        2,
        2,
        1,
    )
    assert p.whole_node_memory and p.memory_bytes == 32000 * MIB
    assert (p.gpus_per_node, p.gpus) == (1, 2)
    assert (p.time_limit_seconds, p.start_time, p.end_time) == (300, 1795968000.0, None)
    assert p.priority == 4294901752 and p.array_job_id is None and not p.exclusive
    assert (r.array_job_id, r.array_task_id, r.array_max_tasks) == (6, 3, 4)
    assert r.memory_per_node_bytes == 1000 * MIB and not r.whole_node_memory
    assert (r.cpus_per_task, r.exclusive, r.time_limit_seconds, r.gpus) == (2, True, None, 1)
    assert (arr.array_task_string, arr.array_pending_tasks, arr.array_max_tasks) == ("1-10", 10, 3)


def test_v38_nodes_partitions_diag() -> None:
    a = adapter_for("v0.0.38")
    nodes, _ = a.nodes(
        json.dumps(
            {
                "meta": META38,
                "nodes": [
                    {
                        "name": "c1",
                        "state": "allocated",
                        "state_flags": ["DRAIN"],
                        "cpus": 8,
                        "alloc_cpus": 8,
                        "real_memory": 16000,
                        "alloc_memory": 16000,
                        "free_memory": 23665,
                        "gres": "gpu:tesla:2(S:0)",
                        "gres_used": "gpu:tesla:1(IDX:0)",
                        "features": "a,b",
                        "active_features": "a",
                        "cpu_load": 24,
                        "boot_time": 0,
                        "reason_changed_at": 0,
                        "partitions": ["cpu"],
                    }
                ],
            }
        ).encode()
    )
    (n,) = nodes
    assert (n.state, n.flags, n.cpus, n.effective_cpus) == ("ALLOCATED", ("DRAIN", "DRAINING"), 8, 8)
    assert (n.free_memory_bytes, n.gpus, n.gpus_used) == (23665 * MIB, 2, 1)
    assert (n.features, n.active_features, n.cpu_load, n.boot_time) == (("a", "b"), ("a",), 0.24, None)

    parts, _ = a.partitions(
        json.dumps(
            {
                "meta": META38,
                "partitions": [
                    {
                        "name": "cpu",
                        "flags": ["default"],
                        "nodes": "c[1-3]",
                        "total_nodes": 3,
                        "total_cpus": 24,
                        "maximum_nodes_per_job": -1,
                        "max_time_limit": -1,
                        "maximum_cpus_per_node": -1,
                        "default_time_limit": None,
                        "min nodes per job": 1,
                        "state": "UP",
                        "priority_tier": 1,
                        "qos": "gpuq",
                    },
                    {
                        "name": "short",
                        "max_time_limit": 60,
                        "maximum_nodes_per_job": 4,
                        "min_nodes_per_job": 2,
                    },
                ],
            }
        ).encode()
    )
    cpu, short = parts
    assert (cpu.is_default, cpu.max_nodes_per_job, cpu.max_time_seconds, cpu.max_cpus_per_node) == (
        True,
        None,
        None,
        None,
    )
    assert cpu.min_nodes_per_job == 1 and cpu.total_cpus == 24
    assert (cpu.qos, short.qos) == ("gpuq", "")
    assert (short.is_default, short.max_nodes_per_job, short.max_time_seconds, short.min_nodes_per_job) == (
        False,
        4,
        3600,
        2,
    )

    diag, _ = a.diag(
        json.dumps(
            {"meta": META38, "statistics": {"req_time": 10, "req_time_start": 5, "bf_cycle_mean": 1033}}
        ).encode()
    )
    assert (diag.stats_time, diag.stats_reset_time, diag.backfill_cycle_mean_seconds) == (10.0, 5.0, 0.001033)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.41", "v0.0.45"])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_not_json(version: str, endpoint: str) -> None:
    with pytest.raises(errors.NotJSONError) as ei:
        getattr(adapter_for(version), endpoint)(b"<html><body>502 Bad Gateway</body></html>")
    assert ei.value.endpoint == endpoint and ei.value.kind == "not_json"
    assert "502 Bad Gateway" in str(ei.value)


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.45"])
def test_truncated(version: str) -> None:
    body = (
        body40([job40(), job40(job_id=43)])
        if version != "v0.0.38"
        else json.dumps({"jobs": [job38()]}).encode()
    )
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(errors.TruncatedError) as ei:
            adapter_for(version).jobs(body[:cut])
        assert ei.value.endpoint == "jobs" and ei.value.kind == "truncated"
    with pytest.raises(errors.TruncatedError):
        adapter_for(version).job_array(b'[{"job_id": 1, "job_st')


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b"[]", "$"),
        (b'{"jobs": {}}', "$.jobs"),
        (b'{"jobs": [{"job_state": ["PENDING"]}]}', "$.jobs[0]"),  # missing job_id
        (b'{"jobs": [{"job_id": 1}]}', "$.jobs[0]"),  # missing job_state
        (b'{"jobs": [{"job_id": "x", "job_state": ["PENDING"]}]}', "$.jobs[0].job_id"),
        (b'{"jobs": [{"job_id": 1, "job_state": ["PENDING"], "cpus": 5}]}', "$.jobs[0].cpus"),
        (b'{"jobs": [], "last_update": 7}', "$.last_update"),
    ],
)
def test_wrong_shape_names_the_path(body: bytes, path: str) -> None:
    with pytest.raises(errors.ShapeError) as ei:
        adapter_for("v0.0.45").jobs(body)
    assert f"`{path}`" in str(ei.value)
    assert ei.value.endpoint == "jobs" and ei.value.kind == "shape"


def test_missing_job_id_v38_and_job_array() -> None:
    with pytest.raises(errors.ShapeError, match=r"missing required field `job_id` - at `\$\.jobs\[1\]`"):
        adapter_for("v0.0.38").jobs(json.dumps({"jobs": [job38(), {"job_state": "RUNNING"}]}).encode())
    with pytest.raises(errors.ShapeError, match=r"missing required field `job_id` - at `\$\[0\]`"):
        adapter_for("v0.0.41").job_array(b'[{"job_state": ["RUNNING"]}]')
    with pytest.raises(errors.ShapeError, match=r"missing required field `name`"):
        adapter_for("v0.0.41").nodes(b'{"nodes": [{"state": ["IDLE"]}]}')


def test_empty_job_state_is_shape_error() -> None:
    with pytest.raises(errors.ShapeError, match="empty job state") as ei:
        adapter_for("v0.0.43").jobs(body40([job40(job_state=[])]))
    assert ei.value.endpoint == "jobs"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_missing_data_field(endpoint: str) -> None:
    a = adapter_for("v0.0.44")
    with pytest.raises(errors.ShapeError, match="missing required field"):
        getattr(a, endpoint)(json.dumps({"meta": META40, "errors": []}).encode())
    failed = {
        "meta": META40,
        "errors": [{"error": "Unable to query", "description": "slurmctld down", "error_number": 1007}],
    }
    with pytest.raises(errors.SlurmReportedError, match="slurmctld down") as ei:
        getattr(a, endpoint)(json.dumps(failed).encode())
    assert ei.value.endpoint == endpoint


def test_envelope_errors_and_v38_error_shape() -> None:
    env = adapter_for("v0.0.45").envelope(
        json.dumps(
            {
                "meta": META40,
                "errors": [{"description": "bad", "error": "x", "error_number": 3}, {"error_number": 9}],
                "warnings": [{"description": "w"}],
            }
        ).encode(),
        "ping",
    )
    assert env.errors == ("x: bad", "error 9") and env.warnings == ("w",)
    env38 = adapter_for("v0.0.38").envelope(
        json.dumps({"meta": META38, "errors": [{"error": "oops", "error_number": 1}]}).encode(), "ping"
    )
    assert env38.errors == ("oops",) and env38.slurm_version == "22.05.8" and env38.last_update is None


@pytest.mark.parametrize("bad", [None, 42, object()])
def test_non_bytes_input_is_not_json(bad: Any) -> None:
    with pytest.raises(errors.NotJSONError):
        adapter_for("v0.0.45").jobs(bad)


def test_empty_and_whitespace_bodies() -> None:
    for body in (b"", b"   "):
        with pytest.raises((errors.TruncatedError, errors.NotJSONError)):
            adapter_for("v0.0.45").jobs(body)


# --------------------------------------------------------------------------- shared payloads (optional)

SHARED_DIRS = _version_dirs(SHARED)


@pytest.mark.skipif(not SHARED_DIRS, reason="../shared/slurm-payloads not present")
@pytest.mark.parametrize("vdir", SHARED_DIRS, ids=_ids(SHARED_DIRS))
def test_shared_payloads_match_squeue(vdir: Path) -> None:
    got = _load(vdir)
    jobs = {j.job_id: j for j in got["jobs"][0]}
    lines = (vdir.parent / "squeue.txt").read_text().splitlines()[1:]
    # JOBID|PARTITION|STATE|REASON|NODES|CPUS|MIN_MEMORY|TIME_LIMIT|TRES_PER_NODE|NODELIST(REASON)
    for line in lines:
        jid, part, state, reason, nnodes, cpus, _mem, tl, _tpn, _nl = line.split("|")
        records = [
            j
            for j in jobs.values()
            if (f"{j.array_job_id}_" if j.array_job_id else "")
            + str(j.array_task_id if j.array_task_id is not None else j.job_id)
            == jid
            or jid.startswith(f"{j.job_id}_[")
        ]
        assert records, jid
        j = records[0]
        assert (j.state, j.reason, j.partitions, j.min_nodes, j.cpus) == (
            state,
            reason,
            (part,),
            int(nnodes),
            int(cpus),
        )
        assert j.time_limit_seconds == _slurm_duration(tl)


@pytest.mark.parametrize("version", ["v0.0.42", "v0.0.44", "v0.0.45"])
def test_spread_job_flag(version: str) -> None:
    body = json.loads((RECORDED / "slurm-26.05.5" / version / "jobs.json").read_bytes())
    body["jobs"][0]["flags"] = ["SPREAD_JOB", "EXACT_TASK_COUNT_REQUESTED"]
    jobs, _ = adapter_for(version).jobs(json.dumps(body).encode())
    assert jobs[0].spread and not any(j.spread for j in jobs[1:])


@pytest.mark.parametrize("version", ["v0.0.42", "v0.0.44", "v0.0.45"])
def test_gpus_per_task_and_memory_per_gpu(version: str) -> None:
    # as the lab's 26.05 showed them: --gpus-per-task=1 -n2 names its GPUs only in tres_per_task;
    # --gpus=2 --mem-per-gpu=3000 keeps 3000 in memory_per_node and the 6000 MB total in the TRES request
    body = json.loads((RECORDED / "slurm-26.05.5" / version / "jobs.json").read_bytes())
    per_task, per_gpu = body["jobs"][0], body["jobs"][1]
    per_task.update(
        tres_per_task="gres/gpu=1", tres_per_job="", tres_per_node="", tres_req_str="cpu=2,node=1"
    )
    per_task["tasks"] = {"set": True, "infinite": False, "number": 2}
    per_gpu.update(
        memory_per_tres="gres/gpu:3000", tres_per_job="gres/gpu:2", tres_req_str="cpu=1,mem=6000M,node=1"
    )
    per_gpu["memory_per_node"] = {"set": True, "infinite": False, "number": 3000}
    per_gpu["memory_per_cpu"] = {"set": False, "infinite": False, "number": 0}
    per_task["tres_alloc_str"] = per_gpu["tres_alloc_str"] = ""  # pending: nothing allocated yet
    jobs, _ = adapter_for(version).jobs(json.dumps(body).encode())
    assert (jobs[0].gpus, jobs[0].tasks) == (2, 2)
    assert (jobs[1].gpus, jobs[1].memory_per_node_bytes, jobs[1].memory_bytes) == (2, None, 6000 * MIB)
    assert not jobs[1].whole_node_memory


@pytest.mark.parametrize("version", ["v0.0.41", "v0.0.42", "v0.0.44", "v0.0.45"])
@pytest.mark.parametrize(("tasks", "per_gpu", "gpus"), [(3, 1, 3), (5, 2, 3), (2, 4, 1)])
def test_ntasks_per_gpu_alone_implies_gpus(version: str, tasks: int, per_gpu: int, gpus: int) -> None:
    """As the lab's 26.05 showed ``-n3 --ntasks-per-gpu=1`` where AccountingStorageTRES has no gres/gpu:
    ``tasks_per_tres`` 1, every ``tres_per_*`` empty, no GPU in ``tres_req_str`` — Slurm allocates
    ceil(tasks / K) GPUs. A GPU count named elsewhere (``--gpus=N --ntasks-per-gpu=K``) stands."""
    version_dir = "slurm-24.11.5" if version in ("v0.0.41",) else "slurm-26.05.5"
    body = json.loads((RECORDED / version_dir / version / "jobs.json").read_bytes())
    implied, named = body["jobs"][0], body["jobs"][1]
    for job, per_job in ((implied, ""), (named, "gres/gpu:7")):
        job.update(tres_per_job=per_job, tres_per_node="", tres_per_task="", tres_alloc_str="")
        job.update(tres_req_str=f"cpu={tasks},node=1,billing={tasks}")
        job["tasks"] = num(tasks)
        job["tasks_per_tres"] = num(per_gpu)
    jobs, _ = adapter_for(version).jobs(json.dumps(body).encode())
    assert (jobs[0].gpus, jobs[0].tasks) == (gpus, tasks)
    assert jobs[1].gpus == 7


def test_a_maximum_slurm_packed_as_the_minimum_is_no_maximum() -> None:
    """As the lab's 26.05 showed them at zero nodes: ``--gpus=5`` and ``-n1 --gpus=6`` both show node_count
    1 and max_nodes 1 — the first gave no maximum (slurmctld packs max(minimum, 0)) and runs on 2 nodes,
    the second gave one task (EXACT_TASK_COUNT_REQUESTED), whose node it stays on. A ``-c2`` job's record
    carries its maximum as asked (0: none); a range (-N1-3) is a maximum; a running job's is its own."""
    common = {"node_count": num(1), "cpus": num(1), "tasks": num(1), "cpus_per_task": num(1)}
    gpus = {"tres_per_node": "", "tres_per_job": "gres/gpu:5", "tres_req_str": "cpu=1,node=1,gres/gpu=5"}
    plain = job40(**common, **gpus, max_nodes=num(1), flags=["EXACT_MEMORY_REQUESTED"])
    exact = job40(**common, **gpus, job_id=43, max_nodes=num(1), flags=["EXACT_TASK_COUNT_REQUESTED"])
    per_node = job40(**common, **gpus, job_id=44, max_nodes=num(1), tasks_per_node=num(1))
    ranged = job40(**common, job_id=45, max_nodes=num(3))
    running = job40(**common, job_id=46, job_state=["RUNNING"], max_nodes=num(1))
    jobs, _ = adapter_for("v0.0.44").jobs(body40([plain, exact, per_node, ranged, running]))
    assert [j.max_nodes for j in jobs] == [None, 1, 1, 3, 1]


def test_node_ranges_asked_and_implied() -> None:
    """``-N1-3`` is a range; ``-n4`` shows max_nodes 4 too (the maximum it implies: v0.0.45 flags it
    JOB_IMPLICIT_MAX_NODES, v0.0.44 does not) — read as implied when it equals the task count and no
    ``-N`` above 1 is requested (``-N2-4 -n4``: requested node=2, a range)."""
    base = {"cpus": num(4), "cpus_per_task": num(1), "tres_per_node": "", "tres_per_job": ""}
    flags = ["EXACT_TASK_COUNT_REQUESTED"]
    asked = job40(**base, node_count=num(1), max_nodes=num(3), tasks=num(1), tres_req_str="cpu=1,node=1")
    implied = job40(
        **base, job_id=43, node_count=num(1), max_nodes=num(4), tasks=num(4), flags=flags,
        tres_req_str="cpu=4,node=1",
    )  # fmt: skip
    ranged = job40(
        **base, job_id=44, node_count=num(2), max_nodes=num(4), tasks=num(4), flags=flags,
        tres_req_str="cpu=4,node=2",
    )  # fmt: skip
    flagged = job40(
        **base, job_id=45, node_count=num(2), max_nodes=num(8), tasks=num(4),
        flags=["JOB_IMPLICIT_MAX_NODES"], tres_req_str="cpu=4,node=2",
    )  # fmt: skip
    least = job40(
        **base, job_id=46, node_count=num(1), max_nodes=num(3), tasks=num(1),
        flags=["PREFER_MINIMUM_NODE_COUNT"], tres_req_str="cpu=1,node=1",
    )  # fmt: skip  # -N1-3 --use-min-nodes
    jobs, _ = adapter_for("v0.0.44").jobs(body40([asked, implied, ranged, flagged, least]))
    assert [(j.node_range, j.tasks_exact) for j in jobs] == [
        (True, False),
        (False, True),
        (True, True),
        (False, False),
        (False, False),
    ]


def test_partition_gpu_defaults_as_the_record_shows_them() -> None:
    """As the lab's 26.05 showed them under ``JobDefaults=DefCpuPerGPU=4,DefMemPerGPU=6000``: at zero nodes
    ``--gpus=2`` has memory_per_node 0 and its TRES request mem=12000M (the default, not the whole node);
    ``--mem=0 --gpus=1`` is marked EXACT_MEMORY_REQUESTED and carries no TRES memory (the whole node).
    In a partition with nodes ``cpus_per_tres`` shows the CPU default (gpu:4): 4 CPUs a GPU, unless -c."""
    common = {"node_count": num(1), "cpus": num(1), "tasks": num(1), "cpus_per_task": num(1)}
    gpus = {
        "tres_per_node": "",
        "tres_per_job": "gres/gpu:2",
        "memory_per_node": num(0),
        "memory_per_cpu": num(None),
    }
    default = job40(**common, **gpus, tres_req_str="cpu=1,mem=12000M,node=1,billing=1,gres/gpu=2")
    whole = job40(
        **common, **gpus, job_id=43, tres_req_str="cpu=1,node=1,gres/gpu=2", flags=["EXACT_MEMORY_REQUESTED"]
    )
    tested = job40(
        **common, job_id=44, tres_per_node="", tres_per_job="gres/gpu:2", cpus_per_tres="gpu:4",
        tres_req_str="cpu=1,mem=1000M,node=1,gres/gpu=2",
    )  # fmt: skip
    own = job40(
        **{**common, "cpus": num(2), "cpus_per_task": num(2)}, job_id=45, tres_per_node="",
        tres_per_job="gres/gpu:2", cpus_per_tres="gpu:4", flags=["EXACT_CPU_COUNT_REQUESTED"],
        tres_req_str="cpu=2,mem=1000M,node=1,gres/gpu=2",
    )  # fmt: skip
    jobs, _ = adapter_for("v0.0.44").jobs(body40([default, whole, tested, own]))
    assert [(j.whole_node_memory, j.memory_per_node_bytes, j.memory_bytes) for j in jobs[:2]] == [
        (False, None, 12000 * MIB),
        (True, None, 0),
    ]
    assert [j.cpus for j in jobs] == [1, 1, 8, 2]
    assert [j.cpus_exact for j in jobs] == [False, False, False, True]


def test_an_overcommitting_pending_job_needs_its_requested_nodes_not_slurms_estimate() -> None:
    # as the lab's 26.05 showed `sbatch -O -n16` on 8-CPU nodes: cpus 1, tasks 16, node_count 2 (Slurm's
    # estimate from 16 tasks) and tres node=1 — it ran on one node; without -O the same -n16 needs 2
    common = {"tasks": num(16), "cpus_per_task": num(1), "node_count": num(2), "memory_per_cpu": num(None)}
    over = job40(**common, cpus=num(1), tres_req_str="cpu=1,mem=16000M,node=1,billing=1")
    plain = job40(**common, job_id=43, cpus=num(16), tres_req_str="cpu=16,mem=16000M,node=1,billing=16")
    asked = job40(
        **common, job_id=44, cpus=num(1), tres_req_str="cpu=1,mem=16000M,node=2,billing=1"
    )  # -O -N2
    running = job40(
        **common,
        job_id=45,
        job_state=["RUNNING"],
        cpus=num(1),
        tres_req_str="cpu=1,mem=16000M,node=1,billing=1",
    )
    jobs, _ = adapter_for("v0.0.45").jobs(body40([over, plain, asked, running]))
    assert [j.min_nodes for j in jobs] == [1, 2, 2, 2]  # a running job's node_count is what it holds
    jobs38, _ = adapter_for("v0.0.38").jobs(
        json.dumps(
            {
                "jobs": [
                    job38(cpus=1, tasks=16, node_count=2, tres_req_str="cpu=1,mem=16000M,node=1,billing=1")
                ]
            }
        ).encode()
    )
    assert jobs38[0].min_nodes == 1
