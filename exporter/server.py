"""The HTTP side of ``slurm-keda serve``: an aiohttp app built around one poller, no global state.

Routes: ``/metrics`` (rendered from the current snapshot, never calling slurmrestd), ``/healthz``
(process alive), ``/readyz`` (200 after the first good poll), ``/snapshot`` (the current snapshot as
JSON) and ``/`` (a small status page).

``/metrics`` speaks Prometheus text 0.0.4 by default and OpenMetrics 1.0 when ``Accept`` asks for
``application/openmetrics-text`` (:func:`prometheus_client.exposition.choose_encoder`), gzipped
when ``Accept-Encoding`` allows. The body is two parts (see :class:`MetricsRenderer`): the Slurm
families, which depend only on the snapshot and are rendered ONCE per snapshot and format (in a
thread, and ahead of the first scrape by :meth:`MetricsRenderer.warm`), and the small exporter
health block (``slurm_up``, poll durations and errors, snapshot age...), rendered per scrape. The
two never share a family name, so their concatenation is one valid exposition; OpenMetrics gets a
single ``# EOF`` at the very end. With gzip, the Slurm part is kept as a sync-flushed raw deflate
stream with its CRC-32, so a scrape only deflates the health block and writes one gzip member
(header + cached deflate + health deflate + trailer) — no per-scrape compression of the big part.

A web-config file (:mod:`exporter.webconfig`) adds basic auth to every route except the kubelet
probes ``/healthz`` and ``/readyz``, and extra response headers; TLS is set on the listening site
(:func:`start`).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import logging
import struct
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import msgspec
from aiohttp import web
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from . import __version__
from .accounting import accounting_families
from .collector import DEFAULTS, Cardinality, health_families, snapshot_families
from .errors import ConfigError
from .listen import ConnectionGuard, Listener, ListenLimits, bind_sockets
from .logs import Conditions
from .mirror import MirrorFeed
from .model import Snapshot, wall_time
from .pollstate import PollStatus
from .source import SnapshotSource
from .webconfig import BasicAuth, WebConfig, ssl_context

log = logging.getLogger(__name__)

OPENMETRICS_EOF = b"# EOF\n"
UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})
"""Kubelet probes: never behind basic auth."""
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, mtime 0, OS unknown


class ServedSource(SnapshotSource, Protocol):
    """What the HTTP side reads: the poller's snapshot and its health (:class:`exporter.poller.Poller`)."""

    @property
    def status(self) -> PollStatus: ...


class _Families(Collector):
    """A registry stand-in for the encoders: yields the given families once."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


@dataclass(frozen=True)
class _Format:
    """One exposition format as chosen from an ``Accept`` header."""

    encoder: Callable[[Collector], bytes]
    content_type: str

    @property
    def openmetrics(self) -> bool:
        return self.content_type.startswith("application/openmetrics-text")

    def render(self, families: Iterable[Metric]) -> bytes:
        """Families → exposition text without OpenMetrics' ``# EOF`` (added once by the caller)."""
        body = self.encoder(_Families(families))
        if self.openmetrics and body.endswith(OPENMETRICS_EOF):
            body = body[: -len(OPENMETRICS_EOF)]
        return body


_OPENMETRICS = _Format(*choose_encoder("application/openmetrics-text; version=1.0.0"))
_TEXT = _Format(*choose_encoder(""))
FORMATS = (_TEXT, _OPENMETRICS)
"""The only two bodies /metrics serves (and caches): Prometheus text 0.0.4, OpenMetrics 1.0.0."""


