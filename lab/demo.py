"""The demo workload: a small queue that shows every job situation the exporter and autoscaler care about.

On the default lab (c1..c3: 8 CPUs, 16000 MB; g1: 8 CPUs, 2 GPUs; cloud p[1-12]; dyn empty) it settles to
the states listed in :data:`DEMO_JOBS` (``expect``). Running jobs have 30 min limits, pending small ones
60 min, so backfill never starts them ahead of the blocked ``-N2 --exclusive`` job.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lab.control import Lab
from lab.errors import LabError
from lab.procs import parse_job_id

SLEEP = ["--wrap", "sleep 3600"]
RESERVATION = "lab_future"


@dataclass(frozen=True)
class DemoJob:
    """One sbatch of the demo; ``expect`` is ``(state, reason)`` at steady state (``None`` = any)."""

    key: str
    args: tuple[str, ...]
    expect: tuple[str, str | None]
    after: str | None = None
    """Key of a job this one depends on (``-d afterok:<id>``)."""
    optional: bool = False
    """Left out where sbatch refuses it (24.11 rejects jobs for a partition with zero nodes)."""


DEMO_JOBS: tuple[DemoJob, ...] = (
    DemoJob(
        "whole_node", ("-p", "cpu", "-n8", "--mem=8000", "-t", "30", "-J", "whole_node"), ("RUNNING", None)
    ),
    DemoJob(
        "half_node", ("-p", "cpu", "-n4", "--mem=4000", "-t", "30", "-J", "half_node"), ("RUNNING", None)
    ),
    DemoJob(
        "throttled_array",
        ("-p", "cpu", "--array=1-20%2", "-n1", "--mem=500", "-t", "30", "-J", "throttled_array"),
        ("PENDING", "JobArrayTaskLimit"),
    ),
    DemoJob(
        "two_nodes",
        ("-p", "cpu", "-N2", "-n2", "--mem=1000", "-t", "30", "-J", "two_nodes"),
        ("RUNNING", None),
    ),
    DemoJob(
        "license",
        ("-p", "cpu", "-n1", "--mem=500", "-L", "matlab:2", "-t", "30", "-J", "license"),
        ("RUNNING", None),
    ),
    DemoJob(
        "exclusive_pair",
        ("-p", "cpu", "-N2", "--exclusive", "-t", "30", "-J", "exclusive_pair"),
        ("PENDING", "Resources"),
    ),
    DemoJob(
        "behind", ("-p", "cpu", "-n8", "--mem=1000", "-t", "60", "-J", "behind"), ("PENDING", "Priority")
    ),
    DemoJob("held", ("-p", "cpu", "-H", "-n1", "-t", "30", "-J", "held"), ("PENDING", "JobHeldUser")),
    DemoJob(
        "dependent",
        ("-p", "cpu", "-n1", "-t", "30", "-J", "dependent"),
        ("PENDING", "Dependency"),
        after="whole_node",
    ),
    DemoJob(
        "later",
        ("-p", "cpu", "-n1", "-t", "30", "--begin", "now+1hour", "-J", "later"),
        ("PENDING", "BeginTime"),
    ),
    DemoJob(
        "too_wide", ("-p", "cpu", "-N3", "-t", "30", "-J", "too_wide"), ("PENDING", "PartitionNodeLimit")
    ),
    DemoJob(
        "gpu_one",
        ("-p", "gpu", "--gres=gpu:1", "-n2", "--mem=2000", "-t", "30", "-J", "gpu_one"),
        ("RUNNING", None),
    ),
    DemoJob(
        "gpu_two",
        ("-p", "gpu", "--gres=gpu:2", "-n1", "--mem=1000", "-t", "60", "-J", "gpu_two"),
        ("PENDING", "Resources"),
    ),
    DemoJob(
        "cloud_pair",
        ("-p", "cloud", "-N2", "-n4", "--mem=2000", "-t", "30", "-J", "cloud_pair"),
        ("CONFIGURING", None),
    ),
    DemoJob(
        "dyn_wait",
        ("-p", "dyn", "-n2", "--mem=1000", "-t", "30", "-J", "dyn_wait"),
        ("PENDING", "PartitionConfig"),
        optional=True,
    ),
)


DEMO_MAX_AGE = 1500.0
"""Seconds a submitted demo stays in its steady state: the cloud nodes time out after ResumeTimeout=1800 s
(their job is requeued) and the running jobs end at their 30-minute limits. Longer than ``make test``'s
live tests (~9 min): at 480 s a run restarted the lab and resubmitted the demo once (~20 s)."""


def fresh_demo(lab: Lab) -> dict[str, int]:
    """Submit the demo, restarting the lab clean first when its demo is older than :data:`DEMO_MAX_AGE`."""
    if demo_age(lab) > DEMO_MAX_AGE:
        lab.down()
        lab.up()
    return submit_demo(lab)


def demo_age(lab: Lab) -> float:
    """Seconds since the lab's demo was submitted (0: none is)."""
    record = lab.state_dir / "demo.json"
    return time.time() - record.stat().st_mtime if record.exists() else 0.0


