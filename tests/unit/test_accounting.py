"""Accounting of ended jobs: slurmdbd's records (exporter.versions.slurmdb) checked against what sacct printed
at the same time on the labs, every API version; the totals (exporter.accounting) counted once per job."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from exporter.accounting import Accounting, accounting_families, record_ended
from exporter.errors import SlurmReportedError
from exporter.model import MIB, EndedJob
from exporter.versions.slurmdb import decode_slurmdb_jobs
from testkit.paths import ROOT
from testkit.tools import promtool_path, registry_of

ACCOUNTING = ROOT / "tests" / "data" / "accounting"
RECORDED = sorted(ACCOUNTING.glob("slurm-*/v0.0.*/slurmdb_jobs.json"))


def sacct_jobs(release_dir: Path) -> dict[int, dict[str, str]]:
    """The job lines (not the steps') of the recorded ``sacct -P`` output."""
    lines = (release_dir / "sacct.txt").read_text().splitlines()
    header = lines[0].split("|")
    rows = [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:] if line]
    return {int(r["JobID"]): r for r in rows if r["JobID"].isdigit()}


def seconds(text: str) -> float:
    """sacct's durations: ``[D-]HH:MM:SS`` or ``MM:SS.mmm``."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    value = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return value + (int(days) * 86400 if days else 0)


def tres_mib(text: str, name: str) -> int:
    m = re.search(rf"(?:^|,){re.escape(name)}=(\d+)([MG]?)", text)
    if m is None:
        return 0
    return int(m[1]) * (1024 if m[2] == "G" else 1)


@pytest.mark.parametrize("path", RECORDED, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in RECORDED])
def test_slurmdbd_records_are_what_sacct_printed(path: Path) -> None:
    jobs, _ = decode_slurmdb_jobs(path.read_bytes())
    want = sacct_jobs(path.parent.parent)
    assert {j.job_id for j in jobs} == set(want)
    states = set()
    for job in jobs:
        row = want[job.job_id]
        assert job.state == row["State"].split()[0]  # "CANCELLED by 0"
        assert (job.partition, job.account, job.user) == (row["Partition"], row["Account"], row["User"])
        assert job.elapsed_seconds == seconds(row["Elapsed"])
        assert job.cpus == int(row["AllocCPUS"])
        assert job.memory_bytes == tres_mib(row["AllocTRES"], "mem") * MIB
        assert job.gpus == tres_mib(row["AllocTRES"], "gres/gpu")
        assert job.cpu_seconds_used == pytest.approx(seconds(row["TotalCPU"]), abs=0.002)
        states.add(job.state)
    assert {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"} <= states  # the recorded workload's ends
    assert any(j.gpus for j in jobs) and any(j.cpu_seconds_used > 5 for j in jobs)


def test_a_refused_or_broken_answer_fails_typed() -> None:
    body = b'{"errors": [{"description": "Unable to connect to database", "error_number": 7000}]}'
    with pytest.raises(SlurmReportedError, match="Unable to connect to database"):
        decode_slurmdb_jobs(body)


def ended(job_id: int, state: str, end: float, **kw: object) -> EndedJob:
    base: dict[str, object] = {
        "partition": "cpu",
        "account": "physics",
        "user": "ann",
        "submit_time": 900.0,
        "start_time": 1000.0,
        "elapsed_seconds": int(end - 1000),
        "cpus": 4,
        "cpu_seconds_used": 200.0,
    }
    return EndedJob(job_id=job_id, state=state, end_time=end, **(base | kw))  # type: ignore[arg-type]


def test_each_ended_job_counts_once_across_overlapping_reads() -> None:
    first = [ended(1, "COMPLETED", 1100.0), ended(2, "FAILED", 1200.0), ended(3, "RUNNING", 0.0)]
    acc = record_ended(Accounting(), first, keep_after=1150.0)
    assert acc.ended == {("cpu", "COMPLETED", "physics", "ann"): 1, ("cpu", "FAILED", "physics", "ann"): 1}
    assert set(acc.seen) == {(2, 900.0)}  # job 1 ended before the next window: forgotten
    # the next read overlaps: job 2 again, job 4 new, job 5 never started (cancelled while pending)
    again = [
        ended(2, "FAILED", 1200.0),
        ended(4, "TIMEOUT", 1300.0),
        ended(5, "CANCELLED", 1250.0, start_time=None),
    ]
    acc = record_ended(acc, again, keep_after=1250.0)
    assert acc.ended[("cpu", "FAILED", "physics", "ann")] == 1
    assert acc.ended[("cpu", "TIMEOUT", "physics", "ann")] == 1
    assert acc.ended[("cpu", "CANCELLED", "physics", "ann")] == 1
    assert (
        acc.wait["cpu"].counts[2] == 3 and sum(acc.wait["cpu"].counts) == 3
    )  # 100 s waits (le 300), job 5 none
    assert acc.cpu_seconds_allocated["cpu"] == 4 * (100 + 200 + 300)
    assert acc.cpu_seconds_used["cpu"] == 600.0


def test_families_are_histograms_and_counters_with_the_opt_ins() -> None:
    acc = record_ended(
        Accounting(),
        [
            ended(1, "COMPLETED", 1100.0, gpus=2),
            ended(2, "COMPLETED", 1400.0, user="bob", cpu_seconds_used=1600.0),
        ],
        keep_after=0.0,
    )
    reg = registry_of(accounting_families(acc))
    assert reg.get_sample_value("slurm_jobs_ended_total", {"partition": "cpu", "state": "COMPLETED"}) == 2
    assert (
        reg.get_sample_value(
            "slurm_user_jobs_ended_total", {"user": "bob", "partition": "cpu", "state": "COMPLETED"}
        )
        is None
    )
    run = {"partition": "cpu"}
    assert reg.get_sample_value("slurm_job_run_seconds_bucket", {**run, "le": "300"}) == 1
    assert reg.get_sample_value("slurm_job_run_seconds_bucket", {**run, "le": "+Inf"}) == 2
    assert reg.get_sample_value("slurm_job_run_seconds_sum", run) == 500
    assert reg.get_sample_value("slurm_job_cpu_efficiency_bucket", {**run, "le": "0.5"}) == 1  # 200 / 400
    assert reg.get_sample_value("slurm_job_cpu_efficiency_bucket", {**run, "le": "1"}) == 2  # 1600 / 1600
    assert reg.get_sample_value("slurm_jobs_gpu_seconds_allocated_total", run) == 200
    opted = registry_of(accounting_families(acc, per_account=True, per_user=True))
    labels = {"user": "bob", "partition": "cpu", "state": "COMPLETED"}
    assert opted.get_sample_value("slurm_user_jobs_ended_total", labels) == 1
    physics = {"account": "physics", "partition": "cpu", "state": "COMPLETED"}
    assert opted.get_sample_value("slurm_account_jobs_ended_total", physics) == 2


def test_promtool_accepts_the_accounting_families() -> None:
    jobs, _ = decode_slurmdb_jobs((ACCOUNTING / "slurm-26.05.5/v0.0.45/slurmdb_jobs.json").read_bytes())
    acc = record_ended(Accounting(), jobs, keep_after=0.0)
    text = generate_latest(registry_of(accounting_families(acc, per_account=True, per_user=True)))
    result = subprocess.run(
        [promtool_path(), "check", "metrics"], input=text, capture_output=True, check=False
    )
    assert result.returncode == 0 and not result.stdout and not result.stderr, result.stdout + result.stderr


def test_memory_efficiency_is_the_largest_steps_use_over_what_the_job_held() -> None:
    # the recorded 77-s job is the one jobacct_gather sampled (every 30 s in that recording); the others
    # ended first and carry no memory figure: they are left out, not counted as 0 %
    recorded = ACCOUNTING / "slurm-26.05.5" / "v0.0.45" / "slurmdb_jobs.json"
    jobs, _ = decode_slurmdb_jobs(recorded.read_bytes())
    sampled = [j for j in jobs if j.memory_bytes_used is not None]
    assert [(j.job_id, j.memory_bytes_used, j.memory_bytes) for j in sampled] == [(5, 3833856, 100 * MIB)]
    acc = record_ended(Accounting(), jobs, keep_after=0.0)
    assert sum(h.counts[0] for h in acc.memory_efficiency.values()) == 1  # 3.7 % ≤ 0.1
    assert sum(sum(h.counts) for h in acc.memory_efficiency.values()) == 1
    # a job over its allocation (no cgroup limit) lands above 1
    over = record_ended(
        Accounting(), [ended(1, "COMPLETED", 1100.0, memory_bytes=100, memory_bytes_used=150)], keep_after=0
    )
    reg = registry_of(accounting_families(over))
    run = {"partition": "cpu"}
    assert reg.get_sample_value("slurm_job_memory_efficiency_bucket", {**run, "le": "1"}) == 0
    assert reg.get_sample_value("slurm_job_memory_efficiency_bucket", {**run, "le": "+Inf"}) == 1
    assert reg.get_sample_value("slurm_job_memory_efficiency_sum", run) == 1.5
