"""KEDA's external scaler protocol (``externalscaler.ExternalScaler``) as a grpc.aio server.

KEDA is the client. A ScaledObject trigger of type ``external`` (polled) or ``external-push``
(streamed) names this server in ``scalerAddress`` and describes one target in its ``metadata``
(see :mod:`autoscaler.targets`); every request carries that metadata, so the server keeps no
per-ScaledObject state of its own. Answers come from :class:`autoscaler.service.DemandService`:

==================  ======================================================================
RPC                 answer
==================  ======================================================================
IsActive            ``result`` = desired nodes > 0
StreamIsActive      the current activity at once, then one message per change of activity
GetMetricSpec       one metric, ``targetSize`` 1: the HPA's replicas = the metric's value
GetMetrics          the metric = desired nodes (``metricName`` echoed from the request)
StreamMetricSpec    UNIMPLEMENTED (the spec never changes; KEDA then uses GetMetricSpec)
==================  ======================================================================

Errors: bad metadata → ``INVALID_ARGUMENT`` naming the key; no usable snapshot yet (only before
the first good poll) → ``UNAVAILABLE``. A stale snapshot is not an error: the held answer is
served, so missing data never scales a NodeSet down.

TLS: :class:`GrpcTLS` (server certificate and key; with a client CA, clients must present a
certificate it signed — KEDA's ``tlsClientCert``/``tlsClientKey``, while its ``caCert`` is the CA
of our certificate). The files are re-read when they change (rotated Secrets), checked before use.

The generated messages are in :mod:`autoscaler._proto` (``make proto``); the handlers are
registered with :func:`grpc.method_handlers_generic_handler`, so no ``_pb2_grpc`` module is needed
and every handler is typed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message
from prometheus_client.core import CounterMetricFamily, Metric

from autoscaler._proto.externalscaler_pb2 import (
    GetMetricSpecResponse,
    GetMetricsRequest,
    GetMetricsResponse,
    IsActiveResponse,
    MetricSpec,
    MetricValue,
    ScaledObjectRef,
)
from autoscaler.demand import Target
from autoscaler.service import (
    Answer,
    DemandService,
    NoSnapshotYet,
    NoTrustedAnswer,
    TooManyTargets,
    UnknownPartition,
)
from autoscaler.targets import MetadataError, check_metric_name, metric_name, target_from_metadata
from exporter.logs import Throttle

__all__ = [
    "SERVICE_NAME",
    "ExternalScaler",
    "GrpcTLS",
    "GrpcTLSError",
    "ScalerServer",
    "start_grpc_server",
]

log = logging.getLogger(__name__)

SERVICE_NAME = "externalscaler.ExternalScaler"
"""The fully qualified gRPC service (method paths are ``/externalscaler.ExternalScaler/<RPC>``)."""

TARGET_SIZE = 1
"""Desired nodes per replica: the HPA's replica count becomes the metric's value."""

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.so_reuseport", 0),  # a port in use is an error, not a silently shared listener
    ("grpc.keepalive_time_ms", 60_000),  # ping idle connections: a vanished KEDA's streams end
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.server_handshake_timeout_ms", 10_000),  # a half-open connection is dropped after 10 s, not 120 s
)

_Msg = TypeVar("_Msg", bound=Message)
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Context = grpc.aio.ServicerContext


# ----------------------------------------------------------------------------------------- TLS


class GrpcTLSError(ValueError):
    """A TLS file that cannot be used (unreadable, not PEM, key not matching the certificate)."""


@dataclass(frozen=True)
class GrpcTLS:
    """TLS of the scaler's gRPC port; ``client_ca_file`` set → mTLS (client certificates required)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def files(self) -> tuple[Path, ...]:
        return (self.cert_file, self.key_file) + (
            (self.client_ca_file,) if self.client_ca_file is not None else ()
        )

    def load(self) -> tuple[bytes, bytes, bytes | None]:
        """Read and check the files: (certificate chain, key, client CA); :class:`GrpcTLSError`."""
        try:
            cert = self.cert_file.read_bytes()
            key = self.key_file.read_bytes()
            ca = self.client_ca_file.read_bytes() if self.client_ca_file is not None else None
        except OSError as e:
            raise GrpcTLSError(f"gRPC TLS: cannot read {e.filename}: {e.strerror}") from None
        # gRPC reports bad PEM only at the first handshake; Python's ssl says what is wrong now
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as e:
            raise GrpcTLSError(
                f"gRPC TLS: cannot use certificate {self.cert_file} with key {self.key_file}: {e}"
            ) from None
        if self.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (ssl.SSLError, OSError) as e:
                raise GrpcTLSError(f"gRPC TLS: cannot use client CA {self.client_ca_file}: {e}") from None
        return cert, key, ca


