"""The bridge's Kubernetes I/O: kubernetes_asyncio's API client for configuration, auth, TLS and request
building; every answer is read raw (``_preload_content=False``) and decoded here into :mod:`bridge.pods`
structs, its status checked by :func:`_checked` (the client does not raise for raw answers).

Configuration is loaded the standard way (:func:`load_configuration`): in-cluster (service account) when
running in a pod, else the kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config``).

Failures are :class:`KubeError` (``status`` 0 when the API server could not be reached); a watch from a
compacted resourceVersion raises :class:`Gone` (410), after which the caller lists again.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import msgspec
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import rest
from kubernetes_asyncio.client.rest import ApiException
from prometheus_client.core import CounterMetricFamily, Metric

from .owners import Owner
from .pods import Namespace, Node, Pod, PodGroup, SchedulingGroup
from .volumes import SELECTED_NODE_ANNOTATION, Claim, PersistentVolume, StorageClass

__all__ = ["Gone", "Kube", "KubeError", "MalformedAnswer", "RetryAfterGate", "load_configuration"]

_JSON = msgspec.json.Decoder(dict[str, Any])
T = TypeVar("T")


POD_GROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
SCHEDULING_GROUPS = ("scheduling.k8s.io", "v1alpha2", "podgroups")
LEADER_WORKER_SETS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The pods that take room on a node: bound and not finished (kube-scheduler's own informer of assigned
pods uses this selector)."""
_STORED_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class KubeError(Exception):
    """A Kubernetes API call failed: ``status`` is the HTTP status (0: not reached), ``reason`` its Status
    reason (``NotFound``, ``Conflict``, ...)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def kind(self) -> str:
        return f"http_{self.status}" if self.status else "unreachable"


class MalformedAnswer(KubeError):
    """A 2xx answer (a list, a watch event) that is not the JSON of the objects asked for."""

    @property
    def kind(self) -> str:
        return "malformed"


RETRY_AFTER_STATUSES = frozenset({429, 503})
"""Statuses whose ``Retry-After`` is honoured (client-go's ``checkWait``: 429, and 5xx with the header)."""
MAX_RETRY_AFTER = 60.0
"""Seconds at most a ``Retry-After`` holds a path back (a server asking for hours is not believed)."""


def retry_after_seconds(status: int, value: str | None) -> float | None:
    """Seconds ``Retry-After: value`` asks a client to wait after a ``status`` answer (None: nothing asked);
    only delay-seconds (what kube-apiserver sends), at most :data:`MAX_RETRY_AFTER`."""
    if value is None or not (status in RETRY_AFTER_STATUSES or status >= 500):
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if seconds == seconds else None


class RetryAfterGate(rest.RESTClientObject):
    """The API client's HTTP layer with client-go's ``Retry-After`` rule, per URL path: after an answer
    asking to wait (429, 5xx with ``Retry-After``), no request for that path leaves before the time asked
    — list and watch of one resource share the path, so a throttled informer does not ask again at once.
    Wraps the client's own session (same TLS, auth and pool)."""

    def __init__(
        self,
        inner: rest.RESTClientObject,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:  # no super().__init__: the inner client's session and settings are used
        self.inner = inner
        self.pool_manager = inner.pool_manager
        self.proxy, self.proxy_headers = inner.proxy, inner.proxy_headers
        self.server_hostname = inner.server_hostname
        self._clock, self._sleep = clock, sleep
        self.not_before: dict[str, float] = {}
        """URL path → when (on ``clock``) the server allows the next request to it."""
        self.asked: Counter[str] = Counter()
        """Answers that asked to wait, by status (``429``, ``503``, ...)."""
        self.waited = 0.0
        """Seconds requests were held back, in all."""

    def wait_for(self, path: str) -> float:
        """Seconds a request for ``path`` must still wait (0: none)."""
        until = self.not_before.get(path)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self.not_before[path]
            return 0.0
        return left

    def _note(self, path: str, status: int, headers: Any) -> None:
        seconds = retry_after_seconds(status, headers.get("Retry-After") if headers is not None else None)
        if seconds is not None:
            self.asked[str(status)] += 1
            self.not_before[path] = max(self.not_before.get(path, 0.0), self._clock() + seconds)

    async def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        path = urlsplit(url).path
        if (left := self.wait_for(path)) > 0:
            self.waited += left
            await self._sleep(left)
        try:
            resp = await super().request(method, url, *args, **kwargs)
        except ApiException as e:
            self._note(path, int(e.status or 0), e.headers)
            raise
        self._note(path, int(resp.status), resp.headers)
        return resp


class Gone(KubeError):
    """410: the resourceVersion a watch started from was compacted away; list again."""


async def load_configuration(kubeconfig: Path | None = None) -> client.Configuration:
    """In-cluster configuration when running in a pod (and no ``kubeconfig`` given), else the kubeconfig
    file (``kubeconfig``, ``$KUBECONFIG`` or ``~/.kube/config``). :class:`KubeError` if neither works."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return cfg
        except config.ConfigException as e:
            raise KubeError(f"in-cluster Kubernetes configuration: {e}") from None
    # $KUBECONFIG is read now (the library reads it once, at import), and may list several files
    where = (
        str(kubeconfig)
        if kubeconfig
        else os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    )
    try:
        await config.load_kube_config(config_file=where, client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError, ValueError) as e:
        raise KubeError(f"no usable kubeconfig ({where}): {e}") from None
    return cfg


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _sent(call: Any) -> aiohttp.ClientResponse:
    """Await a raw API call: its response, or :class:`KubeError` when the API server was not reached."""
    try:
        resp: aiohttp.ClientResponse = await call
    except ApiException as e:
        raise KubeError(f"Kubernetes API: {e.status} {e.reason}", e.status or 0) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubeError(f"cannot reach the Kubernetes API: {e}") from None
    return resp


async def _checked(call: Any) -> bytes:
    """Await a raw API call; its body, or :class:`KubeError` naming the Status reason and message."""
    resp = await _sent(call)
    try:
        body = await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubeError(f"Kubernetes API answer cut short: {e}") from None
    finally:
        resp.release()
    if 200 <= resp.status < 300:
        return bytes(body)
    raise _status_error(resp.status, bytes(body))


def _status_error(status: int, body: bytes) -> KubeError:
    """The typed error of a non-2xx answer, one readable line: its Status reason and message (the start of
    the body when it is not a Status)."""
    reason, message = "", " ".join(body[:200].decode("utf-8", "replace").split())
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason, message = str(doc.get("reason", "")), str(doc.get("message", message))
    except ValueError:
        pass
    cls = Gone if status == 410 else KubeError
    return cls(f"Kubernetes API {status} {reason}: {message or 'no message'}", status, reason)


async def _listed(call: Any, cls: type[T]) -> tuple[list[T], str]:
    """A raw list call's items decoded as ``cls``, and the list's resourceVersion; :class:`MalformedAnswer`
    when the answer is not such a list."""
    body = await _checked(call)
    try:
        doc = _JSON.decode(body)
        items = [msgspec.convert(item, cls) for item in doc.get("items") or []]
        meta = doc.get("metadata") or {}
        return items, str(meta.get("resourceVersion", "") if isinstance(meta, dict) else "")
    except (msgspec.MsgspecError, AttributeError, TypeError) as e:
        raise MalformedAnswer(f"Kubernetes API list answer malformed ({e}): {body[:120]!r}") from None


async def _watched(call: Any, cls: type[T]) -> AsyncIterator[tuple[str, T]]:
    """A raw watch call's events as ``(type, object decoded as cls)``; an ERROR event raises (410: Gone)."""
    resp = await _sent(call)
    try:
        if resp.status != 200:
            raise _status_error(resp.status, bytes(await resp.read()))
        async for line in resp.content:
            if not line.strip():
                continue
            try:
                event = _JSON.decode(line)
                kind, obj = str(event.get("type", "")), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code", 0)) if isinstance(obj, dict) else 0
                    reason = str(obj.get("reason", "")) if isinstance(obj, dict) else ""
                    message = obj.get("message") if isinstance(obj, dict) else obj
                    error = Gone if code == 410 else KubeError
                    raise error(f"watch: {reason}: {str(message)[:200]}", code, reason)
                if kind in _STORED_EVENTS:
                    # an event the cache acts on must decode: a lost change is a broken watch (list again)
                    yield kind, msgspec.convert(obj, cls)
                else:  # an unknown type: handed on as an empty object, which the informer counts and drops
                    yield kind[:64], msgspec.convert({}, cls)
            except msgspec.MsgspecError as e:
                raise MalformedAnswer(f"watch: malformed event ({e}): {line[:120]!r}") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubeError(f"watch cut short: {e}") from None
    finally:
        resp.release()


class Kube:
    """The calls the bridge makes; ``api`` is an open ``kubernetes_asyncio.client.ApiClient``."""

    def __init__(self, api: client.ApiClient, *, component: str = "slurm-bridge") -> None:
        if not isinstance(api.rest_client, RetryAfterGate):
            api.rest_client = RetryAfterGate(api.rest_client)
        self.gate: RetryAfterGate = api.rest_client
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.component = component

    # -- reads ----------------------------------------------------------------------------------

    async def _list(self, method: Callable[..., Any], cls: type[T], **query: Any) -> tuple[list[T], str]:
        """One list call's objects decoded as ``cls``, and the list's resourceVersion."""
        return await _listed(method(**query, _preload_content=False), cls)

    def _watch(
        self, method: Callable[..., Any], cls: type[T], since: str, timeout: int, **query: Any
    ) -> AsyncIterator[tuple[str, T]]:
        """Changes after resourceVersion ``since`` as ``(ADDED|MODIFIED|DELETED|BOOKMARK, object)``; ends
        when the server ends the stream; :class:`Gone` when ``since`` is too old."""
        call = method(
            **query,
            watch=True,
            resource_version=since,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        return _watched(call, cls)

    async def list_pods(self, scheduler_name: str) -> tuple[list[Pod], str]:
        """Every pod naming ``scheduler_name``, in every namespace, and the list's resourceVersion."""
        selector = f"spec.schedulerName={scheduler_name}"
        return await self._list(self.core.list_pod_for_all_namespaces, Pod, field_selector=selector)

    def watch_pods(
        self, scheduler_name: str, since: str, timeout: int = 300
    ) -> AsyncIterator[tuple[str, Pod]]:
        selector = f"spec.schedulerName={scheduler_name}"
        return self._watch(
            self.core.list_pod_for_all_namespaces, Pod, since, timeout, field_selector=selector
        )

    async def list_assigned_pods(self) -> tuple[list[Pod], str]:
        """Every pod bound to a node and not finished, in every namespace, whoever scheduled it (what the
        nodes' allocatable is taken by: :data:`ASSIGNED_PODS`)."""
        return await self._list(self.core.list_pod_for_all_namespaces, Pod, field_selector=ASSIGNED_PODS)

    def watch_assigned_pods(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Pod]]:
        method = self.core.list_pod_for_all_namespaces
        return self._watch(method, Pod, since, timeout, field_selector=ASSIGNED_PODS)

    async def list_claims(self) -> tuple[list[Claim], str]:
        """Every PersistentVolumeClaim (a bridge pod's claims decide where it may run)."""
        return await self._list(self.core.list_persistent_volume_claim_for_all_namespaces, Claim)

    def watch_claims(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Claim]]:
        return self._watch(self.core.list_persistent_volume_claim_for_all_namespaces, Claim, since, timeout)

    async def list_volumes(self) -> tuple[list[PersistentVolume], str]:
        return await self._list(self.core.list_persistent_volume, PersistentVolume)

    def watch_volumes(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, PersistentVolume]]:
        return self._watch(self.core.list_persistent_volume, PersistentVolume, since, timeout)

    async def list_storage_classes(self) -> tuple[list[StorageClass], str]:
        return await self._list(self.storage.list_storage_class, StorageClass)

    def watch_storage_classes(
        self, since: str, timeout: int = 300
    ) -> AsyncIterator[tuple[str, StorageClass]]:
        return self._watch(self.storage.list_storage_class, StorageClass, since, timeout)

    async def list_nodes(self) -> tuple[list[Node], str]:
        return await self._list(self.core.list_node, Node)

    def watch_nodes(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Node]]:
        return self._watch(self.core.list_node, Node, since, timeout)

    async def list_namespaces(self) -> tuple[list[Namespace], str]:
        """Every namespace (names and labels): only with the policy's namespace selectors."""
        return await self._list(self.core.list_namespace, Namespace)

    def watch_namespaces(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Namespace]]:
        return self._watch(self.core.list_namespace, Namespace, since, timeout)

    async def list_pod_groups(self) -> tuple[list[PodGroup], str]:
        """Every coscheduling PodGroup (``scheduling.x-k8s.io/v1alpha1``), for their ``minMember``."""
        return await self._list(
            functools.partial(self.custom.list_cluster_custom_object, *POD_GROUPS), PodGroup
        )

    def watch_pod_groups(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, PodGroup]]:
        method = functools.partial(self.custom.list_cluster_custom_object, *POD_GROUPS)
        return self._watch(method, PodGroup, since, timeout)

    async def list_scheduling_groups(self) -> tuple[list[SchedulingGroup], str]:
        """Every Kubernetes PodGroup (``scheduling.k8s.io/v1alpha2``, 1.36): the gangs of
        ``spec.schedulingGroup`` pods."""
        method = functools.partial(self.custom.list_cluster_custom_object, *SCHEDULING_GROUPS)
        return await self._list(method, SchedulingGroup)

    def watch_scheduling_groups(
        self, since: str, timeout: int = 300
    ) -> AsyncIterator[tuple[str, SchedulingGroup]]:
        method = functools.partial(self.custom.list_cluster_custom_object, *SCHEDULING_GROUPS)
        return self._watch(method, SchedulingGroup, since, timeout)

    async def list_jobs(self) -> tuple[list[Owner], str]:
        """Every Job (``batch/v1``): annotations its pods inherit, its ``activeDeadlineSeconds``."""
        return await self._list(self.batch.list_job_for_all_namespaces, Owner)

    def watch_jobs(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Owner]]:
        return self._watch(self.batch.list_job_for_all_namespaces, Owner, since, timeout)

    async def list_jobsets(self) -> tuple[list[Owner], str]:
        """Every JobSet (``jobset.x-k8s.io/v1alpha2``): annotations its pods inherit."""
        return await self._list(functools.partial(self.custom.list_cluster_custom_object, *JOBSETS), Owner)

    def watch_jobsets(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Owner]]:
        method = functools.partial(self.custom.list_cluster_custom_object, *JOBSETS)
        return self._watch(method, Owner, since, timeout)

    async def list_leader_worker_sets(self) -> tuple[list[Owner], str]:
        """Every LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``): annotations its pods inherit."""
        method = functools.partial(self.custom.list_cluster_custom_object, *LEADER_WORKER_SETS)
        return await self._list(method, Owner)

    def watch_leader_worker_sets(self, since: str, timeout: int = 300) -> AsyncIterator[tuple[str, Owner]]:
        method = functools.partial(self.custom.list_cluster_custom_object, *LEADER_WORKER_SETS)
        return self._watch(method, Owner, since, timeout)

    async def pod_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into a PodGroup's status subresource (what scheduler-plugins keeps there)."""
        call = self.custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # _content_type: in its **kwargs
            *POD_GROUPS[:2],
            namespace,
            POD_GROUPS[2],
            name,
            {"status": status},
            _content_type="application/merge-patch+json",  # a custom resource has no strategic merge
            _preload_content=False,
        )
        await _checked(call)

    async def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ``coordination.k8s.io/v1`` Lease as JSON, or None if there is none."""
        try:
            body = await _checked(
                self.coordination.read_namespaced_lease(name, namespace, _preload_content=False)
            )
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        return _JSON.decode(body)

    # -- writes ----------------------------------------------------------------------------------

    async def bind(self, pod: Pod, node: str, annotations: dict[str, str] | None = None) -> None:
        """Bind ``pod`` to ``node`` (uid-checked), ``annotations`` merged into the pod in the same write (the
        API server copies a Binding's annotations: ``BindingREST.setPodHostAndAnnotations``); binding it
        again to the same node is not an error."""
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(
                name=pod.metadata.name, uid=pod.metadata.uid, annotations=annotations or None
            ),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            await _checked(
                self.core.create_namespaced_pod_binding(
                    pod.metadata.name, pod.metadata.namespace, body, _preload_content=False
                )
            )
        except KubeError as e:
            if e.status == 409 and f'"{node}"' in str(e):
                return  # already bound there: a repeated binding
            raise

    async def mark(self, pod: Pod, labels: dict[str, str], annotations: dict[str, str]) -> bool:
        """Merge ``labels`` and ``annotations`` into the pod (uid-checked: never a new pod of that name);
        False if it is already gone (404)."""
        patch = {"metadata": {"uid": pod.metadata.uid, "labels": labels, "annotations": annotations}}
        try:
            await _checked(
                self.core.patch_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, patch, _preload_content=False
                )
            )
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def set_node_taints(self, node: str, version: str, taints: list[dict[str, str]]) -> None:
        """Replace a node's taints, conditional on its resourceVersion ``version`` (409 when it moved: the
        next pass reads it again and decides afresh)."""
        patch = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
        await _checked(self.core.patch_node(node, patch, _preload_content=False))

    async def select_node(self, namespace: str, claim: str, uid: str, node: str) -> None:
        """Name ``node`` on a ``WaitForFirstConsumer`` claim (``volume.kubernetes.io/selected-node``), as
        kube-scheduler does before binding: the provisioner then makes its volume there (uid-checked)."""
        patch = {"metadata": {"uid": uid, "annotations": {SELECTED_NODE_ANNOTATION: node}}}
        await _checked(
            self.core.patch_namespaced_persistent_volume_claim(
                claim, namespace, patch, _preload_content=False
            )
        )

    async def prebind_volume(self, volume: str, version: str, namespace: str, claim: str, uid: str) -> None:
        """Pre-bind an available volume to a claim (its ``claimRef``), as kube-scheduler does for a
        ``WaitForFirstConsumer`` claim: the PersistentVolume controller completes the binding. Refused
        (409) when the volume changed since ``version`` (the resourceVersion it was read available at)."""
        ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace, "name": claim}
        patch = {"metadata": {"resourceVersion": version}, "spec": {"claimRef": {**ref, "uid": uid}}}
        await _checked(self.core.patch_persistent_volume(volume, patch, _preload_content=False))

    async def unschedulable(self, pod: Pod, reason: str, message: str) -> None:
        """Set the pod's ``PodScheduled`` condition to False with ``reason`` and ``message``."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now(),
        }
        await _checked(
            self.core.patch_namespaced_pod_status(
                pod.metadata.name,
                pod.metadata.namespace,
                {"status": {"conditions": [condition]}},
                _preload_content=False,
            )
        )

    async def event(self, pod: Pod, reason: str, message: str, *, warning: bool = False) -> None:
        """A core/v1 Event about ``pod`` from this component."""
        now = datetime.now(UTC)
        meta = pod.metadata
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta.name}.", namespace=meta.namespace),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", name=meta.name, namespace=meta.namespace, uid=meta.uid
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=self.component),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        await _checked(
            self.core.create_namespaced_event(pod.metadata.namespace, body, _preload_content=False)
        )

    async def create_lease(self, namespace: str, body: dict[str, Any]) -> None:
        """Create a Lease (409 AlreadyExists when another candidate was first)."""
        call = self.coordination.create_namespaced_lease(namespace, body, _preload_content=False)  # type: ignore[arg-type]  # a dict is sent as it is
        await _checked(call)

    async def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Replace a Lease; ``body`` carries the resourceVersion read (409 Conflict if it changed since)."""
        call = self.coordination.replace_namespaced_lease(name, namespace, body, _preload_content=False)  # type: ignore[arg-type]  # a dict is sent as it is
        await _checked(call)

    async def delete_pod(self, pod: Pod) -> bool:
        """Delete ``pod`` (only that uid); False if it is already gone."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.metadata.uid))
        try:
            await _checked(
                self.core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, body=options, _preload_content=False
                )
            )
        except KubeError as e:
            if e.status in (404, 409):
                return False
            raise
        return True


def retry_after_families(gate: RetryAfterGate) -> list[Metric]:
    """How often the API server asked the bridge to wait (``Retry-After``) and how long it did."""
    asked = CounterMetricFamily(
        "slurm_bridge_kube_retry_after",
        "Kubernetes API answers that asked the bridge to wait before asking that path again (Retry-After), "
        "by status",
        labels=["status"],
    )
    for code, n in sorted(gate.asked.items()):
        asked.add_metric([code], n)
    waited = CounterMetricFamily(
        "slurm_bridge_kube_retry_after_wait_seconds",
        "Seconds the bridge's Kubernetes API requests were held back as the server's Retry-After asked",
    )
    waited.add_metric([], gate.waited)
    return [asked, waited]
