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
    lab: Lab, tmp_path: Path, kubeconfig: Path, identity: str, *flags: str
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
