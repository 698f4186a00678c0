"""A stateful fake Kubernetes API server over real HTTP (aiohttp), for driving the bridge through the real
client library. No API server can be installed here; kmock (PyPI) was tried first and lacks what the bridge
needs — resourceVersions are not maintained, ``pods/binding`` answers 404, selectors are not applied — so
this speaks the JSON API itself, for any resource:

* paths ``/api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]`` and the same under
  ``/apis/{group}/{version}`` (custom resources, leases, events.k8s.io); ``nodes`` and ``namespaces``
  are cluster-scoped;
* create (409 AlreadyExists, ``generateName``), get / list (``labelSelector``: ``=``, ``==``, ``!=``,
  ``in``, ``notin``, exists, ``!`` not-exists; ``fieldSelector``: ``=``, ``==``, ``!=`` on dotted
  paths), replace (409 Conflict on a stale ``resourceVersion``), patch (merge, strategic merge — lists
  of objects merge by ``type`` or ``name`` — and JSON patch), delete, the ``status`` subresource;
* one cluster-wide ``resourceVersion`` counter; watch (``?watch=true``) from a ``resourceVersion`` (events
  after it), or from now after synthetic ADDED events; a ``resourceVersion`` older than the kept history
  (:attr:`FakeKube.history`) answers a watch ERROR event with status 410 Gone, as a real server does after
  compaction; ``timeoutSeconds`` ends the stream;
* ``pods/binding``: sets ``spec.nodeName`` and ``PodScheduled=True`` (409 when the pod is already bound);
  deleting a bound pod whose node's kubelet is "dead" (:meth:`FakeKube.kill_kubelet`) leaves it
  Terminating (``deletionTimestamp`` set) as a real cluster does, otherwise it is gone at once;
* faults: :attr:`FakeKube.down` answers 503 to everything; :meth:`FakeKube.fail_next` one status for the
  next matching request, :meth:`FakeKube.fail_always` every one (429 with ``Retry-After`` as the real
  server's max-in-flight filter; a 200 that is not JSON);
* RBAC when :attr:`FakeKube.rbac` is set (:mod:`testkit.fake_rbac`): 403 Forbidden with kube-apiserver's
  message for what the bound Roles do not allow.

Every request is recorded in :attr:`FakeKube.requests` as ``(method, path, watch)``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
import uuid
from collections import deque
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from testkit.fake_rbac import Rbac, request_info
from testkit.tools import serve_app

CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "persistentvolumes", "customresourcedefinitions"})
KINDS = {"pods": "Pod", "nodes": "Node", "events": "Event", "leases": "Lease", "namespaces": "Namespace"}
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (api prefix + plural, namespace, name)


def now_text(later: float = 0.0) -> str:
    return datetime.fromtimestamp(datetime.now(UTC).timestamp() + later, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    body["message"] = message
    return web.json_response(body, status=code)


def too_many_requests(retry_after: int) -> web.Response:
    """kube-apiserver's 429 (``staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go``,
    ``tooManyRequests``): Status ``TooManyRequests`` with ``details.retryAfterSeconds`` and a
    ``Retry-After`` header."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": retry_after},
        "code": 429,
    }
    return web.json_response(body, status=429, headers={"Retry-After": str(retry_after)})


# -- selectors and patches ------------------------------------------------------------------------------


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _clause(clause: str) -> Any:
    """One requirement of a label selector as a predicate on a labels dict."""
    if m := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", clause):
        key, wanted, values = m.group(1), m.group(2) == "in", {v.strip() for v in m.group(3).split(",")}
        return lambda labels: (labels.get(key) in values) == wanted
    if m := re.fullmatch(r"([\w./-]+)\s*(!=|==|=)\s*([\w./-]*)", clause):
        key, equal, value = m.group(1), m.group(2) != "!=", m.group(3)
        return lambda labels: (labels.get(key) == value) == equal
    if m := re.fullmatch(r"!([\w./-]+)", clause):
        key = m.group(1)
        return lambda labels: key not in labels
    if re.fullmatch(r"[\w./-]+", clause):
        return lambda labels: clause in labels
    raise ValueError(f"unable to parse requirement: {clause!r}")


