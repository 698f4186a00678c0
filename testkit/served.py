"""A real ``serve`` HTTP side in-process: the fake slurmrestd, the real client, poller and app, on a
free port."""

from __future__ import annotations

import base64
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app, start
from exporter.session import SlurmSession
from exporter.webconfig import WebConfig
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED
from testkit.tools import Clock, no_sleep

DATA = RECORDED / "slurm-26.05.5"


@dataclass
class Served:
    fake: FakeSlurmrestd
    poller: Poller
    clock: Clock
    url: str
    renders: list[str]
    app: web.Application


@asynccontextmanager
async def served(web_config: WebConfig | None = None, **app_kw: Any) -> AsyncIterator[Served]:
    """A fake slurmrestd, a poller on it (not yet polled) and the app on 127.0.0.1:<free port>."""
    fake = FakeSlurmrestd(DATA)
    clock = Clock(1_900_000_000.0)
    renders: list[str] = []
    async with serve(fake) as fake_url:
        client = SlurmClient(
            ClientConfig(base_url=fake_url, token=TokenSource(token="good-token"), retries=0), sleep=no_sleep
        )
        poller = Poller(SlurmSession(client), PollerConfig(), clock=clock)
        async with client:
            app = make_app(poller, clock=clock, web_config=web_config, on_render=renders.append, **app_kw)
            http_server = await start(app, "127.0.0.1", 0)
            try:
                yield Served(fake, poller, clock, http_server.urls[0], renders, app)
            finally:
                await http_server.close()


async def get(
    url: str,
    *,
    accept: str = "",
    encoding: str = "identity",
    auth: tuple[str, str] | None = None,
    ssl_ctx: ssl.SSLContext | None = None,
    decompress: bool = True,
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Accept-Encoding": encoding}
    if accept:
        headers["Accept"] = accept
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    connector = aiohttp.TCPConnector(ssl=ssl_ctx) if ssl_ctx is not None else None
    async with (
        aiohttp.ClientSession(connector=connector, auto_decompress=decompress) as s,
        s.get(url, headers=headers) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def value(body: bytes, sample: str) -> float:
    m = re.search(rf"^{re.escape(sample)} (\S+)$", body.decode(), re.M)
    assert m is not None, f"{sample} not in body"
    return float(m.group(1))
