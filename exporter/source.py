"""What the snapshot's readers see of the poller: the current snapshot and a way to wait for the next.

The demand service, the metrics renderer and the bridge take these protocols, not the poller, so each
can be fed recorded snapshots in tests and none can reach into the poller's other parts.
"""

from __future__ import annotations

from typing import Protocol

from .model import Snapshot


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
