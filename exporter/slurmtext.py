"""Slurm's small text languages, parsed in ONE place.

Pure functions, no I/O, no dependency on any API version:

* host lists: ``c[1-3,5],g1``, ``r[1-2]n[01-03]`` → :func:`hostlist_expand`, :func:`hostlist_count`
* TRES strings: ``cpu=8,mem=16000M,node=1,billing=8,gres/gpu=2`` → :func:`parse_tres`
  (``mem`` and other size TRES in **bytes**; Slurm's K/M/G/T/P suffixes are powers of 1024,
  a size without suffix is MiB)
* GRES strings: ``gpu:2``, ``gpu:tesla:2(S:0-1)``, ``gres/gpu:2``, ``gres:gpu:2``,
  ``gpu:a100:2(IDX:0-1),mps:100`` → :func:`gres_gpus` (the GPU count), :func:`gres_by_type`
* job-array task strings: ``1-100%5``, ``3,5,7-9``, ``1-20:2`` → :func:`parse_array_tasks`
* state lists: :func:`node_state`, :func:`job_state` split Slurm's states into one base state and
  a tuple of flags.

Derived node flag ``DRAINING``: Slurm reports a drained-but-busy node as base ``ALLOCATED``/``MIXED``
plus flag ``DRAIN`` (``sinfo`` prints it as ``draining``/``drng``). :func:`node_state` adds the flag
``DRAINING`` beside ``DRAIN`` when the node is busy (base ALLOCATED or MIXED, a COMPLETING flag, or
the caller says it has allocated CPUs), so consumers can tell "draining" (still running work) from
"drained" (DRAIN on an idle node) without re-deriving Slurm's rule.

Parsers of values that come from slurmrestd never raise on odd input: they return the best
reading (unknown parts are skipped). Only :func:`hostlist_expand` raises ``ValueError``, for an
expression that cannot be expanded (or would expand to more than ``limit`` names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

MIB = 1_048_576

_UNIT = {
    "": 1_048_576,  # Slurm sizes without a suffix are MiB
    "K": 1024,
    "M": 1_048_576,
    "G": 1_073_741_824,
    "T": 1_099_511_627_776,
    "P": 1_125_899_906_842_624,
}

# TRES whose values are sizes (converted to bytes); everything else is a plain count.
_SIZE_TRES = frozenset({"mem", "vmem", "pages", "fs/disk", "fs/lustre", "bb"})


# --------------------------------------------------------------------------------------- host lists


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside ``[...]`` (or ``(...)``)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _range_bounds(body: str) -> list[tuple[str, str]]:
    """``1-3,05,7`` → ``[('1','3'), ('05',''), ('7','')]``: validated digit texts of each item."""
    out: list[tuple[str, str]] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and (not hi.isdigit() or int(hi) < int(lo))):
            raise ValueError(f"bad host-list range {item!r}")
        out.append((lo, hi))
    return out


def _range_items(body: str) -> list[str]:
    """``1-3,05,7`` → ``['1','2','3','05','7']`` keeping zero padding of each range."""
    out: list[str] = []
    for lo, hi in _range_bounds(body):
        if not hi:
            out.append(lo)
            continue
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _range_count(body: str) -> int:
    return sum(int(hi) - int(lo) + 1 if hi else 1 for lo, hi in _range_bounds(body))


_BRACKET = re.compile(r"\[([^\]]*)\]")


def _is_empty_hostlist(expr: str) -> bool:
    e = expr.strip()
    return not e or e in ("(null)", "None", "N/A")


def hostlist_expand(expr: str, *, limit: int = 1_000_000) -> list[str]:
    """Expand a Slurm host-list expression into host names, in order.

    ``c[1-3,5],g1`` → ``['c1','c2','c3','c5','g1']``; zero padding is kept (``n[01-02]``);
    several bracket groups in one name multiply (``r[1-2]n[1-2]`` → 4 names). Empty,
    ``(null)`` and ``N/A`` give ``[]``. Raises ``ValueError`` for a malformed expression or when
    it names more than ``limit`` hosts.
    """
    if _is_empty_hostlist(expr):
        return []
    if hostlist_count(expr) > limit:
        raise ValueError(f"host list {expr[:40]!r} names more than {limit} hosts")
    names: list[str] = []
    for part in _split_top(expr):
        pieces = _BRACKET.split(part)
        # pieces alternates literal, range-body, literal, ...
        if "[" in pieces[-1] or "]" in "".join(pieces[0::2]):
            raise ValueError(f"unbalanced brackets in host list {part!r}")
        expanded = [pieces[0]]
        for i in range(1, len(pieces), 2):
            items = _range_items(pieces[i])
            suffix = pieces[i + 1]
            expanded = [prefix + item + suffix for prefix in expanded for item in items]
        names.extend(expanded)
    return names


def hostlist_count(expr: str) -> int:
    """Number of hosts a host-list expression names, without expanding it.

    Raises ``ValueError`` for a malformed expression.
    """
    if _is_empty_hostlist(expr):
        return 0
    total = 0
    for part in _split_top(expr):
        pieces = _BRACKET.split(part)
        if "[" in pieces[-1] or "]" in "".join(pieces[0::2]):
            raise ValueError(f"unbalanced brackets in host list {part!r}")
        n = 1
        for i in range(1, len(pieces), 2):
            n *= _range_count(pieces[i])
        total += n
    return total


_PLAIN_HOST = re.compile(r"[^\[\](),\s]+")
_PREFIX = re.compile(r"[^\[\](),\s]*")
_NO_HOSTS = frozenset({"(null)", "None", "N/A"})


@lru_cache(maxsize=1 << 15)
def hosts(expr: str) -> tuple[str, ...]:
    """Host names of a job's node list, as :func:`hostlist_expand` reads it (``()`` when it cannot).

    Cached: a running job's list is read again at every poll (by the demand model, by the bridge).
    ``name`` and ``prefix[lo-hi]`` (most lists) are read here directly, the rest by
    :func:`hostlist_expand`.
    """
    prefix, bracket, rest = expr.partition("[")
    if not bracket:
        if _PLAIN_HOST.fullmatch(expr):
            return () if expr in _NO_HOSTS else (expr,)
    elif rest[-1:] == "]":
        lo, dash, hi = rest[:-1].partition("-")
        if (
            dash
            and lo.isdigit()
            and hi.isdigit()
            and lo.isascii()
            and hi.isascii()
            and _PREFIX.fullmatch(prefix)
        ):
            first, last = int(lo), int(hi)
            if first <= last < first + 1_000_000:  # hostlist_expand's limit
                width = len(lo) if lo[0] == "0" and len(lo) > 1 else 0
                return tuple(prefix + str(i).zfill(width) for i in range(first, last + 1))
    try:
        return tuple(hostlist_expand(expr))
    except ValueError:
        return ()


# --------------------------------------------------------------------------------------------- TRES


def parse_size(value: str) -> int | None:
    """``16000M`` → bytes; a number without suffix is MiB; ``None`` if not a size."""
    v = value.strip()
    if not v:
        return None
    unit = v[-1].upper()
    if unit in "KMGTP":
        num = v[:-1]
    else:
        unit = ""
        num = v
    try:
        if num.isdigit():
            return int(num) * _UNIT[unit]
        return int(float(num) * _UNIT[unit])
    except (ValueError, OverflowError):
        return None


def parse_tres(text: str) -> dict[str, int]:
    """Parse a TRES string into ``{name: value}``; sizes (``mem``...) in bytes.

    ``cpu=8,mem=16000M,node=1,billing=8,gres/gpu=2`` →
    ``{'cpu': 8, 'mem': 16777216000, 'node': 1, 'billing': 8, 'gres/gpu': 2}``.
    Entries whose value is not a number are skipped.
    """
    out: dict[str, int] = {}
    if not text:
        return out
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep:
            continue
        name = name.strip()
        value = value.strip()
        if not name or not value:
            continue
        if name in _SIZE_TRES:
            size = parse_size(value)
            if size is not None:
                out[name] = size
            continue
        if value.isdigit():
            out[name] = int(value)
            continue
        # counts may carry a K/M/G multiplier (powers of 1024 as in Slurm) or be fractional
        unit = value[-1].upper()
        mult = 1
        if unit in "KMGTP":
            mult = _UNIT[unit]
            value = value[:-1]
        try:
            out[name] = int(float(value) * mult)
        except (ValueError, OverflowError):
            continue
    return out


def tres_gpus(tres: dict[str, int]) -> int:
    """GPUs in a parsed TRES dict: ``gres/gpu``, else the sum of typed ``gres/gpu:TYPE`` entries."""
    n = tres.get("gres/gpu")
    if n is not None:
        return n
    return sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))


# --------------------------------------------------------------------------------------------- GRES


def _gres_count(field: str) -> int:
    """Count of one GRES entry's last ``:`` field: ``2``, ``2K``; anything else means 1."""
    if field.isdigit():
        return int(field)
    if len(field) > 1 and field[:-1].isdigit() and field[-1].upper() in "KMGTP":
        return int(field[:-1]) * _UNIT[field[-1].upper()]
    return -1


