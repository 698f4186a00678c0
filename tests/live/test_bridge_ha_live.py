"""High availability end to end: two ``slurm-keda bridge`` processes (the real console script) share one
Lease in the fake Kubernetes API and one Slurm (the 26.05 lab). Only the leader writes; the follower serves
its metrics and the scaler's. The leader is killed (SIGKILL, no release) between a gang's submission and its
binding: the follower takes the Lease once its duration has passed, finds the pending gang's job through its
admin comment, submits nothing twice, and binds the gang when Slurm runs it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from lab import Lab
from testkit.bridge_lab import (
    all_bound,
    bridge_process,
    finish,
    gang_pod,
    job_of,
    k8s_node,
    reserved_nodes,
    squeue,
)
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.scale_harness import metric_sample
from testkit.tools import eventually

RESERVATION = "gang-e2e"  # the gang tests' nodes and policy
NODES = ["gang-1", "gang-2", "gang-3"]
LEASE = ("3", "2", "0.5")  # duration, renew deadline, retry period (s)


def holder(fake: FakeKube) -> str | None:
    lease = fake.get("leases", "slurm-keda", "slurm-keda-bridge-ha", prefix="coordination.k8s.io/v1")
    return None if lease is None else str(lease["spec"]["holderIdentity"])


def replica(
    lab: Lab, tmp_path: Path, kubeconfig: Path, identity: str, *flags: str, advertise: bool = False
) -> contextlib.AbstractAsyncContextManager[tuple[asyncio.subprocess.Process, int]]:
    lease = ("--bridge-lease-duration", LEASE[0], "--bridge-lease-renew-deadline", LEASE[1])
    return bridge_process(
        lab,
        tmp_path,
        kubeconfig,
        RESERVATION,
        *("--bridge-instance", "ha", "--bridge-namespace", "slurm-keda", "--bridge-identity", identity),
        *lease,
        *("--bridge-lease-retry-period", LEASE[2]),
        *flags,
        name=identity,
        advertise=advertise,
    )


async def scrape(port: int) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        return await r.text()


async def test_the_follower_takes_over_a_killed_leader_without_a_second_job(
    lab_2605: Lab, tmp_path: Path
) -> None:
    lab = lab_2605
    fake = FakeKube(token=TOKEN)
    for name in NODES:
        fake.put("nodes", k8s_node(name))
    with reserved_nodes(lab, NODES, RESERVATION):
        async with serve_kube(fake) as url:
            kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
            async with replica(lab, tmp_path, kubeconfig, "replica-a") as (a, _):
                await eventually(lambda: holder(fake) == "replica-a", 30.0, "replica-a to lead", 0.1)
                # the follower polls every 30 s: when it takes over, its last listing predates gang B's
                # submission, and it must not take the missing job for a pod without one
                async with replica(lab, tmp_path, kubeconfig, "replica-b", "--poll-interval", "30") as (
                    _,
                    b_port,
                ):

                    async def follower_serves() -> bool:
                        try:
                            body = await scrape(b_port)
                        except aiohttp.ClientError:
                            return False
                        # the demand follows the first poll by a moment: wait for both
                        return (
                            metric_sample(body, "slurm_up") == 1.0
                            and "slurm_autoscaler_desired_nodes" in body
                        )

                    await eventually(follower_serves, 30.0, "the follower to serve metrics and demand", 0.2)
                    body = await scrape(b_port)
                    assert metric_sample(body, "slurm_bridge_leader") == 0.0

                    # the leader places one gang and submits a second, which must wait for nodes
                    for name in ("a-0", "a-1"):
                        fake.put("pods", gang_pod(name, "ha-a", 2))
                    first = await all_bound(fake, ["a-0", "a-1"], "gang A bound by the leader")
                    for name in ("b-0", "b-1"):
                        fake.put("pods", gang_pod(name, "ha-b", 2))

                    def submitted() -> bool:
                        return any(e["reason"] == "SlurmSubmitted" for e in fake.events_for("team-a", "b-0"))

                    await eventually(submitted, 30.0, "gang B submitted", 0.1)
                    assert holder(fake) == "replica-a"

                    a.send_signal(signal.SIGKILL)  # no release: the follower must wait out the Lease
                    await a.wait()
                    killed = asyncio.get_running_loop().time()
                    finish(fake, ["a-0", "a-1"])  # gang A ends: someone must cancel its job to free the nodes
                    await eventually(lambda: holder(fake) == "replica-b", 15.0, "replica-b to take over", 0.1)
                    took = asyncio.get_running_loop().time() - killed
                    print(f"takeover {took:.1f} s after the leader was killed (lease duration {LEASE[0]} s)")
                    assert took <= float(LEASE[0]) + 3 * float(LEASE[2]) + 1.0, took

                    second = await all_bound(fake, ["b-0", "b-1"], "gang B bound by the new leader")
                    # gang A's job cancelled, gang B's starts at slurmctld's next pass: the new leader polls
                    # again shortly after its cancel, not only at its 30-s interval
                    bound_after = asyncio.get_running_loop().time() - killed - took
                    print(f"gang B bound {bound_after:.1f} s after the takeover")
                    assert bound_after < 15.0, bound_after
                    assert squeue(lab, job_of(first[0])) == ""
                    out = lab.run(["squeue", "-h", "-t", "all", "-n", "k8s:team-a/ha-b", "-o", "%i"])
                    assert [j for j in out.split() if int(j) > int(job_of(first[0]))] == [job_of(second[0])]
                    body = await scrape(b_port)
                    assert metric_sample(body, "slurm_bridge_leader") == 1.0
                    assert metric_sample(body, "slurm_bridge_leader_acquisitions_total") == 1.0
                    assert metric_sample(body, "slurm_bridge_actions_total", action="submit") == 0.0


def requests_sent(body: str) -> float:
    """Every request this replica sent slurmrestd (``slurm_exporter_slurmrestd_requests_total``, summed)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(body)
        if family.name == "slurm_exporter_slurmrestd_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


