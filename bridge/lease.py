"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it, so that of
two or more bridge replicas only one writes to Slurm and Kubernetes; the others keep serving metrics and the
KEDA scaler, and one of them takes over when the leader dies.

* **Acquire**: read the Lease; take it (an update carrying the resourceVersion read, so two candidates
  never both win) when it has no holder, is ours, or its record — holder and renewTime — has not changed
  for ``duration`` seconds *as measured on this process's own monotonic clock* since we first saw it
  (clock skew between machines never shortens a lease). A new candidate therefore waits a full
  ``duration`` before taking over a dead leader's Lease.
* **Renew** every ``retry_period`` seconds. A leader that cannot renew within ``renew_deadline`` (shorter
  than ``duration``), or finds another holder, stops leading at once: the work it runs is cancelled before
  any follower may take the Lease.
* **Release** on shutdown: the holder is cleared, so a follower takes over at its next try instead of
  after ``duration``.

Durations are in seconds. All times written are RFC 3339 MicroTime (UTC).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.logs import Conditions
from exporter.model import wall_time

from .kube import Kube, KubeError

__all__ = ["REPLICA_URL_ANNOTATION", "LeaderElector", "LeaseOptions", "default_identity"]

REPLICA_URL_ANNOTATION = "slurm-keda.io/replica-url"
"""The Lease's annotation naming where its holder serves its snapshots to the standbys
(``/replica/snapshot``); written with every acquisition and renewal."""

log = logging.getLogger(__name__)


def default_identity() -> str:
    """``$POD_NAME`` (the downward API) or the host name, plus the process id."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True)
class LeaseOptions:
    name: str
    namespace: str
    identity: str
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    """Clear the holder when stopped (off: a stop looks like a crash to the followers — tests)."""
    advertise: str = ""
    """This replica's HTTP base URL (``http(s)://host:port``): written to the Lease while it leads
    (:data:`REPLICA_URL_ANNOTATION`), where the standbys find the leader to copy its snapshots from."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ValueError("lease: need 0 < retry period < renew deadline < duration")


