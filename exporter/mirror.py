"""What a standby replica needs to keep a copy of the leader's jobs: the difference between two of the
leader's job tuples, and that difference applied to the copy. Pure.

The poller keeps a job record that did not change as the same object from one snapshot to the next
(:func:`exporter.jobsync.merge`), so the difference is found by identity, not by comparing fields: the
records new or replaced, the ids gone, and — only when the new order is not the one
:func:`~exporter.jobsync.merge` gives (held order kept, new records after, in their order) — the order
itself. Applied to a copy equal to the old tuple it gives a tuple equal to the new one, record for record
and in the same order (``tests/unit/test_mirror.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .jobsync import merge
from .model import Job

__all__ = ["JobsDelta", "apply_jobs", "jobs_delta"]


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