def negotiate(accept: str) -> _Format:
    """OpenMetrics 1.0.0 when ``Accept`` names ``application/openmetrics-text`` (any version or parameters:
    the client library echoed them into the content type, so every distinct value was a body rendered and
    kept, and ``version=1.x`` raised a TypeError per request), else text 0.0.4. Never more than
    :data:`FORMATS`."""
    for item in accept.split(",")[:32]:
        media, *params = item.split(";")
        if media.strip().lower() != "application/openmetrics-text":
            continue
        q = next((p.partition("=")[2].strip() for p in params if p.strip().lower().startswith("q=")), "1")
        if q not in ("0", "0.0", "0.00", "0.000"):  # q=0: "not acceptable"
            return _OPENMETRICS
    return _TEXT


@dataclass(frozen=True)
class _Deflated:
    """A body as a raw deflate stream that is sync-flushed (byte-aligned, not final), so more
    deflate data can follow it, with its CRC-32 and length for the gzip trailer."""

    data: bytes
    crc: int
    size: int

    @classmethod
    def of(cls, body: bytes, level: int = 6) -> _Deflated:
        c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        return cls(c.compress(body) + c.flush(zlib.Z_SYNC_FLUSH), zlib.crc32(body), len(body))


def gzip_join(head: _Deflated, tail: bytes) -> bytes:
    """One gzip member whose content is ``head``'s body followed by ``tail``; only ``tail`` is
    compressed here."""
    c = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc = zlib.crc32(tail, head.crc)
    size = (head.size + len(tail)) & 0xFFFFFFFF
    return b"".join(
        (_GZIP_HEADER, head.data, c.compress(tail), c.flush(), struct.pack("<II", crc & 0xFFFFFFFF, size))
    )


_Part = bytes | _Deflated
_PartKey = tuple[str, bool]
"""(content type, gzipped)."""


