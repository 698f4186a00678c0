"""The metric surface of ``slurm-keda serve`` against the live Slurm labs (issue 3), the way users run it.

* The real console script runs as a subprocess against a lab's slurmrestd; its ``/metrics`` scrape is
  compared, family by family, with what ``squeue``/``sinfo``/``scontrol`` say at the same moment (labs
  24.11 and 26.05, demo workload settled).
* ``promtool check metrics`` on that real scrape prints nothing.
* A real Prometheus (Debian package) on loopback scrapes ``serve`` every second; PromQL answers equal the
  tools' figures.
* Process checks: ``/readyz`` stays 503 (``/healthz`` 200) while slurmrestd is unreachable; a bad
  ``--web-config-file`` makes ``serve`` exit 2 with one line.

One *sample* = the CLI views, a scrape whose snapshot was fetched after the first view began, the CLI views
again; the figures the views imply must be equal before and after (else the workload moved: the sample is
retried, a bounded number of times, immediately). Parsing of the tools' output is shared with
``tests/live/test_live_lab.py`` (``lab.record``, ``testkit.lab_compare``); the expected figures below are
derived from the tools only, never from the snapshot.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from exporter.model import MIB, Snapshot
from exporter.versions.slurmdb import decode_slurmdb_jobs
from lab import Lab, LabError
from testkit.bridge_lab import reserved_node
from testkit.lab_compare import (
    DERIVED_NODE_FLAGS,
    JOB_FLAG_PRECEDENCE,
    SSHARE,
    CliView,
    Diffs,
    cli_view,
    compare_limits,
    gres_by_name_type,
    gres_gpus,
    is_null,
    mb_to_bytes,
    parse_sdiag_rpcs,
    parse_sshare,
    parse_tres,
    sacctmgr_limits,
    scontrol_node_state,
    time_limit_seconds,
    tres_per_node_gpus,
)
from testkit.prometheus import (
    FRESH_SCRAPE_TIMEOUT,
    PROMETHEUS,
    Labels,
    Prometheus,
    Values,
    need_binary,
    parse_scrape,
    start_prometheus,
)
from testkit.serve_process import Serve, start_serve

LABS = [pytest.param("24.11", id="slurm24.11"), pytest.param("26.05", id="slurm26.05")]
SAMPLE_ATTEMPTS = 5
PROMTOOL = Path("/usr/bin/promtool")

BUSY_NODE_STATES = frozenset({"ALLOCATED", "MIXED"})
ALLOCATED_JOB_STATES = frozenset({"RUNNING", "SUSPENDED"})
CLI_WORD_BASE_STATE = {"CONFIGURING": "RUNNING"}
"""squeue prints CONFIGURING for a RUNNING job whose (cloud) nodes boot. The other flag words
(COMPLETING, REQUEUED, ...) hide the base state: a sample showing one is retried."""
FRESH_ENDPOINTS = ("jobs", "nodes", "partitions")


def series(**labels: str) -> Labels:
    return tuple(sorted(labels.items()))


def fmt_series(name: str, labels: Labels) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


# ----- processes and HTTP ---------------------------------------------------------------------------------


class ServePool:
    """One ``serve`` per lab, started on first use and stopped at the end of the module."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.serves: dict[str, Serve] = {}

    def of(self, lab: Lab) -> Serve:
        serve = self.serves.get(lab.flavor.name)
        if serve is not None and serve.proc.proc.poll() is None:
            return serve
        serve = start_serve(lab.url, lab.token_file, self.workdir)
        self.serves[lab.flavor.name] = serve
        serve.wait_status("/readyz", 200)
        return serve

    def stop(self) -> None:
        for serve in self.serves.values():
            serve.proc.stop()


@pytest.fixture(scope="module")
def serves(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServePool]:
    pool = ServePool(tmp_path_factory.mktemp("serve"))
    try:
        yield pool
    finally:
        pool.stop()


_demo_failures: dict[str, str] = {}


@pytest.fixture()
def demo(request: pytest.FixtureRequest, lab: Lab) -> tuple[Lab, dict[str, int]]:
    """``lab_demo``, but a lab whose demo did not settle fails this module's later tests at once (one
    ``DEMO_TIMEOUT`` wait per lab, not one per test)."""
    if lab.flavor.name in _demo_failures:
        pytest.fail(f"(as before) {_demo_failures[lab.flavor.name]}", pytrace=False)
    try:
        result: tuple[Lab, dict[str, int]] = request.getfixturevalue("lab_demo")
    except pytest.fail.Exception as e:
        _demo_failures[lab.flavor.name] = str(e)
        raise
    return result


# ----- what Slurm's tools say ------------------------------------------------------------------------------


class Unsettled(Exception):
    """A transient state (figures the tools cannot pin down, no fresh snapshot yet); take another sample."""


@dataclass
class Expected:
    """The metric values the tools imply: sample name → {labels → value}."""

    values: Values = field(default_factory=dict)

    def add(self, name: str, labels: Labels, value: float) -> None:
        fam = self.values.setdefault(name, {})
        fam[labels] = fam.get(labels, 0.0) + value

    def set(self, name: str, labels: Labels, value: float) -> None:
        self.values.setdefault(name, {})[labels] = value