def gres_count(text: str, name: str = "gpu") -> int:
    """Total count of GRES ``name`` in a GRES / ``tres_per_*`` string.

    Accepts ``gpu:2``, ``gpu:tesla:2(S:0-1)``, ``gres/gpu:2``, ``gres:gpu:2``, ``gres/gpu=2``,
    ``gpu:2(IDX:0-1)``, ``gpu`` (count 1), and comma lists of those
    (``gpu:a100:2(IDX:0-1),mps:100``). Parenthesised parts are ignored. ``N/A``/empty → 0.
    """
    if not text or text in ("N/A", "(null)"):
        return 0
    total = 0
    for entry in _split_top(text):
        paren = entry.find("(")
        if paren >= 0:
            entry = entry[:paren]
        if entry.startswith("gres/") or entry.startswith("gres:"):
            entry = entry[5:]
        entry = entry.replace("=", ":")
        fields = entry.split(":")
        if fields[0] != name:
            continue
        if len(fields) == 1:
            total += 1
            continue
        n = _gres_count(fields[-1])
        total += 1 if n < 0 else n
    return total


def gres_by_type(text: str) -> dict[tuple[str, str], int]:
    """(name, type) → count of every GRES in a node's ``gres`` / ``gres_used`` string: ``gpu:a100:2(S:0-1)``
    → ``{("gpu", "a100"): 2}``, ``gpu:2`` → ``{("gpu", ""): 2}`` (untyped: empty type), ``mps:100``,
    ``gpu:1g.5gb:7`` (a MIG profile is a type), ``gpu:(null):0(IDX:N/A)`` (``(null)``: untyped), comma lists
    of those. A trailing ``(...)`` (socket or index list) is ignored; a count with a K/M/G/T/P suffix is
    multiplied out; an entry without a count counts 1. ``N/A``/``(null)``/empty → empty."""
    out: dict[tuple[str, str], int] = {}
    if not text or text in ("N/A", "(null)"):
        return out
    for entry in _split_top(text):
        paren = entry.rfind("(")
        if paren > 0 and entry[paren - 1] != ":":  # "gpu:a100:2(S:0-1)", not the type "(null)"
            entry = entry[:paren]
        if entry.startswith("gres/") or entry.startswith("gres:"):
            entry = entry[5:]
        fields = entry.replace("=", ":").split(":")
        name = fields[0]
        if not name:
            continue
        count = _gres_count(fields[-1]) if len(fields) > 1 else -1
        kind = ":".join(fields[1:-1] if count >= 0 else fields[1:])
        if kind == "(null)":
            kind = ""
        key = (name, kind)
        out[key] = out.get(key, 0) + (1 if count < 0 else count)
    return out


