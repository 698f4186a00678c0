"""Vector bin packing for the demand model: exact first fit in a given order while small, bounded beyond.

Pure, no I/O. Read by :mod:`autoscaler.demand.compute` only.

**Pieces** are ``(n, cpus, memory, gpus)``: a job of ``n`` one-per-node pieces, each asking that much of
one node, the n pieces on n different nodes; jobs come as *runs* of identical jobs ``(piece, jobs)``, in
order (a piece may come back in a later run). **Bins** are nodes, described by their free room (CPUs,
memory bytes, GPUs), kept as *runs* of identical bins ``[cpus, memory, gpus, count]`` in first-fit
order (:class:`Bins`). Every piece asks at least one CPU. **Order**: the runs', which the caller makes
Slurm's scheduling order.

While ``runs of jobs × (runs of bins + runs of jobs)`` is at most :data:`EXACT_WORK`: exact first fit (the
same answer as placing jobs one by one, runs placed in bulk). Beyond: best fit in the same order through an
index of bins by free room, linear in runs of jobs. Both never count fewer nodes than the jobs need and
never more than ``2·S + n_max`` (S = the pieces' summed CPU + memory + GPU shares of a node, n_max = the
most nodes one job asks). Derivation and the measured distance between the two: ``docs/demand.md``,
"Packing".
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "BLOCK",
    "EXACT_WORK",
    "NATIVE",
    "OWNED_JOBS",
    "Bins",
    "Piece",
    "first_fit_owned",
    "is_exact",
    "pack",
    "pack_columns",
]

_native: ModuleType | None
try:  # the bounded best fit compiled (_bestfit.c): built where a C compiler was at install time
    import autoscaler.demand._bestfit as _native
except ImportError:  # pragma: no cover - a build without a compiler
    _native = None

NATIVE = _native is not None
"""Whether the bounded best fit runs compiled (``autoscaler/demand/_bestfit.c``)."""

Piece = tuple[int, int, int, int]
"""(nodes, cpus per node, memory bytes per node, gpus per node)."""
Capacity = tuple[int, int, int]
"""(cpus, memory bytes, gpus) of one node of the target's shape."""

EXACT_WORK = 1 << 20
"""Exact first fit while runs of jobs × (runs of bins + runs of jobs) is at most this (~1M: about 1000
runs of jobs of all-different sizes into new bins, ~400 into the room of 2000 busy nodes of
all-different free room; ≤ ~0.1 s on this project's VM)."""
BLOCK = 32
"""Runs per block of :class:`Bins` (a block is skipped whole when its room bound is too small)."""


_C, _M, _G = itemgetter(0), itemgetter(1), itemgetter(2)


class Bins:
    """Bins in first-fit order, as runs of identical bins ``[free cpus, free memory, free gpus, count]``.

    Runs are held in blocks of about :data:`BLOCK` runs; ``tops[b]`` is an upper bound of the room of
    the runs of block ``b`` (componentwise), so a scan skips a whole block that cannot take a piece.
    Rooms only shrink, so a bound stays valid; a block whose bound let a scan in for nothing is
    *tightened*: its bound recomputed and its dead runs (no room for ``floor``, the componentwise
    smallest piece still to come) dropped.
    """

    __slots__ = ("blocks", "floor", "grown", "shrunk", "tops")

    def __init__(self, runs: Iterable[list[int]] = ()) -> None:
        self.blocks: list[list[list[int]]] = []
        self.tops: list[list[int]] = []
        self.floor: tuple[int, int, int] = (1, 0, 0)
        """Every piece still to come asks at least this much (every piece asks a CPU)."""
        self.grown: set[int] = set()
        """Blocks that got runs inserted (split when too big by :meth:`tidy`)."""
        self.shrunk: set[int] = set()
        """Blocks tightened to nothing (dropped by :meth:`tidy`)."""
        for run in runs:
            self.append(run)

    def append(self, run: list[int]) -> None:
        """Add a run after every other run (new bins)."""
        if not self.blocks or len(self.blocks[-1]) >= BLOCK:
            self.blocks.append([run])
            self.tops.append(run[:3])
            return
        self.blocks[-1].append(run)
        top = self.tops[-1]
        if run[0] > top[0]:
            top[0] = run[0]
        if run[1] > top[1]:
            top[1] = run[1]
        if run[2] > top[2]:
            top[2] = run[2]

    def runs(self) -> Iterator[list[int]]:
        for block in self.blocks:
            yield from block

    def run_count(self) -> int:
        return sum(map(len, self.blocks))

    def tighten(self, bi: int) -> None:
        """Drop the dead runs of block ``bi`` and recompute its bound (block indices unchanged)."""
        block = self.blocks[bi]
        fc, fm, fg = self.floor
        block[:] = [r for r in block if r[0] >= fc and r[1] >= fm and r[2] >= fg]
        if block:
            self.tops[bi] = [max(map(_C, block)), max(map(_M, block)), max(map(_G, block))]
        else:
            self.tops[bi] = [0, -1, -1]  # takes nothing
            self.shrunk.add(bi)

    def tidy(self) -> None:
        """Between pieces: split blocks grown too big, drop emptied blocks (block indices change)."""
        if not self.grown and not self.shrunk:
            return
        blocks, tops = self.blocks, self.tops
        for bi in sorted(self.grown | self.shrunk, reverse=True):
            block = blocks[bi]
            if not block:
                del blocks[bi], tops[bi]
            elif len(block) > 2 * BLOCK:
                parts = [block[i : i + BLOCK] for i in range(0, len(block), BLOCK)]
                blocks[bi : bi + 1] = parts
                tops[bi : bi + 1] = [[max(map(_C, p)), max(map(_M, p)), max(map(_G, p))] for p in parts]
        self.grown.clear()
        self.shrunk.clear()


