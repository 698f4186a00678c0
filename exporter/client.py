"""slurmrestd HTTP client: the only module that talks to slurmrestd.

Request building and response checking are plain functions (:func:`endpoint_path`,
:func:`check_status`, :func:`versions_from_openapi`); :class:`SlurmClient` adds the I/O:
an aiohttp session over TCP (``http``/``https``) or a unix socket (``unix:/path``), a JWT read
from the environment or from a token file that is re-read when it changes, bounded retries with
exponential backoff and full jitter, a global concurrency cap and at most one request in flight
per endpoint. Every failure surfaces as an :mod:`exporter.errors` type.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import ssl
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

import aiohttp
import msgspec

from .backoff import Backoff
from .errors import (
    AuthError,
    HTTPStatusError,
    RequestTimeout,
    SlurmError,
    TokenError,
    TooLargeError,
    TransportError,
    TruncatedError,
    VersionError,
)
from .framing import framed
from .versions._common import decode

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-SLURM-USER-TOKEN"
USER_HEADER = "X-SLURM-USER-NAME"
_VERSION_IN_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/([a-z_]+)/?$")
_SLURMDB_PATH = re.compile(r"^/slurmdb/(v\d+\.\d+\.\d+)/(jobs|qos|associations)/?$")
SLURMDB_ENDPOINTS = {"jobs": "slurmdb_jobs", "qos": "qos", "associations": "associations"}
"""slurmdbd's collections read (``openapi/slurmdbd``) → the endpoint name they are known by."""


# -- pure parts --------------------------------------------------------------------------------


def endpoint_path(version: str, endpoint: str) -> str:
    """URL path of a slurmctld endpoint for an API version, e.g. ``/slurm/v0.0.45/jobs``."""
    return f"/slurm/{version}/{endpoint}"


QueryParams = Mapping[str, str] | Sequence[tuple[str, str]]
"""A request's query: a mapping, or (name, value) pairs where a name repeats (``state=A&state=B``)."""

ApiPaths = dict[str, dict[str, str]]
"""API version → {endpoint name → URL path exactly as the server lists it}."""


def versions_from_openapi(document: Mapping[str, object]) -> ApiPaths:
    """Map each ``/slurm/vX`` API version in an OpenAPI document to its plain collection paths
    (``jobs``, ``nodes``, ...; trailing slash kept as the server wrote it), and ``slurmdb_jobs`` where
    slurmrestd also serves slurmdbd's ``/slurmdb/vX/jobs``."""
    paths = document.get("paths")
    if not isinstance(paths, Mapping):
        return {}
    found: ApiPaths = {}
    for path in paths:
        m = _VERSION_IN_PATH.match(str(path))
        if m:
            found.setdefault(m.group(1), {})[m.group(2)] = str(path)
    for path in paths:  # slurmdbd's, only beside a version's slurmctld paths (it alone is no API to poll)
        m = _SLURMDB_PATH.match(str(path))
        if m and m.group(1) in found:
            found[m.group(1)][SLURMDB_ENDPOINTS[m.group(2)]] = str(path)
    return found


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of ``v0.0.42`` → ``(0, 0, 42)``."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def choose_version(offered: Mapping[str, object], supported: tuple[str, ...], forced: str | None) -> str:
    """Pick the API version: ``forced`` if given (it must be offered and supported), else the
    highest version both sides know. Raises :class:`VersionError` with both lists otherwise."""
    if forced:
        if forced not in supported:
            raise VersionError(f"--api-version {forced} is not supported (supported: {', '.join(supported)})")
        if offered and forced not in offered:
            raise VersionError(
                f"--api-version {forced} is not served by slurmrestd "
                f"(offered: {', '.join(sorted(offered, key=version_key)) or 'none'})"
            )
        return forced
    common = [v for v in offered if v in supported]
    if not common:
        raise VersionError(
            "no common slurmrestd API version: server offers "
            f"{', '.join(sorted(offered, key=version_key)) or 'none'}; "
            f"slurm-keda supports {', '.join(supported)}"
        )
    return max(common, key=version_key)


