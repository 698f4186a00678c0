"""A standby replica's copy of the leader's snapshots: it long-polls the leader's ``/replica/snapshot``
(:class:`exporter.mirror.MirrorFeed`), applies each frame to the copy it holds
(:func:`exporter.mirror.apply_frame`) and hands the result to its poller (:meth:`Poller.adopt`), which
serves it and — while the copy is fresh (:meth:`ReplicaFollower.fresh`) — asks slurmrestd nothing. So a
second replica costs slurmrestd nothing while the leader answers; when the leader cannot be reached the
standby polls again itself, from the copy it holds; when it takes over, its poller starts from that copy.

Where the leader is comes from outside (the bridge's Lease: :data:`bridge.lease.REPLICA_URL_ANNOTATION`),
as a callable; "" means no other replica leads (this one does, or none yet): nothing is copied then.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import aiohttp
import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .backoff import Backoff
from .families import labelled
from .logs import Conditions
from .mirror import MirrorFrame, apply_frame
from .model import Snapshot

log = logging.getLogger(__name__)

__all__ = ["FollowerOptions", "ReplicaFollower", "read_basic_auth"]


class Adopter(Protocol):
    """What the follower hands each copied snapshot to (the standby's poller)."""

    def adopt(self, snap: Snapshot) -> bool: ...


class FollowerOptions(msgspec.Struct, frozen=True, kw_only=True):
    wait: float = 30.0
    """Seconds one long poll may wait for the leader's next snapshot (the leader caps it at 60)."""
    fresh_for: float = 45.0
    """Seconds after the leader's last answer during which the copy counts as fresh (the poller does not
    poll); beyond ``wait``: a quiet leader answers 204 every ``wait`` seconds."""
    retry: float = 1.0
    """First pause after a failed request (doubling up to 30 s) or while no leader is named."""
    timeout_margin: float = 10.0
    """Seconds beyond ``wait`` a request may take before it counts as failed."""
    start_grace: float = 5.0
    """Seconds after the start during which a standby waits for its first copy instead of polling
    slurmrestd itself (a failed request ends the wait): a replica started beside a live leader never
    reads every job from slurmrestd."""


def read_basic_auth(path: Path) -> str:
    """``user:password`` on the first line of ``path`` (a mounted Secret) → the ``Authorization`` header's
    value. ValueError when it is not."""
    lines = path.read_text().splitlines()
    line = lines[0] if lines else ""
    user, sep, password = line.partition(":")
    if not sep or not user:
        raise ValueError(f"{path}: expected 'user:password' on its first line")
    return aiohttp.encode_basic_auth(user, password)


class ReplicaFollower:
    """Keeps ``adopter`` supplied with the leader's snapshots while ``leader_url()`` names one."""

    def __init__(
        self,
        adopter: Adopter,
        leader_url: Callable[[], str],
        options: FollowerOptions | None = None,
        *,
        authorization: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adopter = adopter
        self.leader_url = leader_url
        self.options = options or FollowerOptions()
        self._headers = {"Authorization": authorization} if authorization else {}
        """Never logged (the basic auth's password)."""
        self.ssl_context = ssl_context
        self._clock = clock
        self.held: Snapshot | None = None
        self.seq = 0
        """The leader's number of the snapshot held (0: none)."""
        self.heard_at: float | None = None
        """When the leader last answered (monotonic seconds)."""
        self.frames = 0
        self.failures: dict[str, int] = {}
        self.conditions = Conditions(log)
        self._copying_from = ""
        self._started_at = clock()
        """From now on a standby waits ``start_grace`` for its first copy: the poller's task may start
        before :meth:`run` (serve starts the poller first)."""

    def fresh(self) -> bool:
        """The copy is the current leader's current state: another replica leads, this one copies from it,
        and it answered within ``fresh_for`` seconds — or the first copy is still awaited (``start_grace``,
        no request failed yet)."""
        now = self._clock()
        if self.held is None:
            return not self.failures and now - self._started_at < self.options.start_grace
        url = self.leader_url()
        return (
            bool(url)
            and url == self._copying_from
            and self.heard_at is not None
            and now - self.heard_at < self.options.fresh_for
        )

    async def run(self) -> None:
        """Copy forever; cancel to stop."""
        opts = self.options
        backoff, retries, rng = Backoff(opts.retry, 30.0, jitter=0.2), 0, random.Random()
        timeout = aiohttp.ClientTimeout(total=opts.wait + opts.timeout_margin)
        connector = aiohttp.TCPConnector(ssl=self.ssl_context if self.ssl_context is not None else True)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self._headers) as http:
            while True:
                url = self.leader_url()
                if url != self._copying_from:
                    self._start_from(url)
                if not url:
                    await asyncio.sleep(opts.retry)
                    continue
                try:
                    frame = await self._next(http, url)
                except (aiohttp.ClientError, TimeoutError, msgspec.ValidationError, msgspec.DecodeError) as e:
                    self._failed(url, e)
                    await asyncio.sleep(backoff.delay(retries, rng))
                    retries += 1
                    continue
                retries = 0
                self.heard_at = self._clock()
                self.conditions.ended("replica copy", "the leader answers again")
                if frame is not None:
                    self._apply(frame)

    def _start_from(self, url: str) -> None:
        """Another leader (or none): its snapshot numbers are not the old one's — start from nothing."""
        if url:
            log.info("copying the leader's snapshots from %s", url)
        self._copying_from, self.seq, self.heard_at = url, 0, None

    async def _next(self, http: aiohttp.ClientSession, url: str) -> MirrorFrame | None:
        params = {"after": str(self.seq), "wait": f"{self.options.wait:g}"}
        async with http.get(f"{url.rstrip('/')}/replica/snapshot", params=params) as r:
            if r.status == 204:
                return None
            if r.status != 200:
                raise aiohttp.ClientResponseError(
                    r.request_info, r.history, status=r.status, message=r.reason or ""
                )
            return msgspec.msgpack.decode(await r.read(), type=MirrorFrame)

    def _apply(self, frame: MirrorFrame) -> None:
        try:
            snap = apply_frame(self.held, self.seq, frame)
        except ValueError as e:  # a frame from a base this copy does not hold: ask for the whole again
            log.warning("replica copy: %s; asking for the whole snapshot", e)
            self.seq = 0
            return
        self.held, self.seq = snap, frame.seq
        self.frames += 1
        self.adopter.adopt(snap)

    def _failed(self, url: str, e: BaseException) -> None:
        kind = _failure_kind(e)
        self.failures[kind] = self.failures.get(kind, 0) + 1
        self.conditions.seen(
            "replica copy",
            kind,
            f"cannot copy the leader's snapshots from {url}: {e or type(e).__name__}; this replica polls "
            "slurmrestd itself once its copy is older than "
            f"{self.options.fresh_for:.0f} s",
        )

    def families(self) -> list[Metric]:
        fresh = GaugeMetricFamily(
            "slurm_exporter_replica_copy_fresh",
            "1 while this standby serves a fresh copy of the leader's snapshots (and polls no slurmrestd)",
        )
        fresh.add_metric([], 1.0 if self.fresh() else 0.0)
        frames = CounterMetricFamily(
            "slurm_exporter_replica_copy_frames", "Snapshots this standby copied from the leader"
        )
        frames.add_metric([], float(self.frames))
        failures = labelled(
            CounterMetricFamily,
            "slurm_exporter_replica_copy_failures",
            "Failed requests for the leader's snapshots by kind "
            "(unreachable, timeout, http_<status>, bad_frame)",
            ["kind"],
            {(kind,): n for kind, n in self.failures.items()},
        )
        return [fresh, frames, failures]

    def status_line(self) -> str:
        if not self._copying_from:
            return "replica copy: none (this replica leads, or no leader names its URL)"
        age = "never" if self.heard_at is None else f"{self._clock() - self.heard_at:.0f} s ago"
        state = "fresh: not polling slurmrestd" if self.fresh() else "STALE: polling slurmrestd itself"
        return (
            f"replica copy from {self._copying_from}: snapshot {self.seq}, the leader last answered {age} "
            f"({state})"
        )


def _failure_kind(e: BaseException) -> str:
    """The ``kind`` label of a failed request for the leader's snapshots."""
    if isinstance(e, aiohttp.ClientResponseError):
        return f"http_{e.status}"
    if isinstance(e, TimeoutError):
        return "timeout"
    if isinstance(e, msgspec.MsgspecError):
        return "bad_frame"
    return "unreachable"  # refused, reset, DNS: the vocabulary of exporter.errors.TransportError
