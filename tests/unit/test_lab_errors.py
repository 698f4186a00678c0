"""The lab without a running lab: its clear errors (not root, no debootstrap, CLI exit codes) and the second
chroot of a suite (a copy)."""

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


def _fake_chroot(root: Path) -> None:
    """What ensure_chroot takes for a finished chroot: its marker, the accounting packages' files, passwd."""
    for path in ("usr/sbin/slurmctld", "usr/sbin/slurmdbd", "usr/sbin/mariadbd"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    for name in ("proc", "dev", "sys", "lab"):
        (root / name).mkdir(exist_ok=True)
        (root / name / "inside").write_text("what a mount shows")
    (root / "core").write_text("a core dump")
    (root / ".slurm-keda-lab-owner").write_text("/var/lib/slurm-keda/lab/26.05\n")
    (root / lab_chroot.MARKER).write_text("suite=sid\nseconds=60\n")


def test_a_second_chroot_is_a_copy_without_what_is_mounted_inside(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The 26.05-oracle lab's chroot: the sid chroot copied once, without the mount points' contents (its
    lab may be running: /proc and the state directory are mounted there), remade when sid is rebuilt."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SLURM_KEDA_LAB_CACHE", str(cache))
    _fake_chroot(cache / "sid")
    copy = lab_chroot.ensure_copy("sid", "oracle")
    assert copy == cache / "sid-oracle" and (copy / "usr/sbin/slurmctld").exists()
    for name in ("proc", "dev", "sys", "lab"):
        assert (copy / name).is_dir() and not any((copy / name).iterdir()), name
    assert not (copy / "core").exists() and not (copy / ".slurm-keda-lab-owner").exists()
    assert "slurmrestd" in (copy / "etc/passwd").read_text()  # prepared like any chroot
    (copy / "kept").write_text("")
    assert lab_chroot.ensure_copy("sid", "oracle") == copy and (copy / "kept").exists()  # made once
    (cache / "sid" / lab_chroot.MARKER).write_text("suite=sid\nseconds=61\n")  # sid built again
    assert not (lab_chroot.ensure_copy("sid", "oracle") / "kept").exists()


def test_a_copy_refuses_a_chroot_with_something_else_mounted_inside(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SLURM_KEDA_LAB_CACHE", str(cache))
    _fake_chroot(cache / "sid")
    stray = (cache / "sid" / "var/cache").resolve()
    monkeypatch.setattr(lab_chroot, "_mountinfo", lambda: [Path("/"), stray])
    with pytest.raises(LabError, match="mounted inside it"):
        lab_chroot.ensure_copy("sid", "oracle")
    assert not (cache / "sid-oracle").exists()
