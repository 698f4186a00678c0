"""The metric families (exporter.collector) on the recorded payloads of every API version, checked
sample by sample against the squeue/sinfo/scontrol text recorded at the same moment; plus the
semantics on small synthetic snapshots, cardinality flags, label escaping, HELP and promtool.

The expected figures are computed here from the CLI text (or, for diag/licenses/reservations that
no CLI text was recorded for, from the raw JSON), never through exporter.versions/slurmtext.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import collector as col
from exporter.aggregate import aggregate_jobs
from exporter.model import MIB, Diag, Job, License, Node, Partition, Reservation, Snapshot
from exporter.pollstate import EndpointState, PollStatus
from exporter.versions import SUPPORTED_VERSIONS
from testkit.paths import ROOT
from testkit.tools import promtool_path, recorded_snapshot

RECORDED = ROOT / "tests" / "data" / "recorded"
VERSION_DIRS = sorted(
    d for d in RECORDED.glob("slurm-*/v0.0.*") if d.name in SUPPORTED_VERSIONS and (d / "jobs.json").is_file()
)
needs_recordings = pytest.mark.skipif(not VERSION_DIRS, reason="no lab recordings in tests/data/recorded")
NOW = 1_800_000_000.0


def _ids(dirs: list[Path]) -> list[str]:
    return [f"{d.parent.name}/{d.name}" for d in dirs]


STATE_DIRS = [pytest.param(d, id=f"{d.parent.name}/{d.name}") for d in VERSION_DIRS]
ACTIVE = ("pending", "running", "suspended")
"""States plain squeue lists (finished jobs are left out without ``-t all``)."""


# ------------------------------------------------------------------------------------------ helpers


def snapshot_of(vdir: Path) -> Snapshot:
    """A Snapshot built from one recorded version directory through the adapters."""
    return recorded_snapshot(vdir, vdir.name, taken_at=NOW - 3.0)


def ok_status() -> PollStatus:
    st = PollStatus(api_version="v0.0.45", polls=3, last_poll_ok=True, last_success=NOW - 3.0)
    jobs = EndpointState("jobs", fetched_at=NOW - 3.0, last_duration=0.25, successes=3, last_ok=True)
    jobs.errors["timeout"] = 2
    st.endpoints["jobs"] = jobs
    for name, at in (("nodes", NOW - 2.0), ("partitions", NOW - 1.0), ("licenses", NOW - 100.0)):
        st.endpoints[name] = EndpointState(name, fetched_at=at, successes=3, last_ok=True)
    return st


class _Exposition(Collector):
    """What /metrics serves for one snapshot and status at :data:`NOW`: health, then the Slurm families."""

    def __init__(self, snap: Snapshot | None, status: PollStatus, flags: dict[str, Any]) -> None:
        self.snap, self.status, self.flags = snap, status, flags

    def collect(self) -> Any:
        yield from col.health_families(self.snap, self.status, NOW)
        if self.snap is not None:
            yield from col.snapshot_families(self.snap, col.Cardinality(**self.flags))


def registry_for(snap: Snapshot | None, status: PollStatus | None = None, **flags: Any) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Exposition(snap, status if status is not None else ok_status(), flags))
    return reg


def samples(reg: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample named ``name`` as {sorted label items: value}."""
    out = {}
    for fam in reg.collect():
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def by_label(reg: CollectorRegistry, name: str, label: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in samples(reg, name).items()}


