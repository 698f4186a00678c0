"""Helpers shared by every API-generation module: decoding with typed errors, caches, envelope,
the raw structs and conversions whose shape is the same in every generation, and the adapter.

A generation plugs into :class:`Adapter` through a :class:`Schema`: its decoders, its record
converters and ``num``, which unwraps one of its JSON numbers (a plain int in v0.0.38, a
``{set, infinite, number}`` struct in v0.0.40+). Structs whose only difference is that number
type are generic in it (:class:`RawStats`, :class:`RawReservation`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import msgspec
from msgspec import UNSET, Struct

from exporter import errors, slurmtext
from exporter.model import MIB, Diag, Envelope, Job, License, Node, Partition, Reservation

T = TypeVar("T")
Num = TypeVar("Num")
"""A generation's JSON number: ``int`` (v0.0.38) or the ``{set, infinite, number}`` struct."""
R = TypeVar("R")
"""What :func:`decode_records` converts each record to."""

NO_VAL = 0xFFFFFFFE
"""Slurm's 32-bit "not set"; INFINITE is 0xFFFFFFFF. Anything at or above is not a real value."""

CACHE_LIMIT = 65_536
"""Entries a translation cache may hold before it is cleared (bounds memory on odd clusters)."""


def decode(decoder: msgspec.json.Decoder[T], body: Any, endpoint: str) -> T:
    """Decode ``body`` mapping every failure onto a typed :mod:`exporter.errors` error."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if " - at `" not in msg:
            msg += " - at `$`"
        raise errors.ShapeError(msg, endpoint=endpoint) from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg:
            raise errors.TruncatedError(msg, endpoint=endpoint) from None
        raise errors.NotJSONError(_not_json_message(msg, body), endpoint=endpoint) from None
    except (TypeError, ValueError, UnicodeError) as exc:
        raise errors.NotJSONError(f"cannot decode body: {exc}", endpoint=endpoint) from None
    except RecursionError:  # ~1,000 nested arrays in any field: no slurmrestd answer is that deep
        raise errors.ShapeError("JSON nested too deeply - at `$`", endpoint=endpoint) from None


def _not_json_message(msg: str, body: Any) -> str:
    try:
        head = bytes(body[:60]).decode("utf-8", "replace")
    except Exception:
        head = ""
    head = " ".join(head.split())
    return f"{msg} (body starts {head!r})" if head else msg


def missing(endpoint: str, field: str, env: Envelope) -> errors.ResponseError:
    """The error for a response without its data field: slurm's own errors if it gave any."""
    if env.errors:
        return errors.SlurmReportedError("; ".join(env.errors), endpoint=endpoint)
    return errors.ShapeError(f"Object missing required field `{field}` - at `$`", endpoint=endpoint)


def convert_failed(endpoint: str, what: str, exc: Exception) -> errors.ShapeError:
    return errors.ShapeError(f"{what}: {exc}", endpoint=endpoint)


