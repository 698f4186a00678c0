"""Listening sockets that stay usable under abuse: a connection cap with backpressure, a header timeout,
a bounded rate of loop error logs, and the open-files limit raised to what the process may have.

aiohttp has an idle (keep-alive) timeout between requests but none for a client that connects and
never finishes its request headers; 1,000 such half-open connections held every file descriptor,
and asyncio then logged each failed ``accept()`` (hundreds of thousands of lines a minute).

:class:`Listener` accepts connections itself (``loop.sock_accept``) and only while the
:class:`ConnectionGuard` has room: at ``max_connections`` it stops accepting, and new connections wait in
the kernel's listen backlog — slower, never refused. To make room it closes, oldest first, a connection
still waiting for its request headers :data:`HALF_OPEN_GRACE` s after it opened or began a request with
nothing unread in its socket (a scraper sends its request at once, a half-open peer never does), else
the longest-idle kept-alive
connection (no request in flight: the client opens a new one for its next scrape). A connection with a
complete request in flight, or a response being written, is never closed for room. Every connection's
request headers must be complete ``header_timeout`` s after its first byte of a request (or after it
opened), else it is aborted (slowloris). TLS handshakes count against the cap and time out alike. The
server only answers GETs, so every byte after a complete header block starts the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import resource
import socket
import ssl
import termios
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .logs import Throttle

log = logging.getLogger(__name__)

_END_OF_HEADERS = b"\r\n\r\n"

HALF_OPEN_GRACE = 1.0
"""Seconds a connection may wait for its request headers before, at the cap, it may be closed to make
room — and only while no byte of it waits unread in its socket (a scraper whose request the server has
not read yet is never taken for a half-open peer); ``header_timeout`` closes it anyway."""
IDLE_GRACE = 1.0
"""Seconds a kept-alive connection must have been idle before, at the cap, it may be closed to make room:
a client that just got its answer may be sending its next request on it (a request already in its
socket makes it busy, not idle)."""
AT_CAP_POLL = 0.05
"""Seconds between looks for a connection that turned idle while the listener waits at the cap."""


@dataclass(frozen=True)
class ListenLimits:
    """Per-listener limits; durations in seconds."""

    max_connections: int = 1024
    """Open connections at most (TLS handshakes included); more wait in the listen backlog."""
    header_timeout: float = 10.0
    """Time a connection has to complete a request's headers (from its first byte, or from opening)."""
    idle_timeout: float = 60.0
    """Time a kept-alive connection may sit idle between requests (aiohttp's keep-alive timeout)."""


