"""A list-then-watch cache of one kind of Kubernetes object (the bridge's pods, the nodes).

:meth:`Informer.run` lists, then watches from the list's resourceVersion, resuming each watch from the
last version it saw; a watch answered 410 Gone (the version was compacted away) lists again; any other
failure waits (exponential backoff with jitter, at most ``max_backoff`` s) and lists again. A watch that
ends within :data:`SHORT_WATCH` s without an event counts as a failure too (backed off, then resumed
from the same version: nothing was lost). Only ADDED/MODIFIED events are stored and DELETED removes;
other types (and objects without a key) are counted in :attr:`Informer.ignored_events` and logged.
:attr:`Informer.synced` is True only while the cache is a complete, current copy — after a list, until a
failure — so the bridge never takes a missing object for a deleted one (no cancel from a broken watch).
Every change sets :attr:`Informer.changed`; :meth:`Informer.wait_change` waits for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.backoff import Backoff
from exporter.logs import Conditions, Throttle
from exporter.notify import Notifier

from .kube import Gone, KubeError

__all__ = ["Informer", "cache_families", "cache_lines"]

log = logging.getLogger(__name__)

T = TypeVar("T")


SHORT_WATCH = 1.0
"""Seconds a watch must last, or deliver an event within, to count as healthy. A shorter, empty one is a
failure (client-go's reflector: "very short watch"): a server or proxy that closes watches at once
was answered ~270 watch requests a second before."""

WATCHED_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
"""Watch event types the cache acts on; ``ERROR`` is raised by the watch itself, anything else ignored."""


class Informer(Generic[T]):
    """``list_fn() -> (objects, resourceVersion)``, ``watch_fn(since) -> (type, object)`` events,
    ``key(object)`` the cache key (uid)."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[[], Awaitable[tuple[list[T], str]]],
        watch_fn: Callable[[str], AsyncIterator[tuple[str, T]]],
        key: Callable[[T], str],
        *,
        max_backoff: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        missing_recheck: float | None = None,
        conditions: Conditions | None = None,
    ) -> None:
        self.name = name
        self._missing_recheck = missing_recheck
        self.missing = False
        """True while the API server answers the list 404 (a custom resource whose CRD is not installed),
        when ``missing_recheck`` is set: then the list is tried again only every ``missing_recheck`` s."""
        self._list = list_fn
        self._watch = watch_fn
        self._key = key
        self._retry = Backoff(0.5, max_backoff, jitter=0.5)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock
        self.objects: dict[str, T] = {}
        self.synced = False
        self.lists = 0
        """Full lists made (the first, and one after each broken watch)."""
        self.watches = 0
        """Watch requests made."""
        self.errors = 0
        self.ignored_events = 0
        """Watch events of a type the cache does not act on, or without a key: counted, not stored."""
        self.error_kinds: Counter[str] = Counter()
        """Failures by kind: ``http_<status>``, ``unreachable``, ``malformed`` (an answer or event that is
        not JSON of the objects), ``gone`` (410), ``short_watch``, ``internal`` (an unexpected error)."""
        self.restarts = 0
        """Times the list-and-watch loop failed on an unexpected error and was started again."""
        self.listed_at: float | None = None
        """When the last list succeeded (epoch seconds)."""
        self.watched_at: float | None = None
        """When a watch last delivered an event or ended in order (epoch seconds)."""
        self.unsynced_since: float | None = None
        """Since when (epoch seconds) the cache is not a current copy after having been one; None while it
        is, or before its first list."""
        self._wall = wall
        self.conditions = conditions or Conditions(log)
        """Where a lasting failure is said once (shared with the bridge's other caches)."""
        self.changes = 0
        """Changes of :attr:`objects` or :attr:`synced` so far: a caller deriving something from the cache
        derives it again only when this moved."""
        self._changes = Notifier()
        self._throttle = Throttle(60.0)

    async def wait_change(self) -> None:
        """Until the next change (or the next loss or gain of sync)."""
        await self._changes.wait()

    def _notify(self) -> None:
        self.changes += 1
        self._changes.notify()

    @property
    def short_watches(self) -> int:
        """Watches that ended within :data:`SHORT_WATCH` s without an event (each one backed off)."""
        return self.error_kinds["short_watch"]

    @property
    def key(self) -> str:
        """The name of this cache's condition in the log and on the status page."""
        return f"cache {self.name}"

    async def run(self) -> None:
        """List and watch forever (cancel to stop); never raises. API failures are retried (backed off);
        an unexpected error (a bug, an answer no rule expects) is logged, counted in :attr:`restarts` and
        the loop started again after a backoff — never a dead task behind an empty cache."""
        try:
            while True:
                try:
                    await self._run()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.restarts += 1
                    self.error_kinds["internal"] += 1
                    self._lost()
                    self.conditions.seen(
                        self.key,
                        "internal",
                        f"failed unexpectedly ({e!r}); started again, the bridge waits until it has listed",
                        logging.ERROR,
                        exc_info=e,
                    )
                    await self._backoff(min(self.restarts, 10))
        finally:
            self.synced = False  # stopped: the cache no longer follows the API server

    def _lost(self) -> None:
        """The cache is no longer a current copy."""
        if self.synced:
            self.unsynced_since = self._wall()
        self.synced = False
        self._notify()

    async def _backoff(self, failures: int) -> None:
        """Wait after the ``failures``-th failure in a row: half to all of 0.5 s × 2^failures, at most
        ``max_backoff`` (never ~0: a tight loop against a failing server is what this prevents)."""
        await self._sleep(self._retry.delay(failures, self._rng))

    async def _run(self) -> None:
        failures = 0
        """Failures in a row (list or watch errors, short watches); back to 0 after a healthy watch."""
        while True:
            try:
                objects, version = await self._list()
                if self.missing:
                    log.info("%s: the API server has this resource now; watching it", self.name)
                    self.missing = False
                self.lists += 1
                self.objects = {self._key(o): o for o in objects}
                self.synced = True
                self.listed_at, self.unsynced_since = self._wall(), None
                self.conditions.ended(self.key, "listed again, watching")
                self._notify()
                while True:
                    began, events = self._clock(), 0
                    self.watches += 1
                    async for kind, obj in self._watch(version):
                        events += 1
                        self.watched_at = self._wall()
                        version = self._version(obj) or version
                        self._apply(kind, obj)
                    # the server ended the watch (its timeout): resume from the last version seen, which
                    # loses nothing — unless it ended at once, over and over: then back off first
                    if events or self._clock() - began >= SHORT_WATCH:
                        failures = 0
                        self.watched_at = self._wall()
                        continue
                    failures += 1
                    self.error_kinds["short_watch"] += 1
                    held = self._throttle.admit("short")
                    if held is not None:
                        log.warning(
                            "%s: the API server ended a watch after less than %g s without an event; "
                            "backing off before watching again%s",
                            self.name,
                            SHORT_WATCH,
                            Throttle.note(held, self._throttle.every),
                        )
                    await self._backoff(failures)
            except Gone:
                self.error_kinds["gone"] += 1
                log.info("%s: watch version compacted away; listing again", self.name)
                if failures:  # a server answering 410 again and again is not listed in a loop
                    await self._backoff(failures)
                failures += 1
            except KubeError as e:
                if e.status == 404 and self._missing_recheck is not None:
                    if not self.missing:
                        log.warning(
                            "%s: the API server has no such resource (%s); off, checked again every %g s",
                            self.name,
                            e,
                            self._missing_recheck,
                        )
                        self.missing = True
                        self.synced = False
                        self._notify()
                    await self._sleep(self._missing_recheck)
                    continue
                self.errors += 1
                self.error_kinds[e.kind] += 1
                failures += 1
                self.conditions.seen(
                    self.key, e.kind, f"{e}; not trusted until the next list (the bridge waits meanwhile)"
                )
                self._lost()
                await self._backoff(failures)

    def _apply(self, kind: str, obj: T) -> None:
        """One watch event into the cache: ADDED/MODIFIED store, DELETED removes, BOOKMARK only moves the
        version; any other type, or an object without a key, is counted and logged, never stored."""
        if kind == "BOOKMARK":
            return
        key = self._key(obj) if kind in WATCHED_TYPES else ""
        if not key:
            self.ignored_events += 1
            held = self._throttle.admit(f"ignored {kind}")
            if held is not None:
                log.warning(
                    "%s: ignored a watch event of type %r%s%s",
                    self.name,
                    kind[:40],
                    "" if kind in WATCHED_TYPES else " (not ADDED, MODIFIED, DELETED or BOOKMARK)",
                    " without a name or uid" if kind in WATCHED_TYPES else "",
                )
            return
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self._notify()

    @staticmethod
    def _version(obj: object) -> str:
        """The resourceVersion of a decoded object (pods, nodes and namespaces all carry ``metadata``)."""
        meta = getattr(obj, "metadata", None)
        return str(getattr(meta, "resourceVersion", "") or "")


