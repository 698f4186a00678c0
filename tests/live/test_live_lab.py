"""The real code path (SlurmClient + Poller + version adapters) against the live Slurm labs, checked
against what Slurm's own tools (squeue, sinfo, scontrol) say at the same moment.

Every (lab flavor, API version) the labs serve is covered: 24.11 → v0.0.40–v0.0.42, 26.05 → v0.0.42–v0.0.45,
and host → v0.0.38 (Debian 12's Slurm 22.05; only where its packages are installed: testkit/lab_fixtures.py).
One *sample* = the CLI views, one poll, the CLI views again; a sample whose before and after views differ
(the workload moved during the poll) is retried a few times, immediately. Comparisons live in
``testkit/lab_compare.py`` and collect every mismatch so a failure lists all of them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exporter.client import ClientConfig, SlurmClient, TokenSource, version_key
from exporter.model import Snapshot
from exporter.poller import INCREMENTAL_ENDPOINTS, Poller
from exporter.pollstate import PollerConfig
from exporter.session import SlurmSession
from lab import Lab
from lab.demo import DEMO_JOBS
from lab.record import (
    SINFO_ARGS,
    SINFO_FIELDS,
    SQUEUE_FIELDS,
    parse_pipe,
)
from testkit.lab_compare import (
    SQUEUE,
    CliView,
    Diffs,
    cli_job_state,
    cli_view,
    compare_jobs,
    compare_nodes,
    compare_partitions,
    mb_to_bytes,
)
from testkit.lab_fixtures import HOST_INSTALLED

LAB_API_VERSIONS: dict[str, tuple[str, ...]] = {
    "24.11": ("v0.0.40", "v0.0.41", "v0.0.42"),
    "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
    # the host lab loads only openapi/v0.0.38 (v0.0.37 is not supported by slurm-keda)
    **({"host": ("v0.0.38",)} if HOST_INSTALLED else {}),
}
CASES = [
    pytest.param(flavor, version, id=f"slurm{flavor}-{version}")
    for flavor, versions in LAB_API_VERSIONS.items()
    for version in versions
]
FLAVORS = [pytest.param(flavor, id=f"slurm{flavor}") for flavor in LAB_API_VERSIONS]
SAMPLE_ATTEMPTS = 5
UPDATE_TIME_BUDGET = 5.0
"""Seconds of back-to-back update_time samples before giving up (see the test)."""


def user_name_for(lab: Lab) -> str | None:
    """X-SLURM-USER-NAME to send with the lab's token: Slurm 22.05's rest_auth/jwt (host lab) answers 401
    "Authentication failure" to a user token without it (23.02+ take the user from the token's ``sun``)."""
    return "root" if lab.flavor.is_host else None


async def poll(
    url: str,
    token_file: Path | None,
    api_version: str | None,
    *,
    polls: int = 1,
    user_name: str | None = None,
) -> tuple[Snapshot, Poller]:
    """``polls`` consecutive polls through SlurmClient + Poller; the last snapshot and the poller."""
    token = TokenSource(token_file=token_file) if token_file else TokenSource()
    async with SlurmClient(ClientConfig(base_url=url, token=token, user_name=user_name)) as client:
        poller = Poller(SlurmSession(client, api_version=api_version), PollerConfig())
        snap = None
        for _ in range(polls):
            snap = await poller.poll_once()
            assert snap is not None, f"poll of {url} ({api_version}) failed: {poller.status.last_error}"
    assert snap is not None
    return snap, poller


def endpoint_errors(poller: Poller) -> dict[str, str]:
    return {name: st.last_error for name, st in poller.status.endpoints.items() if st.last_error}


async def stable_sample(lab: Lab, api_version: str | None) -> tuple[CliView, Snapshot, Poller]:
    """CLI views, one poll, CLI views; retried (immediately, bounded) until before == after."""
    moved = []
    for _ in range(SAMPLE_ATTEMPTS):
        before = cli_view(lab)
        snap, poller = await poll(lab.url, lab.token_file, api_version, user_name=user_name_for(lab))
        after = cli_view(lab)
        if before.stable() == after.stable():
            return before, snap, poller
        moved.append(before.moved(after))
    pytest.fail(f"the lab's workload kept moving during {SAMPLE_ATTEMPTS} samples: {moved}")


def node_memory(view: CliView) -> dict[str, int]:
    return {row["NodeName"]: mb_to_bytes(row["RealMemory"]) or 0 for row in view.nodes}


def partition_nodes(view: CliView) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in view.sinfo:
        out.setdefault(row["partition"].rstrip("*"), []).append(row["node"])
    return out


def version_has_default_flag(api_version: str) -> bool:
    """Partitions say which is the default in v0.0.38 (``flags: ["default"]``) and v0.0.45+."""
    return api_version == "v0.0.38" or version_key(api_version) >= (0, 0, 45)


# ----- the lab serves what this file assumes --------------------------------------------------------------


@pytest.mark.parametrize("lab", FLAVORS, indirect=True)
def test_lab_serves_the_expected_api_versions(lab: Lab) -> None:
    assert tuple(lab.api_versions()) == LAB_API_VERSIONS[lab.flavor.name]


# ----- one poll == what squeue/sinfo/scontrol say -------------------------------------------------------


@pytest.mark.parametrize(("lab", "api_version"), CASES, indirect=["lab"])
async def test_snapshot_matches_slurm_tools(lab_demo: tuple[Lab, dict[str, int]], api_version: str) -> None:
    lab, demo = lab_demo
    view, snap, poller = await stable_sample(lab, api_version)

    assert snap.api_version == api_version
    assert snap.slurm_version == lab.release()
    assert endpoint_errors(poller) == {}

    diffs = Diffs()
    compare_jobs(
        snap.jobs, view.squeue, view.squeue_r, view.jobs, node_memory(view), partition_nodes(view), diffs
    )
    compare_nodes(snap.nodes, view.sinfo, view.nodes, diffs)
    compare_partitions(
        snap.partitions,
        view.partitions,
        snap.nodes,
        has_default_flag=version_has_default_flag(api_version),
        diffs=diffs,
    )
    assert not diffs, diffs.report()

    # The demo's situations really are in this sample (so the comparisons above covered them).
    by_id = {j.job_id: j for j in snap.jobs}
    for job in DEMO_JOBS:
        if job.key not in demo:
            continue  # optional job sbatch refused on this release
        j = by_id[demo[job.key]]
        state, reason = job.expect
        assert cli_job_state(j.state, j.state_flags) == state, job.key
        if reason is not None:
            assert j.reason == reason, job.key
    array = by_id[demo["throttled_array"]]
    assert (array.array_task_string, array.array_max_tasks, array.task_count) == ("3-20", 2, 18)
    assert sum(1 for j in snap.jobs if j.array_job_id == array.job_id and j.state == "RUNNING") == 2
    assert by_id[demo["two_nodes"]].min_nodes == 2
    assert by_id[demo["gpu_one"]].gpus == 1 and by_id[demo["gpu_two"]].gpus == 2
    assert by_id[demo["too_wide"]].min_nodes == 3
    assert {p for j in snap.jobs for p in j.partitions} >= {"cpu", "gpu", "cloud"}
    assert any(n.gpus_used == 1 and n.gpus == 2 for n in snap.nodes)


# ----- the unix socket (rest_auth/local, no token) sees what TCP sees ---------------------------------------


@pytest.mark.parametrize("lab", FLAVORS, indirect=True)
async def test_unix_socket_matches_tcp(lab_demo: tuple[Lab, dict[str, int]]) -> None:
    lab, _ = lab_demo
    moved = []
    for _ in range(SAMPLE_ATTEMPTS):
        before = cli_view(lab)
        tcp, _p = await poll(lab.url, lab.token_file, None, user_name=user_name_for(lab))
        unix, unix_poller = await poll(lab.unix_url, None, None)
        after = cli_view(lab)
        if before.stable() == after.stable():
            break
        moved.append(before.moved(after))
    else:
        pytest.fail(f"the workload kept moving: {moved}")
    assert endpoint_errors(unix_poller) == {}
    assert unix.api_version == tcp.api_version == LAB_API_VERSIONS[lab.flavor.name][-1]

    def jobs(s: Snapshot) -> dict[int, tuple[Any, ...]]:
        return {j.job_id: (j.state, j.state_flags, j.reason, j.nodes, j.task_count) for j in s.jobs}

    assert jobs(unix) == jobs(tcp)
    assert sorted(str(j.job_id) for j in unix.jobs) == sorted(r["record_job_id"] for r in before.squeue)
    assert [(n.name, n.state, n.flags) for n in unix.nodes] == [(n.name, n.state, n.flags) for n in tcp.nodes]
    assert unix.partitions == tcp.partitions


# ----- the console script ---------------------------------------------------------------------------------


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "slurm-keda"
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurm_keda.cli"]


@pytest.mark.parametrize("lab", FLAVORS, indirect=True)
def test_cli_snapshot_json_matches_squeue(lab_demo: tuple[Lab, dict[str, int]]) -> None:
    lab, _ = lab_demo
    argv = [
        *_console_script(),
        "snapshot",
        "--format",
        "json",
        "--slurmrestd-url",
        lab.url,
        "--token-file",
        str(lab.token_file),
        *(["--user-name", name] if (name := user_name_for(lab)) else []),
    ]
    moved = []
    for _ in range(SAMPLE_ATTEMPTS):
        before = parse_pipe(lab.run(SQUEUE), SQUEUE_FIELDS)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        after = parse_pipe(lab.run(SQUEUE), SQUEUE_FIELDS)
        if before == after:
            break
        moved.append("squeue")
    else:
        pytest.fail(f"the queue kept moving: {moved}")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["api_version"] == LAB_API_VERSIONS[lab.flavor.name][-1]
    assert doc["slurm_version"] == lab.release()
    assert sorted(j["job_id"] for j in doc["jobs"]) == sorted(int(r["record_job_id"]) for r in before)
    states = {j["job_id"]: (j["state"], tuple(j.get("state_flags", ()))) for j in doc["jobs"]}
    for row in before:
        state, flags = states[int(row["record_job_id"])]
        assert cli_job_state(state, flags) == row["state"], row["job_id"]
    # every node slurmctld knows (sinfo lists only nodes of a partition: the lab's q[1-4] are in none)
    listed = re.findall(r"^NodeName=(\S+)", lab.run(["scontrol", "-o", "show", "nodes"]), re.MULTILINE)
    assert sorted(n["name"] for n in doc["nodes"]) == sorted(listed)
    in_partitions = {r["node"] for r in parse_pipe(lab.run(SINFO_ARGS), SINFO_FIELDS)}
    assert in_partitions == {n["name"] for n in doc["nodes"] if n.get("partitions")}


# ----- update_time: a second poll confirms "unchanged" and keeps the same data -----------------------------

# Slurm 24.11's v0.0.40 and v0.0.41 plugins cannot parse the update_time query parameter at all:
# "Parsing of 1795969484 for timestamp failed; Rejecting request. Failure parsing query." — HTTP 422 on
# /jobs, HTTP 500 on /nodes, /partitions, /reservations (also for update_time=0). The poller turns the 500s
# into a full fetch (update_time_broken, after its retries) but treats the 422 as an error, so /jobs fails on
# every poll that sends update_time, until the next full refresh (full_refresh, 60 s).
UPDATE_TIME_REJECTED = {("24.11", "v0.0.40"), ("24.11", "v0.0.41")}


async def _two_polls(
    lab: Lab, api_version: str, *, incremental_jobs: bool = True
) -> tuple[Snapshot, Snapshot, Poller, dict[str, float | None]]:
    """Two consecutive polls by one poller; also Slurm's last_update per endpoint after the first.
    ``incremental_jobs`` off: /jobs is listed (with update_time) like the other endpoints."""
    token = TokenSource(token_file=lab.token_file)
    # retries=0: the 24.11 v0.0.40/41 500s to update_time would otherwise cost ~1.5 s of backoff per sample
    config = ClientConfig(base_url=lab.url, token=token, retries=0, user_name=user_name_for(lab))
    async with SlurmClient(config) as client:
        poller = Poller(
            SlurmSession(client, api_version=api_version), PollerConfig(incremental_jobs=incremental_jobs)
        )
        first = await poller.poll_once()
        assert first is not None, poller.status.last_error
        held = {
            name: st.envelope.last_update if st.envelope else None
            for name, st in poller.status.endpoints.items()
        }
        second = await poller.poll_once()
        assert second is not None, poller.status.last_error
    return first, second, poller, held


# v0.0.38 (Slurm 22.05, host lab) answers carry no last_update at all, so the poller never sends
# update_time there: every poll is a full fetch.
NO_LAST_UPDATE = {("host", "v0.0.38")}
UPDATE_TIME_CASES = [c for c in CASES if tuple(c.values) not in UPDATE_TIME_REJECTED | NO_LAST_UPDATE]
NO_LAST_UPDATE_CASES = [c for c in CASES if tuple(c.values) in NO_LAST_UPDATE]
REJECTED_CASES = [c for c in CASES if tuple(c.values) in UPDATE_TIME_REJECTED]


async def _stable_two_polls(
    lab: Lab, api_version: str, *, incremental_jobs: bool = True
) -> tuple[CliView, Snapshot, Snapshot, Poller, dict[str, float | None]]:
    """Two consecutive polls between two CLI views that agree (retried a bounded number of times)."""
    for _ in range(SAMPLE_ATTEMPTS):
        before = cli_view(lab)
        first, second, poller, held = await _two_polls(lab, api_version, incremental_jobs=incremental_jobs)
        if before.stable() == cli_view(lab).stable():
            return before, first, second, poller, held
    pytest.fail("the workload kept moving")


@pytest.mark.parametrize(("lab", "api_version"), REJECTED_CASES, indirect=["lab"])
async def test_update_time_rejected_falls_back_to_full_fetch(
    lab_demo: tuple[Lab, dict[str, int]], api_version: str
) -> None:
    lab, _ = lab_demo
    # /jobs listed each poll (--no-incremental-jobs), so that its update_time is rejected too
    before, first, second, poller, _held = await _stable_two_polls(lab, api_version, incremental_jobs=False)
    assert endpoint_errors(poller) == {}
    for name in sorted(INCREMENTAL_ENDPOINTS):
        st = poller.status.endpoints[name]
        assert (st.successes, st.unchanged, st.update_time_broken) == (2, 0, True), name
    assert sorted(str(j.job_id) for j in second.jobs) == sorted(r["record_job_id"] for r in before.squeue)
    assert [j.job_id for j in second.jobs] == [j.job_id for j in first.jobs]
    # by default the jobs are kept from /jobs/state instead — from v0.0.41: v0.0.40 names a split-off array
    # task by its array's id (3_1 where v0.0.41 says 6_1), so it lists in full
    before, first, second, poller, _held = await _stable_two_polls(lab, api_version)
    assert endpoint_errors(poller) == {}
    sync = poller.status.jobs_sync
    incremental = api_version != "v0.0.40"
    # incremental: the count before the first listing, then the second poll's read
    assert sync.incremental is incremental and sync.state_reads == 2 * int(incremental)
    assert sync.full_listings == ({"first": 1} if incremental else {"off": 2})
    assert sorted(str(j.job_id) for j in second.jobs) == sorted(r["record_job_id"] for r in before.squeue)


@pytest.mark.parametrize(("lab", "api_version"), NO_LAST_UPDATE_CASES, indirect=["lab"])
async def test_no_last_update_means_full_fetches(
    lab_demo: tuple[Lab, dict[str, int]], api_version: str
) -> None:
    lab, _ = lab_demo
    before, first, second, poller, held = await _stable_two_polls(lab, api_version)
    assert endpoint_errors(poller) == {}
    for name in sorted(INCREMENTAL_ENDPOINTS):
        st = poller.status.endpoints[name]
        assert held[name] is None and st.envelope is not None and st.envelope.last_update is None, name
        assert (st.successes, st.unchanged, st.update_time_broken) == (2, 0, False), name
        assert st.last_bytes > 0, name
    assert sorted(str(j.job_id) for j in second.jobs) == sorted(r["record_job_id"] for r in before.squeue)
    assert second.jobs == first.jobs


@pytest.mark.parametrize(("lab", "api_version"), UPDATE_TIME_CASES, indirect=["lab"])
async def test_update_time_second_poll_is_unchanged(
    lab_demo: tuple[Lab, dict[str, int]], api_version: str
) -> None:
    lab, _ = lab_demo
    # Whether Slurm answers "unchanged" is not in the test's hands: /jobs' last_update has one-second
    # resolution and, on the labs (bf_interval=1), slurmrestd answers update_time=<its own last_update> with
    # the full list for about one second, then with an empty list for about one second, alternately; and
    # 24.11's /nodes sometimes answers 500 "Unable to query partitions" instead of 304 (the poller then marks
    # it update_time_broken and fetches in full). So: every sample must obey the relation below per
    # endpoint, and samples are repeated back to back (no sleeping; bounded by UPDATE_TIME_BUDGET) until one
    # had all four endpoints unchanged.
    seen: Counter[tuple[tuple[str, int], ...]] = Counter()
    deadline = time.monotonic() + UPDATE_TIME_BUDGET
    while True:
        before = parse_pipe(lab.run(SQUEUE), SQUEUE_FIELDS)
        first, second, poller, held = await _two_polls(lab, api_version)
        after = parse_pipe(lab.run(SQUEUE), SQUEUE_FIELDS)
        assert endpoint_errors(poller) == {}
        for name in sorted(set(poller.status.endpoints) - INCREMENTAL_ENDPOINTS):
            assert poller.status.endpoints[name].unchanged == 0, f"{name} takes no update_time"
        for name in sorted(INCREMENTAL_ENDPOINTS):
            st = poller.status.endpoints[name]
            assert st.successes == 2, name
            held_update, last_update = held[name], st.envelope.last_update if st.envelope else None
            assert held_update is not None and last_update is not None, name
            assert last_update >= held_update, name
            if st.update_time_broken:
                assert lab.flavor.name == "24.11" and name == "nodes", f"{name}: update_time_broken"
                assert st.unchanged == 0 and st.last_bytes > 1024, name
            if st.unchanged:
                # 304 (24.11+: nodes, partitions, reservations) or an empty list with an unmoved last_update:
                # the held data and last_update are kept
                assert st.last_bytes < 1024, f"{name}: an 'unchanged' answer of {st.last_bytes} bytes"
                assert last_update == held_update, name
                assert getattr(second, name) == getattr(first, name), name
                assert second.last_update[name] == first.last_update[name], name
        unchanged = tuple((n, poller.status.endpoints[n].unchanged) for n in sorted(INCREMENTAL_ENDPOINTS))
        seen[unchanged] += 1
        # jobs' and nodes' last_update move with scheduler passes and node pings, so whether they come back
        # unchanged is Slurm's timing; partitions and reservations only move on reconfiguration, so a
        # sample where both came back unchanged (304) proves the round trip (the invariants above hold for
        # every endpoint of every sample; tests/unit/test_poller.py covers each answer shape
        # deterministically)
        settled = dict(unchanged)["partitions"] and dict(unchanged)["reservations"]
        if before == after and settled:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"no sample had partitions and reservations unchanged: {dict(seen)}")
    assert sorted(str(j.job_id) for j in second.jobs) == sorted(r["record_job_id"] for r in before)
