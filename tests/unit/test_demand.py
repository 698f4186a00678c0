"""Demand model: every rule with a hand-computed answer, plus one recorded lab payload.

Synthetic snapshots are built from model structs; node shape in most tests: 8 CPUs, 16000 MiB.
"""

from __future__ import annotations

import math
import random
from typing import Any, get_args

import msgspec
import pytest

from autoscaler.demand import Demand, Misfit, NodeShape, Target, compute_demand, queue
from autoscaler.demand.packing import EXACT_WORK, Bins, Piece, is_exact, pack
from autoscaler.demand.queue import key_of, request_of, scan, tally
from autoscaler.demand.select import hosts
from autoscaler.demand.sizing import Request, size
from autoscaler.demand.types import MisfitKind
from autoscaler.eligibility import Bars
from autoscaler.reasons import Eligibility, classify, normalize
from autoscaler.report import misfit_text
from exporter.model import MIB, Job, Node, NodeRequest, Partition, SlurmConfig, Snapshot
from exporter.slurmtext import hostlist_expand
from testkit import builders
from testkit.budget import seeds
from testkit.paths import ROOT
from testkit.tools import recorded_snapshot

RECORDED_2605 = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5" / "v0.0.45"
SHAPE = NodeShape(cpus=8, memory_bytes=16000 * MIB)


def pend(job_id: int, reason: str = "Resources", partition: str = "p", **kw: Any) -> Job:
    kw.setdefault("cpus", 1)
    kw.setdefault("memory_per_node_bytes", 100 * MIB)
    kw.setdefault("priority", 1)  # 0 is Slurm's "held"
    return Job(job_id=job_id, state="PENDING", reason=reason, partitions=(partition,), **kw)


def node(name: str, partition: str = "p", **kw: Any) -> Node:
    kw.setdefault("state", "IDLE")
    kw.setdefault("cpus", 8)
    kw.setdefault("memory_bytes", 16000 * MIB)
    return Node(name=name, partitions=(partition,), **kw)


def snap(jobs: list[Job], nodes: list[Node] | None = None) -> Snapshot:
    return builders.snap(jobs, nodes or ())


NO_BARS = Bars(now=0.0, partitions={}, licenses={}, reservations={})


def one(jobs: list[Job], nodes: list[Node] | None = None, **target: Any) -> Demand:
    target.setdefault("shape", SHAPE)
    t = Target(name="t", partition=target.pop("partition", "p"), **target)
    return compute_demand(snap(jobs, nodes), [t])["t"]


# ------------------------------------------------------------------------------------ reason table


def test_reason_table() -> None:
    for r in ("Resources", "Priority", "None", "ReqNodeNotAvail", "NodeDown", ""):
        assert classify(r)[1] is Eligibility.ELIGIBLE, r
    for r in (
        "JobHeldUser",
        "JobHeldAdmin",
        "Dependency",
        "BeginTime",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSGrpCpuLimit",
        "AssocGrpNodeLimit",
        "MaxCpuPerAccount",
        "Reservation",
        "Licenses",
        "JobArrayTaskLimit",
        "SomethingNew",  # unknown → ineligible
    ):
        assert classify(r)[1] is Eligibility.INELIGIBLE, r
    assert classify("PartitionConfig")[1] is Eligibility.ELIGIBLE_WHEN_EMPTY
    assert normalize("ReqNodeNotAvail, UnavailableNodes:c[1-2]") == "ReqNodeNotAvail"
    assert classify("ReqNodeNotAvail, UnavailableNodes:c1")[:2] == ("ReqNodeNotAvail", Eligibility.ELIGIBLE)


def test_eligible_counted_ineligible_ignored() -> None:
    # 4 eligible 1-CPU jobs (Resources, Priority, None, ReqNodeNotAvail) → 4 CPUs → 1 node of 8 CPUs.
    # 6 ineligible ones are ignored by reason.
    jobs = [
        pend(1, "Resources"),
        pend(2, "Priority"),
        pend(3, "None"),
        pend(4, "ReqNodeNotAvail, UnavailableNodes:n1"),
        pend(5, "JobHeldUser"),
        pend(6, "Dependency"),
        pend(7, "BeginTime"),
        pend(8, "PartitionNodeLimit"),
        pend(9, "QOSMaxJobsPerUserLimit"),
        pend(10, "Licenses"),
    ]
    d = one(jobs)
    assert (d.needed, d.desired, d.eligible) == (1, 1, 4)
    assert d.ignored == {
        "JobHeldUser": 1,
        "Dependency": 1,
        "BeginTime": 1,
        "PartitionNodeLimit": 1,
        "QOSMaxJobsPerUserLimit": 1,
        "Licenses": 1,
    }
    # only held jobs → nothing to do
    assert one([pend(1, "JobHeldUser"), pend(2, "Dependency")]).desired == 0


def test_running_and_other_partition_jobs_are_not_pending_demand() -> None:
    jobs = [pend(1, partition="other"), Job(job_id=2, state="RUNNING", partitions=("p",), cpus=8)]
    assert one(jobs).needed == 0


# ------------------------------------------------------------------------------------------ arrays


def test_array_throttle_minus_running_tasks() -> None:
    # array 100 = 1-20%4: tasks 1 and 2 run (records with array_task_id), 18 pending tasks.
    # Allowance = 4 − 2 running = 2 tasks counted; 16 ignored as JobArrayTaskLimit.
    # 2 tasks × 4 CPUs = 8 CPUs → 1 new node (busy: n1 holds the running tasks).
    running = [
        Job(
            job_id=200 + t,
            array_job_id=100,
            array_task_id=t,
            state="RUNNING",
            partitions=("p",),
            cpus=4,
            nodes="n1",
        )
        for t in (1, 2)
    ]
    rec = pend(
        100,
        "Resources",
        cpus=4,
        array_job_id=100,
        array_task_string="3-20",
        array_pending_tasks=18,
        array_max_tasks=4,
    )
    d = one([*running, rec], [node("n1", state="ALLOCATED", alloc_cpus=8)])
    assert (d.busy, d.eligible, d.needed, d.desired) == (1, 2, 1, 2)
    assert d.ignored == {"JobArrayTaskLimit": 16}


def test_array_unthrottled_counts_every_pending_task() -> None:
    # 10 pending 1-CPU tasks, no throttle → 10 CPUs → 2 nodes of 8 CPUs.
    rec = pend(100, cpus=1, array_job_id=100, array_task_string="1-10", array_pending_tasks=10)
    assert one([rec]).needed == 2


def test_array_throttle_reached_counts_nothing() -> None:
    # %2 with 2 running tasks: allowance 0 (the lab's array 3 in the recorded payload).
    running = [
        Job(job_id=10 + t, array_job_id=1, array_task_id=t, state="RUNNING", partitions=("p",), cpus=1)
        for t in (1, 2)
    ]
    rec = pend(
        1, "Resources", array_job_id=1, array_task_string="3-9", array_pending_tasks=7, array_max_tasks=2
    )
    d = one([*running, rec])
    assert (d.needed, d.ignored) == (0, {"JobArrayTaskLimit": 7})


# ------------------------------------------------------------------------------------------ sizing


def test_multi_node_job_pieces_on_distinct_nodes() -> None:
    # -N3 -n3: 3 pieces of 1 CPU, each on its own node → 3 nodes.
    assert one([pend(1, min_nodes=3, cpus=3)]).needed == 3
    # two such jobs share those 3 nodes (2 CPUs used of 8 on each) → still 3.
    assert one([pend(1, min_nodes=3, cpus=3), pend(2, min_nodes=3, cpus=3)]).needed == 3
    # a 2-node job with 8 CPUs/node fills 2 nodes; a 1-CPU job then needs a third.
    assert one([pend(1, min_nodes=2, cpus=16), pend(2, cpus=1)]).needed == 3


def test_cpu_sizing() -> None:
    # 20 CPUs on 8-CPU nodes: ⌈20/8⌉ = 3 nodes.
    assert one([pend(1, cpus=20)]).needed == 3
    # -n3 -c3 on 8 CPUs: 2 tasks fit a node (⌊8/3⌋) → ⌈3/2⌉ = 2 nodes (though 9 CPUs ≤ 16).
    assert one([pend(1, cpus=9, tasks=3, cpus_per_task=3)]).needed == 2
    # -N1 -n20: needs 3 nodes but allows 1 → too large.
    d = one([pend(7, cpus=20, max_nodes=1)])
    assert d.needed == 0 and [t.job for t in d.too_large] == ["7"]


def test_memory_sizing() -> None:
    # --mem-per-cpu=3000M × 8 CPUs = 24000 MiB on 16000-MiB nodes → ⌈24000/16000⌉ = 2 nodes
    # (4 CPUs × 3000 = 12000 MiB per node fits).
    job = pend(1, cpus=8, memory_per_node_bytes=None, memory_per_cpu_bytes=3000 * MIB)
    assert one([job]).needed == 2
    # --mem=9000M per node: two such 1-CPU jobs cannot share a 16000-MiB node → 2 nodes.
    assert (
        one([pend(1, memory_per_node_bytes=9000 * MIB), pend(2, memory_per_node_bytes=9000 * MIB)]).needed
        == 2
    )
    # --mem above a node's memory → too large.
    d = one([pend(3, memory_per_node_bytes=20000 * MIB)])
    assert d.needed == 0 and d.too_large[0].misfit == Misfit("memory_per_node", 20000 * MIB, 16000 * MIB)


