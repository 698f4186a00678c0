"""How much of its random input a property test runs, by the run it is part of (``SLURM_KEDA_FUZZ``).

- ``full`` (``make test-nightly``, and a bare ``pytest``): every example and seed written in the tests;
- ``quick`` (``make test``, what CI runs): the fuzzers (``tests/unit/test_fuzz.py``) at a fifth of their
  examples, every other property test whole;
- ``smoke`` (``make unit``, the quick feedback loop): every property test at a fifth of what ``quick``
  runs, the seeded churns at a third of their seeds — each still runs, on fewer inputs.

The examples are derandomised (``tests/conftest.py``), so a smaller budget runs a prefix-like subset of
the same inputs, never different ones.
"""

from __future__ import annotations

import os

LEVELS = ("full", "quick", "smoke")

LEVEL = os.environ.get("SLURM_KEDA_FUZZ", "full")
if LEVEL not in LEVELS:
    raise RuntimeError(f"SLURM_KEDA_FUZZ={LEVEL!r}: expected one of {', '.join(LEVELS)}")


def examples(written: int, *, fuzzer: bool = False) -> int:
    """The examples a property test with ``written`` examples runs at this level (at least 5)."""
    share = {"full": 1, "quick": 5 if fuzzer else 1, "smoke": 25 if fuzzer else 5}[LEVEL]
    return max(written // share, 5)


def seeds(written: int) -> range:
    """The seeds a seeded test parametrised over ``range(written)`` runs at this level (at least one)."""
    return range(max(written // 3, 1) if LEVEL == "smoke" else written)