def _stamp(files: tuple[Path, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class _CertReloader:
    """gRPC's certificate fetcher: a new configuration when the files changed and are usable.

    gRPC calls it before each TLS handshake; ``None`` keeps the configuration in use. A half-written
    rotation (files that do not load together) keeps the previous certificate and is retried.
    """

    def __init__(self, tls: GrpcTLS) -> None:
        self.tls = tls
        self.require_client_auth = tls.client_ca_file is not None
        cert, key, ca = tls.load()
        self._stamp = _stamp(tls.files())
        self.initial = grpc.ssl_server_certificate_configuration([(key, cert)], ca)
        self.reloads = 0
        self._warned: tuple[tuple[int, int, int], ...] | None = None

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        stamp = _stamp(self.tls.files())
        if stamp == self._stamp:
            return None
        try:
            cert, key, ca = self.tls.load()
        except GrpcTLSError as e:
            if stamp != self._warned:
                self._warned = stamp
                log.warning("%s; keeping the previous certificate", e)
            return None
        self._stamp, self.reloads = stamp, self.reloads + 1
        log.info("gRPC TLS: certificate files changed; reloaded %s", self.tls.cert_file)
        return grpc.ssl_server_certificate_configuration([(key, cert)], ca)

    def credentials(self) -> grpc.ServerCredentials:
        # grpc-stubs types the fetcher's result without None, but None means "no change" in gRPC
        fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], self)
        return grpc.dynamic_ssl_server_credentials(self.initial, fetcher, self.require_client_auth)


