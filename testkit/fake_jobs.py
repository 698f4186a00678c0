"""A mutable job table that answers ``/jobs``, ``/jobs/state/`` and ``/job/{id}`` as slurmrestd 26.05 does.

Records are the lab's recorded v0.0.45 job records (``tests/data/recorded``), changed through methods
named after what happens in Slurm (submit, start, hold, purge, an array task splitting off). The answers
follow the lab's facts (``../shared/notes/slurm-lab.md``): ``/jobs?update_time=T`` returns every job once
anything changed after T (304 otherwise); ``/jobs/state/`` lists ``N``, ``N_T`` (array tasks, each pending
task of a pending array record on its own) and ``N+K`` (het components) with the state only;
``/job/{id}`` of an array's or het job's leader returns all of its records, 404 for an unknown id.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from testkit.paths import RECORDED_2605

Record = dict[str, Any]


def num(n: int) -> dict[str, Any]:
    """A v0.0.40+ number."""
    return {"set": True, "infinite": False, "number": n}


UNSET = {"set": False, "infinite": False, "number": 0}


def task_ids(text: str) -> list[int]:
    """``"3-20%2"`` / ``"1,4-5"`` → the task ids."""
    out: list[int] = []
    for part in text.partition("%")[0].split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def ranges(ids: list[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3-5,9"`` (as Slurm writes task ids)."""
    parts: list[str] = []
    for i in sorted(ids):
        if parts and (last := parts[-1].split("-")[-1]) and int(last) == i - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)


