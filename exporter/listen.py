"""Listening sockets that stay usable under abuse: a connection cap, a header timeout, a bounded
rate of loop error logs, and the open-files limit raised to what the process may have.

aiohttp has an idle (keep-alive) timeout between requests but none for a client that connects and
never finishes its request headers; 1,000 such half-open connections held every file descriptor,
and asyncio then logged each failed ``accept()`` (hundreds of thousands of lines a minute).
:class:`ConnectionGuard` wraps the server's protocol factory: a connection whose request headers
are not complete ``header_timeout`` seconds after its first byte of a request (or after it opened)
is aborted; at ``max_connections`` a new connection takes the place of the oldest one still
waiting for its headers (a scraper sends its request at once, a half-open peer never does), or is
closed at once when every connection is busy (the process keeps descriptors for the ones it has).
The server only answers GETs, so every byte after a complete header block starts the next request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .logs import Throttle

log = logging.getLogger(__name__)

_END_OF_HEADERS = b"\r\n\r\n"


@dataclass(frozen=True)
class ListenLimits:
    """Per-listener limits; durations in seconds."""

    max_connections: int = 512
    """Open connections at most; more are closed as soon as they are accepted."""
    header_timeout: float = 10.0
    """Time a connection has to complete a request's headers (from its first byte, or from opening)."""
    idle_timeout: float = 60.0
    """Time a kept-alive connection may sit idle between requests (aiohttp's keep-alive timeout)."""


class ConnectionGuard:
    """Counts one listener's connections and applies :class:`ListenLimits` to them."""

    def __init__(self, limits: ListenLimits) -> None:
        self.limits = limits
        self.open = 0
        """Connections open now."""
        self.refused = 0
        """Connections closed at the cap: the oldest waiting for headers, or the new one."""
        self.header_timeouts = 0
        """Connections aborted because their request headers did not complete in time."""
        self._waiting: dict[_Guarded, None] = {}
        """Connections waiting for request headers, oldest first."""

    def factory(self, inner: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` around the server's own."""
        return lambda: _Guarded(self, inner)

    def families(self) -> Iterable[Metric]:
        """``slurm_exporter_http_*`` families of the counters (rendered per scrape)."""
        yield GaugeMetricFamily(
            "slurm_exporter_http_connections", "HTTP connections open now.", value=self.open
        )
        yield GaugeMetricFamily(
            "slurm_exporter_http_max_connections",
            "HTTP connections allowed at once; more are closed on arrival.",
            value=self.limits.max_connections,
        )
        closed = CounterMetricFamily(
            "slurm_exporter_http_connections_closed",
            "HTTP connections closed by the server's limits: at the connection cap (limit; the oldest "
            "one waiting for its request headers, else the new one) or request headers not complete "
            "within the header timeout (header_timeout).",
            labels=["reason"],
        )
        closed.add_metric(["limit"], self.refused)
        closed.add_metric(["header_timeout"], self.header_timeouts)
        yield closed


class _Guarded(asyncio.Protocol):
    """Delegates to the server's protocol; refuses over the cap and times out unfinished headers."""

    def __init__(self, guard: ConnectionGuard, inner: Callable[[], asyncio.BaseProtocol]) -> None:
        self._guard = guard
        self._make_inner = inner
        self._inner: Any = None
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if guard.open >= guard.limits.max_connections:
            guard.refused += 1
            if not guard._waiting:
                assert isinstance(transport, asyncio.WriteTransport)
                transport.abort()
                return
            next(iter(guard._waiting))._close()  # its connection_lost comes later: count it gone now
        guard.open += 1
        self._counted = True
        self._transport = transport
        self._arm()
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._guard.limits.header_timeout, self._expire)
        self._guard._waiting[self] = None

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._guard._waiting.pop(self, None)

    def _expire(self) -> None:
        self._timer = None
        self._guard.header_timeouts += 1
        self._close()

    def _close(self) -> None:
        """Abort the connection and stop counting it (its ``connection_lost`` follows later)."""
        self._disarm()
        if self._counted:
            self._counted = False
            self._guard.open -= 1
        transport = self._transport
        if isinstance(transport, asyncio.WriteTransport) and not transport.is_closing():
            transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._inner is None or self._transport is None or self._transport.is_closing():
            return
        if self._timer is None:
            self._arm()  # the first bytes of the next request
        seen = self._tail + data
        if _END_OF_HEADERS in seen:
            self._disarm()
            self._tail = b""
        else:
            self._tail = seen[-3:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return bool(self._inner.eof_received()) if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            self._counted = False
            self._guard.open -= 1
        self._disarm()
        self._transport = None
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class LoopErrorLimiter:
    """An event-loop exception handler that logs each distinct message at most once per ``every``
    seconds, then says how many were left out (asyncio logs every failed ``accept()`` otherwise)."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = Throttle(every, clock=clock)

    @property
    def suppressed(self) -> int:
        return self._throttle.suppressed

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        key = str(context.get("message", ""))[:200]
        left_out = self._throttle.admit(key)
        if left_out is None:
            return
        message = key + Throttle.note(left_out, self._throttle.every)
        exc = context.get("exception")
        if isinstance(exc, OSError):  # out of descriptors, buffers: one line, its traceback says nothing more
            log.error("%s: %s", message, exc)
            return
        loop.default_exception_handler({**context, "message": message})


def raise_open_files_limit() -> int:
    """Raise the soft open-files limit to the hard one (as Go programs do); return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.debug("cannot raise the open-files limit from %d: %s", soft, e)
    return soft


def fitting_limits(limits: ListenLimits, open_files: int, in_use: int | None = None) -> ListenLimits:
    """``limits`` with the connection cap lowered, when the open-files limit is low, to leave room for
    the descriptors already ``in_use`` (default: counted now), slurmrestd's and the gRPC port's
    connections, and one burst of accepts (asyncio accepts up to 100 a tick; an evicted
    connection's descriptor is freed only on the next)."""
    if in_use is None:
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = 32
    room = max(8, open_files - in_use - 160)
    if limits.max_connections <= room:
        return limits
    log.warning(
        "--http-max-connections %d is above what the open-files limit (%d) leaves; using %d",
        limits.max_connections,
        open_files,
        room,
    )
    return ListenLimits(room, limits.header_timeout, limits.idle_timeout)
