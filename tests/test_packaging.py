"""The Dockerfile copies what exists and runs the one console script as a non-root user."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_copies_existing_paths_and_drops_root() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copies = [ln.split()[1:-1] for ln in lines if ln.startswith("COPY ") and "--from" not in ln]
    for sources in copies:
        for src in sources:
            assert (ROOT / src).exists(), src
    assert any(ln.startswith("USER ") and ln.split()[1] != "0" for ln in lines)
    assert 'ENTRYPOINT ["slurm-keda"]' in lines


def test_one_console_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"slurm-keda": "exporter.cli:main"}
