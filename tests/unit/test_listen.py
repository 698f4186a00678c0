"""The HTTP listener under abuse: half-open and slow clients, the connection cap, loop error floods."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import statistics
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.listen import ConnectionGuard, ListenLimits, LoopErrorLimiter, fitting_limits
from exporter.server import GUARD, make_app, start
from testkit.served import Served, get, served, value
from testkit.tools import eventually

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextlib.asynccontextmanager
async def raw_connections(url: str, n: int) -> AsyncIterator[list[asyncio.StreamWriter]]:
    """``n`` connections that send nothing (half-open clients); closed on exit."""
    host, port = host_port(url)
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(n):
            _, w = await asyncio.open_connection(host, port)
            writers.append(w)
        yield writers
    finally:
        for w in writers:
            w.close()
        for w in writers:
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()


@contextlib.asynccontextmanager
async def guarded(limits: ListenLimits) -> AsyncIterator[tuple[Served, ConnectionGuard]]:
    async with served(listen_limits=limits) as s:
        await s.poller.poll_once()
        yield s, s.app[GUARD]


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except ConnectionResetError:
        return True


async def test_half_open_connections_are_aborted_after_the_header_timeout() -> None:
    async with guarded(ListenLimits(header_timeout=0.3)) as (s, guard):
        async with raw_connections(s.url, 20):
            await eventually(lambda: guard.open == 0, 5.0, "the half-open connections to be aborted", 0.05)
        assert guard.header_timeouts == 20
        status, _, body = await get(s.url + "/metrics")
        assert status == 200
        assert value(body, 'slurm_exporter_http_connections_closed_total{reason="header_timeout"}') == 20


async def test_headers_sent_a_byte_at_a_time_still_time_out() -> None:
    # slowloris: every byte resets an idle timer, so only a deadline on the whole header block ends it
    async with guarded(ListenLimits(header_timeout=0.4)) as (s, guard):
        reader, writer = await asyncio.open_connection(*host_port(s.url))
        started = time.monotonic()
        try:
            for byte in REQUEST[:-2]:
                if writer.is_closing() or reader.at_eof():
                    break
                writer.write(bytes([byte]))
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                await asyncio.sleep(0.05)
            assert await closed_by_server(reader, 2.0)
        finally:
            writer.close()
        assert time.monotonic() - started < 2.0
        assert guard.header_timeouts == 1


async def test_a_kept_alive_connection_idle_between_requests_is_not_a_header_timeout() -> None:
    async with guarded(ListenLimits(header_timeout=0.2, idle_timeout=5.0)) as (s, guard):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            for _ in range(2):
                async with http.get(s.url + "/metrics") as r:
                    assert r.status == 200
                    await r.read()
                await asyncio.sleep(0.5)  # longer than the header timeout, shorter than the idle one
        assert guard.header_timeouts == 0


async def test_at_the_cap_a_half_open_connection_makes_room() -> None:
    async with guarded(ListenLimits(max_connections=5, header_timeout=30.0)) as (s, guard):
        async with raw_connections(s.url, 5):
            await eventually(lambda: guard.open == 5, 2.0, "5 open connections", 0.02)
            status, _, _ = await get(s.url + "/metrics")  # a scraper still gets in, after the grace
            assert status == 200
            assert guard.closed_half_open == 1 and guard.closed_idle == 0  # one, only for the scraper
        assert guard.header_timeouts == 0


async def test_at_the_cap_an_idle_kept_alive_connection_makes_room() -> None:
    async with guarded(ListenLimits(max_connections=2, header_timeout=30.0, idle_timeout=30.0)) as (s, guard):
        host, port = host_port(s.url)
        kept = [await asyncio.open_connection(host, port) for _ in range(2)]
        try:
            for reader, writer in kept:  # requests answered, connections kept alive: idle
                writer.write(REQUEST)
                await reader.readuntil(b"\r\n\r\n")
            status, _, _ = await get(s.url + "/metrics")
            assert status == 200
            assert guard.closed_idle == 1 and guard.closed_half_open == 0
            await asyncio.wait_for(kept[0][0].read(), 2.0)  # to EOF: the longest idle one went
            assert not kept[1][0].at_eof()
        finally:
            for _, w in kept:
                w.close()


@contextlib.asynccontextmanager
async def guarded_with_slow_route(
    limits: ListenLimits,
) -> AsyncIterator[tuple[str, ConnectionGuard, asyncio.Event]]:
    """The app with one more route, ``/slow``, whose answer waits for the event (a request in flight)."""
    release = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="done\n")

    async with served(listen_limits=limits) as s:
        app = make_app(s.poller, listen_limits=limits)
        app.router.add_get("/slow", slow)
        server = await start(app, "127.0.0.1", 0)
        try:
            yield server.urls[0], app[GUARD], release
        finally:
            release.set()
            await server.close()


async def test_a_request_in_flight_is_never_closed_for_room_the_newcomer_waits() -> None:
    async with guarded_with_slow_route(ListenLimits(max_connections=2, header_timeout=30.0)) as (
        url,
        guard,
        go,
    ):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            slow = [asyncio.create_task(_read(http, url + "/slow")) for _ in range(2)]
            await eventually(
                lambda: guard.open == 2 and not guard._waiting, 5.0, "two requests in flight", 0.02
            )
            newcomer = asyncio.create_task(_read(http, url + "/metrics"))
            await asyncio.sleep(1.5)  # past the half-open grace: nobody may be closed for it
            assert not newcomer.done() and guard.refused == 0 and guard.waited_at_cap == 1
            go.set()
            assert [await t for t in slow] == [200, 200]
            assert await asyncio.wait_for(newcomer, 5.0) == 200  # answered, never refused
        assert guard.refused == 0


async def _read(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url) as r:
        await r.read()
        return r.status


@pytest.mark.heavy
async def test_a_thousand_keep_alive_scrapers_beside_a_thousand_half_open_all_answered() -> None:
    """Issue 20 item 2: with keep-alive clients only 520–612 of 1,000 got an answer (the cap disconnected the
    rest). Now every scraper is answered (slower is fine) while half-open connections are still cut."""
    async with guarded(ListenLimits(max_connections=300, header_timeout=5.0)) as (s, guard):
        async with raw_connections(s.url, 1000):
            connector = aiohttp.TCPConnector(limit=0)  # one kept-alive connection per scraper
            async with aiohttp.ClientSession(connector=connector) as http:
                t0 = time.perf_counter()
                statuses = await asyncio.gather(
                    *(_read(http, s.url + "/metrics") for _ in range(1000)), return_exceptions=True
                )
                took = time.perf_counter() - t0
                assert statuses == [200] * 1000
                assert guard.open <= 300
                assert guard.closed_half_open >= 700  # the half-open ones made the room
        logging.getLogger(__name__).info("1,000 keep-alive scrapers beside 1,000 half-open: %.2f s", took)


async def test_many_half_open_connections_and_scrapes_at_once() -> None:
    # bounded load on loopback: 1,000 half-open clients over a cap of 300 and 1,000 concurrent scrapes
    fds_before = len(os.listdir("/proc/self/fd"))
    async with guarded(ListenLimits(max_connections=300, header_timeout=1.0)) as (s, guard):
        async with raw_connections(s.url, 1000):
            assert guard.open <= 300
            timings: list[float] = []

            async def scrape(http: aiohttp.ClientSession) -> int:
                t0 = time.perf_counter()
                async with http.get(s.url + "/metrics") as r:
                    await r.read()
                timings.append(time.perf_counter() - t0)
                return r.status

            connector = aiohttp.TCPConnector(limit=100)
            async with aiohttp.ClientSession(connector=connector) as http:
                statuses = await asyncio.gather(*(scrape(http) for _ in range(1000)))
            assert statuses == [200] * 1000
            assert guard.open <= 300
        await eventually(lambda: guard.open == 0, 5.0, "every connection to be closed", 0.05)
    p99 = statistics.quantiles(timings, n=100)[98]
    logging.getLogger(__name__).info("1,000 scrapes beside 1,000 half-open: p99 %.3f s", p99)
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 10  # nothing left open


def test_loop_errors_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = LoopErrorLimiter(every=10.0, clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(100_000):
                limiter(loop, {"message": "socket.accept() out of system resource"})
            limiter(loop, {"message": "another problem"})
            now[0] = 10.5
            limiter(loop, {"message": "socket.accept() out of system resource"})
    finally:
        loop.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "socket.accept() out of system resource",
        "another problem",
        "socket.accept() out of system resource (and 99999 more like it in 10 s)",
    ]
    assert limiter.suppressed == 99_999


def test_an_os_error_from_the_loop_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LoopErrorLimiter(every=10.0, clock=lambda: 0.0)
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR):
            limiter(
                loop,
                {
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(24, "Too many open files"),
                },
            )
    finally:
        loop.close()
    (record,) = caplog.records
    assert record.getMessage() == "socket.accept() out of system resource: [Errno 24] Too many open files"
    assert record.exc_info is None


def test_the_cap_leaves_descriptors_for_the_rest_of_the_process(caplog: pytest.LogCaptureFixture) -> None:
    assert fitting_limits(ListenLimits(max_connections=512), 20_000).max_connections == 512
    with caplog.at_level(logging.WARNING):
        assert fitting_limits(ListenLimits(max_connections=512), 300, in_use=40).max_connections == 100
    assert "--http-max-connections 512 is above what the open-files limit (300) leaves" in caplog.text