def test_whole_node_memory_takes_a_whole_node() -> None:
    # three 1-CPU jobs that get all memory of their node (no DefMemPerCPU) → 3 nodes, not 1.
    jobs = [pend(i, memory_per_node_bytes=None, whole_node_memory=True) for i in (1, 2, 3)]
    assert one(jobs).needed == 3


def test_gpu_sizing() -> None:
    gpu_shape = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=2)
    # --gpus=6 (per job) on 2-GPU nodes → ⌈6/2⌉ = 3 nodes.
    assert one([pend(1, gpus=6)], shape=gpu_shape).needed == 3
    # two --gpus-per-node=1 jobs share one 2-GPU node; a third needs a second node.
    assert one([pend(i, gpus_per_node=1, gpus=1) for i in (1, 2, 3)], shape=gpu_shape).needed == 2
    # --gpus-per-node=4 on 2-GPU nodes → too large; GPUs on a GPU-less target → too large.
    assert one([pend(1, gpus_per_node=4, gpus=4)], shape=gpu_shape).too_large[0].job == "1"
    assert len(one([pend(1, gpus=1)]).too_large) == 1


def test_gpus_beyond_a_node_span_nodes_up_to_the_jobs_own_maximum() -> None:
    """``--gpus=5`` on 4-GPU nodes runs on 2 (lab, 26.05.5); ``-n1 --gpus=6`` on one node with the GPUs it
    has — the job's maximum caps the nodes its GPUs ask for, and never makes it too large."""
    quad = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=4)
    assert one([pend(1, gpus=5)], shape=quad).needed == 2
    assert one([pend(1, gpus=6, tasks=1, max_nodes=1)], shape=quad).needed == 1
    three = one([pend(1, gpus=12, tasks=3, cpus=3, max_nodes=3)], shape=quad)
    assert three.needed == 3 and not three.too_large
    # CPUs still bound it: -n16 on one node at most is too large whatever its GPUs
    assert one([pend(1, gpus=2, tasks=16, cpus=16, max_nodes=1)], shape=quad).too_large


def test_node_ranges_minimum_by_default_or_what_slurm_takes() -> None:
    """``-N2-4 -n4`` from idle nodes: slurmctld takes 4 (a task each), ``-N1-3`` without ``-n`` 3 (a task
    added for each node), ``-N1-4 -n2`` 2 (lab, 26.05.5). The default counts the minimum."""
    ranged = [
        pend(1, min_nodes=2, max_nodes=4, cpus=4, tasks=4, tasks_exact=True, node_range=True),
        pend(2, min_nodes=1, max_nodes=3, node_range=True),
        pend(3, min_nodes=1, max_nodes=4, cpus=2, tasks=2, tasks_exact=True, node_range=True),
    ]
    assert one(ranged).needed == 2  # pieces of 2 + 1 + 1 CPUs fit two nodes
    largest = one(ranged, node_ranges="largest")
    assert largest.needed == 4  # 4 nodes of 1 CPU, 3 of 1, 2 of 1: at most one piece of a job per node
    # an implied maximum (-n4: node_range False) stays the minimum; the target's maximum caps the range
    assert one([pend(4, max_nodes=4, cpus=4, tasks=4, tasks_exact=True)], node_ranges="largest").needed == 1
    assert one([ranged[0]], node_ranges="largest", max_nodes=3).needed == 3


def test_a_partition_cpu_default_per_gpu_for_jobs_without_their_own() -> None:
    """``DefCpuPerGPU=8``: three ``--gpus=1`` jobs take 8 CPUs each — three 8-CPU nodes (lab, 26.05.5);
    a job that gave ``-c`` keeps its own CPUs."""
    quad = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=4)
    jobs = [pend(i, gpus=1) for i in (1, 2, 3)]
    assert one(jobs, shape=quad).needed == 1
    assert one(jobs, shape=quad, cpus_per_gpu=8).needed == 3
    own = [pend(i, gpus=1, cpus=2, cpus_per_task=2, cpus_exact=True) for i in (1, 2, 3)]
    assert one(own, shape=quad, cpus_per_gpu=8).needed == 1
    # the cluster-wide JobDefaults (/conf) where the target says none; the target's own first
    cluster = msgspec.structs.replace(snap(jobs), config=SlurmConfig(default_cpus_per_gpu=8))
    assert compute_demand(cluster, [Target(name="t", partition="p", shape=quad)])["t"].needed == 3
    own_rule = Target(name="t", partition="p", shape=quad, cpus_per_gpu=4)
    assert compute_demand(cluster, [own_rule])["t"].needed == 2


def test_exclusive_takes_whole_nodes() -> None:
    # two 1-CPU exclusive jobs → 2 nodes (not packed together); a 2-node exclusive job → 2 more.
    jobs = [pend(1, exclusive=True), pend(2, exclusive=True), pend(3, min_nodes=2, cpus=2, exclusive=True)]
    assert one(jobs).needed == 4


# ----------------------------------------------------------------------------------------- packing


def test_first_fit_packs_three_3cpu_jobs_onto_two_nodes() -> None:
    # 3+3 on node 1 (2 CPUs left, a third 3-CPU job does not fit) + 3 on node 2 → 2 nodes.
    assert one([pend(i, cpus=3) for i in (1, 2, 3)]).needed == 2


def test_first_fit_in_slurm_scheduling_order(order_by: str) -> None:
    # Equal priorities: Slurm takes the jobs up by job id. -c3,-c3,-c5,-c5: 3+3 on node 1 (2 CPUs
    # left), each 5 alone → 3 nodes (the oracle's priority_order mix: Slurm resumes 3; first-fit
    # decreasing said 2: 5+3 twice).
    assert one([pend(1, cpus=3), pend(2, cpus=3), pend(3, cpus=5), pend(4, cpus=5)]).needed == 3
    # -c5,-c3,-c5,-c3: 5+3 on node 1, 5+3 on node 2 → 2.
    assert one([pend(1, cpus=5), pend(2, cpus=3), pend(3, cpus=5), pend(4, cpus=3)]).needed == 2


