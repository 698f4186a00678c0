"""Log output: one event, one line, as text or JSON; the throttle for floods."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import pytest

from exporter.client import check_status
from exporter.errors import HTTPStatusError
from exporter.logs import Conditions, JsonFormatter, TextFormatter, Throttle, configure

PRETTY_504 = json.dumps({"meta": {"plugin": {"type": "openapi/slurmctld"}}, "errors": []}, indent=2).encode()


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("line one\nline two")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("exporter.poller", logging.WARNING, __file__, 1, message, args, info)


@pytest.mark.parametrize(
    ("status", "body", "line"),
    [
        # slurmrestd's pretty-printed JSON with an empty errors[]: was "jobs: HTTP 504: { "errors": [], ..."
        (504, PRETTY_504, "jobs: HTTP 504 Gateway Timeout: slurmrestd gave no error text"),
        (502, b"", "jobs: HTTP 502 Bad Gateway: slurmrestd gave no error text (empty body)"),
        (
            503,
            b"<html><head><title>503</title></head>\n<body><h1>Service Unavailable</h1></body></html>",
            "jobs: HTTP 503 Service Unavailable: slurmrestd gave no error text; the body is not its JSON: "
            "503 Service Unavailable",
        ),
        (
            500,
            b'{"errors": [{"description": "Unable to query jobs", "error": "Slurm timeout"}]}',
            "jobs: HTTP 500 Internal Server Error: Unable to query jobs: Slurm timeout",
        ),
        (599, b"{}", "jobs: HTTP 599: slurmrestd gave no error text"),
    ],
)
def test_an_error_answer_is_one_readable_line(status: int, body: bytes, line: str) -> None:
    with pytest.raises(HTTPStatusError) as e:
        check_status(status, body, "jobs")
    assert str(e.value) == line


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()], ids=["text", "json"])
def test_every_record_is_one_line(formatter: logging.Formatter) -> None:
    for record in (
        _record("poll %s failed: %s", "jobs", PRETTY_504.decode()),
        _record("boom", exc=True),
        _record("crlf\r\nin it"),
    ):
        out = formatter.format(record)
        assert "\n" not in out and "\r" not in out, out
    doc = json.loads(JsonFormatter().format(_record("poll %s failed: %s", "jobs", "x\ny")))
    assert doc["message"] == "poll jobs failed: x\ny" and doc["level"] == "warning"
    assert doc["logger"] == "exporter.poller" and doc["time"].endswith("+00:00")
    assert "line two" in json.loads(JsonFormatter().format(_record("boom", exc=True)))["exception"]


def test_configure_json_writes_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure("info", "json")
        logging.getLogger("x").info("hello\nworld")
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and json.loads(err[0])["message"] == "hello\nworld"
    finally:
        root.handlers[:], _ = saved[0], None
        root.setLevel(saved[1])


def test_log_format_json_from_the_command_line() -> None:
    """``slurm-keda snapshot --log-format json`` against nothing: every stderr line that is a log line
    is a JSON object."""
    result = subprocess.run(
        [sys.executable, "-m", "slurm_keda.cli", "snapshot", "--slurmrestd-url", "http://127.0.0.1:9",
         "--retries", "0", "--log-format", "json", "--log-level", "debug"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    logs = [line for line in result.stderr.splitlines() if not line.startswith("slurm-keda:")]
    assert logs, result.stderr
    assert all(isinstance(json.loads(line), dict) for line in logs), result.stderr


def test_throttle_admits_one_per_key_per_interval() -> None:
    now = [0.0]
    t = Throttle(10.0, clock=lambda: now[0], max_keys=4)
    assert t.admit("a") == 0
    assert [t.admit("a") for _ in range(5)] == [None] * 5
    assert t.admit("b") == 0
    now[0] = 10.0
    assert t.admit("a") == 5 and t.suppressed == 5
    for k in "cdefg":  # more keys than kept: the oldest are forgotten, memory stays bounded
        t.admit(k)
    assert len(t._last) <= 4
    assert Throttle.note(3, 10.0) == " (and 3 more like it in 10 s)" and Throttle.note(0, 10.0) == ""


def test_text_lines_stay_text() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.handle(_record("a\nb"))
    assert stream.getvalue().count("\n") == 1 and "a\\nb" in stream.getvalue()


def test_a_lasting_condition_is_said_when_it_starts_changes_is_reminded_and_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    now = [0.0]
    c = Conditions(logging.getLogger("t"), clock=lambda: now[0], remind_every=3600.0)
    for _ in range(100):  # a poll every 5 s for ~8 minutes: one line
        c.seen("poll jobs", "http_511", "failed: HTTP 511")
        now[0] += 5
    assert [r.getMessage() for r in caplog.records] == ["poll jobs: failed: HTTP 511"]
    now[0] = 3700.0
    c.seen("poll jobs", "http_511", "failed: HTTP 511")  # an hour on: reminded once, with the count
    assert caplog.records[-1].getMessage() == "poll jobs: still failed: HTTP 511 (101 time(s) in 62 min)"
    c.seen("poll jobs", "timeout", "failed: no byte for 30s")
    assert caplog.records[-1].getMessage() == (
        "poll jobs: failed: no byte for 30s (before: http_511, 101 time(s) in 62 min)"
    )
    c.seen("poll nodes", "timeout", "failed: no byte for 30s")
    assert set(c.active()) == {"poll jobs", "poll nodes"}
    now[0] += 10
    c.ended("poll jobs", "answering again")
    c.ended("poll jobs", "answering again")  # nothing more: it had ended
    assert caplog.records[-1].getMessage() == (
        "poll jobs: answering again after 1 time(s) in 10 s (last: failed: no byte for 30s)"
    )
    assert caplog.records[-1].levelno == logging.INFO
    c.ended_except("poll ", ["poll nodes"])
    assert set(c.active()) == {"poll nodes"}
    c.ended_except("poll ", [])
    assert c.active() == {} and len(caplog.records) == 6  # start, reminder, change, nodes, two ends
