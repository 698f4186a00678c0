"""Every degraded state of the exporter is visible — and said once, not every poll (issue 40, items 1, 4, 7).

Faults are injected by a fake slurmrestd over real HTTP (recorded 26.05 lab answers, some records spoiled,
error answers as slurmrestd writes them, a refused token) and read back where an operator looks: the
``/metrics`` page, the status page and the log.

What main did before: a record with a count that is not an integer (``1e30``) failed its whole endpoint
(every job held stale for one bad record); refused records were counted by endpoint only and logged every
poll that saw them; a 504 with slurmrestd's empty ``errors[]`` was logged as the raw pretty-printed JSON;
an expired token logged one warning per endpoint and poll (~4,300 lines an hour).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from autoscaler.demand import Target
from autoscaler.metrics import demand_families
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.server import make_app
from exporter.session import SlurmSession
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.tools import Clock, serve_app
from tests.unit.test_bad_data_holds import DATA, Polled, polling

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")
CPU = Target("cpu", "cpu")
Doc = dict[str, Any]


def _doc(endpoint: str, version: str) -> Doc:
    doc: Doc = json.loads((DATA / version / f"{endpoint}.json").read_bytes())
    return doc


def _spoil(fake: FakeSlurmrestd, endpoint: str, version: str, spoil: Callable[[list[Doc]], None]) -> None:
    doc = _doc(endpoint, version)
    spoil(doc[endpoint])
    fake.override[endpoint] = json.dumps(doc).encode()


async def _pages(polled: Polled) -> tuple[str, str]:
    """(``/metrics``, the status page) served by the real app over HTTP."""
    service = polled.service
    app = make_app(
        polled.poller,
        status_lines=lambda now: [service.status_line(now)],
        extra_families=lambda snap: demand_families(service.demands_on(snap)),
        clock=lambda: polled.clock.now,
    )
    async with serve_app(app) as url, aiohttp.ClientSession() as cs:
        async with cs.get(f"{url}/metrics") as r:
            metrics = await r.text()
        async with cs.get(f"{url}/") as r:
            page = await r.text()
    return metrics, page


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings logged, but the one saying the fake has no ``/jobs/state`` (it lists every poll)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and not r.getMessage().startswith("jobs/state")
    ]


async def _poll(polled: Polled) -> None:
    """A poll that may fail whole (every endpoint refused)."""
    polled.clock.now += 70
    snap = await polled.poller.poll_once()
    if snap is not None:
        await polled.service.refresh(snap)


async def test_undecodable_records_are_refused_alone_counted_by_reason_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeSlurmrestd(DATA)
    async with polling(fake, [CPU]) as polled:
        p = polled.poller
        good = p.snapshot
        assert good is not None and polled.service.answer(CPU).desired == 6
        cpu_jobs = [j for j in _doc("jobs", "v0.0.44")["jobs"] if j["partition"] == "cpu"]

        def jobs(records: list[Doc]) -> None:
            for j in records:
                if j["partition"] == "cpu":  # a float where a count must be an integer: decodes as nothing
                    j["cpus"] = {"set": True, "infinite": False, "number": 1e30}
            other = next(j for j in records if j["partition"] != "cpu")
            other["priority"] = {"set": True, "infinite": False, "number": -5}  # decodes, impossible

        def nodes(records: list[Doc]) -> None:
            next(n for n in records if n["name"] == "c1")["cpus"] = 1e30

        _spoil(fake, "jobs", "v0.0.44", jobs)
        _spoil(fake, "nodes", "v0.0.45", nodes)
        caplog.clear()
        await polled.again()
        st = p.status.endpoints
        # the endpoints answered: only the bad records are refused, the rest is fresh
        assert st["jobs"].last_ok and st["nodes"].last_ok, (st["jobs"].last_error, st["nodes"].last_error)
        snap = p.snapshot
        assert snap is not None and snap.fetched_at["jobs"] == polled.clock.now
        assert len(snap.jobs) == len(good.jobs) - len(cpu_jobs) - 1
        assert len(snap.nodes) == len(good.nodes) - 1
        assert st["jobs"].refused_now["undecodable"][0] == len(cpu_jobs)
        assert st["jobs"].refused_now["priority"][0] == 1
        answer = polled.service.answer(CPU)
        assert answer.demand.held is not None and answer.desired >= 6  # held, never lowered
        # one warning per endpoint and reason — not one per record
        warned = _warnings(caplog)
        assert len(warned) == 3, warned
        assert any(
            w.startswith(f"jobs records refused for undecodable: {len(cpu_jobs)} in the data") for w in warned
        )
        assert any(
            w.startswith("nodes records refused for undecodable: 1 in the data held (first: node c1")
            for w in warned
        )
        metrics, page = await _pages(polled)
        n = len(cpu_jobs)
        assert f'slurm_exporter_records_refused{{endpoint="jobs",reason="undecodable"}} {n}.0' in metrics
        assert 'slurm_exporter_records_refused{endpoint="jobs",reason="priority"} 1.0' in metrics
        assert 'slurm_exporter_records_refused{endpoint="nodes",reason="undecodable"} 1.0' in metrics
        assert 'slurm_exporter_records_dropped_total{endpoint="jobs",reason="cpus"} 0.0' in metrics
        assert 'slurm_autoscaler_held{partition="cpu",target="cpu"} 1.0' in metrics
        assert "NOW: jobs records refused for undecodable" in page
        assert "HELD on records dropped as impossible" in page
        # the same bad records again: nothing more in the log (the metrics carry the counts)
        caplog.clear()
        await polled.again()
        await polled.again()
        assert _warnings(caplog) == []
        # valid again: one line per reason that ended, the gauges back to 0
        fake.override.clear()
        caplog.clear()
        await polled.again()
        ended = [r.getMessage() for r in caplog.records if "none any more" in r.getMessage()]
        assert len(ended) == 3, ended
        metrics, page = await _pages(polled)
        assert 'slurm_exporter_records_refused{endpoint="jobs",reason="undecodable"} 0.0' in metrics
        assert "NOW:" not in page
        assert polled.service.answer(CPU).demand.held is None


async def test_an_error_answer_is_logged_as_one_readable_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeSlurmrestd(DATA)
    async with polling(fake, [CPU]) as polled:
        fake.faults = {"jobs": "pretty:504"}
        caplog.clear()
        await polled.again()
        warned = _warnings(caplog)
        assert warned == ["poll jobs: failed: HTTP 504 Gateway Timeout: slurmrestd gave no error text"], (
            warned
        )
        _, page = await _pages(polled)
        assert "HTTP 504 Gateway Timeout: slurmrestd gave no error text" in page
        assert '"meta"' not in page and '{ "errors"' not in page


async def test_a_lasting_error_is_logged_when_it_starts_changes_and_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeSlurmrestd(DATA)
    async with polling(fake, [CPU]) as polled:
        endpoints = [e for e, st in polled.poller.status.endpoints.items() if st.last_ok]
        fake.token = "rotated-elsewhere"  # our token expired: every request is refused
        caplog.clear()
        for _ in range(10):
            await _poll(polled)
        warned = _warnings(caplog)
        # one line per endpoint when it started, none for the 9 polls after (before: 6 a poll)
        assert len(warned) == len(endpoints), warned
        assert all(": failed: HTTP 401" in w for w in warned), warned
        # the cause changes (slurmrestd now answers 503): one line each, saying what it was before
        fake.token = "good-token"
        fake.faults = dict.fromkeys(endpoints, "status:503:slurmctld busy")
        caplog.clear()
        await _poll(polled)
        changed = _warnings(caplog)
        assert len(changed) == len(endpoints) and all("(before: http_401, 10 time(s)" in w for w in changed)
        _, page = await _pages(polled)
        assert page.count("NOW: poll ") == len(endpoints)
        # it ends: one line each with the count
        fake.faults = {}
        caplog.clear()
        await polled.again()
        assert _warnings(caplog) == []
        ended = [r.getMessage() for r in caplog.records if "answering again after" in r.getMessage()]
        assert len(ended) == len(endpoints), ended
        assert all("after 1 time(s)" in line for line in ended)
        assert "good-token" not in caplog.text and "rotated-elsewhere" not in caplog.text


async def test_a_token_file_gone_is_said_once_and_the_data_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What must keep holding: the token file removed (a Secret unmounted) — a clear error naming the file,
    never the token, the last good data served, and once it is back the next request uses it."""
    caplog.set_level(logging.INFO)
    token = tmp_path / "token"
    token.write_text("good-token\n")
    fake = FakeSlurmrestd(DATA)
    clock = Clock(2_000_000.0)
    async with serve(fake) as url:
        client = SlurmClient(ClientConfig(base_url=url, token=TokenSource(token_file=token), retries=0))
        p = Poller(SlurmSession(client), PollerConfig(), clock=clock)
        async with client:
            good = await p.poll_once()
            assert good is not None
            token.unlink()
            caplog.clear()
            for _ in range(5):
                clock.now += 5
                assert await p.poll_once() is None  # nothing could be asked: no new snapshot
            assert p.snapshot is good  # the last good data is served
            jobs = p.status.endpoints["jobs"]
            assert jobs.errors == {"token": 5} and f"cannot read token file {token}" in jobs.last_error
            warned = _warnings(caplog)
            assert len(warned) == len(p.status.endpoints), warned  # one per endpoint, once in 5 polls
            token.write_text("SLURM_JWT=rotated\n")
            fake.token = "rotated"
            clock.now += 5
            assert await p.poll_once() is not None
            assert fake.requests[-1][2]["X-SLURM-USER-TOKEN"] == "rotated"
    assert "good-token" not in caplog.text and "rotated" not in caplog.text
