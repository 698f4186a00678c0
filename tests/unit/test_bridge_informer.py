"""The informer keeps a complete copy of the bridge's pods through watch timeouts, compaction (410) and an
API server outage — and says when it is not complete."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from bridge.informer import Informer
from bridge.kube import Kube, load_configuration
from bridge.pods import Pod, PodGroup
from testkit.builders import pod_doc as pod
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.tools import eventually


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def informed(
    tmp_path: Path,
    watch_timeout: int = 300,
    *,
    sleep: Callable[[float], Awaitable[None]] = _no_sleep,
    clock: Callable[[], float] = time.monotonic,
    fake: FakeKube | None = None,
) -> AsyncIterator[tuple[FakeKube, Informer[Pod]]]:
    fake = fake or FakeKube(token=TOKEN, history=10)
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            k = Kube(api)
            informer: Informer[Pod] = Informer(
                "pods",
                lambda: k.list_pods("slurm-bridge"),
                lambda since: k.watch_pods("slurm-bridge", since, timeout=watch_timeout),
                lambda p: p.metadata.uid,
                sleep=sleep,
                clock=clock,
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
        await eventually(lambda: informer.synced and names(informer) == {"a"}, 20, "the first list", 0.02)
        fake.put("pods", pod("b"))
        fake.update("pods", "team-a", "a", {"metadata": {"labels": {"slurm-keda.io/job-id": "7"}}})
        await asyncio.sleep(1.5 if watch_timeout == 1 else 0)  # across a watch the server ended
        fake.remove("pods", "team-a", "b")
        fake.put("pods", pod("c"))
        await eventually(lambda: names(informer) == {"a", "c"}, 20, "the watch's changes", 0.02)
        a = next(p for p in informer.objects.values() if p.metadata.name == "a")
        assert a.metadata.labels == {"slurm-keda.io/job-id": "7"}
        assert informer.lists == 1  # resumed, never listed again


async def test_a_compacted_watch_lists_again(tmp_path: Path) -> None:
    async with informed(tmp_path) as (fake, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: names(informer) == {"a"}, 20, "the first list", 0.02)
        fake.remove("pods", "team-a", "a")
        await eventually(lambda: names(informer) == set(), 20, "the deletion", 0.02)
        fake.put("pods", pod("b"))
        await eventually(lambda: names(informer) == {"b"}, 20, "the addition", 0.02)
        fake.compact()
        fake.close_watches()  # the watch resumes from a version the server no longer has: 410
        await eventually(lambda: informer.lists == 2, 20, "a list after 410 Gone", 0.02)
        assert informer.synced and names(informer) == {"b"} and informer.errors == 0


async def test_an_outage_marks_the_cache_incomplete_until_listed_again(tmp_path: Path) -> None:
    async with informed(tmp_path) as (fake, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: names(informer) == {"a"}, 20, "the first list", 0.02)
        fake.down = True  # the watch breaks and cannot resume at once...
        fake.close_watches()
        await eventually(lambda: not informer.synced, 20, "the cache to be marked incomplete", 0.02)
        for i in range(15):  # ...while more changes than the server keeps happen
            fake.put("pods", pod(f"p{i}"))
        fake.remove("pods", "team-a", "a")
        fake.down = False
        want = {f"p{i}" for i in range(15)}
        await eventually(lambda: informer.synced and names(informer) == want, 10, "a fresh list", 0.02)
        assert informer.lists >= 2 and informer.errors >= 1


async def test_a_watch_that_ends_at_once_is_backed_off_not_reopened_at_once(tmp_path: Path) -> None:
    """A server (or proxy) that closes every watch at once: each empty short watch is a failure, backed off
    exponentially (0.5 s × 2^n, jittered between half and all of it, at most 30 s); the cache stays
    synced (a clean end loses nothing), is never listed again, and a healthy watch resets the backoff."""
    delays: list[float] = []
    free = asyncio.Event()  # cleared: the next backoff parks the informer (no watch open) until set
    free.set()
    parked = asyncio.Event()

    async def recorded(delay: float) -> None:
        delays.append(delay)
        if not free.is_set():
            parked.set()
            await free.wait()
        await asyncio.sleep(0.005)

    fake = FakeKube(token=TOKEN, history=100)
    fake.watch_lifetime = 0.0
    frozen = 0.0  # every watch lasts 0 s by this clock: short whatever the machine's load
    async with informed(tmp_path, sleep=recorded, clock=lambda: frozen, fake=fake) as (_, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: len(delays) >= 8, 10, "eight backoffs", 0.01)
        watches = sum(1 for _, path, watch in fake.requests if watch)
        assert watches <= len(delays) + 1  # one watch per backoff, no watch without one before it
        for n, delay in enumerate(delays[:8], start=1):
            cap = min(30.0, 0.5 * 2**n)
            assert cap / 2 <= delay <= cap, (n, delays)
        assert sum(delays[:8]) >= 0.5 * sum(min(30.0, 0.5 * 2**n) for n in range(1, 9))  # ≥ 63 s at 8
        assert informer.synced and informer.lists == 1 and informer.short_watches >= 8
        # a watch that delivers an event is healthy: the next short one starts from the first step again.
        # The informer is parked in a backoff first, so no short watch still in flight adds a step after
        # the switch (CI saw one: a 15.7 s ninth step)
        free.clear()
        await eventually(parked.is_set, 10, "the informer parked in a backoff", 0.01)
        before = len(delays)
        fake.watch_lifetime = None
        fake.put("pods", pod("b"))
        free.set()
        await eventually(lambda: names(informer) == {"a", "b"}, 10, "the event", 0.01)
        fake.watch_lifetime = 0.0
        fake.close_watches()
        await eventually(lambda: len(delays) > before, 10, "the next backoff", 0.01)
        assert delays[before] <= 1.0


async def test_unknown_and_keyless_watch_events_are_counted_not_stored(tmp_path: Path) -> None:
    async with informed(tmp_path) as (fake, informer):
        fake.put("pods", pod("a"))
        await eventually(lambda: names(informer) == {"a"}, 20, "the first list", 0.02)
        fake.watch_lines = [
            b'{"type": "WEIRD", "object": {"metadata": {"uid": "u-weird", "name": "weird"}}}',
            b'{"type": "ADDED", "object": {"metadata": {}}}',
            b'{"type": "MODIFIED", "object": {"spec": {}}}',
            b'{"type": 7, "object": "x"}',
        ]
        fake.close_watches()
        await eventually(lambda: informer.ignored_events == 4, 20, "four ignored events", 0.02)
        assert names(informer) == {"a"} and "" not in informer.objects and "u-weird" not in informer.objects
        assert informer.synced and informer.lists == 1
        # a line that is not JSON may be a lost change: the watch is broken, the cache listed again
        fake.watch_lines = [b"{not json"]
        fake.close_watches()
        await eventually(lambda: informer.lists == 2 and informer.synced, 20, "a list after a bad line", 0.02)
        assert names(informer) == {"a"} and informer.errors == 1


async def test_a_missing_crd_is_said_once_and_checked_again_rarely(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No PodGroup CRD: one warning, no failure backoff loop, a list every ``missing_recheck`` s; once the
    CRD is installed the informer lists and watches (and says so)."""
    fake = FakeKube(token=TOKEN)
    fake.missing.add("scheduling.x-k8s.io/v1alpha1/podgroups")
    delays: list[float] = []

    async def recorded(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(0.01)

    caplog.set_level("INFO", logger="bridge.informer")
    async with serve_kube(fake) as url:
        cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", url))
        async with client.ApiClient(cfg) as api:
            k = Kube(api)
            groups: Informer[PodGroup] = Informer(
                "pod groups", k.list_pod_groups, k.watch_pod_groups, lambda g: g.metadata.uid,
                sleep=recorded, missing_recheck=300.0,
            )  # fmt: skip
            task = asyncio.create_task(groups.run(), name="podgroup-informer")
            try:
                await eventually(lambda: len(delays) >= 5, 20, "five rechecks", 0.01)
                assert groups.missing and not groups.synced and groups.errors == 0
                assert set(delays) == {300.0}
                said = [r.getMessage() for r in caplog.records if "no such resource" in r.getMessage()]
                assert len(said) == 1 and "checked again every 300 s" in said[0]
                fake.missing.clear()
                fake.put(
                    "podgroups",
                    {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minMember": 2}},
                    prefix="scheduling.x-k8s.io/v1alpha1",
                )
                await eventually(lambda: groups.synced, 20, "the list once the CRD is there", 0.01)
                assert not groups.missing and [g.spec.minMember for g in groups.objects.values()] == [2]
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def test_a_loop_that_fails_unexpectedly_is_started_again_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error no rule expects (a bug) ended the informer's task for good: the cache stayed empty and not
    synced, said nowhere. Now the loop starts again after a backoff, counts it and says it once."""
    caplog.set_level(logging.INFO)
    calls = 0

    async def listing() -> tuple[list[str], str]:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise RuntimeError("a bug")
        return ["a", "b"], "7"

    async def watching(since: str) -> AsyncIterator[tuple[str, str]]:
        await asyncio.Event().wait()
        yield "ADDED", "never"

    informer: Informer[str] = Informer("things", listing, watching, lambda s: s, sleep=_no_sleep)
    task = asyncio.create_task(informer.run(), name="things-informer")
    try:
        await eventually(lambda: informer.synced, 10, "listed after the failures", 0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.restarts == 3 and informer.error_kinds == {"internal": 3}
    assert set(informer.objects) == {"a", "b"} and informer.listed_at is not None
    said = [r for r in caplog.records if r.getMessage().startswith("cache things:")]
    assert len(said) == 2, [r.getMessage() for r in said]  # failed (with the traceback), listed again
    assert said[0].levelno == logging.ERROR and said[0].exc_info is not None
    assert "listed again" in said[1].getMessage()
