"""Test harness for autoscaling against the real Slurm lab (see ``tests/test_autoscale_live.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL = 0.2
"""Seconds between two looks at a condition."""


async def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """Call ``check`` until it returns something truthy (returned); AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(POLL)