@pytest.fixture(params=["by job", "by kind"])
def order_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of ordering the queue: job by job (small queues) and kind by kind (ORDER_JOBS = 0)."""
    if request.param == "by kind":
        monkeypatch.setattr(queue, "ORDER_JOBS", 0)
    return str(request.param)


def test_higher_priority_is_placed_first(order_by: str) -> None:
    # The same -c3,-c3,-c5,-c5, but the later 5-CPU jobs have the higher priority: Slurm takes them up
    # first: 5, 5 on nodes 1 and 2, each 3 into one's 3 free CPUs → 2 nodes (3 in id order).
    jobs = [pend(1, cpus=3, priority=10), pend(2, cpus=3, priority=10)]
    jobs += [pend(3, cpus=5, priority=20), pend(4, cpus=5, priority=20)]
    assert one(jobs).needed == 2
    # equal priorities: the earlier submit time first, then the smaller job id: the 5-CPU jobs were
    # submitted first (ids handed out in another order, e.g. after a requeue) → 2 nodes
    jobs = [pend(1, cpus=3, submit_time=200.0), pend(2, cpus=3, submit_time=200.0)]
    jobs += [pend(3, cpus=5, submit_time=100.0), pend(4, cpus=5, submit_time=100.0)]
    assert one(jobs).needed == 2


def test_an_array_is_taken_up_at_its_array_id(order_by: str) -> None:
    # Array 1 (2 pending tasks of 5 CPUs) is listed after jobs 2 and 3 (-c3), as slurmctld lists an
    # array's pending record once a task was split off; Slurm takes it up at its id, first: 5, 5 on
    # nodes 1 and 2, each 3 into one's 3 free CPUs → 2 nodes (3 in listing order: 3+3, 5, 5).
    array = pend(1, cpus=5, array_job_id=1, array_task_string="2-3", array_pending_tasks=2)
    assert one([pend(2, cpus=3), pend(3, cpus=3), array]).needed == 2


def test_a_kind_is_led_by_its_highest_priority_then_first_listed_job() -> None:
    # One key (identical jobs 10..13, listed in that order) with priorities 5, 9, 9, 1: the lead is job 11
    # (index 2 of the snapshot: a running job comes first). Priorities beyond Slurm's uint32 are clamped
    # (job 21: 2**40 → 2**32 − 1 leads its key); a negative one (job 31) comes after job 30's 0.
    running = Job(job_id=1, state="RUNNING", partitions=("p",), cpus=1)
    jobs = [running] + [pend(10 + i, priority=p) for i, p in enumerate((5, 9, 9, 1))]
    jobs += [pend(20, cpus=2, priority=7), pend(21, cpus=2, priority=2**40)]
    jobs += [pend(30, cpus=3, priority=0), pend(31, cpus=3, priority=-3)]
    others: list[Job] = []
    groups, codes = scan(jobs, others, Bars.of(snap(jobs)))
    assert others == [running]
    counts, leads, priorities, positions = tally(list(groups.values()), codes, positions=True)
    assert (counts.tolist(), [jobs[i].job_id for i in leads]) == ([4, 2, 2], [11, 21, 30])
    assert priorities.tolist() == [9, 2**32 - 1, 0]
    assert positions == list(range(1, len(jobs)))


def test_job_by_job_order_and_kinds_as_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # -c3,-c5,-c3,-c5: Slurm, one job at a time: 3+5 on node 1, 3+5 on node 2 → 2; the model orders a
    # queue of up to ORDER_JOBS pending records job by job and agrees. Beyond, each kind is one run at its
    # first job's place: 3, 3, then 5, 5 → 3+3, 5, 5 → 3 (the price of a cost that grows with kinds).
    jobs = [pend(1, cpus=3), pend(2, cpus=5), pend(3, cpus=3), pend(4, cpus=5)]
    assert one(jobs).needed == 2
    # the end-to-end workload of tests/live/test_autoscale_live.py: -c8 ×2, -c4 ×4, a -N2 job of 4 CPUs per
    # node, -c4 ×2: 8, 8 on nodes 1, 2; four 4s on nodes 3, 4; the pair on 5, 6; the last 4s fill 5, 6 →
    # 6. As kinds: the six 4s fill nodes 3..5 before the pair, which opens 6 and 7 → 7.
    work = [pend(1, cpus=8), pend(2, cpus=8)] + [pend(i, cpus=4) for i in (3, 4, 5, 6)]
    work += [pend(7, cpus=8, min_nodes=2), pend(8, cpus=4), pend(9, cpus=4)]
    assert one(work).needed == 6
    monkeypatch.setattr(queue, "ORDER_JOBS", 3)
    assert (one(jobs).needed, one(work).needed) == (3, 7)


def test_packing_uses_memory_as_a_dimension() -> None:
    # 4 jobs of 1 CPU and 6000 MiB: only 2 fit a 16000-MiB node → 2 nodes (CPUs alone say 1).
    assert one([pend(i, memory_per_node_bytes=6000 * MIB) for i in range(4)]).needed == 2


def test_many_identical_jobs_are_packed_in_bulk() -> None:
    # 10 000 1-CPU jobs → 10 000 / 8 = 1250 nodes; 1001 2-node 4-CPU jobs (2 CPUs per node)
    # → 4 jobs per pair of nodes: ⌈1001/4⌉ = 251 rounds × 2 nodes = 502 nodes.
    assert one([pend(i) for i in range(10_000)]).needed == 1250
    assert one([pend(i, min_nodes=2, cpus=4) for i in range(1001)]).needed == 502


def test_too_large_for_target_max() -> None:
    # a 5-node job on a target of at most 4 nodes: reported, not counted; a 1-CPU job still counts.
    d = one([pend(1, min_nodes=5, cpus=5), pend(2)], max_nodes=4)
    assert d.needed == 1 and d.desired == 1
    assert [(t.job, t.tasks) for t in d.too_large] == [("1", 1)]
    assert d.too_large[0].misfit == Misfit("target_max_nodes", 5, 4)


# ---------------------------------------------------------------------------------- busy and clamp


def test_busy_floor() -> None:
    # n1 allocated CPUs, n2 COMPLETING flag, n3 idle but a completing job names it, n4 idle.
    nodes = [
        node("n1", state="MIXED", alloc_cpus=2),
        node("n2", state="IDLE", flags=("COMPLETING",)),
        node("n3"),
        node("n4"),
    ]
    done = Job(job_id=9, state="COMPLETED", state_flags=("COMPLETING",), partitions=("p",), nodes="n3")
    d = one([done], nodes)
    assert (d.busy, d.needed, d.desired, d.nodes) == (3, 0, 3, 4)
    # max below busy: desired stays at busy (never scale below busy nodes)
    d = one([done], nodes, max_nodes=2)
    assert (d.desired, d.busy, d.needed) == (3, 3, 0)


def test_min_max_clamp() -> None:
    assert one([], min_nodes=2).desired == 2
    # 10 whole-node jobs → needed 10, max 4 → desired 4
    d = one([pend(i, cpus=8) for i in range(10)], max_nodes=4)
    assert (d.needed, d.desired) == (10, 4)
    with pytest.raises(ValueError):
        Target("bad", "p", min_nodes=3, max_nodes=2)


def test_new_pending_jobs_use_free_room_of_busy_nodes() -> None:
    # n1 runs 4 of 8 CPUs. A fresh (reason None) 2-CPU job fits there → needed 0, desired 1.
    # The same job with reason Resources was already judged not to fit → 1 new node.
    nodes = [node("n1", state="MIXED", alloc_cpus=4, alloc_memory_bytes=1000 * MIB)]
    assert one([pend(1, "None", cpus=2)], nodes).desired == 1
    assert one([pend(1, "Resources", cpus=2)], nodes).desired == 2
    # a drained busy node offers no room
    drained = [node("n1", state="MIXED", flags=("DRAIN",), alloc_cpus=4)]
    assert one([pend(1, "None", cpus=2)], drained).desired == 2


def test_free_room_and_new_nodes_in_slurm_order() -> None:
    # n1 has 5 free CPUs. Fresh jobs -c3, -c5, -c5 (reason None), in id order: 3 into n1's room (2 left),
    # each 5 on a new node → needed 2, desired 3 (largest first would say 1: 5 in the room, 5+3 new).
    room5 = [node("n1", state="MIXED", alloc_cpus=3)]
    jobs = [pend(1, "None", cpus=3), pend(2, "None", cpus=5), pend(3, "None", cpus=5)]
    assert (one(jobs, room5).needed, one(jobs, room5).desired) == (2, 3)
    # n1 has 2 free CPUs. Fresh job 1 (-c5) does not fit there; it keeps its place before the evaluated
    # jobs 2, 3 (-c3) and 4 (-c5): 5+3 on one new node, 3+5 on another → needed 2, desired 3 (after the
    # others it would be 3+3, 5, 5 → 3).
    room2 = [node("n1", state="MIXED", alloc_cpus=6)]
    jobs = [pend(1, "None", cpus=5), pend(2, cpus=3), pend(3, cpus=3), pend(4, "Priority", cpus=5)]
    assert (one(jobs, room2).needed, one(jobs, room2).desired) == (2, 3)


# ------------------------------------------------------------------------------ shape and targets


def test_scale_from_zero_with_configured_shape() -> None:
    # no nodes: shape from Target.shape; 12 CPUs on 8 → 2 nodes.
    d = one([pend(1, cpus=12)])
    assert (d.shape_source, d.needed, d.desired) == ("config", 2, 2)
    # no nodes, no shape → nothing counted, said in reasons
    d = one([pend(1, cpus=12)], shape=None)
    assert (d.shape_source, d.needed, d.desired, d.eligible) == ("none", 0, 0, 1)
    assert (d.shape, d.packing) == (None, None)


def test_core_specialisation_counts_effective_cpus() -> None:
    # CoreSpecCount=2 on 8-CPU nodes: Slurm reports 6 effective CPUs; four -c2 jobs go three per node → 2
    # (with all 8 CPUs: 1). A busy node's free room is counted from the effective CPUs too: 6 − 4 = 2, one
    # -c2 job fits there. Hand-computed: the lab's nodes have no core specialisation (a slurm.conf setting
    # of every cloud node, which each oracle mix would then see).
    nodes = [node("n1", effective_cpus=6)]
    jobs = [pend(i, cpus=2) for i in range(4)]
    d = one(jobs, nodes)
    assert (d.shape, d.needed) == (NodeShape(6, 16000 * MIB, 0), 2)
    assert one(jobs, [node("n1")]).needed == 1
    busy = [node("n1", state="MIXED", alloc_cpus=4, effective_cpus=6)]
    fresh = [pend(i, "None", cpus=2) for i in range(2)]
    d = one(fresh, busy)
    assert (d.busy, d.needed, d.packing.in_free_room if d.packing else None) == (1, 1, 1)


def test_snapshot_shape_wins_over_configured() -> None:
    # nodes of 4 CPUs exist: 6 CPUs → 2 nodes (configured 8 CPUs would say 1).
    d = one([pend(1, cpus=6)], [node("n1", cpus=4)])
    assert (d.shape_source, d.shape, d.needed) == ("snapshot", NodeShape(4, 16000 * MIB, 0), 2)


def test_partition_config_counts_only_when_target_is_empty() -> None:
    # 26.05 zero-node dynamic partition: PartitionConfig counts; with nodes present it is ignored.
    assert one([pend(1, "PartitionConfig", cpus=2)]).needed == 1
    d = one([pend(1, "PartitionConfig", cpus=2)], [node("n1")])
    assert (d.needed, d.ignored) == (0, {"PartitionConfig": 1})


def test_nodeset_by_feature_and_names() -> None:
    nodes = [
        node("a1", state="ALLOCATED", alloc_cpus=8, features=("fa",)),
        node("b1", state="ALLOCATED", alloc_cpus=8, features=("fb",)),
        node("b2", state="ALLOCATED", alloc_cpus=8, features=("fb",)),
    ]
    jobs = [pend(1, cpus=8, features="fa"), pend(2, cpus=8, features="fb"), pend(3, cpus=8)]
    s = snap(jobs, nodes)
    out = compute_demand(
        s,
        [
            Target("a", "p", nodeset_feature="fa"),
            Target("b", "p", nodeset_feature="fb"),
            Target("names", "p", node_names="b[1-2]"),
            Target("prefix", "p", node_names="a*"),
        ],
    )
    # a: busy a1; jobs 1 (constraint fa) and 3 (no constraint) → 2 new nodes.
    assert (out["a"].busy, out["a"].needed) == (1, 2)
    # b: busy b1,b2; jobs 2 and 3 → 2 new nodes.
    assert (out["b"].busy, out["b"].needed) == (2, 2)
    # by names, no feature filter: busy 2; b1, b2 have only fb, so job 1 (-C fa) cannot run there → 2.
    assert (out["names"].busy, out["names"].needed, out["prefix"].busy) == (2, 2, 1)
    assert (out["names"].skipped, out["names"].eligible) == (1, 2)


def test_target_names_must_be_unique() -> None:
    with pytest.raises(ValueError):
        compute_demand(snap([]), [Target("x", "p"), Target("x", "q")])


# -------------------------------------------------------------------------------- recorded payload


@pytest.mark.skipif(not RECORDED_2605.is_dir(), reason="no 26.05 recording")
def test_recorded_2605_cpu_and_gpu() -> None:
    s = recorded_snapshot(RECORDED_2605, "v0.0.45")
    out = compute_demand(
        s,
        [
            Target("cpu", "cpu", max_nodes=10),
            Target("gpu", "gpu", max_nodes=4),
            Target("dyn", "dyn", max_nodes=4, shape=SHAPE),
            Target("cloud", "cloud"),
        ],
    )
    # cpu: nodes c1-c3 of 8 CPUs / 16000 MiB. Busy: c1 (job 1, 8 CPUs), c2 (jobs 2, 4, 5, 3_1,
    # 3_2), c3 (job 4's second node, MIXED 1 CPU) → busy 3.
    # Pending: 6 "exclusive_pair" (Resources, -N2, no --mem and no DefMemPerCPU → whole node
    #   memory: 2 pieces of 16000 MiB) → 2 nodes; 7 "behind" (Priority, 8 CPUs, 1000 MiB) → does
    #   not share with job 6's memory-full nodes → 1 node. Needed 3; desired 3 + 3 = 6.
    # Ignored: 8 JobHeldUser, 9 Dependency, 10 BeginTime, 11 PartitionNodeLimit (-N3 > MaxNodes
    #   2), array 3_[3-20%2]: 18 tasks, throttle 2 − 2 running (3_1, 3_2) = 0 → JobArrayTaskLimit.
    cpu = out["cpu"]
    assert (cpu.busy, cpu.needed, cpu.desired, cpu.eligible) == (3, 3, 6, 2)
    assert cpu.ignored == {
        "JobHeldUser": 1,
        "Dependency": 1,
        "BeginTime": 1,
        "PartitionNodeLimit": 1,
        "JobArrayTaskLimit": 18,
    }
    # the lab's nodes: 8 sockets of one core, one thread each (as slurmrestd reports them)
    assert cpu.shape == NodeShape(8, 16000 * MIB, sockets=8, cores_per_socket=1)
    assert cpu.shape_source == "snapshot" and cpu.too_large == ()
    # gpu: g1 = 8 CPUs, 16000 MiB, 2 GPUs; MIXED with job 12 (2 CPUs, 1 GPU) → busy 1.
    # Pending 13 "gpu_two" (Resources, --gres=gpu:2): needs 2 GPUs per node, g1 has 1 free and
    # Slurm already judged it (Resources) → 1 new node. Desired 1 + 1 = 2.
    gpu = out["gpu"]
    assert (gpu.busy, gpu.needed, gpu.desired, gpu.ignored) == (1, 1, 2, {})
    assert gpu.shape == NodeShape(8, 16000 * MIB, 2, sockets=8, cores_per_socket=1)
    # dyn: zero nodes; job 15 pends with PartitionConfig (counts: target empty), 2 CPUs 1000 MiB
    # on the configured 8-CPU shape → 1 node.
    assert (out["dyn"].needed, out["dyn"].desired, out["dyn"].shape_source) == (1, 1, "config")
    # cloud: p1, p2 powering up for job 14 (MIXED, allocated CPUs) → busy 2, nothing pending.
    assert (out["cloud"].busy, out["cloud"].desired) == (2, 2)


# --------------------------------------------------------------------- packing: exact and bounded


def _first_fit_job_by_job(
    groups: list[tuple[Piece, int]], rooms: list[list[int]], cap: tuple[int, int, int], *, open_new: bool
) -> tuple[int, list[int]]:
    """Reference: first fit one job at a time, in the groups' order, over one bin per node (no runs, no
    blocks)."""
    bins = [room[:3] for room in rooms for _ in range(room[3])]
    opened = 0
    left: list[int] = []
    for (n, pc, pm, pg), k in groups:
        left.append(0)
        for _ in range(k):
            fits = [b for b in bins if b[0] >= pc and b[1] >= pm and b[2] >= pg][:n]
            if len(fits) < n and not open_new:
                left[-1] += 1
                continue
            for _ in range(n - len(fits)):
                bins.append(list(cap))
                fits.append(bins[-1])
                opened += 1
            for b in fits:
                b[0], b[1], b[2] = b[0] - pc, b[1] - pm, b[2] - pg
    return opened, left


def _random_pieces(
    rng: random.Random, count: int, cap: tuple[int, int, int], multi: bool, *, again: float = 0.0
) -> list[tuple[Piece, int]]:
    """``count`` runs of 1–6 identical jobs of all-different sizes, but that a run repeats an earlier
    run's size with probability ``again`` (a kind Slurm takes up again after others)."""
    groups: list[tuple[Piece, int]] = []
    seen: set[Piece] = set()
    while len(groups) < count:
        if groups and rng.random() < again:
            piece = rng.choice(groups)[0]
        else:
            n = rng.choice([1, 1, 2, 3]) if multi else 1
            piece = (n, rng.randint(1, cap[0]), rng.randint(1, cap[1] // MIB) * MIB, rng.randint(0, cap[2]))
            if piece in seen:
                continue
            seen.add(piece)
        groups.append((piece, rng.randint(1, 6)))
    return groups


@pytest.mark.parametrize("seed", seeds(6))
def test_exact_packing_is_first_fit_job_by_job(seed: int) -> None:
    # Bulk placement over runs and blocks (runs well past 2 blocks, so blocks are skipped, tightened
    # and split) places exactly like the one-job-at-a-time reference, into free room and new bins, also
    # when a size comes back after others (a fifth of the runs here).
    rng = random.Random(seed)
    cap = (8, 16000 * MIB, 2)
    groups = _random_pieces(rng, rng.choice([5, 40, 120]), cap, multi=seed % 2 == 1, again=0.2)
    rooms = [
        [rng.randint(1, 8), rng.randint(0, 16000) * MIB, rng.randint(0, 2), rng.randint(1, 3)]
        for _ in range(150)
    ]
    for open_new in (False, True):
        got = pack(groups, Bins([r[:] for r in rooms]), cap, open_new=open_new, exact=True)
        assert got == _first_fit_job_by_job(groups, rooms, cap, open_new=open_new)
    assert pack(groups, Bins(), cap, open_new=True, exact=True) == _first_fit_job_by_job(
        groups, [], cap, open_new=True
    )


@pytest.mark.parametrize("seed", seeds(4))
def test_queue_is_packed_like_slurm_takes_it_up_job_by_job(seed: int) -> None:
    # 80 pending jobs (1–2 nodes, 1–8 CPUs and 100–16000 MiB per node, a few sizes repeated), priorities
    # from a small set (ties), submit times and job ids shuffled: the model's answer is first fit one job
    # at a time in Slurm's order — priority descending, submit time, job id.
    rng = random.Random(seed)
    sizes = [(rng.randint(1, 2), rng.randint(1, 8), rng.randint(1, 160) * 100) for _ in range(12)]
    jobs = []
    for job_id in rng.sample(range(1, 1000), 80):
        n, cpus, mem = rng.choice(sizes)
        jobs.append(
            pend(job_id, min_nodes=n, cpus=n * cpus, memory_per_node_bytes=mem * MIB,
                 priority=rng.choice([10, 20, 30]), submit_time=float(rng.randint(0, 5)))
        )  # fmt: skip
    queue = sorted(jobs, key=lambda j: (-j.priority, j.submit_time, j.job_id))
    pieces = [((j.min_nodes, j.cpus // j.min_nodes, j.memory_per_node_bytes or 0, 0), 1) for j in queue]
    expected, _ = _first_fit_job_by_job(pieces, [], (8, 16000 * MIB, 0), open_new=True)
    assert one(jobs).needed == expected


def _bounds(groups: list[tuple[Piece, int]], cap: tuple[int, int, int]) -> tuple[int, float]:
    """(a lower bound of the optimum, the proven upper bound 2·S + n_max) of packing onto new bins."""
    shares = [0.0, 0.0, 0.0]
    for (n, *per_node), k in groups:
        for d in range(3):
            if cap[d]:
                shares[d] += n * k * per_node[d] / cap[d]
    n_max = max(n for (n, *_), _ in groups)
    return max(n_max, *(math.ceil(s - 1e-9) for s in shares)), 2 * sum(shares) + n_max


@pytest.mark.parametrize(
    ("seed", "multi", "gpus"), [(1, False, 0), (2, True, 0), (3, False, 4), (4, True, 4)]
)
def test_bounded_packing_against_exact_on_all_distinct_sizes(seed: int, multi: bool, gpus: int) -> None:
    # 700 job kinds of all-different sizes (CPUs 1–64 × memory) on 64-CPU / 256000-MiB nodes, in a random
    # order (as Slurm's scheduling order may be): onto new nodes the bounded path (best fit) needs within
    # 3 % of what exact first fit needs (measured −0.7 to +0.4 % here, ±1.5 % over 80 such mixes; best
    # fit may need fewer), and both lie between the lower bound and the proven 2·S + n_max.
    rng = random.Random(seed)
    cap = (64, 256_000 * MIB, gpus)
    groups = _random_pieces(rng, 700, cap, multi)
    exact, _ = pack(groups, Bins(), cap, open_new=True, exact=True)
    bounded, _ = pack(groups, Bins(), cap, open_new=True, exact=False)
    low, high = _bounds(groups, cap)
    assert low <= exact < high and low <= bounded < high
    assert abs(bounded / exact - 1) <= 0.03
    # into the free room of 1500 busy nodes (no new nodes): both place only where a job fits, best fit
    # within 10 % of the jobs first fit places (measured −3.9 to −0.6 % here, −7.4 to +0.9 % over 80
    # mixes: fewer jobs in the room, more new nodes — never fewer than the jobs need)
    rooms = [
        [rng.randint(1, 64), rng.randint(0, 256_000) * MIB, rng.randint(0, gpus), 1] for _ in range(1500)
    ]
    total = sum(k for _, k in groups)
    _, left_exact = pack(groups, Bins([r[:] for r in rooms]), cap, open_new=False, exact=True)
    _, left_bounded = pack(groups, Bins([r[:] for r in rooms]), cap, open_new=False, exact=False)
    placed_exact, placed_bounded = total - sum(left_exact), total - sum(left_bounded)
    assert placed_exact > 0 and abs(placed_bounded / placed_exact - 1) <= 0.10


def test_exact_budget() -> None:
    # distinct pieces × (runs of bins + distinct pieces) ≤ EXACT_WORK: exact first fit
    assert is_exact(1000, 0) and not is_exact(1100, 0)
    assert is_exact(200, 5000 - 200) and not is_exact(400, 5000)
    assert EXACT_WORK == 1 << 20


def test_many_distinct_sizes_take_the_bounded_path() -> None:
    # 1100 Resources jobs of all-different memory (1 CPU; 100 + i MiB): too many distinct sizes for
    # exact first fit → best fit; 8 per node by CPUs, memory fits → ⌈1100/8⌉ = 138 nodes, either way.
    jobs = [pend(i, cpus=1, memory_per_node_bytes=(100 + i) * MIB) for i in range(1100)]
    d = one(jobs)
    assert d.needed == 138
    assert d.packing is not None and (d.packing.exact, d.packing.runs, d.packing.jobs) == (False, 1100, 1100)
    # the same jobs fresh (reason None) beside a busy node with 4 free CPUs: best fit into that room
    # too — 4 jobs fit (1 CPU each, memory to spare), ⌈1096/8⌉ = 137 new nodes, desired 1 + 137
    fresh = [pend(i, "None", cpus=1, memory_per_node_bytes=(100 + i) * MIB) for i in range(1100)]
    d = one(fresh, [node("n1", state="MIXED", alloc_cpus=4)])
    assert (d.busy, d.needed, d.desired) == (1, 137, 138)
    assert d.packing is not None
    assert (d.packing.in_free_room, d.packing.free_room_exact, d.packing.free_room_runs) == (4, False, 1100)


# ------------------------------------------------------------------ free room, arrays, job listing


def test_fresh_array_tasks_and_multi_node_jobs_use_free_room_first() -> None:
    # n1, n2: 4 of 8 CPUs free each. A fresh (reason None) array of 5 tasks × 2 CPUs: 2 tasks fit
    # each node's room, 1 task needs a new node → needed 1, desired 2 + 1 = 3. The same array
    # already evaluated (Priority) did not fit there: 10 CPUs on new 8-CPU nodes → 2, desired 4.
    nodes = [node(f"n{i}", state="MIXED", alloc_cpus=4) for i in (1, 2)]
    array = {"array_job_id": 7, "array_task_string": "1-5", "array_pending_tasks": 5, "cpus": 2}
    d = one([pend(7, "None", **array)], nodes)
    assert (d.busy, d.eligible, d.needed, d.desired) == (2, 5, 1, 3)
    assert d.packing is not None and (d.packing.in_free_room, d.packing.free_room_exact) == (4, True)
    assert one([pend(7, "Priority", **array)], nodes).desired == 4
    # a fresh -N2 job with 3 CPUs per node fits the two rooms (distinct nodes): nothing new
    assert one([pend(8, "None", min_nodes=2, cpus=6)], nodes).needed == 0
    # -N3 does not: two rooms only, so the job needs 3 new nodes (none of its pieces stay)
    assert one([pend(8, "None", min_nodes=3, cpus=9)], nodes).needed == 3


def test_throttle_allowance_goes_to_array_records_in_order() -> None:
    # Array 50 %2, nothing running: allowance 2. Its pending records, in this order: task 1 (5 CPUs),
    # task 2 (3 CPUs), task 3 (5 CPUs). Tasks 1 and 2 count: 5 + 3 = 8 CPUs → 1 node (tasks 1 and 3
    # would need 2); task 3 goes to JobArrayTaskLimit.
    recs = [
        pend(50 + t, array_job_id=50, array_task_id=t, array_max_tasks=2, cpus=c)
        for t, c in ((1, 5), (2, 3), (3, 5))
    ]
    d = one(recs)
    assert (d.eligible, d.needed, d.ignored) == (2, 1, {"JobArrayTaskLimit": 1})


def test_too_large_jobs_are_listed_grouped_by_all_their_fields() -> None:
    # Too large: jobs 1 and 3 (--mem 20000 MiB), job 2 (9 CPUs per task), array tasks 9_1 and 9_2
    # (identical but for the task id) with 4 between them: grouped by all fields, groups in order
    # of first appearance — 1, 3, 2, 9_1, 4, 9_2.
    big = {"memory_per_node_bytes": 20000 * MIB}
    jobs = [
        pend(1, **big),
        pend(2, cpus=9, cpus_per_task=9),
        pend(3, **big),
        pend(91, array_job_id=9, array_task_id=1, cpus=20, max_nodes=1),
        pend(4, cpus=40, max_nodes=1),
        pend(92, array_job_id=9, array_task_id=2, cpus=20, max_nodes=1),
    ]
    d = one(jobs)
    assert [t.job for t in d.too_large] == ["1", "3", "2", "9_1", "4", "9_2"]
    assert d.needed == 0 and d.eligible == 0


@pytest.mark.parametrize(
    "expr",
    ["n1", " n1 ", "n[1-3]", "n[01-03]", "n[0-0]", "n[3-1]", "c[1-3,5]", "r[1-2]n[1-2]", "x[01-02]y",
     "(null)", "None", "N/A", "", "a,b", "n[1-", "n[1-2000001]"],
)  # fmt: skip
def test_node_lists_read_like_hostlist_expand(expr: str) -> None:
    try:
        expected = tuple(hostlist_expand(expr))
    except ValueError:
        expected = ()
    assert hosts(expr) == expected


def test_request_fields_in_the_order_size_unpacks_them() -> None:
    # sizing.size unpacks a Request positionally (its attribute reads cost): a reordered field must fail here
    assert Request._fields == (
        "min_nodes", "max_nodes", "cpus", "tasks", "cpus_per_task", "memory_per_node_bytes",
        "memory_per_cpu_bytes", "whole_node_memory", "memory_bytes", "gpus_per_node", "gpus", "exclusive",
        "spread", "tasks_exact", "cpus_exact", "node_range", "node_request",
    )  # fmt: skip


def test_key_layout() -> None:
    # The counting key's tail is the job's sizing request, field by field (Request names Job fields),
    # and its head what the model reads besides: an array record its array id (an array's records are
    # grouped apart: they are taken up at that id), a throttled array every array field.
    job = pend(
        5, "Priority", min_nodes=2, max_nodes=3, cpus=4, tasks=5, cpus_per_task=6, memory_per_node_bytes=7,
        memory_per_cpu_bytes=8, whole_node_memory=True, memory_bytes=9, gpus_per_node=10, gpus=11,
        exclusive=True, features="fa", array_job_id=1, array_task_string="1-3", array_pending_tasks=3,
        node_request=NodeRequest(threads_per_core=1, tasks_per_core=2),
    )  # fmt: skip
    key = key_of(job, NO_BARS)
    partitions, reason, features, tasks, array, who = key[: queue.REQUEST]
    assert request_of(key)._asdict() == {f: getattr(job, f) for f in Request._fields}
    assert (partitions, reason, features, tasks, array, who) == (("p",), "Priority", "fa", 3, 1, None)
    assert key_of(msgspec.structs.replace(job, array_job_id=None), NO_BARS)[4] is None
    throttled = msgspec.structs.replace(job, array_max_tasks=2)
    assert key_of(throttled, NO_BARS)[4] == (1, None, "1-3", 2)


def test_partition_max_mem_per_cpu_gives_jobs_more_cpus() -> None:
    # MaxMemPerCPU=1500 MB (oracle max_mem_per_cpu): --mem-per-cpu=3000 starts on 2 CPUs at 1500 each
    # (the same 3000 MB): five such 1-task jobs go four per 8-CPU node → 2 nodes; without the limit
    # 5 CPUs and 15000 MB fit one node.
    def limited(jobs: list[Job], **limit: int) -> Demand:
        s = Snapshot(
            taken_at=0.0, api_version="v0.0.45", jobs=tuple(jobs), partitions=(Partition(name="p", **limit),)
        )
        return compute_demand(s, [Target(name="t", partition="p", shape=SHAPE)])["t"]

    per_cpu = [pend(i, memory_per_node_bytes=None, memory_per_cpu_bytes=3000 * MIB) for i in range(5)]
    assert (one(per_cpu).needed, limited(per_cpu, max_memory_per_cpu_bytes=1500 * MIB).needed) == (1, 2)
    # -c2 --mem-per-cpu=3000: 4 CPUs per task (lab: NumCPUs=4); two such jobs fill a node
    c2 = [
        pend(i, cpus=2, cpus_per_task=2, memory_per_node_bytes=None, memory_per_cpu_bytes=3000 * MIB)
        for i in (1, 2, 3)
    ]
    assert limited(c2, max_memory_per_cpu_bytes=1500 * MIB).needed == 2
    # --mem=4000 under MaxMemPerCPU=1000 (oracle max_mem_per_cpu_node) takes 4 CPUs: three jobs → 2 nodes
    per_node = [pend(i, memory_per_node_bytes=4000 * MIB) for i in range(3)]
    assert (one(per_node).needed, limited(per_node, max_memory_per_cpu_bytes=1000 * MIB).needed) == (1, 2)
    # --mem=12000 would need 12 CPUs on one node of 8: never fits (sbatch refuses it where nodes exist)
    d = limited([pend(9, memory_per_node_bytes=12000 * MIB)], max_memory_per_cpu_bytes=1000 * MIB)
    assert (d.needed, d.too_large[0].misfit) == (0, Misfit("cpus_for_memory", 12, 8))


def test_partition_max_cpus_per_node_shrinks_the_node() -> None:
    # MaxCPUsPerNode=4 on 8-CPU nodes: six 2-CPU jobs take 3 new nodes, not 2; a busy node with 2 CPUs
    # allocated has room for one more such job, not three
    jobs = [pend(i, cpus=2) for i in range(1, 7)]
    limited = (Partition(name="p", max_cpus_per_node=4),)
    s = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=tuple(jobs), partitions=limited)
    t = Target(name="t", partition="p", shape=SHAPE)
    d = compute_demand(s, [t])["t"]
    assert d.needed == 3
    assert (d.cpus_cap, d.shape) == (4, NodeShape(4, SHAPE.memory_bytes))
    assert compute_demand(snap(jobs), [t])["t"].needed == 2  # without the limit
    fresh = [pend(i, reason="None", cpus=2) for i in range(1, 4)]
    busy = node("n1", state="MIXED", alloc_cpus=2)
    s = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=tuple(fresh), nodes=(busy,), partitions=limited)
    assert compute_demand(s, [t])["t"].needed == 1  # one fits beside the running job, two need a node


def test_a_job_pending_in_two_partitions_counts_once_where_slurm_tries_first() -> None:
    # -p a,b: two NodeSets' partitions; without a rule both would scale up for the same job
    a, b = Target(name="a", partition="a", shape=SHAPE), Target(name="b", partition="b", shape=SHAPE)

    def needed(order: tuple[str, ...], tiers: dict[str, int]) -> tuple[int, int]:
        job = Job(job_id=1, state="PENDING", reason="Resources", partitions=order, cpus=8, priority=1)
        parts = tuple(Partition(name=n, priority_tier=t) for n, t in tiers.items())
        s = Snapshot(taken_at=0.0, api_version="v0.0.45", jobs=(job,), partitions=parts)
        got = compute_demand(s, [a, b])
        assert compute_demand(s, [b])["b"].needed == got["b"].needed  # whatever is asked together
        return got["a"].needed, got["b"].needed

    assert needed(("a", "b"), {"a": 1, "b": 1}) == (1, 0)  # equal tiers: the job's own order
    assert needed(("b", "a"), {"a": 1, "b": 1}) == (0, 1)
    assert needed(("a", "b"), {"a": 1, "b": 5}) == (0, 1)  # a higher PriorityTier is tried first
    assert needed(("a",), {"a": 1, "b": 5}) == (1, 0)


def test_spread_job_takes_a_node_per_task_up_to_the_maxima() -> None:
    spread = pend(1, cpus=4, tasks=4, spread=True)
    assert one([spread]).needed == 4  # 1 CPU on each of 4 nodes, not 4 CPUs on one
    assert one([spread], max_nodes=3).needed == 3
    assert one([pend(1, cpus=4, tasks=4, spread=True, max_nodes=2)]).needed == 2
    assert one([pend(1, cpus=4, tasks=4)]).needed == 1
    # the spread job's nodes keep room: a 6-CPU job fits beside one of its 1-CPU pieces
    assert one([spread, pend(2, cpus=6)]).needed == 4


def test_a_job_on_named_nodes_is_not_helped_by_new_ones() -> None:
    # --nodelist=n1 on a busy node: it waits for n1 (Resources); a scale-up would idle
    busy = node("n1", state="ALLOCATED", alloc_cpus=8)
    named = pend(1, cpus=2, required_nodes="n1")
    d = one([named], [busy])
    assert (d.needed, d.ignored) == (0, {"RequiredNodes": 1})
    # -N3 with two named nodes: the third may be any node. Named nodes that are free: the job counts
    # (sized whole: idle named nodes are among the desired, as every idle node is)
    idle = [node("n1"), node("n2")]
    wider = pend(2, cpus=3, tasks=3, min_nodes=3, required_nodes="n[1-2]")
    assert one([wider], idle).needed == 3
    # one of them busy without the CPU it asks of each node, or not in the snapshot: it waits for it
    assert one([wider], [busy, node("n2")]).ignored == {"RequiredNodes": 1}
    assert one([wider], [node("n1")]).ignored == {"RequiredNodes": 1}
    mixed = node("n1", state="MIXED", alloc_cpus=7)
    assert one([wider], [mixed, node("n2")]).eligible == 1  # 1 CPU free: enough for its 1 per node
    assert one([msgspec.structs.replace(wider, cpus=6)], [mixed, node("n2")]).eligible == 0  # 2 per node
    # --exclude changes nothing for new nodes
    assert one([pend(3, cpus=2, excluded_nodes="n1")], [busy]).needed == 1


def test_a_fresh_job_excluding_a_busy_node_is_not_put_in_busy_rooms() -> None:
    # n1 has 6 CPUs free: a fresh 2-CPU job goes there; excluding n1 it needs a node (which busy node's
    # room it may use is not modelled: any busy node excluded keeps it out of all rooms)
    room = [node("n1", state="MIXED", alloc_cpus=2), node("n2")]
    running = Job(job_id=9, state="RUNNING", partitions=("p",), cpus=2, nodes="n1")
    fresh = pend(1, reason="None", cpus=2)
    assert one([running, fresh], room).needed == 0
    assert one([running, msgspec.structs.replace(fresh, excluded_nodes="n1")], room).needed == 1
    assert one([running, msgspec.structs.replace(fresh, excluded_nodes="n2")], room).needed == 0  # idle n2
    assert one([running, msgspec.structs.replace(fresh, excluded_nodes="n[")], room).needed == 1
    # busy by its state alone (jobs and nodes fetched apart: MIXED, no CPUs allocated yet) — a busy room
    # for the model, so excluding it keeps the job out as well (one rule: nodes.looks_busy)
    skewed = [node("n1", state="MIXED", alloc_cpus=0), node("n2")]
    assert one([fresh], skewed).needed == 0
    assert one([msgspec.structs.replace(fresh, excluded_nodes="n1")], skewed).needed == 1


def test_gpu_requests_size_the_nodes() -> None:
    gpu = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=4)
    # --gpus-per-task=1 -n6 (the adapter turns it into 6 GPUs): two 4-GPU nodes
    assert (
        one(
            [pend(1, cpus=6, tasks=6, gpus=6, memory_per_node_bytes=None, memory_bytes=600 * MIB)], shape=gpu
        ).needed
        == 2
    )
    # --gpus=4 --mem-per-gpu=6000: 24000 MB in all, more than one node holds
    per_gpu = pend(2, cpus=1, gpus=4, memory_per_node_bytes=None, memory_bytes=24000 * MIB)
    assert one([per_gpu], shape=gpu).needed == 2
    # --gpus-per-node=2: two such jobs share a node; a third opens another
    assert one([pend(i, cpus=1, gpus_per_node=2, gpus=2) for i in (3, 4, 5)], shape=gpu).needed == 2
    # --cpus-per-gpu=3 --gpus=2: slurmctld writes 6 CPUs into the record; two fit no 8-CPU node together
    assert one([pend(i, cpus=6, gpus=2) for i in (6, 7)], shape=gpu).needed == 2
    assert one([pend(8, gpus=2)], shape=SHAPE).too_large  # GPUs asked of GPU-less nodes


def test_a_constraint_counts_only_where_a_node_has_its_features() -> None:
    nodes = [
        node("n1", state="ALLOCATED", alloc_cpus=8, features=("dyn", "fast")),
        node("n2", state="ALLOCATED", alloc_cpus=8, features=("dyn", "big")),
    ]

    def needed(constraint: str, with_nodes: bool = True) -> int:
        return one(
            [pend(1, cpus=8, features=constraint)], nodes if with_nodes else None, nodeset_feature="dyn"
        ).needed

    assert needed("dyn&fast") == 1 and needed("dyn&big") == 1
    assert needed("dyn&fast&big") == 0  # no one node has all three: a new one (same template) would not
    assert needed("dyn&gpu") == 0
    assert needed("fast|gpu") == 0  # does not name the NodeSet's feature
    assert needed("dyn|gpu") == 1
    assert needed("[dyn*2&fast]") == 1  # brackets and counts are not judged by the nodes
    assert needed("dyn&gpu", with_nodes=False) == 1  # at zero only the NodeSet's feature is known


def test_a_constraint_at_zero_is_judged_by_the_configured_features() -> None:
    # featuresPerNode=fast,ib: a new dyn node will have dyn, fast, ib
    def needed(constraint: str, **target: Any) -> int:
        return one([pend(1, cpus=8, features=constraint)], nodeset_feature="dyn", **target).needed

    new = frozenset({"fast", "ib"})
    assert (needed("dyn&fast&ib", features=new), needed("dyn&gpu", features=new)) == (1, 0)
    assert (needed("dyn|gpu", features=new), needed("dyn&[fast|gpu]", features=new)) == (1, 1)
    d = one([pend(1, features="dyn&gpu")], nodeset_feature="dyn", features=new)
    assert (d.skipped, d.eligible, d.desired) == (1, 0, 0)
    # a partition target (no NodeSet feature) at zero with features: only jobs they satisfy count
    assert one([pend(1, cpus=8, features="gpu")], features=frozenset({"fast"})).needed == 0
    assert one([pend(1, cpus=8, features="fast")], features=frozenset({"fast"})).needed == 1


def test_every_misfit_is_worded() -> None:
    # each kind the sizing can return reads as a sentence (the old reason text), memory in MiB
    for kind in get_args(MisfitKind):
        assert misfit_text(Misfit(kind, 2 * MIB, MIB), SHAPE)
    assert misfit_text(Misfit("target_max_nodes", 5, 4), SHAPE) == "needs 5 nodes, target max is 4"
    assert (
        misfit_text(Misfit("memory_per_node", 9000 * MIB, 8000 * MIB), SHAPE)
        == "--mem 9000 MiB per node > 8000 MiB"
    )
    assert misfit_text(Misfit("job_max_nodes", 3, 2), SHAPE) == (
        "needs 3 nodes of 8 CPUs, 16000 MiB, 0 GPUs, the job allows at most 2"
    )


# -------------------------------------------------------------------------------- heterogeneous jobs


def het(het_id: int, *components: dict[str, Any], start: int = 0, **kw: Any) -> list[Job]:
    """The records of one heterogeneous job (ids from ``het_id``), each component's fields given."""
    return [
        pend(het_id + i, het_job_id=het_id, het_job_offset=i, **(kw | c))
        for i, c in enumerate(components, start)
    ]


def test_a_heterogeneous_jobs_components_take_distinct_nodes() -> None:
    # lab (26.05.5, the hetjob oracle mix): two `-n2 : -n2` jobs take p1 and p2, both components of one
    # job on different nodes, the two jobs sharing them; counted apart the four 2-CPU records fit one node
    pair = {"cpus": 2, "tasks": 2}
    d = one([*het(10, pair, pair), *het(20, pair, pair)])
    assert (d.needed, d.eligible) == (2, 2)
    # components that ask differently: each node is counted as full as the largest component's
    # (6 + 1 CPUs on two nodes counted as 6 + 6: a 3-CPU job then opens a third node; Slurm may use 2)
    uneven = one([*het(10, {"cpus": 6, "tasks": 6}, {"cpus": 1}), pend(30, cpus=3)])
    assert uneven.needed == 3
    # a component in another partition, or one that started: the records count as they are
    split = one([*het(10, pair), *het(10, pair, start=1, partition="q")])
    assert split.needed == 1
    started = [*het(10, pair), Job(job_id=11, state="RUNNING", partitions=("p",), cpus=2, het_job_id=10)]
    assert one(started).needed == 1


def test_merged_heterogeneous_job_memory_gpus_and_exclusivity() -> None:
    from autoscaler.demand.hetjobs import merge_hetjobs

    parts = het(
        10,
        {"min_nodes": 2, "cpus": 4, "memory_per_node_bytes": 3000 * MIB},
        {"cpus": 1, "memory_per_node_bytes": None, "memory_per_cpu_bytes": 5000 * MIB, "gpus": 1},
        {"cpus": 2, "exclusive": True},
    )
    plain = pend(99)
    (merged, kept) = merge_hetjobs([*parts, plain])
    assert kept is plain and merged.job_id == 10
    assert (merged.min_nodes, merged.cpus, merged.tasks) == (4, 4 * 2, 4)  # 2 + 1 + 1 nodes, 2 CPUs each
    assert merged.memory_per_node_bytes == 5000 * MIB and merged.gpus_per_node == 1
    assert merged.exclusive and not merged.spread
    jobs = (pend(1), pend(2))
    assert merge_hetjobs(jobs) is jobs  # nothing heterogeneous: the same tuple, no copy


# ------------------------------------------------------------------------ --exclusive=user

EXCLUSIVE_TO_USER = NodeRequest(exclusive_to="user")


def test_exclusive_user_jobs_share_nodes_with_their_own_user_only() -> None:
    # oracle exclusive_users (Slurm 3): two users' exclusive=user jobs and root's plain ones, 2 CPUs each;
    # shared, 12 CPUs fit 2 nodes: a node per user
    jobs = []
    for i, (user, to) in enumerate([("ann", "user"), ("bob", "user"), ("root", "")] * 2):
        jobs.append(
            pend(
                i + 1,
                cpus=2,
                user=user,
                node_request=NodeRequest(exclusive_to=to) if to else None,
                priority=100 - i,
            )
        )
    assert one(jobs).needed == 3
    # oracle exclusive_user (Slurm 1): one user's exclusive jobs and its own plain job share a node
    same = [
        pend(
            i + 1,
            cpus=2,
            user="root",
            node_request=EXCLUSIVE_TO_USER if i < 3 else None,
        )
        for i in range(4)
    ]
    assert one(same).needed == 1
    # oracle exclusive_user_beside_plain (Slurm 2): ann's plain job goes beside root's plain one, not into a
    # node of its own beside her exclusive job (no room there)
    mixed = [
        pend(1, cpus=6, user="ann", node_request=EXCLUSIVE_TO_USER, priority=3),
        pend(2, cpus=4, user="root", priority=2),
        pend(3, cpus=4, user="ann", priority=1),
    ]
    assert one(mixed).needed == 2
    # an exclusive job never goes beside another user's plain job: ann's -c2 after root's -c2 opens a node
    two = [
        pend(1, cpus=2, user="root", priority=2),
        pend(2, cpus=2, user="ann", node_request=EXCLUSIVE_TO_USER, priority=1),
    ]
    assert one(two).needed == 2
    assert one([msgspec.structs.replace(j, node_request=None) for j in two]).needed == 1


def test_exclusive_user_multi_node_jobs_and_many_jobs() -> None:
    # a 2-node job of ann (exclusive to her) takes 2 nodes; bob's 2-node job 2 more; root's 2 one-CPU jobs
    # a fifth (they may not join either user's nodes)
    jobs = [
        pend(1, cpus=2, min_nodes=2, user="ann", node_request=EXCLUSIVE_TO_USER, priority=9),
        pend(2, cpus=2, min_nodes=2, user="bob", node_request=EXCLUSIVE_TO_USER, priority=8),
        pend(3, cpus=1, user="root", priority=7),
        pend(4, cpus=1, user="root", priority=6),
        pend(5, cpus=1, user="ann", priority=5),  # ann's plain job: beside her own exclusive job
    ]
    assert one(jobs).needed == 5
    # beyond OWNED_JOBS jobs: each such user's jobs on nodes of their own (never fewer than job by job)
    many = [
        pend(i, cpus=1, user=f"u{i % 3}", node_request=EXCLUSIVE_TO_USER, priority=10_000 - i)
        for i in range(600)
    ]
    d = one(many)
    assert d.needed == 3 * math.ceil(200 / 8)
    assert d.packing is not None and d.packing.jobs == 600


def test_exclusive_user_jobs_keep_out_of_busy_nodes_room() -> None:
    busy = [node("b1", state="MIXED", alloc_cpus=2, alloc_memory_bytes=1000 * MIB)]
    running = Job(job_id=50, state="RUNNING", partitions=("p",), cpus=2, nodes="b1", user="root")
    fresh = pend(1, reason="None", cpus=2, user="ann", node_request=EXCLUSIVE_TO_USER)
    assert one([running, fresh], busy).needed == 1  # whose jobs hold b1 is not read: a node of her own
    plain = pend(2, reason="None", cpus=2, user="bob")
    assert one([running, plain], busy).needed == 0  # a plain job fills the room
    # the room of a node held by another user's exclusive=user job is not for a plain job
    owned = msgspec.structs.replace(running, node_request=EXCLUSIVE_TO_USER)
    assert one([owned, plain], busy).needed == 1


# ------------------------------------------------------------------------------ SMT (threads per core)

SMT = NodeShape(cpus=8, memory_bytes=16000 * MIB, threads_per_core=2)
"""The lab's SMT cloud nodes (oracle ``smt``): 1 socket × 4 cores × 2 threads, CR_Core_Memory."""


@pytest.mark.parametrize(
    ("job", "cpus"),
    [
        # what slurmctld allocated each (lab: 26.05.5, NumCPUs of the started job)
        ({"cpus": 1}, 2),
        ({"cpus": 2, "tasks": 2}, 2),
        ({"cpus": 3, "cpus_per_task": 3}, 4),
        ({"cpus": 6, "tasks": 2, "cpus_per_task": 3}, 6),
        ({"cpus": 3, "tasks": 3}, 4),
        ({"cpus": 5, "tasks": 5}, 6),
        ({"cpus": 2, "tasks": 2, "node_request": NodeRequest(threads_per_core=1)}, 4),  # nomultithread
        ({"cpus": 2, "cpus_per_task": 2, "node_request": NodeRequest(threads_per_core=1)}, 4),
        ({"cpus": 3, "tasks": 3, "node_request": NodeRequest(tasks_per_core=1)}, 6),
    ],
)
def test_smt_nodes_allocate_whole_cores(job: dict[str, Any], cpus: int) -> None:
    req = request_of(key_of(pend(1, **job), NO_BARS))
    piece = size(req, SMT, None)
    assert not isinstance(piece, Misfit)
    assert piece[0] * piece[1] == cpus
    assert size(req, SHAPE, None) != piece or cpus == req.cpus  # without SMT: the CPUs asked


def test_smt_tasks_of_whole_cores_span_nodes() -> None:
    # -n3 -c2 --threads-per-core=1: 4 CPUs (2 cores) per task, two tasks a node → 2 nodes (lab: 12 CPUs)
    req = request_of(
        key_of(
            pend(1, cpus=6, tasks=3, cpus_per_task=2, node_request=NodeRequest(threads_per_core=1)), NO_BARS
        )
    )
    assert size(req, SMT, None)[0] == 2
    # -N2 -n3: 2 tasks on one node (one core), 1 on the other (one core): 2 CPUs each
    req = request_of(key_of(pend(1, cpus=3, tasks=3, min_nodes=2), NO_BARS))
    assert size(req, SMT, None) == (2, 2, 100 * MIB, 0)


def test_smt_queue_needs_what_slurm_resumed_and_cr_cpu_shares_cores() -> None:
    # oracle smt (Slurm 3): -n1, -n2, -c3 fill one node (2 + 2 + 4), the two nomultithread -n2 a second
    # (4 + 4), -n3 --ntasks-per-core=1 a third (6); counted in threads: 13 CPUs, 2 nodes
    jobs = [
        pend(1, cpus=1, priority=6),
        pend(2, cpus=2, tasks=2, priority=5),
        pend(3, cpus=3, cpus_per_task=3, priority=4),
        pend(4, cpus=2, tasks=2, node_request=NodeRequest(threads_per_core=1), priority=3),
        pend(5, cpus=2, tasks=2, node_request=NodeRequest(threads_per_core=1), priority=2),
        pend(6, cpus=3, tasks=3, node_request=NodeRequest(tasks_per_core=1), priority=1),
    ]
    assert one(jobs, shape=SMT).needed == 3
    assert one(jobs).needed == 2
    # nodes in the snapshot report their threads per core: the shape carries it
    smt_nodes = [
        node(f"s{i}", state="IDLE", threads_per_core=2, cores_per_socket=4, sockets=1) for i in (1, 2)
    ]
    d = one(jobs, smt_nodes, shape=None)
    assert d.shape is not None and d.shape.threads_per_core == 2 and d.desired == 3
    # SelectTypeParameters=CR_CPU: threads are allocated one by one
    cr_cpu = msgspec.structs.replace(
        snap(jobs), config=SlurmConfig(select_type_parameters=("CR_CPU_MEMORY",))
    )
    t = Target(name="t", partition="p", shape=SMT)
    assert compute_demand(cr_cpu, [t])["t"].needed == 2


def test_a_socket_or_core_count_the_nodes_lack_never_fits() -> None:
    # oracle sockets (Slurm 1): the lab's nodes are 8 sockets of one core; --cores-per-socket=4 and =2 pend
    # with BadConstraints, -n6 --sockets-per-node=2 runs; the shape knows its layout from the nodes or the
    # trigger keys (socketsPerNode, coresPerSocket)
    layout = NodeShape(cpus=8, memory_bytes=16000 * MIB, sockets=8, cores_per_socket=1)
    jobs = [
        pend(
            1, cpus=4, tasks=4, node_request=NodeRequest(sockets_per_node=1, cores_per_socket=4), priority=3
        ),
        pend(2, cpus=6, tasks=6, node_request=NodeRequest(sockets_per_node=2), priority=2),
        pend(3, cpus=2, tasks=2, node_request=NodeRequest(cores_per_socket=2), priority=1),
    ]
    d = one(jobs, shape=layout)
    assert d.needed == 1
    assert [(t.job, t.misfit.kind) for t in d.too_large] == [
        ("1", "cores_per_socket"),
        ("3", "cores_per_socket"),
    ]
    assert one(jobs).needed == 2  # a layout the shape does not know is not judged
    wide = [pend(1, cpus=2, node_request=NodeRequest(sockets_per_node=9))]
    assert one(wide, shape=layout).too_large[0].misfit.kind == "sockets_per_node"
    assert one([pend(1, node_request=NodeRequest(threads_per_core=2))], shape=layout).too_large[0].misfit == (
        "threads_per_core",
        2,
        1,
    )
    # nodes report their layout: the shape carries it
    nodes = [node(f"n{i}", sockets=8, cores_per_socket=1) for i in (1, 2)]
    assert one(jobs, nodes, shape=None).shape == layout


def test_gpus_per_socket_for_each_socket_the_cpus_span() -> None:
    # oracle gpus_per_socket (Slurm 2): on nodes of 8 one-core sockets and 4 GPUs, -n1 with 1 GPU per
    # socket takes 1 GPU, -n2 with 2 per socket takes 4 (2 sockets): 5 GPUs, two nodes
    layout = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=4, sockets=8, cores_per_socket=1)
    jobs = [
        pend(1, cpus=1, gpus=1, node_request=NodeRequest(sockets_per_node=1, gpus_per_socket=1), priority=2),
        pend(2, cpus=2, tasks=2, gpus=2, node_request=NodeRequest(sockets_per_node=1, gpus_per_socket=2)),
    ]
    assert one(jobs, shape=layout).needed == 2
    # more GPUs than a node has: never fits
    wide = [pend(1, cpus=4, tasks=4, gpus=2, node_request=NodeRequest(gpus_per_socket=2))]
    assert one(wide, shape=layout).too_large[0].misfit == ("gpus_per_node", 8, 4)
    # sockets of 4 cores: -n2 stays on one socket (2 GPUs)
    quad = NodeShape(cpus=8, memory_bytes=16000 * MIB, gpus=4, sockets=2, cores_per_socket=4)
    assert one(jobs, shape=quad).needed == 1


def test_the_model_frees_what_it_built_before_the_collector_runs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The queue (a kind per distinct key: 3,000 here) is freed while the collector is still off, so the
    first collection after the model walks only what the call returns, not every object it built."""
    import gc
    import types

    from autoscaler.demand import compute

    young: list[int] = []

    def enable() -> None:  # what the collector finds when it comes back on
        young.append(len(gc.get_objects(generation=0)))
        gc.enable()

    monkeypatch.setattr(
        compute, "gc", types.SimpleNamespace(isenabled=gc.isenabled, disable=gc.disable, enable=enable)
    )
    jobs = [pend(i, cpus=1 + i % 8, memory_per_node_bytes=(100 + i) * MIB) for i in range(3000)]
    snapshot = snap(jobs)
    target = Target(name="t", partition="p", shape=SHAPE)
    compute_demand(snapshot, [target])  # what a first call imports lazily (numpy's) is not the model's
    young.clear()
    gc.collect()
    assert compute_demand(snapshot, [target])["t"].eligible == 3000
    assert len(young) == 1 and young[0] < 1000, young  # before: the queue's kinds, keys, lists (~12,000)


def test_the_cyclic_collector_is_paused_only_while_the_model_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from autoscaler.demand import compute

    seen: list[bool] = []
    demand_for = compute._demand_for

    def spy(target: Target, queue: Any) -> Demand:
        seen.append(gc.isenabled())
        return demand_for(target, queue)

    monkeypatch.setattr(compute, "_demand_for", spy)
    assert gc.isenabled()
    assert one([pend(1)]).needed == 1
    assert seen == [False] and gc.isenabled()  # off inside, back on after
    gc.disable()
    try:
        one([pend(1)])
        assert not gc.isenabled()  # left off: someone else turned it off
    finally:
        gc.enable()
