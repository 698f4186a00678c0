"""``slurm-keda serve`` as a subprocess: the console script, its ports, its HTTP answers, its stop; a one-shot
command run as a process or in the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.prometheus import (
    Proc,
    http_get,
)
from testkit.tools import free_port

START_TIMEOUT = 20.0


def console_script() -> list[str]:
    script = Path(sys.executable).parent / "slurm-keda"
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurm_keda.cli"]


async def run_command(argv: Sequence[str], *, process: bool = False) -> tuple[int, str, str]:
    """``slurm-keda argv...`` (a one-shot command: demand, explain, snapshot): its exit status, stdout and
    stderr. The console script in a process when ``process``; else ``cli.main`` in a thread with its own
    event loop, as the script has, its output captured — the same answer without a second interpreter's
    start (~1 s of CPU each)."""
    if process:
        proc = await asyncio.create_subprocess_exec(
            *console_script(), *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, stdout.decode(), stderr.decode()
    from slurm_keda import cli

    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return cli.main(list(argv))

    # the root logger the command sets up for itself is undone after the test (tests/conftest.py)
    code = await asyncio.wait_for(asyncio.to_thread(call), 60)
    return code, out.getvalue(), err.getvalue()


@dataclass
class Serve:
    """A running ``slurm-keda serve``."""

    proc: Proc
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
        return http_get(self.base + path, headers)

    def wait_status(self, path: str, status: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        got: tuple[int, str] = (0, "")
        while time.monotonic() < deadline:
            self.proc.check_alive()
            got = self.get(path)
            if got[0] == status:
                return
            time.sleep(0.1)
        pytest.fail(
            f"{path} never answered {status} within {timeout:.0f} s (last: {got[0]} {got[1][:200]!r}):\n"
            + self.proc.output(),
            pytrace=False,
        )


def start_serve(url: str, token_file: Path, workdir: Path, *extra: str) -> Serve:
    port = free_port()
    argv = [
        *console_script(),
        "serve",
        "--slurmrestd-url",
        url,
        "--token-file",
        str(token_file),
        "--listen-address",
        "127.0.0.1",
        "--listen-port",
        str(port),
        "--poll-interval",
        "1",
        *extra,
    ]
    return Serve(Proc.start("slurm-keda serve", argv, workdir / f"serve-{port}.log"), port)