def mib(text: str) -> int:
    """A CLI memory figure (``16000``, ``500M``, ``2G``; bare = MiB) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip())
    assert m, f"unexpected memory figure {text!r}"
    return round(
        float(m.group(1)) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[m.group(2)] * MIB
    )


SQUEUE = ("id", "rid", "aid", "tid", "state", "reason", "partition", "user", "account", "qos", "nodes",
          "cpus", "mem", "gres", "limit", "prio", "nodelist")  # fmt: skip
SINFO = ("node", "partition", "state", "cpus", "memory", "free", "gres", "gres_used", "reason")


def squeue_rows(vdir: Path) -> list[dict[str, str]]:
    """``squeue -r``: one line per job and per array task (pending ones included)."""
    text = (vdir.parent / "squeue-r.txt").read_text()
    return [dict(zip(SQUEUE, line.split("|"), strict=True)) for line in text.splitlines() if line.strip()]


def sinfo_rows(vdir: Path) -> list[dict[str, str]]:
    text = (vdir.parent / "sinfo.txt").read_text()
    rows = [dict(zip(SINFO, line.split("|"), strict=True)) for line in text.splitlines() if line.strip()]
    for r in rows:
        r["partition"] = r["partition"].rstrip("*")
    return rows


def scontrol_nodes(vdir: Path) -> list[dict[str, str]]:
    rows = []
    for line in (vdir.parent / "scontrol-nodes.txt").read_text().splitlines():
        if line.strip():
            rows.append({m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)", line)})
    return rows


def cli_state(text: str) -> str:
    """squeue %T → the base state the collector reports (CONFIGURING is a flag on RUNNING)."""
    return {"CONFIGURING": "running", "COMPLETING": "completed"}.get(text, text.lower())


def gres_gpus(text: str) -> int:
    """``gpu:2``, ``gres/gpu:2``, ``gres:gpu:2`` (22.05), ``gpu:a100:2(IDX:0-1)`` → 2; ``(null)`` → 0."""
    total = 0
    for item in re.sub(r"\(.*?\)", "", text).split(","):
        parts = item.removeprefix("gres/").removeprefix("gres:").split(":")
        if parts[0] == "gpu" and parts[-1].isdigit() and len(parts) >= 2:
            total += int(parts[-1])
    return total


def parse_text(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text → {(sample name, sorted labels): value} (for the escaping test)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# --------------------------------------------------------------------- recorded: jobs vs squeue -r


@needs_recordings
@pytest.mark.parametrize("vdir", STATE_DIRS)
def test_recorded_jobs_by_partition_and_state_match_squeue(vdir: Path) -> None:
    reg = registry_for(snapshot_of(vdir))
    expected: Counter[tuple[str, str]] = Counter()
    reasons: Counter[tuple[str, str]] = Counter()
    for r in squeue_rows(vdir):
        for p in r["partition"].split(","):
            expected[(p, cli_state(r["state"]))] += 1
            if r["state"] == "PENDING":
                reasons[(p, r["reason"])] += 1
    got = {
        (dict(k)["partition"], dict(k)["state"]): v
        for k, v in samples(reg, "slurm_jobs").items()
        if v and dict(k)["state"] in ACTIVE
    }
    assert got == dict(expected)
    # array tasks are counted as tasks: 18 pending tasks of array 3 sit in one JSON record
    assert (
        reg.get_sample_value("slurm_jobs_pending", {"partition": "cpu", "reason": "JobArrayTaskLimit"}) == 18
    )
    got_r = {
        (dict(k)["partition"], dict(k)["reason"]): v for k, v in samples(reg, "slurm_jobs_pending").items()
    }
    assert got_r == dict(reasons)
    # known partitions always carry pending and running series, zero or not
    assert reg.get_sample_value("slurm_jobs", {"partition": "cloud", "state": "pending"}) == 0


@needs_recordings
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=_ids(VERSION_DIRS))
def test_recorded_pending_demand_matches_squeue(vdir: Path) -> None:
    """CPUs, nodes, GPUs and memory requested by pending jobs, from ``squeue -r`` (%C %D %b %m):
    memory ``0`` means whole nodes, i.e. the partition's node memory (sinfo) per node requested."""
    reg = registry_for(snapshot_of(vdir))
    node_mem: dict[str, int] = {}
    for r in sinfo_rows(vdir):
        node_mem[r["partition"]] = max(node_mem.get(r["partition"], 0), mib(r["memory"]))
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in squeue_rows(vdir):
        if r["state"] != "PENDING":
            continue
        nodes = int(r["nodes"])
        for p in r["partition"].split(","):
            w = want[p]
            w[0] += int(r["cpus"])
            w[1] += (node_mem[p] if r["mem"] == "0" else mib(r["mem"])) * nodes
            w[2] += gres_gpus(r["gres"]) * nodes
            w[3] += nodes
    for p, (cpus, mem, gpus, nodes) in want.items():
        labels = {"partition": p}
        assert reg.get_sample_value("slurm_jobs_pending_cpus", labels) == cpus, p
        assert reg.get_sample_value("slurm_jobs_pending_memory_bytes", labels) == mem, p
        assert reg.get_sample_value("slurm_jobs_pending_gpus", labels) == gpus, p
        assert reg.get_sample_value("slurm_jobs_pending_nodes", labels) == nodes, p
    # the figures of the lab's queue, spelled out once
    assert want["cpu"] == [34, 138_000 * MIB, 0, 27]
    assert want["gpu"] == [1, 1000 * MIB, 2, 1]