# -------------------------------------------------------------------------------------- service


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes are not a valid message (answered INVALID_ARGUMENT, not UNKNOWN)."""

    message_type: str
    error: str


def _parser(cls: type[_Msg]) -> Callable[[bytes], _Msg | Undecodable]:
    """The request deserializer: a message, or :class:`Undecodable` (gRPC would answer UNKNOWN
    with a Python exception's text to an exception raised here)."""

    def parse(data: bytes) -> _Msg | Undecodable:
        try:
            return cls.FromString(data)
        except DecodeError as e:
            return Undecodable(cls.DESCRIPTOR.full_name, str(e)[:200])

    return parse


REFUSAL_LOG_EVERY = 10.0
"""Seconds between log lines of one kind of refused call (the rest are counted, and the next line says
how many): a client retrying a bad ScaledObject in a tight loop once wrote 28,107 lines in 12 s."""


def _who(ref: ScaledObjectRef) -> str:
    """The ScaledObject a request is for (never its metadata: it may carry TLS material)."""
    return f"{ref.namespace}/{ref.name}" if ref.namespace or ref.name else "(unnamed)"


class ExternalScaler:
    """The RPC handlers over one :class:`DemandService`."""

    def __init__(self, service: DemandService, *, log_every: float = REFUSAL_LOG_EVERY) -> None:
        self.service = service
        self._closing = asyncio.Event()
        self.streams = 0
        """StreamIsActive calls in progress."""
        self.refused: Counter[tuple[str, str]] = Counter()
        """Calls answered with an error, by (status code, reason)."""
        self._throttle = Throttle(log_every)

    def families(self) -> Iterable[Metric]:
        """``slurm_autoscaler_grpc_requests_refused_total`` (rendered per scrape)."""
        fam = CounterMetricFamily(
            "slurm_autoscaler_grpc_requests_refused",
            "KEDA external scaler calls answered with an error, by gRPC status code and reason (undecodable, "
            "metadata, unknown_partition, too_many_targets, no_snapshot, invalid_records)",
            labels=["code", "reason"],
        )
        for (code, reason), n in sorted(self.refused.items()):
            fam.add_metric([code, reason], n)
        return [fam]

    async def _refuse(
        self, context: _Context[Any, Any], code: grpc.StatusCode, reason: str, message: str
    ) -> NoReturn:
        """Count the refusal, log it (one line per reason per interval, INFO before the first snapshot —
        that is expected at start — else WARNING) and abort the call with ``code``."""
        self.refused[(code.name, reason)] += 1
        held = self._throttle.admit(reason)
        if held is not None:
            level = logging.INFO if reason == "no_snapshot" else logging.WARNING
            log.log(level, "gRPC scaler: %s%s", message, Throttle.note(held, self._throttle.every))
        await context.abort(code, message)

    # -- helpers ---------------------------------------------------------------------------------

    async def _decoded(self, request: _Msg | Undecodable, context: _Context[Any, Any]) -> _Msg:
        if isinstance(request, Undecodable):
            message = f"request is not a valid {request.message_type}: {request.error}"
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "undecodable", message)
        return request

    async def _target(self, ref: ScaledObjectRef, context: _Context[_Req, _Resp]) -> Target:
        meta = dict(ref.scalerMetadata)
        try:
            return target_from_metadata(meta)
        except MetadataError as e:
            message = f"ScaledObject {_who(ref)}: {e}"
        await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "metadata", message)

    async def _metric_name(self, ref: ScaledObjectRef, target: Target, context: _Context[Any, Any]) -> str:
        try:
            return metric_name(ref.scalerMetadata, target)
        except MetadataError as e:
            message = f"ScaledObject {_who(ref)}: {e}"
        await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "metadata", message)

    async def _answer(self, ref: ScaledObjectRef, target: Target, context: _Context[_Req, _Resp]) -> Answer:
        try:
            return self.service.answer(target)
        except NoTrustedAnswer as e:
            code, reason = grpc.StatusCode.UNAVAILABLE, "invalid_records"
            message = f"ScaledObject {_who(ref)}: {e}"
        except NoSnapshotYet as e:
            code, reason = grpc.StatusCode.UNAVAILABLE, "no_snapshot"
            message = f"ScaledObject {_who(ref)}: {e}"
        except UnknownPartition as e:
            code, reason = grpc.StatusCode.INVALID_ARGUMENT, "unknown_partition"
            message = f"ScaledObject {_who(ref)}: metadata 'partition': {e}"
        except TooManyTargets as e:
            code, reason = grpc.StatusCode.RESOURCE_EXHAUSTED, "too_many_targets"
            message = f"ScaledObject {_who(ref)}: {e}"
        await self._refuse(context, code, reason, message)

    # -- RPCs ----------------------------------------------------------------------------------

    async def is_active(
        self, raw: ScaledObjectRef | Undecodable, context: _Context[ScaledObjectRef, IsActiveResponse]
    ) -> IsActiveResponse:
        request = await self._decoded(raw, context)
        target = await self._target(request, context)
        answer = await self._answer(request, target, context)
        return IsActiveResponse(result=answer.active)

    async def get_metric_spec(
        self,
        raw: ScaledObjectRef | Undecodable,
        context: _Context[ScaledObjectRef, GetMetricSpecResponse],
    ) -> GetMetricSpecResponse:
        request = await self._decoded(raw, context)
        target = await self._target(request, context)
        name = await self._metric_name(request, target, context)
        spec = MetricSpec(metricName=name, targetSize=TARGET_SIZE, targetSizeFloat=float(TARGET_SIZE))
        return GetMetricSpecResponse(metricSpecs=[spec])

    async def get_metrics(
        self, raw: GetMetricsRequest | Undecodable, context: _Context[GetMetricsRequest, GetMetricsResponse]
    ) -> GetMetricsResponse:
        request = await self._decoded(raw, context)
        ref = request.scaledObjectRef
        target = await self._target(ref, context)
        name = await self._metric_name(ref, target, context)
        if request.metricName:  # KEDA's own name for the metric (``s0-...``), echoed when it is one
            try:
                name = check_metric_name(request.metricName)
            except MetadataError as e:
                message = f"ScaledObject {_who(ref)}: request {e}"
                await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "metadata", message)
        answer = await self._answer(ref, target, context)
        value = MetricValue(
            metricName=name, metricValue=answer.desired, metricValueFloat=float(answer.desired)
        )
        return GetMetricsResponse(metricValues=[value])

    async def stream_is_active(
        self, raw: ScaledObjectRef | Undecodable, context: _Context[ScaledObjectRef, IsActiveResponse]
    ) -> AsyncIterator[IsActiveResponse]:
        """KEDA's ``external-push``: the current activity, then one message per change.

        Ends on the client's cancel (the handler is cancelled) or cleanly (status OK, which KEDA
        answers by reconnecting) when the server stops.
        """
        request = await self._decoded(raw, context)
        target = await self._target(request, context)
        await self._answer(request, target, context)  # UNAVAILABLE before the first snapshot
        self.streams += 1
        log.debug("gRPC scaler: %s streams activity of %s", _who(request), target.name)
        try:
            last: bool | None = None
            # aclosing: the answers end here, not later in a finalizer task of the event loop
            async with contextlib.aclosing(self.service.changes(target)) as answers:
                while (answer := await self._next_unless_closing(answers)) is not None:
                    if answer.active != last:
                        last = answer.active
                        yield IsActiveResponse(result=last)
        finally:
            self.streams -= 1

    async def _next_unless_closing(self, it: AsyncIterator[Answer]) -> Answer | None:
        """The next answer, or None once the server is closing (or the answers end)."""
        if self._closing.is_set():
            return None
        nxt: asyncio.Future[Answer] = asyncio.ensure_future(anext(it))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait((nxt, closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (nxt, closing):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await t
        if nxt.done() and not nxt.cancelled():
            try:
                return nxt.result()
            except StopAsyncIteration:
                return None
        return None

    def close_streams(self) -> None:
        """End every StreamIsActive call (status OK) and refuse to start new ones."""
        self._closing.set()

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        uu, us = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
        ref = _parser(ScaledObjectRef)
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "IsActive": uu(self.is_active, ref, IsActiveResponse.SerializeToString),
                "StreamIsActive": us(self.stream_is_active, ref, IsActiveResponse.SerializeToString),
                "GetMetricSpec": uu(self.get_metric_spec, ref, GetMetricSpecResponse.SerializeToString),
                "GetMetrics": uu(
                    self.get_metrics, _parser(GetMetricsRequest), GetMetricsResponse.SerializeToString
                ),
            },
        )


