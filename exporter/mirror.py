"""What a standby replica needs to keep a copy of the leader's snapshots: the difference between two of
the leader's job tuples and that difference applied to the copy (pure), and the leader's side of the
copying — :class:`MirrorFeed`: its snapshots numbered, each frame the next snapshot with its jobs as a
delta from one the copy holds (served at ``/replica/snapshot``: :mod:`exporter.server`).

The poller keeps a job record that did not change as the same object from one snapshot to the next
(:func:`exporter.jobsync.merge`), so the difference is found by identity, not by comparing fields: the
records new or replaced, the ids gone, and — only when the new order is not the one
:func:`~exporter.jobsync.merge` gives (held order kept, new records after, in their order) — the order
itself. Applied to a copy equal to the old tuple it gives a tuple equal to the new one, record for record
and in the same order (``tests/unit/test_mirror.py``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from .jobsync import merge
from .model import Job, Snapshot
from .source import SnapshotSource

__all__ = ["JobsDelta", "MirrorFeed", "MirrorFrame", "apply_frame", "apply_jobs", "jobs_delta"]


class JobsDelta(msgspec.Struct, frozen=True, kw_only=True):
    """From one job tuple to the next."""

    put: tuple[Job, ...] = ()
    """Records new or replaced (by job id), in the new tuple's order."""
    gone: tuple[int, ...] = ()
    """Job ids no longer there."""
    order: tuple[int, ...] | None = None
    """Every job id in the new order, when it is not the one :func:`apply_jobs` gives without it."""


def jobs_delta(old: Sequence[Job], new: Sequence[Job]) -> JobsDelta:
    """The :class:`JobsDelta` from ``old`` to ``new`` (each record once per job id)."""
    held = {job.job_id: job for job in old}
    put = tuple(job for job in new if held.get(job.job_id) is not job)
    new_ids = [job.job_id for job in new]
    present = set(new_ids)
    gone = tuple(job_id for job_id in held if job_id not in present)
    gone_set = set(gone)
    merged = [job_id for job_id in held if job_id not in gone_set]
    merged += [job.job_id for job in put if job.job_id not in held]
    return JobsDelta(put=put, gone=gone, order=None if merged == new_ids else tuple(new_ids))


def apply_jobs(old: Sequence[Job], delta: JobsDelta) -> tuple[Job, ...]:
    """``old`` with ``delta`` applied: the new job tuple."""
    if delta.order is None:
        return merge(old, {job.job_id: (job,) for job in delta.put}, delta.gone)
    by_id = {job.job_id: job for job in old}
    by_id.update((job.job_id, job) for job in delta.put)
    return tuple(by_id[job_id] for job_id in delta.order)


class MirrorFrame(msgspec.Struct, frozen=True, kw_only=True):
    """One of the leader's snapshots for a copy: ``snapshot`` without its jobs, and ``jobs`` as the delta
    from the leader's snapshot number ``base`` (0: from no jobs at all) to this one, number ``seq``."""

    seq: int
    base: int
    snapshot: Snapshot
    jobs: JobsDelta


def apply_frame(held: Snapshot | None, held_seq: int, frame: MirrorFrame) -> Snapshot:
    """The leader's snapshot ``frame`` stands for, from the copy ``held`` (the leader's number
    ``held_seq``; a frame from ``base`` 0 needs none). ValueError: the frame is from another base."""
    if frame.base and (held is None or frame.base != held_seq):
        raise ValueError(f"a frame from snapshot {frame.base} does not apply to the copy of {held_seq}")
    old: Sequence[Job] = held.jobs if frame.base and held is not None else ()
    return msgspec.structs.replace(frame.snapshot, jobs=apply_jobs(old, frame.jobs))


class MirrorFeed:
    """The leader's snapshots (``source``) numbered from 1 as they are asked for, the last ``keep`` of them
    held (a delta is made from one of those; from an older one the copy gets every job again)."""

    def __init__(self, source: SnapshotSource, keep: int = 8) -> None:
        self.source, self.keep = source, keep
        self._held: OrderedDict[int, Snapshot] = OrderedDict()
        self._seq = 0

    def _number(self, snap: Snapshot) -> int:
        if self._held and next(reversed(self._held.values())) is snap:
            return self._seq
        self._seq += 1
        self._held[self._seq] = snap
        while len(self._held) > self.keep:
            self._held.popitem(last=False)
        return self._seq

    async def frame_after(self, after: int, wait: float) -> MirrorFrame | None:
        """The frame of the current snapshot once it is newer than the leader's number ``after`` (0: any),
        waiting up to ``wait`` seconds for one; None: none yet (or none newer within ``wait``)."""
        snap = self.source.snapshot
        if snap is None or (after and self._held.get(after) is snap):
            try:
                snap = await asyncio.wait_for(self.source.wait_next(snap), wait)
            except TimeoutError:
                return None
        seq = self._number(snap)
        if seq == after:
            return None
        base_snap = self._held.get(after) if after else None
        base = after if base_snap is not None else 0
        delta = jobs_delta(base_snap.jobs if base_snap is not None else (), snap.jobs)
        return MirrorFrame(seq=seq, base=base, snapshot=msgspec.structs.replace(snap, jobs=()), jobs=delta)