@needs_recordings
@pytest.mark.parametrize("vdir", STATE_DIRS)
def test_recorded_allocations_match_sinfo_and_scontrol(vdir: Path) -> None:
    """Job-side allocations by partition equal the node-side figures Slurm prints: CPUs (sinfo
    CPUsState A), memory (scontrol AllocMem), GPUs (sinfo GresUsed); nodes from squeue %D."""
    reg = registry_for(snapshot_of(vdir))
    cpus: Counter[str] = Counter()
    gpus: Counter[str] = Counter()
    for r in sinfo_rows(vdir):
        cpus[r["partition"]] += int(r["cpus"].split("/")[0])
        gpus[r["partition"]] += gres_gpus(r["gres_used"])
    mem: Counter[str] = Counter()
    for n in scontrol_nodes(vdir):
        for p in n["Partitions"].split(","):
            mem[p] += mib(n["AllocMem"])
    nodes: Counter[str] = Counter()
    for r in squeue_rows(vdir):
        if cli_state(r["state"]) == "running":
            nodes[r["partition"]] += int(r["nodes"])
    for p in cpus:
        labels = {"partition": p}
        assert reg.get_sample_value("slurm_jobs_allocated_cpus", labels) == cpus[p], p
        assert reg.get_sample_value("slurm_jobs_allocated_memory_bytes", labels) == mem[p], p
        assert reg.get_sample_value("slurm_jobs_allocated_gpus", labels) == gpus[p], p
        assert reg.get_sample_value("slurm_jobs_allocated_nodes", labels) == nodes[p], p
        # the partition view (node side) agrees with the job side
        assert reg.get_sample_value("slurm_partition_allocated_cpus", labels) == cpus[p], p
        assert reg.get_sample_value("slurm_partition_allocated_memory_bytes", labels) == mem[p], p
        assert reg.get_sample_value("slurm_partition_allocated_gpus", labels) == gpus[p], p


# ------------------------------------------------------------------ recorded: nodes and partitions


@needs_recordings
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=_ids(VERSION_DIRS))
def test_recorded_per_node_series_match_scontrol(vdir: Path) -> None:
    reg = registry_for(snapshot_of(vdir))
    rows = scontrol_nodes(vdir)
    assert rows
    for n in rows:
        lab = {"node": n["NodeName"]}
        assert reg.get_sample_value("slurm_node_cpus", lab) == int(n["CPUTot"])
        assert reg.get_sample_value("slurm_node_allocated_cpus", lab) == int(n["CPUAlloc"])
        assert reg.get_sample_value("slurm_node_effective_cpus", lab) == int(n["CPUEfctv"])
        assert reg.get_sample_value("slurm_node_memory_bytes", lab) == mib(n["RealMemory"])
        assert reg.get_sample_value("slurm_node_allocated_memory_bytes", lab) == mib(n["AllocMem"])
        free = None if n["FreeMem"] == "N/A" else mib(n["FreeMem"])
        assert reg.get_sample_value("slurm_node_free_memory_bytes", lab) == free
        assert reg.get_sample_value("slurm_node_gpus", lab) == gres_gpus(n["Gres"])
        base, *flags = n["State"].split("+")
        assert reg.get_sample_value("slurm_node_state", {**lab, "state": base.lower()}) == 1
        assert len([k for k in samples(reg, "slurm_node_state") if dict(k)["node"] == n["NodeName"]]) == 1
        for f in flags:
            assert reg.get_sample_value("slurm_node_flag", {**lab, "flag": f.lower()}) == 1
    used = {r["node"]: gres_gpus(r["gres_used"]) for r in sinfo_rows(vdir)}
    for node, g in used.items():
        assert reg.get_sample_value("slurm_node_allocated_gpus", {"node": node}) == g


@needs_recordings
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=_ids(VERSION_DIRS))
def test_recorded_nodes_by_partition_state_flag_match_scontrol(vdir: Path) -> None:
    reg = registry_for(snapshot_of(vdir))
    states: Counter[tuple[str, str]] = Counter()
    flags: Counter[tuple[str, str]] = Counter()
    for n in scontrol_nodes(vdir):
        base, *fl = n["State"].split("+")
        for p in n["Partitions"].split(","):
            states[(p, base.lower())] += 1
            for f in fl:
                flags[(p, f.lower())] += 1
    got = {(dict(k)["partition"], dict(k)["state"]): v for k, v in samples(reg, "slurm_nodes").items()}
    assert got == dict(states)
    got_f = {
        (dict(k)["partition"], dict(k)["flag"]): v for k, v in samples(reg, "slurm_nodes_flagged").items()
    }
    assert got_f == dict(flags)
    assert got_f[("cloud", "powered_down")] == 10


