"""``/slurmdb/v0.0.4x/jobs`` (slurmdbd's job records, ``sacct``) → :class:`exporter.model.EndedJob`. Pure.

One shape from v0.0.40 to v0.0.45 for what is read here (recorded on 24.11 and 26.05): job-level times are
plain epoch seconds (``start`` 0 when the job never started), ``state.current`` a list whose first word is the
base state, ``tres.allocated`` a list of ``{type, name, count}`` (memory in MiB), and the CPU time in each
step's ``time.total`` (``seconds`` + ``microseconds``; the job-level total stays 0, as ``sacct -X`` shows),
the memory in each step's ``tres.requested.total`` (sacct's ``TRESUsageInTot``: its tasks' peak RSS summed,
in bytes; empty when the step ended before jobacct_gather sampled it).
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter.model import MIB, EndedJob, Envelope

from . import _common as c

__all__ = ["decode_slurmdb_jobs"]


class RawSeconds(Struct, gc=False):
    seconds: int = 0
    microseconds: int = 0


class RawStepTime(Struct, gc=False):
    total: RawSeconds | None = None


class RawStepUsage(Struct, gc=False):
    total: list[c.RawTres] | None = None


class RawStepTres(Struct, gc=False):
    requested: RawStepUsage | None = None


class RawStep(Struct, gc=False):
    time: RawStepTime | None = None
    tres: RawStepTres | None = None


class RawJobTime(Struct, gc=False):
    elapsed: int = 0
    submission: int = 0
    start: int = 0
    end: int = 0


class RawState(Struct, gc=False):
    current: list[str] | None = None


class RawTresLists(Struct, gc=False):
    allocated: list[c.RawTres] | None = None


class RawDbJob(Struct, gc=False):
    job_id: int
    state: RawState | None = None
    partition: str = ""
    account: str = ""
    user: str = ""
    time: RawJobTime | None = None
    tres: RawTresLists | None = None
    steps: list[RawStep] | None = None


class RawDbJobs(Struct, gc=False):
    jobs: list[RawDbJob] | UnsetType = UNSET
    meta: c.RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


_DECODER = msgspec.json.Decoder(RawDbJobs)


def decode_slurmdb_jobs(body: bytes) -> tuple[list[EndedJob], Envelope]:
    """slurmdbd's job records of any v0.0.40+ answer; typed :mod:`exporter.errors` on bad input."""
    return c.decode_records(_DECODER, body, "slurmdb/jobs", "jobs", "job", convert)


def convert(r: RawDbJob) -> EndedJob:
    t = r.time or RawJobTime()
    alloc = {(x.type, x.name): x.count for x in (r.tres.allocated or []) if x.count > 0} if r.tres else {}
    used = sum(
        s.time.total.seconds + s.time.total.microseconds / 1e6
        for s in r.steps or ()
        if s.time and s.time.total
    )
    peaks = [
        t.count
        for s in r.steps or ()
        if s.tres and s.tres.requested
        for t in s.tres.requested.total or ()
        if t.type == "mem" and t.count > 0
    ]
    states = r.state.current if r.state is not None and r.state.current else ["UNKNOWN"]
    return EndedJob(
        job_id=r.job_id,
        state=states[0],
        partition=r.partition,
        account=r.account,
        user=r.user,
        submit_time=float(t.submission) if t.submission else None,
        start_time=float(t.start) if t.start else None,
        end_time=float(t.end) if t.end else None,
        elapsed_seconds=t.elapsed,
        cpus=alloc.get(("cpu", ""), 0),
        memory_bytes=alloc.get(("mem", ""), 0) * MIB,
        gpus=alloc.get(("gres", "gpu"), 0),
        cpu_seconds_used=used,
        memory_bytes_used=max(peaks) if peaks else None,
    )