class Caches:
    """Small string-keyed caches that make per-record translation cheap and share equal values.

    Translated values (TRES dicts, partition tuples, state splits) are SHARED between the records
    that had the same text: treat every ``Mapping``/``tuple`` of a model record as read-only.
    """

    __slots__ = ("arrays", "gres", "nstates", "parts", "states", "strings", "tres")

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.tres: dict[str, tuple[dict[str, int], int, int]] = {}
        self.gres: dict[str, int] = {}
        self.arrays: dict[str, tuple[str, int, int | None]] = {}
        self.parts: dict[str, tuple[str, ...]] = {}
        self.states: dict[Any, tuple[str, tuple[str, ...]]] = {}
        self.nstates: dict[Any, tuple[str, tuple[str, ...]]] = {}

    def trim(self) -> None:
        """Clear any cache that outgrew :data:`CACHE_LIMIT` (called once per response)."""
        for name in self.__slots__:
            c: dict[Any, Any] = getattr(self, name)
            if len(c) > CACHE_LIMIT:
                c.clear()

    def intern(self, s: str | None) -> str:
        if not s:
            return ""
        return self.strings.setdefault(s, s)

    def tres_info(self, s: str | None) -> tuple[dict[str, int], int, int]:
        """``(parsed, mem_bytes, gpus)`` of a TRES string, cached."""
        if not s:
            return _EMPTY_TRES
        hit = self.tres.get(s)
        if hit is None:
            d = slurmtext.parse_tres(s)
            hit = (d, d.get("mem", 0), slurmtext.tres_gpus(d))
            self.tres[s] = hit
        return hit

    def gpus(self, s: str | None) -> int:
        if not s:
            return 0
        hit = self.gres.get(s)
        if hit is None:
            hit = self.gres[s] = slurmtext.gres_gpus(s)
        return hit

    def array(self, s: str | None) -> tuple[str, int, int | None]:
        if not s:
            return _EMPTY_ARRAY
        hit = self.arrays.get(s)
        if hit is None:
            hit = self.arrays[s] = slurmtext.parse_array_tasks(s)
        return hit

    def partitions(self, s: str | None) -> tuple[str, ...]:
        if not s:
            return ()
        hit = self.parts.get(s)
        if hit is None:
            hit = self.parts[s] = tuple(self.intern(p) for p in slurmtext.split_list(s))
        return hit

    def job_state(self, s: Any) -> tuple[str, tuple[str, ...]]:
        hit = self.states.get(s)
        if hit is None:
            hit = self.states[s] = slurmtext.job_state(s)
        return hit


_EMPTY_TRES: tuple[dict[str, int], int, int] = ({}, 0, 0)
_EMPTY_ARRAY: tuple[str, int, int | None] = ("", 0, None)


class N(Struct, gc=False):
    """Slurm's optional number (v0.0.40+ and slurmdbd's answers)."""

    set: bool = False
    infinite: bool = False
    number: int = 0


def n(x: N | None) -> int | None:
    """Number struct → int; None when unset or infinite."""
    if x is None or not x.set or x.infinite:
        return None
    return x.number


def requested_nodes(
    node_count: int, cpus: int, tasks: int, cpus_per_task: int, tres_nodes: int | None
) -> int:
    """A job's minimum node count: Slurm's ``node_count`` (for a pending job its estimate from tasks and
    CPUs), except for a job that overcommits (``--overcommit``: fewer CPUs than tasks × CPUs per task),
    whose estimate ignores the overcommit — the requested TRES ``node`` (``-N``, 1 by default) is what it
    gets (lab, 26.05.5: ``-O -n16`` shows node_count 2 and runs on one node)."""
    if tres_nodes and cpus and cpus < tasks * cpus_per_task:
        return tres_nodes
    return node_count


def job_max_nodes(
    max_nodes: int | None, min_nodes: int, tasks_exact: bool, cpus_per_task: int, per_node_or_core: bool
) -> int | None:
    """A pending job's node maximum, or None where its record's ``max_nodes`` is slurmctld's estimate, not
    what the job asked. slurmctld packs a pending job that gave no ``--ntasks-per-node``,
    ``--ntasks-per-core`` or ``-c`` > 1 with ``max(minimum, its maximum)`` (``_pack_default_job_details``;
    an unset maximum is 0): ``--gpus=5`` at zero nodes shows 1–1 like ``-N1 --gpus=5`` and runs on 2 nodes
    (lab, 26.05.5). Such a record (maximum = minimum) counts as no maximum unless the task count was given
    (``EXACT_TASK_COUNT_REQUESTED``: ``-n`` bounds the nodes, at one task each) — a job's own ``-N1``
    equal to that estimate is not told apart (counted as none)."""
    if max_nodes is None or max_nodes != min_nodes or tasks_exact or cpus_per_task > 1 or per_node_or_core:
        return max_nodes
    return None


def mb(n: int | None) -> int | None:
    """MiB → bytes; None/negative/NO_VAL-ish → None."""
    if n is None or n < 0 or n >= NO_VAL:
        return None
    return n * MIB


def epoch(n: int | None) -> float | None:
    """Epoch seconds; 0 / None / NO_VAL-ish → None."""
    if not n or n < 0 or n >= NO_VAL:
        return None
    return float(n)