def _micro(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


Outcome = Literal["ours", "held", "failed"]


class LeaderElector:
    """:meth:`run` runs ``lead()`` only while this process holds the Lease (restarting it after each
    new acquisition); :attr:`leading` says whether it does now."""

    def __init__(
        self,
        kube: Kube,
        options: LeaseOptions,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = wall_time,
    ) -> None:
        self.kube = kube
        self.options = options
        self._clock = clock
        self._wall = wall
        self.leading = False
        self.acquisitions = 0
        """Times this process took the Lease."""
        self.holder: str = ""
        """The holder last seen (this process's identity while it leads)."""
        self.leader_url: str = ""
        """Where another replica that holds the Lease now serves its snapshots (its
        :data:`REPLICA_URL_ANNOTATION`); "" while this replica leads, nobody holds it or the holder named
        none."""
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self.errors: Counter[tuple[str, str]] = Counter()
        """Failed reads and writes of the Lease by (operation, error kind); a lost race (409) is not one."""
        self.conditions = Conditions(log)
        self.problem = ""
        """Why the last attempt could not read or write the Lease ("" when it could)."""

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Forever: wait to lead, run ``lead()`` while leading, stop it when the Lease is lost. Cancel to
        stop (the Lease is released). ``lead()`` ending or failing on its own ends this too."""
        while True:
            await self._acquire()
            work = asyncio.ensure_future(lead())
            try:
                await self._renew_while(work)
            finally:
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                if self.leading:
                    self.leading = False
                    if self.options.release_on_cancel:
                        await self._release()
            if work.done() and not work.cancelled():
                work.result()  # lead() ended by itself: its exception (or an unexpected end) goes up
                raise RuntimeError("the bridge stopped while leading")

    async def _acquire(self) -> None:
        while True:
            if await self._try() == "ours":
                self.leading = True
                self.acquisitions += 1
                log.info("bridge: leading (Lease %s/%s)", self.options.namespace, self.options.name)
                return
            await asyncio.sleep(self.options.retry_period)

    async def _renew_while(self, work: asyncio.Future[None]) -> None:
        o = self.options
        renewed = self._clock()
        while True:
            await asyncio.wait([work], timeout=o.retry_period)
            if work.done():
                return
            left = o.renew_deadline - (self._clock() - renewed)
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation (poller.py)
                async with asyncio.timeout(max(0.1, left)):
                    outcome = await self._try()
            except TimeoutError:
                outcome = "failed"
            if outcome == "ours":
                renewed = self._clock()
            elif outcome == "held" or self._clock() - renewed >= o.renew_deadline:
                log.warning("bridge: lost the Lease (%s); no longer writing", self.holder or "not renewed")
                self.leading = False
                return

    async def _try(self) -> Outcome:
        """One attempt to take or renew the Lease."""
        o = self.options
        try:
            lease = await self.kube.read_lease(o.namespace, o.name)
        except KubeError as e:
            return self._failed("read", e)
        now = self._wall()
        spec: dict[str, Any] = (lease or {}).get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        version = str(((lease or {}).get("metadata") or {}).get("resourceVersion", ""))
        record = (holder, str(spec.get("renewTime") or ""), str(spec.get("leaseDurationSeconds") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or o.duration)
        if holder and holder != o.identity and self._clock() < self._observed_at + duration:
            annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
            self.leader_url = str(annotations.get(REPLICA_URL_ANNOTATION) or "")
            self._ok()
            return "held"
        self.leader_url = ""
        mine = holder == o.identity
        metadata: dict[str, Any] = {"name": o.name, "namespace": o.namespace}
        if o.advertise:
            metadata["annotations"] = {REPLICA_URL_ANNOTATION: o.advertise}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": o.identity,
                "leaseDurationSeconds": math.ceil(o.duration),
                "acquireTime": spec.get("acquireTime") if mine else _micro(now),
                "renewTime": _micro(now),
                "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine or not holder else 1),
            },
        }
        try:
            if lease is None:
                await self.kube.create_lease(o.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = version  # type: ignore[index]
                await self.kube.replace_lease(o.namespace, o.name, body)
        except KubeError as e:
            if e.status == 409:  # another candidate wrote first (or our read was stale): no fault
                log.debug("lease write lost a race: %s", e)
                return "failed" if mine else "held"
            return self._failed("write", e)
        self.holder = o.identity
        self._ok()
        return "ours"

    def _failed(self, operation: str, e: KubeError) -> Outcome:
        """Count a failed read or write of the Lease; say it once per cause (a Role that does not name this
        Lease: 403 on every try, forever — the bridge never leads)."""
        o = self.options
        self.errors[(operation, e.kind)] += 1
        advice = ""
        if e.status in (401, 403):
            advice = (
                f" — the service account may not {'get' if operation == 'read' else 'update'} Lease "
                f"{o.namespace}/{o.name}: the Role must name it (the shipped manifests name "
                "slurm-keda-bridge-<instance> from the slurm-keda-instance ConfigMap: set the instance "
                "there, deploy/README.md)"
            )
        self.problem = f"cannot {operation} the Lease: {e}{advice}"
        self.conditions.seen(
            f"bridge Lease {o.namespace}/{o.name}",
            f"{operation} {e.kind}",
            f"{self.problem}; this replica does not lead (the bridge places no pod here) until it can",
            logging.ERROR if e.status in (401, 403) else logging.WARNING,
        )
        return "failed"

    def _ok(self) -> None:
        o = self.options
        self.problem = ""
        self.conditions.ended(f"bridge Lease {o.namespace}/{o.name}", "read and written again")

    def status_lines(self) -> list[str]:
        """The status page's line: leading, who holds the Lease, or why it cannot be taken."""
        o = self.options
        where = f"bridge Lease {o.namespace}/{o.name}"
        if self.problem:
            return [f"{where}: CANNOT BE TAKEN — {self.problem}"]
        if self.leading:
            return [f"{where}: held by this replica ({o.identity}), which runs the bridge"]
        return [f"{where}: held by {self.holder or 'nobody yet'}; this replica is a standby"]

    async def _release(self) -> None:
        """Clear the holder so a follower need not wait out the duration (best effort, 2 s)."""
        o = self.options
        with contextlib.suppress(KubeError, TimeoutError):
            async with asyncio.timeout(2.0):
                lease = await self.kube.read_lease(o.namespace, o.name)
                spec = (lease or {}).get("spec") or {}
                if lease is None or spec.get("holderIdentity") != o.identity:
                    return
                lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
                await self.kube.replace_lease(o.namespace, o.name, lease)
                log.info("bridge: released the Lease")

    def families(self) -> Iterable[Metric]:
        leader = GaugeMetricFamily(
            "slurm_bridge_leader", "1 while this replica holds the bridge's Lease and writes, else 0"
        )
        leader.add_metric([], 1.0 if self.leading else 0.0)
        yield leader
        taken = CounterMetricFamily("slurm_bridge_leader_acquisitions", "Times this replica took the Lease")
        taken.add_metric([], self.acquisitions)
        yield taken
        errors = CounterMetricFamily(
            "slurm_bridge_lease_errors",
            "Failed reads and writes of the bridge's Lease, by operation and error kind (http_403: the Role "
            "does not allow this Lease; the replica cannot lead)",
            labels=["operation", "kind"],
        )
        for operation in ("read", "write"):
            errors.add_metric([operation, "http_403"], self.errors[(operation, "http_403")])
        for (operation, kind), n in sorted(self.errors.items()):
            if kind != "http_403":
                errors.add_metric([operation, kind], n)
        yield errors