def _fit(c: int, m: int, g: int, pc: int, pm: int, pg: int) -> int:
    f = c // pc
    if pm:
        f = min(f, m // pm)
    if pg:
        f = min(f, g // pg)
    return f


def _place_single(bins: Bins, pc: int, pm: int, pg: int, k: int) -> int:
    """First fit of k identical one-node pieces into the bins; returns how many are left."""
    tops = bins.tops
    for bi, block in enumerate(bins.blocks):
        tc, tm, tg = tops[bi]
        if tc < pc or tm < pm or tg < pg:
            continue
        hit = False
        for i, run in enumerate(block):
            c, m, g, cnt = run
            if c < pc or m < pm or g < pg:
                continue
            f = c // pc
            if pm and m // pm < f:
                f = m // pm
            if pg and g // pg < f:
                f = g // pg
            if k >= f * cnt:
                run[0], run[1], run[2] = c - f * pc, m - f * pm, g - f * pg
                k -= f * cnt
                if not k:
                    return 0
                hit = True
            else:
                q, r = divmod(k, f)
                split = []
                if q:
                    split.append([c - f * pc, m - f * pm, g - f * pg, q])
                if r:
                    split.append([c - r * pc, m - r * pm, g - r * pg, 1])
                rest = cnt - q - (1 if r else 0)
                if rest:
                    split.append([c, m, g, rest])
                block[i : i + 1] = split
                bins.grown.add(bi)
                return 0
        if not hit:
            bins.tighten(bi)
    return k


def _open(bins: Bins, cap: Capacity, pieces: int, per_bin: int, pc: int, pm: int, pg: int) -> int:
    """Append new bins holding ``pieces`` one-node pieces, ``per_bin`` per bin; returns bins opened."""
    cc, cm, cg = cap
    q, r = divmod(pieces, per_bin)
    if q:
        bins.append([cc - per_bin * pc, cm - per_bin * pm, cg - per_bin * pg, q])
    if r:
        bins.append([cc - r * pc, cm - r * pm, cg - r * pg, 1])
    return q + (1 if r else 0)


def _place_multi(
    bins: Bins, cap: Capacity, n: int, piece: tuple[int, int, int], k: int, *, open_new: bool
) -> tuple[int, int]:
    """First fit of k identical jobs of n one-per-node pieces; returns (jobs left, bins opened).

    Job by job, first fit puts a job's pieces into the first n bins that still take a piece; the
    next identical job finds the same n bins until one of them is full. So whole steps are done
    at once: the first n available bins (plus new bins if fewer exist) take ``t`` jobs each, ``t``
    = the smallest room among them (in pieces) or the jobs left. Each step fills a run of bins,
    so the cost grows with runs, not jobs. Exact first fit, job by job.
    """
    pc, pm, pg = piece
    cc, cm, cg = cap
    per_fresh = max(1, _fit(cc, cm, cg, pc, pm, pg))
    blocks, tops = bins.blocks, bins.tops
    opened = 0
    sb, si = 0, 0  # runs before (block sb, index si) take no piece: they only get fuller
    while k:
        avail: list[tuple[int, int, int]] = []  # (block, index, bins taken)
        found = 0
        least = k  # the smallest room (in pieces) among the available runs
        bi, i = sb, si
        while found < n and bi < len(blocks):
            tc, tm, tg = tops[bi]
            if tc >= pc and tm >= pm and tg >= pg:
                block = blocks[bi]
                hit = False
                start = i
                while found < n and i < len(block):
                    c, m, g, cnt = block[i]
                    if c >= pc and m >= pm and g >= pg:
                        f = c // pc
                        if pm and m // pm < f:
                            f = m // pm
                        if pg and g // pg < f:
                            f = g // pg
                        if not avail:
                            sb, si = bi, i
                        take = cnt if cnt < n - found else n - found
                        avail.append((bi, i, take))
                        found += take
                        if f < least:
                            least = f
                        hit = True
                    i += 1
                if not hit and start == 0:
                    bins.tighten(bi)  # scanned whole for nothing (no position points into it)
            bi += 1
            i = 0
        if not avail:
            if not open_new:
                break
            # nothing takes a piece: rounds of per_fresh jobs fill n new bins each
            rounds, r = divmod(k, per_fresh)
            if rounds:
                bins.append([cc - per_fresh * pc, cm - per_fresh * pm, cg - per_fresh * pg, rounds * n])
            if r:
                bins.append([cc - r * pc, cm - r * pm, cg - r * pg, n])
            return 0, opened + (rounds + (1 if r else 0)) * n
        if found < n:
            if not open_new:
                break  # the job does not fit the existing bins: place none of its pieces
            if per_fresh < least:
                least = per_fresh
        t = least
        # the last run may be taken in part: split it (done last, indices before stay valid)
        for bi, i, take in reversed(avail):
            block = blocks[bi]
            c, m, g, cnt = block[i]
            filled = [c - t * pc, m - t * pm, g - t * pg, take]
            if take == cnt:
                block[i] = filled
            else:
                block[i : i + 1] = [filled, [c, m, g, cnt - take]]
                bins.grown.add(bi)
        if found < n:
            fresh = n - found
            bins.append([cc - t * pc, cm - t * pm, cg - t * pg, fresh])
            opened += fresh
        k -= t
    return k, opened


class _Rooms:
    """Bins indexed by free room for the bounded path: ``{(cpus, memory, gpus): bins}``, plus per
    free-CPU count the sorted ``(memory, gpus)`` present, and the sorted free-CPU counts present."""

    __slots__ = ("by_cpus", "counts", "cpus")

    def __init__(self, runs: Iterable[list[int]]) -> None:
        self.counts: dict[tuple[int, int, int], int] = {}
        self.by_cpus: dict[int, list[tuple[int, int]]] = {}
        self.cpus: list[int] = []
        for c, m, g, cnt in runs:
            self.put(c, m, g, cnt)

    def put(self, c: int, m: int, g: int, cnt: int) -> None:
        if c <= 0 or cnt <= 0:
            return  # no bins, or bins that take no piece ever (every piece asks a CPU)
        key = (c, m, g)
        old = self.counts.get(key, 0)
        self.counts[key] = old + cnt
        if not old:
            lst = self.by_cpus.get(c)
            if lst is None:
                self.by_cpus[c] = [(m, g)]
                insort(self.cpus, c)
            else:
                insort(lst, (m, g))

    def take(self, key: tuple[int, int, int], cnt: int) -> None:
        left = self.counts[key] - cnt
        if left:
            self.counts[key] = left
            return
        del self.counts[key]
        c, m, g = key
        lst = self.by_cpus[c]
        del lst[bisect_left(lst, (m, g))]
        if not lst:
            del self.by_cpus[c]
            del self.cpus[bisect_left(self.cpus, c)]

    def fitting(self, pc: int, pm: int, pg: int) -> Iterator[tuple[int, int, int]]:
        """Room keys with room for the piece, best fit first: fewest free CPUs, then least memory."""
        by_cpus = self.by_cpus
        for c in self.cpus[bisect_left(self.cpus, pc) :]:
            lst = by_cpus[c]
            if lst[-1][0] >= pm:
                for i in range(bisect_left(lst, (pm, pg)), len(lst)):
                    m, g = lst[i]
                    if g >= pg:
                        yield (c, m, g)


def _best_fit(
    order: Sequence[tuple[Piece, int]], runs: Iterable[list[int]], cap: Capacity, *, open_new: bool
) -> tuple[int, list[int]]:
    """The bounded path: best fit, in ``order``, into ``runs`` (and new bins if ``open_new``).

    Returns (new bins opened, jobs left unplaced per group) like :func:`pack`. Compiled where the
    extension was built (:data:`NATIVE`, the same answer ~50× faster), else :func:`_best_fit_py`; also
    that for numbers the compiled one does not hold (beyond 2⁶² or 65,536 free CPUs a node).
    """
    if _native is not None:
        runs = list(runs)
        try:
            answer: tuple[int, list[int]] = _native.best_fit(order, runs, cap, open_new)
            return answer
        except OverflowError:
            pass
    return _best_fit_py(order, runs, cap, open_new=open_new)


def _best_fit_py(
    order: Sequence[tuple[Piece, int]], runs: Iterable[list[int]], cap: Capacity, *, open_new: bool
) -> tuple[int, list[int]]:
    """:func:`_best_fit` in Python: the reference (``_bestfit.c`` does the same, step for step)."""
    cc, cm, cg = cap
    rooms = _Rooms(runs)
    opened = 0
    left: list[int] = []
    for (n, pc, pm, pg), k in order:
        per_fresh = max(1, _fit(cc, cm, cg, pc, pm, pg))
        while k:
            # the n best rooms (a room stands for its count of identical bins)
            chosen: list[tuple[tuple[int, int, int], int]] = []  # (room, bins taken)
            found = 0
            t = k  # jobs placed in this step: at most the smallest room (in pieces) chosen
            for key in rooms.fitting(pc, pm, pg):
                take = min(rooms.counts[key], n - found)
                chosen.append((key, take))
                found += take
                t = min(t, _fit(*key, pc, pm, pg))
                if found == n:
                    break
            if found < n and not open_new:
                break  # the job does not fit: place none of its pieces
            if not found:  # nothing takes a piece: rounds of per_fresh jobs on n new bins
                rounds, r = divmod(k, per_fresh)
                if rounds:
                    rooms.put(cc - per_fresh * pc, cm - per_fresh * pm, cg - per_fresh * pg, rounds * n)
                if r:
                    rooms.put(cc - r * pc, cm - r * pm, cg - r * pg, n)
                opened += (rounds + (1 if r else 0)) * n
                k = 0
                break
            if found < n:
                t = min(t, per_fresh)
            if n == 1:
                # one-node pieces: every bin of the best room takes t (as many as fit, or all left)
                key, _ = chosen[0]
                chosen = [(key, min(rooms.counts[key], k // t))]
            for (c, m, g), take in chosen:
                rooms.take((c, m, g), take)
                rooms.put(c - t * pc, m - t * pm, g - t * pg, take)
            if found < n:
                rooms.put(cc - t * pc, cm - t * pm, cg - t * pg, n - found)
                opened += n - found
            k -= t * chosen[0][1] if n == 1 else t
        left.append(k)
    return opened, left


def pack(
    groups: Sequence[tuple[Piece, int]],
    bins: Bins,
    cap: Capacity,
    *,
    open_new: bool,
    exact: bool | None = None,
) -> tuple[int, list[int]]:
    """Pack runs of identical jobs ``(piece, jobs)`` into ``bins`` (and new bins if ``open_new``), run
    after run in the given order (a piece may come back in later runs).

    Exact first fit while ``runs of jobs × (runs of bins + runs of jobs)`` is at most
    :data:`EXACT_WORK`, else bounded best fit (module docstring); ``exact`` forces either path (tests
    compare them). Returns (new bins opened, jobs of each run left unplaced) — leftovers only when not
    ``open_new``. ``bins`` is used up.
    """
    if exact is None:
        exact = is_exact(len(groups), bins.run_count())
    if not exact:
        return _best_fit(groups, bins.runs(), cap, open_new=open_new)
    # floors[j]: the componentwise smallest piece among groups[j:] (runs below it are dead)
    floors: list[tuple[int, int, int]] = [(1, 0, 0)] * len(groups)
    fc = fm = fg = 1 << 62
    for j in range(len(groups) - 1, -1, -1):
        _, pc, pm, pg = groups[j][0]
        fc, fm, fg = min(fc, pc), min(fm, pm), min(fg, pg)
        floors[j] = (fc, fm, fg)
    opened = 0
    left: list[int] = []
    for j, ((n, pc, pm, pg), k) in enumerate(groups):
        bins.floor = floors[j]
        if n == 1:
            k = _place_single(bins, pc, pm, pg, k)
            if k and open_new:
                per_fresh = max(1, _fit(cap[0], cap[1], cap[2], pc, pm, pg))
                opened += _open(bins, cap, k, per_fresh, pc, pm, pg)
                k = 0
        else:
            k, new = _place_multi(bins, cap, n, (pc, pm, pg), k, open_new=open_new)
            opened += new
        left.append(k)
        bins.tidy()
    return opened, left


def pack_columns(
    pieces: np.ndarray[Any, np.dtype[np.int64]],
    jobs: np.ndarray[Any, np.dtype[np.int64]],
    bins: Bins,
    cap: Capacity,
    *,
    open_new: bool,
    exact: bool | None = None,
) -> tuple[int, list[int]]:
    """:func:`pack` of runs given as columns: ``pieces`` an int64 array of rows ``[nodes, cpus, memory,
    gpus]``, ``jobs`` the jobs of each run — the bounded path compiled reads them as they are."""
    if exact is None:
        exact = is_exact(len(jobs), bins.run_count())
    if not exact and _native is not None:
        columns = [np.ascontiguousarray(pieces[:, i], dtype=np.int64) for i in range(4)]
        try:
            answer: tuple[int, list[int]] = _native.best_fit_columns(
                *columns, np.ascontiguousarray(jobs, dtype=np.int64), list(bins.runs()), cap, open_new
            )
            return answer
        except OverflowError:
            pass
    groups: list[tuple[Piece, int]] = list(zip(map(tuple, pieces.tolist()), jobs.tolist(), strict=True))
    return pack(groups, bins, cap, open_new=open_new, exact=exact)


OWNED_JOBS = 500
"""Up to this many jobs, a queue with ``--exclusive=user`` jobs is packed job by job
(:func:`first_fit_owned`: cost jobs × bins)."""


def first_fit_owned(order: Sequence[tuple[Piece, int, tuple[str, bool] | None]], cap: Capacity) -> int:
    """Exact first fit, job by job, onto new bins, of runs ``(piece, jobs, owner)`` where some jobs share a
    bin only with their own user's (``--exclusive=user``). ``owner`` is ``(user, exclusive)`` for the jobs
    of a user who has such jobs, None for a user who has none (to those, any such user is another user).
    A bin holding an exclusive job of user U takes no other user's job; an exclusive job of U goes only
    into a bin that holds U's jobs alone. Returns the bins opened."""
    cc, cm, cg = cap
    rooms: list[list[int]] = []
    users: list[set[str | None]] = []  # whose jobs each bin holds
    owned_by: list[str | None] = []  # whose exclusive job each bin holds
    for (n, pc, pm, pg), k, owner in order:
        user, exclusive = owner if owner is not None else (None, False)
        for _ in range(k):
            chosen: list[int] = []
            for b, (c, m, g) in enumerate(rooms):
                if c < pc or m < pm or g < pg:
                    continue
                if exclusive:
                    if any(u != user for u in users[b]):
                        continue
                elif owned_by[b] is not None and owned_by[b] != user:
                    continue
                chosen.append(b)
                if len(chosen) == n:
                    break
            while len(chosen) < n:
                chosen.append(len(rooms))
                rooms.append([cc, cm, cg])
                users.append(set())
                owned_by.append(None)
            for b in chosen:
                room = rooms[b]
                room[0] -= pc
                room[1] -= pm
                room[2] -= pg
                users[b].add(user)
                if exclusive:
                    owned_by[b] = user
    return len(rooms)


def is_exact(groups: int, runs: int) -> bool:
    """Whether :func:`pack` takes the exact path for this many runs of jobs and runs of bins."""
    return groups * (runs + groups) <= EXACT_WORK
