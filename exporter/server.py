"""The HTTP side of ``slurm-keda serve``: an aiohttp app built around one poller, no global state.

Routes: ``/metrics`` (rendered from the current snapshot, never calling slurmrestd; the body is
cached per snapshot), ``/healthz`` (process alive), ``/readyz`` (200 after the first good poll),
``/snapshot`` (the current snapshot as JSON) and ``/`` (a small status page).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from . import __version__
from .collector import SnapshotCollector
from .poller import Poller

POLLER: web.AppKey[Poller] = web.AppKey("poller", Poller)
REGISTRY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)


class _MetricsCache:
    """Rendered /metrics body per snapshot: N scrapes of one snapshot cost one render."""

    def __init__(self) -> None:
        self.key: object = None
        self.body = b""


CACHE: web.AppKey[_MetricsCache] = web.AppKey("metrics_cache", _MetricsCache)


def make_app(
    poller: Poller,
    *,
    clock: Callable[[], float] = time.time,
    per_node: bool = True,
    per_user: bool = False,
    per_account: bool = False,
    node_reasons: bool = False,
) -> web.Application:
    """The app; the keyword flags are the collector's cardinality guards (see SnapshotCollector)."""
    app = web.Application()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SnapshotCollector(
            lambda: poller.snapshot,
            lambda: poller.status,
            clock,
            per_node=per_node,
            per_user=per_user,
            per_account=per_account,
            node_reasons=node_reasons,
        )
    )
    app[POLLER] = poller
    app[REGISTRY] = registry
    app[CACHE] = _MetricsCache()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/snapshot", _snapshot)
    app.router.add_get("/", _index)
    return app


async def _metrics(request: web.Request) -> web.Response:
    poller = request.app[POLLER]
    cache = request.app[CACHE]
    # health families change with every poll (and age with time): key on poll count and second
    key = (poller.snapshot, poller.status.polls, int(time.time()))
    if cache.key != key:
        cache.body = generate_latest(request.app[REGISTRY])
        cache.key = key
    return web.Response(body=cache.body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[POLLER].snapshot is None:
        err = request.app[POLLER].status.last_error or "no poll finished yet"
        return web.Response(status=503, text=f"not ready: {err}\n")
    return web.Response(text="ready\n")


async def _snapshot(request: web.Request) -> web.Response:
    snap = request.app[POLLER].snapshot
    if snap is None:
        return web.Response(status=503, text="no snapshot yet\n")
    return web.Response(body=msgspec.json.encode(snap), content_type="application/json")


async def _index(request: web.Request) -> web.Response:
    poller = request.app[POLLER]
    st = poller.status
    snap = poller.snapshot
    rows = "".join(
        f"<tr><td>{html.escape(e.name)}</td><td>{e.successes}</td><td>{sum(e.errors.values())}</td>"
        f"<td>{e.last_duration * 1000:.1f} ms</td><td>{html.escape(e.last_error)}</td></tr>"
        for e in (st.negotiation, *st.endpoints.values())
    )
    summary = (
        f"cluster {html.escape(snap.cluster)}, Slurm {html.escape(snap.slurm_version)}, "
        f"{len(snap.jobs)} job records, {len(snap.nodes)} nodes, taken "
        f"{time.time() - snap.taken_at:.1f}s ago"
        if snap
        else "no snapshot yet"
    )
    page = f"""<!doctype html><html><head><title>slurm-keda</title></head><body>
<h1>slurm-keda {__version__}</h1>
<p>API version {html.escape(st.api_version or "not negotiated")}; {summary}</p>
<p><a href="/metrics">/metrics</a> · <a href="/snapshot">/snapshot</a> ·
<a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p>
<table border="1"><tr><th>endpoint</th><th>ok</th><th>errors</th><th>last duration</th>
<th>last error</th></tr>
{rows}</table></body></html>"""
    return web.Response(text=page, content_type="text/html")