@needs_recordings
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=_ids(VERSION_DIRS))
def test_recorded_partitions_match_sinfo(vdir: Path) -> None:
    """Partition CPUs total/idle and node counts from sinfo's CPUsState (A/I/O/T) and line count;
    memory and GPUs from sinfo's Memory/Gres columns."""
    reg = registry_for(snapshot_of(vdir))
    want: dict[str, list[int]] = defaultdict(lambda: [0] * 7)
    for r in sinfo_rows(vdir):
        a, i, _o, t = (int(x) for x in r["cpus"].split("/"))
        w = want[r["partition"]]
        w[0] += t
        w[1] += i
        w[2] += 1
        w[3] += mib(r["memory"])
        w[4] += gres_gpus(r["gres"])
        w[5] += gres_gpus(r["gres_used"])
        w[6] += a
    for p, (total, idle, nodes, mem, gpus, gpus_used, alloc) in want.items():
        lab = {"partition": p}
        assert reg.get_sample_value("slurm_partition_cpus", lab) == total, p
        assert reg.get_sample_value("slurm_partition_idle_cpus", lab) == idle, p
        assert reg.get_sample_value("slurm_partition_allocated_cpus", lab) == alloc, p
        assert reg.get_sample_value("slurm_partition_nodes", lab) == nodes, p
        assert reg.get_sample_value("slurm_partition_memory_bytes", lab) == mem, p
        assert reg.get_sample_value("slurm_partition_gpus", lab) == gpus, p
        assert reg.get_sample_value("slurm_partition_idle_gpus", lab) == gpus - gpus_used, p
        assert reg.get_sample_value("slurm_partition_state", {**lab, "state": "up"}) == 1
    # lab config (lab/conf.py): cpu has MaxNodes=2, the others are unlimited
    assert reg.get_sample_value("slurm_partition_max_nodes_per_job", {"partition": "cpu"}) == 2
    assert reg.get_sample_value("slurm_partition_max_nodes_per_job", {"partition": "gpu"}) == math.inf


# ----------------------------------------------------------- recorded: diag, licenses, reservations


def _number(v: Any) -> float:
    return float(v["number"]) if isinstance(v, dict) else float(v)


@needs_recordings
@pytest.mark.parametrize("vdir", VERSION_DIRS, ids=_ids(VERSION_DIRS))
def test_recorded_diag_licenses_reservations(vdir: Path) -> None:
    reg = registry_for(snapshot_of(vdir))
    stats = json.loads((vdir / "diag.json").read_bytes())["statistics"]
    assert reg.get_sample_value("slurm_scheduler_jobs_submitted") == stats["jobs_submitted"]
    assert reg.get_sample_value("slurm_scheduler_jobs_started") == stats["jobs_started"]
    assert reg.get_sample_value("slurm_scheduler_cycles") == stats["schedule_cycle_total"]
    assert reg.get_sample_value("slurm_scheduler_cycle_last_seconds") == stats["schedule_cycle_last"] / 1e6
    assert reg.get_sample_value("slurm_scheduler_cycle_max_seconds") == stats["schedule_cycle_max"] / 1e6
    assert reg.get_sample_value("slurm_scheduler_queue_length") == stats["schedule_queue_length"]
    assert reg.get_sample_value("slurm_backfill_cycles") == stats["bf_cycle_counter"]
    assert reg.get_sample_value("slurm_backfill_cycle_last_seconds") == stats["bf_cycle_last"] / 1e6
    assert reg.get_sample_value("slurm_backfill_queue_length") == stats["bf_queue_len"]
    assert reg.get_sample_value("slurm_scheduler_server_threads") == stats["server_thread_count"]
    assert reg.get_sample_value("slurm_scheduler_agent_queue_size") == stats["agent_queue_size"]
    assert reg.get_sample_value("slurm_scheduler_dbd_agent_queue_size") == stats["dbd_agent_queue_size"]

    lic = json.loads((vdir / "licenses.json").read_bytes())["licenses"]
    assert lic
    for raw in lic:
        lab = {"license": raw["LicenseName"]}
        assert reg.get_sample_value("slurm_licenses", lab) == raw["Total"]
        assert reg.get_sample_value("slurm_licenses_used", lab) == raw["Used"]
        assert reg.get_sample_value("slurm_licenses_free", lab) == raw["Free"]
        assert reg.get_sample_value("slurm_licenses_reserved", lab) == raw["Reserved"]

    resv = json.loads((vdir / "reservations.json").read_bytes())["reservations"]
    assert resv
    for raw in resv:
        lab = {"reservation": raw["name"]}
        assert reg.get_sample_value("slurm_reservation_nodes", lab) == raw["node_count"]
        assert reg.get_sample_value("slurm_reservation_cores", lab) == raw["core_count"]
        assert reg.get_sample_value("slurm_reservation_start_timestamp_seconds", lab) == _number(
            raw["start_time"]
        )
        assert reg.get_sample_value("slurm_reservation_end_timestamp_seconds", lab) == _number(
            raw["end_time"]
        )
        info = [
            dict(k) for k in samples(reg, "slurm_reservation_info") if dict(k)["reservation"] == raw["name"]
        ]
        assert len(info) == 1 and info[0]["nodes"] == raw["node_list"]


