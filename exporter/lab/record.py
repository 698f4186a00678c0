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

from exporter.lab.errors import LabError

if TYPE_CHECKING:
    from exporter.lab.lab import Lab

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