def label_matcher(selector: str) -> Any:
    """A predicate on a labels dict for a Kubernetes label selector."""
    parts = [p.strip() for p in re.split(r",(?![^()]*\))", selector.strip())] if selector.strip() else []
    clauses = [_clause(p) for p in parts]
    return lambda labels: all(c(labels) for c in clauses)


def field_matcher(selector: str) -> Any:
    clauses = []
    for clause in filter(None, (c.strip() for c in selector.split(","))):
        m = re.fullmatch(r"([\w.]+)\s*(!=|==|=)\s*(.*)", clause)
        if m is None:
            raise ValueError(f"invalid field selector: {clause!r}")
        path, op, value = m.groups()
        clauses.append((path, op != "!=", value))

    def match(obj: Obj) -> bool:
        for path, equal, value in clauses:
            got = _dig(obj, path)
            text = "" if got is None else str(got)
            if (text == value) != equal:
                return False
        return True

    return match


def pod_problem(old: Obj | None, new: Obj) -> str:
    """What kube-apiserver's pod validation refuses of the rules the bridge meets, else "": a node field
    selector (``matchFields``) must name ``metadata.name`` with exactly one value for In / NotIn
    (``ValidateNodeFieldSelectorRequirement``); scheduling gates may only be removed after creation, and a
    pod with gates may not name a node (``ValidatePodUpdate`` / ``validateSchedulingGates``)."""
    terms = _dig(new, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate((terms or {}).get("nodeSelectorTerms") or []):
        for j, req in enumerate(term.get("matchFields") or []):
            where = (
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                f".nodeSelectorTerms[{i}].matchFields[{j}]"
            )
            if req.get("key") != "metadata.name":
                return f"{where}.key: Invalid value: {req.get('key')!r}: not a valid field selector key"
            if req.get("operator") in ("In", "NotIn") and len(req.get("values") or []) != 1:
                return (
                    f"{where}.values: Required value: must be only one value when `operator` is 'In' or"
                    " 'NotIn' for node field selector"
                )
    gates = {g.get("name") for g in _dig(new, "spec.schedulingGates") or []}
    if gates and _dig(new, "spec.nodeName") and old is None:
        return "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
    if old is not None:
        added = gates - {g.get("name") for g in _dig(old, "spec.schedulingGates") or []}
        if added:
            gate = sorted(added)[0]
            return (
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
                f" '{gate}'"
            )
    return ""


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 merge patch; ``strategic``: lists of objects merge by ``type``/``name`` keys."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif strategic and isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = _merge_list(out[k], v)
        else:
            out[k] = merge_patch(out.get(k), v, strategic)
    return out


def _merge_list(old: list[Any], new: list[Any]) -> list[Any]:
    for key in ("type", "name"):
        if new and all(isinstance(x, dict) and key in x for x in [*old, *new]):
            merged = {x[key]: x for x in old}
            for x in new:
                merged[x[key]] = merge_patch(merged.get(x[key], {}), x, True)
            return list(merged.values())
    return copy.deepcopy(new)


def json_patch(target: Any, ops: list[Obj]) -> Any:
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif op["op"] == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op["op"] == "test":
            got = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if got != op["value"]:
                raise ValueError(f"test of {op['path']} failed")
    return doc


# -- the server -------------------------------------------------------------------------------------------


@dataclass
class _Watcher:
    prefix: str
    namespace: str
    labels: Any
    fields: Any
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)


