"""Incremental jobs: the pure diff and merge, and the poller keeping jobs from ``/jobs/state`` over real HTTP
against a job table that answers as slurmrestd 26.05 does (testkit.fake_jobs)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass

import msgspec
import pytest

from exporter import incremental, jobsync, jobwatch
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.collector import jobs_sync_families
from exporter.jobsync import FINAL_STATES
from exporter.model import Job, Snapshot
from exporter.poller import RENDER_SECONDS_PER_JOB, Poller
from exporter.pollstate import PollerConfig
from exporter.server import jobs_freshness
from exporter.session import SlurmSession
from testkit.budget import seeds
from testkit.fake_jobs import JobTable, num
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.jobdiff import by_id
from testkit.jobdiff import job_differences as differences
from testkit.paths import RECORDED, RECORDED_2605
from testkit.tools import Clock, no_sleep

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")


def _job(job_id: int, state: str = "PENDING", **kw: object) -> Job:
    return Job(job_id=job_id, state=state, **kw)  # type: ignore[arg-type]


# -- pure -------------------------------------------------------------------------------------------------


def test_parse_states_folds_entries_into_their_records() -> None:
    body = json.dumps(
        {
            "jobs": [
                {"job_id": "1", "state": ["PENDING"]},
                {"job_id": "4_1", "state": ["RUNNING"]},
                {"job_id": "2_2", "state": ["PENDING"]},
                {"job_id": "2_3", "state": ["PENDING"]},
                {"job_id": "5+0", "state": ["RUNNING", "CONFIGURING"]},
                {"job_id": "6+1", "state": ["RUNNING"]},
                {"job_id": "junk", "state": ["RUNNING"]},
                {"job_id": "7", "state": []},
            ],
            "errors": [],
        }
    ).encode()
    read = jobsync.parse_states(body)
    assert read.states == {
        1: ("PENDING", frozenset(), 1),
        4: ("RUNNING", frozenset(), 1),
        2: ("PENDING", frozenset(), 2),
        5: ("RUNNING", frozenset({"CONFIGURING"}), 1),
        6: ("RUNNING", frozenset(), 1),
        7: jobsync.UNREAD_STATE,  # read with /job/7, not taken as gone
    }
    assert read.unreadable == 1  # "junk": any held job may be it


def test_changes_drops_no_job_while_an_entry_id_was_unreadable() -> None:
    held = [_job(1), _job(2, "RUNNING")]
    states = {1: jobsync.signature(held[0])}
    assert jobsync.changes(held, states).gone == {2}
    assert jobsync.changes(held, states, complete=False).gone == frozenset()
    assert jobsync.changes(held, {**states, 2: jobsync.UNREAD_STATE}).fetch == (2,)


def test_parse_states_refuses_errors_and_bad_bodies() -> None:
    from exporter.errors import NotJSONError, SlurmReportedError

    with pytest.raises(SlurmReportedError, match="Unspecified error"):
        jobsync.parse_states(b'{"jobs": [], "errors": [{"description": "Unspecified error"}]}')
    with pytest.raises(NotJSONError):
        jobsync.parse_states(b"<html>")


def test_signature_of_every_recorded_record_matches_the_state_listing() -> None:
    """The recorded 26.05 records (array record with 18 pending tasks, split tasks, CONFIGURING flags) against
    the /jobs/state the table renders for them: no record is read again while nothing moved."""
    from exporter.versions import adapter_for

    table = JobTable.recorded()
    jobs, _ = adapter_for("v0.0.45").jobs(table.listing() or b"")
    states = jobsync.parse_states(table.states()).states
    assert {j.job_id: jobsync.signature(j) for j in jobs} == states
    assert states[3] == ("PENDING", frozenset(), 18)  # 3-20%2


def test_changes_new_moved_gone_and_refused() -> None:
    held = [_job(1), _job(2, "RUNNING"), _job(3)]
    states = {
        1: ("PENDING", frozenset(), 1),  # same
        2: ("COMPLETED", frozenset(), 1),  # moved
        4: ("PENDING", frozenset(), 1),  # new
        5: ("RUNNING", frozenset(), 1),  # refused at this signature
        6: ("RUNNING", frozenset(), 1),  # refused at another signature: read again
    }
    refused = {5: ("RUNNING", frozenset(), 1), 6: ("PENDING", frozenset(), 1)}
    got = jobsync.changes(held, states, refused)
    assert got.fetch == (2, 4, 6)
    assert got.gone == frozenset({3})


def test_merge_replaces_keeps_order_appends_and_drops() -> None:
    held = (_job(1), _job(2), _job(3), _job(9))
    fetched = {
        2: [_job(2, "RUNNING"), _job(7, "RUNNING")],  # array leader: a sibling came along
        5: [_job(5)],  # new
        9: [],  # Slurm no longer knows it
    }
    out = jobsync.merge(held, fetched, gone={3})
    assert [(j.job_id, j.state) for j in out] == [
        (1, "PENDING"),
        (2, "RUNNING"),
        (7, "RUNNING"),
        (5, "PENDING"),
    ]


def test_job_update_rpcs_sums_the_job_changing_types() -> None:
    from exporter.model import Diag

    assert jobsync.job_update_rpcs(None) is None
    assert jobsync.job_update_rpcs(Diag()) is None
    d = Diag(rpc_counts={"REQUEST_UPDATE_JOB": 3, "REQUEST_TOP_JOB": 1, "REQUEST_JOB_INFO": 40})
    assert jobsync.job_update_rpcs(d) == 4


def test_recorded_diag_carries_rpc_counts_in_every_version() -> None:
    from exporter.versions import adapter_for

    for vdir in sorted(RECORDED.glob("slurm-*/v0.0.*")):
        if not (vdir / "diag.json").exists() or vdir.name == "v0.0.37":
            continue
        diag, _ = adapter_for(vdir.name).diag((vdir / "diag.json").read_bytes())
        assert diag.rpc_counts.get("MESSAGE_NODE_REGISTRATION_STATUS", 0) > 0, vdir
        assert diag.rpc_seconds["MESSAGE_NODE_REGISTRATION_STATUS"] > 0, vdir


# -- the poller over real HTTP ---------------------------------------------------------------------------


@dataclass
class Rig:
    fake: FakeSlurmrestd
    table: JobTable
    url: str
    clock: Clock

    def poller(self, lanes: int = 4, idle: float = 30.0, **cfg: object) -> Poller:
        """A poller of the fake; no sweep unless a test asks (the others count their reads exactly)."""
        cfg.setdefault("jobs_sweep_rate", 0.0)
        token = TokenSource(token="good-token")
        config = ClientConfig(
            base_url=self.url,
            token=token,
            retries=0,
            max_concurrency=lanes,
            idle_timeout=idle,
            timeout=min(idle, 30.0),
        )
        client = SlurmClient(config, sleep=no_sleep)
        return Poller(SlurmSession(client), PollerConfig(**cfg), clock=self.clock)  # type: ignore[arg-type]

    async def listed(self) -> Snapshot:
        """A snapshot from a fresh poller's full listing (the reference)."""
        p = self.poller(incremental_jobs=False)
        async with p.client:
            snap = await p.poll_once()
        assert snap is not None
        return snap

    def set_rpcs(
        self,
        updates: int,
        users: dict[str, int] | None = None,
        pending: int = 0,
        submitted: int | None = None,
    ) -> None:
        """slurmctld's /diag with ``updates`` job-changing RPCs (and ``users``' RPC counts, if given;
        ``pending`` jobs pending; ``submitted`` jobs submitted and none ended, if given)."""
        doc = json.loads((RECORDED_2605 / "diag.json").read_bytes())
        stats = doc["statistics"]
        stats["jobs_pending"] = pending
        if submitted is not None:
            stats["jobs_submitted"] = submitted
            stats["jobs_completed"] = stats["jobs_canceled"] = stats["jobs_failed"] = 0
        doc["statistics"]["rpcs_by_message_type"].append(
            {"type_id": 3001, "message_type": "REQUEST_UPDATE_JOB", "count": updates, "total_time": 10}
        )
        if users is not None:
            doc["statistics"]["rpcs_by_user"] = [
                {"user_id": 1000 + i, "user": u, "count": n, "total_time": 1, "average_time": num(0)}
                for i, (u, n) in enumerate(sorted(users.items()))
            ]
        self.fake.override["diag"] = json.dumps(doc).encode()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    table = JobTable.recorded()
    fake = FakeSlurmrestd(DATA, jobs_table=table)
    async with serve(fake) as url:
        r = Rig(fake, table, url, Clock(1_000_000.0))
        r.set_rpcs(0)
        yield r


async def test_steady_state_reads_only_jobs_state(rig: Rig) -> None:
    """The first poll counts the jobs (/jobs/state: /diag's tally may be 30 s old) and lists them; the
    polls after read /jobs/state alone while no job moved."""
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        assert rig.table.reads == {"jobs/state": 1, "jobs": 1}
        for _ in range(3):
            rig.clock.now += 1
            snap = await p.poll_once()
    assert rig.table.reads == {"jobs": 1, "jobs/state": 4}
    sync = p.status.jobs_sync
    assert sync.incremental and sync.incremental_fetches == 3 and sync.job_reads == 0
    assert sync.full_listings == {"first": 1}
    assert snap is not None and snap.listed_at == {"jobs": 1_000_000.0}
    assert snap.requested_at["jobs"] == 1_000_003.0 and snap.fetched_at["jobs"] == 1_000_003.0


async def test_submit_start_end_purge_and_array_split_are_read_one_by_one(rig: Rig) -> None:
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        new = t.submit()
        t.start(6, nodes="c2")
        t.end(1, "COMPLETED")
        t.purge(2)
        split = t.start_array_task(3)
        t.set(14, job_state=["RUNNING"])  # CONFIGURING flag cleared
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None
    # new, 6, 1, 14, the array's record 3 and the split task (new id; it also comes along with 3)
    assert p.status.jobs_sync.last_changed == 6
    assert p.status.jobs_sync.last_gone == 1
    assert t.reads["jobs"] == 1 and t.reads["job"] == 6
    assert differences(snap.jobs, (await rig.listed()).jobs) == []
    jobs = by_id(snap.jobs)
    assert jobs[new].state == "PENDING" and jobs[6].state == "RUNNING" and 2 not in jobs
    assert jobs[split].array_task_id == 3 and jobs[3].array_pending_tasks == 17