def minutes(n: int | None) -> int | None:
    """Slurm minutes → seconds; None/negative/NO_VAL/INFINITE → None (0 = no limit → None)."""
    if not n or n < 0 or n >= NO_VAL:
        return None
    return n * 60


def usec(n: int | None) -> float:
    return (n or 0) / 1_000_000


def pos_mb(n: int | None) -> int | None:
    """MiB → bytes of an already unwrapped number; 0/None → None."""
    return n * MIB if n else None


def node_cpu_load(n: int | None) -> float | None:
    """Node ``cpu_load`` (load × 100) → load; None/negative/NO_VAL-ish → None."""
    if n is None or n < 0 or n >= NO_VAL:
        return None
    return n / 100


def error_texts(items: Any) -> tuple[str, ...]:
    """``errors[]`` entries → texts: ``description`` and/or ``error`` (and the number)."""
    out: list[str] = []
    for e in items or ():
        desc = (getattr(e, "description", None) or "").strip()
        err = (getattr(e, "error", None) or "").strip()
        num = getattr(e, "error_number", None)
        text = f"{err}: {desc}" if desc and err and err != desc else desc or err
        if not text and num:
            text = f"error {num}"
        if text:
            out.append(text)
    return tuple(out)


def warning_texts(items: Any) -> tuple[str, ...]:
    return tuple(t for t in ((getattr(w, "description", None) or "").strip() for w in items or ()) if t)


def guarded(endpoint: str, what: str, fn: Callable[[], T]) -> T:
    """Run a conversion, turning unexpected data errors into ShapeError."""
    try:
        return fn()
    except errors.SlurmError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
        raise convert_failed(endpoint, what, exc) from None


# ------------------------------------------------------------------------------------ envelope


class RawError(Struct, gc=False):
    """An ``errors[]`` entry: ``{error, error_number}`` (v0.0.38) or with ``description`` (v0.0.40+)."""

    description: str | None = None
    error: str | None = None
    error_number: int | None = None


class RawWarning(Struct, gc=False):
    description: str | None = None


class RawSlurm(Struct, gc=False):
    """``meta.slurm`` (``meta.Slurm`` in v0.0.38)."""

    release: str | None = None
    cluster: str | None = None


def envelope(
    slurm: RawSlurm | None,
    last_update: int | None,
    errs: Sequence[RawError] | None,
    warns: Sequence[RawWarning] | None,
) -> Envelope:
    """The model envelope from a generation's already unwrapped envelope fields."""
    return Envelope(
        last_update=epoch(last_update),
        errors=error_texts(errs),
        warnings=warning_texts(warns),
        slurm_version=(slurm.release or "") if slurm is not None else "",
        cluster=(slurm.cluster or "") if slurm is not None else "",
    )


class RawMeta(Struct, gc=False):
    """``meta`` of an answer whose envelope has no ``last_update`` (``/shares``, ``/slurmdb/...``)."""

    slurm: RawSlurm | None = None


def answer_data(raw: Any, endpoint: str, field: str) -> tuple[Any, Envelope]:
    """(``raw``'s ``field``, its envelope) of an answer decoded with ``meta``/``errors``/``warnings`` and
    ``field`` (UNSET when absent: :func:`missing`)."""
    slurm = raw.meta.slurm if raw.meta is not None else None
    env = envelope(slurm, None, raw.errors, raw.warnings)
    data = getattr(raw, field)
    if data is UNSET:
        raise missing(endpoint, field, env)
    return data, env


def decode_records(
    decoder: msgspec.json.Decoder[Any],
    body: bytes,
    endpoint: str,
    field: str,
    what: str,
    convert: Callable[[Any], R],
) -> tuple[list[R], Envelope]:
    """A slurmdbd-style answer (``meta``/``errors``/``warnings`` beside one list ``field``) decoded with
    ``decoder`` and each record converted; typed :mod:`exporter.errors` on bad input."""
    listed, env = answer_data(decode(decoder, body, endpoint), endpoint, field)
    return guarded(endpoint, what, lambda: [convert(r) for r in listed]), env