@needs_recordings
def test_health_families() -> None:
    vdir = VERSION_DIRS[-1]
    snap = snapshot_of(vdir)
    reg = registry_for(snap)
    assert reg.get_sample_value("slurm_up") == 1
    assert (
        reg.get_sample_value("slurm_exporter_poll_errors_total", {"endpoint": "jobs", "kind": "timeout"}) == 2
    )
    assert reg.get_sample_value("slurm_exporter_poll_duration_seconds", {"endpoint": "jobs"}) == 0.25
    assert reg.get_sample_value("slurm_exporter_snapshot_age_seconds") == 3.0
    assert reg.get_sample_value("slurm_exporter_last_success_timestamp_seconds") == NOW - 3.0
    info = {"slurm_cluster": snap.cluster, "slurm_version": snap.slurm_version, "api_version": vdir.name}
    assert reg.get_sample_value("slurm_exporter_info", info) == 1
    # the age of the oldest of jobs, nodes, partitions (licenses are not what the product needs)
    assert reg.get_sample_value("slurm_exporter_data_age_seconds") == 3.0
    # slurm_up 0 when a required endpoint's last fetch failed (licenses still answering) ...
    failing = ok_status()
    failing.endpoints["nodes"].last_ok = False
    assert registry_for(snap, failing).get_sample_value("slurm_up") == 0
    # ... or when its data is older than up_max_age, as while a poll hangs on a frozen slurmrestd
    stuck = ok_status()
    stuck.endpoints["jobs"].fetched_at = NOW - stuck.up_max_age - 1
    assert registry_for(snap, stuck).get_sample_value("slurm_up") == 0
    # before the first snapshot: health only, slurm_up 0, no Slurm families
    empty = registry_for(None, PollStatus())
    assert empty.get_sample_value("slurm_up") == 0
    assert not samples(empty, "slurm_jobs") and not samples(empty, "slurm_node_cpus")


# ------------------------------------------------------------------------------- cardinality flags


@needs_recordings
@pytest.mark.parametrize("vdir", STATE_DIRS)
def test_cardinality_flags(vdir: Path) -> None:
    snap = snapshot_of(vdir)
    default = registry_for(snap)
    names = {s.name for fam in default.collect() for s in fam.samples}
    assert "slurm_node_cpus" in names and "slurm_node_state" in names
    assert not {n for n in names if n.startswith(("slurm_user_", "slurm_account_", "slurm_node_reason"))}

    off = registry_for(snap, per_node=False)
    names_off = {s.name for fam in off.collect() for s in fam.samples}
    assert not {n for n in names_off if n.startswith("slurm_node_")}
    assert "slurm_nodes" in names_off and "slurm_partition_cpus" in names_off  # aggregates stay

    on = registry_for(snap, per_user=True, per_account=True, node_reasons=True)
    rows = squeue_rows(vdir)
    users = Counter((r["user"], cli_state(r["state"])) for r in rows)
    got = {
        (dict(k)["user"], dict(k)["state"]): v
        for k, v in samples(on, "slurm_user_jobs").items()
        if dict(k)["state"] in ACTIVE
    }
    assert got == dict(users)
    accounts = Counter(cli_state(r["state"]) for r in rows)  # the lab's jobs have no account
    got_a = {
        dict(k)["state"]: v
        for k, v in samples(on, "slurm_account_jobs").items()
        if dict(k)["account"] == "" and dict(k)["state"] in ACTIVE
    }
    assert got_a == dict(accounts)
    pend_cpus = sum(int(r["cpus"]) for r in rows if r["state"] == "PENDING")
    assert on.get_sample_value("slurm_user_pending_cpus", {"user": "root"}) == pend_cpus
    alloc_cpus = sum(int(r["cpus"]) for r in rows if cli_state(r["state"]) == "running")
    assert on.get_sample_value("slurm_account_allocated_cpus", {"account": ""}) == alloc_cpus


# --------------------------------------------------------------------------- synthetic semantics


