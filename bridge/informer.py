"""A list-then-watch cache of one kind of Kubernetes object (the bridge's pods, the nodes).

:meth:`Informer.run` lists, then watches from the list's resourceVersion, resuming each watch from the
last version it saw; a watch answered 410 Gone (the version was compacted away) lists again; any other
failure waits (exponential backoff with full jitter, at most ``max_backoff`` s) and lists again.
:attr:`Informer.synced` is True only while the cache is a complete, current copy — after a list, until a
failure — so the bridge never takes a missing object for a deleted one (no cancel from a broken watch).
Every change sets :attr:`Informer.changed`; :meth:`Informer.wait_change` waits for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from .kube import Gone, KubeError

__all__ = ["Changes", "Informer"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Changes:
    """A level-free "something changed" signal: :meth:`wait` returns at the next :meth:`notify` after it
    was called (never for an earlier one), however many tasks wait."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def wait(self) -> None:
        event = self._event
        await event.wait()

    def notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()


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
    ) -> None:
        self.name = name
        self._list = list_fn
        self._watch = watch_fn
        self._key = key
        self._max_backoff = max_backoff
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.objects: dict[str, T] = {}
        self.synced = False
        self.lists = 0
        """Full lists made (the first, and one after each broken watch)."""
        self.errors = 0
        self._changes = Changes()

    async def wait_change(self) -> None:
        """Until the next change (or the next loss or gain of sync)."""
        await self._changes.wait()

    def _notify(self) -> None:
        self._changes.notify()

    async def run(self) -> None:
        """List and watch forever (cancel to stop); never raises on API failures."""
        try:
            await self._run()
        finally:
            self.synced = False  # stopped: the cache no longer follows the API server

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                objects, version = await self._list()
                self.lists += 1
                self.objects = {self._key(o): o for o in objects}
                self.synced = True
                failures = 0
                self._notify()
                while True:
                    async for kind, obj in self._watch(version):
                        version = self._version(obj) or version
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            self.objects.pop(self._key(obj), None)
                        else:
                            self.objects[self._key(obj)] = obj
                        self._notify()
                    # the server ended the watch (its timeout): resume from the last version seen
            except Gone:
                log.info("%s: watch version compacted away; listing again", self.name)
            except KubeError as e:
                self.errors += 1
                failures += 1
                if self.synced:
                    log.warning("%s: %s; the cache is not trusted until the next list", self.name, e)
                self.synced = False
                self._notify()
                delay = self._rng.uniform(0, min(self._max_backoff, 0.5 * 2 ** min(failures, 10)))
                await self._sleep(delay)

    @staticmethod
    def _version(obj: object) -> str:
        """The resourceVersion of a decoded object (pods, nodes and namespaces all carry ``metadata``)."""
        meta = getattr(obj, "metadata", None)
        return str(getattr(meta, "resourceVersion", "") or "")
