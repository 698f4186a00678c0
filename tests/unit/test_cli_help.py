"""``serve --help`` is readable (issue 41, item 2): options in sections by concern, defaults in human units,
short enough to read; every option still there, and ``--target`` everywhere a target is asked for."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest

from slurm_keda.cli import GROUP_TITLES, build_parser, human_default
from slurm_keda.settings import OPTIONS, flag_name


def _help(*argv: str) -> str:
    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--help"])
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue()


def test_serve_help_is_grouped_short_and_in_human_units() -> None:
    text = _help("serve")
    lines = text.splitlines()
    assert lines[0] == "usage: slurm-keda serve [options] [--target KEY=VALUE,...]"  # was 60 lines of flags
    assert len(lines) <= 170, len(lines)  # was 346
    headers = [line[:-1] for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headers == ["options", *GROUP_TITLES.values()], headers
    for name in OPTIONS:  # every option, once
        assert text.count(f"  {flag_name(name)} ") + text.count(f"  {flag_name(name)},") == 1, name
    flat = " ".join(text.split())  # as read, whatever the wrapping
    assert "17179869184" not in flat and "(default 16 GiB)" in flat and "(default 30 s)" in flat
    assert "[env SLURM_KEDA_" not in text and "SLURM_KEDA_<OPTION>" in text
    assert all(len(line) <= 110 for line in lines)


@pytest.mark.parametrize("command", ["serve", "bridge", "demand", "explain"])
def test_target_is_taken_wherever_targets_are(command: str) -> None:
    assert "--target KEY=VALUE,..." in _help(command)


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("max_body_bytes", 16 << 30, "16 GiB"),
        ("max_record_bytes", 16 << 20, "16 MiB"),
        ("request_timeout", 30.0, "30 s"),
        ("jobs_full_refresh", 0.0, "0 s"),
        ("tls_insecure", False, "off"),
        ("min_transfer_rate", 1024.0, "1024"),
        ("token_file", None, None),
    ],
)
def test_defaults_read_as_people_say_them(name: str, value: object, shown: str | None) -> None:
    assert human_default(name, value) == shown


def test_the_one_shot_commands_start_without_the_long_running_modules() -> None:
    """``snapshot``, ``demand``, ``explain`` and ``--help`` import neither ``serve`` nor Kubernetes' client
    (~0.6 s of a 1.3-s start)."""
    code = (
        "import sys, slurm_keda.cli\n"
        "print(sorted(m for m in ('slurm_keda.serve', 'kubernetes_asyncio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
