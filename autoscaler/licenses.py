"""Cluster licenses handed out in Slurm's scheduling order. Pure, no I/O.

Slurm starts a job only when every license it asks for (``sbatch -L matlab:2,fluent``) is free; the
others pend with reason ``Licenses`` and need no node. slurmctld's scheduler takes the pending jobs by
priority (``sort_job_queue2``: priority descending, submit time, job id) and each job it starts takes its
licenses: four whole-node jobs sharing two licenses start two and resume two nodes.

:func:`held_back` does the same over a snapshot: it hands out what ``/licenses`` says is free (its
``Free``: total less used and reserved, a remote license's deficit included) to the pending jobs in that
order, and names the license that held each fresh job back. Per request item (``a:2,b`` is two items, both
needed) the first alternative (``a|b``) with enough free is taken, as Slurm's ``license_job_test`` does. A
license the snapshot does not list is not held against a job. What it does not model: partition priority
tiers before priority, and an array record's tasks beyond the first that fit (its tasks all count when
one fits: more nodes, never fewer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from exporter.model import Job, License

__all__ = ["Taker", "held_back", "parse_request"]

Request = tuple[tuple[tuple[str, int], ...], ...]
"""A license request: its items (all needed), each a tuple of alternatives ``(name, count)``."""


class Taker(Enum):
    """How a pending job takes part in the hand-out (:func:`held_back`)."""

    NONE = "none"
    """Takes nothing: barred for another reason (held, a dependency, a limit ...)."""
    FRESH = "fresh"
    """Not judged by slurmctld yet: takes what it asks for, or is held back."""
    JUDGED = "judged"
    """Slurm's reason stands (``Priority``, ``Resources``, ``Licenses`` ...): it takes what it asks for
    when it is free — it is ahead of the jobs after it — and is never held back by the model."""


def parse_request(text: str) -> Request:
    """``matlab:2,fluent@db|ansys:1`` → ``((("matlab", 2),), (("fluent@db", 1), ("ansys", 1)))``; a
    count that is not a number counts 1 (Slurm refuses such a job at submission)."""
    items = []
    for item in text.split(","):
        options = []
        for option in item.split("|"):
            name, _, count = option.strip().partition(":")
            if not name:
                continue
            try:
                wanted = int(count) if count else 1
            except ValueError:
                wanted = 1
            options.append((name, max(wanted, 0)))
        if options:
            items.append(tuple(options))
    return tuple(items)


def _order(job: Job) -> tuple[int, float, int]:
    """Slurm's scheduling order, as :func:`autoscaler.demand.queue.rank` (a layer above) gives it."""
    return (-job.priority, job.submit_time or 0.0, job.array_job_id or job.job_id)


def held_back(
    jobs: Iterable[Job], licenses: Iterable[License], taker: Callable[[Job], Taker]
) -> dict[int, str]:
    """Job id → the license that holds it back, for the fresh pending jobs among ``jobs`` whose licenses
    are not free once the jobs ahead of them (Slurm's order) took theirs. ``taker`` says how each pending
    job with licenses takes part; running jobs hold theirs already (``/licenses``' ``used``)."""
    free: dict[str, int] = {lic.name: max(lic.free, 0) for lic in licenses}
    if not free:
        return {}
    wanting = [j for j in jobs if j.licenses and j.state == "PENDING"]
    out: dict[int, str] = {}
    requests: dict[str, Request] = {}
    left = sum(free.values())
    for job in sorted(wanting, key=_order):
        request = requests.get(job.licenses)
        if request is None:
            request = requests[job.licenses] = parse_request(job.licenses)
        if left <= 0:  # all taken: a fresh job asking for a listed license is held back by it
            first = next((name for options in request for name, n in options if n and name in free), None)
            if first is not None and taker(job) is Taker.FRESH:
                out[job.job_id] = first
            continue
        how = taker(job)
        if how is Taker.NONE:
            continue
        chosen, short = _choose(request, free)
        if short is None:
            for name, count in chosen:
                free[name] -= count
                left -= count
        elif how is Taker.FRESH:
            out[job.job_id] = short
    return out


def _choose(request: Request, free: Mapping[str, int]) -> tuple[list[tuple[str, int]], str | None]:
    """What each item takes (its first alternative with enough free; an item naming only licenses the
    snapshot does not list takes nothing), or the license that is short (the item's first listed one)."""
    chosen: list[tuple[str, int]] = []
    wanted: dict[str, int] = {}
    for options in request:
        known = [(name, count) for name, count in options if name in free]
        if not known:
            continue
        pick = next(
            ((name, count) for name, count in known if free[name] - wanted.get(name, 0) >= count), None
        )
        if pick is None:
            return [], known[0][0]
        chosen.append(pick)
        wanted[pick[0]] = wanted.get(pick[0], 0) + pick[1]
    return chosen, None
