"""``slurm-keda serve`` as a subprocess: the console script, its ports, its HTTP answers, its stop."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
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
