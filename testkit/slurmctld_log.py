"""What slurmctld did and when, from its own log (millisecond stamps), and a process's CPU and RSS from
``/proc`` — the clocks the benchmarks measure freshness and cost against."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

LOG_EVENTS = {
    "new": re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\S+)"),
    "start": re.compile(r"(?:Allocate|Started) JobId=(\S+)"),
    "end": re.compile(r"_job_complete: JobId=(\S+) done"),
    "hold": re.compile(r"_hold_job_rec: hold on JobId=(\S+)"),
    "release": re.compile(r"_release_job_rec: release hold on JobId=(\S+)"),
}
"""Kind of change → the log line slurmctld writes when it makes it (group 1: the job's token)."""

CLK_TCK = os.sysconf("SC_CLK_TCK")


def record_id(token: str) -> int | None:
    """``12``, ``2_5(7)`` (array task of record 7), ``68+1(69)`` → the record's job id."""
    if "(" in token:
        token = token[token.index("(") + 1 : token.index(")")]
    digits = token.partition("_")[0].partition("+")[0]
    return int(digits) if digits.isdigit() else None


def log_events(path: Path, start: int) -> tuple[list[tuple[str, int, float]], int]:
    """(kind, job id, epoch seconds) of slurmctld's log lines from byte ``start``; the next start."""
    out: list[tuple[str, int, float]] = []
    with path.open("rb") as f:
        f.seek(start)
        data = f.read()
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("["):
            continue
        stamp = line[1 : line.index("]")]
        for kind, pattern in LOG_EVENTS.items():
            m = pattern.search(line)
            if m and (job_id := record_id(m.group(1))) is not None:
                out.append((kind, job_id, datetime.fromisoformat(stamp).timestamp()))
    return out, start + len(data)


def log_end(path: Path) -> int:
    """The log's size now: where :func:`log_events` starts for what happens from here on."""
    return path.stat().st_size if path.exists() else 0


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def proc_rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid``, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
