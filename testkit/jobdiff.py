"""Field-by-field comparison of two job lists (an incrementally kept snapshot against a full listing)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from exporter.model import Job


def by_id(jobs: Sequence[Job]) -> dict[int, Job]:
    """Job id → record; asserts no id is listed twice."""
    out = {j.job_id: j for j in jobs}
    assert len(out) == len(jobs), "a job listed twice"
    return out


def job_differences(
    got: Sequence[Job], want: Sequence[Job], *, pending_ignored: Collection[str] = ()
) -> list[str]:
    """Every difference between ``got`` and ``want``, keyed by job id, sorted; fields named in
    ``pending_ignored`` are not compared for jobs pending in both."""
    a, b = by_id(got), by_id(want)
    out = [f"job {j}: only in the first" for j in a.keys() - b.keys()]
    out += [f"job {j}: missing from the first" for j in b.keys() - a.keys()]
    for j in a.keys() & b.keys():
        da, db = msgspec.structs.asdict(a[j]), msgspec.structs.asdict(b[j])
        skip = pending_ignored if a[j].state == b[j].state == "PENDING" else ()
        out += [f"job {j}.{k}: {da[k]!r} != {db[k]!r}" for k in da if k not in skip and da[k] != db[k]]
    return sorted(out)
