"""What the snapshot's readers see of the poller: the current snapshot and a way to wait for the next.

The demand service, the metrics renderer and the bridge take these protocols, not the poller, so each
can be fed recorded snapshots in tests and none can reach into the poller's other parts.
"""

from __future__ import annotations

from typing import Protocol

from .model import Snapshot
from .notify import Notifier


class SnapshotSource(Protocol):
    """The current snapshot (None before the first), and the next one."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        """The current snapshot once it is not ``after`` (waits for the next swap)."""
        ...


class PolledSource(SnapshotSource, Protocol):
    """A source a writer can ask for an early poll (the bridge after submitting: its job's placement shows
    a whole interval earlier)."""

    def poll_soon(self) -> None: ...


class LatestSnapshot:
    """The current snapshot and its successors: :meth:`put` swaps one in and wakes every
    :meth:`wait_next`. The poller publishes through one; a test feeds readers through another."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._swapped = Notifier()

    @property
    def snapshot(self) -> Snapshot | None:
        """The current snapshot (None before the first)."""
        return self._snapshot

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        """The current snapshot once it is not ``after`` (waits for the next swap)."""
        while self._snapshot is None or self._snapshot is after:
            await self._swapped.wait()
        return self._snapshot

    def put(self, snap: Snapshot) -> None:
        self._snapshot = snap
        self._swapped.notify()
