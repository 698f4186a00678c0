"""Fixtures of every test: the real Slurm lab plugin (:mod:`testkit.lab_fixtures`) and a guard against
leaked tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest_plugins = ["testkit.lab_fixtures"]


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it.

    Tasks already ending (a library's own, e.g. grpc.aio's per-call tasks right after a server stop)
    get one second to finish; a task still running after that is a leak.
    """
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    if left:
        await asyncio.wait(left, timeout=1.0)
        left = [t for t in left if not t.done()]
    if left:
        for t in left:
            t.cancel()
        pytest.fail(f"test left tasks running: {[t.get_name() for t in left]}")
