"""The runtime of ``serve``: named runnables under one supervisor (controller-runtime's Manager is the model).

* A :class:`Runnable` has a name, a start/stop contract — :meth:`~Runnable.start` claims what it needs
  (binds a port, loads a certificate) and raises :class:`~exporter.errors.ConfigError` when it cannot;
  :meth:`~Runnable.run` works until cancelled; :meth:`~Runnable.stop` releases what start claimed — and
  contributes its own metric families and status-page lines.
* Runnables marked :attr:`~Runnable.needs_leader` (the writers: the bridge) run only while this replica
  holds the lease; every other runnable runs on every replica.
* Every long-lived coroutine is a named task; one that ends or fails is logged at once and stops the whole
  process (the others are cancelled) — a service with a dead poller must not look healthy.
* SIGINT/SIGTERM only set an event; shutdown is cancellation with a time limit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import Metric

from exporter.model import Snapshot

log = logging.getLogger(__name__)


class Runnable:
    """One component of the process. Subclasses override :meth:`run` and whatever else they have."""

    name: str = "runnable"
    needs_leader: bool = False
    """Writes: run only on the lease's holder."""

    async def start(self) -> None:
        """Claim what :meth:`run` needs before anything claims to serve; ConfigError if it cannot."""

    async def run(self) -> None:
        """Work until cancelled (returning or raising stops the process)."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Release what :meth:`start` claimed (called once, after :meth:`run` ended)."""

    def snapshot_families(self, snap: Snapshot) -> Iterable[Metric]:
        """Families computed from each snapshot: rendered once per snapshot with the Slurm families."""
        return ()

    def health_families(self, now: float) -> Iterable[Metric]:
        """Families rendered on every scrape (``now``: epoch seconds)."""
        return ()

    def status_lines(self, now: float) -> Iterable[str]:
        """Lines for the status page."""
        return ()

    def json_pages(self) -> Mapping[str, Callable[[float], object]]:
        """More pages of the HTTP server: path → what to answer as JSON at a time (epoch seconds)."""
        return {}


class Elector(Protocol):
    """Leader election: :meth:`run` calls ``lead`` while this replica holds the lease and cancels it when
    the lease is lost (:class:`bridge.lease.LeaderElector`)."""

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None: ...

    def families(self) -> Iterable[Metric]: ...

    def status_lines(self) -> Iterable[str]: ...


class Manager:
    """Starts the runnables, runs them as named tasks (the writers under the elector), stops them."""

    def __init__(
        self, runnables: Sequence[Runnable] = (), *, elector: Elector | None = None, grace: float = 5.0
    ) -> None:
        self.runnables: list[Runnable] = []
        self.elector = elector
        self.grace = grace
        for r in runnables:
            self.add(r)

    def add(self, runnable: Runnable) -> None:
        """Add a runnable (before :meth:`start`); names are unique."""
        assert runnable.name not in {r.name for r in self.runnables}, f"{runnable.name} added twice"
        self.runnables.append(runnable)

    def snapshot_families(self, snap: Snapshot) -> Iterable[Metric]:
        for r in self.runnables:
            yield from r.snapshot_families(snap)

    def health_families(self, now: float) -> Iterable[Metric]:
        for r in self.runnables:
            yield from r.health_families(now)
        if self.elector is not None:
            yield from self.elector.families()

    def json_pages(self) -> dict[str, Callable[[float], object]]:
        pages: dict[str, Callable[[float], object]] = {}
        for r in self.runnables:
            pages.update(r.json_pages())
        return pages

    def status_lines(self, now: float) -> Iterable[str]:
        if self.elector is not None:
            yield from self.elector.status_lines()
        for r in self.runnables:
            yield from r.status_lines(now)

    async def start(self) -> None:
        """Start every runnable in order; when one cannot start, stop those started and re-raise."""
        started: list[Runnable] = []
        try:
            for r in self.runnables:
                await r.start()
                started.append(r)
        except BaseException:
            for r in reversed(started):
                await _stop(r)
            raise

    async def run(self, *, stop: asyncio.Event | None = None, handle_signals: bool = True) -> int:
        """Run the started runnables until one ends or ``stop`` is set, then stop them all (in reverse
        order); the exit code of :func:`supervise`."""
        tasks: dict[str, Coroutine[Any, Any, Any]] = {}
        leaders = [r for r in self.runnables if r.needs_leader]
        for r in self.runnables:
            if not r.needs_leader or self.elector is None:
                tasks[r.name] = r.run()
        if leaders and self.elector is not None:
            tasks["leader-election"] = self.elector.run(lambda: _together(leaders))
        try:
            return await supervise(tasks, stop=stop, grace=self.grace, handle_signals=handle_signals)
        finally:
            for r in reversed(self.runnables):
                await _stop(r)


async def _together(runnables: Sequence[Runnable]) -> None:
    """The leader's writers, each a named task; the first to end or fail ends the lead (then re-raised)."""
    tasks = [asyncio.create_task(r.run(), name=r.name) for r in runnables]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stop(r: Runnable) -> None:
    try:
        await r.stop()
    except Exception:
        log.exception("stopping %s failed", r.name)


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
