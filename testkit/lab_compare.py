"""Pure helpers for comparing a :class:`~exporter.model.Snapshot` with what Slurm's own tools print.

Deliberately independent of :mod:`exporter.slurmtext` / :mod:`exporter.versions` (the code under test):
every size, time, TRES and state string the CLI prints is parsed here from scratch.

Inputs are the rows of :func:`lab.record.parse_pipe` (squeue/sinfo with the ``SQUEUE_FIELDS`` /
``SINFO_FIELDS`` layouts) and :func:`lab.record.parse_scontrol_oneliners` (``scontrol show ... -o``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.model import Association, Job, Node, Partition, QosLimits
from lab import Lab
from lab.record import (
    SINFO_ARGS,
    SINFO_FIELDS,
    SQUEUE_FIELDS,
    SQUEUE_FORMAT,
    parse_pipe,
    parse_scontrol_oneliners,
)

# `-t all`: slurmrestd's /jobs lists every job slurmctld still holds (finished ones until MinJobAge);
# plain squeue would hide the finished ones.
SQUEUE = ("squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT)
SQUEUE_R = ("squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT)
"""One line per job and per array task, pending tasks included."""
SCONTROL_NODES = ("scontrol", "-d", "show", "node", "-o")
"""``-d``: adds ``GresUsed``."""
SCONTROL_JOBS = ("scontrol", "show", "job", "-o")
SCONTROL_PARTITIONS = ("scontrol", "show", "partition", "-o")
SCONTROL_LICENSES = ("scontrol", "show", "license", "-o")
SCONTROL_RESERVATIONS = ("scontrol", "show", "reservation", "-o")

VOLATILE = frozenset(
    {
        "RunTime",
        "LastSchedEval",
        "Scheduler",
        "StartTime",  # a pending job's expected start is re-estimated by every backfill cycle
        "EndTime",
        "SchedNodeList",
        "CPULoad",
        "CurrentWatts",
        "AveWatts",
        "LastBusyTime",
    }
)
"""scontrol fields that move with the clock (not with the workload) and that no test compares."""


@dataclass(frozen=True)
class CliView:
    """What Slurm's tools say at one moment, parsed (shared by the live tests)."""

    squeue: list[dict[str, str]]
    squeue_r: list[dict[str, str]]
    sinfo: list[dict[str, str]]
    nodes: list[dict[str, str]]
    jobs: list[dict[str, str]]
    partitions: list[dict[str, str]]
    licenses: list[dict[str, str]]
    reservations: list[dict[str, str]]

    NAMES = (
        "squeue",
        "squeue -r",
        "sinfo",
        "scontrol nodes",
        "scontrol jobs",
        "scontrol partitions",
        "scontrol licenses",
        "scontrol reservations",
    )

    def stable(self) -> tuple[object, ...]:
        """Everything compared, without the clock-driven fields: equal before and after ⇒ no movement."""

        def strip(rows: list[dict[str, str]]) -> list[tuple[tuple[str, str], ...]]:
            return [tuple(sorted((k, v) for k, v in r.items() if k not in VOLATILE)) for r in rows]

        return (
            self.squeue,
            self.squeue_r,
            self.sinfo,
            strip(self.nodes),
            strip(self.jobs),
            strip(self.partitions),
            strip(self.licenses),
            strip(self.reservations),
        )

    def moved(self, after: CliView) -> str:
        """Which views differ from ``after`` (empty when none moved)."""
        pairs = zip(self.NAMES, self.stable(), after.stable(), strict=True)
        return ", ".join(n for n, a, b in pairs if a != b)


def cli_view(lab: Lab) -> CliView:
    return CliView(
        squeue=parse_pipe(lab.run(SQUEUE), SQUEUE_FIELDS),
        squeue_r=parse_pipe(lab.run(SQUEUE_R), SQUEUE_FIELDS),
        sinfo=parse_pipe(lab.run(SINFO_ARGS), SINFO_FIELDS),
        nodes=parse_scontrol_oneliners(lab.run(SCONTROL_NODES)),
        jobs=parse_scontrol_oneliners(lab.run(SCONTROL_JOBS)),
        partitions=parse_scontrol_oneliners(lab.run(SCONTROL_PARTITIONS)),
        licenses=parse_scontrol_oneliners(lab.run(SCONTROL_LICENSES)),
        reservations=parse_scontrol_oneliners(lab.run(SCONTROL_RESERVATIONS)),
    )


MIB = 1_048_576
_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}
_NULL = frozenset({"", "(null)", "N/A", "n/a", "none", "None"})


def is_null(text: str | None) -> bool:
    return text is None or text.strip() in _NULL


# ----- sizes, times, TRES ------------------------------------------------------------------------------


def mb_to_bytes(text: str) -> int | None:
    """A CLI memory size (``16000``, ``8000M``, ``187.50G``; a bare number is MiB) in bytes; None for N/A."""
    text = text.strip()
    if is_null(text):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", text)
    if not m:
        raise ValueError(f"not a Slurm memory size: {text!r}")
    return round(float(m.group(1)) * _UNITS[m.group(2) or "M"] * MIB)


