"""The poller against a real local HTTP server serving the lab's recorded answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.accounting import ENDED_STATES
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.model import ENDPOINTS
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from exporter.versions import adapter_for
from slurm_keda.configs import poller_config
from slurm_keda.settings import PollSettings
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED, ROOT
from testkit.tools import Clock, no_sleep

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")


@pytest.fixture
async def fake_url() -> AsyncIterator[tuple[FakeSlurmrestd, str]]:
    fake = FakeSlurmrestd(DATA)
    async with serve(fake) as url:
        yield fake, url


def _poller(
    url: str, clock: Clock, token_file: Path | None = None, api_version: str | None = None, **cfg: object
) -> Poller:
    token = TokenSource(token_file=token_file) if token_file else TokenSource(token="good-token")
    client = SlurmClient(ClientConfig(base_url=url, token=token, retries=0), sleep=no_sleep)
    session = SlurmSession(client, api_version=api_version)
    return Poller(session, PollerConfig(**cfg), clock=clock)  # type: ignore[arg-type]


async def test_first_poll_negotiates_highest_and_builds_snapshot(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    _fake, url = fake_url
    clock = Clock(1_000_000.0)
    p = _poller(url, clock)
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and p.snapshot is snap
    assert snap.api_version == "v0.0.45"
    assert p.status.offered_versions == ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    jobs, env = adapter_for("v0.0.44").jobs((DATA / "v0.0.44" / "jobs.json").read_bytes())  # see below
    assert list(snap.jobs) == jobs
    assert snap.slurm_version == "26.05.5" and snap.cluster == env.cluster
    assert len(snap.nodes) == len(adapter_for("v0.0.45").nodes((DATA / "v0.0.45/nodes.json").read_bytes())[0])
    assert snap.diag is not None
    assert snap.fetched_at == dict.fromkeys(
        ("jobs", "nodes", "partitions", "diag", "licenses", "reservations"), clock.now
    )
    assert p.status.last_poll_ok


async def test_forced_version(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    _, url = fake_url
    p = _poller(url, Clock(1_000_000.0), api_version="v0.0.42")
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and snap.api_version == "v0.0.42"


async def test_unsupported_version_is_recorded_not_raised(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    fake.versions = ["v0.0.39"]
    p = _poller(url, Clock(1_000_000.0))
    async with p.client:
        assert await p.poll_once() is None
    assert p.status.negotiation.errors == {"version": 1}
    assert "no common slurmrestd API version" in p.status.last_error
    assert not p.status.last_poll_ok


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("status:500:Unable to query nodes", "http_500"),
        ("not_json", "not_json"),
        ("cut_json", "truncated"),
        ("truncate", "truncated"),
        ("shape", "shape"),
        ("deep", "shape"),  # a RecursionError escaped the typed errors: no snapshot at all, uncounted
    ],
)
async def test_failed_endpoint_keeps_last_good_data(
    fake_url: tuple[FakeSlurmrestd, str], fault: str, kind: str
) -> None:
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    p = _poller(url, clock, use_update_time=False)
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        fake.faults = {"nodes": fault, "jobs": fault}
        clock.now += 5
        second = await p.poll_once()
        assert second is not None and second is not first
        assert second.jobs == first.jobs and second.nodes == first.nodes
        assert second.fetched_at["jobs"] == first.fetched_at["jobs"]  # staleness shows
        assert second.fetched_at["diag"] == clock.now
        assert p.status.endpoints["jobs"].errors == {kind: 1}
        assert p.status.endpoints["nodes"].errors == {kind: 1}
        # every endpoint failing: no new snapshot, the last good one stays
        fake.faults = dict.fromkeys(
            ("jobs", "nodes", "partitions", "diag", "licenses", "reservations"), fault
        )
        clock.now += 5
        assert await p.poll_once() is None
        assert p.snapshot is second and not p.status.last_poll_ok
        # recovery
        fake.faults = {}
        clock.now += 5
        third = await p.poll_once()
        assert third is not None and third.fetched_at["jobs"] == clock.now


async def test_slurm_errors_in_2xx_body_are_errors(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    fake.override["diag"] = b'{"errors": [{"description": "slurmctld is down", "error_number": 1}]}'
    p = _poller(url, Clock(1_000_000.0))
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and snap.diag is None
    assert p.status.endpoints["diag"].errors.keys() <= {"slurm_error", "shape"}
    assert "slurmctld is down" in p.status.endpoints["diag"].last_error


async def test_update_time_304_and_empty_list_reuse_held_data(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    p = _poller(url, clock, full_refresh=60.0, incremental_jobs=False)  # update_time for /jobs as well
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        fake.faults = {"nodes": "304", "jobs": "empty_list"}
        clock.now += 5
        second = await p.poll_once()
    assert second is not None
    assert second.nodes == first.nodes and second.jobs == first.jobs
    assert second.fetched_at["nodes"] == clock.now
    sent = {path.split("/")[3]: q for path, q, _ in fake.requests[-6:]}
    lu = str(int(first.last_update["jobs"]))
    assert sent["jobs"] == {"update_time": lu} and sent["nodes"] == {"update_time": lu}
    assert sent["diag"] == {}
    assert p.status.endpoints["nodes"].unchanged == 1 and p.status.endpoints["jobs"].unchanged == 1


async def test_full_refresh_after_interval(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    p = _poller(url, clock, full_refresh=30.0)
    async with p.client:
        await p.poll_once()
        clock.now += 31
        await p.poll_once()
    sent = {path.split("/")[3]: q for path, q, _ in fake.requests[-6:]}
    assert sent["jobs"] == {} and sent["nodes"] == {}


async def test_update_time_500_falls_back_to_full_fetch(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    p = _poller(url, clock)
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        fake.faults = {"nodes": "status:500:Unable to query partitions"}
        fake.fault_times = {"nodes": 1}
        clock.now += 5
        second = await p.poll_once()
        clock.now += 5
        await p.poll_once()
    assert second is not None and second.nodes == first.nodes
    assert p.status.endpoints["nodes"].update_time_broken
    node_queries = [q for path, q, _ in fake.requests if "/nodes" in path]
    assert node_queries[-1] == {}  # later polls no longer send update_time to /nodes
    assert p.status.endpoints["nodes"].errors == {}


@pytest.mark.parametrize("fault", ["status:503", "status:502", "hang"])
async def test_update_time_requests_are_retried(fake_url: tuple[FakeSlurmrestd, str], fault: str) -> None:
    """A blip on an ``update_time`` request (/jobs included) is retried as ``--retries`` says, not a poll
    interval of failed data (issue 20 item 7)."""
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    token = TokenSource(token="good-token")
    # a listing's first byte may take until --stream-timeout (slurmrestd renders it whole first)
    cfg = ClientConfig(
        base_url=url, token=token, retries=2, timeout=0.5, idle_timeout=0.5, stream_timeout=1.0
    )
    p = Poller(SlurmSession(SlurmClient(cfg, sleep=no_sleep)), PollerConfig(), clock=clock)
    fake.hang_seconds = 2.0
    async with p.client:
        assert await p.poll_once() is not None
        fake.faults = {"jobs": fault, "nodes": fault}
        fake.fault_times = {"jobs": 1, "nodes": 1}
        clock.now += 5
        n = len(fake.requests)
        assert await p.poll_once() is not None
    for name in ("jobs", "nodes"):
        queries = [q for path, q, _ in fake.requests[n:] if path.rstrip("/").endswith(f"/{name}")]
        assert len(queries) == 2 and all("update_time" in q for q in queries)
        assert p.status.endpoints[name].last_ok and p.status.endpoints[name].errors == {}


async def test_update_time_500_is_not_retried_with_update_time(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    clock = Clock(1_000_000.0)
    token = TokenSource(token="good-token")
    client = SlurmClient(ClientConfig(base_url=url, token=token, retries=2), sleep=no_sleep)
    p = Poller(SlurmSession(client), clock=clock)
    async with p.client:
        assert await p.poll_once() is not None
        fake.faults, fake.fault_times = {"nodes": "status:500:Unable to query partitions"}, {"nodes": 1}
        clock.now += 5
        n = len(fake.requests)
        assert await p.poll_once() is not None
    queries = [q for path, q, _ in fake.requests[n:] if "/nodes" in path]
    assert [("update_time" in q) for q in queries] == [True, False]  # at once to the full fetch


async def test_token_rotation_during_run(fake_url: tuple[FakeSlurmrestd, str], tmp_path: Path) -> None:
    fake, url = fake_url
    token_file = tmp_path / "token"
    token_file.write_text("good-token")
    p = _poller(url, Clock(1_000_000.0), token_file=token_file)
    async with p.client:
        assert await p.poll_once() is not None
        fake.token = "rotated-token"
        token_file.write_text("rotated-token\n")
        assert await p.poll_once() is not None
    assert {h["X-SLURM-USER-TOKEN"] for _, _, h in fake.requests[-6:]} == {"rotated-token"}
    assert all(not st.errors for st in p.status.endpoints.values())


async def test_run_loop_wakes_waiters_and_never_overlaps(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = fake_url
    fake.delay = 0.02
    p = _poller(url, Clock(1_000_000.0), interval=0.01)
    async with p.client:
        task = asyncio.create_task(p.run(), name="poller")
        try:
            s1 = await asyncio.wait_for(p.wait_next(None), 5)
            fake.faults = {"jobs": "not_json"}  # errors never stop the loop
            s2 = await asyncio.wait_for(p.wait_next(s1), 5)
            s3 = await asyncio.wait_for(p.wait_next(s2), 5)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert s1 is not s2 is not s3
    assert p.status.endpoints["jobs"].errors["not_json"] >= 1
    assert max(fake.max_in_flight.values()) == 1


async def test_poll_soon_cuts_the_interval_short(fake_url: tuple[FakeSlurmrestd, str]) -> None:
    # the bridge calls it after a submission, so the new job's placement shows before the next interval
    _, url = fake_url
    p = _poller(url, Clock(1_000_000.0), interval=3600.0)
    async with p.client:
        task = asyncio.create_task(p.run(), name="poller")
        try:
            first = await asyncio.wait_for(p.wait_next(None), 5)
            polls = p.status.polls
            p.poll_soon()
            second = await asyncio.wait_for(p.wait_next(first), 5)  # not an hour later
            assert p.status.polls == polls + 1
            with pytest.raises(TimeoutError):  # and only one early poll per call
                await asyncio.wait_for(p.wait_next(second), 0.3)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_burst_of_poll_soon_polls_at_most_once_per_early_gap(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    # 1,000 submissions in a few seconds must not become back-to-back polls of every endpoint
    _, url = fake_url
    p = _poller(url, Clock(1_000_000.0), interval=3600.0, early_gap=0.3)
    async with p.client:
        task = asyncio.create_task(p.run(), name="poller")
        try:
            await asyncio.wait_for(p.wait_next(None), 5)
            polls, start = p.status.polls, asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - start < 1.5:
                p.poll_soon()
                await asyncio.sleep(0.01)
            early = p.status.polls - polls
            assert 3 <= early <= 6, early  # ~1.5 s / 0.3 s, not one per call (150)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("eyJhbGciOi.first\neyJhbGciOi.second\n", "more than one token line"),  # a header can't carry it
        ("tok\x00en", "more than one token line"),
        ("", "is empty"),
        (None, "No such file"),
    ],
    ids=["two-lines", "control-character", "empty", "missing"],
)
async def test_a_bad_token_file_is_its_own_counted_error(
    fake_url: tuple[FakeSlurmrestd, str], tmp_path: Path, content: str | None, why: str
) -> None:
    # a token with a newline raised an uncounted ValueError on every poll; a missing file was "unreachable"
    _, url = fake_url
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    clock = Clock(1_000_000.0)
    p = _poller(url, clock, token_file=token_file)
    async with p.client:
        assert await p.poll_once() is None  # no endpoint could be asked: no snapshot, nothing believed
    errors = {ep: st.errors for ep, st in p.status.endpoints.items() if st.errors}
    negotiation = p.status.negotiation.errors
    assert {"token"} == {k for e in [*errors.values(), negotiation] for k in e}, (errors, negotiation)
    assert why in p.status.negotiation.last_error or any(
        why in st.last_error for st in p.status.endpoints.values()
    )
    for secret in ("eyJhbGciOi", "tok"):
        assert all(secret not in (st.last_error or "") for st in p.status.endpoints.values())


async def test_records_with_impossible_values_are_dropped_and_counted(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    # node CPUs -9 (from a fake slurmrestd) once moved a target's desired nodes from 5 to 3, unnoticed
    fake, url = fake_url
    p = _poller(url, Clock(1_000_000.0), use_update_time=False)
    async with p.client:
        good = await p.poll_once()
        fake.faults = {"jobs": "impossible", "nodes": "impossible"}
        bad = await p.poll_once()
    assert good is not None and bad is not None
    assert len(bad.jobs) == len(good.jobs) - 1 and all(j.job_id > 0 for j in bad.jobs)
    assert len(bad.nodes) == len(good.nodes) - 1 and all(n.cpus >= 0 for n in bad.nodes)
    assert (p.status.endpoints["jobs"].dropped, p.status.endpoints["nodes"].dropped) == (1, 1)
    assert p.status.endpoints["jobs"].last_ok  # the endpoint answered; one record was not believed


async def test_jobs_are_listed_with_v0044_where_v0045_hides_exclusivity(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    # Slurm 26.05's v0.0.45 reports shared: [] for every job; v0.0.44 still says ["none"] for --exclusive
    fake, url = fake_url
    p = _poller(url, Clock(1_000_000.0))
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and snap.api_version == "v0.0.45"  # every other endpoint
    assert p.status.jobs_api_version == "v0.0.44"
    jobs_paths = {path for path, _, _ in fake.requests if path.endswith("/jobs/")}
    assert jobs_paths == {"/slurm/v0.0.44/jobs/"}
    assert {path for path, _, _ in fake.requests if path.endswith("/nodes/")} == {"/slurm/v0.0.45/nodes/"}
    (pair,) = [j for j in snap.jobs if j.name == "exclusive_pair"]  # the demo's -N2 --exclusive job
    assert pair.exclusive
    v45, _ = adapter_for("v0.0.45").jobs((DATA / "v0.0.45" / "jobs.json").read_bytes())
    assert not [j for j in v45 if j.exclusive]  # what listing with v0.0.45 would have said
    # without v0.0.44 on offer, and when a version is forced, /jobs follows the negotiated version
    for versions, forced in ((["v0.0.45"], None), (["v0.0.44", "v0.0.45"], "v0.0.45")):
        fake.versions, fake.requests[:] = versions, []
        p = _poller(url, Clock(1_000_000.0), api_version=forced)
        async with p.client:
            assert await p.poll_once() is not None
        assert {path for path, _, _ in fake.requests if path.endswith("/jobs/")} == {"/slurm/v0.0.45/jobs/"}


async def test_shares_are_fetched_only_when_asked_and_at_their_own_interval(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    fake, url = fake_url
    fake.offered = (*fake.offered, "shares")
    fake.override["shares"] = (ROOT / "tests/data/accounting/slurm-26.05.5/v0.0.45/shares.json").read_bytes()
    clock = Clock(1000.0)

    def shares_requests() -> int:
        return sum(1 for path, _, _ in fake.requests if path.rstrip("/").endswith("/shares"))

    plain = _poller(url, clock)
    async with plain.client:  # the default endpoints: no /shares
        assert (await plain.poll_once()) is not None
    assert shares_requests() == 0
    p = _poller(url, clock, endpoints=(*ENDPOINTS, "shares"), intervals={"shares": 60.0})
    async with p.client:
        first = await p.poll_once()
        assert first is not None and len(first.shares) == 7
        for _ in range(3):
            clock.now += 20.0
            snap = await p.poll_once()
            assert snap is not None and snap.shares == first.shares  # held between fetches
        assert shares_requests() == 2  # at 1000 s, then at 1060 s
        fake.faults["shares"] = "500"
        clock.now += 60.0
        failed = await p.poll_once()
        assert failed is not None and failed.shares == first.shares  # the last good data stays
        assert p.status.endpoints["shares"].last_ok is False
        assert shares_requests() == 3  # tried once, not again at every poll
        clock.now += 1.0
        await p.poll_once()
        assert shares_requests() == 3


async def test_ended_jobs_are_read_in_a_moving_window_and_counted_once(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    fake, url = fake_url
    recorded = ROOT / "tests/data/accounting/slurm-26.05.5/v0.0.45/slurmdb_jobs.json"
    ends = sorted(j["time"]["end"] for j in json.loads(recorded.read_bytes())["jobs"] if j["time"]["end"])
    fake.override["slurmdb_jobs"] = recorded.read_bytes()
    clock = Clock(ends[3] - 0.5)  # the exporter starts before the fourth end: those before are history
    started = clock.now
    fake.clock = clock  # slurmdbd's "now"
    p = _poller(url, clock, endpoints=(*ENDPOINTS, "slurmdb_jobs"), intervals={"slurmdb_jobs": 30.0})
    async with p.client:
        await p.poll_once()
        assert p.status.accounting is None
        assert p.status.accounting_note == "not offered by slurmrestd (no openapi/slurmdbd)"
        fake.offered = (*fake.offered, "slurmdb_jobs")  # slurmrestd restarted with openapi/slurmdbd
        p.session.forget()
        await p.poll_once()
        acc = p.status.accounting
        assert acc is not None and p.status.accounting_note == "on"
        # the jobs that ended since the start, up to now (slurmdbd has no later end yet)
        assert sum(acc.ended.values()) == sum(1 for e in ends if started <= e <= int(clock.now) + 1) == 2
        ((query),) = fake.slurmdb_job_queries
        assert ("start_time", "now-120") in query and ("end_time", "now+1") in query
        assert sorted(v for k, v in query if k == "state") == sorted(ENDED_STATES)  # one state= each
        for _ in range(4):  # every 30 s: the later ends come in, the ones read already not again
            clock.now += 30.0
            await p.poll_once()
        acc = p.status.accounting
        assert acc is not None and sum(acc.ended.values()) == sum(1 for e in ends if e >= started) == 6
        # each window reaches back to the last read's start, 120 s more
        assert [dict(q)["start_time"] for q in fake.slurmdb_job_queries] == ["now-120"] + ["now-150"] * 4


async def test_limits_are_read_where_offered_at_their_interval_and_held(
    fake_url: tuple[FakeSlurmrestd, str],
) -> None:
    fake, url = fake_url
    recorded = ROOT / "tests/data/accounting/slurm-26.05.5/v0.0.45"
    for what in ("qos", "associations"):
        fake.override[what] = (recorded / f"{what}.json").read_bytes()
    clock = Clock(1000.0)
    config = poller_config(PollSettings.model_validate({"limits_interval": 60.0}))
    assert {"qos", "associations"} <= set(config.endpoints)  # --accounting is on by default
    p = Poller(SlurmSession(_poller(url, clock).client), config, clock=clock)

    def limit_requests() -> int:
        return sum(1 for path, _, _ in fake.requests if path.startswith("/slurmdb/"))

    async with p.client:
        snap = await p.poll_once()  # slurmrestd without openapi/slurmdbd: not asked, nothing failed
        assert snap is not None and snap.qos == () and limit_requests() == 0
        assert not p.status.last_error
        fake.offered = (*fake.offered, "qos", "associations")
        p.session.forget()
        first = await p.poll_once()
        assert first is not None and {q.name for q in first.qos} == {"normal", "high"}
        assert len(first.associations) == 8 and limit_requests() == 2
        clock.now += 30.0
        held = await p.poll_once()
        assert held is not None and held.qos == first.qos and limit_requests() == 2  # not due yet
        fake.faults["qos"] = "500"
        clock.now += 30.0
        failed = await p.poll_once()
        assert failed is not None and failed.qos == first.qos  # the last good limits stay
        assert p.status.endpoints["qos"].last_ok is False and limit_requests() == 4