def cache_families(caches: Iterable[Informer[Any]]) -> Iterable[Metric]:
    """Each cache's state for ``/metrics``: synced or not, when it last listed and heard from a watch,
    lists, failures by kind, unexpected restarts, ignored events."""
    synced = GaugeMetricFamily(
        "slurm_bridge_cache_synced",
        "1 while the bridge's cache of a kind of Kubernetes object is a current copy (listed, watching), "
        "0 while it is not (the bridge places and deletes nothing meanwhile); absent for a resource the API "
        "server does not have (a CRD not installed)",
        labels=["cache"],
    )
    unsynced = GaugeMetricFamily(
        "slurm_bridge_cache_unsynced_since_timestamp_seconds",
        "Since when a cache that was a current copy is not one (absent while it is)",
        labels=["cache"],
    )
    listed = GaugeMetricFamily(
        "slurm_bridge_cache_listed_timestamp_seconds",
        "When each cache last listed its objects successfully",
        labels=["cache"],
    )
    watched = GaugeMetricFamily(
        "slurm_bridge_cache_watched_timestamp_seconds",
        "When each cache's watch last delivered an event or ended in order",
        labels=["cache"],
    )
    lists = CounterMetricFamily(
        "slurm_bridge_cache_lists",
        "Full lists made by each cache (the first, and one after each break)",
        labels=["cache"],
    )
    errors = CounterMetricFamily(
        "slurm_bridge_cache_errors",
        "Failed lists and watches of each cache, by kind (http_<status>, unreachable, malformed, gone, "
        "short_watch, internal)",
        labels=["cache", "kind"],
    )
    restarts = CounterMetricFamily(
        "slurm_bridge_cache_restarts",
        "Times a cache's list-and-watch loop failed on an unexpected error and was started again",
        labels=["cache"],
    )
    ignored = CounterMetricFamily(
        "slurm_bridge_cache_ignored_events",
        "Watch events of an unknown type, or without a name, counted and not stored",
        labels=["cache"],
    )
    for c in caches:
        if not c.missing:
            synced.add_metric([c.name], 1.0 if c.synced else 0.0)
        if c.unsynced_since is not None and not c.synced:
            unsynced.add_metric([c.name], c.unsynced_since)
        if c.listed_at is not None:
            listed.add_metric([c.name], c.listed_at)
        if c.watched_at is not None:
            watched.add_metric([c.name], c.watched_at)
        lists.add_metric([c.name], c.lists)
        for kind, n in sorted(c.error_kinds.items()):
            errors.add_metric([c.name, kind], n)
        restarts.add_metric([c.name], c.restarts)
        ignored.add_metric([c.name], c.ignored_events)
    yield from (synced, unsynced, listed, watched, lists, errors, restarts, ignored)


def cache_lines(caches: Iterable[Informer[Any]], now: float) -> list[str]:
    """The status page's lines: one for the caches that are current, one for each that is not (why, since
    when), and the resources the API server does not have."""
    every = list(caches)
    current = [c.name for c in every if c.synced]
    lines = [f"bridge caches current: {len(current)} of {len(every)} ({', '.join(current) or 'none'})"]
    for c in every:
        if c.synced:
            continue
        if c.missing:
            lines.append(
                f"bridge cache {c.name}: the API server has no such resource (off, looked for again)"
            )
            continue
        since = f"for {now - c.unsynced_since:.0f} s" if c.unsynced_since is not None else "not listed yet"
        text = c.conditions.active().get(c.key, ("", 0, 0.0))[0]
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(c.error_kinds.items())) or "no error yet"
        why = f": {text}" if text else ""
        lines.append(
            f"bridge cache {c.name}: NOT CURRENT ({since}; {kinds}){why} — nothing is placed or deleted "
            "until it has listed again"
        )
    return lines