class RawTres(Struct, gc=False):
    """One ``{type, name, count}`` of a TRES list (slurmdbd's answers; memory in MiB)."""

    type: str = ""
    name: str = ""
    count: int = 0


# ----------------------------------------------------------------------------------------- diag


class RawRpcType(Struct, gc=False):
    """One entry of ``rpcs_by_message_type`` (the same in every generation; times in microseconds)."""

    message_type: str = ""
    count: int = 0
    total_time: int = 0
    queued: int | None = None
    """24.11+ (v0.0.40+); absent on 22.05."""
    dropped: int | None = None


class RawRpcUser(Struct, gc=False):
    """One entry of ``rpcs_by_user`` (the same in every generation; times in microseconds)."""

    user: str = ""
    count: int = 0
    total_time: int = 0


class RawPendingRpc(Struct, gc=False):
    """One entry of ``pending_rpcs`` (24.11+): outgoing RPCs the agent still has to send."""

    message_type: str = ""
    count: int = 0


class RawStats(Struct, Generic[Num], gc=False):
    """``statistics`` of /diag; only ``req_time``/``req_time_start`` differ between generations."""

    req_time: Num | None = None
    req_time_start: Num | None = None
    server_thread_count: int = 0
    agent_queue_size: int = 0
    agent_count: int = 0
    agent_thread_count: int = 0
    dbd_agent_queue_size: int = 0
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_completed: int = 0
    jobs_canceled: int = 0
    jobs_failed: int = 0
    jobs_pending: int = 0
    jobs_running: int = 0
    schedule_cycle_last: int = 0
    schedule_cycle_max: int = 0
    schedule_cycle_mean: int = 0
    schedule_cycle_total: int = 0
    schedule_cycle_mean_depth: int = 0
    schedule_queue_length: int = 0
    bf_cycle_last: int = 0
    bf_cycle_max: int = 0
    bf_cycle_mean: int = 0
    bf_cycle_counter: int = 0
    bf_last_depth: int = 0
    bf_last_depth_try: int = 0
    bf_depth_mean: int = 0
    bf_queue_len: int = 0
    bf_backfilled_jobs: int = 0
    bf_last_backfilled_jobs: int = 0
    bf_active: bool = False
    rpcs_by_message_type: list[RawRpcType] | None = None
    rpcs_by_user: list[RawRpcUser] | None = None
    pending_rpcs: list[RawPendingRpc] | None = None


def _per_type(types: list[RawRpcType], field: str) -> dict[str, int] | None:
    """``field`` (``queued``/``dropped``) of each message type; None when the API has no such field."""
    values = {r.message_type: getattr(r, field) for r in types if r.message_type}
    if not values or any(v is None for v in values.values()):
        return None
    return values