async def test_a_failed_single_read_changes_nothing_and_the_next_poll_catches_up(rig: Rig) -> None:
    t, fake = rig.table, rig.fake
    p = rig.poller(jobs_publish_every=0)  # no reads published mid-poll (after 0.25 s on a loaded machine)
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        t.start(6)
        t.end(1)
        fake.faults["job"] = "status:500:slurmctld busy"
        fake.fault_times["job"] = 1
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and snap.jobs == first.jobs  # not half-updated
        assert snap.fetched_at["jobs"] == first.fetched_at["jobs"]  # the jobs data shows its age
        st = p.status.endpoints["jobs"]
        assert not st.last_ok and st.errors == {"http_500": 1}
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []
    assert p.status.endpoints["jobs"].last_ok


async def test_a_burst_of_reads_is_published_as_it_arrives_and_never_steps_back(rig: Rig) -> None:
    """Jobs read one by one reach the snapshot while the poll's other reads go on (the bridge binds a started
    job's pods sooner); the jobs' "as of" waits for the last read; a failed read keeps what was published."""
    t, fake = rig.table, rig.fake
    p = rig.poller(lanes=1, jobs_publish_every=0.001)
    seen: list[Snapshot] = []
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        watcher = asyncio.create_task(_collect(p, first, seen))
        try:
            await asyncio.sleep(0)
            new = [t.submit() for _ in range(4)]
            fake.delay = 0.02
            rig.clock.now += 1
            done = await p.poll_once()
            await asyncio.sleep(0)
            assert done is not None and {j.job_id for j in done.jobs} >= set(new)
            partial = [s for s in seen if s is not done]
            visible = [len(set(new) & {j.job_id for j in s.jobs}) for s in partial]
            assert visible == [1, 2, 3, 4]  # one more job in each, in read order; never fewer
            assert all(s.jobs_as_of == first.jobs_as_of for s in partial)  # as of the last complete read
            assert done.jobs_as_of == first.jobs_as_of + 1
            assert p.status.jobs_sync.partial_snapshots == 4
            more = [t.submit() for _ in range(4)]
            fake.faults[f"job/{more[2]}"] = "status:500:slurmctld busy"
            rig.clock.now += 1
            failed = await p.poll_once()
            assert failed is not None and not p.status.endpoints["jobs"].last_ok
            ids = {j.job_id for j in failed.jobs}
            assert set(more[:2]) <= ids and not set(more[2:]) & ids  # what was read stays; nothing steps back
            assert failed.jobs_as_of == done.jobs_as_of
            del fake.faults[f"job/{more[2]}"]
            rig.clock.now += 1
            healed = await p.poll_once()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
    assert healed is not None and differences(healed.jobs, (await rig.listed()).jobs) == []


async def test_the_changes_are_published_before_the_rereads_of_the_same_poll(rig: Rig) -> None:
    """Re-reads (the sweep here) follow the jobs whose state moved in the same poll: those are published
    as soon as they are in, not after the re-reads."""
    t, fake = rig.table, rig.fake
    p = rig.poller(lanes=1, jobs_publish_every=3600.0, jobs_sweep_rate=5.0)
    async with p.client:
        first = await p.poll_once()
        assert first is not None
        seen: list[Snapshot] = []
        watcher = asyncio.create_task(_collect(p, first, seen))
        try:
            t.start(6, nodes="c2")
            new = t.submit()
            fake.delay = 0.02
            rig.clock.now += 1
            done = await p.poll_once()
            await asyncio.sleep(0)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
    sync = p.status.jobs_sync
    assert sync.rereads["sweep"] == 3 and len(sync.last_read) == 5  # two changes, three swept after them
    (partial,) = [s for s in seen if s is not done]  # one, at the boundary: the tick is an hour
    jobs = by_id(partial.jobs)
    assert jobs[6].state == "RUNNING" and new in jobs and partial.jobs_as_of == first.jobs_as_of
    assert sync.partial_snapshots == 1


async def _collect(p: Poller, after: Snapshot, into: list[Snapshot]) -> None:
    while True:
        after = await p.wait_next(after)
        into.append(after)


async def test_an_unreadable_state_entry_drops_no_job(rig: Rig) -> None:
    """Bad input never loses data: while one entry's id cannot be read, any held job may be that one."""
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        t.end(1)
        t.purge(1)
        t.bad_state_entries.append({"job_id": "junk", "state": ["PENDING"]})
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and 1 in by_id(snap.jobs)
        assert p.status.jobs_sync.unreadable_entries == 1
        families = {f.name: f for f in jobs_sync_families(p.status)}
        assert families["slurm_exporter_poll_jobs_state_entries_unreadable"].samples[0].value == 1.0
        t.bad_state_entries.clear()
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None and 1 not in by_id(snap.jobs) and p.status.jobs_sync.unreadable_entries == 0
    assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_too_many_changes_list_in_full_or_spread_over_polls(rig: Rig) -> None:
    t = rig.table
    p = rig.poller(jobs_changes_limit=3, jobs_listing_ratio=10.0)
    async with p.client:
        await p.poll_once()
        for _ in range(5):
            t.submit()
        rig.clock.now += 1
        sync = p.status.jobs_sync
        sync.listing_duration = 0.0  # the first listing's real seconds, not the fake clock's: 1 s is enough
        await p.poll_once()  # 5 > 3 and a listing may start: the limit's worth read, a listing begun beside
        assert sync.backlog == 2 and t.reads["job"] == 3
        assert sync.full_listings == {"first": 1}  # counted when it is folded in
        await p.listing_settled()
        assert t.reads["jobs"] == 2
        rig.clock.now += 1
        snap = await p.poll_once()  # folded in: nothing left to read
        assert sync.full_listings == {"first": 1, "changes": 1} and sync.backlog == 0 and t.reads["job"] == 3
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []
        sync.listing_duration = 100.0  # a listing took 100 s: the next may start 1,000 s after it
        for _ in range(5):
            t.submit()
        rig.clock.now += 1
        complete_as_of = rig.clock.now - 1
        snap = await p.poll_once()
        assert sync.backlog == 2 and t.reads["job"] == 6 and sync.full_listings["changes"] == 1
        await p.listing_settled()
        assert t.reads["jobs"] == 3  # the first, the one for the changes, rig.listed()'s: none too soon
        assert snap is not None and len(snap.jobs) == len(t.records) - 2
        # two new jobs are not in it: it holds everything Slurm accepted only as of the poll before (the
        # bridge must not take a missing job for one never submitted)
        assert snap.jobs_as_of == complete_as_of and snap.fetched_at["jobs"] == rig.clock.now
        rig.clock.now += 1
        snap = await p.poll_once()
    assert sync.backlog == 0 and t.reads["job"] == 8
    assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []


@pytest.mark.parametrize("counted_by", ["pending", "submitted", "jobs/state"])
async def test_too_many_jobs_to_list_are_read_one_by_one_from_the_start(rig: Rig, counted_by: str) -> None:
    """More jobs than --jobs-listing-max — by /diag's pending count, or its jobs submitted less those ended
    (a burst since slurmctld last counted, every 30 s), or else by /jobs/state (/diag's counts both stale:
    that one answer serves the first read too): no /jobs listing at all — /jobs/state and the jobs one by
    one, the limit a poll, pending ones first; the data partial meanwhile (jobs_unread; jobs_as_of 0: the
    bridge waits), then equal to a listing; a mass change later is read over the next polls, not listed."""
    t = rig.table
    if counted_by == "pending":
        rig.set_rpcs(0, pending=len(t.records), submitted=0)
    elif counted_by == "submitted":
        rig.set_rpcs(0, pending=0, submitted=len(t.records))
    else:
        rig.set_rpcs(0, pending=0, submitted=0)
    p = rig.poller(jobs_changes_limit=4, jobs_listing_max=5)
    sync = p.status.jobs_sync
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None and sync.unlisted
        assert "jobs" not in t.reads and t.reads["jobs/state"] == 1 and t.reads["job"] == 4
        assert snap.jobs_unread == sync.backlog > 0 and snap.jobs_as_of == 0.0
        # what demand needs first: pending records (an array's brings its split-off tasks along)
        assert {t.records[j]["job_state"][0] for j in sync.last_read} == {"PENDING"}
        assert "PARTIAL" in jobs_freshness(p.status, rig.clock.now)
        gauges = {f.name: f.samples[0].value for f in jobs_sync_families(p.status) if f.samples}
        assert gauges["slurm_exporter_poll_jobs_unlisted"] == 1.0
        assert gauges["slurm_exporter_poll_jobs_backlog"] == sync.backlog
        polls = 1
        while sync.backlog:
            rig.clock.now += 1
            snap = await p.poll_once()
            polls += 1
            assert snap is not None and (snap.jobs_as_of == 0.0) == (sync.backlog > 0)
            assert polls < 100
        # complete as of the /jobs/state answer the last reads came from (reused while the backlog drains
        # for ten times what it took: real seconds — on a loaded machine that one may be a poll older)
        assert snap is not None and snap.jobs_unread == 0 and snap.jobs_as_of == sync.states_at > 0
        assert polls > 2  # several polls' worth of reads
        assert "jobs" not in t.reads and sync.full_listings == {}
        assert differences(snap.jobs, (await rig.listed()).jobs) == []
        assert "PARTIAL" not in jobs_freshness(p.status, rig.clock.now)
        reads = t.reads["jobs"]  # rig.listed()'s
        for _ in range(6):
            t.submit()
        rig.clock.now += 1
        snap = await p.poll_once()
        assert sync.backlog == 2 and snap is not None and snap.jobs_unread == 2
        await p.listing_settled()
        rig.clock.now += 1
        snap = await p.poll_once()
        assert sync.backlog == 0 and t.reads["jobs"] == reads and sync.full_listings == {}
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []


def state_asks(rig: Rig) -> list[str]:
    """The /jobs/state requests the fake served, in order: "whole", or the ids asked (comma-separated)."""
    return ["whole" if ids is None else ",".join(map(str, ids)) for ids in rig.table.state_asks]


async def test_many_jobs_ask_jobs_state_only_about_what_diags_counters_say_moved(rig: Rig) -> None:
    """Beyond --jobs-states-targeted-min: no /jobs/state request while /diag's job counters stand still;
    a submission, a start, an end asked about the live records and the ids after the highest (a start:
    the pending ones by priority too), each equal to a listing right after; a pending job's cancel is not
    in what was asked — unaccounted: the data stays "as of" before it and the whole answer is read beside
    the next poll, folded in by the one after; a purge no counter sees waits for the whole answer every
    --jobs-states-full-every s."""
    t = rig.table
    rig.fake.override.pop("diag")  # slurmctld's counters move with the job table's events
    p = rig.poller(jobs_states_targeted_min=1, jobs_states_full_every=60.0)
    sync = p.status.jobs_sync
    async with p.client:
        await p.poll_once()  # the count at the start, then the first listing
        rig.clock.now += 1
        await p.poll_once()  # a whole answer: the counters it accounts for
        assert sync.states_asks == {"whole": 1}
        asks = len(state_asks(rig))
        for _ in range(3):
            rig.clock.now += 1
            snap = await p.poll_once()
            assert snap is not None and snap.jobs_as_of == rig.clock.now  # whole as of this poll's /diag
        assert len(state_asks(rig)) == asks and sync.states_asks["none"] == 3

        top = max(j.job_id for j in snap.jobs)
        new = t.submit()
        rig.clock.now += 1
        snap = await p.poll_once()
        asked = state_asks(rig)[-1].split(",")
        assert str(new) in asked and str(top) not in asked  # the ids after the highest held
        assert snap is not None and snap.jobs_as_of == rig.clock.now and not sync.unaccounted
        assert differences(snap.jobs, (await rig.listed()).jobs) == []

        t.start(new)
        rig.clock.now += 1
        snap = await p.poll_once()
        assert str(new) in state_asks(rig)[-1].split(",") and not sync.unaccounted
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []

        t.end(new)
        rig.clock.now += 1
        snap = await p.poll_once()
        assert str(new) in state_asks(rig)[-1].split(",") and not sync.unaccounted
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []

        pending = next(j.job_id for j in snap.jobs if j.state == "PENDING" and not j.array_task_string)
        t.end(pending, "CANCELLED")  # counted, but no live record or new id shows it
        rig.clock.now += 1
        before = rig.clock.now - 1
        snap = await p.poll_once()
        assert sync.unaccounted and snap is not None and snap.jobs_as_of == before
        rig.clock.now += 1
        await p.poll_once()  # some records again, and the whole answer beside the polls
        await p.listing_settled()
        assert state_asks(rig)[-1] == "whole" and sync.unaccounted
        rig.clock.now += 1
        snap = await p.poll_once()  # folded in
        assert not sync.unaccounted and sync.states_asks["whole"] == 2
        assert snap is not None and snap.jobs_as_of == rig.clock.now
        assert differences(snap.jobs, (await rig.listed()).jobs) == []

        t.purge(pending)  # no counter moves
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and pending in {j.job_id for j in snap.jobs}
        rig.clock.now += 60
        await p.poll_once()
        await p.listing_settled()
        assert state_asks(rig)[-1] == "whole"
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and pending not in {j.job_id for j in snap.jobs}
        assert differences(snap.jobs, (await rig.listed()).jobs) == []


def job_reads(rig: Rig, job_id: int) -> int:
    """The /job/{id} requests the fake served for ``job_id``."""
    return sum(1 for path, _, _ in rig.fake.requests if path.rstrip("/").endswith(f"/job/{job_id}"))


async def test_the_whole_answer_is_read_beside_the_polls_and_what_they_read_since_stands(rig: Rig) -> None:
    """At 100,000 jobs the whole /jobs/state takes slurmrestd 16–19 s to render: read beside the polls, no
    poll waits for it. While it renders (as of its request) the polls keep reading what the counters say
    moved; folded in, it brings what no counter saw (a purge) and takes nothing they read since as it says
    it was: a job submitted after its request stays, one that started or ended since is as read, none of
    them read again. The jobs then equal a listing, whole as of that poll's /diag."""
    t = rig.table
    rig.fake.override.pop("diag")
    p = rig.poller(jobs_states_targeted_min=1, jobs_states_full_every=60.0)
    sync = p.status.jobs_sync
    gate = asyncio.Event()
    try:
        async with p.client:
            await p.poll_once()  # the count at the start, then the first listing
            rig.clock.now += 1
            snap = await p.poll_once()  # the first whole answer, in the poll
            assert snap is not None and sync.states_asks == {"whole": 1}
            pending = [j.job_id for j in snap.jobs if j.state == "PENDING" and not j.array_task_string]
            purged, ends = [j for j in pending if j != 6][:2]  # 6: what t.submit() copies
            t.start(ends)
            rig.clock.now += 1
            await p.poll_once()
            t.purge(purged)  # no counter sees it: the whole answer will
            rig.fake.whole_states_gate = gate

            rig.clock.now += 60
            snap = await p.poll_once()  # --jobs-states-full-every passed: the whole answer asked beside
            await made_as_asked(rig, p)
            assert snap is not None and snap.jobs_as_of == rig.clock.now and sync.states_asks["whole"] == 1
            new = t.submit()  # (no start: one would have the pending jobs asked about, the purged one too)
            rig.clock.now += 1
            await p.poll_once()  # no poll waits for the whole answer
            t.end(ends)
            rig.clock.now += 1
            snap = await p.poll_once()
            assert snap is not None and snap.jobs_as_of == rig.clock.now and not sync.unaccounted
            held = {j.job_id: j for j in snap.jobs}
            assert held[new].state == "PENDING" and held[ends].state == "COMPLETED" and purged in held
            assert sync.states_asks["whole"] == 1 and rig.fake.in_flight["jobs/state"] == 1
            reads = job_reads(rig, new), job_reads(rig, ends)

            gate.set()
            await p.listing_settled()
            rig.clock.now += 1
            snap = await p.poll_once()  # folded in
            assert sync.states_asks["whole"] == 2 and not sync.unaccounted
            assert snap is not None and snap.jobs_as_of == rig.clock.now
            held = {j.job_id: j for j in snap.jobs}
            assert purged not in held and held[new].state == "PENDING" and held[ends].state == "COMPLETED"
            assert (job_reads(rig, new), job_reads(rig, ends)) == reads  # not read again for an older answer
            assert differences(snap.jobs, (await rig.listed()).jobs) == []
    finally:
        gate.set()
        await p.close()


async def test_a_whole_answer_beside_the_polls_that_fails_is_counted_and_tried_again_later(rig: Rig) -> None:
    """The whole answer read beside the polls fails: counted among the jobs' errors, said once, the
    polls and their data unaffected; another is started only 10 s later."""
    t = rig.table
    rig.fake.override.pop("diag")
    p = rig.poller(jobs_states_targeted_min=1, jobs_states_full_every=60.0)
    sync, st = p.status.jobs_sync, p.status.endpoints["jobs"]
    async with p.client:
        await p.poll_once()
        rig.clock.now += 1
        await p.poll_once()
        t.purge(next(iter(t.records)))
        rig.fake.faults["jobs/state"] = "status:500"
        rig.clock.now += 60
        await p.poll_once()  # quiet counters: the whole answer is the only /jobs/state request
        await p.listing_settled()
        rig.fake.faults.clear()
        rig.clock.now += 1
        snap = await p.poll_once()
        assert st.errors["http_500"] == 1 and st.last_ok and snap is not None
        assert snap.jobs_as_of == rig.clock.now  # the counters' part goes on
        assert "failed" in p.status.conditions.active()["jobs/state whole"][0]
        asks = t.reads["jobs/state"]
        rig.clock.now += 5
        await p.poll_once()
        await p.listing_settled()
        assert t.reads["jobs/state"] == asks  # not before 10 s
        rig.clock.now += 5
        await p.poll_once()
        await p.listing_settled()
        rig.clock.now += 1
        snap = await p.poll_once()
        assert sync.states_asks["whole"] == 2 and snap is not None
        assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_burst_beyond_the_limit_drains_from_the_asked_answer_and_loses_nothing(rig: Rig) -> None:
    """More new jobs than --jobs-changes-limit while asking some records: the rest are read in the next
    polls from that answer (kept as the last one), none lost while no counter moves, then whole again."""
    t = rig.table
    rig.fake.override.pop("diag")
    p = rig.poller(jobs_states_targeted_min=1, jobs_changes_limit=2, jobs_listing_max=1)  # never listed
    sync = p.status.jobs_sync
    async with p.client:
        for _ in range(20):  # the start reads every job one by one, 2 a poll; then whole, then none
            await p.poll_once()
            rig.clock.now += 1
        assert sync.states_asks["none"] > 0 and sync.backlog == 0
        new = [t.submit() for _ in range(5)]
        snap = await p.poll_once()
        assert sync.backlog == 3 and snap is not None and snap.jobs_unread == 3
        for _ in range(3):
            rig.clock.now += 1
            snap = await p.poll_once()
        assert sync.backlog == 0 and snap is not None and not sync.unaccounted
        assert set(new) <= {j.job_id for j in snap.jobs} and snap.jobs_as_of > 0
        assert differences(snap.jobs, (await rig.listed()).jobs) == []


def _nothing() -> None:
    pass


def answer_once(
    t: JobTable, *, before: Callable[[], None] = _nothing, after: Callable[[], None] = _nothing
) -> None:
    """The table's next ``/jobs/state`` answer only: ``before`` runs before it is rendered, ``after`` once it
    is (what Slurm did around it); the answers after it are the table's own."""
    answer = t.states

    def once(ids: Collection[int] | None = None) -> bytes:
        t.states = answer  # type: ignore[method-assign]
        before()
        body = answer(ids)
        after()
        return body

    t.states = once  # type: ignore[method-assign]


async def steady(rig: Rig, p: Poller) -> None:
    """Three polls a second apart: the listing, then the polls that ask only what the counts say moved."""
    for _ in range(3):
        await p.poll_once()
        rig.clock.now += 1


