"""Exponential backoff: how long to wait before the next try, after a run of failures."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``first`` seconds before the second try, doubling per further failure, at most ``cap`` seconds.

    ``jitter`` is the part of that ceiling drawn at random, so that many clients failing together do not
    retry together: 0 waits the ceiling exactly, 0.5 half to all of it, 1 anything from 0 to it ("full
    jitter").
    """

    first: float
    cap: float
    jitter: float = 0.0

    MAX_DOUBLINGS = 10
    """Beyond 2**10 × ``first`` the cap decides anyway (and the float never overflows)."""

    def ceiling(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0 = the first retry)."""
        return min(self.cap, self.first * 2.0 ** min(max(retry, 0), self.MAX_DOUBLINGS))

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry``; ``rng`` draws the jitter (required when
        :attr:`jitter` is not 0)."""
        top = self.ceiling(retry)
        if not self.jitter:
            return top
        assert rng is not None, "a jittered backoff needs a random source"
        return rng.uniform(top * (1.0 - self.jitter), top)