@dataclass
class JobTable:
    document: Record
    """The recorded ``/jobs`` answer: its envelope is reused, its records seed :attr:`records`."""
    records: dict[int, Record] = field(default_factory=dict)
    last_update: int = 1_800_000_000
    next_id: int = 1000
    reads: Counter[str] = field(default_factory=Counter)
    """Requests answered, by ``jobs``, ``jobs/state``, ``job``."""
    bad_state_entries: list[dict[str, Any]] = field(default_factory=list)
    """Entries a test adds to every ``/jobs/state`` answer (bad input: an unreadable id or state)."""
    state_asks: list[tuple[int, ...] | None] = field(default_factory=list)
    """Every ``/jobs/state`` request's ``job_id``s, in order (None: the whole answer)."""
    counts: Counter[str] = field(default_factory=Counter)
    """slurmctld's job counters (``/diag``'s ``jobs_submitted`` ... without the prefix) for what happened
    through :meth:`submit`, :meth:`start`, :meth:`start_array_task` and :meth:`end` — counted as slurmctld
    counts (``statistics.c``): a cancel by its RPC, and a running job's cancel by its batch script's
    completion too. :meth:`set` and :meth:`purge` count nothing (a requeue, a preemption, a purge)."""

    @classmethod
    def recorded(cls) -> JobTable:
        doc = json.loads((RECORDED_2605 / "jobs.json").read_bytes())
        table = cls(document=doc)
        for rec in doc["jobs"]:
            table.records[rec["job_id"]] = rec
        table.next_id = max(table.records) + 1
        return table

    # -- answers ---------------------------------------------------------------------------------------

    def listing(self, update_time: int | None = None) -> bytes | None:
        """The ``/jobs`` body; None for "not modified since ``update_time``"."""
        self.reads["jobs"] += 1
        if update_time is not None and update_time >= self.last_update:
            return None
        doc = dict(self.document)
        doc["jobs"] = list(self.records.values())
        doc["last_update"] = num(self.last_update)
        return json.dumps(doc).encode()

    def states(self, ids: Collection[int] | None = None) -> bytes:
        """The ``/jobs/state`` body; with ``ids`` (``?job_id=``) only their records' entries — an array's
        or het job's own id brings all its records, as ``/job/{id}`` does — and nothing for an unknown id."""
        self.reads["jobs/state"] += 1
        self.state_asks.append(None if ids is None else tuple(ids))
        entries = []
        wanted = None if ids is None else self._family(ids)
        for job_id, rec in self.records.items():
            if wanted is not None and job_id not in wanted:
                continue
            state = rec["job_state"]
            if rec["het_job_id"]["number"]:
                entries.append({"job_id": f"{job_id}+{rec['het_job_offset']['number']}", "state": state})
            elif rec["array_job_id"]["number"] and rec["array_task_id"]["set"]:
                entries.append({"job_id": f"{job_id}_{rec['array_task_id']['number']}", "state": state})
            elif rec["array_job_id"]["number"]:
                entries.extend(
                    {"job_id": f"{job_id}_{t}", "state": state} for t in task_ids(rec["array_task_string"])
                )
            else:
                entries.append({"job_id": str(job_id), "state": state})
        entries.extend(self.bad_state_entries)
        return json.dumps(
            {"jobs": entries, "meta": self.document["meta"], "errors": [], "warnings": []}
        ).encode()

    def _family(self, ids: Collection[int]) -> set[int]:
        """``ids`` with the records an array's or het job's own id stands for."""
        asked = set(ids)
        out = {job_id for job_id in asked if job_id in self.records}
        for job_id, rec in self.records.items():
            if rec["array_job_id"]["number"] in asked or rec["het_job_id"]["number"] in asked:
                out.add(job_id)
        return out

    def job(self, job_id: int) -> bytes | None:
        """The ``/job/{id}`` body; None for an id Slurm does not know (404)."""
        self.reads["job"] += 1
        rec = self.records.get(job_id)
        if rec is None:
            return None
        found = [rec]
        if rec["array_job_id"]["number"] == job_id:  # the array's own record: every task comes along
            found = [r for r in self.records.values() if r["array_job_id"]["number"] == job_id]
        elif rec["het_job_id"]["number"] == job_id:
            found = [r for r in self.records.values() if r["het_job_id"]["number"] == job_id]
        doc = dict(self.document)
        doc["jobs"] = found
        return json.dumps(doc).encode()

    # -- what happens in Slurm -----------------------------------------------------------------------------

    def _changed(self) -> None:
        self.last_update += 1

    def submit(self, like: int = 6, **fields: Any) -> int:
        """A new job shaped like record ``like`` (a pending job by default); returns its id."""
        rec = copy.deepcopy(self.records[like])
        job_id = self.next_id
        self.next_id += 1
        rec.update(job_id=job_id, array_job_id=num(0), array_task_id=UNSET, array_task_string="")
        rec.update(het_job_id=num(0), het_job_offset=num(0))
        rec.update(fields)
        self.records[job_id] = rec
        self.counts["submitted"] += 1
        self._changed()
        return job_id

    def set(self, job_id: int, **fields: Any) -> None:
        """Change raw fields of a record (``job_state=[...]``, ``state_reason=...``, ``priority=num(0)``)."""
        self.records[job_id].update(fields)
        self._changed()

    def start(self, job_id: int, nodes: str = "c1") -> None:
        self.set(job_id, job_state=["RUNNING"], state_reason="None", nodes=nodes)
        self.counts["started"] += 1

    def end(self, job_id: int, state: str = "COMPLETED") -> None:
        ran = self.records[job_id]["job_state"][0] != "PENDING"
        self.set(job_id, job_state=[state], state_reason="None")
        if state == "CANCELLED":
            self.counts["canceled"] += 1
        if ran:
            self.counts["failed" if state == "FAILED" else "completed"] += 1

    def purge(self, job_id: int) -> None:
        """MinJobAge passed: Slurm forgets the job."""
        del self.records[job_id]
        self._changed()

    def start_array_task(self, array_id: int) -> int:
        """The lowest pending task of array ``array_id`` splits off into its own RUNNING record."""
        master = self.records[array_id]
        tasks = task_ids(master["array_task_string"])
        throttle = master["array_task_string"].partition("%")[2]
        task, rest = tasks[0], tasks[1:]
        self.counts["started"] += 1
        if not rest:  # the last task runs in the array's own record
            master.update(array_task_id=num(task), array_task_string="", job_state=["RUNNING"])
            master.update(state_reason="None")
            self._changed()
            return array_id
        rec = copy.deepcopy(master)
        job_id = self.next_id
        self.next_id += 1
        rec.update(job_id=job_id, array_task_id=num(task), array_task_string="", job_state=["RUNNING"])
        rec.update(state_reason="None")
        self.records[job_id] = rec
        text = ranges(rest) + (f"%{throttle}" if throttle else "")
        master["array_task_string"] = text
        self._changed()
        return job_id
