"""The bridge's fast path between the poller's snapshots.

A ``/jobs`` listing of 10,000 jobs takes slurmrestd about 8 s (26.05 lab), so a placeholder job that starts
just after a listing was requested is seen only one or two listings later. While the bridge awaits some of
its jobs — pending, or submitted and not listed yet — :class:`JobWatch` reads ``GET /jobs/state/`` every
``interval`` seconds (every job's id and state, nothing else: 0.25 s for 10,000 jobs) and, for each awaited
job that is no longer pending, that job's full record with ``GET /job/{id}`` (``lanes`` at a time). Those
records overlay the snapshot (:meth:`JobWatch.apply`) until a snapshot whose ``/jobs`` request was sent
after them holds the job.

Nothing is inferred from ``/jobs/state`` alone: the bridge acts only on full records slurmrestd sent. A
failed read changes nothing (counted in :attr:`JobWatch.errors`); the snapshot stays the authority.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import msgspec

from exporter.errors import SlurmError
from exporter.model import Job, Snapshot, wall_time
from exporter.notify import Notifier
from exporter.session import SlurmSession

__all__ = ["JobWatch"]

log = logging.getLogger(__name__)


class JobWatch:
    """Set :attr:`awaited` (job id → the state the bridge last saw, ``""`` for a job not listed yet) on
    every pass; :meth:`run` follows them; :meth:`apply` gives the snapshot with the fresher records."""

    def __init__(
        self,
        session: SlurmSession,
        *,
        interval: float = 1.0,
        lanes: int = 16,
        clock: Callable[[], float] = wall_time,
    ) -> None:
        self.session = session
        self.interval = interval
        self.lanes = lanes
        self._clock = clock
        self.awaited: Mapping[int, str] = {}
        self.overlay: dict[int, tuple[Job, float]] = {}
        """Job id → (its record, when the read that found it began)."""
        self.reads = 0
        """Requests made (``/jobs/state`` and ``/job/{id}``)."""
        self.errors = 0
        self._changes = Notifier()

    async def wait_change(self) -> None:
        """Until the overlay gets a new record."""
        await self._changes.wait()

    async def run(self) -> None:
        """Follow the awaited jobs forever (cancel to stop); never raises on Slurm errors."""
        while True:
            if self.awaited and self.session.api_version is not None:
                try:
                    await self.check()
                except SlurmError as e:
                    self.errors += 1
                    log.debug("bridge job watch: %s", e)
            await asyncio.sleep(self.interval)

    async def check(self) -> int:
        """One look: the number of records added to the overlay."""
        began = self._clock()
        states = await self.session.job_states()
        self.reads += 1
        moved = [
            job_id
            for job_id, seen in self.awaited.items()
            if (now := states.get(job_id)) is not None and now != seen and now != "PENDING"
        ]
        added = 0
        for start in range(0, len(moved), self.lanes):  # each batch published at once: binds start early
            batch = moved[start : start + self.lanes]
            got = await asyncio.gather(
                *(self.session.job(j, lane=i) for i, j in enumerate(batch)), return_exceptions=True
            )
            self.reads += len(batch)
            records = []
            for result in got:
                if isinstance(result, Job):
                    records.append(result)
                elif isinstance(result, SlurmError):
                    self.errors += 1
                elif isinstance(result, BaseException):
                    raise result
            for job in records:
                self.overlay[job.job_id] = (job, began)
            if records:
                added += len(records)
                self._changes.notify()
        return added

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the overlay's records in place of (or beside) its own; records older than the
        snapshot's ``/jobs`` request are dropped for good."""
        as_of = snapshot.jobs_as_of
        for job_id in [j for j, (_, at) in self.overlay.items() if at <= as_of]:
            del self.overlay[job_id]
        if not self.overlay:
            return snapshot
        fresher = {job_id: job for job_id, (job, _) in self.overlay.items()}
        jobs = [fresher.pop(j.job_id, j) for j in snapshot.jobs]
        return msgspec.structs.replace(snapshot, jobs=(*jobs, *fresher.values()))
