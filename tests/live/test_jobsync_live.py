"""Incremental jobs on the real labs (26.05 and 24.11): churn — short jobs starting and ending, an array whose
tasks split off as they start, a het job, a requeue, a hold and a release, ``scontrol update`` of partition
and priority, cancellations — while one poller keeps the jobs from ``/jobs/state`` and ``/job/{id}``; then
its snapshot is compared with a full listing, field by field.

The churn runs on two dynamic nodes of the test's own reservation (other tests' nodes stay untouched). What
``/jobs/state`` cannot see and no RPC announces — slurmctld's own reason and start-time estimates of pending
jobs — is compared after the one full listing ``refresh_jobs`` asks for; after that listing a settled
cluster costs no single-job read at all (Slurm's ``/jobs/state`` agrees with our reading of each record)."""

from __future__ import annotations

import asyncio
import time

import pytest

from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.jobsync import signature
from exporter.model import Job, Snapshot
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from lab import Lab
from testkit.bridge_lab import reserved_nodes
from testkit.jobdiff import by_id, job_differences

LISTING_ONLY = ("reason", "start_time", "end_time")
"""Fields slurmctld changes on pending jobs without a state change or an RPC (scheduler passes, backfill
estimates): current only as of the last full listing (``Snapshot.listed_at``)."""


async def listed(lab: Lab) -> Snapshot:
    """A fresh poller's full listing of the lab."""
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    async with SlurmClient(cfg) as client:
        snap = await Poller(SlurmSession(client), PollerConfig(incremental_jobs=False)).poll_once()
    assert snap is not None
    return snap


def stable_ids(a: Snapshot, b: Snapshot) -> set[int]:
    """Jobs two listings hold with the same record (what did not change between them)."""
    old, new = by_id(a.jobs), by_id(b.jobs)
    return {j for j in old.keys() & new.keys() if old[j] == new[j]}


def only(snap: Snapshot, ids: set[int]) -> list[Job]:
    return [j for j in snap.jobs if j.job_id in ids]


@pytest.mark.parametrize(("flavor", "asks"), [("26.05", "whole"), ("26.05", "some"), ("24.11", "some")])
async def test_churn_then_the_incremental_snapshot_equals_a_listing(
    flavor: str, asks: str, request: pytest.FixtureRequest
) -> None:
    """``asks``: what each poll asks /jobs/state — the whole answer (fewer jobs than
    --jobs-states-targeted-min), or only the records that can have moved for what /diag's job counters
    counted (here from one job on): every change found either way, the whole answer read only for what the
    counts did not account for (a requeue, a cancelled pending job)."""
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")  # that one only
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    resv = "jobsync"
    where = ("-p", "dyn", f"--reservation={resv}", "-n1")
    targeted = {"jobs_states_targeted_min": 1 if asks == "some" else 0}
    async with SlurmClient(cfg) as client:
        # no sweep: at the end every single read must be one a state change asked for
        poller = Poller(
            SlurmSession(client), PollerConfig(jobs_full_refresh=1e9, jobs_sweep_rate=0.0, **targeted)
        )
        with reserved_nodes(lab, ["sync-a", "sync-b"], resv):
            assert await poller.poll_once() is not None
            polls = 0

            async def poll_for(seconds: float) -> None:
                nonlocal polls
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    assert await poller.poll_once() is not None
                    polls += 1
                    await asyncio.sleep(0.2)

            requeued = lab.sbatch(*where, "--requeue", command="sleep 300")
            shorts = [lab.sbatch(*where, command="sleep 1") for _ in range(3)]
            array = lab.sbatch(*where, "-a", "1-5%2", command="sleep 1")
            het = lab.sbatch(*where, ":", *where, command="sleep 1")
            held = lab.sbatch(*where, "-H", command="sleep 300")
            # held (never starts); a partition change sticks on both releases from a multi-partition job
            later = lab.sbatch("-p", "cpu,gpu", "-n1", "--mem=100", "-H", command="sleep 1")
            prio = lab.sbatch(*where, command="sleep 1")  # behind the others on our two nodes
            for _ in range(50):
                await poll_for(0.2)
                if any(j.job_id == requeued and j.state == "RUNNING" for j in poller.snapshot.jobs):
                    break
            lab.run(["scontrol", "requeue", str(requeued)])
            for _ in range(
                20
            ):  # slurmctld may answer EAGAIN ("Resource temporarily unavailable") for a while
                moved = lab.run_raw(["scontrol", "update", f"JobId={later}", "Partition=gpu"])
                if moved.returncode == 0:
                    break
                assert "temporarily unavailable" in moved.stdout + moved.stderr, moved
                await poll_for(0.5)
            lab.run(["scontrol", "update", f"JobId={prio}", "Priority=7"])
            await poll_for(2.0)
            lab.run(["scontrol", "release", str(held)])
            await poll_for(2.0)
            lab.run(["scontrol", "hold", str(requeued)])
            await poll_for(3.0)  # held and requeued settle (the array's last tasks: waited for below)
            lab.run(["scancel", str(held), str(later), str(requeued)])
            # no fixed wait decides it: poll until none of the reservation's jobs pends, runs or completes
            for _ in range(120):
                await poll_for(0.5)
                if not lab.run(
                    ["squeue", "-h", "-R", resv, "-t", "PD,R,CG", "-o", "%i"], check=False
                ).split():
                    break

            mine = {*shorts, array, het, requeued, held, later, prio}
            # the comparison window is forced: only jobs whose record two listings around the last poll agree
            # on are compared (another test's job may end meanwhile); ours have all settled, so they must be
            earlier = await listed(lab)
            snap = await poller.poll_once()
            polls += 1
            assert snap is not None
            want = await listed(lab)
            still = stable_ids(earlier, want)
            assert {*shorts, array, het, requeued, held, later, prio} <= still
            assert job_differences(only(snap, still), only(want, still), pending_ignored=LISTING_ONLY) == []
            jobs = by_id(snap.jobs)
            assert mine <= set(jobs)
            assert {jobs[j].state for j in (held, later, requeued)} == {"CANCELLED"}
            tasks = [j for j in snap.jobs if j.array_job_id == array]
            assert sorted(j.array_task_id for j in tasks) == [1, 2, 3, 4, 5], tasks  # split off as they ran
            assert jobs[later].partitions == ("gpu",) and jobs[prio].priority == 7
            sync = poller.status.jobs_sync
            assert sync.full_listings == {"first": 1}, sync.full_listings
            assert sync.incremental_fetches == polls and sync.job_reads > 0
            if asks == "some":  # most polls asked some records or none, the whole answer now and then
                assert sync.states_asks["some"] > 0 and sync.states_asks["none"] > 0, sync.states_asks
                assert sync.states_asks["whole"] < polls / 2, (sync.states_asks, polls)
            else:
                assert set(sync.states_asks) == {"whole"}, sync.states_asks

            poller.refresh_jobs()  # one full listing: now the pending jobs' estimates too
            await poller.poll_once()  # it begins beside the single reads
            await poller.listing_settled()
            listing = await poller.poll_once()  # folded in
            assert listing is not None and sync.full_listings["requested"] == 1
            after = await poller.poll_once()
            assert after is not None
            before = by_id(listing.jobs)
            for job_id in sync.last_read:  # read only jobs whose state moved in between
                old = before.get(job_id)
                new = by_id(after.jobs).get(job_id)
                assert old is None or new is None or signature(old) != signature(new), job_id
            final = await listed(lab)
            still = stable_ids(listing, final)
            assert job_differences(only(after, still), only(final, still), pending_ignored=LISTING_ONLY) == []


