"""The bridge against the live 26.05 lab: nodes reserved for the tests, bridge pods and processes, squeue."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from bridge.actions import (
    JOB_ID_ANNOTATION,
    BridgeOptions,
)
from bridge.controller import Bridge
from bridge.kube import Kube, load_configuration
from bridge.policy import parse_policy
from bridge.requests import PREFIX
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.poller import Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from lab import Lab, LabError
from testkit.builders import ALLOCATABLE
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.tools import eventually

NODE = "bridge-e2e"


@contextlib.contextmanager
def reserved_node(lab: Lab, name: str) -> Iterator[str]:
    """A new dynamic node (partition ``dyn``, 2 CPUs) under a reservation of the same name."""
    with reserved_nodes(lab, [name], name):
        yield name


@contextlib.contextmanager
def reserved_nodes(lab: Lab, names: list[str], reservation: str) -> Iterator[list[str]]:
    """New dynamic nodes (partition ``dyn``, 2 CPUs each) under one reservation (leftovers of an
    interrupted run are cleared first). Partition ``dyn`` is DOWN from before the nodes register until the
    reservation holds them: else a job already pending there (the lab's demo ``dyn_wait``) may start on a
    new node first — "Requested nodes are busy" for good, and the demo job gone (seen in CI). Right after
    they register, slurmctld may still call a node busy for a moment: retried."""
    lab.run(["scontrol", "delete", f"ReservationName={reservation}"], check=False)
    for name in names:
        clear_node(lab, name, must_exist=False)
    added = []
    try:
        lab.run(["scontrol", "update", "partitionname=dyn", "state=down"])
        try:
            for name in names:
                lab.add_node(name, dynamic=True, cpus=2, memory_mb=2000)
                added.append(name)
            create = [
                *("scontrol", "create", "reservation", f"ReservationName={reservation}"),
                *(f"Nodes={','.join(names)}", "Users=root", "StartTime=now", "Duration=30"),
            ]
            for attempt in range(20):
                result = lab.run_raw(create)
                if result.returncode == 0:
                    break
                assert "busy" in result.stdout + result.stderr and attempt < 19, result.stdout + result.stderr
                time.sleep(0.5)
        finally:
            lab.run(["scontrol", "update", "partitionname=dyn", "state=up"])
        yield names
    finally:
        # every node drained first: once the reservation goes (with the first node cleared), a job pending in
        # dyn — the demo's dyn_wait — would start on a node not cleared yet, which then stays busy
        if added:
            drain = ["scontrol", "update", f"nodename={','.join(added)}", "state=drain", "reason=lab-cleanup"]
            lab.run(drain, check=False)
        # the jobs next: slurmctld refuses to delete a reservation with jobs, and a node in a reservation
        lab.run(["scancel", f"--reservation={reservation}"], check=False)
        for name in added:
            clear_node(lab, name, must_exist=True, reservation=reservation)


def k8s_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"slurm-keda.io/bridge": "true"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": dict(ALLOCATABLE)},
    }


def lab_cluster(
    names: list[str],
    taints: dict[str, list[dict[str, str]]] | None = None,
    labels: dict[str, dict[str, str]] | None = None,
) -> FakeKube:
    """A fake API server holding a Kubernetes node for each of the lab's dynamic nodes ``names``, with the
    allocatable such a node's kubelet reports (2 CPUs, 2000 MiB), and ``taints`` / ``labels`` per node."""
    fake = FakeKube(token=TOKEN)
    for name in names:
        node = k8s_node(name)
        node["metadata"]["labels"] |= (labels or {}).get(name, {})
        node["spec"] = {"taints": (taints or {}).get(name, [])}
        node["status"]["allocatable"] = {"cpu": "2", "memory": "2000Mi", "pods": "110"}
        fake.put("nodes", node)
    return fake


def reserved_pod(name: str, reservation: str, **spec: Any) -> dict[str, Any]:
    """:func:`bridge_pod` under ``reservation``, with ``spec`` fields added."""
    p = bridge_pod(name, reservation)
    p["spec"] |= spec
    return p


def bridge_pod(name: str, reservation: str | None = NODE) -> dict[str, Any]:
    annotations = {PREFIX + "reservation": reservation} if reservation else {}
    return {
        "metadata": {"name": name, "namespace": "team-a", "annotations": annotations},
        "spec": {
            "schedulerName": "slurm-bridge",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


@contextlib.asynccontextmanager
async def running_bridge(
    lab: Lab,
    version: str,
    tmp_path: Path,
    *,
    policy: dict[str, Any] | None = None,
    nodes: tuple[str, ...] = (NODE,),
    fake: FakeKube | None = None,
    terminating_grace: float = 30.0,
    bind_deadline: float = 300.0,
    shared_nodes: bool = False,
) -> AsyncIterator[tuple[FakeKube, Bridge]]:
    """A bridge with its own poller on ``lab``, against ``fake`` (by default a new one holding ``nodes``)."""
    if fake is None:
        fake = FakeKube(token=TOKEN)
        for name in nodes:
            fake.put("nodes", k8s_node(name))
    doc = policy or {"namespaces": {"team-a": {"user_id": 0, "partitions": ["dyn"], "reservations": [NODE]}}}
    options = BridgeOptions(
        instance=f"live-{tmp_path.name}",
        policy=parse_policy(doc),
        terminating_grace=terminating_grace,
        bind_deadline=bind_deadline,
        shared_nodes=shared_nodes,
    )
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        slurm = SlurmClient(ClientConfig(base_url=lab.url, token=TokenSource(token_file=lab.token_file)))
        async with client.ApiClient(cfg) as api, slurm:
            session = SlurmSession(slurm, api_version=version)
            poller = Poller(session, PollerConfig(interval=1.0))
            bridge = Bridge(poller, session, Kube(api), options)
            tasks = [
                asyncio.create_task(poller.run(), name="poller"),
                asyncio.create_task(bridge.run(), name="bridge"),
            ]
            try:
                yield fake, bridge
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)


def squeue(lab: Lab, job_id: str) -> str:
    return lab.run(["squeue", "-h", "-j", job_id, "-o", "%i|%T|%N"], check=False).strip()


@contextlib.asynccontextmanager
async def bridge_process(
    lab: Lab,
    tmp_path: Path,
    kubeconfig: Path,
    reservation: str,
    *flags: str,
    name: str = "bridge",
    advertise: bool = False,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    """``slurm-keda bridge`` (the console script) on ``lab`` with a policy letting team-a's pods into
    partition dyn and ``reservation``; its log in ``tmp_path/<name>.log``; yields it and its HTTP port.
    ``advertise``: it names its HTTP URL in the Lease while it leads (``--replica-advertise-url``), so a
    standby copies its snapshots instead of polling."""
    import sys

    from testkit.scale_harness import free_port

    policy = tmp_path / f"{name}-policy.yaml"
    policy.write_text(
        f"namespaces:\n  team-a:\n    user_id: 0\n    partitions: [dyn]\n    reservations: [{reservation}]\n"
    )
    port = free_port()
    with open(tmp_path / f"{name}.log", "wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "slurm-keda"),
            "bridge",
            *("--slurmrestd-url", lab.url, "--token-file", str(lab.token_file)),
            *("--bridge-policy-file", str(policy), "--kubeconfig", str(kubeconfig), "--poll-interval", "1"),
            *("--listen-address", "127.0.0.1", "--listen-port", str(port)),
            *(("--replica-advertise-url", f"http://127.0.0.1:{port}") if advertise else ()),
            *flags,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log_file,
        )
        try:
            yield proc, port
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 15)


def gang_pod(name: str, group: str, size: int) -> dict[str, Any]:
    p = bridge_pod(name, RESERVATION)
    p["metadata"]["annotations"] |= {PREFIX + "group": group, PREFIX + "group-size": str(size)}
    return p


async def all_bound(fake: FakeKube, names: list[str], what: str) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [placed(fake, n) for n in names]
        return pods if all(pods) else None  # type: ignore[return-value]

    return await eventually(ready, 60.0, what, 0.2)


def finish(fake: FakeKube, names: list[str]) -> None:
    """The pods' containers exit 0 (what the kubelet would report)."""
    for name in names:
        fake.update("pods", "team-a", name, {"status": {"phase": "Succeeded"}})


def job_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["annotations"][JOB_ID_ANNOTATION])


def clear_node(lab: Lab, name: str, *, must_exist: bool, reservation: str | None = None) -> None:
    """Cancel the jobs on ``name`` (a busy node cannot be deleted), drop its reservation (by default named
    as the node), remove it. Drained first: nothing starts on it once its reservation is gone."""
    lab.run(["scontrol", "update", f"nodename={name}", "state=drain", "reason=lab-cleanup"], check=False)
    lab.run(["scancel", "-w", name], check=False)
    for _ in range(60):
        if not lab.run(["squeue", "-h", "-w", name], check=False).strip():
            break
        time.sleep(0.5)
    lab.run(["scontrol", "delete", f"ReservationName={reservation or name}"], check=False)
    try:
        lab.remove_node(name)
    except LabError:
        if must_exist:
            raise


RESERVATION = "gang-e2e"


def placed(fake: FakeKube, name: str) -> dict[str, Any] | None:
    p = fake.get("pods", "team-a", name)
    return p if p is not None and p["spec"].get("nodeName") else None