JOBS_VERSION_INSTEAD: dict[str, str] = {"v0.0.45": "v0.0.44"}
"""Version → the version ``/jobs`` is listed with instead, when the server offers it. Slurm 26.05's v0.0.45
``job_info`` deprecates ``shared`` and reports it empty for every job, while the fields its description
names as the replacement (``exclusive``, ``oversubscribe``) are neither in the schema nor in the answers
(26.05.5, seen in the lab); v0.0.44 from the same slurmrestd still says ``["none"]`` for ``--exclusive``,
``["user"]``, ``["oversubscribe"]``, and otherwise has the same fields. Exclusivity changes how many nodes a
job takes, so the demand model needs it."""


def choose_jobs_version(offered: Mapping[str, object], version: str, forced: str | None) -> str:
    """The API version to list ``/jobs`` with: ``version`` (the negotiated one) unless it is not forced and
    :data:`JOBS_VERSION_INSTEAD` names an offered replacement."""
    instead = JOBS_VERSION_INSTEAD.get(version)
    return instead if not forced and instead is not None and instead in offered else version


_OPENAPI = msgspec.json.Decoder(dict[str, object])


class _ErrorBody(msgspec.Struct):
    errors: list[dict[str, object]] = []


def slurm_error_texts(body: bytes) -> tuple[str, ...]:
    """The human texts of slurmrestd's ``errors[]`` (``description: error``, either alone when the other is
    missing or the same), if any."""
    try:
        parsed = msgspec.json.decode(body, type=_ErrorBody)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return ()
    texts = []
    for e in parsed.errors:
        # "Batch job submission failed" (description) says less than "Invalid partition name specified"
        parts = [str(p) for p in (e.get("description"), e.get("error")) if p]
        text = ": ".join(dict.fromkeys(parts)) or str(e.get("error_number") or "")
        if text:
            texts.append(text)
    return tuple(texts)


AUTH_STATUSES = frozenset({401, 403, 511})
"""Token refused: 401/403, and 511 "Network Authentication Required", which slurmrestd 26.05 answers to a
bad or expired token (``Protocol authentication error``)."""


ERROR_BODY_BYTES = 64 << 10
"""Bytes of an error answer read for its ``errors[]`` text at most."""


async def _head_of(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The first ``limit`` bytes of a body (all of it if shorter), however it arrives."""
    out = b""
    while len(out) < limit and (piece := await content.read(limit - len(out))):
        out += piece
    return out


def error_detail(status: int, body: bytes, texts: tuple[str, ...]) -> str:
    """One readable line about a non-2xx answer: ``HTTP 504 Gateway Timeout: <texts>`` (``texts``: its
    :func:`slurm_error_texts`), or that slurmrestd gave none (a JSON body with an empty ``errors[]``, an
    empty body), or the start of a body that is not slurmrestd's JSON (a proxy's HTML page) — never a raw
    JSON dump."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    head = f"HTTP {status} {phrase}".rstrip()
    if texts:
        return f"{head}: {'; '.join(texts)}"
    stripped = body.strip()
    if not stripped:
        return f"{head}: slurmrestd gave no error text (empty body)"
    if stripped[:1] in (b"{", b"["):
        return f"{head}: slurmrestd gave no error text"
    snippet = " ".join(re.sub(rb"<[^>]*>", b" ", stripped[:400]).decode("utf-8", "replace").split())[:120]
    return f"{head}: slurmrestd gave no error text; the body is not its JSON: {snippet or '(markup only)'}"


def check_status(status: int, body: bytes, endpoint: str) -> None:
    """Raise the typed error for a non-2xx answer (:func:`error_detail` is its text)."""
    if 200 <= status < 300:
        return
    cls = AuthError if status in AUTH_STATUSES else HTTPStatusError
    texts = slurm_error_texts(body)
    raise cls(error_detail(status, body, texts), status=status, errors=texts, endpoint=endpoint)


# -- token ---------------------------------------------------------------------------------------