class ConnectionGuard:
    """Counts one listener's connections and applies :class:`ListenLimits` to them."""

    def __init__(self, limits: ListenLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self.open = 0
        """Connections open now (accepted, TLS handshakes included)."""
        self.handshaking = 0
        """Of those, TLS handshakes not finished yet."""
        self.closed_half_open = 0
        """Connections closed at the cap because they waited :data:`HALF_OPEN_GRACE` s for headers."""
        self.closed_idle = 0
        """Kept-alive connections with no request in flight closed at the cap to make room."""
        self.header_timeouts = 0
        """Connections aborted because their request headers did not complete in time."""
        self.waited_at_cap = 0
        """Times the listener stopped accepting because every connection was busy (they waited, queued)."""
        self._waiting: dict[_Guarded, float] = {}
        """Connections waiting for request headers → since when, oldest first."""
        self._connections: set[_Guarded] = set()
        self._changed = asyncio.Event()

    @property
    def refused(self) -> int:
        """Connections closed at the cap (half-open or idle ones; never one with a request in flight)."""
        return self.closed_half_open + self.closed_idle

    def factory(self, inner: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory around the server's own; each connection it makes is counted once open."""
        return lambda: _Guarded(self, inner)

    def families(self) -> Iterable[Metric]:
        """``slurm_exporter_http_*`` families of the counters (rendered per scrape)."""
        yield GaugeMetricFamily(
            "slurm_exporter_http_connections", "HTTP connections open now.", value=self.open
        )
        yield GaugeMetricFamily(
            "slurm_exporter_http_max_connections",
            "HTTP connections allowed at once; more wait in the listen backlog until there is room.",
            value=self.limits.max_connections,
        )
        closed = CounterMetricFamily(
            "slurm_exporter_http_connections_closed",
            "HTTP connections closed by the server's limits: at the connection cap, one still waiting for "
            "its request headers after 1 s with nothing unread (half_open) or a kept-alive one idle for "
            "1 s (idle); request headers not complete within the header timeout (header_timeout).",
            labels=["reason"],
        )
        closed.add_metric(["half_open"], self.closed_half_open)
        closed.add_metric(["idle"], self.closed_idle)
        closed.add_metric(["header_timeout"], self.header_timeouts)
        yield closed
        waited = CounterMetricFamily(
            "slurm_exporter_http_accept_waits",
            "Times the HTTP listener stopped accepting at the connection cap because every open connection "
            "had a request in flight (new connections waited in the backlog, none was refused).",
        )
        waited.add_metric([], self.waited_at_cap)
        yield waited

    # -- the accept side ------------------------------------------------------------------------

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _victim(self, now: float) -> _Guarded | None:
        """The connection to close for room: the oldest one waiting for headers past the grace, else the
        longest-idle kept-alive one; None when every connection is busy (or too young to judge)."""
        grace = min(HALF_OPEN_GRACE, self.limits.header_timeout)
        for conn, since in self._waiting.items():
            if now - since < grace:
                break  # the oldest left is too young: so are the rest
            if not conn.unread():
                return conn
        idle = [c for c in self._connections if now - c.active_at >= IDLE_GRACE and c.idle()]
        return min(idle, key=lambda c: c.active_at) if idle else None

    async def room(self) -> None:
        """Return once a new connection may be accepted, making room at the cap if a connection can go."""
        waited = False
        while self.open >= self.limits.max_connections:
            now = self._clock()
            victim = self._victim(now)
            if victim is not None:
                if victim in self._waiting:
                    self.closed_half_open += 1
                else:
                    self.closed_idle += 1
                victim._close()
                continue
            if not waited:
                waited = True
                self.waited_at_cap += 1
            oldest = next(iter(self._waiting.values()), None)
            delay = AT_CAP_POLL
            if oldest is not None:
                delay = min(delay, max(0.001, oldest + HALF_OPEN_GRACE - now))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()


class Listener:
    """Accepts on bound listening sockets while the guard has room (see the module doc); :meth:`close`."""

    def __init__(
        self,
        guard: ConnectionGuard,
        factory: Callable[[], asyncio.BaseProtocol],
        sockets: list[socket.socket],
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.guard = guard
        self.sockets = sockets
        self._factory = guard.factory(factory)
        self._ssl = ssl_context
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for sock in self.sockets:
            name = f"http-accept-{sock.getsockname()[1]}"
            self._accepting.append(asyncio.create_task(self._accept_loop(sock), name=name))

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await _readable(loop, sock)  # a connection waits: only now make room for it
                await self.guard.room()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop the server from accepting
                log.exception("HTTP listener: making room failed; accepting anyway")
                await asyncio.sleep(0.1)
            try:
                conn, _ = sock.accept()
            except BlockingIOError:  # it went away meanwhile
                continue
            except OSError as e:  # out of descriptors or buffers: one line per 10 s, then try again
                _ACCEPT_ERRORS.warn(e)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            self.guard.open += 1
            task = asyncio.create_task(self._connect(conn), name="http-connection")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        """Hand the accepted socket to the protocol (after the TLS handshake, if any)."""
        loop = asyncio.get_running_loop()
        guard = self.guard
        handshaking = self._ssl is not None
        guard.handshaking += handshaking
        made = False
        try:
            kw: dict[str, Any] = {}
            if self._ssl is not None:
                kw = {"ssl": self._ssl, "ssl_handshake_timeout": guard.limits.header_timeout}
            _, protocol = await loop.connect_accepted_socket(self._factory, conn, **kw)
            made = isinstance(protocol, _Guarded) and protocol.made
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as e:
            log.debug("HTTP connection not set up: %s", e)
        finally:
            guard.handshaking -= handshaking
            if not made:  # the protocol never took it over: it is gone
                guard.open -= 1
                guard._notify()
                with contextlib.suppress(OSError):
                    conn.close()

    async def close(self) -> None:
        """Stop accepting and close the listening sockets (open connections are the runner's to close)."""
        for task in [*self._accepting, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._accepting, *self._tasks, return_exceptions=True)
        for sock in self.sockets:
            sock.close()


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` is readable (for a listening socket: a connection is waiting to be accepted)."""
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def bind_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets for every address of ``host`` (all interfaces for None/"") on
    ``port``, as ``loop.create_server`` binds them. ``OSError`` when one cannot be bound."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _AcceptErrors:
    """``accept()`` failures, one log line per 10 s with a count."""

    def __init__(self) -> None:
        self._throttle = Throttle(10.0)

    def warn(self, error: OSError) -> None:
        held = self._throttle.admit(str(error.errno))
        if held is not None:
            log.error("HTTP accept failed: %s%s", error, Throttle.note(held, self._throttle.every))


_ACCEPT_ERRORS = _AcceptErrors()


class _Guarded(asyncio.Protocol):
    """Delegates to the server's protocol; times out unfinished headers; knows whether it is idle."""

    def __init__(self, guard: ConnectionGuard, inner: Callable[[], asyncio.BaseProtocol]) -> None:
        self._guard = guard
        self._make_inner = inner
        self._inner: Any = None
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self.counted = False
        self.made = False
        """``connection_made`` was called: the protocol owns the count from then on."""
        self.active_at = guard._clock()
        """When the last request began (or the connection opened)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.counted = self.made = True  # already counted by the listener's accept
        self._guard._connections.add(self)
        self._transport = transport
        self._arm()
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def idle(self) -> bool:
        """Kept alive with no request in flight: not waiting for headers, and aiohttp's handler waits for
        the next request (its own keep-alive test) with no request in progress. False when unsure."""
        if self._timer is not None or self._inner is None or self._transport is None:
            return False
        waiter = getattr(self._inner, "_waiter", None)
        busy = getattr(self._inner, "_request_in_progress", True)
        return (
            waiter is not None and not waiter.done() and not busy and not getattr(self._inner, "_messages", 1)
        )

    def unread(self) -> bool:
        """Whether bytes from the peer wait in the socket, not yet read by the event loop."""
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return False
        try:
            pending = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except (OSError, ValueError):
            return False
        return int.from_bytes(pending, "little") > 0

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._guard.limits.header_timeout, self._expire)
        self.active_at = self._guard._clock()
        self._guard._waiting[self] = self.active_at

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
        self._uncount()
        transport = self._transport
        if isinstance(transport, asyncio.WriteTransport) and not transport.is_closing():
            transport.abort()

    def _uncount(self) -> None:
        if self.counted:
            self.counted = False
            self._guard.open -= 1
            self._guard._connections.discard(self)
            self._guard._notify()

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
        self._uncount()
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
    connections, and a margin (160; sized when asyncio's own server accepted up to 100 a tick — the
    :class:`Listener` accepts one at a time, so it is generous now)."""
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
