"""Log output: one event, one line (text or JSON), and a throttle for events that can come in floods.

* :class:`TextFormatter` — ``time LEVEL logger: message``; a newline inside the message (slurmrestd's
  pretty-printed JSON quoted in an error) or a traceback is written as ``\\n``, so a log pipeline that
  splits on lines sees one record per event.
* :class:`JsonFormatter` — one JSON object per line (``time`` RFC 3339 UTC, ``level``, ``logger``,
  ``message``, ``exception`` when there is one), what Loki/Fluent Bit/Vector parse without rules.
* :class:`Throttle` — at most one line per key per interval, with how many were held back; for
  events a client can cause at will (refused gRPC calls, failed accepts).
* :class:`Conditions` — lasting conditions (a failing endpoint, an expired token, a cache that cannot
  list) logged when they start, change cause and end, with a count: not once per poll or retry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

__all__ = [
    "LOG_FORMATS",
    "Conditions",
    "JsonFormatter",
    "TextFormatter",
    "Throttle",
    "configure",
    "one_line",
    "span",
]

LOG_FORMATS = ("text", "json")


def one_line(text: str) -> str:
    """``text`` with line breaks written as ``\\n`` (and carriage returns as ``\\r``)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class TextFormatter(logging.Formatter):
    """``2026-12-02 03:33:02,123 WARNING exporter.poller: message`` — always one line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = record.stack_info
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure(level: str, fmt: str = "text") -> None:
    """Send the root logger's records to stderr at ``level`` in ``fmt`` (``text`` or ``json``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class Throttle:
    """Admits one event per key per ``every`` seconds; :meth:`admit` says how many of that key were
    held back since the last admitted one. Keys beyond ``max_keys`` make it forget the oldest half (a
    flood of distinct keys costs memory once, not without bound)."""

    def __init__(
        self, every: float = 10.0, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 1000
    ) -> None:
        self.every = every
        self._clock = clock
        self._max_keys = max_keys
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.suppressed = 0
        """Events held back, over all keys."""

    def admit(self, key: str) -> int | None:
        """None when ``key`` was admitted less than ``every`` s ago (the event is held back), else the
        number held back since its last admission (0 the first time)."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            self._held[key] = self._held.get(key, 0) + 1
            self.suppressed += 1
            return None
        if key not in self._last and len(self._last) >= self._max_keys:
            for old in list(self._last)[: self._max_keys // 2]:
                del self._last[old]
                self._held.pop(old, None)
        self._last.pop(key, None)
        self._last[key] = now  # re-inserted: the dict stays in order of last admission
        return self._held.pop(key, 0)

    @staticmethod
    def note(held: int, every: float) -> str:
        """`` (and N more like it in S s)`` when ``held`` events were left out, else ``""``."""
        return f" (and {held} more like it in {every:g} s)" if held else ""


def span(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Lasting:
    __slots__ = ("cause", "count", "reminded", "since", "text")

    def __init__(self, cause: str, text: str, now: float) -> None:
        self.cause, self.text, self.since, self.reminded, self.count = cause, text, now, now, 1


class Conditions:
    """Lasting conditions (an expired token, a failing endpoint, refused records), logged when they start,
    when their cause changes and when they end — with how many times they were seen and for how long —
    and reminded every ``remind_every`` seconds, not every time they are seen again (an expired token:
    one line per endpoint, not one per endpoint and poll; the metrics carry the rest).

    ``key`` names the condition (``poll jobs``); ``cause`` is a short stable name of why (an error kind:
    ``http_511``), compared to tell a change; ``text`` the current description, logged as it is."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        clock: Callable[[], float] = time.monotonic,
        remind_every: float = 3600.0,
    ) -> None:
        self._log = logger
        self._clock = clock
        self.remind_every = remind_every
        self._now: dict[str, _Lasting] = {}

    def seen(
        self,
        key: str,
        cause: str,
        text: str,
        level: int = logging.WARNING,
        exc_info: BaseException | None = None,
    ) -> None:
        """Condition ``key`` holds now, because of ``cause`` (``exc_info``: logged with its traceback when
        the condition starts or changes)."""
        now = self._clock()
        held = self._now.get(key)
        if held is None:
            self._now[key] = _Lasting(cause, text, now)
            self._log.log(level, "%s: %s", key, text, exc_info=exc_info)
            return
        if held.cause != cause:
            self._log.log(
                level,
                "%s: %s (before: %s, %d time(s) in %s)",
                key,
                text,
                held.cause,
                held.count,
                span(now - held.since),
                exc_info=exc_info,
            )
            self._now[key] = _Lasting(cause, text, now)
            return
        held.count += 1
        held.text = text
        if now - held.reminded >= self.remind_every:
            held.reminded = now
            self._log.log(
                level, "%s: still %s (%d time(s) in %s)", key, text, held.count, span(now - held.since)
            )

    def ended(self, key: str, text: str = "ok again") -> None:
        """Condition ``key`` no longer holds (nothing logged when it did not)."""
        held = self._now.pop(key, None)
        if held is not None:
            self._log.info(
                "%s: %s after %d time(s) in %s (last: %s)",
                key,
                text,
                held.count,
                span(self._clock() - held.since),
                held.text,
            )

    def ended_except(self, prefix: str, keep: Iterable[str], text: str = "ok again") -> None:
        """End every condition whose key starts with ``prefix`` but is not in ``keep``."""
        kept = set(keep)
        for key in [k for k in self._now if k.startswith(prefix) and k not in kept]:
            self.ended(key, text)

    def active(self) -> dict[str, tuple[str, int, float]]:
        """Key → (current text, times seen, since when on the clock) of every condition that holds."""
        return {k: (v.text, v.count, v.since) for k, v in self._now.items()}