def time_limit_seconds(text: str) -> int | None:
    """squeue ``%l`` / scontrol ``TimeLimit`` (``30:00``, ``1:00:00``, ``1-02:03:04``) in seconds;
    None for ``UNLIMITED`` / ``INFINITE`` / ``NOT_SET``."""
    text = text.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "NOT_SET", "NONE", "N/A"}:
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:  # "MM:SS" or "SS"
        parts.insert(0, 0)
    h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def parse_tres(text: str) -> dict[str, int]:
    """scontrol ``ReqTRES``/``AllocTRES`` (``cpu=8,mem=8000M,node=1,gres/gpu=2``); ``mem`` in bytes."""
    if is_null(text):
        return {}
    out: dict[str, int] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key == "mem":
            out[key] = mb_to_bytes(value) or 0
        else:
            out[key] = int(float(value))
    return out


def gres_gpus(text: str) -> int:
    """GPUs in a node's ``Gres``/``GresUsed`` (``gpu:2``, ``gpu:tesla:1(IDX:0)``, ``(null)``)."""
    if is_null(text):
        return 0
    total = 0
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def gres_by_name_type(text: str) -> dict[tuple[str, str], int]:
    """A node's ``Gres``/``GresUsed`` by (name, type): ``gpu:a100:2(S:0-1)`` → ``{("gpu", "a100"): 2}``,
    ``gpu:2`` → ``{("gpu", ""): 2}``, ``gpu:(null):0(IDX:N/A)`` → ``{("gpu", ""): 0}``."""
    out: dict[tuple[str, str], int] = {}
    if is_null(text):
        return out
    for item in re.split(r",(?![^(]*\))", text):
        parts = re.sub(r"\([^()]*\)$", "", item.strip()).split(":")
        count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else None
        kind = ":".join(parts[1:-1] if count is not None else parts[1:])
        key = (parts[0], "" if kind == "(null)" else kind)
        out[key] = out.get(key, 0) + (1 if count is None else count)
    return out


def tres_per_node_gpus(text: str) -> int:
    """GPUs per node in squeue ``%b`` / scontrol ``TresPerNode`` (``gres/gpu:2``, ``gres:gpu:1``, N/A)."""
    if is_null(text):
        return 0
    total = 0
    for item in text.split(","):
        m = re.fullmatch(r"gres[/:]gpu(?::[^:]+)?:(\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total


def array_task_spec(text: str) -> tuple[str, int | None]:
    """squeue ``%K`` of a pending array record (``3-20%2``) → (task string without throttle, throttle)."""
    tasks, _, throttle = text.partition("%")
    return tasks, int(throttle) if throttle else None


def count_tasks(tasks: str) -> int:
    """Task ids named by ``3-20``, ``1,3,5-7``, ``1-9:2``."""
    n = 0
    for item in filter(None, tasks.split(",")):
        rng, _, step = item.partition(":")
        lo, _, hi = rng.partition("-")
        n += (int(hi or lo) - int(lo)) // int(step or 1) + 1
    return n


# ----- job states ---------------------------------------------------------------------------------------

# squeue %T and scontrol JobState print ONE word (Slurm's job_state_string()): the first of these flags
# that is set, else the base state. So a REST job ["RUNNING", "CONFIGURING", "POWER_UP_NODE"] (a job
# waiting for its cloud nodes to boot) is "CONFIGURING" in squeue; flags not listed here (POWER_UP_NODE,
# LAUNCH_FAILED, UPDATE_DB, ...) are never printed.
JOB_FLAG_PRECEDENCE = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def cli_job_state(state: str, flags: Iterable[str]) -> str:
    """The one word squeue/scontrol print for a job with base ``state`` and ``flags``."""
    flags = set(flags)
    return next((f for f in JOB_FLAG_PRECEDENCE if f in flags), state)


# ----- node states --------------------------------------------------------------------------------------

# scontrol's ``State=`` is the complete state: base + every flag joined by "+"
# (``MIXED+CLOUD+NOT_RESPONDING+POWERING_UP``, ``IDLE+DRAIN``). The snapshot's (state, flags) must equal it,
# except for the derived flag DRAINING that slurm-keda adds (DRAIN on a busy node, see exporter/slurmtext.py).
DERIVED_NODE_FLAGS = frozenset({"DRAINING"})
_NODE_ALIASES = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "UNK": "UNKNOWN", "DRAINED": "DRAIN", "IDLE*": "IDLE"}


def scontrol_node_state(text: str) -> tuple[str, frozenset[str]]:
    """``MIXED+CLOUD+POWERING_UP`` → ("MIXED", {"CLOUD", "POWERING_UP"})."""
    words = [_NODE_ALIASES.get(w, w) for w in text.upper().split("+") if w]
    base, *flags = words
    if base.endswith("*"):  # older scontrol printed "DOWN*" for a non-responding node
        base = base[:-1]
        flags.append("NOT_RESPONDING")
    return base, frozenset(flags)