_TOKEN = re.compile(r"[\x21-\x7e]{1,65536}")
"""A token as a header can carry it: printable ASCII, no space (a JWT: base64url parts and dots)."""


class TokenSource:
    """The JWT to send: a fixed value (``SLURM_JWT``) or a file re-read whenever it changes.

    Kubernetes updates a mounted Secret by swapping a symlink, so the file's identity
    (inode, mtime, size, after following links) is compared on every use; ``reload`` forces a
    re-read (used once after a 401). The token text is never logged.
    """

    def __init__(self, *, token: str | None = None, token_file: Path | None = None) -> None:
        self._fixed = token.strip() if token else None
        self._file = token_file
        self._stamp: tuple[int, int, int] | None = None
        self._value: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self._fixed or self._file)

    def _read(self) -> None:
        assert self._file is not None
        try:
            st = os.stat(self._file)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            raw = self._file.read_bytes()
        except OSError as e:
            raise TokenError(f"cannot read token file {self._file}: {e.strerror or e}") from None
        text = raw.decode("utf-8", "replace").strip()
        if text.startswith("SLURM_JWT="):
            text = text[len("SLURM_JWT=") :]
        if not _TOKEN.fullmatch(text):
            # a header with a newline or a control character would fail every request (uncounted);
            # the text is a secret and is never quoted
            what = "is empty" if not text else "holds more than one token line or characters a JWT has not"
            raise TokenError(f"token file {self._file} {what}")
        if self._stamp is not None and text != self._value:
            log.info("token file %s changed; using the new token", self._file)
        self._value = text
        self._stamp = stamp

    def current(self) -> str | None:
        if self._file is not None:
            self._read()
            return self._value
        return self._fixed

    def reload(self) -> bool:
        """Force a re-read of the token file; True if the token text changed."""
        if self._file is None:
            return False
        before = self._value
        self._stamp = None
        self._read()
        return self._value != before


# -- client --------------------------------------------------------------------------------------


RETRY_BACKOFF_CAP = 10.0
"""Seconds between two tries of one request at most."""


@dataclass(frozen=True)
class ClientConfig:
    """How to reach slurmrestd; durations in seconds."""

    base_url: str
    """``http://host:port``, ``https://host:port`` or ``unix:/path/to/socket``."""
    token: TokenSource = field(default_factory=TokenSource)
    user_name: str | None = None
    """Sent as X-SLURM-USER-NAME (needed when the token is an admin's "daemon" token)."""
    timeout: float = 30.0
    """Limit for one small request (connect + whole answer)."""
    stream_timeout: float = 600.0
    """Limit for one streamed request (/jobs): slurmrestd sends ~5.5 MB/s at 20k jobs."""
    idle_timeout: float = 30.0
    """Limit for any one wait for bytes (a frozen slurmrestd ends a request after this, not after
    ``stream_timeout``)."""
    min_rate: float = 1024.0
    """Bytes per second a body must average over every ``idle_timeout`` window once it has begun: a
    slurmrestd drip-feeding bytes (each wait shorter than ``idle_timeout``) ends the request too."""
    max_body_bytes: int = 16 << 30
    """Cap on one streamed body (/jobs; ~10 KiB a job); a small request's cap is ``max_small_body_bytes``."""
    max_small_body_bytes: int = 1 << 30
    """Cap on one body read whole (/nodes, /partitions, ...), which is held in memory to decode."""
    max_record_bytes: int = 16 << 20
    """Cap on one record (job) of a streamed body, and on the text around the records."""
    retries: int = 2
    """Extra attempts after a retryable failure (unreachable, timeout, 429, 5xx)."""
    backoff: float = 0.5
    """First backoff; doubles per attempt, with full jitter, capped at :data:`RETRY_BACKOFF_CAP`."""
    max_concurrency: int = 4
    """Reads in flight at once."""
    write_concurrency: int = 4
    """Writes (POST, DELETE: the bridge's submissions and cancellations) in flight at once, beside the
    reads: a burst of submissions never holds the polls back, nor the polls the submissions."""
    tls_ca_file: Path | None = None
    tls_insecure: bool = False
    chunk_bytes: int = 256 << 10
    """Read size of streamed bodies; with 512 KiB decode batches this kept batches cache-sized
    (measured ~450 MB/s vs ~270 MB/s with 16 MiB batches)."""


