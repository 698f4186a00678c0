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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from exporter.backoff import Backoff
from exporter.logs import Throttle
from exporter.notify import Notifier

from .kube import Gone, KubeError

__all__ = ["Informer"]

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
        missing_recheck: float | None = None,
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
        self.short_watches = 0
        """Watches that ended within :data:`SHORT_WATCH` s without an event (each one backed off)."""
        self.ignored_events = 0
        """Watch events of a type the cache does not act on, or without a key: counted, not stored."""
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

    async def run(self) -> None:
        """List and watch forever (cancel to stop); never raises on API failures."""
        try:
            await self._run()
        finally:
            self.synced = False  # stopped: the cache no longer follows the API server

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
                self._notify()
                while True:
                    began, events = self._clock(), 0
                    self.watches += 1
                    async for kind, obj in self._watch(version):
                        events += 1
                        version = self._version(obj) or version
                        self._apply(kind, obj)
                    # the server ended the watch (its timeout): resume from the last version seen, which
                    # loses nothing — unless it ended at once, over and over: then back off first
                    if events or self._clock() - began >= SHORT_WATCH:
                        failures = 0
                        continue
                    failures += 1
                    self.short_watches += 1
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
                failures += 1
                if self.synced:
                    log.warning("%s: %s; the cache is not trusted until the next list", self.name, e)
                self.synced = False
                self._notify()
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