class MetricsRenderer:
    """The /metrics body: Slurm families cached per snapshot and format, health block per scrape.

    ``renders`` counts renders of the Slurm families by content type (``on_render`` is called with
    the content type after each), so tests can see N scrapes of one snapshot cost one render.
    """

    MAX_WARM = 8
    """Most (format, gzip) variants pre-rendered when a new snapshot arrives."""

    def __init__(
        self,
        poller: ServedSource,
        clock: Callable[[], float] = wall_time,
        *,
        cardinality: Cardinality = DEFAULTS,
        on_render: Callable[[str], None] | None = None,
        extra_families: Callable[[Snapshot], Iterable[Metric]] | None = None,
        extra_health: Callable[[float], Iterable[Metric]] | None = None,
    ) -> None:
        self.poller = poller
        self.extra_families = extra_families
        self.extra_health = extra_health
        self.clock = clock
        self.cardinality = cardinality
        self.on_render = on_render
        self.renders: Counter[str] = Counter()
        self.last_render_seconds = 0.0
        self._snap: Snapshot | None = None
        self._parts: dict[_PartKey, asyncio.Future[_Part]] = {}
        self._ready: dict[_PartKey, tuple[Snapshot, _Part]] = {}
        """The newest finished part per variant, served while a newer snapshot's part renders."""
        self._wanted: dict[_PartKey, _Format] = {}

    # -- the Slurm part, cached ----------------------------------------------------------------

    def _render(self, snap: Snapshot, fmt: _Format) -> bytes:
        t0 = time.perf_counter()
        families = snapshot_families(snap, self.cardinality)
        if self.extra_families is not None:
            families = itertools.chain(families, self.extra_families(snap))
        body = fmt.render(families)
        self.last_render_seconds = time.perf_counter() - t0
        log.debug(
            "rendered %d bytes of %s in %.1f ms", len(body), fmt.content_type, self.last_render_seconds * 1e3
        )
        return body

    async def _render_plain(self, snap: Snapshot, fmt: _Format) -> _Part:
        body = await asyncio.to_thread(self._render, snap, fmt)
        self.renders[fmt.content_type] += 1
        if self.on_render is not None:
            self.on_render(fmt.content_type)
        return body

    @staticmethod
    async def _deflate(plain: asyncio.Future[_Part]) -> _Part:
        body = await asyncio.shield(plain)
        assert isinstance(body, bytes)
        return await asyncio.to_thread(_Deflated.of, body)

    def _future(self, snap: Snapshot, fmt: _Format, gz: bool) -> asyncio.Future[_Part]:
        """The (shared) future of one part of ``snap``; the gzip part reuses the plain one."""
        if snap is not self._snap:
            self._snap, self._parts = snap, {}
        key = (fmt.content_type, gz)
        parts = self._parts
        fut = parts.get(key)
        if fut is None:
            coro = self._deflate(self._future(snap, fmt, False)) if gz else self._render_plain(snap, fmt)
            fut = parts[key] = asyncio.ensure_future(coro)

            def settle(f: asyncio.Future[_Part]) -> None:
                if f.cancelled():
                    return
                if f.exception() is not None:
                    if parts.get(key) is f:
                        del parts[key]  # the next scrape tries again
                    return
                held = self._ready.get(key)
                if held is None or held[0].taken_at <= snap.taken_at:
                    self._ready[key] = (snap, f.result())

            fut.add_done_callback(settle)
        return fut

    async def part(self, snap: Snapshot, fmt: _Format, gz: bool) -> _Part:
        """The Slurm families of ``snap`` in ``fmt`` (plain bytes, or deflated when ``gz``),
        rendered at most once however many scrapes ask at the same time."""
        key = (fmt.content_type, gz)
        if key not in self._wanted and len(self._wanted) < self.MAX_WARM:
            self._wanted[key] = fmt
        return await asyncio.shield(self._future(snap, fmt, gz))

    async def warm(self) -> None:
        """Forever: when a new snapshot arrives, render the variants scrapes asked for so far
        (text 0.0.4 before any scrape), so the next scrape finds its body ready."""
        last: Snapshot | None = None
        while True:
            snap = await self.poller.wait_next(last)
            last = snap
            wanted = list(self._wanted.items()) or [((negotiate("").content_type, False), negotiate(""))]
            for (_, gz), fmt in wanted:
                if snap is not self.poller.snapshot:
                    break  # a newer one arrived meanwhile: warm that instead
                try:
                    await self.part(snap, fmt, gz)
                except Exception:
                    log.exception("rendering /metrics for a new snapshot failed")

    # -- per scrape --------------------------------------------------------------------------------

    def health(self, snap: Snapshot | None, fmt: _Format) -> bytes:
        now = self.clock()
        status = self.poller.status
        families = health_families(snap, status, now)
        if status.accounting is not None:  # moves with each read of slurmdbd, not with the snapshot
            c = self.cardinality
            more = accounting_families(status.accounting, per_account=c.per_account, per_user=c.per_user)
            families = itertools.chain(families, more)
        if self.extra_health is not None:
            families = itertools.chain(families, self.extra_health(now))
        return fmt.render(families)

    async def body(self, accept: str, gzip: bool) -> tuple[bytes, str]:
        """(body, content type) of one scrape; the body is gzip-encoded when ``gzip``."""
        fmt = negotiate(accept)
        snap = self.poller.snapshot
        eof = OPENMETRICS_EOF if fmt.openmetrics else b""
        if snap is None:
            body = self.health(None, fmt) + eof
            return (zlib.compress(body, 6, 16 + zlib.MAX_WBITS) if gzip else body), fmt.content_type
        key = (fmt.content_type, gzip)
        fut = self._future(snap, fmt, gzip)
        held = self._ready.get(key)
        if not fut.done() and held is not None:
            # a new snapshot is still rendering: serve the previous one whole (its health block
            # says its age) rather than make the scrape wait seconds for a 100k-job render
            snap, part = held
            if key not in self._wanted and len(self._wanted) < self.MAX_WARM:
                self._wanted[key] = fmt
        else:
            part = await self.part(snap, fmt, gzip)
        tail = self.health(snap, fmt) + eof
        if isinstance(part, _Deflated):
            return gzip_join(part, tail), fmt.content_type
        return part + tail, fmt.content_type


