"""``slurm-keda serve`` as a process, without a lab: ``/readyz`` stays 503 (``/healthz`` 200) while slurmrestd
is unreachable; a bad ``--web-config-file`` makes it exit 2 with one line."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from testkit.prometheus import FRESH_SCRAPE_TIMEOUT, Values, parse_scrape
from testkit.serve_process import console_script, start_serve
from testkit.tools import free_port


def test_readyz_stays_503_while_slurmrestd_is_unreachable(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("not-a-real-token\n")
    nothing = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    serve = start_serve(nothing, token, tmp_path)
    try:
        serve.wait_status("/healthz", 200)
        # a poll has been tried and failed: errors are counted, slurm_up is 0
        deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
        values: Values = {}
        while time.monotonic() < deadline:
            status, text = serve.get("/metrics")
            assert status == 200, text
            values = parse_scrape(text)
            if sum(values.get("slurm_exporter_poll_errors_total", {}).values()) > 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"no poll error counted within {FRESH_SCRAPE_TIMEOUT:.0f} s: {values}")
        assert values["slurm_up"] == {(): 0.0}
        assert "slurm_jobs" not in values  # no snapshot, no Slurm families
        # for two more poll intervals: still not ready, still alive
        until = time.monotonic() + 2.2
        while time.monotonic() < until:
            status, body = serve.get("/readyz")
            assert status == 503, body
            assert body.startswith("not ready"), body
            assert serve.get("/healthz")[0] == 200
            time.sleep(0.25)
        serve.proc.check_alive()
    finally:
        serve.proc.stop()


def test_serve_exits_2_with_one_line_for_a_bad_web_config(tmp_path: Path) -> None:
    """The console script's exit status and its one line on stderr; what each bad web config says is
    checked in-process (``test_server.test_serve_with_a_bad_web_config_exits_2_with_one_line``)."""
    web_config = tmp_path / "web.yml"
    web_config.write_text("tls_server_config: [unclosed\n")
    token = tmp_path / "token"
    token.write_text("x\n")
    argv = [
        *console_script(),
        "serve",
        "--slurmrestd-url",
        f"http://127.0.0.1:{free_port()}",
        "--token-file",
        str(token),
        "--listen-address",
        "127.0.0.1",
        "--listen-port",
        str(free_port()),
        "--web-config-file",
        str(web_config),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_KEDA_")}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=env)
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("slurm-keda: ") and str(web_config) in lines[0], lines[0]
    assert result.stdout == ""
