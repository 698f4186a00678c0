"""The bridge never looks healthy while it cannot see Kubernetes (issue 40, items 3, 5, 6).

``slurm-keda bridge`` runs as its console script against a fake slurmrestd (recorded 26.05 answers) and the
fake API server, both over real HTTP; faults are injected in the API server and read back where an operator
looks: ``/metrics``, the status page, the probes and the log.

What main did: during API errors the caches' state showed nowhere (no metric, probes 200, nothing on the
page), a list answered with a page that is not JSON killed the cache's task for good (an empty cache, said
nowhere); a 429 asking ``Retry-After`` was asked again within 0.0–0.8 s; a Lease the RBAC Role does not name
(``--bridge-instance`` changed without an RBAC edit) was refused 403 forever with two debug lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from testkit.builders import ALLOCATABLE
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.fake_rbac import Rbac
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import RECORDED, ROOT
from testkit.scale_harness import metric_sample
from testkit.tools import free_port

SCRIPT = Path(sys.executable).parent / "slurm-keda"
DATA = RECORDED / "slurm-26.05.5"
pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)"),
    pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads"),
]


@dataclass
class Running:
    port: int
    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    """Its log lines so far (stderr, read as they come: a full pipe would stop it)."""

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.port}{path}") as r:
            return r.status, await r.text()

    async def metric(self, name: str, **labels: str) -> float | None:
        _, body = await self.get("/metrics")
        return metric_sample(body, name, **labels)

    async def until(self, what: str, timeout: float = 20.0, **labels: str) -> float:
        """Until the series ``what`` exists and is not 0; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                pytest.fail(f"slurm-keda exited {self.proc.returncode}:\n" + "\n".join(self.lines[-30:]))
            with contextlib.suppress(aiohttp.ClientError):
                value = await self.metric(what, **labels)
                if value:
                    return value
            await asyncio.sleep(0.1)
        pytest.fail(f"{what}{labels} never above 0 within {timeout:.0f} s:\n" + "\n".join(self.lines[-30:]))

    async def until_zero(self, what: str, timeout: float = 20.0, **labels: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                if await self.metric(what, **labels) == 0.0:
                    return
            await asyncio.sleep(0.1)
        pytest.fail(f"{what}{labels} never 0 within {timeout:.0f} s:\n" + "\n".join(self.lines[-30:]))


@contextlib.asynccontextmanager
async def bridge(tmp_path: Path, fake: FakeKube, *extra: str) -> AsyncIterator[Running]:
    """``slurm-keda bridge`` against ``fake`` and a fake slurmrestd; stopped (SIGTERM) on exit."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces: {team-a: {user_id: 1001, partitions: [cpu]}}\n")
    slurm = FakeSlurmrestd(DATA)
    async with serve(slurm) as slurm_url, serve_kube(fake) as kube_url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_url)
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            "bridge",
            *("--slurmrestd-url", slurm_url, "--jwt", "good-token", "--poll-interval", "1"),
            *("--listen-address", "127.0.0.1", "--listen-port", str(port)),
            *("--bridge-policy-file", str(policy), "--kubeconfig", str(kubeconfig)),
            *("--bridge-namespace", "slurm", "--bridge-lease-retry-period", "0.5"),
            *extra,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        running = Running(port, proc)

        async def read() -> None:
            assert proc.stderr is not None
            async for line in proc.stderr:
                running.lines.append(line.decode(errors="replace").rstrip())

        reader = asyncio.create_task(read(), name="bridge-stderr")
        try:
            yield running
        finally:
            if proc.returncode is None:
                proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
            await reader


def cluster(fake: FakeKube) -> None:
    fake.put("namespaces", {"metadata": {"name": "team-a"}})
    fake.put(
        "nodes",
        {
            "metadata": {"name": "c1", "labels": {"slurm-keda.io/bridge": "true"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": dict(ALLOCATABLE)},
        },
    )


# -- item 3: the caches --------------------------------------------------------------------------------


async def test_a_cache_that_cannot_list_is_visible_and_recovers(tmp_path: Path) -> None:
    fake = FakeKube(token=TOKEN)
    cluster(fake)
    async with bridge(tmp_path, fake) as b:
        await b.until("slurm_bridge_leader")
        await b.until("slurm_bridge_cache_synced", cache="bridge pods")
        await b.until("slurm_bridge_cache_synced", cache="nodes")
        # every pod list and watch refused (500); the node list answered with a proxy's HTML page
        fake.fail_always("GET", r"^/api/v1/pods$", 500)
        fake.fail_always("GET", r"^/api/v1/nodes$", 200, body=b"<html><body>502 Bad Gateway</body></html>")
        fake.close_watches()  # the watches in progress end: the caches must list again
        await b.until_zero("slurm_bridge_cache_synced", cache="bridge pods")
        await b.until_zero("slurm_bridge_cache_synced", cache="nodes")
        await b.until("slurm_bridge_cache_errors_total", cache="bridge pods", kind="http_500")
        await b.until("slurm_bridge_cache_errors_total", cache="nodes", kind="malformed")
        assert await b.metric("slurm_bridge_cache_unsynced_since_timestamp_seconds", cache="nodes")
        status, page = await b.get("/")
        assert status == 200
        assert "bridge cache bridge pods: NOT CURRENT" in page and "nothing is placed or deleted" in page
        assert "Kubernetes API 500 InjectedFault: injected 500" in page  # one readable line, no raw body
        assert "bridge cache nodes: NOT CURRENT" in page and "malformed" in page
        # liveness never restarts it for the API server's fault; readiness follows the Slurm data
        assert (await b.get("/healthz"))[0] == 200 and (await b.get("/readyz"))[0] == 200
        # the API server answers again: every cache lists again, nothing was restarted
        fake.heal()
        for cache in ("bridge pods", "assigned pods", "nodes"):
            await b.until("slurm_bridge_cache_synced", cache=cache)
        assert await b.metric("slurm_bridge_cache_restarts_total", cache="nodes") == 0.0
        assert await b.metric("slurm_bridge_cache_unsynced_since_timestamp_seconds", cache="nodes") is None
        _, page = await b.get("/")
        assert "NOT CURRENT" not in page
    said = [line for line in b.lines if "cache nodes:" in line]
    # said when it broke and when it recovered — not at every retry
    assert any("malformed" in line for line in said) and any("listed again" in line for line in said), said
    assert len(said) <= 3, said


# -- item 5: Retry-After ------------------------------------------------------------------------------------


async def test_retry_after_is_honoured_per_path(tmp_path: Path) -> None:
    fake = FakeKube(token=TOKEN)
    cluster(fake)
    async with bridge(tmp_path, fake) as b:
        await b.until("slurm_bridge_cache_synced", cache="nodes")
        fake.watch_lifetime = 0.1  # every watch ends soon: the caches ask again while throttled
        began = time.monotonic()
        fake.fail_always("GET", r".", 429, retry_after=1)  # every read: "Too many requests", wait 1 s
        fake.close_watches()
        await asyncio.sleep(4.0)
        fake.heal()
        ended = time.monotonic()
        fake.watch_lifetime = None
        await b.until("slurm_bridge_cache_synced", cache="nodes")
        asked = await b.until("slurm_bridge_kube_retry_after_total", status="429")
    by_path: dict[str, list[float]] = {}
    for at, method, path in fake.request_times:
        if method == "GET":
            by_path.setdefault(path, []).append(at)
    gaps = [
        (path, round(t2 - t1, 3))
        for path, times in by_path.items()
        for t1, t2 in itertools.pairwise(times)
        if began <= t1 < ended  # the first request was throttled: the next must wait what it asked
    ]
    assert gaps and asked >= len(by_path) / 2
    # two requests sent together, before the first was answered, are not a retry (the two pod caches share
    # a path); a retry that did not wait what was asked came 0.25–0.8 s later on main
    too_soon = [(p, g) for p, g in gaps if 0.05 < g < 0.95]
    assert too_soon == [], too_soon
    assert len([g for _, g in gaps if g >= 0.95]) >= 3, gaps


# -- item 6: the Lease and the shipped RBAC ----------------------------------------------------------------


def kustomize() -> str:
    from tests.unit.test_deploy import kustomize_path

    return kustomize_path()


def rendered(tmp_path: Path, instance: str | None) -> list[dict[str, Any]]:
    """The objects of ``deploy/overlays/all``, or of the same with its instance set as deploy/README.md
    says (a generator merging into the base's ConfigMap)."""
    where = ROOT / "deploy/overlays/all"
    if instance is not None:
        where = tmp_path / "overlay"
        where.mkdir()
        own = yaml.safe_load((ROOT / "deploy/overlays/all/kustomization.yaml").read_text())
        deploy = Path(os.path.relpath(ROOT / "deploy", where))  # kustomize refuses absolute directories
        own["resources"] = [str(deploy / "base")]
        own["components"] = [str(deploy / "components" / c) for c in ("monitoring", "autoscaler", "bridge")]
        own["configMapGenerator"] = [
            {"name": "slurm-keda-instance", "behavior": "merge", "literals": [f"instance={instance}"]}
        ]
        (where / "kustomization.yaml").write_text(yaml.safe_dump(own))
    argv = [kustomize(), "build", "--load-restrictor", "LoadRestrictionsNone", str(where)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def instance_of(objects: list[dict[str, Any]]) -> str:
    """The bridge's instance as the rendered Deployment gets it (from the ConfigMap it names)."""
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    ref = next(e for e in c["env"] if e["name"] == "SLURM_KEDA_BRIDGE_INSTANCE")["valueFrom"][
        "configMapKeyRef"
    ]
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"])
    return str(cm["data"][ref["key"]])


async def test_a_lease_the_role_does_not_allow_is_said_and_the_manifests_follow_the_instance(
    tmp_path: Path,
) -> None:
    shipped = rendered(tmp_path, None)
    assert instance_of(shipped) == "default"
    fake = FakeKube(token=TOKEN)
    fake.rbac = Rbac(shipped, "slurm", "slurm-keda")
    cluster(fake)
    # --bridge-instance changed by hand, the RBAC not: every read of its Lease is forbidden
    async with bridge(tmp_path, fake, "--bridge-instance", "blue") as b:
        refused = await b.until("slurm_bridge_lease_errors_total", operation="read", kind="http_403")
        while refused < 4:
            await asyncio.sleep(0.2)
            refused = (
                await b.metric("slurm_bridge_lease_errors_total", operation="read", kind="http_403") or 0
            )
        assert await b.metric("slurm_bridge_leader") == 0.0
        _, page = await b.get("/")
        assert "bridge Lease slurm/slurm-keda-bridge-blue: CANNOT BE TAKEN" in page and "403" in page
    said = [line for line in b.lines if "bridge Lease slurm/slurm-keda-bridge-blue" in line]
    assert len(said) == 1 and " ERROR " in said[0] and "the Role must name it" in said[0], said
    # the manifests rendered for instance blue: the bridge gets blue from them and the Role names its Lease
    blue = rendered(tmp_path, "blue")
    assert instance_of(blue) == "blue"
    fake.rbac = Rbac(blue, "slurm", "slurm-keda")
    async with bridge(tmp_path, fake, "--bridge-instance", instance_of(blue)) as b:
        await b.until("slurm_bridge_leader")
        for cache in ("bridge pods", "nodes", "assigned pods", "jobs"):  # the ClusterRole lets it list them
            await b.until("slurm_bridge_cache_synced", cache=cache)
    assert fake.get("leases", "slurm", "slurm-keda-bridge-blue", "coordination.k8s.io/v1") is not None
