"""A job's own fields before slurmctld's first pass (autoscaler/eligibility.py): rules, then a capture from
inside that window on the 26.05 lab (``python -m lab record --window``) checked against Slurm's own later
verdict on the same jobs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.demand import NodeShape, Target, compute_demand
from autoscaler.eligibility import CLOCK_SLACK, Bars, dependency_reason, settled_reason, slurm_now
from autoscaler.reasons import Eligibility, classify
from autoscaler.report import explain
from exporter.model import MIB, Diag, Job, License, Partition, Reservation, Snapshot
from testkit.paths import ROOT
from testkit.tools import recorded_snapshot

WINDOW_2605 = ROOT / "tests" / "data" / "recorded" / "window-26.05.5" / "v0.0.45"
NOW = 1_000_000.0


def fresh(reason: str = "None", **kw: Any) -> Job:
    kw.setdefault("priority", 1)
    kw.setdefault("partitions", ("p",))
    kw.setdefault("cpus", 1)
    return Job(job_id=1, state="PENDING", reason=reason, **kw)


def bars(
    partitions: tuple[Partition, ...] = (),
    licenses: tuple[License, ...] = (),
    reservations: tuple[Reservation, ...] = (),
    jobs: tuple[Job, ...] = (),
) -> Bars:
    return Bars(
        now=NOW,
        partitions={p.name: p for p in partitions},
        licenses={lic.name: lic for lic in licenses},
        reservations={r.name: r for r in reservations},
        jobs=jobs,
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", None),
        ("(null)", None),
        ("afterok:12(unfulfilled)", "Dependency"),
        ("afterok:12(fulfilled)", None),
        ("afterok:12(failed)", "DependencyNeverSatisfied"),
        ("afterok:12(fulfilled),afterany:13(unfulfilled)", "Dependency"),
        ("afterok:12(unfulfilled),afterany:13(failed)", "DependencyNeverSatisfied"),
        ("afterok:12(unfulfilled)?afterany:13(fulfilled)", None),
        ("afterok:12(failed)?afterany:13(unfulfilled)", "Dependency"),
        ("afterok:12(failed)?afterany:13(failed)", "DependencyNeverSatisfied"),
        ("singleton(unfulfilled)", "Dependency"),
        ("afterok:12", "Dependency"),  # no state: not trusted to be met
    ],
)
def test_dependency_text(text: str, reason: str | None) -> None:
    assert dependency_reason(text) == reason


def test_fresh_jobs_are_judged_by_their_fields_in_slurms_order() -> None:
    b = bars()
    assert settled_reason(fresh(), b) == "None"
    assert settled_reason(fresh("PartitionConfig"), b) == "PartitionConfig"
    assert settled_reason(fresh(priority=0), b) == "JobHeldUser"
    # held before dependency, dependency before begin time (Slurm's order)
    dep = "afterok:7(unfulfilled)"
    assert settled_reason(fresh(priority=0, dependency=dep), b) == "JobHeldUser"
    assert settled_reason(fresh(dependency=dep, eligible_time=NOW + 3600), b) == "Dependency"
    assert settled_reason(fresh("PartitionConfig", eligible_time=NOW + 3600), b) == "BeginTime"
    # whole seconds: an eligible time up to CLOCK_SLACK ahead counts as reached
    assert settled_reason(fresh(eligible_time=NOW + CLOCK_SLACK), b) == "None"
    assert settled_reason(fresh(eligible_time=NOW + CLOCK_SLACK + 1), b) == "BeginTime"


def test_a_reason_slurm_gave_is_its_verdict() -> None:
    b = bars()
    # Resources / Priority: the scheduler looked and found the job runnable; fields are not read again
    assert settled_reason(fresh("Resources", priority=0), b) == "Resources"
    assert settled_reason(fresh("Priority", eligible_time=NOW + 3600), b) == "Priority"
    assert settled_reason(fresh("Dependency", dependency="afterok:1(unfulfilled)"), b) == "Dependency"


def test_partition_limits_in_every_partition_the_job_lists() -> None:
    limited = Partition(name="p", max_nodes_per_job=4, min_nodes_per_job=2, max_time_seconds=1800)
    b = bars(partitions=(limited, Partition(name="q"), Partition(name="down", state="DOWN")))
    assert settled_reason(fresh(min_nodes=5), b) == "PartitionNodeLimit"
    assert settled_reason(fresh(min_nodes=1), b) == "PartitionNodeLimit"
    assert settled_reason(fresh(min_nodes=2, time_limit_seconds=3600), b) == "PartitionTimeLimit"
    assert settled_reason(fresh(min_nodes=4, time_limit_seconds=1800), b) == "None"
    assert settled_reason(fresh(min_nodes=2, time_limit_seconds=None), b) == "None"
    # -p p,q: runnable in q, so not barred; -p p,down: barred in both, p's reason first
    assert settled_reason(fresh(min_nodes=5, partitions=("p", "q")), b) == "None"
    assert settled_reason(fresh(min_nodes=5, partitions=("p", "down")), b) == "PartitionNodeLimit"
    assert settled_reason(fresh(partitions=("down",)), b) == "PartitionDown"
    assert settled_reason(fresh(partitions=("gone",)), b) == "None"  # unknown partition: nothing known
    inactive = bars(partitions=(Partition(name="p", state="INACTIVE"),))
    assert settled_reason(fresh(), inactive) == "PartitionInactive"


def test_a_time_min_under_max_time_runs_with_its_limit_cut() -> None:
    """``-t 120 --time-min=30`` under ``MaxTime=60``: slurmctld's backfill starts it (limit cut to 60); the
    main scheduler's ``PartitionTimeLimit`` on it is not the verdict. Without ``--time-min``, or with one
    above MaxTime, the limit bars it."""
    hour = Partition(name="p", max_time_seconds=3600)
    b = bars(partitions=(hour, Partition(name="q", max_time_seconds=600)))
    over = {"time_limit_seconds": 7200}
    assert settled_reason(fresh(**over), b) == "PartitionTimeLimit"
    assert settled_reason(fresh(time_min_seconds=1800, **over), b) == "None"
    assert settled_reason(fresh(time_min_seconds=3600, **over), b) == "None"  # exactly MaxTime fits
    assert settled_reason(fresh(time_min_seconds=5400, **over), b) == "PartitionTimeLimit"
    # Slurm's main scheduler named it: read as unsettled when the minimum fits, the verdict otherwise
    assert settled_reason(fresh("PartitionTimeLimit", time_min_seconds=1800, **over), b) == "None"
    assert settled_reason(fresh("PartitionTimeLimit", **over), b) == "PartitionTimeLimit"
    held = fresh("PartitionTimeLimit", time_min_seconds=1800, priority=0, **over)
    assert settled_reason(held, b) == "JobHeldUser"  # the job's other bars still count
    # -p q: 30 minutes is over q's 10 — in no partition it lists does it fit
    assert settled_reason(fresh(time_min_seconds=1800, partitions=("q",), **over), b) == "PartitionTimeLimit"
    assert settled_reason(fresh(time_min_seconds=1800, partitions=("q", "p"), **over), b) == "None"


LICENSES = (License(name="matlab", total=5, used=4, free=1), License(name="ansys", total=2, free=2))


@pytest.mark.parametrize(
    ("wanted", "reason"),
    [
        ("matlab:1", "None"),
        ("matlab:2", "Licenses"),
        ("matlab", "None"),  # no count: 1
        ("ansys:2,matlab:2", "Licenses"),  # all of them
        ("matlab:2|ansys:1", "None"),  # one alternative
        ("fluent:9", "None"),  # not in the snapshot: not held against it
        ("ansys:1,ansys:2", "Licenses"),  # the items together
    ],
)
def test_licenses_beyond_what_is_free(wanted: str, reason: str) -> None:
    job = fresh(licenses=wanted)
    assert settled_reason(job, bars(licenses=LICENSES, jobs=(job,))) == reason


def test_licenses_are_handed_out_in_slurms_order() -> None:
    """Four fresh whole-node jobs sharing two free licenses: the two first in Slurm's order (priority, then
    submit time, then id) take them, the others pend for ``Licenses``; a judged job ahead (Slurm's reason
    stands) takes first, a held one takes nothing, one that does not fit leaves what is free to the next."""
    pool = (License(name="lic", total=2, free=2),)

    def job(job_id: int, priority: int = 10, wanted: str = "lic:1", **kw: Any) -> Job:
        kw.setdefault("reason", "None")
        return Job(
            job_id=job_id, state="PENDING", priority=priority, partitions=("p",), licenses=wanted, **kw
        )

    four = (job(4, submit_time=4.0), job(3, submit_time=3.0), job(2, priority=20), job(1, submit_time=5.0))
    b = bars(licenses=pool, jobs=four)
    assert {j.job_id: settled_reason(j, b) for j in four} == {
        4: "Licenses",
        3: "None",
        2: "None",
        1: "Licenses",
    }
    assert b.licenses_short == {4: "lic", 1: "lic"}
    assert b.held_back_by_license("p") == {"lic": 2} and b.held_back_by_license("q") == {}

    ahead = job(9, priority=99, reason="Resources")  # Slurm judged it: it starts first when nodes come
    held = job(8, priority=98, reason="JobHeldUser")
    b = bars(licenses=pool, jobs=(ahead, held, *four))
    assert [settled_reason(j, b) for j in four] == ["Licenses", "Licenses", "None", "Licenses"]
    assert settled_reason(ahead, b) == "Resources"  # never held back by the model

    wide = job(5, priority=30, wanted="lic:3")  # more than there is: takes nothing
    b = bars(licenses=pool, jobs=(wide, *four))
    assert settled_reason(wide, b) == "Licenses" and b.held_back_by_license("p") == {"lic": 3}


def test_a_license_request_is_read_as_slurm_writes_it() -> None:
    from autoscaler.licenses import parse_request

    assert parse_request("matlab:2,fluent@db|ansys:1") == (
        (("matlab", 2),),
        (("fluent@db", 1), ("ansys", 1)),
    )
    assert parse_request("") == () and parse_request("a:x") == ((("a", 1),),)


def test_a_reservation_bound_job_needs_no_new_node() -> None:
    flex = Reservation(name="flex", start_time=NOW - 60, flags=("FLEX",))
    active = Reservation(name="active", start_time=NOW - 60)
    later = Reservation(name="later", start_time=NOW + 3600, flags=("FLEX",))
    b = bars(reservations=(flex, active, later))
    assert settled_reason(fresh(reservation="flex"), b) == "None"
    assert settled_reason(fresh("Resources", reservation="flex"), b) == "Resources"
    for name in ("active", "later", "deleted"):
        assert settled_reason(fresh(reservation=name), b) == "Reservation", name
        assert settled_reason(fresh("Resources", reservation=name), b) == "Reservation", name
    # an ineligible reason stays Slurm's
    assert settled_reason(fresh("JobHeldUser", reservation="active"), b) == "JobHeldUser"


def test_slurm_now_follows_slurmctlds_clock() -> None:
    # slurm-keda's clock 30 s behind slurmctld's: /diag's req_time (slurmctld's clock) moved on by the time
    # between that fetch and the snapshot
    diag = Diag(stats_time=NOW)
    s = Snapshot(taken_at=NOW - 29.5, api_version="v", diag=diag, fetched_at={"diag": NOW - 30.0})
    assert slurm_now(s) == NOW + 0.5
    assert slurm_now(Snapshot(taken_at=NOW, api_version="v")) == NOW  # no /diag: the snapshot's time
    # a job submitted now (eligible time now) is not "in the future" for a clock behind slurmctld's
    job = fresh(eligible_time=NOW)
    assert settled_reason(job, Bars.of(s)) == "None"


# ------------------------------------------------------------------------------ captured in the window


def _window_snapshot() -> tuple[Snapshot, dict[str, Any]]:
    meta = json.loads((WINDOW_2605 / "meta.json").read_text())
    return recorded_snapshot(WINDOW_2605, "v0.0.45"), meta


DIFFERENT_NAMES = {
    "too_wide": ("PartitionNodeLimit", "PartitionConfig"),
    "reservation_elsewhere": ("Reservation", "BadConstraints"),
}
"""Jobs whose reason from their fields (first) differs in name from Slurm's once the partition has one node
(second), both ineligible: Slurm says PartitionConfig for a 5-node job on a 1-node partition before its
MaxNodes of 4; BadConstraints for a reservation whose nodes are outside the partition."""


@pytest.mark.skipif(not WINDOW_2605.is_dir(), reason="no 26.05 window recording")
def test_captured_window_jobs_are_judged_as_slurm_judges_them_later() -> None:
    snap, meta = _window_snapshot()
    window, later = meta["reasons"]["window"], meta["reasons"]["with_node"]
    # the capture is inside the window: Slurm gave dependent and later their reason only afterwards
    assert window["dependent"] == window["later"] == "PartitionConfig"
    assert (meta["reasons"]["settled"]["dependent"], meta["reasons"]["settled"]["later"]) == (
        "Dependency",
        "BeginTime",
    )
    b = Bars.of(snap)
    by_id = {j.job_id: j for j in snap.jobs}
    for key, job_id in meta["jobs"].items():
        if key == "hog":
            continue
        job = by_id[job_id]
        ours = settled_reason(job, b)
        slurm = later[key]
        # ours on the zero-node partition (PartitionConfig counts), Slurm's once it has a node (it does not)
        ours_counts = classify(ours)[1] is not Eligibility.INELIGIBLE
        slurm_counts = classify(slurm)[1] is Eligibility.ELIGIBLE
        assert ours_counts == slurm_counts, f"{key}: ours {ours}, Slurm later {slurm}"
        if not slurm_counts:  # the same reason, where Slurm's names a bar
            assert (ours, slurm) == DIFFERENT_NAMES.get(key, (slurm, slurm)), key


@pytest.mark.skipif(not WINDOW_2605.is_dir(), reason="no 26.05 window recording")
def test_captured_window_scales_for_the_eligible_job_only() -> None:
    # Before: every PartitionConfig job counted on the empty NodeSet: 7 jobs of 8 CPUs (eligible, too_wide
    # as 5 nodes, too_long, licenses, reservation_elsewhere, dependent, later) → 11 nodes.
    snap, meta = _window_snapshot()
    target = Target("dyn", meta["partition"], nodeset_feature="dyn", shape=NodeShape(8, 16000 * MIB))
    d = compute_demand(snap, [target])["dyn"]
    assert (d.desired, d.eligible, d.busy) == (1, 1, 0), explain(target, d)
    assert d.ignored == {
        "JobHeldUser": 1,
        "Dependency": 1,
        "BeginTime": 1,
        "PartitionNodeLimit": 1,
        "PartitionTimeLimit": 1,
        "Licenses": 1,
        "Reservation": 2,
    }


def test_memory_above_max_mem_per_node_is_barred() -> None:
    # MaxMemPerNode bounds each job: --mem=0 (whole node) or a larger --mem pends with MaxMemPerLimit for ever
    b = bars(partitions=(Partition(name="p", max_memory_per_node_bytes=8000 * MIB),))
    assert settled_reason(fresh(whole_node_memory=True), b) == "MaxMemPerLimit"
    assert settled_reason(fresh(memory_per_node_bytes=9000 * MIB), b) == "MaxMemPerLimit"
    assert settled_reason(fresh(memory_per_node_bytes=6000 * MIB), b) == "None"
    assert settled_reason(fresh(whole_node_memory=True), bars(partitions=(Partition(name="p"),))) == "None"


def test_licenses_are_handed_out_in_the_order_the_demand_packs_jobs() -> None:
    import random

    from autoscaler.demand.queue import rank
    from autoscaler.licenses import _order

    rnd = random.Random(5)
    jobs = [
        Job(
            job_id=i,
            state="PENDING",
            priority=rnd.choice([0, 5, 10]),
            submit_time=rnd.choice([None, 1.0, 2.0]),
            array_job_id=rnd.choice([None, 3]),
        )
        for i in range(1, 60)
    ]
    assert sorted(jobs, key=_order) == sorted(jobs, key=rank)