SPARSE_FAMILIES = frozenset(
    {
        "slurm_jobs",
        "slurm_jobs_pending",
        *(
            f"slurm_jobs_{k}_{r}"
            for k in ("allocated", "pending")
            for r in ("cpus", "memory_bytes", "gpus", "nodes")
        ),
        "slurm_nodes",
        "slurm_nodes_flagged",
    }
)
"""Families compared on their non-zero series (the collector adds zero series for known partitions)."""


def job_base_state(row: Mapping[str, str]) -> str:
    word = row["state"]
    if word in CLI_WORD_BASE_STATE:
        return CLI_WORD_BASE_STATE[word]
    if word in JOB_FLAG_PRECEDENCE:
        raise Unsettled(f"job {row['job_id']} is {word}")
    return word


def node_flags(ctl: Mapping[str, str]) -> tuple[str, frozenset[str]]:
    """Base state and flags of a ``scontrol show node`` row, with slurm-keda's derived DRAINING."""
    base, flags = scontrol_node_state(ctl["State"])
    if "DRAIN" in flags and (base in BUSY_NODE_STATES or "COMPLETING" in flags or int(ctl["CPUAlloc"]) > 0):
        flags |= DERIVED_NODE_FLAGS
    return base, flags


def node_partitions(ctl: Mapping[str, str]) -> list[str]:
    text = ctl.get("Partitions", "")
    return [] if is_null(text) else [p for p in text.split(",") if p]