@pytest.mark.parametrize("flavor", ["26.05", "24.11"])
async def test_a_start_without_a_listing_reads_every_job_and_equals_a_listing(
    flavor: str, request: pytest.FixtureRequest
) -> None:
    """More jobs than --jobs-listing-max (here 1): no /jobs listing at all — /jobs/state and every job read
    one by one, a few a poll, pending ones first; partial meanwhile (jobs_unread, "as of" 0), then equal to
    a full listing field by field (an array with a task split off, a het job, held and running jobs)."""
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")
    resv = "unlisted"
    where = ("-p", "dyn", f"--reservation={resv}", "-n1")
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    with reserved_nodes(lab, ["unl-a"], resv):
        running = lab.sbatch(*where, command="sleep 300")
        array = lab.sbatch(*where, "-a", "1-4", command="sleep 300")  # task 1 waits: one node, one CPU
        het = lab.sbatch(*where, ":", *where, "-H", command="sleep 1")
        held = lab.sbatch(*where, "-H", command="sleep 1")
        for _ in range(100):  # no fixed wait: the first job runs before the poller starts
            if lab.run(["squeue", "-h", "-j", str(running), "-o", "%T"], check=False).strip() == "RUNNING":
                break
            await asyncio.sleep(0.1)
        config = PollerConfig(jobs_listing_max=1, jobs_changes_limit=3, jobs_sweep_rate=0.0)
        async with SlurmClient(cfg) as client:
            poller = Poller(SlurmSession(client), config)
            partial: list[Snapshot] = []
            for _ in range(200):
                snap = await poller.poll_once()
                assert snap is not None
                if not snap.jobs_unread:
                    break
                partial.append(snap)
                assert snap.jobs_as_of == 0.0
            assert snap.jobs_as_of > 0
            # compared where two listings around one more poll agree (a task may start meanwhile)
            earlier = await listed(lab)
            snap = await poller.poll_once()
            assert snap is not None and not snap.jobs_unread
            want = await listed(lab)
            assert "jobs" not in client.requests_by_endpoint  # this poller never listed
        sync = poller.status.jobs_sync
        assert sync.unlisted and sync.full_listings == {} and len(partial) >= 1
        mine = {running, array, het, held}
        still = stable_ids(earlier, want)
        assert {running, het, held} <= still
        jobs = by_id(snap.jobs)
        assert mine <= set(jobs) and jobs[running].state == "RUNNING"
        assert job_differences(only(snap, still), only(want, still), pending_ignored=LISTING_ONLY) == []
        lab.run(["scancel", str(running), str(array), str(het), str(held)], check=False)