POLLER: web.AppKey[ServedSource] = web.AppKey("poller")
RENDERER: web.AppKey[MetricsRenderer] = web.AppKey("renderer", MetricsRenderer)
AUTH: web.AppKey[BasicAuth] = web.AppKey("basic_auth", BasicAuth)
WEB_CONFIG: web.AppKey[WebConfig] = web.AppKey("web_config", WebConfig)
STATUS_LINES: web.AppKey[Callable[[float], Iterable[str]]] = web.AppKey("status_lines")
JSON_PAGES: web.AppKey[tuple[str, ...]] = web.AppKey("json_pages")
GUARD: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard", ConnectionGuard)
MIRROR: web.AppKey[MirrorFeed] = web.AppKey("mirror", MirrorFeed)


def make_app(
    poller: ServedSource,
    *,
    clock: Callable[[], float] = wall_time,
    cardinality: Cardinality = DEFAULTS,
    web_config: WebConfig | None = None,
    on_render: Callable[[str], None] | None = None,
    extra_families: Callable[[Snapshot], Iterable[Metric]] | None = None,
    extra_health: Callable[[float], Iterable[Metric]] | None = None,
    status_lines: Callable[[float], Iterable[str]] | None = None,
    listen_limits: ListenLimits | None = None,
    json_pages: Mapping[str, Callable[[float], object]] | None = None,
) -> web.Application:
    """The app; ``cardinality``: which optional series /metrics carries (:class:`Cardinality`).

    ``web_config`` adds basic auth and response headers (TLS is the site's: see :func:`start`);
    ``on_render`` is called with the content type whenever the Slurm families are rendered;
    ``extra_families`` adds families computed from each snapshot (the autoscaler's demand), rendered
    and cached with the Slurm families; ``extra_health`` families rendered on every scrape from the time
    (the demand's staleness); ``status_lines`` lines for the status page; ``listen_limits`` the
    connection cap and timeouts :func:`start` applies (their counters are exported per scrape);
    ``json_pages`` more pages (path → what to answer as JSON at a time, e.g. the autoscaler's ``/targets``).
    """
    wc = web_config or WebConfig()
    app = web.Application(middlewares=[_auth_middleware])
    guard = ConnectionGuard(listen_limits or ListenLimits())
    app[GUARD] = guard

    def health(now: float) -> Iterable[Metric]:
        yield from guard.families()
        if extra_health is not None:
            yield from extra_health(now)

    app[POLLER] = poller
    app[RENDERER] = MetricsRenderer(
        poller,
        clock,
        cardinality=cardinality,
        on_render=on_render,
        extra_families=extra_families,
        extra_health=health,
    )
    app[STATUS_LINES] = status_lines or (lambda now: ())
    app[AUTH] = BasicAuth(wc.basic_auth_users)
    app[WEB_CONFIG] = wc
    if wc.headers:
        app.on_response_prepare.append(_add_headers)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/snapshot", _snapshot)
    app[MIRROR] = MirrorFeed(poller)
    app.router.add_get("/replica/snapshot", _replica_snapshot)
    app.router.add_get("/", _index)
    app[JSON_PAGES] = tuple(sorted((json_pages or {}).keys()))
    for path, page in (json_pages or {}).items():
        app.router.add_get(path, _json_page(page))
    return app


def _json_page(page: Callable[[float], object]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(page(time.time())), content_type="application/json")

    return handler


@dataclass
class HttpServer:
    """A started app: its runner and the guarded listener; :meth:`close` it."""

    runner: web.AppRunner
    listener: Listener

    @property
    def urls(self) -> list[str]:
        """``http(s)://host:port`` of every listening socket (the real port when 0 was asked for)."""
        scheme = "https" if self.runner.app[WEB_CONFIG].tls is not None else "http"
        out = []
        for sock in self.listener.sockets:
            host, port = sock.getsockname()[:2]
            out.append(f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}")
        return out

    async def close(self) -> None:
        await self.listener.close()
        await self.runner.cleanup()  # closes the open connections


