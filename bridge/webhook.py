"""The bridge's admission webhook: AdmissionReview v1 in, AdmissionReview v1 out. :func:`mutate` and
:func:`validate` are pure; :class:`WebhookServer` serves them over HTTPS only, its certificate re-read
when the mounted Secret changes.

* **mutating** (``/mutate``, pods, CREATE): a pod created in a namespace the policy manages gets
  ``schedulerName`` set to the bridge's — unless it names another scheduler (the API server defaults an
  unset name to ``default-scheduler`` before admission, so only that name is replaced), opts out with
  the annotation ``slurm-keda.io/opt-out: "true"``, is already bound (``nodeName``), is a mirror or
  DaemonSet pod, or lives in kube-system or the bridge's own namespace.
* **validating** (``/validate``, pods CREATE and UPDATE, ``pods/resize``): a pod naming the bridge that
  the bridge would refuse is refused with the message its Event would carry
  (:func:`bridge.requests.admit`: a bad annotation, a choice outside its namespace's policy, a placement
  rule Slurm cannot honour, a malformed gang); a resize of a bridge pod is refused (its resources are its
  Slurm job's, fixed when the job was submitted). Nothing else is judged: every other pod is allowed.

A review the webhook cannot read is answered HTTP 400 (the API server then applies the configuration's
``failurePolicy``); a pod it cannot decode is allowed by ``/mutate`` unchanged and refused by
``/validate`` when it names the bridge.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, Metric

from exporter.listen import ConnectionGuard, Listener, ListenLimits, bind_sockets

from .groups import GroupError, membership
from .pods import Pod
from .policy import Policy
from .requests import NEVER_NAMESPACES, PREFIX, Refusal, admit

__all__ = ["OPT_OUT_ANNOTATION", "WebhookOptions", "WebhookServer", "mutate", "validate"]

log = logging.getLogger(__name__)

ADMISSION_VERSION = "admission.k8s.io/v1"
OPT_OUT_ANNOTATION = PREFIX + "opt-out"
"""``"true"`` on a pod in a managed namespace: the mutating webhook leaves its scheduler alone."""
DEFAULT_SCHEDULER = "default-scheduler"
MAX_REVIEW_BYTES = 3 << 20
"""The API server sends objects of at most ~1.5 MiB (etcd's limit); an old and a new one per review."""


@dataclass(frozen=True)
class WebhookOptions:
    """What the webhook decides with: the bridge's scheduler name, own namespace and policy."""

    scheduler_name: str
    own_namespace: str
    policy: Policy


class _Review(msgspec.Struct):
    apiVersion: str = ""
    kind: str = ""
    request: dict[str, Any] | None = None


class ReviewError(ValueError):
    """Not an AdmissionReview v1 request (HTTP 400)."""


def parse_review(body: bytes) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview v1 body; :class:`ReviewError` for anything else."""
    try:
        review = msgspec.json.decode(body, type=_Review)
    except msgspec.MsgspecError as e:
        raise ReviewError(f"not an AdmissionReview: {e}") from None
    if review.apiVersion != ADMISSION_VERSION or review.kind != "AdmissionReview":
        raise ReviewError(
            f"expected {ADMISSION_VERSION} AdmissionReview, got {review.apiVersion} {review.kind}"
        )
    req = review.request
    if not isinstance(req, dict) or not isinstance(req.get("uid"), str) or not req["uid"]:
        raise ReviewError("AdmissionReview without request.uid")
    return req


def answer(
    uid: str, *, allowed: bool, message: str = "", patch: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An AdmissionReview v1 response (a refusal carries ``status.message``, HTTP 403 Forbidden)."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": ADMISSION_VERSION, "kind": "AdmissionReview", "response": response}


def _pod(obj: Any) -> Pod | None:
    if not isinstance(obj, dict):
        return None
    try:
        return msgspec.convert(obj, Pod)
    except msgspec.MsgspecError:
        return None


def _is_pods(req: Mapping[str, Any]) -> bool:
    resource = req.get("resource") or {}
    return resource.get("group", "") == "" and resource.get("resource") == "pods"


def mutate(
    req: Mapping[str, Any], options: WebhookOptions, namespace_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Answer a mutating review: put a new pod of a managed namespace on the bridge (see the module doc)."""
    uid = str(req["uid"])
    if not _is_pods(req) or req.get("operation") != "CREATE" or req.get("subResource"):
        return answer(uid, allowed=True)
    pod = _pod(req.get("object"))
    namespace = str(req.get("namespace") or (pod.metadata.namespace if pod else ""))
    if pod is None or not _takes(pod, namespace, options, namespace_labels):
        return answer(uid, allowed=True)
    patch = [{"op": "add", "path": "/spec/schedulerName", "value": options.scheduler_name}]
    return answer(uid, allowed=True, patch=patch)


def _takes(pod: Pod, namespace: str, options: WebhookOptions, labels: Mapping[str, str] | None) -> bool:
    if pod.spec.schedulerName != DEFAULT_SCHEDULER or pod.spec.nodeName:
        return False
    if pod.metadata.annotations.get(OPT_OUT_ANNOTATION, "").strip().lower() == "true":
        return False
    if namespace in NEVER_NAMESPACES or namespace == options.own_namespace:
        return False
    if pod.is_mirror or pod.owned_by_daemonset:
        return False
    return options.policy.of(namespace, labels) is not None  # labels unknown: selected namespaces wait


def validate(
    req: Mapping[str, Any], options: WebhookOptions, namespace_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Answer a validating review: refuse a bridge pod the bridge would refuse, and its resize."""
    uid = str(req["uid"])
    if not _is_pods(req):
        return answer(uid, allowed=True)
    obj = req.get("object")
    names_bridge = (
        isinstance(obj, dict) and (obj.get("spec") or {}).get("schedulerName") == options.scheduler_name
    )
    if not names_bridge:
        return answer(uid, allowed=True)
    pod = _pod(obj)
    if pod is None:
        return answer(uid, allowed=False, message="the pod names the Slurm bridge but could not be read")
    if req.get("subResource") == "resize":
        return answer(
            uid,
            allowed=False,
            message=f"pod {pod.key} is placed by Slurm: its resources are its Slurm job's, not resizable",
        )
    if req.get("subResource") or req.get("operation") not in ("CREATE", "UPDATE") or pod.spec.nodeName:
        return answer(uid, allowed=True)
    if not pod.metadata.namespace:  # a pod being created carries the request's namespace
        meta = msgspec.structs.replace(pod.metadata, namespace=str(req.get("namespace") or ""))
        pod = msgspec.structs.replace(pod, metadata=meta)
    policy = options.policy
    if namespace_labels is None and policy.selectors and pod.metadata.namespace not in policy.namespaces:
        return answer(uid, allowed=True)  # its labels not known yet: the bridge judges it (an Event)
    got = admit(
        pod,
        scheduler_name=options.scheduler_name,
        own_namespace=options.own_namespace,
        policy=options.policy,
        namespace_labels=namespace_labels,
    )
    if isinstance(got, Refusal):
        return answer(uid, allowed=False, message=got.reason)
    try:
        membership(pod)
    except GroupError as e:
        return answer(uid, allowed=False, message=str(e))
    return answer(uid, allowed=True)


# -- serving ------------------------------------------------------------------------------------------


class CertificateFiles:
    """The webhook's certificate and key, loaded into one TLS context and re-loaded when either file
    changes (a Secret volume updates by swapping a symlink: the path's content changes, not the path).
    A pair that does not load keeps the last good one (logged and counted)."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loaded = self._stamp()
        self.context.load_cert_chain(cert, key)  # the first load must work: raises
        self.reloads = 0
        self.reload_errors = 0

    def _stamp(self) -> tuple[bytes, bytes]:
        return self.cert.read_bytes(), self.key.read_bytes()

    def check(self) -> bool:
        """Reload when the files changed; True when a new pair was loaded."""
        try:
            now = self._stamp()
        except OSError as e:
            self.reload_errors += 1
            log.warning("webhook certificate: %s; keeping the one loaded", e)
            return False
        if now == self.loaded:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as e:
            self.reload_errors += 1
            log.warning("webhook certificate: the new pair does not load (%s); keeping the one loaded", e)
            return False
        self.loaded = now
        self.reloads += 1
        log.info("webhook certificate reloaded from %s", self.cert)
        return True


class WebhookServer:
    """``/mutate`` and ``/validate`` over HTTPS on ``host:port``; ``namespace_labels(ns)`` gives a
    namespace's labels for the policy's selectors (None when unknown). Run with :meth:`run` (cancel to
    stop); the certificate files are checked every ``reload_every`` seconds."""

    def __init__(
        self,
        options: WebhookOptions,
        certificates: CertificateFiles,
        host: str,
        port: int,
        *,
        namespace_labels: Callable[[str], Mapping[str, str] | None] = lambda _: None,
        reload_every: float = 10.0,
    ) -> None:
        self.options, self.certificates = options, certificates
        self.host, self.port = host, port
        self.namespace_labels = namespace_labels
        self.reload_every = reload_every
        self.reviews: Counter[tuple[str, str]] = Counter()
        """(path, verdict: allowed, mutated, denied, bad_request) → reviews answered."""
        self.bound_port: int | None = None
        self._sockets: list[socket.socket] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.router.add_post("/mutate", self._mutate)
        app.router.add_post("/validate", self._validate)
        return app

    async def _mutate(self, request: web.Request) -> web.Response:
        return await self._review(request, "mutate", mutate)

    async def _validate(self, request: web.Request) -> web.Response:
        return await self._review(request, "validate", validate)

    async def _review(
        self,
        request: web.Request,
        path: str,
        decide: Callable[[Mapping[str, Any], WebhookOptions, Mapping[str, str] | None], dict[str, Any]],
    ) -> web.Response:
        try:
            req = parse_review(await request.read())
        except ReviewError as e:
            self.reviews[(path, "bad_request")] += 1
            return web.json_response({"message": str(e)}, status=400)
        namespace = str(req.get("namespace") or "")
        doc = decide(req, self.options, self.namespace_labels(namespace))
        response = doc["response"]
        verdict = "denied" if not response["allowed"] else "mutated" if "patch" in response else "allowed"
        self.reviews[(path, verdict)] += 1
        if verdict == "denied":
            log.info("webhook: denied pod %s/%s: %s", namespace, _name(req), response["status"]["message"])
        return web.json_response(doc)

    def families(self) -> Iterable[Metric]:
        reviews = CounterMetricFamily(
            "slurm_bridge_webhook_reviews",
            "Admission reviews the bridge's webhook answered, by path and verdict",
            labels=["path", "verdict"],
        )
        for (path, verdict), n in sorted(self.reviews.items()):
            reviews.add_metric([path, verdict], n)
        yield reviews
        reloads = CounterMetricFamily(
            "slurm_bridge_webhook_certificate_reloads",
            "Webhook certificate reloads, by result",
            labels=["result"],
        )
        reloads.add_metric(["ok"], self.certificates.reloads)
        reloads.add_metric(["error"], self.certificates.reload_errors)
        yield reloads

    def bind(self) -> None:
        """Claim the address (``OSError`` when it cannot be listened on); :meth:`run` serves it."""
        self._sockets = bind_sockets(self.host or None, self.port, backlog=1024)
        self.bound_port = self._sockets[0].getsockname()[1]

    async def run(self) -> None:
        """Serve (behind the same connection guard as ``/metrics``: a cap, header timeouts) until
        cancelled, checking the certificate files every ``reload_every`` seconds."""
        if not self._sockets:
            self.bind()
        sockets, self._sockets = self._sockets, []
        guard = ConnectionGuard(ListenLimits())
        runner = web.AppRunner(self.app(), access_log=None, keepalive_timeout=guard.limits.idle_timeout)
        listener: Listener | None = None
        try:
            await runner.setup()
            assert runner.server is not None
            listener = Listener(guard, runner.server, sockets, self.certificates.context)
            listener.start()
            where = f"https://{self.host or '*'}:{self.bound_port}"
            log.info("webhook: listening on %s (/mutate, /validate)", where)
            while True:
                await asyncio.sleep(self.reload_every)
                self.certificates.check()
        finally:
            if listener is not None:
                await listener.close()
            else:
                for sock in sockets:
                    sock.close()
            await runner.cleanup()


def _name(req: Mapping[str, Any]) -> str:
    obj = req.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        return str(meta.get("name") or meta.get("generateName") or req.get("name") or "")
    return str(req.get("name") or "")