def _synthetic() -> Snapshot:
    weird = 'bad "reason"\\ with\nnewline, ünïcödé'
    return Snapshot(
        taken_at=NOW,
        api_version="v0.0.45",
        cluster="c",
        jobs=(
            # pending array: 10 tasks × (4 CPUs, 2 nodes, 1 GPU per node, 1 GiB per node)
            Job(
                job_id=1,
                array_job_id=1,
                array_task_string="1-10",
                array_pending_tasks=10,
                state="PENDING",
                reason="Priority",
                partitions=("big",),
                cpus=4,
                min_nodes=2,
                gpus=2,
                gpus_per_node=1,
                memory_per_node_bytes=1024 * MIB,
                memory_bytes=2048 * MIB,
                user="alice",
                account="physics",
            ),
            # whole-node memory in a heterogeneous partition: largest node (64 GiB) per node
            Job(
                job_id=2,
                state="PENDING",
                reason=weird,
                partitions=("big",),
                cpus=1,
                min_nodes=3,
                whole_node_memory=True,
                memory_bytes=3 * 8 * 1024 * MIB,
                user="bob",
                account="chem",
            ),
            # pending in two partitions: counts in each; whole-node resolved per partition,
            # falling back to Slurm's TRES figure in a partition without nodes
            Job(
                job_id=3,
                state="PENDING",
                reason="Resources",
                partitions=("big", "empty"),
                cpus=2,
                min_nodes=1,
                whole_node_memory=True,
                memory_bytes=5 * MIB,
                user="bob",
                account="chem",
            ),
            # running, completing, and finished (holds nothing)
            Job(
                job_id=4,
                state="RUNNING",
                partitions=("big",),
                cpus=8,
                min_nodes=1,
                gpus=1,
                memory_bytes=100 * MIB,
                user="alice",
                account="physics",
            ),
            Job(
                job_id=5,
                state="COMPLETED",
                state_flags=("COMPLETING",),
                partitions=("big",),
                cpus=2,
                min_nodes=1,
                memory_bytes=10 * MIB,
                user="alice",
                account="physics",
            ),
            Job(
                job_id=6, state="COMPLETED", partitions=("big",), cpus=64, min_nodes=1, memory_bytes=10 * MIB
            ),
            # a running array task counts once
            Job(
                job_id=7,
                array_job_id=1,
                array_task_id=0,
                state="RUNNING",
                partitions=("big",),
                cpus=4,
                min_nodes=2,
                gpus=2,
                memory_bytes=2048 * MIB,
                user="alice",
                account="physics",
            ),
        ),
        nodes=(
            Node(
                name="n1",
                state="MIXED",
                cpus=16,
                alloc_cpus=14,
                effective_cpus=16,
                memory_bytes=8 * 1024 * MIB,
                alloc_memory_bytes=1024 * MIB,
                gpus=4,
                gpus_used=3,
                partitions=("big",),
            ),
            Node(
                name="n2",
                state="IDLE",
                flags=("DRAIN",),
                cpus=32,
                effective_cpus=30,
                memory_bytes=64 * 1024 * MIB,
                gpus=0,
                partitions=("big",),
                reason=weird,
                reason_set_by="root",
                reason_time=NOW - 60,
            ),
            Node(
                name="n3",
                state="DOWN",
                flags=("NOT_RESPONDING",),
                cpus=8,
                effective_cpus=8,
                memory_bytes=1024 * MIB,
                partitions=("big", "other"),
            ),
        ),
        partitions=(
            Partition(name="big", total_cpus=56, total_nodes=3, max_nodes_per_job=None),
            Partition(name="empty", state="INACTIVE", max_nodes_per_job=4),
            Partition(name="other", state="DRAIN", total_cpus=8, total_nodes=1),
        ),
        diag=Diag(jobs_submitted=7, schedule_cycle_last_seconds=0.5),
        licenses=(License(name="matlab", total=5, used=2, free=3),),
        reservations=(
            Reservation(name="maint", nodes="n[1-3]", node_count=3, start_time=NOW, end_time=None),
        ),
    )


WEIRD = 'bad "reason"\\ with\nnewline, ünïcödé'


def test_pending_demand_rules() -> None:
    reg = registry_for(_synthetic())
    big = {"partition": "big"}
    gib = 1024 * MIB
    # array ×10: 40 CPUs, 20 nodes, 20 GPUs, 20 GiB; job 2: 3 × 64 GiB; job 3: 64 GiB
    assert reg.get_sample_value("slurm_jobs_pending_cpus", big) == 40 + 1 + 2
    assert reg.get_sample_value("slurm_jobs_pending_nodes", big) == 20 + 3 + 1
    assert reg.get_sample_value("slurm_jobs_pending_gpus", big) == 20
    assert reg.get_sample_value("slurm_jobs_pending_memory_bytes", big) == 20 * gib + 3 * 64 * gib + 64 * gib
    assert reg.get_sample_value("slurm_jobs", {**big, "state": "pending"}) == 12
    assert reg.get_sample_value("slurm_jobs_pending", {**big, "reason": "Priority"}) == 10
    assert reg.get_sample_value("slurm_jobs_pending", {**big, "reason": WEIRD}) == 1
    # the two-partition job also counts in "empty" (no nodes: TRES memory)
    empty = {"partition": "empty"}
    assert reg.get_sample_value("slurm_jobs", {**empty, "state": "pending"}) == 1
    assert reg.get_sample_value("slurm_jobs_pending_memory_bytes", empty) == 5 * MIB
    assert reg.get_sample_value("slurm_jobs_pending_cpus", empty) == 2
    # allocated: running (job 4 and array task 7) + completing (job 5); job 6 holds nothing
    assert reg.get_sample_value("slurm_jobs_allocated_cpus", big) == 8 + 4 + 2
    assert reg.get_sample_value("slurm_jobs_allocated_memory_bytes", big) == (100 + 2048 + 10) * MIB
    assert reg.get_sample_value("slurm_jobs_allocated_gpus", big) == 3
    assert reg.get_sample_value("slurm_jobs_allocated_nodes", big) == 4
    assert reg.get_sample_value("slurm_jobs", {**big, "state": "running"}) == 2
    assert reg.get_sample_value("slurm_jobs", {**big, "state": "completed"}) == 2
    # zero series for a known partition without jobs
    assert reg.get_sample_value("slurm_jobs_allocated_cpus", {"partition": "other"}) == 0


