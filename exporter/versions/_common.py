"""Helpers shared by every API-generation module: decoding with typed errors, caches, envelope."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from exporter import errors, slurmtext
from exporter.model import MIB, Envelope

T = TypeVar("T")

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
