"""Where the test data is: the recorded lab answers and the ``shared`` folder beside the project."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The project's checkout."""
RECORDED = ROOT / "tests" / "data" / "recorded"
"""The labs' recorded answers, ``slurm-<release>/<api version>/<endpoint>.json``."""
SHARED = ROOT.parent / "shared"
"""``../shared``: real CRDs, OpenAPI documents, payloads and notes (tests needing it skip without it)."""
RECORDED_2605 = RECORDED / "slurm-26.05.5" / "v0.0.45"


def recorded_version_dirs() -> list[Path]:
    """Every ``slurm-<release>/<api version>`` directory the lab recorded."""
    return sorted(p for p in RECORDED.glob("slurm-*/v0.0.*") if p.is_dir())