class FakeKube:
    """The fake API server's state and app; see the module docstring."""

    def __init__(self, *, history: int = 1000, token: str | None = None) -> None:
        self.objects: dict[Key, Obj] = {}
        self.rv = 1
        self.history: deque[tuple[int, str, Key, Obj]] = deque(maxlen=history)
        """The last watch events kept; a watch from before the oldest answers 410 Gone."""
        self.token = token
        self.down = False
        self.requests: list[tuple[str, str, bool]] = []
        self.bound_at: dict[Key, float] = {}
        """Pod → when the API server bound it (epoch seconds): the moment benchmarks measure to."""
        self._fail: list[tuple[str, re.Pattern[str], int]] = []
        self._always: list[tuple[str, re.Pattern[str], int, int | None, bytes]] = []
        self._watchers: list[_Watcher] = []
        self.dead_kubelets: set[str] = set()
        self.stopping = False
        self.watch_lifetime: float | None = None
        """Seconds after which every watch ends, whatever its ``timeoutSeconds`` (0: at once, after its
        backlog) — a server (or proxy) that closes watches early; None: as asked."""
        self.missing: set[str] = set()
        """Resources the server does not have, as ``group/version/plural`` (a CRD not installed): every
        request for them is 404 NotFound "the server could not find the requested resource", as the real
        API server answers for a group/version/resource no CRD or built-in registers."""
        self.watch_lines: list[bytes] = []
        """Raw lines sent once, at the start of the next watch (malformed or unknown events)."""
        self.rbac: Rbac | None = None
        """When set, every request is authorized by these RBAC rules (403 Forbidden otherwise)."""
        self.request_times: list[tuple[float, str, str]] = []
        """(monotonic time, method, path) of every request."""

    # -- helpers for tests ----------------------------------------------------------------------------

    def fail_next(self, method: str, path_regex: str, code: int) -> None:
        """Answer the next ``method`` request whose path matches with ``code``."""
        self._fail.append((method.upper(), re.compile(path_regex), code))

    def fail_always(
        self, method: str, path_regex: str, code: int, *, retry_after: int | None = None, body: bytes = b""
    ) -> None:
        """Answer every ``method`` request whose path matches with ``code`` until :meth:`heal`: a Status
        (429 as kube-apiserver's max-in-flight filter writes it: ``TooManyRequests``, ``Retry-After`` and
        ``details.retryAfterSeconds``), or ``body`` as it is (a 200 that is not JSON)."""
        self._always.append((method.upper(), re.compile(path_regex), code, retry_after, body))

    def heal(self) -> None:
        self._always.clear()
        self._fail.clear()

    def compact(self) -> None:
        """Forget the watch history (etcd compaction): a watch resuming from an older version gets 410."""
        self.history.clear()
        self.rv += 10

    def kill_kubelet(self, node: str) -> None:
        """Pods bound to ``node`` now stay Terminating when deleted (nothing acknowledges the kill)."""
        self.dead_kubelets.add(node)

    def get(self, plural: str, namespace: str, name: str, prefix: str = "v1") -> Obj | None:
        return self.objects.get((f"{prefix}/{plural}", namespace, name))

    def put(self, plural: str, obj: Obj, prefix: str = "v1") -> Obj:
        """Create ``obj`` directly (as a controller or kubectl would)."""
        meta = obj.setdefault("metadata", {})
        return self._create(f"{prefix}/{plural}", meta.get("namespace", ""), obj)

    def update(self, plural: str, namespace: str, name: str, patch: Obj, prefix: str = "v1") -> Obj:
        key = (f"{prefix}/{plural}", namespace, name)
        return self._store(key, merge_patch(self.objects[key], patch, True), "MODIFIED")

    def remove(self, plural: str, namespace: str, name: str, prefix: str = "v1") -> None:
        """Delete at once (a kubelet that finished killing the pod, or ``--force``)."""
        key = (f"{prefix}/{plural}", namespace, name)
        obj = self.objects.pop(key)
        # the deletion is a write of its own: etcd gives it a new revision, which the DELETED event's object
        # carries (a watch resuming from the object's last version must still see it)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._event("DELETED", key, obj)

    def delete(
        self, plural: str, namespace: str, name: str, grace: int | None = None, prefix: str = "v1"
    ) -> None:
        """Delete as a ``kubectl delete`` would (a pod on a dead kubelet is left Terminating)."""
        self._delete((f"{prefix}/{plural}", namespace, name), grace)

    def events_for(self, namespace: str, name: str) -> list[Obj]:
        return [
            o
            for (prefix, ns, _), o in self.objects.items()
            if prefix.endswith("/events") and ns == namespace and _dig(o, "involvedObject.name") == name
        ]

    # -- state changes ------------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _event(self, kind: str, key: Key, obj: Obj) -> None:
        self.history.append((self.rv, kind, key, copy.deepcopy(obj)))
        for w in self._watchers:
            if w.prefix == key[0] and (not w.namespace or w.namespace == key[1]) and self._selected(w, obj):
                w.queue.put_nowait((kind, copy.deepcopy(obj)))

    @staticmethod
    def _selected(w: _Watcher, obj: Obj) -> bool:
        return bool(w.labels(obj.get("metadata", {}).get("labels") or {}) and w.fields(obj))

    def _create(self, prefix: str, namespace: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        plural = prefix.rsplit("/", 1)[1]
        if plural not in CLUSTER_SCOPED:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        key = (prefix, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            raise _Answer(status(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists'))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_text())
        if plural == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        return self._store(key, obj, "ADDED")

    def _store(self, key: Key, obj: Obj, kind: str) -> Obj:
        if key[0] == "v1/pods":
            problem = pod_problem(self.objects.get(key) if kind == "MODIFIED" else None, obj)
            if problem:
                raise _Answer(status(422, "Invalid", f'Pod "{key[2]}" is invalid: {problem}'))
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[key] = obj
        self._event(kind, key, obj)
        return obj

    def _delete(self, key: Key, grace: int | None) -> Obj:
        obj = self.objects.get(key)
        if obj is None:
            raise _Answer(status(404, "NotFound", f'{key[0].rsplit("/", 1)[1]} "{key[2]}" not found'))
        meta = obj["metadata"]
        node = _dig(obj, "spec.nodeName")
        stuck = key[0] == "v1/pods" and node in self.dead_kubelets and grace != 0
        if meta.get("finalizers") or stuck:
            if not meta.get("deletionTimestamp"):
                seconds = 30 if grace is None else grace
                meta["deletionTimestamp"] = now_text(
                    seconds
                )  # when the grace period ends, as Kubernetes sets it
                meta["deletionGracePeriodSeconds"] = seconds
                self._store(key, obj, "MODIFIED")
            return obj
        del self.objects[key]
        meta["resourceVersion"] = self._next_rv()
        self._event("DELETED", key, obj)
        return obj

    # -- HTTP -----------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watching = request.query.get("watch", "").lower() in ("true", "1")
        self.requests.append((request.method, request.path, watching))
        self.request_times.append((time.monotonic(), request.method, request.path))
        if self.down:
            return status(503, "ServiceUnavailable", "the API server is down (test fault)")
        for i, (method, pattern, code) in enumerate(self._fail):
            if method == request.method and pattern.search(request.path):
                del self._fail[i]
                return status(code, "InjectedFault", f"injected {code}")
        for method, pattern, code, retry_after, body in self._always:
            if method == request.method and pattern.search(request.path):
                if body:
                    return web.Response(body=body, status=code, content_type="text/html")
                if code == 429:
                    return too_many_requests(retry_after or 1)
                return status(code, "InjectedFault", f"injected {code}")
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return status(401, "Unauthorized", "Unauthorized")
        m = _PATH.match(request.path)
        if m is None:
            return status(404, "NotFound", f"the server could not find {request.path}")
        prefix = (f"{m['group']}/{m['version']}" if m["group"] else "v1") + "/" + m["plural"]
        if self.rbac is not None:
            info = request_info(
                request.method,
                m["group"] or "",
                m["plural"],
                m["ns"] or "",
                m["name"] or "",
                m["sub"] or "",
                watching,
            )
            if not self.rbac.allows(info):
                return status(403, "Forbidden", self.rbac.forbidden(info))
        if prefix in self.missing:
            return status(404, "NotFound", "the server could not find the requested resource")
        try:
            return await self._route(request, prefix, m["ns"] or "", m["name"], m["sub"])
        except _Answer as a:
            return a.response
        except (ValueError, KeyError, TypeError, IndexError) as e:
            return status(400, "BadRequest", str(e))

    async def _route(
        self, request: web.Request, prefix: str, ns: str, name: str | None, sub: str | None
    ) -> web.StreamResponse:
        method = request.method
        if name is None:
            if method == "GET":
                if request.query.get("watch", "").lower() in ("true", "1"):
                    return await self._watch(request, prefix, ns)
                return self._list(request, prefix, ns)
            if method == "POST":
                return web.json_response(self._create(prefix, ns, await request.json()), status=201)
            raise _Answer(status(405, "MethodNotAllowed", method))
        key = (prefix, ns, name)
        if sub == "binding" and method == "POST":
            return self._bind(key, await request.json())
        if method == "DELETE":
            grace = request.query.get("gracePeriodSeconds")
            body = await request.json() if request.can_read_body else {}
            if grace is None and isinstance(body, dict) and body.get("gracePeriodSeconds") is not None:
                grace = body["gracePeriodSeconds"]
            wanted_uid = _dig(body, "preconditions.uid") if isinstance(body, dict) else None
            found = self.objects.get(key)
            if wanted_uid and found is not None and found["metadata"]["uid"] != wanted_uid:
                raise _Answer(
                    status(409, "Conflict", f"Precondition failed: UID in precondition: {wanted_uid}")
                )
            return web.json_response(self._delete(key, None if grace is None else int(grace)))
        current = self.objects.get(key)
        if current is None:
            raise _Answer(status(404, "NotFound", f'{prefix.rsplit("/", 1)[1]} "{name}" not found'))
        if method == "GET":
            return web.json_response(current)
        body = await request.json()
        if method == "PUT":
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise _Answer(
                    status(
                        409,
                        "Conflict",
                        "the object has been modified; apply your changes to the latest version",
                    )
                )
            new = copy.deepcopy(current) if sub == "status" else body
            if sub == "status":
                new["status"] = body.get("status", {})
            new["metadata"] = {
                **current["metadata"],
                **{k: v for k, v in (body.get("metadata") or {}).items() if sub != "status"},
            }
            return web.json_response(self._store(key, new, "MODIFIED"))
        if method == "PATCH":
            kind = request.content_type
            if kind == "application/json-patch+json":
                new = json_patch(current, body)
            else:
                sent_uid = (body.get("metadata") or {}).get("uid")
                if sent_uid and sent_uid != current["metadata"]["uid"]:
                    raise _Answer(
                        status(409, "Conflict", f"Precondition failed: UID in precondition: {sent_uid}")
                    )
                if sub == "status":
                    body = {"status": body.get("status", {})}
                sent_rv = (body.get("metadata") or {}).get("resourceVersion")
                if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                    raise _Answer(status(409, "Conflict", "the object has been modified"))
                new = merge_patch(current, body, strategic=kind == "application/strategic-merge-patch+json")
            return web.json_response(self._store(key, new, "MODIFIED"))
        raise _Answer(status(405, "MethodNotAllowed", method))

    def _matching(self, request: web.Request, prefix: str, ns: str) -> tuple[Any, Any]:
        try:
            labels = label_matcher(request.query.get("labelSelector", ""))
            fields = field_matcher(request.query.get("fieldSelector", ""))
        except ValueError as e:
            raise _Answer(status(400, "BadRequest", str(e))) from None
        return labels, fields

    def _list(self, request: web.Request, prefix: str, ns: str) -> web.Response:
        labels, fields = self._matching(request, prefix, ns)
        items = [
            o
            for (p, o_ns, _), o in sorted(self.objects.items())
            if p == prefix
            and (not ns or o_ns == ns)
            and labels(o.get("metadata", {}).get("labels") or {})
            and fields(o)
        ]
        kind = KINDS.get(prefix.rsplit("/", 1)[1], "Object") + "List"
        api_version = prefix.rsplit("/", 1)[0]
        return web.json_response(
            {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, prefix: str, ns: str) -> web.StreamResponse:
        labels, fields = self._matching(request, prefix, ns)
        watcher = _Watcher(prefix, ns, labels, fields)
        since = request.query.get("resourceVersion")
        timeout = float(request.query.get("timeoutSeconds", 3600))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)

        async def send(kind: str, obj: Obj) -> None:
            await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        backlog: list[tuple[str, Obj]] = []
        if since and since != "0":
            oldest = self.history[0][0] if self.history else self.rv
            if int(since) < oldest - 1 and int(since) < self.rv:
                gone = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": 410,
                    "reason": "Expired",
                }
                gone["message"] = f"too old resource version: {since} ({oldest})"
                await send("ERROR", gone)
                return resp
            backlog = [
                (kind, obj)
                for rv, kind, key, obj in self.history
                if rv > int(since)
                and key[0] == prefix
                and (not ns or key[1] == ns)
                and self._selected(watcher, obj)
            ]
        else:
            backlog = [
                ("ADDED", copy.deepcopy(o))
                for (p, o_ns, _), o in sorted(self.objects.items())
                if p == prefix and (not ns or o_ns == ns) and self._selected(watcher, o)
            ]
        self._watchers.append(watcher)
        try:
            for kind, obj in backlog:
                await send(kind, obj)
            lines, self.watch_lines = self.watch_lines, []
            for line in lines:
                await resp.write(line + b"\n")
            loop = asyncio.get_running_loop()
            if self.watch_lifetime is not None:
                timeout = min(timeout, self.watch_lifetime)
            if self.stopping:  # began while the server was stopping: close_watches() missed it
                timeout = 0.0
            deadline = loop.time() + timeout
            while (left := deadline - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), left)
                except TimeoutError:
                    break
                if item is None:
                    break
                await send(*item)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(watcher)
        return resp

    def close_watches(self) -> None:
        """End every open watch stream (the API server restarting); clients must re-watch."""
        for w in self._watchers:
            w.queue.put_nowait(None)

    def shut_down(self) -> None:
        """End every open watch, and any watch still starting, for good (the server stops)."""
        self.stopping = True
        self.close_watches()

    def _bind(self, key: Key, body: Obj) -> web.Response:
        pod = self.objects.get(key)
        if pod is None:
            raise _Answer(status(404, "NotFound", f'pods "{key[2]}" not found'))
        node = _dig(body, "target.name")
        if not node:
            raise _Answer(status(400, "BadRequest", "binding has no target node"))
        # kube-apiserver's BindingREST: uid precondition, then every refusal is a 409 on pods/binding
        uid = _dig(body, "metadata.uid")
        held_uid = pod["metadata"].get("uid")
        if uid and uid != held_uid:
            why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {held_uid}"
            raise _Answer(status(409, "Conflict", f'Operation cannot be fulfilled on pods "{key[2]}": {why}'))
        why = ""
        if pod["metadata"].get("deletionTimestamp"):
            why = f"pod {key[2]} is being deleted, cannot be assigned to a host"
        elif _dig(pod, "spec.nodeName"):
            why = f'pod {key[2]} is already assigned to node "{pod["spec"]["nodeName"]}"'
        elif _dig(pod, "spec.schedulingGates"):
            why = f"pod {key[2]} has non-empty .spec.schedulingGates"
        if why:
            raise _Answer(
                status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{key[2]}": {why}')
            )
        pod["spec"]["nodeName"] = node
        notes = _dig(body, "metadata.annotations") or {}
        if notes:  # setPodHostAndAnnotations merges the Binding's annotations into the pod
            pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **notes}
        self.bound_at[key] = time.time()
        conditions = [
            c for c in pod.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"
        ]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_text()})
        pod["status"]["conditions"] = conditions
        self._store(key, pod, "MODIFIED")
        return web.json_response(
            {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, status=201
        )


class _Answer(Exception):
    def __init__(self, response: web.Response) -> None:
        super().__init__(response.reason)
        self.response = response


def serve_kube(fake: FakeKube) -> AbstractAsyncContextManager[str]:
    """Run ``fake`` on 127.0.0.1 (free port); yield its base URL. Open watches end first on exit."""
    return serve_app(fake.app(), before_cleanup=fake.shut_down, shutdown_timeout=1.0)


TOKEN = "kube-test-token"


def write_kubeconfig(path: Path, url: str, token: str = TOKEN) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "bridge", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bridge"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(doc))
    return path
