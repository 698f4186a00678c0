"""The bridge's placeholder jobs on the real labs: an EXTERNAL_JOB on 26.05 (v0.0.45), a batch placeholder on
24.11 (v0.0.42, no EXTERNAL_JOB there), each submitted, seen RUNNING on a whole node with its admin comment
in the poller's snapshot, and cancelled — through the project's slurmrestd client.

The labs' static nodes may be busy with other tests' jobs, so each test brings its own dynamic node and a
reservation on it that the placeholder names (other queued jobs cannot take the node)."""

from __future__ import annotations

import pytest

from bridge.requests import JobRequest, parse_admin_comment
from bridge.slurm import cancel_job, submit_job
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.errors import SlurmError
from exporter.model import Job
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from lab import Lab
from testkit.bridge_lab import reserved_node
from testkit.tools import eventually

INSTANCE = "lab-test"


def job_request(uid: str, **kw: object) -> JobRequest:
    fields: dict[str, object] = {
        "namespace": "team-a",
        "pod": f"pod-{uid}",
        "uid": uid,
        "name": f"k8s:team-a/pod-{uid}",
        "user_id": 0,
        "group_id": None,
        "partition": "cpu",
        "cpus": 1,
        "memory_mib": 100,
        "gpus": 0,
        "time_limit_minutes": 10,
    }
    fields.update(kw)
    return JobRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flavor", "version"), [("26.05", "v0.0.45"), ("24.11", "v0.0.42")])
async def test_placeholder_job_runs_on_a_whole_node_and_is_cancelled(
    flavor: str, version: str, request: pytest.FixtureRequest
) -> None:
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")  # that one only
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    async with SlurmClient(cfg) as client:
        poller = Poller(SlurmSession(client, api_version=version), PollerConfig())
        uid = f"uid-{flavor}"
        with reserved_node(lab, "bridge-lab") as node_name:
            job_id = await submit_job(
                client,
                version,
                job_request(uid, partition="dyn", reservation=node_name),
                instance=INSTANCE,
                excluded_nodes=["c1"],
            )
            await _run_and_cancel(client, poller, version, job_id, uid, node_name)


async def _run_and_cancel(
    client: SlurmClient, poller: Poller, version: str, job_id: int, uid: str, node_name: str
) -> None:
    """The job runs alone on ``node_name`` with the bridge's admin comment; then it is cancelled."""

    async def state_of() -> Job | None:
        snap = await poller.poll_once()
        assert snap is not None
        return next((j for j in snap.jobs if j.job_id == job_id), None)

    async def running() -> Job | None:
        job = await state_of()
        return job if job is not None and job.state == "RUNNING" and job.nodes else None

    try:
        job = await eventually(running, 30.0, f"job {job_id} RUNNING", 0.5)
        assert parse_admin_comment(job.admin_comment) == (
            INSTANCE,
            [("team-a", f"pod-{uid}", uid)],
            None,
            None,
        )
        assert job.nodes == node_name
        snap = poller.snapshot
        assert snap is not None
        node = next(n for n in snap.nodes if n.name == job.nodes)
        assert job.cpus == node.cpus == 2, "an exclusive placeholder holds the whole node"
    finally:
        assert await cancel_job(client, version, job_id) is True

    async def cancelled() -> bool:
        job = await state_of()
        return job is None or job.state == "CANCELLED"

    await eventually(cancelled, 30.0, f"job {job_id} cancelled", 0.5)
    assert await cancel_job(client, version, job_id) is False  # ended already: nothing to cancel


async def test_a_submission_slurm_refuses_is_a_typed_error_with_slurms_text(lab_2605: Lab) -> None:
    cfg = ClientConfig(base_url=lab_2605.url, token=TokenSource(token_file=lab_2605.token_file))
    async with SlurmClient(cfg) as client:
        with pytest.raises(SlurmError) as e:
            await submit_job(client, "v0.0.45", job_request("u-bad", partition="nosuch"), instance=INSTANCE)
        assert "Invalid partition name specified" in str(e.value)  # slurmctld's reason, not only "failed"
        assert await cancel_job(client, "v0.0.45", 999_999) is False  # no such job: nothing to cancel


@pytest.mark.parametrize(("flavor", "version"), [("26.05", "v0.0.45"), ("24.11", "v0.0.42")])
async def test_an_incremental_poll_sees_a_placeholder_start_without_a_listing(
    flavor: str, version: str, request: pytest.FixtureRequest
) -> None:
    """/jobs/state and /job/{id} on the real slurmrestd: a job submitted after the listing is found RUNNING on
    its node by the next poll, which reads /jobs/state and that one job (no second /jobs listing)."""
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")  # that one only
    cfg = ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file))
    async with SlurmClient(cfg) as client:
        poller = Poller(SlurmSession(client, api_version=version), PollerConfig())
        with reserved_node(lab, "bridge-watch") as node_name:
            before = await poller.poll_once()
            assert before is not None
            job_id = await submit_job(
                client,
                version,
                job_request("uid-watch", partition="dyn", reservation=node_name),
                instance=INSTANCE,
            )
            try:
                assert all(j.job_id != job_id for j in before.jobs)

                async def running() -> bool:
                    snap = await poller.poll_once()
                    return snap is not None and any(
                        j.job_id == job_id and j.state == "RUNNING" for j in snap.jobs
                    )

                await eventually(running, 30.0, f"an incremental poll to read job {job_id} RUNNING", 0.2)
                snap = poller.snapshot
                assert snap is not None
                (job,) = [j for j in snap.jobs if j.job_id == job_id]
                assert job.nodes == node_name and parse_admin_comment(job.admin_comment) is not None
                sync = poller.status.jobs_sync
                assert sync.full_listings == {"first": 1} and sync.job_reads >= 1, sync
                assert await poller.session.job(999_999) is None  # a job Slurm does not know
            finally:
                await cancel_job(client, version, job_id)
