"""Small helpers shared by several test files."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter.errors import NotJSONError, TruncatedError
from exporter.model import Snapshot
from exporter.source import LatestSnapshot
from exporter.versions import adapter_for

T = TypeVar("T")


async def eventually(
    check: Callable[[], T | Awaitable[T | None] | None], timeout: float, what: str, interval: float = 0.2
) -> T:
    """Call ``check`` (plain or async) until it returns something truthy (returned); AssertionError
    naming ``what`` after ``timeout`` seconds (of the event loop's clock: real even under freezegun's
    ``real_asyncio``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert loop.time() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(interval)


SnapshotFeed = LatestSnapshot
"""A snapshot source like :class:`exporter.poller.Poller`: ``put`` swaps in the next snapshot."""


def promtool_path() -> str:
    """Path of promtool; a skip without it, a failure when CI requires the real tools."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("SLURM_KEDA_REQUIRE_LAB") == "1":
            pytest.fail("promtool not installed (Debian package 'prometheus') but SLURM_KEDA_REQUIRE_LAB=1")
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    return path


def recorded_snapshot(folder: Path, version: str, taken_at: float | None = None) -> Snapshot:
    """The snapshot one poll builds from the recorded answers in ``folder`` (``<endpoint>.json`` of API
    ``version``; missing endpoints stay empty, the others count as fetched then). Taken at /diag's
    ``req_time`` (slurmctld's clock when it was recorded), else at the jobs' ``last_update``: times in the
    data are judged as they were then. ``taken_at`` given: taken (and fetched) then instead."""
    a = adapter_for(version)

    present: list[str] = []

    def read(endpoint: str) -> bytes | None:
        path = folder / f"{endpoint}.json"
        if not path.exists():
            return None
        present.append(endpoint)
        return path.read_bytes()

    body = read("jobs")
    jobs, env = a.jobs(body) if body is not None else ([], None)
    nodes = a.nodes(body)[0] if (body := read("nodes")) is not None else []
    parts = a.partitions(body)[0] if (body := read("partitions")) is not None else []
    licenses = a.licenses(body)[0] if (body := read("licenses")) is not None else []
    reservations = a.reservations(body)[0] if (body := read("reservations")) is not None else []
    diag = a.diag(body)[0] if (body := read("diag")) is not None else None
    if taken_at is None:
        taken_at = diag.stats_time if diag is not None else None
    if taken_at is None:
        taken_at = env.last_update if env is not None else None
    assert taken_at is not None, f"{folder}: no /diag req_time and no jobs last_update"
    return Snapshot(
        taken_at=taken_at,
        api_version=version,
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        partitions=tuple(parts),
        licenses=tuple(licenses),
        reservations=tuple(reservations),
        diag=diag,
        fetched_at=dict.fromkeys(present, taken_at),
    )


@asynccontextmanager
async def serve_app(
    app: web.Application, *, before_cleanup: Callable[[], None] = lambda: None, shutdown_timeout: float = 60.0
) -> AsyncIterator[str]:
    """Run an aiohttp ``app`` on 127.0.0.1 (a free port); yield its base URL. ``before_cleanup`` runs first
    on exit (e.g. ending streams the server holds open)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        before_cleanup()
        await runner.cleanup()


def decode_to_dicts(batch: bytes) -> list[object]:
    """A decoder with the contract the adapters follow: typed errors for non-arrays."""
    try:
        return [json.loads(bytes(r)) for r in _RAW.decode(batch)]
    except msgspec.DecodeError as e:
        if "truncated" in str(e):
            raise TruncatedError(str(e)) from None
        raise NotJSONError(str(e)) from None


_RAW = msgspec.json.Decoder(list[msgspec.Raw])


class Clock:
    """A clock a test moves by hand: ``clock.now`` is the time in epoch seconds it answers."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def no_sleep(_: float) -> None:
    """A backoff sleep that returns at once (retries run back to back)."""
    return None


def free_port() -> int:
    """A TCP port nothing listens on now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Families(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> list[Metric]:
        return self.metrics


def registry_of(metrics: Iterable[Metric]) -> CollectorRegistry:
    """A registry serving ``metrics`` (families built once), for ``get_sample_value`` in tests."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Families(metrics))
    return reg