def gres_gpus(text: str) -> int:
    """GPU count in a GRES string (see :func:`gres_count`)."""
    return gres_count(text, "gpu")


# ------------------------------------------------------------------------------------- array tasks


def parse_array_tasks(text: str) -> tuple[str, int, int | None]:
    """Split a job-array task string into (tasks without throttle, task count, throttle).

    ``1-100%5`` → ``('1-100', 100, 5)``; ``3,5,7-9`` → ``('3,5,7-9', 5, None)``;
    ``1-20:2`` → ``('1-20:2', 10, None)`` (step 2: 1,3,...,19). Unreadable parts count 0;
    empty → ``('', 0, None)``.
    """
    if not text:
        return "", 0, None
    tasks = text.strip()
    throttle: int | None = None
    pct = tasks.rfind("%")
    if pct >= 0:
        t = tasks[pct + 1 :].strip()
        tasks = tasks[:pct].strip()
        if t.isdigit():
            throttle = int(t)
    if tasks.startswith("[") and tasks.endswith("]"):
        tasks = tasks[1:-1]
    return tasks, array_task_count(tasks), throttle


def array_task_count(tasks: str) -> int:
    """Number of task ids in ``3,5,7-9`` / ``1-20:2`` (a throttle ``%N`` is ignored)."""
    count = 0
    for item in tasks.split(","):
        item = item.strip()
        pct = item.find("%")
        if pct >= 0:
            item = item[:pct]
        if not item:
            continue
        rng, _, step_s = item.partition(":")
        lo, sep, hi = rng.partition("-")
        if not sep:
            if lo.strip().isdigit():
                count += 1
            continue
        lo = lo.strip()
        hi = hi.strip()
        if not (lo.isdigit() and hi.isdigit()):
            continue
        a, b = int(lo), int(hi)
        if b < a:
            continue
        step = int(step_s) if step_s.strip().isdigit() and int(step_s) > 0 else 1
        count += (b - a) // step + 1
    return count


