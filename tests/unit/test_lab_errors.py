"""The lab's clear errors that need no running lab: not root, no debootstrap, CLI exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab import Lab, LabError
from lab import chroot as lab_chroot
from lab.cli import main as lab_main


def test_not_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="must run as root"):
        Lab("26.05").up()


def test_cli_not_root_exits_1_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert lab_main(["up", "--slurm", "26.05"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must run as root" in err


def test_missing_debootstrap_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_KEDA_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(LabError, match=r"debootstrap is not installed; run: apt-get install -y debootstrap"):
        lab_chroot.ensure_chroot("sid")
    assert not (tmp_path / "cache" / "sid").exists()


def test_unknown_flavor_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        lab_main(["up", "--slurm", "21.08"])
    assert "invalid choice" in capsys.readouterr().err