async def made_as_asked(rig: Rig, p: Poller) -> None:
    """The whole answer the last poll asked for beside the polls (if it did) made before the test changes
    the table: slurmrestd renders it as of its request, but over real HTTP the request reaches the fake a
    moment later — on a loaded machine after the test's next changes (a job purged since kept as read)."""
    if p.whole_states_in_flight:
        await asyncio.wait_for(rig.fake.whole_states_made(), 10)


def pending_array(t: JobTable) -> int:
    """The table's first pending array record."""
    return next(j for j, r in t.records.items() if r["array_task_string"] and r["job_state"] == ["PENDING"])


def plain_pending(t: JobTable) -> list[int]:
    """The table's pending records outside an array, in order."""
    return [
        j for j, r in t.records.items() if r["job_state"] == ["PENDING"] and not r["array_job_id"]["number"]
    ]


async def test_a_change_between_diag_and_the_answer_is_accounted_for_in_the_next_poll(rig: Rig) -> None:
    """A job that ends after a poll's /diag but before its /jobs/state answer is read in that poll and
    counted by the next /diag: what the answer found beyond its counts is kept one poll, so the count is
    accounted for (measured at 100,000 jobs: otherwise nearly every such poll read the whole answer)."""
    t = rig.table
    rig.fake.override.pop("diag")
    pending = plain_pending(t)
    first, second = pending[:2]
    p = rig.poller(jobs_states_targeted_min=1)
    sync = p.status.jobs_sync
    async with p.client:
        t.start(first)
        t.start(second)
        await steady(rig, p)
        t.end(first)
        answer_once(t, before=lambda: t.end(second))  # it ends meanwhile
        await p.poll_once()
        assert not sync.unaccounted and sync.found_beyond.ended == 1
        rig.clock.now += 1
        snap = await p.poll_once()  # /diag counts the second end now
        assert not sync.unaccounted and sync.found_beyond.ended == 0
        assert snap is not None and snap.jobs_as_of == rig.clock.now
        assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_surplus_no_diag_counts_is_carried_one_poll_only(rig: Rig) -> None:
    """A new record the answer found that no /diag counts as a submission (at 100,000 jobs such a surplus
    stood at 14–49 submissions "found beyond the counts" poll after poll): kept one poll as any change
    found beyond the counts, then dropped — what a poll carries is at most what it found itself."""
    t = rig.table
    rig.fake.override.pop("diag")
    p = rig.poller(jobs_states_targeted_min=1)
    sync = p.status.jobs_sync
    async with p.client:
        await steady(rig, p)
        t.submit()
        t.counts["submitted"] -= 1  # a record /diag never counted as a submission
        t.start(plain_pending(t)[0])  # a count moves: the ids after the highest held are asked
        await p.poll_once()
        assert not sync.unaccounted and sync.found_beyond == jobwatch.Found(0, 0, 1)
        rig.clock.now += 1
        t.start(plain_pending(t)[0])
        await p.poll_once()
        assert not sync.unaccounted and sync.found_beyond == jobwatch.NOTHING
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_job_that_ends_between_the_answer_and_its_read_is_accounted_for_by_the_read(rig: Rig) -> None:
    """The answer shows a job started, it ends before its /job/{id} read: the read holds it ended, so no
    later answer shows the end the next /diag counts — the read's finding is kept with the answer's
    (measured at 100,000 jobs: otherwise the counts stayed unaccounted for until a whole answer)."""
    t = rig.table
    rig.fake.override.pop("diag")
    job = plain_pending(t)[0]
    p = rig.poller(jobs_states_targeted_min=1)
    sync = p.status.jobs_sync
    async with p.client:
        await steady(rig, p)
        t.start(job)
        answer_once(t, after=lambda: t.end(job))  # it ends after the answer, before its read
        await p.poll_once()
        assert not sync.unaccounted and sync.found_beyond == jobwatch.Found(0, 1, 0)
        rig.clock.now += 1
        snap = await p.poll_once()  # /diag counts the end now; the record was held ended already
        assert not sync.unaccounted and sync.found_beyond == jobwatch.NOTHING
        assert snap is not None and snap.jobs_as_of == rig.clock.now
        assert differences(snap.jobs, (await rig.listed()).jobs) == []
        assert sync.states_asks["whole"] == 1  # the first poll's only


@contextlib.asynccontextmanager
async def one_running(rig: Rig) -> AsyncIterator[tuple[Poller, int, int, asyncio.Event]]:
    """A poller asking some records, steady with the first plain pending job running (``ending``; the
    second, ``starting``, still pending), /diag counting the table, and a gate for the whole answers a test
    holds back (set, and the poller closed, on the way out)."""
    t = rig.table
    rig.fake.override.pop("diag")
    ending, starting = plain_pending(t)[:2]
    p = rig.poller(jobs_states_targeted_min=1)
    gate = asyncio.Event()
    try:
        async with p.client:
            t.start(ending)
            await steady(rig, p)
            yield p, ending, starting, gate
    finally:
        gate.set()
        await p.close()


async def test_what_unaccounted_polls_found_counts_when_the_late_change_shows(rig: Rig) -> None:
    """A count whose change the answer shows a poll late (an end still shown running): that poll is
    unaccounted for, and what it did find (a start, read and held since) still counts, so the next answer,
    which shows the end, accounts for both counts without the whole answer (asked beside, held back)."""
    t = rig.table
    async with one_running(rig) as (p, ending, starting, gate):
        sync = p.status.jobs_sync
        rig.fake.whole_states_gate = gate
        t.end(ending)
        t.start(starting)
        answer_once(  # rendered by slurmctld a moment before the end
            t,
            before=lambda: t.set(ending, job_state=["RUNNING"]),
            after=lambda: t.set(ending, job_state=["COMPLETED"]),
        )
        await p.poll_once()
        assert sync.unaccounted and sync.found_beyond.started == 1
        rig.clock.now += 1
        snap = await p.poll_once()
        assert not sync.unaccounted, sync.found_beyond
        assert snap is not None and snap.jobs_as_of == rig.clock.now
        assert differences(snap.jobs, (await rig.listed()).jobs) == []
        assert sync.states_asks["whole"] == 1  # the start's; the one asked beside is still held back


async def test_what_the_poll_asking_for_the_whole_answer_found_beyond_its_counts_counts_for_it(
    rig: Rig,
) -> None:
    """The whole answer accounts for the counts up to the /diag of the poll that asked for it; a job that
    ended after that /diag, shown by that poll's own answer and held ended since, is counted by the /diag
    of the poll that folds the whole answer in — it counts for the whole answer as what the polls found
    since does (otherwise that fold was unaccounted for: once in 20 minutes at 500 jobs)."""
    t = rig.table
    async with one_running(rig) as (p, ending, starting, gate):
        sync = p.status.jobs_sync
        rig.clock.now += 3600  # the whole answer is due
        rig.fake.whole_states_gate = gate
        t.start(starting)
        answer_once(t, before=lambda: t.end(ending))  # it ends after the /diag, before the answer
        await p.poll_once()
        assert p.whole_states_in_flight and not sync.unaccounted
        await asyncio.wait_for(rig.fake.whole_states_made(), 10)
        gate.set()
        await asyncio.wait_for(p.listing_settled(), 10)
        rig.clock.now += 1
        snap = await p.poll_once()  # folds the whole answer in: the end is counted by this /diag
        assert sync.states_asks["whole"] == 2 and not sync.unaccounted
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_counters_that_went_back_have_the_whole_answer_read(rig: Rig) -> None:
    """slurmctld restarted (or reset its statistics at midnight): its counters went back, nothing can be
    told from them — the whole /jobs/state answer, then some records again."""
    t = rig.table
    rig.fake.override.pop("diag")
    p = rig.poller(jobs_states_targeted_min=1)
    sync = p.status.jobs_sync
    async with p.client:
        t.submit()
        await steady(rig, p)
        assert sync.states_asks["none"] == 1
        t.counts.clear()  # the submission's count is gone
        await p.poll_once()
        assert sync.states_asks["whole"] == 2 and state_asks(rig)[-1] == "whole"
        rig.clock.now += 1
        await p.poll_once()
        assert sync.states_asks["none"] == 2


