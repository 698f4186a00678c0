"""Wake everyone waiting for "the next change": one :class:`Notifier` per thing that changes."""

from __future__ import annotations

import asyncio


class Notifier:
    """:meth:`wait` returns at the next :meth:`notify` after it was called; a notify wakes every waiter
    at once and is not remembered (a waiter that starts later waits for the following one). Waiters check
    their own condition in a loop around :meth:`wait`."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    def next(self) -> asyncio.Event:
        """An event the next :meth:`notify` sets: take it before looking at the state, wait on it after,
        and a change that lands in between is not missed."""
        return self._event

    def notify(self) -> None:
        woken, self._event = self._event, asyncio.Event()
        woken.set()
