"""Run the process's long-lived coroutines as named tasks under one supervisor.

* Every task has a name; a task that ends or fails is logged at once and stops the whole process
  (the others are cancelled) — a service with a dead poller must not look healthy.
* SIGINT/SIGTERM only set an event; shutdown is cancellation with a time limit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine, Mapping
from typing import Any

log = logging.getLogger(__name__)


async def supervise(
    tasks: Mapping[str, Coroutine[Any, Any, Any]],
    *,
    stop: asyncio.Event | None = None,
    grace: float = 5.0,
    handle_signals: bool = True,
) -> int:
    """Run ``tasks`` until one ends or ``stop`` is set (SIGINT/SIGTERM set it); return an exit code:
    0 after a requested stop, 1 if a task ended or failed on its own."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
    running = {asyncio.create_task(coro, name=name) for name, coro in tasks.items()}
    stopper = asyncio.create_task(stop.wait(), name="stop-requested")
    code = 0
    try:
        done, _ = await asyncio.wait({*running, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is stopper:
                log.info("stop requested; shutting down")
                continue
            code = 1
            if task.cancelled():
                log.error("task %s was cancelled unexpectedly", task.get_name())
            elif task.exception() is not None:
                exc = task.exception()
                log.error("task %s failed: %r", task.get_name(), exc, exc_info=exc)
            else:
                log.error("task %s ended unexpectedly", task.get_name())
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        pending = [t for t in (*running, stopper) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            _, hung = await asyncio.wait(pending, timeout=grace)
            for t in hung:
                log.error("task %s did not stop within %.1fs", t.get_name(), grace)
    return code