# ------------------------------------------------------------------------------------------ states

NODE_BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "EXTERNAL"})
"""Slurm's node base states (``NODE_STATE_BASE``); every other state word is a flag."""

_NODE_ALIASES = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "UNK": "UNKNOWN", "DRAINED": "DRAIN"}

JOB_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
"""Slurm's job base states (``JOB_STATE_BASE``); every other state word is a flag."""

_BUSY = frozenset({"ALLOCATED", "MIXED"})


def _words(states: str | Iterable[str]) -> list[str]:
    if isinstance(states, str):
        return [w.strip().upper() for w in states.replace("+", ",").split(",") if w.strip()]
    return [w.strip().upper() for w in states if w and w.strip()]


def node_state(
    states: str | Sequence[str], flags: Iterable[str] = (), *, alloc_cpus: int = 0
) -> tuple[str, tuple[str, ...]]:
    """Normalise a node state to ``(BASE, flags)``.

    ``states`` is v0.0.38's string (``"allocated"``, possibly ``"idle+drain"``) with its separate
    ``state_flags`` passed as ``flags``, or v0.0.40+'s list (``["IDLE", "DRAIN"]``). The base is
    the first word from :data:`NODE_BASE_STATES` (UNKNOWN if none); the other words are flags,
    upper-cased, de-duplicated, in order. ``DRAINING`` is added after ``DRAIN`` when the node is
    busy (see the module doc).
    """
    base = ""
    out: list[str] = []
    for w in (*_words(states), *_words(flags)):
        w = _NODE_ALIASES.get(w, w)
        if not base and w in NODE_BASE_STATES:
            base = w
        elif w not in out and w != base:
            out.append(w)
    if not base:
        base = "UNKNOWN"
    busy = base in _BUSY or "COMPLETING" in out or alloc_cpus > 0
    if busy and "DRAIN" in out and "DRAINING" not in out:
        out.insert(out.index("DRAIN") + 1, "DRAINING")
    return base, tuple(out)


JOB_FLAG_IMPLIED_BASE: dict[str, str] = {
    "CONFIGURING": "RUNNING",
    "RESIZING": "RUNNING",
    "SIGNALING": "RUNNING",
    "STOPPED": "RUNNING",
    "COMPLETING": "COMPLETED",
    "STAGE_OUT": "COMPLETED",
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
    "SPECIAL_EXIT": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "REVOKED": "CANCELLED",
}
"""v0.0.38 reports a job's state as ONE word, and Slurm's ``job_state_string()`` prints the flag
instead of the base when one is set (``CONFIGURING`` for a running job still booting its nodes,
``COMPLETING`` for a finished job still on its nodes). v0.0.40+ list base and flags. For a flag
word with no base, this is the base Slurm keeps beside that flag, so both API generations give
the same ``(base, flags)``: e.g. ``"CONFIGURING"`` → ``("RUNNING", ("CONFIGURING",))``."""


def job_state(states: str | Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """Normalise a job state (v0.0.38 string or v0.0.40+ list) to ``(BASE, flags)``.

    The base is the first word from :data:`JOB_BASE_STATES`; with none, a known flag word implies
    its base (:data:`JOB_FLAG_IMPLIED_BASE`); otherwise the first word is used as base (so an
    unknown future state stays visible). Raises ``ValueError`` for an empty state.
    """
    words = _words(states)
    if not words:
        raise ValueError("empty job state")
    base = ""
    for w in words:
        if w in JOB_BASE_STATES:
            base = w
            break
    if not base:
        implied = JOB_FLAG_IMPLIED_BASE.get(words[0])
        if implied is not None:
            return implied, tuple(words)
        base = words[0]
    return base, tuple(w for w in words if w != base)


def split_list(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"a,b"`` or ``["a","b"]`` → ``('a','b')``; empty / None → ``()``."""
    if not text:
        return ()
    if isinstance(text, str):
        return tuple(p.strip() for p in text.split(",") if p.strip())
    return tuple(text)
