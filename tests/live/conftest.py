"""The live tests: every test in this folder runs against a real Slurm lab (marker ``lab``, applied here),
started by :mod:`testkit.lab_fixtures`. ``make test`` runs them; ``make unit`` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.lab)