def test_optional_dimensions_and_reasons() -> None:
    reg = registry_for(_synthetic(), per_user=True, per_account=True, node_reasons=True)
    gib = 1024 * MIB
    assert reg.get_sample_value("slurm_user_jobs", {"user": "alice", "state": "pending"}) == 10
    assert reg.get_sample_value("slurm_user_jobs", {"user": "alice", "state": "running"}) == 2
    # per user each record counts once; whole-node memory by its first partition ("big": 64 GiB)
    assert reg.get_sample_value("slurm_user_pending_memory_bytes", {"user": "bob"}) == 3 * 64 * gib + 64 * gib
    assert reg.get_sample_value("slurm_account_pending_cpus", {"account": "chem"}) == 3
    assert reg.get_sample_value("slurm_account_allocated_cpus", {"account": "physics"}) == 8 + 4 + 2
    assert (
        reg.get_sample_value("slurm_node_reason_info", {"node": "n2", "reason": WEIRD, "set_by": "root"}) == 1
    )
    assert reg.get_sample_value("slurm_node_reason_timestamp_seconds", {"node": "n2"}) == NOW - 60
    assert reg.get_sample_value("slurm_node_reason_info", {"node": "n1", "reason": "", "set_by": ""}) is None


def test_node_and_partition_rules() -> None:
    reg = registry_for(_synthetic())
    big = {"partition": "big"}
    # idle CPUs only on available nodes: n1 (16-14); n2 drained, n3 down
    assert reg.get_sample_value("slurm_partition_idle_cpus", big) == 2
    assert reg.get_sample_value("slurm_partition_cpus", big) == 56
    assert reg.get_sample_value("slurm_partition_idle_gpus", big) == 1
    assert reg.get_sample_value("slurm_partition_idle_memory_bytes", big) == 7 * 1024 * MIB
    assert reg.get_sample_value("slurm_partition_memory_bytes", big) == (8 + 64 + 1) * 1024 * MIB
    assert reg.get_sample_value("slurm_partition_max_nodes_per_job", big) == math.inf
    assert reg.get_sample_value("slurm_partition_max_nodes_per_job", {"partition": "empty"}) == 4
    assert reg.get_sample_value("slurm_partition_state", {"partition": "empty", "state": "inactive"}) == 1
    assert reg.get_sample_value("slurm_nodes", {"partition": "other", "state": "down"}) == 1
    assert reg.get_sample_value("slurm_nodes_flagged", {"partition": "big", "flag": "drain"}) == 1
    assert reg.get_sample_value("slurm_node_state", {"node": "n3", "state": "down"}) == 1
    assert reg.get_sample_value("slurm_node_flag", {"node": "n3", "flag": "not_responding"}) == 1
    assert reg.get_sample_value("slurm_node_free_memory_bytes", {"node": "n1"}) is None
    assert reg.get_sample_value("slurm_reservation_end_timestamp_seconds", {"reservation": "maint"}) is None
    assert reg.get_sample_value("slurm_reservation_start_timestamp_seconds", {"reservation": "maint"}) == NOW


def test_label_values_are_escaped() -> None:
    text = generate_latest(registry_for(_synthetic(), node_reasons=True)).decode()
    escaped = 'reason="bad \\"reason\\"\\\\ with\\nnewline, ünïcödé"'
    assert escaped in text
    assert "\nnewline" not in text  # no raw newline inside a label value
    parsed = parse_text(text)
    assert parsed[("slurm_jobs_pending", (("partition", "big"), ("reason", WEIRD)))] == 1


def _naive(snap: Snapshot) -> dict[str, dict[str, list[float]]]:
    """The pending/allocated rules applied job by job, the obvious way."""
    node_mem: dict[str, int] = {}
    for node in snap.nodes:
        for p in node.partitions:
            node_mem[p] = max(node_mem.get(p, 0), node.memory_bytes)
    out: dict[str, dict[str, list[float]]] = {"pending": {}, "allocated": {}, "jobs": {}}
    for j in snap.jobs:
        n = j.task_count
        for i, p in enumerate(j.partitions or ("",)):
            key = f"{p}/{j.state}"
            out["jobs"].setdefault(key, [0.0])[0] += n
            if j.state == "PENDING":
                mem = node_mem[p] * j.min_nodes if j.whole_node_memory and node_mem.get(p) else j.memory_bytes
                vals = [j.cpus * n, mem * n, j.gpus * n, j.min_nodes * n]
                acc = out["pending"].setdefault(p, [0.0] * 4)
            elif j.state in ("RUNNING", "SUSPENDED") or "COMPLETING" in j.state_flags:
                vals = [j.cpus, j.memory_bytes, j.gpus, j.min_nodes]
                acc = out["allocated"].setdefault(p, [0.0] * 4)
            else:
                continue
            assert i == 0 or j.state == "PENDING"
            for k, v in enumerate(vals):
                acc[k] += v
    return out