# --------------------------------------------------------------------------------------- server


def probe_bind(address: str) -> None:
    """Bind (and release) every socket ``address`` (``host:port``, ``[::]:9342``) stands for, as the
    gRPC server will; ``RuntimeError`` in one line when one cannot be bound (port in use, address not
    local). Port 0 is not probed."""
    host_text, _, port_text = address.rpartition(":")
    host = host_text.strip("[]") or None
    port = int(port_text) if port_text.isdigit() else -1
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as e:
        raise RuntimeError(f"gRPC scaler: cannot listen on {address} (--grpc-listen): {e}") from None
    for family, kind, proto, _, where in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: TIME_WAIT is no conflict
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(where)
            except OSError as e:
                raise RuntimeError(
                    f"gRPC scaler: cannot listen on {address} (--grpc-listen): {e.strerror or e}"
                ) from None


@dataclass
class ScalerServer:
    """A started scaler server; :meth:`stop` it."""

    server: grpc.aio.Server
    port: int
    """The bound port (the real one when the address asked for port 0)."""
    scaler: ExternalScaler
    tls: GrpcTLS | None = None
    reloader: _CertReloader | None = field(default=None, repr=False)

    async def stop(self, grace: float = 5.0) -> None:
        """End the streams cleanly, let unary calls finish for up to ``grace`` s, then abort the rest."""
        self.scaler.close_streams()
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation (poller.py)
            async with asyncio.timeout(grace + 5.0):
                await self.server.stop(grace)
        except TimeoutError:
            log.warning("gRPC scaler: server did not stop within %.0f s", grace + 5.0)


async def start_grpc_server(
    service: DemandService, address: str, *, tls: GrpcTLS | None = None
) -> ScalerServer:
    """Serve ``service`` on ``address`` (``host:port``, ``[::]:9342``; port 0 picks a free port).

    Runs on the caller's event loop. Raises :class:`GrpcTLSError` for unusable TLS files and
    ``RuntimeError`` when the address cannot be bound.
    """
    probe_bind(address)  # gRPC's C core would print its own lines for a port in use, then fail
    reloader = _CertReloader(tls) if tls is not None else None
    scaler = ExternalScaler(service)
    server = grpc.aio.server(handlers=[scaler.handler()], options=SERVER_OPTIONS)
    try:
        if reloader is not None:
            port = server.add_secure_port(address, reloader.credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as e:
        await server.stop(None)
        raise RuntimeError(f"gRPC scaler: cannot listen on {address}: {e}") from None
    if not port:
        await server.stop(None)
        raise RuntimeError(f"gRPC scaler: cannot listen on {address}")
    await server.start()
    log.info(
        "gRPC scaler (KEDA external scaler) listening on %s (port %d, %s)",
        address,
        port,
        "plaintext" if tls is None else ("mTLS" if tls.client_ca_file else "TLS"),
    )
    return ScalerServer(server, port, scaler, tls, reloader)
