"""A real Prometheus (Debian package) on loopback, scraping a ``serve``; tool checks that skip or fail
under ``SLURM_KEDA_REQUIRE_LAB=1``."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.lab_fixtures import require_lab
from testkit.tools import free_port

PROMETHEUS = Path("/usr/bin/prometheus")
PROMETHEUS_UP_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
Labels = tuple[tuple[str, str], ...]


def need_binary(path: Path) -> None:
    """Skip when a tool is missing, or fail under ``SLURM_KEDA_REQUIRE_LAB=1``."""
    if path.exists():
        return
    if require_lab():
        pytest.fail(f"{path} is required (SLURM_KEDA_REQUIRE_LAB=1): apt-get install -y prometheus")
    pytest.skip(f"{path} not installed (apt-get install -y prometheus)")


def start_prometheus(
    target_port: int, workdir: Path, rules: Path | None = None, cluster: str | None = None
) -> Prometheus:
    """Prometheus scraping serve every second as job slurm-keda; with ``rules`` loaded (evaluated every
    second) and a ``cluster`` target label if given."""
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n" + (f"rule_files: ['{rules}']\n" if rules else "") + "scrape_configs:\n"
        "  - job_name: slurm-keda\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
        + (f"        labels: {{cluster: {cluster}}}\n" if cluster else "")
    )
    argv = [
        str(PROMETHEUS),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    return Prometheus(Proc.start("prometheus", argv, workdir / "prometheus.log"), port)


@dataclass
class Proc:
    """A child process whose output goes to a log file; ``stop`` always reaps it."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    @classmethod
    def start(cls, name: str, argv: list[str], log_path: Path) -> Proc:
        log = log_path.open("wb")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        except BaseException:
            log.close()
            raise
        return cls(name, proc, log_path, log)

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}", pytrace=False)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(STOP_TIMEOUT)
        finally:
            self.log.close()


@dataclass
class Prometheus:
    proc: Proc
    port: int

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url)
        assert status == 200, f"{url}: {status} {body[:300]}"
        data = json.loads(body)
        assert data["status"] == "success", data
        return data["data"]

    def query(self, promql: str, at: float) -> dict[Labels, float]:
        data = self.api("/api/v1/query", query=promql, time=f"{at:.3f}")
        if data["resultType"] == "scalar":
            return {(): float(data["result"][1])}
        out: dict[Labels, float] = {}
        for r in data["result"]:
            labels = {k: v for k, v in r["metric"].items() if k not in {"__name__", "job", "instance"}}
            out[tuple(sorted(labels.items()))] = float(r["value"][1])
        return out

    def wait_target_up(self, timeout: float = PROMETHEUS_UP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            self.proc.check_alive()
            status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/targets")
            if status == 200:
                last = json.loads(body)["data"]["activeTargets"]
                if last and all(t["health"] == "up" for t in last):
                    return
            time.sleep(0.2)
        pytest.fail(f"Prometheus target not up within {timeout:.0f} s: {last}\n{self.proc.output()}")


def http_get(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answers."""
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


FRESH_SCRAPE_TIMEOUT = 10.0
"""Seconds to wait for a snapshot fetched after a sample began (serve polls every second)."""


Values = dict[str, dict[Labels, float]]
"""Sample name → {sorted labels → value}."""


def parse_scrape(text: str) -> Values:
    out: Values = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out