def test_aggregation_equals_naive_rules_on_random_snapshot() -> None:
    rng = random.Random(7)
    parts = ["a", "b", "c", "d"]
    nodes = tuple(
        Node(
            name=f"n{i}",
            state="IDLE",
            memory_bytes=rng.choice([4, 8, 16]) * 1024 * MIB,
            partitions=tuple(rng.sample(parts[:3], rng.randint(1, 2))),
        )
        for i in range(30)
    )
    jobs = []
    for i in range(3000):
        state = rng.choice(["PENDING", "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "FAILED"])
        arr = state == "PENDING" and rng.random() < 0.1
        jobs.append(
            Job(
                job_id=i,
                state=state,
                state_flags=("COMPLETING",) if rng.random() < 0.1 else (),
                reason=rng.choice(["Resources", "Priority"]),
                partitions=(
                    tuple(rng.sample(parts, rng.randint(1, 2)))
                    if state == "PENDING"
                    else (rng.choice(parts),)
                ),
                cpus=rng.randint(1, 64),
                min_nodes=rng.randint(1, 4),
                gpus=rng.randint(0, 2),
                memory_bytes=rng.randint(1, 5000) * MIB,
                whole_node_memory=rng.random() < 0.3,
                array_job_id=i if arr else None,
                array_task_string="1-7" if arr else "",
                array_pending_tasks=7 if arr else 0,
                user=f"u{rng.randrange(5)}",
            )
        )
    snap = Snapshot(taken_at=NOW, api_version="v0.0.45", jobs=tuple(jobs), nodes=nodes)
    agg = aggregate_jobs(snap, per_user=True)
    want = _naive(snap)
    got = agg.partition
    assert {f"{p}/{s}": v for (p, s), v in got.jobs.items()} == {k: v[0] for k, v in want["jobs"].items()}
    assert got.pending == want["pending"]
    assert got.allocated == want["allocated"]
    # per user: every record once
    assert agg.user is not None and agg.account is None
    assert sum(agg.user.jobs.values()) == sum(j.task_count for j in jobs)
    assert sum(v[0] for v in agg.user.allocated.values()) == sum(v[0] for v in want["allocated"].values())


# -------------------------------------------------------------------------------- HELP and promtool


def _all_registries() -> list[tuple[str, CollectorRegistry]]:
    regs = [("synthetic", registry_for(_synthetic(), per_user=True, per_account=True, node_reasons=True))]
    for d in VERSION_DIRS:
        regs.append(
            (d.name, registry_for(snapshot_of(d), per_user=True, per_account=True, node_reasons=True))
        )
    return regs


def test_help_on_every_family_and_naming() -> None:
    for what, reg in _all_registries():
        fams: list[Metric] = list(reg.collect())
        assert len(fams) > 60, what
        names = [f.name for f in fams]
        assert len(names) == len(set(names)), f"{what}: duplicate family"
        for f in fams:
            assert f.documentation.strip(), f"{what}: {f.name} has no HELP"
            assert f.name.startswith("slurm_"), f.name
            assert re.fullmatch(r"[a-z_]+", f.name), f.name
            if f.type == "counter":
                assert all(s.name.endswith("_total") for s in f.samples), f.name
            else:
                assert not f.name.endswith("_total"), f.name
            for s in f.samples:
                for key in ("state", "flag"):
                    if key in s.labels:
                        assert s.labels[key] == s.labels[key].lower(), (f.name, s.labels)
        text = generate_latest(reg).decode()
        helps = set(re.findall(r"^# HELP (\S+) \S", text, re.M))
        types = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        assert types <= helps, f"{what}: TYPE without HELP: {types - helps}"
        # slurmctld-reset statistics are gauges whose HELP says so
        diag = [f for f in fams if f.name.startswith("slurm_scheduler_jobs_")]
        assert diag and all(f.type == "gauge" and "resets" in f.documentation for f in diag)


def test_promtool_check_metrics_is_silent() -> None:
    promtool = promtool_path()
    for what, reg in _all_registries():
        text = generate_latest(reg)
        res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert res.returncode == 0 and not res.stdout and not res.stderr, (
            f"{what}: promtool said: {res.stdout.decode()}{res.stderr.decode()}"
        )