# sinfo's StateLong (``%T``) prints ONE abbreviated word and at most ONE suffix character, chosen by
# precedence inside Slurm's node_state_string(); so it cannot show every flag. The relation checked is:
# the node's base state is one of the bases the word allows, every flag the word implies is set, and the
# flag of the suffix is set. E.g.
#   "mixed-"  → base MIXED, flag PLANNED (backfill planned this node for a pending job)
#   "idle~"   → base IDLE, flag POWERED_DOWN (a cloud node that is off)
#   "mixed#"  → base MIXED, flag POWERING_UP (also NOT_RESPONDING, which the "#" hides)
#   "alloc#"  → base ALLOCATED, flag POWERING_UP
#   "drain"/"drained" → base IDLE or DOWN, flag DRAIN (nothing running);
#   "draining" → base ALLOCATED or MIXED, flag DRAIN
SINFO_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
_ANY_BASE = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_BUSY = frozenset({"ALLOCATED", "MIXED"})
SINFO_WORDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "idle": (frozenset({"IDLE"}), frozenset()),
    "mixed": (frozenset({"MIXED"}), frozenset()),
    "mix": (frozenset({"MIXED"}), frozenset()),
    "allocated": (frozenset({"ALLOCATED"}), frozenset()),
    "alloc": (frozenset({"ALLOCATED"}), frozenset()),
    "down": (frozenset({"DOWN"}), frozenset()),
    "future": (frozenset({"FUTURE"}), frozenset()),
    "unknown": (frozenset({"UNKNOWN"}), frozenset()),
    "error": (frozenset({"ERROR"}), frozenset()),
    "drained": (frozenset({"IDLE", "DOWN"}), frozenset({"DRAIN"})),
    "drain": (frozenset({"IDLE", "DOWN"}), frozenset({"DRAIN"})),
    "draining": (_BUSY, frozenset({"DRAIN"})),
    "drng": (_BUSY, frozenset({"DRAIN"})),
    "completing": (_ANY_BASE, frozenset({"COMPLETING"})),
    "maint": (_ANY_BASE, frozenset({"MAINTENANCE"})),
    "reserved": (_ANY_BASE, frozenset({"RESERVED"})),
    "planned": (_ANY_BASE, frozenset({"PLANNED"})),
    "inval": (_ANY_BASE, frozenset({"INVALID_REG"})),
    "fail": (_ANY_BASE, frozenset({"DRAIN", "FAIL"})),
    "failing": (_BUSY, frozenset({"DRAIN", "FAIL"})),
    "powered_down": (_ANY_BASE, frozenset({"POWERED_DOWN"})),
    "powering_down": (_ANY_BASE, frozenset({"POWERING_DOWN"})),
    "powering_up": (_ANY_BASE, frozenset({"POWERING_UP"})),
    "power_down": (_ANY_BASE, frozenset({"POWER_DOWN"})),
    "reboot_issued": (_ANY_BASE, frozenset({"REBOOT_ISSUED"})),
    "reboot_requested": (_ANY_BASE, frozenset({"REBOOT_REQUESTED"})),
    "blocked": (_ANY_BASE, frozenset({"BLOCKED"})),
}