def submit_demo(lab: Lab) -> dict[str, int]:
    """Submit the demo workload (once per lab run) and create a future reservation; ``{key: job_id}``."""
    record = lab.state_dir / "demo.json"
    if record.exists():
        jobs: dict[str, int] = json.loads(record.read_text())
        return jobs
    jobs = {}
    for job in DEMO_JOBS:
        args = list(job.args)
        if job.after:
            args += ["-d", f"afterok:{jobs[job.after]}"]
        result = lab.run_raw(["sbatch", "-o", "/dev/null", *args, *SLEEP])
        if result.returncode != 0:
            if job.optional:
                continue
            raise LabError(f"sbatch of demo job {job.key} failed: {result.stderr.strip()}")
        jobs[job.key] = parse_job_id(result.stdout)
    lab.run(
        [
            "scontrol",
            "create",
            "reservation",
            f"reservationname={RESERVATION}",
            "starttime=now+2days",
            "duration=120",
            "users=root",
            "nodes=c3",
            "flags=maint",
        ],
        check=False,
    )
    record.write_text(json.dumps(jobs, indent=1) + "\n")
    return jobs


def demo_mismatches(lab: Lab, jobs: dict[str, int]) -> list[str]:
    """What still differs from the demo's steady state (empty when settled)."""
    out = lab.run(["squeue", "-h", "-o", "%i|%T|%r"])
    seen: dict[str, tuple[str, str]] = {}
    running_tasks = 0
    for line in out.splitlines():
        jid, state, reason = line.split("|")
        seen[jid] = (state, reason)
        if jid.startswith(f"{jobs['throttled_array']}_") and state == "RUNNING":
            running_tasks += 1
    problems = []
    for job in DEMO_JOBS:
        if job.key not in jobs:
            continue
        jid = str(jobs[job.key])
        if job.key == "throttled_array":
            jid = next((k for k in seen if k.startswith(f"{jid}_[")), jid)
        state, reason = seen.get(jid, ("GONE", ""))
        want_state, want_reason = job.expect
        if state != want_state or (want_reason is not None and reason != want_reason):
            problems.append(f"{job.key} ({jid}) is {state}/{reason}, want {want_state}/{want_reason or '*'}")
    if running_tasks != 2:
        problems.append(f"throttled_array has {running_tasks} running tasks, want 2")
    return problems


NEVER_SETTLES = (" is GONE/", "/DependencyNeverSatisfied,")
"""What a demo that can no longer reach its steady state shows (a demo job ended, the job depending on it
stuck for good): said at once instead of at the timeout."""


def wait_demo_steady(lab: Lab, jobs: dict[str, int] | None = None, timeout: float = 60.0) -> list[str]:
    """Poll squeue until the demo reached its steady state; LabError with the differences on timeout.
    Returns what differed at the first look (empty: settled already)."""
    jobs = jobs if jobs is not None else submit_demo(lab)
    deadline = time.monotonic() + timeout
    first: list[str] | None = None
    while True:
        problems = demo_mismatches(lab, jobs)
        if first is None:
            first = problems
        if not problems:
            return first
        if time.monotonic() > deadline or any(mark in p for p in problems for mark in NEVER_SETTLES):
            raise LabError("demo workload did not settle: " + "; ".join(problems))
        time.sleep(0.5)