def convert_diag(s: RawStats[Num], num: Callable[[Num | None], int | None]) -> Diag:
    types = s.rpcs_by_message_type or []
    return Diag(
        server_thread_count=s.server_thread_count,
        agent_queue_size=s.agent_queue_size,
        agent_count=s.agent_count,
        agent_thread_count=s.agent_thread_count,
        dbd_agent_queue_size=s.dbd_agent_queue_size,
        jobs_submitted=s.jobs_submitted,
        jobs_started=s.jobs_started,
        jobs_completed=s.jobs_completed,
        jobs_canceled=s.jobs_canceled,
        jobs_failed=s.jobs_failed,
        jobs_pending=s.jobs_pending,
        jobs_running=s.jobs_running,
        schedule_cycle_last_seconds=usec(s.schedule_cycle_last),
        schedule_cycle_max_seconds=usec(s.schedule_cycle_max),
        schedule_cycle_mean_seconds=usec(s.schedule_cycle_mean),
        schedule_cycle_count=s.schedule_cycle_total,
        schedule_cycle_mean_depth=float(s.schedule_cycle_mean_depth),
        schedule_queue_length=s.schedule_queue_length,
        backfill_cycle_last_seconds=usec(s.bf_cycle_last),
        backfill_cycle_max_seconds=usec(s.bf_cycle_max),
        backfill_cycle_mean_seconds=usec(s.bf_cycle_mean),
        backfill_cycle_count=s.bf_cycle_counter,
        backfill_last_depth=s.bf_last_depth,
        backfill_last_depth_try=s.bf_last_depth_try,
        backfill_mean_depth=float(s.bf_depth_mean),
        backfill_queue_length=s.bf_queue_len,
        backfilled_jobs=s.bf_backfilled_jobs,
        last_backfilled_jobs=s.bf_last_backfilled_jobs,
        backfill_active=bool(s.bf_active),
        rpc_counts={r.message_type: r.count for r in s.rpcs_by_message_type or () if r.message_type},
        rpc_seconds={
            r.message_type: usec(r.total_time) for r in s.rpcs_by_message_type or () if r.message_type
        },
        rpc_user_counts={r.user: r.count for r in s.rpcs_by_user or () if r.user},
        rpc_user_seconds={r.user: usec(r.total_time) for r in s.rpcs_by_user or () if r.user},
        rpc_queued=_per_type(types, "queued"),
        rpc_dropped=_per_type(types, "dropped"),
        agent_pending_rpcs=None
        if s.pending_rpcs is None
        else {r.message_type: r.count for r in s.pending_rpcs if r.message_type},
        stats_time=epoch(num(s.req_time)),
        stats_reset_time=epoch(num(s.req_time_start)),
    )


# ----------------------------------------------------------------------------- licenses & resv


class RawLicense(Struct, gc=False):
    LicenseName: str
    Total: int = 0
    Used: int = 0
    Free: int = 0
    Reserved: int = 0
    Remote: bool = False


def convert_license(r: RawLicense) -> License:
    return License(
        name=r.LicenseName,
        total=r.Total,
        used=r.Used,
        free=r.Free,
        reserved=r.Reserved,
        remote=r.Remote,
    )


class RawReservation(Struct, Generic[Num], gc=False):
    name: str
    node_list: str | None = None
    node_count: int | None = None
    core_count: int | None = None
    start_time: Num | None = None
    end_time: Num | None = None
    partition: str | None = None
    flags: tuple[str, ...] | None = None
    users: str | None = None
    accounts: str | None = None


def convert_reservation(
    r: RawReservation[Num],
    num: Callable[[Num | None], int | None],
    count: Callable[[int | None], int | None],
) -> Reservation:
    """``count`` cleans ``node_count``/``core_count`` (plain ints in every generation)."""
    return Reservation(
        name=r.name,
        nodes=r.node_list or "",
        node_count=count(r.node_count) or 0,
        core_count=count(r.core_count) or 0,
        start_time=epoch(num(r.start_time)),
        end_time=epoch(num(r.end_time)),
        partition=r.partition or "",
        flags=tuple(f.upper() for f in r.flags or ()),
        users=r.users or "",
        accounts=r.accounts or "",
    )


# -------------------------------------------------------------------------------------- adapter


@dataclass(frozen=True, slots=True)
class Schema:
    """One API generation as :class:`Adapter` needs it.

    Each ``*_decoder`` decodes a whole answer into a struct with the envelope fields (see
    ``to_envelope``) and the endpoint's data field, UNSET when absent; ``job_array_decoder``
    decodes a bare JSON array of jobs. ``num`` unwraps the generation's JSON number and
    ``count`` cleans a field that is a plain int in every generation.
    """

    versions: tuple[str, ...]
    to_envelope: Callable[[Any], Envelope]
    num: Callable[[Any], int | None]
    count: Callable[[int | None], int | None]
    envelope_decoder: msgspec.json.Decoder[Any]
    jobs_decoder: msgspec.json.Decoder[Any]
    job_array_decoder: msgspec.json.Decoder[Any]
    convert_jobs: Callable[[Any, Caches], list[Job]]
    nodes_decoder: msgspec.json.Decoder[Any]
    convert_node: Callable[[Any, Caches], Node]
    partitions_decoder: msgspec.json.Decoder[Any]
    convert_partition: Callable[[Any], Partition]
    diag_decoder: msgspec.json.Decoder[Any]
    licenses_decoder: msgspec.json.Decoder[Any]
    reservations_decoder: msgspec.json.Decoder[Any]