def expected_metrics(view: CliView) -> Expected:
    """The figures of every compared family, from the tools' output alone."""
    out = Expected()
    nodes = {row["NodeName"]: row for row in view.nodes}
    sinfo_rows: dict[str, list[dict[str, str]]] = {}
    for row in view.sinfo:
        sinfo_rows.setdefault(row["node"], []).append(row)
    partitions = [row["PartitionName"] for row in view.partitions]

    # -- nodes (scontrol -d show node; sinfo for idle/other CPUs) --
    largest: dict[str, int] = {}
    available: dict[str, bool] = {}
    for name, ctl in nodes.items():
        lv = series(node=name)
        base, flags = node_flags(ctl)
        mem = mb_to_bytes(ctl["RealMemory"]) or 0
        alloc_mem = mb_to_bytes(ctl["AllocMem"]) or 0
        gpus, gpus_used = gres_gpus(ctl["Gres"]), gres_gpus(ctl.get("GresUsed", ""))
        out.set("slurm_node_cpus", lv, int(ctl["CPUTot"]))
        out.set("slurm_node_allocated_cpus", lv, int(ctl["CPUAlloc"]))
        out.set("slurm_node_effective_cpus", lv, int(ctl["CPUEfctv"]))
        out.set("slurm_node_memory_bytes", lv, mem)
        out.set("slurm_node_allocated_memory_bytes", lv, alloc_mem)
        free = mb_to_bytes(ctl["FreeMem"])
        if free is not None:
            out.set("slurm_node_free_memory_bytes", lv, free)
        out.set("slurm_node_gpus", lv, gpus)
        out.set("slurm_node_allocated_gpus", lv, gpus_used)
        gres, gres_used = gres_by_name_type(ctl["Gres"]), gres_by_name_type(ctl.get("GresUsed", ""))
        for gname, gtype in gres.keys() | gres_used.keys():
            values = (("", gres.get((gname, gtype), 0)), ("_used", gres_used.get((gname, gtype), 0)))
            for suffix, n in values:
                out.set(f"slurm_node_gres{suffix}", series(node=name, name=gname, type=gtype), n)
                for p in node_partitions(ctl):
                    out.add(f"slurm_partition_gres{suffix}", series(partition=p, name=gname, type=gtype), n)
        out.set("slurm_node_state", series(node=name, state=base.lower()), 1)
        for f in flags:
            out.set("slurm_node_flag", series(node=name, flag=f.lower()), 1)
        # sinfo agrees with scontrol, and says whether the node's free CPUs are usable ("O" = other)
        rows = sinfo_rows.get(name, [])
        if rows:
            cpus_state = {tuple(int(x) for x in r["cpus"].split("/")) for r in rows}
            if len(cpus_state) != 1:
                raise Unsettled(f"sinfo lines of {name} disagree: {sorted(cpus_state)}")
            a, _idle, o, t = cpus_state.pop()
            if (a, t) != (int(ctl["CPUAlloc"]), int(ctl["CPUTot"])) or gres_gpus(
                rows[0]["gres_used"]
            ) != gpus_used:
                raise Unsettled(f"sinfo and scontrol disagree on {name} (taken a moment apart)")
            available[name] = o == 0
        elif node_partitions(ctl):  # sinfo lists the nodes of partitions only (the lab's q[1-4] are in none)
            raise Unsettled(f"sinfo has no line for node {name}")
        for p in node_partitions(ctl) or [""]:
            out.add("slurm_nodes", series(partition=p, state=base.lower()), 1)
            for f in flags:
                out.add("slurm_nodes_flagged", series(partition=p, flag=f.lower()), 1)
            largest[p] = max(largest.get(p, 0), mem)

    # -- partitions (scontrol show partition; sums over the nodes naming them; sinfo CPUsState I) --
    for prow in view.partitions:
        p = prow["PartitionName"]
        lv = series(partition=p)
        members = [ctl for ctl in nodes.values() if p in node_partitions(ctl)]
        avail = [ctl for ctl in members if available[ctl["NodeName"]]]
        out.set("slurm_partition_cpus", lv, int(prow["TotalCPUs"]))
        out.set("slurm_partition_nodes", lv, int(prow["TotalNodes"]))
        out.set("slurm_partition_allocated_cpus", lv, sum(int(c["CPUAlloc"]) for c in members))
        out.set(
            "slurm_partition_idle_cpus",
            lv,
            sum(int(r["cpus"].split("/")[1]) for r in view.sinfo if r["partition"].rstrip("*") == p),
        )
        out.set("slurm_partition_memory_bytes", lv, sum(mb_to_bytes(c["RealMemory"]) or 0 for c in members))
        out.set(
            "slurm_partition_allocated_memory_bytes",
            lv,
            sum(mb_to_bytes(c["AllocMem"]) or 0 for c in members),
        )
        out.set(
            "slurm_partition_idle_memory_bytes",
            lv,
            sum((mb_to_bytes(c["RealMemory"]) or 0) - (mb_to_bytes(c["AllocMem"]) or 0) for c in avail),
        )
        out.set("slurm_partition_gpus", lv, sum(gres_gpus(c["Gres"]) for c in members))
        out.set("slurm_partition_allocated_gpus", lv, sum(gres_gpus(c.get("GresUsed", "")) for c in members))
        out.set(
            "slurm_partition_idle_gpus",
            lv,
            sum(gres_gpus(c["Gres"]) - gres_gpus(c.get("GresUsed", "")) for c in avail),
        )
        max_nodes = prow["MaxNodes"]
        out.set(
            "slurm_partition_max_nodes_per_job", lv, math.inf if max_nodes == "UNLIMITED" else int(max_nodes)
        )
        out.set("slurm_partition_state", series(partition=p, state=prow["State"].lower()), 1)

    # -- jobs (squeue -r: one line per job / array task; scontrol AllocTRES for allocated memory) --
    alloc_tres = {row["JobId"]: parse_tres(row.get("AllocTRES", "")) for row in view.jobs}
    for row in view.squeue_r:
        state = job_base_state(row)
        job_partitions = [p for p in row["partition"].split(",") if p] or [""]
        n_nodes = int(row["min_nodes"])
        cpus = int(row["cpus"])
        gpus = tres_per_node_gpus(row["tres_per_node"]) * n_nodes
        for p in job_partitions:
            lv = series(partition=p)
            out.add("slurm_jobs", series(partition=p, state=state.lower()), 1)
            if state == "PENDING":
                out.add("slurm_jobs_pending", series(partition=p, reason=row["reason"]), 1)
                out.add("slurm_jobs_pending_age_seconds_gcount", lv, 1)
                # squeue %m: memory per node (the demo asks with --mem); 0 = the whole node
                per_node = mb_to_bytes(row["min_memory"]) or largest.get(p, 0)
                out.add("slurm_jobs_pending_cpus", lv, cpus)
                out.add("slurm_jobs_pending_memory_bytes", lv, per_node * n_nodes)
                out.add("slurm_jobs_pending_gpus", lv, gpus)
                out.add("slurm_jobs_pending_nodes", lv, n_nodes)
            elif state in ALLOCATED_JOB_STATES:
                tres = alloc_tres.get(row["record_job_id"])
                if tres is None:
                    raise Unsettled(f"scontrol does not show job {row['record_job_id']}")
                out.add("slurm_jobs_allocated_cpus", lv, cpus)
                out.add("slurm_jobs_allocated_memory_bytes", lv, tres.get("mem", 0))
                out.add("slurm_jobs_allocated_gpus", lv, gpus)
                out.add("slurm_jobs_allocated_nodes", lv, n_nodes)
    # -- licenses and reservations (scontrol show license / reservation) --
    for row in view.licenses:
        lv = series(license=row["LicenseName"])
        for name, key in (
            ("slurm_licenses", "Total"),
            ("slurm_licenses_used", "Used"),
            ("slurm_licenses_free", "Free"),
            ("slurm_licenses_reserved", "Reserved"),
        ):
            out.set(name, lv, int(row[key]))
    for row in view.reservations:
        lv = series(reservation=row["ReservationName"])
        out.set("slurm_reservation_nodes", lv, int(row["NodeCnt"]))
        out.set("slurm_reservation_cores", lv, int(row["CoreCnt"]))
    for p in partitions:  # convention: running and pending series exist for every partition
        out.add("slurm_jobs", series(partition=p, state="pending"), 0)
        out.add("slurm_jobs", series(partition=p, state="running"), 0)
    return out


# ----- the scrape -----------------------------------------------------------------------------------------


def scrape_fresh(serve: Serve, since: float) -> tuple[str, Values]:
    """A scrape whose jobs, nodes and partitions were all fetched at or after ``since`` (epoch seconds)."""
    deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
    fetched: dict[str, float] = {}
    while time.monotonic() < deadline:
        serve.proc.check_alive()
        status, text = serve.get("/metrics")
        if status == 200:
            values = parse_scrape(text)
            fetched = {
                dict(k)["endpoint"]: v
                for k, v in values.get("slurm_exporter_endpoint_fetched_timestamp_seconds", {}).items()
            }
            if all(fetched.get(ep, 0.0) >= since for ep in FRESH_ENDPOINTS):
                return text, values
        time.sleep(0.1)
    raise Unsettled(f"no snapshot fetched after {since:.3f} within {FRESH_SCRAPE_TIMEOUT:.0f} s: {fetched}")