async def start(app: web.Application, host: str, port: int) -> HttpServer:
    """Set up and start the app on ``host:port`` (TLS when the app's web config has it) behind the
    app's :class:`~exporter.listen.ConnectionGuard`; the caller closes it. Raises ConfigError when
    the certificate or key won't load or the address cannot be listened on."""
    tls = app[WEB_CONFIG].tls
    ctx = ssl_context(tls) if tls is not None else None
    guard = app[GUARD]
    try:  # a listen backlog that holds a burst of scrapers while the cap is reached
        sockets = bind_sockets(host or None, port, backlog=max(1024, guard.limits.max_connections))
    except OSError as e:  # port in use, address not local, no permission: one line, not a traceback
        raise ConfigError(
            f"cannot listen on {host}:{port} (--listen-address, --listen-port): {e.strerror or e}"
        ) from None
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=guard.limits.idle_timeout)
    try:
        await runner.setup()
        assert runner.server is not None
        listener = Listener(guard, runner.server, sockets, ctx)
        listener.start()
    except BaseException:
        for sock in sockets:
            sock.close()
        await runner.cleanup()
        raise
    return HttpServer(runner, listener)


@web.middleware
async def _auth_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    auth = request.app[AUTH]
    if not auth.users or request.path in UNAUTHENTICATED_PATHS:
        return await handler(request)
    if await auth.check(request.headers.get("Authorization")) is None:
        return web.Response(
            status=401,
            text="401 Unauthorized\n",
            headers={"WWW-Authenticate": 'Basic realm="slurm-keda", charset="UTF-8"'},
        )
    return await handler(request)


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    for k, v in request.app[WEB_CONFIG].headers.items():
        response.headers[k] = v


async def _metrics(request: web.Request) -> web.Response:
    gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
    body, content_type = await request.app[RENDERER].body(request.headers.get("Accept", ""), gz)
    headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


def _accepts_gzip(accept_encoding: str) -> bool:
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        if name.strip().lower() in ("gzip", "x-gzip"):
            q = params.strip().replace(" ", "")
            return not (q.startswith("q=") and _float(q[2:]) == 0.0)
    return False


