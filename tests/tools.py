"""Small helpers shared by several test files."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from exporter.model import Snapshot


class SnapshotFeed:
    """A snapshot source like :class:`exporter.poller.Poller`: ``put`` swaps in the next snapshot."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._changed = asyncio.Event()

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        while self._snapshot is None or self._snapshot is after:
            await self._changed.wait()
        return self._snapshot

    def put(self, snap: Snapshot) -> None:
        self._snapshot = snap
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def promtool_path() -> str:
    """Path of promtool; a skip without it, a failure when CI requires the real tools."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("SLURM_KEDA_REQUIRE_LAB") == "1":
            pytest.fail("promtool not installed (Debian package 'prometheus') but SLURM_KEDA_REQUIRE_LAB=1")
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    return path