async def test_an_array_task_starting_is_found_under_its_new_id(rig: Rig) -> None:
    """A pending array's task splits off under the next id as it starts: asked about as a new id after
    the highest held, and the array's own record (by priority, a start was counted) with its tasks. It is
    a start only: /diag counted the array's tasks as submitted with the array. (Counted as a submission
    too, the surplus stayed "found beyond the counts" poll after poll and accounted for later submissions
    no answer showed — at 100,000 jobs two new jobs were unseen for 61 and 117 s, until the whole answer.)"""
    t = rig.table
    rig.fake.override.pop("diag")
    array = pending_array(t)
    p = rig.poller(jobs_states_targeted_min=1)
    sync = p.status.jobs_sync
    async with p.client:
        await steady(rig, p)
        task = t.start_array_task(array)
        snap = await p.poll_once()
        assert sync.states_asks["some"] == 1 and not sync.unaccounted
        assert sync.found_beyond == jobwatch.NOTHING
        assert str(task) in state_asks(rig)[-1].split(",")
        assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_an_id_below_one_already_held_is_asked_about(rig: Rig) -> None:
    """Ids are given in turn, but a record can be held before a lower id is seen: an array task that split
    off after the answer comes along with its array's read. The lower id (a job submitted meanwhile) is
    asked about in the next poll, not only the ids after the highest held — whatever the counts say."""
    t = rig.table
    rig.fake.override.pop("diag")
    array = pending_array(t)
    p = rig.poller(jobs_states_targeted_min=1, jobs_states_pending_budget=1000)
    sync = p.status.jobs_sync
    submitted: list[int] = []
    async with p.client:
        await steady(rig, p)
        t.start(plain_pending(t)[0])  # counted: this poll asks
        answer_once(
            t,
            before=lambda: t.start_array_task(array),  # the array's record moves: read, with its tasks
            after=lambda: (submitted.append(t.submit()), t.start_array_task(array)),
        )
        await p.poll_once()
        assert submitted[0] not in {j.job_id for j in p.snapshot.jobs}  # not seen yet
        assert sync.unseen == (submitted[0],)  # a task split off after it is held
        for _ in range(2):
            rig.clock.now += 1
            snap = await p.poll_once()
        assert snap is not None and submitted[0] in {j.job_id for j in snap.jobs}
        assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_slow_jobs_state_is_read_again_only_once_the_backlog_drained_or_it_aged(rig: Rig) -> None:
    """While a backlog drains, the last /jobs/state answer names what is left: read again only after 10×
    what it took (100,000 jobs: ~16 s a render) or once nothing is left; no job is taken as gone from an
    old answer, and the data is "as of" that answer's request."""
    t = rig.table
    rig.set_rpcs(0, pending=len(t.records))
    p = rig.poller(jobs_changes_limit=4, jobs_listing_max=5)
    sync = p.status.jobs_sync
    async with p.client:
        await p.poll_once()
        first_at = rig.clock.now
        sync.states_seconds = 5.0  # as if it took 5 s: used again for 50 s
        t.purge(max(t.records))  # gone after the answer: not dropped from an old one
        polls = 0
        while sync.backlog:
            rig.clock.now += 1
            snap = await p.poll_once()
            polls += 1
        assert t.reads["jobs/state"] == 1 and sync.states_reused == polls > 1
        assert snap is not None and snap.jobs_as_of == first_at  # complete as of the answer used
        rig.clock.now += 1
        snap = await p.poll_once()  # nothing left: read again, the purged job dropped
    assert t.reads["jobs/state"] == 2 and snap is not None and snap.jobs_as_of == rig.clock.now
    assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_large_jobs_state_may_take_longer_to_begin(rig: Rig) -> None:
    """slurmrestd renders /jobs/state whole before its first byte (~16–19 s at 100,000 jobs): it may take
    the idle limit plus 0.4 ms a job listed last time (or 3× its last duration) to begin, not the
    small-request limits that cut it at 100,000 jobs."""
    p = rig.poller(idle=0.3)
    async with p.client:
        await p.poll_once()
        rig.fake.delays["jobs/state"] = 0.8
        p.status.jobs_sync.states_seconds = 0.0  # the last one quick (a loaded machine's would allow more)
        rig.clock.now += 1
        assert await p.poll_once() is not None
        assert p.status.endpoints["jobs"].last_error_kind == "timeout"  # few jobs: the small limits
        p.status.jobs_sync.states_seen = 5_000  # 2 s to render, allowed
        rig.clock.now += 1
        await p.poll_once()
    assert p.status.endpoints["jobs"].last_ok and p.status.jobs_sync.incremental_fetches == 1