class Adapter:
    """Translator of one API version (satisfies ``exporter.versions.Adapter``).

    A generation subclasses it and sets :attr:`schema`; the translation caches are per instance.
    """

    schema: ClassVar[Schema]

    def __init__(self, version: str) -> None:
        if version not in self.schema.versions:
            raise errors.VersionError(f"unsupported API version {version!r}")
        self.version = version
        self._caches = Caches()

    def __repr__(self) -> str:
        return f"<slurmrestd adapter {self.version}>"

    def _data(
        self, decoder: msgspec.json.Decoder[Any], body: bytes, endpoint: str, field: str
    ) -> tuple[Any, Envelope]:
        """Decode ``body``; return (its ``field``, its envelope), or raise :func:`missing`."""
        raw = decode(decoder, body, endpoint)
        env = self.schema.to_envelope(raw)
        data = getattr(raw, field)
        if data is UNSET:
            raise missing(endpoint, field, env)
        return data, env

    def envelope(self, body: bytes, endpoint: str) -> Envelope:
        return self.schema.to_envelope(decode(self.schema.envelope_decoder, body, endpoint))

    def jobs(self, body: bytes) -> tuple[list[Job], Envelope]:
        schema = self.schema
        jobs, env = self._data(schema.jobs_decoder, body, "jobs", "jobs")
        caches = self._caches
        caches.trim()
        return guarded("jobs", "job", lambda: schema.convert_jobs(jobs, caches)), env

    def job_array(self, array_text: bytes) -> list[Job]:
        schema = self.schema
        raw = decode(schema.job_array_decoder, array_text, "jobs")
        caches = self._caches
        caches.trim()
        return guarded("jobs", "job", lambda: schema.convert_jobs(raw, caches))

    def records(self, endpoint: str, array_text: bytes) -> list[Any]:
        """Records of ``endpoint`` (``nodes``, ``partitions``, ``licenses``, ``reservations``) from the bytes
        of a JSON array of them: decoded as the whole answer ``{"<endpoint>": [...]}`` would be."""
        whole: dict[str, Callable[[bytes], tuple[list[Any], Envelope]]] = {
            "nodes": self.nodes,
            "partitions": self.partitions,
            "licenses": self.licenses,
            "reservations": self.reservations,
        }
        return whole[endpoint](b'{"%s":%s}' % (endpoint.encode(), array_text))[0]

    def nodes(self, body: bytes) -> tuple[list[Node], Envelope]:
        convert = self.schema.convert_node
        items, env = self._data(self.schema.nodes_decoder, body, "nodes", "nodes")
        caches = self._caches
        caches.trim()
        return guarded("nodes", "node", lambda: [convert(r, caches) for r in items]), env

    def partitions(self, body: bytes) -> tuple[list[Partition], Envelope]:
        convert = self.schema.convert_partition
        items, env = self._data(self.schema.partitions_decoder, body, "partitions", "partitions")
        return guarded("partitions", "partition", lambda: [convert(r) for r in items]), env

    def diag(self, body: bytes) -> tuple[Diag, Envelope]:
        num = self.schema.num
        s, env = self._data(self.schema.diag_decoder, body, "diag", "statistics")
        return guarded("diag", "statistics", lambda: convert_diag(s, num)), env

    def licenses(self, body: bytes) -> tuple[list[License], Envelope]:
        items, env = self._data(self.schema.licenses_decoder, body, "licenses", "licenses")
        return [convert_license(r) for r in items], env

    def reservations(self, body: bytes) -> tuple[list[Reservation], Envelope]:
        num, count = self.schema.num, self.schema.count
        items, env = self._data(self.schema.reservations_decoder, body, "reservations", "reservations")
        return (
            guarded(
                "reservations", "reservation", lambda: [convert_reservation(r, num, count) for r in items]
            ),
            env,
        )