def diff_values(want: Values, got: Values, names: set[str]) -> list[str]:
    diffs = Diffs()
    for name in sorted(names):
        w, g = want.get(name, {}), got.get(name, {})
        if name in SPARSE_FAMILIES:
            w = {k: v for k, v in w.items() if v}
            g = {k: v for k, v in g.items() if v}
        for labels in sorted(w.keys() | g.keys()):
            diffs.eq("scrape", fmt_series(name, labels), w.get(labels), g.get(labels))
        if name not in SPARSE_FAMILIES and not w and not g:
            diffs.items.append(f"scrape: {name}: neither the tools nor the scrape have any series")
    return diffs.items


Taken = TypeVar("Taken")


def stable_sample(lab: Lab, take: Callable[[float], Taken]) -> tuple[CliView, Expected, Taken]:
    """CLI views, ``take(since)`` (a scrape or queries of data fetched at or after ``since``), CLI views;
    retried (immediately, a bounded number of times) until both views imply the same figures. A lab
    restarted under the test (a failing Slurm command) counts as a moved sample too."""
    moved: list[str] = []
    for _ in range(SAMPLE_ATTEMPTS):
        since = time.time()
        try:
            before = cli_view(lab)
            taken = take(since)
            after = cli_view(lab)
            want, want_after = expected_metrics(before), expected_metrics(after)
        except (Unsettled, LabError) as e:
            moved.append(str(e))
            continue
        if want.values == want_after.values:
            return before, want, taken
        changed = diff_values(want.values, want_after.values, set(want.values) | set(want_after.values))
        moved.append("; ".join(changed[:5]))
    pytest.fail(f"the lab's workload kept moving during {SAMPLE_ATTEMPTS} samples: {moved}")