async def test_a_failed_count_at_the_start_lists_as_diag_says_once_logged(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """/jobs/state failing when the first poll counts the jobs: /diag's word stands (few: listed), one log
    line says so; the next poll reads /jobs/state as usual."""
    rig.set_rpcs(0, pending=0, submitted=0)
    rig.fake.faults["jobs/state"] = "status:500"
    rig.fake.fault_times["jobs/state"] = 1
    p = rig.poller(jobs_listing_max=1)
    with caplog.at_level(logging.WARNING):
        async with p.client:
            snap = await p.poll_once()
            assert snap is not None and snap.jobs_unread == 0 and rig.table.reads["jobs"] == 1
            rig.clock.now += 1
            assert await p.poll_once() is not None
    census = [r for r in caplog.records if "listing as /diag's counts say" in r.getMessage()]
    assert len(census) == 1 and "500" in census[0].getMessage()
    assert p.status.jobs_sync.incremental_fetches == 1 and not p.status.jobs_sync.unlisted


async def test_the_count_at_the_start_may_take_long_to_begin(rig: Rig) -> None:
    """/diag says few jobs (its count stale after a burst) and /jobs/state, rendering 100,000 of them,
    begins after the small-request limit: the count is given the time (else it is cut and the listing it
    was to prevent follows) — here 0.8 s where the idle limit is 0.3 s."""
    rig.set_rpcs(0, pending=0, submitted=0)
    rig.fake.delays["jobs/state"] = 0.8
    p = rig.poller(idle=0.3, jobs_listing_max=1)
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and p.status.jobs_sync.unlisted and "jobs" not in rig.table.reads


async def test_few_enough_jobs_are_listed_first(rig: Rig) -> None:
    """As many jobs as --jobs-listing-max by /diag and by /jobs/state: listed."""
    n = len(json.loads(rig.table.states())["jobs"])
    rig.table.reads.clear()
    rig.set_rpcs(0, pending=n, submitted=n)
    p = rig.poller(jobs_listing_max=n)
    async with p.client:
        snap = await p.poll_once()
    assert snap is not None and rig.table.reads == {"jobs/state": 1, "jobs": 1}
    assert not p.status.jobs_sync.unlisted
    assert snap.jobs_unread == 0 and snap.jobs_as_of == rig.clock.now


async def test_a_job_update_rpc_rereads_pending_jobs_hold_and_release(rig: Rig) -> None:
    """Hold and release leave the state PENDING: /jobs/state cannot see them, slurmctld's RPC counter can."""
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        t.set(6, priority=num(0), state_reason="JobHeldUser")
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and by_id(snap.jobs)[6].reason == "Resources"  # no signal: not seen yet
        rig.set_rpcs(1)
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and by_id(snap.jobs)[6].reason == "JobHeldUser"
        sync = p.status.jobs_sync
        assert set(sync.last_read) >= {j.job_id for j in snap.jobs if j.state not in FINAL_STATES}
        assert sync.rereads["recheck"] + sync.rereads["follow"] == sync.last_changed
        rechecked, following = sync.rereads["recheck"], set(sync.follow)
        rig.clock.now += 1
        await p.poll_once()  # the counter did not move: nothing read again but a fresh job's reason
        assert sync.rereads["recheck"] == rechecked and set(sync.last_read) <= following
    assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_a_job_update_rereads_newest_first_at_its_rate_until_as_many_jobs_changed(rig: Rig) -> None:
    """No listing for a job-changing RPC (slurmrestd keeps every listing's memory): the jobs not yet ended
    are read again newest first, ``jobs_recheck_rate`` per second, until as many changed as RPCs counted."""
    p = rig.poller(jobs_recheck_rate=3.0)
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        live = sorted((j.job_id for j in snap.jobs if j.state not in FINAL_STATES), reverse=True)
        target = live[4]  # the fifth newest: found by the second chunk of three
        rig.table.set(target, state_reason="JobHeldAdmin", priority=num(0))
        rig.set_rpcs(1)
        rig.clock.now += 1
        await p.poll_once()
        sync = p.status.jobs_sync
        assert sync.last_read == tuple(live[:3]) and sync.recheck_found == 0 and sync.recheck
        rig.clock.now += 1
        snap = await p.poll_once()
        assert sync.last_read == tuple(live[3:6]) and not sync.recheck  # found it: no more re-reads
        rig.clock.now += 1
        await p.poll_once()
        assert sync.last_read == () and sync.rereads["recheck"] == 6
    assert p.status.jobs_sync.full_listings == {"first": 1}
    assert snap is not None and by_id(snap.jobs)[target].reason == "JobHeldAdmin"
    assert differences(snap.jobs, (await rig.listed()).jobs) == []


async def test_an_administrators_rpc_rereads_the_jobs_an_administrator_acts_on_first(rig: Rig) -> None:
    """The RPC's sender (``admin``) owns no job: the recheck reads first the jobs an administrator held
    (only one may release them), then the pending jobs of highest priority — an old job under age
    priority is found in the first chunk although it is the oldest; newest first after those."""
    t = rig.table
    p = rig.poller(jobs_recheck_rate=3.0)
    async with p.client:
        rig.set_rpcs(0, users={"root": 10})
        snap = await p.poll_once()
        assert snap is not None
        pending = sorted(j.job_id for j in snap.jobs if j.state == "PENDING" and j.priority)
        old, admin_held = pending[0], pending[1]
        t.set(old, priority=num(10**6))  # the oldest: the highest priority under age priority
        t.set(admin_held, priority=num(0), state_reason="JobHeldAdmin")
        rig.set_rpcs(2, users={"root": 20})  # our own reads only: the priorities and the admin's hold
        rig.clock.now += 1
        await p.poll_once()
        rig.clock.now += 1
        await p.poll_once()
        t.set(old, priority=num(0), state_reason="JobHeldAdmin")  # an administrator holds it ...
        t.set(admin_held, priority=num(5), state_reason="Priority")  # ... and releases the other
        rig.set_rpcs(4, users={"root": 30, "admin": 2})
        rig.clock.now += 1
        snap = await p.poll_once()
        sync = p.status.jobs_sync
        assert set(sync.last_read[:2]) == {admin_held, old}, sync.last_read  # both in the first chunk
        assert snap is not None and by_id(snap.jobs)[old].reason == "JobHeldAdmin"
        assert by_id(snap.jobs)[admin_held].reason == "Priority"


def test_what_an_administrator_acts_on_first() -> None:
    jobs = [
        _job(1, priority=50),
        _job(2, priority=90),
        _job(3, priority=0, reason="JobHeldAdmin"),
        _job(4, priority=70),
        _job(5, "RUNNING", priority=99),
        _job(6, priority=0, reason="JobHeldUser"),
    ]
    order = jobsync.likeliest_unowned(jobs, {1, 2, 3, 4, 5, 6}, n=2)
    assert order[::-1] == [3, 2, 4]  # popped from the end: held by an admin, then by priority


def test_users_moved_and_the_recheck_order() -> None:
    assert jobsync.users_moved(None, {"root": 5}) == {}
    assert jobsync.users_moved({"root": 5, "bob": 2}, {"root": 9, "bob": 2, "ann": 1}) == {
        "root": 4,
        "ann": 1,
    }
    assert jobsync.users_moved({"root": 5}, {"root": 1}) == {"root": 1}  # counters reset
    live = {1, 2, 3, 4, 5, 6}
    assert jobsync.recheck_order(live, [2, 4, 9]) == [1, 3, 5, 6, 2, 4]  # popped: 4, 2, then 6, 5, ...
    assert jobsync.recheck_order(live, []) == [1, 2, 3, 4, 5, 6]
    # during a pass, only its jobs not read yet: everyone's jobs first means the pass goes on, not anew
    assert jobsync.recheck_order(live, [1, 2, 3], [1, 2, 3]) == [1, 2, 3]
    assert jobsync.recheck_order(live, [2], [1, 2, 3]) == [1, 3, 2]


def test_the_user_who_sent_fewest_rpcs_has_their_jobs_read_first() -> None:
    """ann's hold is one RPC; root (the poller's token) sent 300 reads in the same poll: ann's jobs, newest
    first, are popped before root's newer ones — so a head budget smaller than both never spends itself on
    the poller's own jobs."""
    held = [Job(job_id=i, state="PENDING", user="root") for i in (7, 8, 9)]
    held += [Job(job_id=i, state="PENDING", user="ann") for i in (2, 3)]
    held.append(Job(job_id=5, state="PENDING", user="bob"))
    order = jobsync.likeliest(held, {"root": 300, "ann": 1}, {2, 3, 5, 7, 8, 9})
    assert order == [7, 8, 9, 2, 3]  # popped: 3, 2, then root's 9, 8, 7
    assert order[len(order) - 2 :] == [2, 3]  # a head of two: ann's
    assert jobsync.likeliest(held, {}, {2, 3}) == []
    assert jobsync.likeliest(held, {"ann": 1}, {3, 5}) == [3]  # only live jobs


async def test_the_jobs_of_the_users_whose_rpcs_moved_are_rechecked_first(rig: Rig) -> None:
    """A user holds an old job of theirs: /diag counts the RPC and, per user, who sent it — their jobs
    are read first (the token's own user moves every poll: its jobs come first too)."""
    t = rig.table
    p = rig.poller(jobs_recheck_rate=2.0)
    rig.set_rpcs(0, {"root": 100, "ann": 7})
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        live = sorted(j.job_id for j in snap.jobs if j.state not in FINAL_STATES)
        oldest, older = live[0], live[1]
        for job_id in live:
            t.set(job_id, user_name="ann" if job_id in (oldest, older) else "bob")
        t.submit(user_name="bob")  # the fields above are read only with their jobs: list them again
        p.refresh_jobs()
        rig.clock.now += 1
        await p.poll_once()  # the listing begins beside the reads
        await p.listing_settled()
        rig.clock.now += 1
        await p.poll_once()  # and is folded in
        t.set(oldest, state_reason="JobHeldUser", priority=num(0))
        rig.set_rpcs(1, {"root": 130, "ann": 8})  # ann sent one RPC, our own polling the rest
        rig.clock.now += 1
        snap = await p.poll_once()
        sync = p.status.jobs_sync
        assert sync.last_read == (older, oldest)  # ann's jobs, newest first; no root job is live
        assert not sync.recheck and by_id(snap.jobs)[oldest].reason == "JobHeldUser"
        assert sync.rereads["recheck"] == 2


async def test_an_rpc_during_a_recheck_pass_does_not_restart_it(rig: Rig) -> None:
    """A steady stream of RPCs must not keep the recheck among the newest jobs: the pass goes on, and
    another pass follows it for the RPC that came meanwhile."""
    p = rig.poller(jobs_recheck_rate=3.0)
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        live = sorted((j.job_id for j in snap.jobs if j.state not in FINAL_STATES), reverse=True)
        oldest = live[-1]
        rig.table.set(oldest, state_reason="JobHeldUser", priority=num(0))
        sync = p.status.jobs_sync
        read: list[int] = []
        for rpcs in range(1, len(live)):  # a new RPC before every poll
            rig.set_rpcs(rpcs)
            rig.clock.now += 1
            snap = await p.poll_once()
            read.extend(j for j in sync.last_read if j not in sync.follow)
            if oldest in sync.last_read:
                break
        assert snap is not None and by_id(snap.jobs)[oldest].reason == "JobHeldUser"
        first_reads = list(dict.fromkeys(read))
        assert first_reads == live  # the pass went on, newest first, to the oldest job
        assert len(read) <= 2 * len(live)  # at most half its reads went to the newest jobs again
        assert sync.recheck_pending  # the RPCs since the pass began: another pass follows


async def test_an_rpc_during_a_long_pass_reads_the_newest_jobs_again_first(rig: Rig) -> None:
    """A pass through every job (an RPC whose change is not found: ``scontrol update`` of a field not
    compared) must not keep a later hold of a fresh job waiting until it ends."""
    t = rig.table
    p = rig.poller(jobs_recheck_rate=2.0)
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        rig.set_rpcs(1)  # nothing to find: the pass goes through every job
        for _ in range(3):
            rig.clock.now += 1
            await p.poll_once()
        sync = p.status.jobs_sync
        assert sync.recheck and sync.rereads["recheck"] == 6
        fresh = t.submit()
        rig.clock.now += 1
        await p.poll_once()  # the new job is read as new
        t.set(fresh, state_reason="JobHeldUser", priority=num(0))
        rig.set_rpcs(2)
        rig.clock.now += 1
        snap = await p.poll_once()
        assert fresh in sync.last_read and by_id(snap.jobs)[fresh].reason == "JobHeldUser"
        assert sync.recheck  # and the pass goes on


async def test_a_failed_recheck_reads_the_same_jobs_next_time(rig: Rig) -> None:
    p = rig.poller(jobs_recheck_rate=2.0)
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        newest = max(j.job_id for j in snap.jobs if j.state not in FINAL_STATES)
        rig.table.set(newest, state_reason="JobHeldUser", priority=num(0))
        rig.set_rpcs(1)
        rig.fake.faults["job"] = "status:500:slurmctld busy"
        rig.fake.fault_times["job"] = 1
        rig.clock.now += 1
        await p.poll_once()
        assert not p.status.endpoints["jobs"].last_ok
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None and by_id(snap.jobs)[newest].reason == "JobHeldUser"


async def test_the_sweep_reads_every_job_in_turn_at_its_rate(rig: Rig) -> None:
    """What no state and no RPC tells (a reason moving on its own) is current within one turn."""
    p = rig.poller(jobs_sweep_rate=4.0)
    async with p.client:
        snap = await p.poll_once()
        assert snap is not None
        live = sorted(j.job_id for j in snap.jobs if j.state not in FINAL_STATES)
        pending = next(j.job_id for j in snap.jobs if j.state == "PENDING")
        rig.table.set(pending, state_reason="Priority")  # no state change, no RPC
        swept: list[int] = []
        followed: set[int] = set()
        sync = p.status.jobs_sync
        for _ in range(-(-len(live) // 4)):  # one turn: len(live) / 4 polls at most
            if set(swept) | followed == set(live):
                break
            following = set(sync.follow)
            rig.clock.now += 1
            snap = await p.poll_once()
            swept.extend(j for j in sync.last_read if j not in following)
            followed.update(following)
        assert swept == sorted(swept) and set(swept) | followed == set(live)  # in turn, oldest first
        assert sync.sweep_period == len(live) / 4.0 and sync.rereads["sweep"] == len(swept)
        following = set(sync.follow)
        rig.clock.now += 1
        await p.poll_once()  # the next turn starts over
        assert [j for j in sync.last_read if j not in following] == [j for j in live if j not in following][
            :4
        ]
    assert snap is not None and by_id(snap.jobs)[pending].reason == "Priority"
    assert sync.full_listings == {"first": 1}


async def test_the_rates_are_per_second_of_the_whole_cycle_and_a_slow_poll_earns_at_most_two_intervals(
    rig: Rig,
) -> None:
    """The interval runs from one poll's end to the next one's start: a share of one interval per poll
    read half the rate when polls take as long as the interval (seen at 20,000 jobs)."""
    p = rig.poller(jobs_sweep_rate=1.0, interval=1.0)
    async with p.client:
        await p.poll_once()
        sync = p.status.jobs_sync
        for duration, elapsed, reads in ((1.0, 2.0, 2), (0.0, 5.0, 1), (9.0, 10.0, 3)):
            p.status.last_poll_duration = duration  # the previous poll's
            rig.clock.now += elapsed
            before = sync.rereads["sweep"]
            await p.poll_once()
            assert sync.rereads["sweep"] - before == reads, (duration, elapsed)


async def test_the_sweep_yields_to_the_changes_of_the_poll(rig: Rig) -> None:
    """A burst of starts (1,000 bridge jobs) is read in a poll no longer for the sweep: it reads what the
    changes leave of its share."""
    t = rig.table
    p = rig.poller(jobs_sweep_rate=3.0, interval=1.0)
    async with p.client:
        await p.poll_once()
        sync = p.status.jobs_sync
        for submitted, swept in ((1, 2), (3, 0), (5, 0), (0, 3)):
            for _ in range(submitted):
                t.submit()
            rig.clock.now += 1
            before = sync.rereads["sweep"]
            await p.poll_once()
            assert sync.rereads["sweep"] - before == swept, submitted


async def test_reason_only_changes_wait_for_the_listing_period(rig: Rig) -> None:
    p = rig.poller(jobs_full_refresh=30.0)
    async with p.client:
        await p.poll_once()
        rig.table.set(9, state_reason="Priority")  # its dependency completed: no RPC, no state change
        rig.clock.now += 29
        snap = await p.poll_once()
        assert snap is not None and by_id(snap.jobs)[9].reason == "Dependency"
        rig.clock.now += 1
        await p.poll_once()  # the period: a listing begins beside the reads
        await p.listing_settled()
        snap = await p.poll_once()  # folded in
    assert snap is not None and by_id(snap.jobs)[9].reason == "Priority"
    assert p.status.jobs_sync.full_listings == {"first": 1, "period": 1}
    assert snap.listed_at["jobs"] == rig.clock.now


async def test_the_listing_period_stretches_with_the_listing_cost(rig: Rig) -> None:
    p = rig.poller(jobs_full_refresh=30.0, jobs_listing_ratio=10.0)
    async with p.client:
        await p.poll_once()
        p.status.jobs_sync.listing_duration = 6.0  # at most one 6 s listing per 60 s
        rig.clock.now += 59
        await p.poll_once()
        assert p.status.jobs_sync.full_listings == {"first": 1}
        rig.clock.now += 1
        await p.poll_once()
        await p.listing_settled()
        await p.poll_once()
    assert p.status.jobs_sync.full_listings == {"first": 1, "period": 1}


async def test_a_server_without_jobs_state_is_listed_in_full(rig: Rig) -> None:
    rig.fake.jobs_table = None  # recorded answers only: /jobs/state answers 404 like 22.05's slurmrestd
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        rig.clock.now += 1
        await p.poll_once()
        rig.clock.now += 1
        await p.poll_once()
    sync = p.status.jobs_sync
    assert sync.states_unsupported and sync.state_reads == 1
    assert sync.full_listings == {"first": 1, "off": 2}
    assert p.status.endpoints["jobs"].last_ok


async def test_impossible_records_read_one_by_one_are_dropped_and_not_read_again(rig: Rig) -> None:
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        bad = t.submit(partition="gpu")
        t.set(bad, cpus=num(-4))
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and bad not in by_id(snap.jobs)
        assert snap.dropped == {"jobs": ("gpu",)}
        reads = t.reads["job"]
        rig.clock.now += 1
        snap = await p.poll_once()
        assert t.reads["job"] == reads and snap is not None and snap.dropped == {"jobs": ("gpu",)}
        t.purge(bad)
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None and snap.dropped == {}


CHURN = ("submit", "start", "end", "purge", "split", "array")
"""What :func:`churn` may do to the job table (beside what a test does itself)."""
LIKES = (3, 6, 7, 9)
"""The records :func:`churn` copies for its submissions: never purged."""


def churn(
    t: JobTable, rnd: random.Random, ops: Sequence[str], keep: Collection[int] = LIKES
) -> tuple[str, int, str]:
    """One random change to the table (an op of ``ops`` on a random record, if it applies to it: a start
    of a pending job, an end of a running one, a purge of an ended one not in ``keep``, a split of a
    pending array's task, a submission like one of :data:`LIKES`); (op, record, its state before)."""
    job_id = rnd.choice(sorted(t.records))
    rec = t.records[job_id]
    state = rec["job_state"][0]
    op = rnd.choice(ops)
    if op == "submit":
        t.submit(like=rnd.choice([6, 7, 9]))
    elif op == "array":
        t.submit(like=3, array_job_id=num(t.next_id), array_task_string="1-4%2")
    elif op == "start" and state == "PENDING" and not rec["array_task_string"]:
        t.start(job_id)
    elif op == "end" and state == "RUNNING":
        t.end(job_id, rnd.choice(["COMPLETED", "FAILED", "TIMEOUT"]))
    elif op == "purge" and state in FINAL_STATES and job_id not in keep:
        t.purge(job_id)
    elif op == "split" and rec["array_task_string"] and state == "PENDING":
        t.start_array_task(job_id)
    return op, job_id, state


@pytest.mark.parametrize("seed", seeds(6))
async def test_random_churn_keeps_the_incremental_snapshot_equal_to_a_listing(rig: Rig, seed: int) -> None:
    """Submissions, starts, ends, purges, array tasks splitting off, holds and releases (announced by the RPC
    counter): after every poll the jobs equal a full listing's, field by field."""
    rnd = random.Random(seed)
    t = rig.table
    limit = 4 if seed % 2 else 1000  # odd seeds: a backlog spread over polls; even ones: holds and releases
    p = rig.poller(jobs_changes_limit=limit, jobs_listing_ratio=1e9)  # never list again: incremental only
    rpcs = 0
    async with p.client:
        await p.poll_once()
        for _ in range(25):
            for _ in range(rnd.randint(0, 4)):
                ops = [*CHURN, "hold", "release"]
                op, job_id, state = churn(t, rnd, ops, keep=())
                if op in ("hold", "release") and state == "PENDING" and limit > 4:
                    held = op == "hold"
                    t.set(
                        job_id,
                        priority=num(0 if held else 100),
                        state_reason="JobHeldUser" if held else "Priority",
                    )
                    rpcs += 1
                    rig.set_rpcs(rpcs)
            rig.clock.now += 1
            snap = await p.poll_once()
            sync = p.status.jobs_sync
            if sync.backlog or sync.recheck_pending or sync.recheck:
                continue  # the rest comes with the next polls (a recheck reads 50 jobs/s)
            assert snap is not None
            assert differences(snap.jobs, (await rig.listed()).jobs) == []
    assert p.status.jobs_sync.full_listings == {"first": 1}


@pytest.mark.parametrize("seed", seeds(4))
async def test_random_churn_asking_some_records_with_whole_answers_beside(
    rig: Rig, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking /jobs/state about what the counters say moved, the whole answer read beside the polls every
    3 s and held back for 0–3 polls (as of its request): after every poll whose counts are accounted for,
    every job Slurm holds is held as it is (a purge, which no counter sees, may wait for a whole answer);
    after every whole answer folded in, the jobs equal a full listing's, field by field — but for the jobs
    purged after that answer's request, which it still lists (when it is due depends on how long the
    earlier ones took: real seconds, so which purges fall in that window depends on the machine's load)."""
    rnd = random.Random(seed)
    t = rig.table
    rig.fake.override.pop("diag")
    # every 3 s of the test's clock, however long the last one took (ten times that, in real seconds)
    monkeypatch.setattr(incremental, "STATES_FULL_EVERY_RATIO", 0.0)
    p = rig.poller(jobs_states_targeted_min=1, jobs_states_full_every=3.0, jobs_listing_ratio=1e9)
    sync = p.status.jobs_sync
    gate = asyncio.Event()
    try:
        async with p.client:
            for _ in range(2):  # the first listing, the first whole answer (in the poll)
                await p.poll_once()
                rig.clock.now += 1
            rig.fake.whole_states_gate = gate
            folded = 0
            meanwhile: set[int] = set()  # purged since the request of the whole answer being read
            for _ in range(40):
                for _ in range(rnd.randint(0, 4)):
                    op, job_id, _ = churn(t, rnd, CHURN)
                    if op == "purge" and job_id not in t.records and p.whole_states_in_flight:
                        meanwhile.add(job_id)
                if rnd.random() < 0.4:  # the whole answer asked (if any) arrives
                    gate.set()
                    await p.listing_settled()
                    gate = rig.fake.whole_states_gate = asyncio.Event()
                wholes = sync.states_asks["whole"]
                rig.clock.now += 1
                snap = await p.poll_once()
                await made_as_asked(rig, p)
                assert snap is not None
                after_request = set()
                if sync.states_asks["whole"] > wholes:
                    after_request, meanwhile = meanwhile, set()
                if sync.unaccounted or sync.backlog:
                    continue
                listed = (await rig.listed()).jobs
                live = {j.job_id for j in listed}
                assert live <= {j.job_id for j in snap.jobs}  # every job held; a purged one may linger
                assert differences(tuple(j for j in snap.jobs if j.job_id in live), listed) == []
                if sync.states_asks["whole"] > wholes:
                    folded += 1
                    held = tuple(j for j in snap.jobs if j.job_id not in after_request)
                    assert differences(held, listed) == []
            assert folded >= 2
    finally:
        gate.set()
        await p.close()


async def test_metrics_status_page_and_snapshot_say_how_the_jobs_are_kept(rig: Rig) -> None:
    import aiohttp

    from exporter.server import make_app
    from testkit.tools import serve_app

    p = rig.poller()
    async with p.client:
        await p.poll_once()
        rig.table.start(6)
        rig.clock.now += 1
        await p.poll_once()
        async with serve_app(make_app(p)) as url, aiohttp.ClientSession() as cs:
            async with cs.get(f"{url}/metrics") as r:
                metrics = await r.text()
            async with cs.get(f"{url}/") as r:
                page = await r.text()
            async with cs.get(f"{url}/snapshot") as r:
                snapshot = await r.json()
    assert 'slurm_exporter_poll_jobs_reads_total{endpoint="jobs/state"} 2.0' in metrics  # count + 1 read
    assert 'slurm_exporter_poll_jobs_reads_total{endpoint="job"} 1.0' in metrics
    assert 'slurm_exporter_poll_jobs_listings_total{reason="first"} 1.0' in metrics
    assert "slurm_exporter_poll_jobs_incremental 1.0" in metrics
    assert "slurm_exporter_poll_jobs_changed 1.0" in metrics
    assert "slurm_exporter_poll_jobs_listed_timestamp_seconds 1e+06" in metrics
    assert "jobs: incremental" in page and "1 read one by one by the last poll" in page
    assert snapshot["listed_at"] == {"jobs": 1_000_000.0}
    assert snapshot["requested_at"]["jobs"] == 1_000_001.0


def test_updated_tells_what_an_rpc_does_from_the_schedulers_own_drift() -> None:
    pending = _job(5, reason="Priority")
    assert not jobsync.updated(pending, msgspec.structs.replace(pending, reason="Resources", priority=7))
    drift = {"start_time": 5.0, "end_time": 9.0, "eligible_time": 1.0, "dependency": ""}
    assert not jobsync.updated(pending, msgspec.structs.replace(pending, **drift))  # type: ignore[arg-type]
    assert jobsync.updated(pending, msgspec.structs.replace(pending, time_limit_seconds=60))
    assert jobsync.updated(pending, msgspec.structs.replace(pending, reason="JobHeldUser", priority=0))
    held = msgspec.structs.replace(pending, reason="JobHeldAdmin", priority=0)
    assert jobsync.updated(held, msgspec.structs.replace(held, reason="Priority", priority=3))
    assert jobsync.updated(pending, msgspec.structs.replace(pending, partitions=("gpu",)))
    assert not jobsync.updated(pending, None) and not jobsync.updated(None, pending)


def test_to_follow_names_the_jobs_whose_reason_is_about_to_move() -> None:
    ended = _job(1, "COMPLETED")
    fresh_unsettled = _job(20, reason="None")
    fresh_settled = _job(21, reason="Priority")
    held = [
        _job(9, reason="Dependency", dependency="afterok:1(unfulfilled)"),
        _job(10, reason="Dependency", dependency="afterany:77(unfulfilled)"),  # on another job
        _job(11, reason="BeginTime", eligible_time=100.0),  # its time has come
        _job(12, reason="BeginTime", eligible_time=500.0),  # not yet
        _job(13, reason="BeginTime", eligible_time=50.0),  # followed to the end already
        _job(14, reason="Dependency", dependency="afterok:3_7(unfulfilled)"),  # on an array task of 3
        fresh_unsettled,
        fresh_settled,
    ]
    task = _job(30, "RUNNING", array_job_id=3, array_task_id=7)
    got = jobsync.to_follow(
        [ended, fresh_unsettled, fresh_settled, task], {20, 21}, held, now=200.0, done={13}
    )
    assert got == {9, 11, 14, 20}


async def test_a_dependency_met_is_followed_without_a_listing_or_an_rpc(rig: Rig) -> None:
    """Job 9 waits on job 1 (afterok); job 1 ends; slurmctld's next pass turns 9's reason to Priority — no
    state change, no RPC: the poller reads 9 again in the polls after 1 left."""
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        t.end(1)
        rig.clock.now += 1
        await p.poll_once()
        assert p.status.jobs_sync.follow == {9: jobsync.FOLLOW_READS}
        t.set(9, state_reason="Priority", dependency="afterok:1(fulfilled)")
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and by_id(snap.jobs)[9].reason == "Priority"
        assert p.status.jobs_sync.follow == {} and p.status.jobs_sync.full_listings == {"first": 1}
        reads = t.reads["job"]
        rig.clock.now += 1
        await p.poll_once()
    assert t.reads["job"] == reads  # done following


async def test_a_fresh_jobs_reason_is_read_again_after_the_first_pass(rig: Rig) -> None:
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        new = t.submit(state_reason="PartitionConfig")  # before slurmctld's first pass
        rig.clock.now += 1
        await p.poll_once()
        t.set(new, state_reason="Dependency")
        rig.clock.now += 1
        snap = await p.poll_once()
        assert snap is not None and by_id(snap.jobs)[new].reason == "Dependency"
        stuck = t.submit(state_reason="None")  # never looked at by the scheduler: followed 3 polls, then left
        for _ in range(5):
            rig.clock.now += 1
            await p.poll_once()
    assert stuck not in p.status.jobs_sync.follow
    assert t.reads["job"] == 2 + 1 + jobsync.FOLLOW_READS


async def test_a_begin_time_that_came_is_followed(rig: Rig) -> None:
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        eligible = by_id(p.snapshot.jobs if p.snapshot else ())[10].eligible_time
        assert eligible is not None
        rig.clock.now = eligible + 1
        t.set(10, state_reason="Priority")  # slurmctld's pass after the begin time
        await p.poll_once()
        snap = await p.poll_once()
    assert snap is not None and by_id(snap.jobs)[10].reason == "Priority"


async def test_a_standby_replica_does_not_list_for_the_period(rig: Rig) -> None:
    p = rig.poller(jobs_full_refresh=30.0)
    p.standby = True
    async with p.client:
        await p.poll_once()  # the first listing: every replica needs one
        rig.clock.now += 100
        await p.poll_once()
        assert p.status.jobs_sync.full_listings == {"first": 1} and p.status.jobs_sync.incremental
        p.standby = False  # it leads now
        rig.clock.now += 1
        await p.poll_once()
        await p.listing_settled()
        await p.poll_once()
    assert p.status.jobs_sync.full_listings == {"first": 1, "period": 1}


async def test_a_standby_polls_at_its_own_interval_and_at_once_when_it_leads(rig: Rig) -> None:
    """The second replica of the bridge overlay: --standby-poll-interval spares slurmrestd its polls."""
    p = rig.poller(interval=0.01, standby_interval=3600.0)
    p.standby = True
    async with p.client:
        task = asyncio.create_task(p.run(), name="poller")
        try:
            first = await p.wait_next(None)
            await asyncio.sleep(0.3)  # a leader polls ~20 times meanwhile
            assert p.status.polls == 1 and p.snapshot is first
            p.standby = False  # what slurm_keda.serve.LeaderListings does when the lead is won
            p.poll_soon()
            snap = await asyncio.wait_for(p.wait_next(first), 5.0)
            for _ in range(2):  # and on at the leader's interval (a standby's would take an hour)
                snap = await asyncio.wait_for(p.wait_next(snap), 5.0)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_api_v0040_lists_in_full() -> None:
    """v0.0.40's /jobs/state names a split-off array task by its array's id (3_1, where v0.0.41+ say 6_1,
    the task's own record; 24.11 lab): its jobs are listed every poll, as before."""
    table = JobTable.recorded()
    fake = FakeSlurmrestd(RECORDED / "slurm-24.11.5", jobs_table=table, versions=["v0.0.40"])
    async with serve(fake) as url:
        rig = Rig(fake, table, url, Clock(1_000_000.0))
        p = rig.poller()
        async with p.client:
            await p.poll_once()
            rig.clock.now += 1
            await p.poll_once()
    assert p.status.jobs_sync.full_listings == {"off": 2} and table.reads["jobs/state"] == 0


async def test_no_listing_for_the_period_when_it_is_zero(rig: Rig) -> None:
    p = rig.poller(jobs_full_refresh=0.0)
    async with p.client:
        await p.poll_once()
        rig.clock.now += 100_000
        await p.poll_once()
    assert p.status.jobs_sync.full_listings == {"first": 1} and p.status.jobs_sync.incremental


async def test_an_undecodable_record_read_one_by_one_is_refused_alone(rig: Rig) -> None:
    """A ``/job/{id}`` answer with a count that is not an integer: the job is refused (its partition held,
    not read again until it moves) and the read goes on — before, every incremental read failed on it."""
    t = rig.table
    p = rig.poller()
    async with p.client:
        await p.poll_once()
        bad = t.submit(partition="gpu")
        fine = t.submit(partition="cpu")
        t.set(bad, cpus={"set": True, "infinite": False, "number": 1e30})
        rig.clock.now += 1
        snap = await p.poll_once()
        st = p.status.endpoints["jobs"]
        assert st.last_ok, st.last_error
        assert snap is not None and bad not in by_id(snap.jobs) and fine in by_id(snap.jobs)
        assert snap.dropped == {"jobs": ("gpu",)}
        assert st.refused_now == {"undecodable": (1, st.refused_now["undecodable"][1])}
        assert st.refused_now["undecodable"][1].startswith(f"job {bad}: undecodable (Expected `int`")
        reads = t.reads["job"]
        rig.clock.now += 1
        await p.poll_once()
        assert t.reads["job"] == reads  # not read again until it moves
        t.purge(bad)
        rig.clock.now += 1
        snap = await p.poll_once()
    assert snap is not None and snap.dropped == {} and p.status.endpoints["jobs"].refused_now == {}


async def test_a_hung_listing_is_cut_and_retried_while_single_reads_keep_the_jobs_fresh(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40, item 2: a ``/jobs`` listing slurmrestd never begins to answer. Before, the poll waited for
    it (up to ``--stream-timeout``, 600 s) and the jobs were held stale meanwhile. Now the listing runs
    beside the polls, is cut when it has not begun within the idle limit plus the time it may take to
    render (:data:`exporter.poller.RENDER_SECONDS_PER_JOB` per job), counted, logged once, retried after a
    backoff — and the single-job reads keep every change current meanwhile."""
    caplog.set_level(logging.INFO)
    t = rig.table
    client = SlurmClient(
        ClientConfig(base_url=rig.url, token=TokenSource(token="good-token"), retries=1, idle_timeout=0.3),
        sleep=no_sleep,
    )
    p = Poller(SlurmSession(client), PollerConfig(jobs_sweep_rate=0.0), clock=rig.clock)
    release = asyncio.Event()
    rig.fake.hang_until = release
    st, sync = p.status.endpoints["jobs"], p.status.jobs_sync
    async with p.client:
        try:
            await p.poll_once()
            rig.fake.faults["jobs"] = "hang"  # the listing only: /jobs/state and /job/{id} answer
            # the allowance by the job count alone: on a busy machine the first listing took long enough
            # for three times its duration to be the larger (0.57 s where 0.47 s was asserted)
            sync.listing_duration = 0.0
            p.refresh_jobs()
            t.start(6, nodes="c2")
            rig.clock.now += 1
            snap = await asyncio.wait_for(p.poll_once(), 10)  # main waited here for the whole hang
            assert snap is not None and by_id(snap.jobs)[6].state == "RUNNING"
            assert snap.fetched_at["jobs"] == rig.clock.now and p.status.up(rig.clock.now)
            await asyncio.wait_for(p.listing_settled(), 10)  # cut: never begun within 0.3 s + 0.01 s a job
            t.end(6, "COMPLETED")
            rig.clock.now += 1
            snap = await p.poll_once()
            assert snap is not None and by_id(snap.jobs)[6].state == "COMPLETED"  # still fresh
            assert st.errors == {"timeout": 1} and st.last_ok and sync.full_listings == {"first": 1}
            held = len(by_id(snap.jobs))
            assert f"no answer begun within {0.3 + held * RENDER_SECONDS_PER_JOB:.2f}s" in st.last_error
            warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("jobs listing:")]
            assert len(warned) == 1 and "kept by single reads meanwhile, listing again in" in warned[0]
            # retried once the backoff passed; the same cause again is counted, not logged again
            rig.clock.now += 30
            await p.poll_once()
            await asyncio.wait_for(p.listing_settled(), 10)
            rig.clock.now += 1
            await p.poll_once()
            assert st.errors == {"timeout": 2}
            assert len([r for r in caplog.records if r.getMessage().startswith("jobs listing:")]) == 1
            # slurmrestd answers again: listed, folded in, said once
            rig.fake.faults.clear()
            rig.clock.now += 60
            await p.poll_once()
            await asyncio.wait_for(p.listing_settled(), 10)
            rig.clock.now += 1
            snap = await p.poll_once()
        finally:
            release.set()
    assert sync.full_listings == {"first": 1, "requested": 1}
    assert any(
        r.getMessage().startswith("jobs listing: listed again after 2 time(s)") for r in caplog.records
    )
    assert snap is not None and differences(snap.jobs, (await rig.listed()).jobs) == []
