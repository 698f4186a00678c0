"""Record a lab's REST payloads, byte for byte, with the CLI views taken around them.

Layout: ``DIR/slurm-<release>/<api version>/<endpoint>.json`` and, per release, ``squeue.txt``,
``squeue-r.txt``, ``sinfo.txt``, ``scontrol-nodes.txt``, ``scontrol-jobs.txt`` and ``meta.json``.
The text files use the field lists below (no header line; ``|``-separated) so tests can parse them with
:func:`parse_pipe`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.errors import LabError

if TYPE_CHECKING:
    from lab.control import Lab

ENDPOINTS = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations", "ping")

SQUEUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "%i"),  # 12, 20_3 (array task), 20_[4-20%2] (pending array remainder)
    ("record_job_id", "%A"),  # the record's own job id (array tasks have their own)
    ("array_job_id", "%F"),
    ("array_task_id", "%K"),  # N/A, 3, 4-20%2
    ("state", "%T"),  # PENDING, RUNNING, CONFIGURING ...
    ("reason", "%r"),  # None, Resources, Priority, JobHeldUser ...
    ("partition", "%P"),
    ("user", "%u"),
    ("account", "%a"),
    ("qos", "%q"),
    ("min_nodes", "%D"),
    ("cpus", "%C"),
    ("min_memory", "%m"),  # per node, e.g. 500M; 0 = whole node
    ("tres_per_node", "%b"),  # gres/gpu:1 or N/A
    ("time_limit", "%l"),
    ("priority", "%Q"),
    ("nodelist", "%N"),
)
SQUEUE_FORMAT = "|".join(code for _, code in SQUEUE_FIELDS)
"""``squeue -h -o SQUEUE_FORMAT`` (add ``-r`` for one line per array task)."""

SINFO_FIELDS: tuple[tuple[str, str], ...] = (
    ("node", "NodeList"),
    ("partition", "Partition"),  # default partition has a trailing *
    ("state", "StateLong"),  # idle, mixed, allocated, idle~, mixed#, mixed- (planned), down* ...
    ("cpus", "CPUsState"),  # allocated/idle/other/total
    ("memory", "Memory"),  # MB
    ("free_mem", "FreeMem"),  # MB or N/A
    ("gres", "Gres"),  # gpu:2 or (null)
    ("gres_used", "GresUsed"),  # gpu:1 or (null)
    ("reason", "Reason"),  # none or the admin reason
)
SINFO_FORMAT = ",".join(f"{field}:|" for _, field in SINFO_FIELDS[:-1]) + f",{SINFO_FIELDS[-1][1]}:"
"""``sinfo -N -h -O SINFO_FORMAT``: one line per (node, partition)."""

SQUEUE_ARGS = ("squeue", "-h", "-o", SQUEUE_FORMAT)
SQUEUE_R_ARGS = ("squeue", "-h", "-r", "-o", SQUEUE_FORMAT)
SINFO_ARGS = ("sinfo", "-N", "-h", "-O", SINFO_FORMAT)
SCONTROL_NODES_ARGS = ("scontrol", "show", "node", "-o")
SCONTROL_JOBS_ARGS = ("scontrol", "show", "job", "-o")

CLI_FILES: dict[str, tuple[str, ...]] = {
    "squeue.txt": SQUEUE_ARGS,
    "squeue-r.txt": SQUEUE_R_ARGS,
    "sinfo.txt": SINFO_ARGS,
    "scontrol-nodes.txt": SCONTROL_NODES_ARGS,
    "scontrol-jobs.txt": SCONTROL_JOBS_ARGS,
}


def parse_pipe(text: str, fields: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    """Rows of a ``|``-separated squeue/sinfo output as dicts keyed by the field names above."""
    names = [name for name, _ in fields]
    rows = []
    for line in text.splitlines():
        if line.strip():
            parts = line.split("|", len(names) - 1)
            rows.append({name: value.strip() for name, value in zip(names, parts, strict=False)})
    return rows


def parse_scontrol_oneliners(text: str) -> list[dict[str, str]]:
    """``scontrol show ... -o`` lines as dicts (values run to the next ``Key=``)."""
    import re

    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row: dict[str, str] = {}
        for match in re.finditer(r"(\S+?)=(.*?)(?=\s+\S+?=|\s*$)", line):
            row[match.group(1)] = match.group(2)
        rows.append(row)
    return rows


def _cli_snapshot(lab: Lab) -> dict[str, str]:
    return {name: lab.run(list(argv)) for name, argv in CLI_FILES.items()}


def _queue_view(snapshot: dict[str, str]) -> tuple[str, str]:
    return snapshot["squeue.txt"], snapshot["squeue-r.txt"]


def record(lab: Lab, dest: Path, attempts: int = 3) -> Path:
    """Record ``lab`` into ``dest``; returns the ``slurm-<release>`` directory written.

    The CLI views are taken right before and right after the REST calls; if the queue changed in between,
    the whole snapshot is retried (up to ``attempts`` times) so the files describe one moment.
    """
    release = lab.release()
    openapi_paths = set(lab.openapi().get("paths", {}))
    versions = lab.api_versions()
    out = dest / f"slurm-{release}"
    for attempt in range(1, attempts + 1):
        t_before = time.time()
        before = _cli_snapshot(lab)
        t_rest = time.time()
        payloads: dict[str, dict[str, bytes]] = {}
        statuses: dict[str, dict[str, int]] = {}
        for ver in versions:
            for ep in ENDPOINTS:
                path = next(
                    (p for p in (f"/slurm/{ver}/{ep}/", f"/slurm/{ver}/{ep}") if p in openapi_paths), None
                )
                if path is None:
                    continue
                resp = lab.get(path)
                payloads.setdefault(ver, {})[ep] = resp.body
                statuses.setdefault(ver, {})[ep] = resp.status
        t_after = time.time()
        after = _cli_snapshot(lab)
        t_end = time.time()
        stable = _queue_view(before) == _queue_view(after)
        if stable or attempt == attempts:
            break
    bad = [f"{v}/{e}: HTTP {s}" for v, eps in statuses.items() for e, s in eps.items() if s != 200]
    if bad:
        raise LabError("recording failed: " + ", ".join(bad))
    out.mkdir(parents=True, exist_ok=True)
    for ver, eps in payloads.items():
        (out / ver).mkdir(exist_ok=True)
        for ep, body in eps.items():
            (out / ver / f"{ep}.json").write_bytes(body)
    for name, text in before.items():
        (out / name).write_text(text)
    meta: dict[str, Any] = {
        "lab": lab.flavor.name,
        "slurm_release": release,
        "api_versions": versions,
        "endpoints": {ver: sorted(eps) for ver, eps in payloads.items()},
        "cli_before": [t_before, t_rest],
        "rest": [t_rest, t_after],
        "cli_after": [t_after, t_end],
        "queue_unchanged_during_rest": stable,
        "attempts": attempt,
        "squeue_format": SQUEUE_FORMAT,
        "sinfo_format": SINFO_FORMAT,
        "commands": {name: list(argv) for name, argv in CLI_FILES.items()},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


# ------------------------------------------------------------------------------ the first-pass window

WINDOW_PARTITION = "dyn"
WINDOW_LIMITS = ("MaxNodes=4", "MaxTime=30")
"""Set on the zero-node partition while recording (``lab restart`` restores slurm.conf's)."""
WINDOW_JOBS: tuple[tuple[str, str], ...] = (
    ("eligible", "-c8"),
    ("held", "-H -c8"),
    ("too_wide", "-N5 -c8"),
    ("too_long", "-c8 -t 60"),
    ("licenses", "-c8 --licenses=matlab:2"),
    ("future_reservation", "-c8 --reservation=later"),
    ("reservation_elsewhere", "-c8 --reservation=elsewhere"),
    ("dependent", "-c8 -d afterok:{hog}"),
    ("later", "-c8 --begin=now+1hour"),
)
"""``(key, sbatch arguments)`` submitted to the zero-node partition, in this order; ``{hog}`` is the job
holding 4 of the lab's 5 ``matlab`` licenses on ``cpu``. All but ``held`` (JobHeldUser at once) and
``future_reservation`` (Reservation at once) show PartitionConfig until slurmctld's next pass; then
``dependent`` and ``later`` get Dependency and BeginTime, the rest keep it until the partition has a node.
``dependent`` and ``later`` come last: submitting the over-limit ``too_wide`` ends the window of jobs
already queued (seen on 26.05: their reasons were set within 13 ms)."""
WINDOW_PHASES = ("window", "settled", "with_node")
"""The captures: right after submission; 3 s later (one pass, still no node); 4 s after one dynamic node
joined (Slurm's own verdict on every job)."""


def _window_jobs(lab: Lab, version: str) -> bytes:
    resp = lab.get(f"/slurm/{version}/jobs")
    if resp.status != 200:
        raise LabError(f"GET /slurm/{version}/jobs: HTTP {resp.status}")
    return resp.body


def _reasons(body: bytes, ids: dict[str, int]) -> dict[str, str]:
    by_id = {j["job_id"]: j.get("state_reason", "") for j in json.loads(body).get("jobs", [])}
    return {key: str(by_id.get(i, "")) for key, i in ids.items()}


def record_window(lab: Lab, dest: Path, attempts: int = 5) -> Path:
    """Record the jobs of :data:`WINDOW_JOBS` inside slurmctld's first-pass window (the newest API version;
    tests/unit/test_eligibility.py reads it). **Restarts the lab** before and after (its jobs are gone).

    Writes ``dest/window-<release>/<version>/``: ``jobs.json``, ``nodes.json``, ``partitions.json``,
    ``licenses.json``, ``reservations.json``, ``diag.json`` (the window), ``jobs-settled.json``,
    ``jobs-with_node.json``, and ``meta.json`` (job ids by key, each phase's reasons, the limits set).
    A capture in which ``dependent`` or ``later`` no longer shows PartitionConfig missed the window: the
    jobs are cancelled and submitted again, up to ``attempts`` times.
    """
    release = lab.release()
    version = lab.api_versions()[-1]
    lab.restart()
    try:
        part = WINDOW_PARTITION
        lab.run(["scontrol", "update", f"partitionname={part}", *WINDOW_LIMITS])
        for name, start, node in (("later", "now+1hour", "c1"), ("elsewhere", "now", "c2")):
            create = ["scontrol", "create", "reservation", f"reservationname={name}", f"starttime={start}"]
            lab.run([*create, "duration=60", f"nodes={node}", "users=root"])
        hog = lab.sbatch("-p", "cpu", "-t", "10", "--licenses=matlab:4", command="sleep 600")
        _wait_running(lab, hog)
        attempt = 0
        while True:
            attempt += 1
            ids = {"hog": hog}
            for key, args in WINDOW_JOBS:
                argv = ["-p", part, "-t", "10", "-J", key, *args.format(**ids).split()]
                ids[key] = lab.sbatch(*argv, command="sleep 60")
            window = {ep: lab.get(f"/slurm/{version}/{ep}").body for ep in ENDPOINTS if ep != "ping"}
            reasons = _reasons(window["jobs"], ids)
            if reasons["dependent"] == reasons["later"] == "PartitionConfig":
                break
            lab.run(["scancel", "-p", part], check=False)
            if attempt == attempts:
                raise LabError(f"no capture inside the first-pass window in {attempts} attempts")
        time.sleep(3.0)
        settled = _window_jobs(lab, version)
        lab.add_node("dyn-0", dynamic=True)
        time.sleep(4.0)
        with_node = _window_jobs(lab, version)
    finally:
        lab.restart()
    out = dest / f"window-{release}" / version
    out.mkdir(parents=True, exist_ok=True)
    for ep, body in window.items():
        (out / f"{ep}.json").write_bytes(body)
    (out / "jobs-settled.json").write_bytes(settled)
    (out / "jobs-with_node.json").write_bytes(with_node)
    meta = {
        "lab": lab.flavor.name,
        "slurm_release": release,
        "api_version": version,
        "partition": part,
        "limits": list(WINDOW_LIMITS),
        "jobs": ids,
        "arguments": dict(WINDOW_JOBS),
        "attempts": attempt,
        "reasons": {
            phase: _reasons(body, ids)
            for phase, body in zip(WINDOW_PHASES, (window["jobs"], settled, with_node), strict=True)
        },
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


def _wait_running(lab: Lab, job_id: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while lab.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"]).strip() != "RUNNING":
        if time.monotonic() > deadline:
            raise LabError(f"job {job_id} did not start within {timeout:.0f} s")
        time.sleep(0.2)
