"""The informer keeps a complete copy of the bridge's pods through watch timeouts, compaction (410) and an
API server outage — and says when it is not complete."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from bridge.informer import Informer
from bridge.kube import Kube, load_configuration
from bridge.pods import Pod
from tests.fake_kube import FakeKube, serve_kube
from tests.test_bridge_kube import pod
from tests.test_fake_kube import TOKEN, write_kubeconfig
from tests.tools import eventually


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def informed(tmp_path: Path, watch_timeout: int = 300) -> AsyncIterator[tuple[FakeKube, Informer[Pod]]]:
    fake = FakeKube(token=TOKEN, history=10)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            k = Kube(api)
            informer: Informer[Pod] = Informer(
                "pods",
                lambda: k.list_pods("slurm-bridge"),
                lambda since: k.watch_pods("slurm-bridge", since, timeout=watch_timeout),
                lambda p: p.metadata.uid,
                sleep=_no_sleep,
            )
            task = asyncio.create_task(informer.run(), name="pod-informer")
            try:
                yield fake, informer
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def names(informer: Informer[Pod]) -> set[str]:
    return {p.metadata.name for p in informer.objects.values()}


@pytest.mark.parametrize("watch_timeout", [300, 1], ids=["one-watch", "watch-timeouts"])
async def test_the_cache_follows_the_bridges_pods(tmp_path: Path, watch_timeout: int) -> None:
    async with informed(tmp_path, watch_timeout) as (fake, informer):
        fake.put("pods", pod("a"))
        fake.put("pods", pod("x", scheduler="default-scheduler"))
        await eventually(lambda: informer.synced and names(informer) == {"a"}, 5, "the first list", 0.02)
        fake.put("pods", pod("b"))
        fake.update("pods", "team-a", "a", {"metadata": {"labels": {"slurm-keda.io/job-id": "7"}}})
        await asyncio.sleep(1.5 if watch_timeout == 1 else 0)  # across a watch the server ended
        fake.remove("pods", "team-a", "b")
        fake.put("pods", pod("c"))
        await eventually(lambda: names(informer) == {"a", "c"}, 5, "the watch's changes", 0.02)
        a = next(p for p in informer.objects.values() if p.metadata.name == "a")
        assert a.metadata.labels == {"slurm-keda.io/job-id": "7"}
        assert informer.lists == 1  # resumed, never listed again


async def test_a_compacted_watch_lists_again(tmp_path: Path) -> None:
    async with informed(tmp_path) as (fake, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: names(informer) == {"a"}, 5, "the first list", 0.02)
        fake.remove("pods", "team-a", "a")
        await eventually(lambda: names(informer) == set(), 5, "the deletion", 0.02)
        fake.put("pods", pod("b"))
        await eventually(lambda: names(informer) == {"b"}, 5, "the addition", 0.02)
        fake.compact()
        fake.close_watches()  # the watch resumes from a version the server no longer has: 410
        await eventually(lambda: informer.lists == 2, 5, "a list after 410 Gone", 0.02)
        assert informer.synced and names(informer) == {"b"} and informer.errors == 0


async def test_an_outage_marks_the_cache_incomplete_until_listed_again(tmp_path: Path) -> None:
    async with informed(tmp_path) as (fake, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: names(informer) == {"a"}, 5, "the first list", 0.02)
        fake.down = True  # the watch breaks and cannot resume at once...
        fake.close_watches()
        await eventually(lambda: not informer.synced, 5, "the cache to be marked incomplete", 0.02)
        for i in range(15):  # ...while more changes than the server keeps happen
            fake.put("pods", pod(f"p{i}"))
        fake.remove("pods", "team-a", "a")
        fake.down = False
        want = {f"p{i}" for i in range(15)}
        await eventually(lambda: informer.synced and names(informer) == want, 10, "a fresh list", 0.02)
        assert informer.lists >= 2 and informer.errors >= 1