# ----- 1. the scrape equals what Slurm's tools say ------------------------------------------------------


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_scrape_matches_slurm_tools(demo: tuple[Lab, dict[str, int]], serves: ServePool) -> None:
    lab, jobs = demo
    serve = serves.of(lab)
    view, expected, (_, got) = stable_sample(lab, lambda since: scrape_fresh(serve, since))
    want = expected.values

    problems = diff_values(want, got, set(want))
    assert not problems, f"{len(problems)} mismatch(es):\n" + "\n".join(problems)

    # identity (slurm_up during polls: see test_slurm_up_stays_1_while_a_poll_runs)
    assert got["slurm_up"] == {(): 1.0}
    (info,) = got["slurm_exporter_info"]
    info_labels = dict(info)
    assert info_labels["slurm_version"] == lab.release()
    assert info_labels["api_version"] == lab.api_versions()[-1]
    assert info_labels["slurm_cluster"] == lab.flavor.cluster_name

    # the sample really covers the interesting cases: GPUs in use on g1, array tasks, pending reasons
    g1 = next(row for row in view.nodes if row["NodeName"] == "g1")
    assert gres_gpus(g1["Gres"]) == 2, g1["Gres"]
    assert got["slurm_node_gres"][series(node="g1", name="gpu", type="a100")] == 2  # the lab's typed GPUs
    assert got["slurm_node_gpus"][series(node="g1")] == 2
    assert got["slurm_node_allocated_gpus"][series(node="g1")] == gres_gpus(g1["GresUsed"]) >= 1
    assert got["slurm_jobs_allocated_gpus"][series(partition="gpu")] >= 1
    assert got["slurm_jobs_pending"][series(partition="cpu", reason="JobArrayTaskLimit")] >= 1
    assert sum(got["slurm_jobs_pending"].values()) >= 5
    assert got["slurm_partition_max_nodes_per_job"][series(partition="cpu")] == 2
    assert "gpu_one" in jobs
    assert got["slurm_licenses_used"][series(license="matlab")] >= 2  # the demo's license job

    # the oldest pending job per partition and reason: scontrol's SubmitTime in the lab's time zone
    offset = lab.run(["date", "+%z"]).strip()
    oldest: dict[Labels, float] = {}
    for row in view.jobs:
        if row["JobState"] != "PENDING":
            continue
        at = datetime.strptime(row["SubmitTime"] + offset, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        for p in row["Partition"].split(","):
            key = series(partition=p, reason=row["Reason"])
            oldest[key] = min(oldest.get(key, math.inf), at)
    assert oldest and got["slurm_jobs_pending_oldest_submit_timestamp_seconds"] == oldest

    # reservations: node list and flags, and end - start = scontrol's Duration (no time zone involved)
    assert view.reservations, "the demo creates a reservation"
    for row in view.reservations:
        lv = series(reservation=row["ReservationName"])
        resv = next(
            dict(k) for k in got["slurm_reservation_info"] if dict(k)["reservation"] == row["ReservationName"]
        )
        assert resv["nodes"] == row["Nodes"]
        assert set(resv["flags"].split(",")) == {f.lower() for f in row["Flags"].split(",")}
        span = (
            got["slurm_reservation_end_timestamp_seconds"][lv]
            - got["slurm_reservation_start_timestamp_seconds"][lv]
        )
        assert span == time_limit_seconds(row["Duration"])


# ----- 2. promtool accepts the real scrape --------------------------------------------------------------


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_promtool_check_metrics_is_silent(demo: tuple[Lab, dict[str, int]], serves: ServePool) -> None:
    need_binary(PROMTOOL)
    lab, _ = demo
    serve = serves.of(lab)
    status, text = serve.get("/metrics")
    assert status == 200
    assert "slurm_node_allocated_gpus" in text and "slurm_jobs_pending{" in text
    result = subprocess.run(
        [str(PROMTOOL), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


# ----- 3. a real Prometheus scrapes serve; PromQL agrees with the tools ---------------------------------


def by(values: Mapping[Labels, float], keep: tuple[str, ...], match: Labels = ()) -> dict[Labels, float]:
    """``sum by (keep...) (family{match})`` over a family's series, zero sums dropped."""
    out: dict[Labels, float] = {}
    for labels, v in values.items():
        if not set(match) <= set(labels):
            continue
        k = tuple((n, val) for n, val in labels if n in keep)
        out[k] = out.get(k, 0.0) + v
    return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class Query:
    promql: str
    family: str
    """The family whose expected figures answer it."""
    keep: tuple[str, ...] | None = None
    """``sum by`` these labels (zero sums dropped); None: the family's series as they are."""
    match: Labels = ()
    """The query's label matchers."""


PROMQL = (
    Query('sum(slurm_jobs{state="running"})', "slurm_jobs", (), series(state="running")),
    Query("sum by (partition, state) (slurm_jobs)", "slurm_jobs", ("partition", "state")),
    Query("sum by (reason) (slurm_jobs_pending)", "slurm_jobs_pending", ("reason",)),
    Query('sum(slurm_jobs_pending{partition="gpu"})', "slurm_jobs_pending", (), series(partition="gpu")),
    Query('slurm_node_cpus{node="c1"}', "slurm_node_cpus", None, series(node="c1")),
    Query("slurm_node_allocated_cpus", "slurm_node_allocated_cpus"),
    Query("sum(slurm_node_allocated_memory_bytes)", "slurm_node_allocated_memory_bytes", ()),
    Query('slurm_node_gpus{node="g1"}', "slurm_node_gpus", None, series(node="g1")),
    Query("slurm_node_allocated_gpus", "slurm_node_allocated_gpus"),
    Query("slurm_partition_idle_cpus", "slurm_partition_idle_cpus"),
    Query("sum by (state) (slurm_nodes)", "slurm_nodes", ("state",)),
)


def expected_answer(q: Query, want: Values) -> dict[Labels, float]:
    fam = want.get(q.family, {})
    if q.keep is not None:
        return by(fam, q.keep, q.match)
    return {k: v for k, v in fam.items() if set(q.match) <= set(k)}


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_prometheus_scrapes_serve(
    demo: tuple[Lab, dict[str, int]], serves: ServePool, tmp_path: Path
) -> None:
    need_binary(PROMETHEUS)
    lab, _ = demo
    serve = serves.of(lab)
    prom = start_prometheus(serve.port, tmp_path)
    try:
        prom.wait_target_up()
        _, expected, answers = stable_sample(lab, lambda since: ask_prometheus(prom, since, lab.release()))
    finally:
        prom.proc.stop()

    want = expected.values
    assert answers['up{job="slurm-keda"}'] == {(): 1.0}
    assert answers[UP_QUERY] == {(): 1.0}
    assert answers[info_query(lab.release())] == {(): 1.0}
    diffs = Diffs()
    for q in PROMQL:
        answer = answers[q.promql]
        if q.keep is not None:
            answer = {k: v for k, v in answer.items() if v}
        diffs.eq("PromQL", q.promql, expected_answer(q, want), answer)
    assert not diffs, diffs.report()
    assert answers['sum(slurm_jobs{state="running"})'][()] >= 1
    assert answers["slurm_node_allocated_gpus"][series(node="g1")] >= 1


UP_QUERY = "slurm_up"


def info_query(release: str) -> str:
    return f'count(slurm_exporter_info{{slurm_version="{release}"}})'


def ask_prometheus(prom: Prometheus, since: float, release: str) -> dict[str, dict[Labels, float]]:
    """Every query of ``PROMQL`` (and up, slurm_up, the info series), all at ONE evaluation time at
    which Prometheus' latest sample is of a snapshot fetched at or after ``since``."""
    at = fresh_eval_time(prom, since)
    queries = [q.promql for q in PROMQL] + ['up{job="slurm-keda"}', UP_QUERY, info_query(release)]
    return {q: prom.query(q, at) for q in queries}


def fresh_eval_time(prom: Prometheus, since: float) -> float:
    """An evaluation time at which Prometheus' latest sample carries a snapshot fetched after ``since``."""
    deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
    selector = "|".join(FRESH_ENDPOINTS)
    last: dict[Labels, float] = {}
    while time.monotonic() < deadline:
        prom.proc.check_alive()
        at = time.time()
        last = prom.query(
            f'min(slurm_exporter_endpoint_fetched_timestamp_seconds{{endpoint=~"{selector}"}})', at
        )
        if last and last[()] >= since:
            return at
        time.sleep(0.2)
    raise Unsettled(f"Prometheus has no sample of a snapshot fetched after {since:.3f}: {last}")


SLURM_UP_WATCH = 3.0
"""Seconds of back-to-back scrapes (≈ 3 polls at --poll-interval 1)."""


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_slurm_up_stays_1_while_a_poll_runs(lab: Lab, serves: ServePool) -> None:
    """Every scrape of a healthy exporter says slurm_up 1, including those taken during a poll."""
    serve = serves.of(lab)
    deadline = time.monotonic() + SLURM_UP_WATCH
    scrapes = 0
    while time.monotonic() < deadline:
        status, text = serve.get("/metrics")
        if status != 200:
            pytest.fail(f"/metrics answered {status}: {text[:200]}")
        scrapes += 1
        values = parse_scrape(text)
        age = values["slurm_exporter_snapshot_age_seconds"][()]
        assert values["slurm_up"] == {(): 1.0}, (
            f"scrape {scrapes}: slurm_up 0 with a snapshot {age:.2f} s old"
        )


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_rpc_counters_lie_between_two_sdiag_runs(lab: Lab, tmp_path: Path) -> None:
    """slurmctld's RPC counters as served (per message type, and per user with --metrics-per-user) lie
    between what ``sdiag`` printed just before the snapshot's /diag fetch and just after the scrape:
    the counters only grow, so the bracket holds however many RPCs land in between."""
    serve = start_serve(lab.url, lab.token_file, tmp_path, "--metrics-per-user")
    try:
        serve.wait_status("/readyz", 200)
        before = parse_sdiag_rpcs(lab.run(["sdiag"]))
        # a fetch's timestamp is when it finished: the first one finished after sdiag may have been
        # answered before it; the one after that was sent after it (polls run one after the other)
        since, seen = time.time(), 0
        deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
        while True:
            values = parse_scrape(serve.get("/metrics")[1])
            fetched = values.get("slurm_exporter_endpoint_fetched_timestamp_seconds", {})
            at = fetched.get(series(endpoint="diag"), 0.0)
            if at >= since:
                if seen and at > since:
                    break
                seen, since = 1, at
            assert time.monotonic() < deadline, "no /diag sent after the first sdiag"
            time.sleep(0.1)
        after = parse_sdiag_rpcs(lab.run(["sdiag"]))
    finally:
        serve.proc.stop()
    checked = 0
    for family, key, low, high in (
        ("slurm_rpc", "type", before.by_type, after.by_type),
        ("slurm_rpc_user", "user", before.by_user, after.by_user),
    ):
        calls, seconds = values[f"{family}_calls_total"], values[f"{family}_time_seconds_total"]
        served = {dict(labels)[key] for labels in calls}
        assert set(low) <= served <= set(high), f"{family}: {sorted(served)} vs sdiag {sorted(high)}"
        for labels, count in calls.items():
            name = dict(labels)[key]
            lo_count, lo_us = low.get(name, (0, 0))
            hi_count, hi_us = high[name]
            assert lo_count <= count <= hi_count, (family, name, lo_count, count, hi_count)
            assert lo_us <= round(seconds[labels] * 1e6) <= hi_us, (family, name, seconds[labels])
            checked += 1
    assert checked >= 10
    assert values["slurm_rpc_users_omitted"] == {(): 0.0}
    assert values["slurm_rpc_calls_total"][series(type="REQUEST_STATS_INFO")] >= 1  # our own /diag reads


ACCOUNTING_NODE = "acct-1"
"""The dynamic node (and reservation) the accounting test's jobs run on."""

SHARE_COLUMNS = {
    "slurm_share_raw_shares": "RawShares",
    "slurm_share_normalized_shares": "NormShares",
    "slurm_share_raw_usage": "RawUsage",
    "slurm_share_normalized_usage": "NormUsage",
    "slurm_share_effective_usage": "EffectvUsage",
    "slurm_share_fairshare_factor": "FairShare",
    "slurm_share_level_fs": "LevelFS",
}


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_fair_share_is_what_sshare_prints(lab: Lab, tmp_path: Path) -> None:
    """--metrics-fairshare against ``sshare -a -l -P``: one series per association, its place in the tree
    as labels, every column to sshare's six decimals; what sshare leaves empty is absent."""
    serve = start_serve(lab.url, lab.token_file, tmp_path, "--metrics-fairshare", "--shares-interval", "1")
    try:
        serve.wait_status("/readyz", 200)
        want = parse_sshare(lab.run(list(SSHARE)))
        deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
        while True:
            values = parse_scrape(serve.get("/metrics")[1])
            if values.get("slurm_share_raw_usage") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        serve.proc.stop()
    assert len(want) >= 7, want  # root, its accounts and the lab's users (lab.conf.ACCOUNTS)
    for name, column in SHARE_COLUMNS.items():
        got = {
            (d["account"], d["user"], d["parent"]): v
            for k, v in values.get(name, {}).items()
            if (d := dict(k))
        }
        expected = {}
        for key, row in want.items():
            text = row.get(column, "").strip()
            if text:
                expected[key] = math.inf if text == "inf" else float(text)
        assert set(got) == set(expected), (name, sorted(got), sorted(expected))
        for key, v in expected.items():
            assert got[key] == pytest.approx(v, abs=5e-7), (name, key, got[key], v)


@pytest.mark.parametrize(
    ("lab", "api_version"),
    [
        pytest.param("24.11", None, id="slurm24.11"),
        pytest.param("26.05", None, id="slurm26.05"),
        # v0.0.40/41 refuse epoch times in slurmdbd's window: the relative ones must do
        pytest.param("24.11", "v0.0.40", id="slurm24.11-v0.0.40"),
    ],
    indirect=["lab"],
)
def test_ended_jobs_are_counted_as_sacct_lists_them(
    lab: Lab, api_version: str | None, tmp_path: Path
) -> None:
    """Accounting from slurmdbd: jobs of account physics (which no other test of this module uses), run on a
    dynamic node of their own (the demo fills cpu and gpu), that end while ``serve`` reads slurmdbd —
    completed, failed, cancelled, and a ``--no-requeue`` job whose node is set DOWN under it (NODE_FAIL) —
    are counted per final state exactly as ``sacct`` lists them, once each however many overlapping reads
    see them. (OUT_OF_MEMORY needs cgroup memory limits and PREEMPTED a preemption setup the lab has not.)"""
    forced = ("--api-version", api_version) if api_version else ()
    serve = start_serve(
        lab.url, lab.token_file, tmp_path, "--metrics-per-account", "--accounting-interval", "1", *forced
    )
    try:
        serve.wait_status("/readyz", 200)
        deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
        while "association limits): on" not in serve.get("/")[1]:
            assert time.monotonic() < deadline, serve.get("/")[1]
            time.sleep(0.2)
        with reserved_node(lab, ACCOUNTING_NODE):
            common = ["-p", "dyn", f"--reservation={ACCOUNTING_NODE}", "-n1", "--mem=100", "-A", "physics"]
            ids = [
                lab.sbatch(*common, "-J", "acct-ok", command="sleep 1"),
                lab.sbatch(*common, "-J", "acct-bad", command="sleep 1; exit 3"),
                lab.sbatch(*common, "-J", "acct-cancel", command="sleep 300"),
            ]
            time.sleep(2.0)
            lab.run(["scancel", str(ids[2])])
            # a job on a node that goes down under it (not requeued): NODE_FAIL
            ids.append(lab.sbatch(*common, "--no-requeue", "-J", "acct-nodefail", command="sleep 300"))
            deadline = time.monotonic() + 60.0
            while lab.run(["squeue", "-h", "-j", str(ids[3]), "-o", "%T"]).strip() != "RUNNING":
                assert time.monotonic() < deadline
                time.sleep(0.3)
            down = ["scontrol", "update", f"NodeName={ACCOUNTING_NODE}", "State=DOWN", "Reason=acct-test"]
            lab.run(down)
            ended_states = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL")
            want: dict[str, float] = {}
            deadline = time.monotonic() + 60.0
            while True:
                listing = ["sacct", "-n", "-X", "-P", "-j", ",".join(map(str, ids)), "-o", "JobID,State"]
                rows = lab.run(listing).splitlines()
                states = [r.split("|")[1].split()[0] for r in rows if "|" in r]
                if len(states) == 4 and all(s in ended_states for s in states):
                    for state in states:
                        want[state] = want.get(state, 0) + 1
                    break
                assert time.monotonic() < deadline, rows
                time.sleep(0.5)
        while True:
            values = parse_scrape(serve.get("/metrics")[1])
            got = {
                dict(k)["state"]: v
                for k, v in values.get("slurm_account_jobs_ended_total", {}).items()
                if dict(k)["account"] == "physics"
            }
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(3.0)  # three more reads whose windows still hold these jobs
        again = parse_scrape(serve.get("/metrics")[1])
    finally:
        serve.proc.stop()
    assert want == {"COMPLETED": 1, "FAILED": 1, "CANCELLED": 1, "NODE_FAIL": 1}
    assert got == want
    physics = again["slurm_account_jobs_ended_total"]
    assert {
        dict(k)["state"]: v for k, v in physics.items() if dict(k)["account"] == "physics"
    } == want  # once
    assert again["slurm_job_run_seconds_count"][series(partition="dyn")] >= 2


def _sacct_memory(text: str) -> int | None:
    """The ``mem=`` of a ``TRESUsageInTot`` (``cpu=00:00:01,mem=39.88M,...``) in bytes; None without one."""
    m = re.search(r"(?:^|,)mem=([\d.]+[KMGT]?)", text)
    if m is None:
        return None
    size = m.group(1)
    return mb_to_bytes(size) if size[-1].isalpha() else int(float(size))  # a bare number is bytes here


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_ended_jobs_memory_is_what_sacct_shows(lab: Lab) -> None:
    """A job holding ~40 MB in its batch shell for 3 s: slurmdbd's record, read as the poller reads it, says
    the memory its largest step used as sacct's ``TRESUsageInTot`` does (the lab samples every second)."""
    version = "v0.0.45" if lab.flavor.name == "26.05" else "v0.0.42"
    since = int(time.time()) - 5
    with reserved_node(lab, ACCOUNTING_NODE):
        where = ["-p", "dyn", f"--reservation={ACCOUNTING_NODE}", "-n1", "--mem=200", "-A", "physics"]
        job_id = lab.sbatch(
            *where, "-J", "acct-mem", command="x=$(head -c 40000000 /dev/zero | tr '\\0' a); sleep 3"
        )
        deadline = time.monotonic() + 60.0
        while True:
            rows = lab.run(["sacct", "-n", "-P", "-j", str(job_id), "-o", "JobID,State,TRESUsageInTot"])
            steps = [r.split("|") for r in rows.splitlines() if "|" in r]
            if steps and steps[0][1].split()[0] == "COMPLETED" and any(_sacct_memory(s[2]) for s in steps):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
    want = max(m for s in steps if (m := _sacct_memory(s[2])) is not None)
    answer = lab.get(f"/slurmdb/{version}/jobs?start_time={since}")
    jobs, _ = decode_slurmdb_jobs(answer.body)
    (job,) = [j for j in jobs if j.job_id == job_id]
    assert job.memory_bytes == 200 * MIB
    assert job.memory_bytes_used is not None and job.memory_bytes_used >= 40_000_000
    assert job.memory_bytes_used == pytest.approx(want, rel=0.01)  # sacct rounds to two decimals of its unit


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_slurm_config_is_what_scontrol_shows(lab: Lab, tmp_path: Path) -> None:
    """26.05 serves slurmctld's configuration (``/slurm/v0.0.45/conf``): the snapshot keeps what ``scontrol
    show config`` says of enforcement, priority and selection; 24.11 serves none: no configuration, no
    error."""
    serve = start_serve(lab.url, lab.token_file, tmp_path)
    try:
        serve.wait_status("/readyz", 200)
        snap = msgspec.json.decode(serve.get("/snapshot")[1], type=Snapshot)
        status = serve.get("/")[1]
    finally:
        serve.proc.stop()
    if lab.flavor.name == "24.11":
        assert (
            snap.config is None and "<td>conf</td><td>0</td><td>0</td><td>never</td>" in status
        )  # not asked
        return
    config_lines = lab.run(["scontrol", "show", "config"]).splitlines()
    shown = {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in config_lines if "=" in line)}
    assert snap.config is not None
    enforce = shown["AccountingStorageEnforce"]
    assert snap.config.accounting_storage_enforce == tuple(
        f.lower() for f in enforce.split(",") if f and f != "none"
    )
    assert snap.config.priority_type == shown["PriorityType"]
    assert snap.config.select_type_parameters == tuple(shown["SelectTypeParameters"].split(","))


LIMITS_QOS = [
    "Priority=7",
    "GrpJobs=5",
    "GrpSubmitJobs=9",
    "GrpTRES=cpu=6,mem=2G",
    "GrpWall=1-00:00:00",
    "MaxJobsPerUser=2",
    "MaxSubmitJobsPerUser=4",
    "MaxJobsPerAccount=3",
    "MaxSubmitJobsPerAccount=6",
    "MaxTRESPerUser=cpu=4,gres/gpu=1",
    "MaxTRESPerAccount=cpu=5",
    "MaxTRESPerJob=cpu=3,node=2",
    "MaxTRESPerNode=cpu=2",
    "MaxWall=45",
]
LIMITS_ACCOUNT = ["GrpJobs=4", "GrpSubmitJobs=8", "GrpTRES=cpu=6", "GrpWall=2:00:00", "MaxWall=30"]
LIMITS_USER = ["MaxJobs=2", "MaxSubmitJobs=3", "MaxTRES=cpu=2,node=1", "MaxTRESPerNode=cpu=1", "MaxWall=10"]


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_qos_and_association_limits_are_what_sacctmgr_shows(lab: Lab, tmp_path: Path) -> None:
    """A QOS and an account of their own (no other test uses them), every limit read here set by
    ``sacctmgr``: the snapshot's QOS and associations (``/snapshot``) hold what ``sacctmgr -P show`` prints,
    every QOS and association of the lab, every column."""
    sacctmgr = ["sacctmgr", "-i"]
    lab.run([*sacctmgr, "add", "qos", "kedatest", *LIMITS_QOS])
    lab.run([*sacctmgr, "add", "account", "kedatest", f"cluster={lab.flavor.cluster_name}", *LIMITS_ACCOUNT])
    lab.run([*sacctmgr, "add", "user", "ann", "account=kedatest", "qos=normal,kedatest", *LIMITS_USER])
    lab.run([*sacctmgr, "add", "user", "ann", "account=kedatest", "partition=gpu", "MaxJobs=1"])
    serve = start_serve(lab.url, lab.token_file, tmp_path, "--limits-interval", "1")
    try:
        serve.wait_status("/readyz", 200)
        deadline = time.monotonic() + FRESH_SCRAPE_TIMEOUT
        while True:  # the limits read after the sacctmgr changes (the first read may predate the last one)
            snap = msgspec.json.decode(serve.get("/snapshot")[1], type=Snapshot)
            if sum(a.account == "kedatest" for a in snap.associations) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        qos_text, assoc_text = sacctmgr_limits(lab)
    finally:
        serve.proc.stop()
        lab.run([*sacctmgr, "delete", "user", "ann", "account=kedatest"], check=False)
        lab.run([*sacctmgr, "delete", "account", "kedatest"], check=False)
        lab.run([*sacctmgr, "delete", "qos", "kedatest"], check=False)
    diffs = compare_limits(snap.qos, snap.associations, qos_text, assoc_text)
    if snap.api_version in ("v0.0.40", "v0.0.41"):
        diffs.remove("QOS kedatest grpsubmit: sacctmgr '9' → 9, snapshot None")  # not in these versions
    assert diffs == []
    mine = next(q for q in snap.qos if q.name == "kedatest")
    assert (mine.priority, mine.max_wall_seconds, mine.grp_wall_seconds) == (7, 2700, 86400)
    assert mine.max_tres_per_job == {"cpu": 3, "node": 2} and mine.grp_tres["mem"] == 2048 * MIB


# ----- 4. serve's own behaviour -------------------------------------------------------------------------