def _float(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return 1.0


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    poller = request.app[POLLER]
    if poller.snapshot is None or poller.status.data_age(time.time()) is None:
        # ready once jobs, nodes and partitions were each fetched; afterwards held data is served (and
        # slurm_up / slurm_exporter_data_age_seconds say how old it is) rather than the pod taken away
        err = poller.status.last_error or "no poll finished yet"
        return web.Response(status=503, text=f"not ready: {err}\n")
    return web.Response(text="ready\n")


async def _snapshot(request: web.Request) -> web.Response:
    snap = request.app[POLLER].snapshot
    if snap is None:
        return web.Response(status=503, text="no snapshot yet\n")
    return web.Response(body=msgspec.json.encode(snap), content_type="application/json")


REPLICA_WAIT_MAX = 60.0
"""Seconds a ``/replica/snapshot`` request may wait for the next snapshot at most."""


async def _replica_snapshot(request: web.Request) -> web.Response:
    """``?after=N&wait=S``: the next snapshot after the leader's number N as a msgpack
    :class:`~exporter.mirror.MirrorFrame` (its jobs a delta from N where N is still held), waiting up to S
    seconds for one; 204 when none came; 400 on a bad query."""
    try:
        after = int(request.query.get("after", "0"))
        wait = float(request.query.get("wait", "0"))
    except ValueError:
        return web.Response(status=400, text="after: a snapshot number, wait: seconds\n")
    if after < 0 or not 0 <= wait <= REPLICA_WAIT_MAX:
        return web.Response(status=400, text=f"after >= 0, 0 <= wait <= {REPLICA_WAIT_MAX:.0f}\n")
    frame = await request.app[MIRROR].frame_after(after, wait)
    if frame is None:
        return web.Response(status=204)
    return web.Response(body=msgspec.msgpack.encode(frame), content_type="application/msgpack")


def _ago(at: float | None, now: float) -> str:
    return "never" if at is None else f"{max(0.0, now - at):.1f}s ago"


def jobs_freshness(status: PollStatus, now: float) -> str:
    """One line: how the jobs are kept and how fresh each part of them is."""
    sync = status.jobs_sync
    jobs = status.endpoints.get("jobs")
    listed = f"last full listing requested {_ago(sync.listed_at, now)} (took {sync.listing_duration:.1f}s)"
    if not sync.incremental:
        return f"jobs: listed in full each poll; {listed}"
    backlog = f", {sync.backlog} left for the next polls" if sync.backlog else ""
    sweep = f"read again in turn every {sync.sweep_period:.0f}s" if sync.sweep_period else "not read again"
    as_of = jobs.requested_at if jobs else None
    if sync.unlisted and as_of == 0.0:
        return (
            f"jobs: PARTIAL — starting without a full listing (more jobs than --jobs-listing-max), read one "
            f"by one: {sync.backlog} of {sync.states_seen or 0} left (scale-down held, the bridge waits); "
            f"{sync.last_changed} read by the last poll"
        )
    return (
        f"jobs: incremental — every job's state as of {_ago(as_of, now)} "
        f"({sync.last_changed} read one by one by the last poll{backlog}); pending jobs' reasons and "
        f"estimates {sweep}; {listed}"
    )


def condition_lines(conditions: Conditions) -> list[str]:
    """The status page's lines for the lasting conditions that hold (failing endpoints, refused records):
    what, since when and how often seen."""
    now = time.monotonic()
    return [
        f"NOW: {key}: {text} (seen {count} time(s), for {now - since:.0f} s)"
        for key, (text, count, since) in sorted(conditions.active().items())
    ]


async def _index(request: web.Request) -> web.Response:
    poller = request.app[POLLER]
    st = poller.status
    snap = poller.snapshot
    now = time.time()
    rows = "".join(
        f"<tr><td>{html.escape(e.name)}</td><td>{e.successes}</td><td>{sum(e.errors.values())}</td>"
        f"<td>{_ago(e.fetched_at, now)}</td>"
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
    last_poll = (
        f"last poll {time.time() - st.last_poll_finished:.1f}s ago "
        f"({'ok' if st.last_poll_ok else 'failed'}, {st.last_poll_duration * 1000:.0f} ms)"
        if st.last_poll_finished is not None
        else "no poll finished yet"
    )
    error = f"<p>{html.escape(jobs_freshness(st, now))}</p>"
    note = html.escape(st.accounting_note)
    error += f"<p>accounting (slurmdbd's ended jobs, QOS and association limits): {note}</p>"
    error += f"<p>last error: {html.escape(st.last_error)}</p>" if st.last_error else ""
    error += "".join(f"<p>{html.escape(line)}</p>" for line in condition_lines(st.conditions))
    error += "".join(f"<p>{html.escape(line)}</p>" for line in request.app[STATUS_LINES](time.time()))
    more = "".join(f' <a href="{p}">{p}</a> ·' for p in request.app[JSON_PAGES])
    page = f"""<!doctype html><html><head><title>slurm-keda</title></head><body>
<h1>slurm-keda {__version__}</h1>
<p>API version {html.escape(st.api_version or "not negotiated")}; {summary}</p>
<p>{last_poll}</p>{error}
<p><a href="/metrics">/metrics</a> · <a href="/snapshot">/snapshot</a> ·{more}
<a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p>
<table border="1"><tr><th>endpoint</th><th>ok</th><th>errors</th><th>data as of</th><th>last duration</th>
<th>last error</th></tr>
{rows}</table></body></html>"""
    return web.Response(text=page, content_type="text/html")