def sinfo_node_state(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """sinfo StateLong → (allowed base states, flags that must be set). Unknown words raise ValueError."""
    word = text.strip().lower()
    required: set[str] = set()
    if word and word[-1] in SINFO_SUFFIX_FLAGS:
        required.add(SINFO_SUFFIX_FLAGS[word[-1]])
        word = word[:-1]
    if word not in SINFO_WORDS:
        raise ValueError(f"unknown sinfo node state {text!r}")
    bases, flags = SINFO_WORDS[word]
    return bases, frozenset(required | flags)


# ----- collecting differences ---------------------------------------------------------------------------


@dataclass
class Diffs:
    """Every mismatch found, so one failing test lists all of them instead of the first."""

    items: list[str] = field(default_factory=list)

    def eq(self, where: str, what: str, cli: object, snap: object) -> None:
        if cli != snap:
            self.items.append(f"{where}: {what}: Slurm CLI says {cli!r}, snapshot has {snap!r}")

    def check(self, where: str, what: str, ok: bool, detail: str) -> None:
        if not ok:
            self.items.append(f"{where}: {what}: {detail}")

    def __bool__(self) -> bool:
        return bool(self.items)

    def report(self) -> str:
        return f"{len(self.items)} mismatch(es):\n" + "\n".join(self.items)


def by_key(rows: Iterable[Mapping[str, str]], key: str) -> dict[str, Mapping[str, str]]:
    return {row[key]: row for row in rows}


# ----- whole-snapshot comparisons -------------------------------------------------------------------------


def _int(text: str) -> int:
    """First integer of ``8``, ``1-2`` (scontrol NumNodes of a node range), ``root(0)``-style text."""
    m = re.search(r"-?\d+", text)
    if not m:
        raise ValueError(f"no number in {text!r}")
    return int(m.group(0))


def _null_to_empty(text: str | None) -> str:
    return "" if is_null(text) else str(text)


def display_job_id(job: Job) -> str:
    """squeue's ``%i`` of a record: ``12``, ``3_1`` (array task), ``3_[3-20%2]`` (pending array record)."""
    if job.array_job_id is None:
        return str(job.job_id)
    if job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    throttle = f"%{job.array_max_tasks}" if job.array_max_tasks else ""
    return f"{job.array_job_id}_[{job.array_task_string}{throttle}]"


def compare_jobs(
    jobs: Sequence[Job],
    squeue: Sequence[Mapping[str, str]],
    squeue_r: Sequence[Mapping[str, str]],
    scontrol_jobs: Sequence[Mapping[str, str]],
    node_memory: Mapping[str, int],
    partition_nodes: Mapping[str, Sequence[str]],
    diffs: Diffs,
) -> None:
    """Every job record against ``squeue -t all`` (one line per record), ``squeue -r -t all`` (one line per
    array task) and ``scontrol show job -o``. ``node_memory``: node → RealMemory bytes (from scontrol);
    ``partition_nodes``: partition → its nodes (from sinfo)."""
    sq = by_key(squeue, "record_job_id")
    sc = by_key(scontrol_jobs, "JobId")
    ids = {str(j.job_id) for j in jobs}
    diffs.eq("jobs", "record count (squeue -t all lines)", len(squeue), len(jobs))
    diffs.eq("jobs", "record ids vs squeue %A", sorted(sq, key=int), sorted(ids, key=int))
    diffs.eq("jobs", "record ids vs scontrol JobId", sorted(sc, key=int), sorted(ids, key=int))
    # squeue -r prints every pending array task on its own line (with the array record's own %A);
    # the snapshot keeps the pending remainder as ONE record standing for task_count tasks.
    diffs.eq("jobs", "task count (squeue -r -t all lines)", len(squeue_r), sum(j.task_count for j in jobs))
    tasks_per_record: dict[str, int] = {}
    for row in squeue_r:
        tasks_per_record[row["record_job_id"]] = tasks_per_record.get(row["record_job_id"], 0) + 1

    for j in jobs:
        if str(j.job_id) not in sq or str(j.job_id) not in sc:
            continue  # already reported by the id comparison
        row, ctl = sq[str(j.job_id)], sc[str(j.job_id)]
        where = f"job {row['job_id']} (record {j.job_id}, {j.name})"
        eq = diffs.eq
        # identity and arrays
        eq(where, "squeue %i", row["job_id"], display_job_id(j))
        eq(where, "array job id (%F)", row["array_job_id"], str(j.array_job_id or j.job_id))
        eq(
            where,
            "tasks this record stands for (squeue -r lines)",
            tasks_per_record.get(str(j.job_id), 0),
            j.task_count,
        )
        if row["array_task_id"] == "N/A":
            eq(where, "array_job_id of a non-array job", None, j.array_job_id)
            eq(where, "array_task_id of a non-array job", None, j.array_task_id)
            eq(where, "array_task_string of a non-array job", "", j.array_task_string)
            eq(where, "array_pending_tasks of a non-array job", 0, j.array_pending_tasks)
            eq(where, "scontrol ArrayJobId", None, ctl.get("ArrayJobId"))
        else:
            eq(where, "scontrol ArrayJobId", ctl.get("ArrayJobId"), str(j.array_job_id))
            throttle = ctl.get("ArrayTaskThrottle")
            eq(
                where,
                "array %-throttle (scontrol ArrayTaskThrottle)",
                int(throttle) if throttle else None,
                j.array_max_tasks,
            )
            if row["array_task_id"].isdigit():  # a task of its own
                eq(where, "array_task_id (%K)", int(row["array_task_id"]), j.array_task_id)
                eq(where, "array_task_string of a task", "", j.array_task_string)
            else:  # the pending remainder: "3-20%2"
                tasks, throttle_k = array_task_spec(row["array_task_id"])
                eq(where, "array_task_id of the pending record", None, j.array_task_id)
                eq(where, "array_task_string (%K without %N)", tasks, j.array_task_string)
                eq(where, "array throttle (%K's %N)", throttle_k, j.array_max_tasks)
                eq(where, "array_pending_tasks", count_tasks(tasks), j.array_pending_tasks)
                eq(where, "scontrol ArrayTaskId", row["array_task_id"], ctl.get("ArrayTaskId"))
        # state, reason, placement, owner
        eq(where, "state (%T)", row["state"], cli_job_state(j.state, j.state_flags))
        eq(where, "state (scontrol JobState)", ctl["JobState"], cli_job_state(j.state, j.state_flags))
        eq(where, "reason (%r)", row["reason"], j.reason)
        eq(where, "reason (scontrol Reason)", ctl["Reason"], j.reason)
        eq(where, "partitions (%P)", row["partition"], ",".join(j.partitions))
        eq(where, "partitions (scontrol Partition)", ctl["Partition"], ",".join(j.partitions))
        eq(where, "user (%u)", row["user"], j.user)
        eq(where, "user id (scontrol UserId)", _int(ctl["UserId"]), j.user_id)
        eq(where, "priority (%Q)", int(row["priority"]), j.priority)
        eq(where, "priority (scontrol Priority)", int(ctl["Priority"]), j.priority)
        eq(
            where,
            "licenses (scontrol Licenses)",
            ("" if is_null(ctl.get("Licenses")) else ctl["Licenses"]),
            j.licenses,
        )
        eq(
            where,
            "reservation (scontrol Reservation)",
            ("" if is_null(ctl.get("Reservation")) else ctl["Reservation"]),
            j.reservation,
        )
        # size
        eq(where, "min nodes (%D)", int(row["min_nodes"]), j.min_nodes)
        eq(where, "min nodes (scontrol NumNodes)", _int(ctl["NumNodes"]), j.min_nodes)
        eq(where, "cpus (%C)", int(row["cpus"]), j.cpus)
        eq(where, "cpus (scontrol NumCPUs)", _int(ctl["NumCPUs"]), j.cpus)
        eq(where, "time limit seconds (%l)", time_limit_seconds(row["time_limit"]), j.time_limit_seconds)
        eq(
            where,
            "time limit seconds (scontrol TimeLimit)",
            time_limit_seconds(ctl["TimeLimit"]),
            j.time_limit_seconds,
        )
        # memory. squeue %m is the per-node (or per-CPU) request, "0" when the job gets whole nodes' memory
        # (no --mem and no DefMemPerNode/DefMemPerCPU); scontrol says MinMemoryNode= or MinMemoryCPU=.
        per_node = ctl.get("MinMemoryNode")
        per_cpu = ctl.get("MinMemoryCPU")
        if row["min_memory"] == "0":
            eq(where, "whole_node_memory (%m = 0)", True, j.whole_node_memory)
            eq(where, "memory_per_node_bytes of a whole-node job", None, j.memory_per_node_bytes)
            eq(where, "memory_per_cpu_bytes of a whole-node job", None, j.memory_per_cpu_bytes)
        else:
            eq(where, "whole_node_memory", False, j.whole_node_memory)
            eq(
                where,
                "per-node or per-CPU memory (%m)",
                mb_to_bytes(row["min_memory"]),
                j.memory_per_node_bytes or j.memory_per_cpu_bytes,
            )
        if per_node is not None:
            eq(
                where,
                "memory_per_node_bytes (scontrol MinMemoryNode)",
                mb_to_bytes(per_node) or None,
                j.memory_per_node_bytes,
            )
        if per_cpu is not None:
            eq(
                where,
                "memory_per_cpu_bytes (scontrol MinMemoryCPU)",
                mb_to_bytes(per_cpu),
                j.memory_per_cpu_bytes,
            )
        if "ReqTRES" not in ctl and "AllocTRES" not in ctl and "TRES" in ctl:
            # Slurm < 23.02 (22.05, the host lab): scontrol prints ONE ``TRES=``, the allocated TRES once the
            # job has an allocation, else the requested ones; so only that one of the two is checked.
            tres = parse_tres(ctl["TRES"])
            eq(where, "memory_bytes (scontrol TRES, mem)", tres.get("mem", 0), j.memory_bytes)
            eq(
                where,
                "tres_allocated, else tres_requested (scontrol TRES)",
                tres,
                dict(j.tres_allocated or j.tres_requested),
            )
        else:
            alloc_tres = parse_tres(ctl.get("AllocTRES", ""))
            tres = alloc_tres or parse_tres(ctl.get("ReqTRES", ""))
            eq(
                where,
                "memory_bytes (scontrol AllocTRES, else ReqTRES, mem)",
                tres.get("mem", 0),
                j.memory_bytes,
            )
            eq(where, "tres_allocated (scontrol AllocTRES)", alloc_tres, dict(j.tres_allocated))
            eq(
                where,
                "tres_requested (scontrol ReqTRES)",
                parse_tres(ctl.get("ReqTRES", "")),
                dict(j.tres_requested),
            )
        if j.whole_node_memory:
            # whole-node memory = the RealMemory of every node it gets: its allocated nodes when running,
            # else min_nodes × the partition's node size (the lab's partitions are homogeneous).
            if j.nodes:
                want = sum(node_memory[n] for n in expand_hostlist(j.nodes))
            else:
                sizes = {node_memory[n] for p in j.partitions for n in partition_nodes.get(p, ())}
                want = j.min_nodes * sizes.pop() if len(sizes) == 1 else j.memory_bytes
            eq(where, "whole-node memory_bytes = nodes × RealMemory", want, j.memory_bytes)
        # GPUs: TRES strings carry gres/gpu only when AccountingStorageTRES lists it (the lab's does not), so
        # the per-node request (squeue %b, scontrol TresPerNode) × nodes is the relation that holds.
        gpn = tres_per_node_gpus(row["tres_per_node"])
        eq(where, "gpus per node (%b)", gpn, j.gpus_per_node)
        eq(
            where,
            "gpus per node (scontrol TresPerNode)",
            tres_per_node_gpus(ctl.get("TresPerNode", "")),
            j.gpus_per_node,
        )
        eq(
            where,
            "gpus (TRES gres/gpu, else per node × nodes)",
            tres.get("gres/gpu", gpn * j.min_nodes),
            j.gpus,
        )
        eq(where, "tres_per_node (%b)", _null_to_empty(row["tres_per_node"]), j.tres_per_node)
        # allocation
        eq(where, "nodes (%N)", row["nodelist"], j.nodes)
        eq(where, "nodes (scontrol NodeList)", _null_to_empty(ctl.get("NodeList")), j.nodes)


def expand_hostlist(expr: str) -> list[str]:
    """``c[1-3],g1`` → ``["c1", "c2", "c3", "g1"]`` (one bracket group per name, as the lab uses)."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", expr):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            out += [f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def compare_nodes(
    nodes: Sequence[Node],
    sinfo: Sequence[Mapping[str, str]],
    scontrol_nodes: Sequence[Mapping[str, str]],
    diffs: Diffs,
) -> None:
    """Every node against ``scontrol show node -o`` and its ``sinfo -N`` lines (one per partition)."""
    sc = by_key(scontrol_nodes, "NodeName")
    rows_of: dict[str, list[Mapping[str, str]]] = {}
    for row in sinfo:
        rows_of.setdefault(row["node"], []).append(row)
    names = sorted(n.name for n in nodes)
    diffs.eq("nodes", "count (scontrol show node)", len(scontrol_nodes), len(nodes))
    diffs.eq("nodes", "names (scontrol NodeName)", sorted(sc), names)
    # sinfo lists the nodes of partitions only (the lab's CLOUD GPU nodes q[1-4] are in none)
    diffs.eq("nodes", "names (sinfo -N)", sorted(rows_of), sorted(n.name for n in nodes if n.partitions))
    for n in nodes:
        ctl, rows = sc.get(n.name), rows_of.get(n.name, [])
        if ctl is None:
            continue
        where = f"node {n.name}"
        eq = diffs.eq
        base, flags = scontrol_node_state(ctl["State"])
        eq(where, "state (scontrol State base)", base, n.state)
        eq(
            where,
            "flags (scontrol State flags; DRAINING is derived)",
            sorted(flags),
            sorted(set(n.flags) - DERIVED_NODE_FLAGS),
        )
        draining = "DRAIN" in n.flags and (n.state in _BUSY or "COMPLETING" in n.flags or n.alloc_cpus > 0)
        eq(where, "DRAINING flag (DRAIN and busy)", draining, "DRAINING" in n.flags)
        for row in rows:
            bases, required = sinfo_node_state(row["state"])
            diffs.check(
                where,
                "state (sinfo StateLong)",
                n.state in bases,
                f"sinfo {row['state']!r} allows {sorted(bases)}, snapshot has {n.state}",
            )
            diffs.check(
                where,
                "flags (sinfo StateLong)",
                required <= set(n.flags),
                f"sinfo {row['state']!r} needs {sorted(required)}, snapshot has {list(n.flags)}",
            )
            alloc, idle, other, total = (int(x) for x in row["cpus"].split("/"))
            eq(where, "alloc cpus (sinfo CPUsState A)", alloc, n.alloc_cpus)
            eq(where, "cpus (sinfo CPUsState T)", total, n.cpus)
            eq(where, "idle+other cpus (sinfo CPUsState I+O)", idle + other, n.cpus - n.alloc_cpus)
            eq(where, "memory bytes (sinfo Memory)", mb_to_bytes(row["memory"]), n.memory_bytes)
            eq(where, "free memory bytes (sinfo FreeMem)", mb_to_bytes(row["free_mem"]), n.free_memory_bytes)
            eq(where, "gpus (sinfo Gres)", gres_gpus(row["gres"]), n.gpus)
            eq(where, "gpus used (sinfo GresUsed)", gres_gpus(row["gres_used"]), n.gpus_used)
            eq(where, "reason (sinfo Reason)", _null_to_empty(row["reason"]), n.reason)
        eq(
            where,
            "partitions (sinfo -N lines)",
            sorted(r["partition"].rstrip("*") for r in rows),
            sorted(n.partitions),
        )
        eq(
            where,
            "partitions (scontrol Partitions)",
            sorted(filter(None, _null_to_empty(ctl.get("Partitions")).split(","))),
            sorted(n.partitions),
        )
        eq(where, "cpus (scontrol CPUTot)", int(ctl["CPUTot"]), n.cpus)
        eq(where, "alloc cpus (scontrol CPUAlloc)", int(ctl["CPUAlloc"]), n.alloc_cpus)
        eq(where, "effective cpus (scontrol CPUEfctv)", int(ctl["CPUEfctv"]), n.effective_cpus)
        eq(where, "memory bytes (scontrol RealMemory)", mb_to_bytes(ctl["RealMemory"]), n.memory_bytes)
        eq(
            where,
            "alloc memory bytes (scontrol AllocMem)",
            mb_to_bytes(ctl["AllocMem"]),
            n.alloc_memory_bytes,
        )
        eq(where, "free memory bytes (scontrol FreeMem)", mb_to_bytes(ctl["FreeMem"]), n.free_memory_bytes)
        eq(where, "gres (scontrol Gres)", _null_to_empty(ctl["Gres"]), n.gres)
        eq(where, "gpus (scontrol Gres)", gres_gpus(ctl["Gres"]), n.gpus)
        # scontrol prints "Reason=<text> [<user>@<time>]"; the snapshot keeps text and user apart.
        reason = ctl.get("Reason", "")
        eq(where, "reason (scontrol Reason)", re.sub(r"\s*\[[^\]]*\]$", "", reason), n.reason)


def compare_partitions(
    partitions: Sequence[Partition],
    scontrol_partitions: Sequence[Mapping[str, str]],
    nodes: Sequence[Node],
    has_default_flag: bool,
    diffs: Diffs,
) -> None:
    """Every partition against ``scontrol show partition -o`` and the snapshot's own nodes.

    ``has_default_flag``: the API version carries ``flags: ["DEFAULT"]`` (v0.0.45 only; older versions do
    not say which partition is the default, so ``is_default`` must stay False there)."""
    sc = by_key(scontrol_partitions, "PartitionName")
    diffs.eq("partitions", "count (scontrol show partition)", len(scontrol_partitions), len(partitions))
    diffs.eq("partitions", "names", sorted(sc), sorted(p.name for p in partitions))
    for p in partitions:
        ctl = sc.get(p.name)
        if ctl is None:
            continue
        where = f"partition {p.name}"
        eq = diffs.eq
        eq(where, "state (scontrol State)", ctl["State"], p.state)
        eq(where, "total nodes (scontrol TotalNodes)", int(ctl["TotalNodes"]), p.total_nodes)
        eq(where, "total cpus (scontrol TotalCPUs)", int(ctl["TotalCPUs"]), p.total_cpus)
        max_nodes = None if ctl["MaxNodes"] == "UNLIMITED" else int(ctl["MaxNodes"])
        eq(where, "MaxNodes (scontrol)", max_nodes, p.max_nodes_per_job)
        eq(where, "MaxTime seconds (scontrol)", time_limit_seconds(ctl["MaxTime"]), p.max_time_seconds)
        eq(where, "nodes (scontrol Nodes)", _null_to_empty(ctl["Nodes"]), p.nodes)
        eq(where, "is_default (scontrol Default)", ctl["Default"] == "YES" and has_default_flag, p.is_default)
        members = [n for n in nodes if p.name in n.partitions]
        eq(where, "total nodes = nodes naming it", len(members), p.total_nodes)
        eq(where, "total cpus = sum of its nodes' cpus", sum(n.cpus for n in members), p.total_cpus)


_SDIAG_RPC = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s.*?total_time:(\d+)", re.M)


@dataclass(frozen=True)
class SdiagRpcs:
    """The RPC sections of ``sdiag``'s output: name → (count, total microseconds)."""

    by_type: dict[str, tuple[int, int]]
    by_user: dict[str, tuple[int, int]]


def parse_sdiag_rpcs(text: str) -> SdiagRpcs:
    """``Remote Procedure Call statistics by message type`` and ``... by user`` of ``sdiag``: lines like
    ``REQUEST_JOB_INFO ( 2003) count:14 ave_time:165 total_time:2316`` and
    ``root ( 0) count:86 ave_time:192 total_time:16544``."""
    by_type_start = text.find("by message type")
    by_user_start = text.find("by user")
    if by_type_start < 0 or by_user_start < 0:
        raise ValueError("sdiag printed no RPC statistics")
    end = text.find("\n\n", by_user_start)
    types = text[by_type_start:by_user_start]
    users = text[by_user_start : end if end > 0 else len(text)]

    def rows(section: str) -> dict[str, tuple[int, int]]:
        return {m[1]: (int(m[2]), int(m[3])) for m in _SDIAG_RPC.finditer(section)}

    return SdiagRpcs(rows(types), rows(users))


SSHARE = ("sshare", "-a", "-l", "-P")
"""Every association, long format, ``|``-separated (the account column indented one space per level)."""


def parse_sshare(text: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """``sshare -a -l -P`` → (account, user, parent account) → its columns (``RawShares``, ``NormShares``,
    ``RawUsage``, ``NormUsage``, ``EffectvUsage``, ``FairShare``, ``LevelFS``...), the parent (of the account;
    for a user's row, of the user's account) found from the account column's indentation (one space per
    level below ``root``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split("|")
    out: dict[tuple[str, str, str], dict[str, str]] = {}
    path: list[str] = []  # the accounts from root down to the current depth
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=False))
        raw = row["Account"]
        depth = len(raw) - len(raw.lstrip(" "))
        account, user = raw.strip(), row.get("User", "").strip()
        if user:  # one level below its account: the account's parent is two levels up
            parent = path[depth - 2] if depth >= 2 else ""
        else:
            del path[depth:]
            parent = path[depth - 1] if depth >= 1 else ""
            path.append(account)
        out[(account, user, parent)] = row
    return out


# ----- sacctmgr: QOS and association limits ----------------------------------------------------------

_SACCTMGR_LIMITS: dict[str, str] = {
    "grpjobs": "grp_jobs",
    "grpsubmit": "grp_submit_jobs",
    "grptres": "grp_tres",
    "grpwall": "grp_wall_seconds",
    "maxjobspu": "max_jobs_per_user",
    "maxsubmitpu": "max_submit_jobs_per_user",
    "maxjobspa": "max_jobs_per_account",
    "maxsubmitpa": "max_submit_jobs_per_account",
    "maxtrespu": "max_tres_per_user",
    "maxtrespa": "max_tres_per_account",
    "maxjobs": "max_jobs",
    "maxsubmit": "max_submit_jobs",
    "maxtres": "max_tres_per_job",
    "maxtrespernode": "max_tres_per_node",
    "maxwall": "max_wall_seconds",
}
"""A ``sacctmgr show qos|assoc format=`` column → the :class:`QosLimits` / :class:`Association` field."""
QOS_FORMAT = (
    "name,priority,grpjobs,grpsubmit,grptres,grpwall,maxjobspu,maxsubmitpu,maxjobspa,maxsubmitpa,"
    "maxtrespu,maxtrespa,maxtres,maxtrespernode,maxwall"
)
ASSOC_FORMAT = (
    "account,user,partition,grpjobs,grpsubmit,grptres,grpwall,maxjobs,maxsubmit,maxtres,maxtrespernode,"
    "maxnodes,maxwall,qos,defaultqos"
)


def sacctmgr_limits(lab: Lab) -> tuple[str, str]:
    """``sacctmgr -P show qos`` and ``show assoc`` in :data:`QOS_FORMAT` / :data:`ASSOC_FORMAT`, each under a
    header line of those column names (sacctmgr's own headers are display names such as ``Def QOS``)."""

    def show(what: str, fmt: str) -> str:
        return fmt.replace(",", "|") + "\n" + lab.run(["sacctmgr", "-n", "-P", "show", what, f"format={fmt}"])

    return show("qos", QOS_FORMAT), show("assoc", ASSOC_FORMAT)


def _limit(column: str, text: str) -> object:
    """One sacctmgr column's text as the snapshot holds it (an empty column is an unset limit)."""
    if column.endswith("tres") or column.startswith("maxtres"):
        return parse_tres(text)
    if column.endswith("wall"):
        return time_limit_seconds(text) if text else None
    return int(text) if text else None


def compare_limits(
    qos: Sequence[QosLimits], associations: Sequence[Association], qos_text: str, assoc_text: str
) -> list[str]:
    """Every difference between the snapshot's limits and ``sacctmgr -P show qos format=``:data:`QOS_FORMAT`
    / ``show assoc format=``:data:`ASSOC_FORMAT` (header line first), as readable lines; empty when equal."""
    diffs: list[str] = []

    def rows(text: str) -> list[dict[str, str]]:
        lines = [line for line in text.splitlines() if line.strip()]
        header = lines[0].lower().split("|")
        return [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:]]

    def check(where: str, held: object, row: Mapping[str, str]) -> None:
        for column, text in row.items():
            if column in _SACCTMGR_LIMITS:
                want, got = _limit(column, text), getattr(held, _SACCTMGR_LIMITS[column])
                if want != got:
                    diffs.append(f"{where} {column}: sacctmgr {text!r} → {want!r}, snapshot {got!r}")

    by_name = {q.name: q for q in qos}
    qos_rows = rows(qos_text)
    for row in qos_rows:
        q = by_name.get(row["name"])
        if q is None:
            diffs.append(f"QOS {row['name']}: not in the snapshot")
            continue
        if q.priority != int(row["priority"] or 0):
            diffs.append(f"QOS {q.name} priority: sacctmgr {row['priority']}, snapshot {q.priority}")
        check(f"QOS {q.name}", q, row)
    if len(qos_rows) != len(qos):
        diffs.append(f"{len(qos_rows)} QOS in sacctmgr, {len(qos)} in the snapshot")

    by_key = {(a.account, a.user, a.partition): a for a in associations}
    assoc_rows = rows(assoc_text)
    for row in assoc_rows:
        key = (row["account"], row["user"], row["partition"])
        a = by_key.get(key)
        if a is None:
            diffs.append(f"association {key}: not in the snapshot")
            continue
        check(f"association {key}", a, row)
        nodes = a.max_tres_per_job.get("node")
        if (int(row["maxnodes"]) if row["maxnodes"] else None) != nodes:
            diffs.append(f"association {key} maxnodes: sacctmgr {row['maxnodes']!r}, snapshot {nodes}")
        if sorted(filter(None, row["qos"].split(","))) != sorted(a.qos) or row["defaultqos"] != a.default_qos:
            said = f"{row['qos']}/{row['defaultqos']}"
            diffs.append(f"association {key} qos: sacctmgr {said}, snapshot {a.qos}/{a.default_qos}")
    if len(assoc_rows) != len(associations):
        diffs.append(f"{len(assoc_rows)} associations in sacctmgr, {len(associations)} in the snapshot")
    return diffs
