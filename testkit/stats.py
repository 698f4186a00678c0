"""Figures the benchmarks print."""

from __future__ import annotations

import math


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0..100) of ``values``; NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else math.nan