async def test_the_standby_serves_the_leaders_snapshots_and_asks_slurmrestd_nothing(
    lab_2605: Lab, tmp_path: Path
) -> None:
    """--replica-copy: the standby finds the leader's URL in the Lease and serves its snapshots — a job
    submitted shows on both — without one request to slurmrestd; once the leader is killed the standby
    takes over and polls slurmrestd itself, its data never gone."""
    lab = lab_2605
    fake = FakeKube(token=TOKEN)
    async with serve_kube(fake) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        async with replica(lab, tmp_path, kubeconfig, "copy-a", advertise=True) as (a, a_port):
            await eventually(lambda: holder(fake) == "copy-a", 30.0, "copy-a to lead", 0.1)
            async with replica(lab, tmp_path, kubeconfig, "copy-b", advertise=True) as (_, b_port):

                async def copying() -> bool:
                    with contextlib.suppress(aiohttp.ClientError):
                        body = await scrape(b_port)
                        return (
                            metric_sample(body, "slurm_exporter_replica_copy_fresh") == 1.0
                            and metric_sample(body, "slurm_up") == 1.0
                        )
                    return False

                await eventually(copying, 30.0, "the standby to serve the leader's copy", 0.2)
                b_before, a_before = requests_sent(await scrape(b_port)), requests_sent(await scrape(a_port))
                job = lab.sbatch("-p", "cpu", "-H", "-J", "replica-copy", command="true")
                try:

                    async def shows_job() -> bool:
                        snapshot = f"http://127.0.0.1:{b_port}/snapshot"
                        async with aiohttp.ClientSession() as http, http.get(snapshot) as r:
                            jobs = (await r.json())["jobs"]
                        return any(j["job_id"] == job for j in jobs)

                    await eventually(shows_job, 15.0, "the copy to show the new job", 0.2)
                    await asyncio.sleep(2.0)  # two of the leader's polls more
                    assert requests_sent(await scrape(b_port)) == b_before, "the standby asked slurmrestd"
                    assert requests_sent(await scrape(a_port)) > a_before
                    a.send_signal(signal.SIGKILL)
                    await a.wait()
                    await eventually(lambda: holder(fake) == "copy-b", 15.0, "copy-b to take over", 0.1)

                    async def polls_itself() -> bool:
                        body = await scrape(b_port)
                        return requests_sent(body) > b_before and metric_sample(body, "slurm_up") == 1.0

                    await eventually(polls_itself, 15.0, "the new leader to poll slurmrestd", 0.2)
                    body = await scrape(b_port)
                    assert metric_sample(body, "slurm_exporter_replica_copy_fresh") == 0.0
                    assert metric_sample(body, "slurm_bridge_leader") == 1.0
                    assert await shows_job()
                finally:
                    lab.run(["scancel", str(job)], check=False)