class _RateFloor:
    """Fails a body that averages under ``min_rate`` bytes/s over a ``window`` (monotonic seconds):
    a peer that sends a byte just before each idle timeout would otherwise hold a request forever."""

    def __init__(self, min_rate: float, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._need = min_rate * window
        self._window = window
        self._clock = clock
        self._start = clock()
        self._bytes = 0

    def check(self, n: int) -> None:
        self._bytes += n
        elapsed = self._clock() - self._start
        if elapsed < self._window:
            return
        if self._bytes < self._need:
            raise RequestTimeout(
                f"slurmrestd sent {self._bytes} bytes in {elapsed:.0f}s, under the"
                f" {self._need / self._window:.0f} bytes/s floor (drip-fed or stalled)"
            )
        self._start = self._clock()
        self._bytes = 0


class NotModified(Exception):
    """HTTP 304: nothing changed since the ``update_time`` sent (not an error)."""


_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def _retryable(err: SlurmError, final: frozenset[int] = frozenset()) -> bool:
    if isinstance(err, TransportError):
        return True
    return isinstance(err, HTTPStatusError) and err.status in _RETRY_STATUSES and err.status not in final


class SlurmClient:
    """Async slurmrestd client. Use as ``async with SlurmClient(cfg) as c: ...``."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._backoff = Backoff(self.config.backoff, RETRY_BACKOFF_CAP, jitter=1.0)
        self._session: aiohttp.ClientSession | None = None
        self._limit = asyncio.Semaphore(config.max_concurrency)
        self._write_limit = asyncio.Semaphore(config.write_concurrency)
        self._endpoint_locks: dict[str, asyncio.Lock] = {}
        url = config.base_url.rstrip("/")
        self._unix_path: str | None = None
        if url.startswith("unix:"):
            self._unix_path = url[len("unix:") :]
            self._base = "http://localhost"
        elif url.startswith(("http://", "https://")):
            self._base = url
        else:
            raise ValueError(f"slurmrestd URL must start with http://, https:// or unix: ({url!r})")
        self.requests_sent = 0
        """Requests put on the wire, retries included."""
        self.requests_by_endpoint: Counter[str] = Counter()
        """The same by endpoint (``jobs``, ``jobs/state``, ``job``, ``job/submit``, ...; lanes folded)."""
        self.bytes_received = 0
        """Body bytes received from slurmrestd."""

    async def __aenter__(self) -> SlurmClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is not None:
            return
        connector: aiohttp.BaseConnector
        if self._unix_path is not None:
            connector = aiohttp.UnixConnector(path=self._unix_path)
        else:
            ssl_arg: ssl.SSLContext | bool = True
            if self._base.startswith("https://"):
                if self.config.tls_insecure:
                    ssl_arg = False
                elif self.config.tls_ca_file:
                    ssl_arg = ssl.create_default_context(cafile=str(self.config.tls_ca_file))
            limit = self.config.max_concurrency + self.config.write_concurrency
            connector = aiohttp.TCPConnector(ssl=ssl_arg, limit=limit)
        self._session = aiohttp.ClientSession(
            connector=framed(connector), auto_decompress=True, raise_for_status=False
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self.config.token.current()
        if token:
            headers[TOKEN_HEADER] = token
        if self.config.user_name:
            headers[USER_HEADER] = self.config.user_name
        return headers

    @asynccontextmanager
    async def _lane(self, endpoint: str, *, write: bool = False) -> AsyncIterator[None]:
        """One request per endpoint in flight, at most ``max_concurrency`` reads and ``write_concurrency``
        writes overall."""
        lock = self._endpoint_locks.setdefault(endpoint, asyncio.Lock())
        async with lock, self._write_limit if write else self._limit:
            yield

    async def get(
        self,
        path: str,
        *,
        endpoint: str,
        params: QueryParams | None = None,
        retries: int | None = None,
        final_statuses: frozenset[int] = frozenset(),
        first_byte: float | None = None,
    ) -> bytes:
        """GET ``path`` and return the whole body of a 2xx answer (``final_statuses``: see :meth:`stream`).
        ``first_byte``: seconds the answer may take to begin (streamed, :meth:`stream`'s limits); None: the
        small-request limits."""
        chunks: list[bytes] = []
        async for chunk in self.stream(
            path,
            endpoint=endpoint,
            params=params,
            whole=first_byte is None,
            retries=retries,
            final_statuses=final_statuses,
            first_byte=first_byte,
        ):
            chunks.append(chunk)
        return b"".join(chunks)

    async def send(self, method: str, path: str, *, endpoint: str, body: bytes | None = None) -> bytes:
        """``POST`` (a JSON ``body``) or ``DELETE`` ``path``; the whole body of a 2xx answer. A POST is
        never retried — slurmrestd may have acted on a request whose answer was lost (a job submitted
        twice) — except once after a refused token; a DELETE is retried like a GET."""
        assert method in ("POST", "DELETE"), method
        retries = 0 if method == "POST" else None
        chunks: list[bytes] = []
        async for chunk in self.stream(
            path, endpoint=endpoint, whole=True, retries=retries, method=method, body=body
        ):
            chunks.append(chunk)
        return b"".join(chunks)

    async def stream(
        self,
        path: str,
        *,
        endpoint: str,
        params: QueryParams | None = None,
        whole: bool = False,
        retries: int | None = None,
        method: str = "GET",
        body: bytes | None = None,
        final_statuses: frozenset[int] = frozenset(),
        first_byte: float | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """GET ``path`` (or ``method`` with a JSON ``body``) and yield the body of a 2xx answer in chunks
        as it arrives.

        ``first_byte``: seconds a streamed answer may take to begin (slurmrestd renders a listing whole
        first); None: until the streaming time limit. Once it began, no wait between bytes may exceed the
        idle limit.

        A 304 answer (to ``update_time``) raises :class:`NotModified`. Retries (with backoff)
        happen only before the first chunk is yielded. ``whole`` applies
        the small-request time limit instead of the streaming one; ``retries`` overrides the
        configured number of extra attempts; ``final_statuses`` are never retried (the caller has its own
        answer to them, e.g. a fetch without ``update_time``).
        """
        max_retries = self.config.retries if retries is None else retries
        attempt = 0
        reauthed = False
        while True:
            started = False
            try:
                async with self._lane(endpoint, write=method != "GET"):
                    async for chunk in self._attempt(path, endpoint, params, whole, method, body, first_byte):
                        started = True
                        yield chunk
                return
            except AuthError:
                if reauthed or started or not self.config.token.reload():
                    raise
                reauthed = True
                log.info("%s: token refused; re-read the token file, retrying once", endpoint)
            except SlurmError as err:
                if started or attempt >= max_retries or not _retryable(err, final_statuses):
                    raise
                delay = self._backoff.delay(attempt, self._rng)
                attempt += 1
                # debug: a lasting failure is logged once by whoever gives up (the poller's conditions)
                log.debug("%s; retry %d/%d in %.2fs", err, attempt, max_retries, delay)
                await self._sleep(delay)

    async def _attempt(
        self,
        path: str,
        endpoint: str,
        params: QueryParams | None,
        whole: bool,
        method: str = "GET",
        body: bytes | None = None,
        first_byte: float | None = None,
    ) -> AsyncIterator[bytes]:
        if self._session is None:
            await self.open()
        assert self._session is not None
        limit = self.config.timeout if whole else self.config.stream_timeout
        idle = min(limit, self.config.idle_timeout)
        # slurmrestd renders a listing whole before its first byte (27 s for 20,000 jobs, 26.05): a streamed
        # answer may take until ``first_byte`` (else ``limit``) to begin, and no more than ``idle`` between
        # bytes once it has (_idle_bounded)
        begin = idle if whole else min(limit, first_byte) if first_byte is not None else None
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=min(limit, 10.0), sock_read=begin)
        began = False
        self.requests_sent += 1
        self.requests_by_endpoint[endpoint.partition(":")[0]] += 1
        headers = self._headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._session.request(
                method,
                self._base + path,
                params=params or None,
                data=body,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,  # the token must never go to whatever a redirect names
            ) as resp:
                began = True
                if resp.status == 304:
                    raise NotModified(endpoint)
                if 300 <= resp.status < 400:
                    where = resp.headers.get("Location", "")[:200] or "nowhere"
                    raise HTTPStatusError(
                        f"HTTP {resp.status}: redirect to {where} not followed (the token is only sent to"
                        f" {self.config.base_url})",
                        status=resp.status,
                        endpoint=endpoint,
                    )
                if not 200 <= resp.status < 300:
                    check_status(resp.status, await _head_of(resp.content, ERROR_BODY_BYTES), endpoint)
                expected = resp.content_length
                cap = self.config.max_small_body_bytes if whole else self.config.max_body_bytes
                option = "" if whole else " (--max-body-bytes)"
                if expected is not None and expected > cap:
                    raise TooLargeError(f"answer of {expected} bytes is over the {cap >> 20} MiB cap{option}")
                received = 0
                rate = _RateFloor(self.config.min_rate, idle)
                async for chunk in _idle_bounded(resp.content.iter_chunked(self.config.chunk_bytes), idle):
                    received += len(chunk)
                    self.bytes_received += len(chunk)
                    if received > cap:
                        raise TooLargeError(f"answer is over the {cap >> 20} MiB cap{option}")
                    rate.check(len(chunk))
                    yield chunk
                    await asyncio.sleep(0)  # buffered chunks don't yield: let scrapes run between them
                if expected is not None and received < expected:
                    raise TruncatedError(
                        f"body ended after {received} of {expected} bytes", endpoint=endpoint
                    )
        except SlurmError as err:
            err.endpoint = err.endpoint or endpoint
            raise
        except (aiohttp.SocketTimeoutError, _IdleTimeout):
            if not began and begin is not None and begin > idle:
                raise RequestTimeout(
                    f"no answer begun within {begin:.3g}s (the time allowed to render it; frozen or stalled)",
                    endpoint=endpoint,
                ) from None
            raise RequestTimeout(
                f"no byte from slurmrestd for {idle:g}s (frozen or stalled)", endpoint=endpoint
            ) from None
        except TimeoutError:
            raise RequestTimeout(f"no complete answer within {limit:g}s", endpoint=endpoint) from None
        except aiohttp.ClientPayloadError as e:
            raise TruncatedError(f"body cut short: {e}", endpoint=endpoint) from None
        except aiohttp.ClientResponseError as e:
            raise TransportError(
                f"cannot read slurmrestd's answer: {str(e.message)[:200]}", endpoint=endpoint
            ) from None
        except (aiohttp.ClientError, OSError) as e:
            raise TransportError(
                f"cannot reach slurmrestd at {self.config.base_url}: {e}", endpoint=endpoint
            ) from None

    async def openapi(self) -> ApiPaths:
        """Versions (and their endpoints) the server offers, from ``GET /openapi/v3``."""
        body = await self.get("/openapi/v3", endpoint="openapi")
        document: dict[str, object] = decode(_OPENAPI, body, "openapi")  # a typed error for any bad body
        return versions_from_openapi(document)


class _IdleTimeout(Exception):
    """No chunk within the idle limit once the answer began (told apart from the total limit)."""


async def _idle_bounded(chunks: AsyncIterator[bytes], idle: float) -> AsyncIterator[bytes]:
    """``chunks``, each awaited at most ``idle`` seconds (:class:`_IdleTimeout` otherwise)."""
    it = aiter(chunks)
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await anext(it)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise _IdleTimeout from None
        yield chunk
