"""Per-job QOS and association limits judged for fresh jobs (autoscaler.limits): only where slurmctld
enforces them; Slurm's reason names (as the lab's cloud partition showed them: the
``qos_assoc_per_job_limits`` oracle mix)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoscaler.demand import Demand, NodeShape, Target, compute_demand
from autoscaler.demand.queue import ORDER_JOBS
from autoscaler.eligibility import Bars, settled_reason
from autoscaler.limits import JobLimits
from exporter.model import MIB, Association, Job, Partition, QosLimits, SlurmConfig, Snapshot

ENFORCED = SlurmConfig(accounting_storage_enforce=("associations", "limits"))
QOS = (QosLimits(name="normal", max_tres_per_job={"cpu": 4}, max_wall_seconds=3600),)
ASSOCIATIONS = (
    Association(account="root", max_tres_per_job={"node": 1}),
    Association(account="physics", parent="root", max_wall_seconds=1800),
    Association(account="physics", user="ann"),
    Association(account="physics", user="ann", partition="dyn", max_tres_per_job={"cpu": 2}),
)


DYN_AND_CPU = (Partition(name="dyn"), Partition(name="cpu"))


def limited(
    jobs: Sequence[Job] = (),
    *,
    qos: tuple[QosLimits, ...],
    associations: tuple[Association, ...] = (),
    partitions: tuple[Partition, ...] = DYN_AND_CPU,
    config: SlurmConfig | None = ENFORCED,
) -> Snapshot:
    """A snapshot of these jobs, partitions and limits (enforced unless ``config`` says otherwise)."""
    return Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        jobs=tuple(jobs),
        partitions=partitions,
        qos=qos,
        associations=associations,
        config=config,
    )


def snapshot(config: SlurmConfig | None = ENFORCED) -> Snapshot:
    return limited(qos=QOS, associations=ASSOCIATIONS, config=config)


def fresh(**kw: Any) -> Job:
    base: dict[str, Any] = {
        "state": "PENDING",
        "reason": "PartitionConfig",
        "partitions": ("cpu",),
        "account": "physics",
        "user": "ann",
        "qos": "normal",
        "priority": 1,
        "cpus": 1,
        "tres_requested": {"cpu": 1, "node": 1},
    }
    return Job(**({"job_id": 1} | base | kw))


def test_the_reasons_slurm_gives() -> None:
    bars = Bars.of(snapshot())
    assert settled_reason(fresh(), bars) == "PartitionConfig"  # within every limit
    assert settled_reason(fresh(cpus=6), bars) == "QOSMaxCpuPerJobLimit"
    assert settled_reason(fresh(tasks=3, cpus_per_task=2), bars) == "QOSMaxCpuPerJobLimit"  # 6 CPUs
    # MaxNodes=1 on the root account reaches ann's association through physics
    assert settled_reason(fresh(tres_requested={"node": 2}, min_nodes=2), bars) == "AssocMaxNodePerJobLimit"
    # Slurm's estimate of nodes is not the request: -n16 (node_count 2, TRES node 1) is within MaxNodes=1
    assert settled_reason(fresh(min_nodes=2), bars) == "PartitionConfig"
    assert settled_reason(fresh(time_limit_seconds=5400), bars) == "QOSMaxWallDurationPerJobLimit"
    assert settled_reason(fresh(time_limit_seconds=2700), bars) == "AssocMaxWallDurationPerJobLimit"
    assert settled_reason(fresh(time_limit_seconds=None), bars) == "PartitionConfig"  # gets MaxWall
    # the per-partition association of ann in dyn: its own cpu limit
    assert settled_reason(fresh(partitions=("dyn",), cpus=3), bars) == "AssocMaxCpuPerJobLimit"
    # a reason Slurm gave already is kept (its first pass happened)
    assert settled_reason(fresh(reason="Priority", cpus=6), bars) == "Priority"


def test_nothing_is_judged_where_slurmctld_does_not_enforce_limits_or_says_nothing() -> None:
    for config in (None, SlurmConfig(), SlurmConfig(accounting_storage_enforce=("associations",))):
        assert JobLimits.of(snapshot(config)) is None
        assert settled_reason(fresh(cpus=64), Bars.of(snapshot(config))) == "PartitionConfig"


def test_unknown_qos_and_account_are_not_judged() -> None:
    bars = Bars.of(snapshot())
    assert settled_reason(fresh(qos="other", account="nobody", cpus=64), bars) == "PartitionConfig"


# ------------------------------------------------------------------ budgets: limits on what runs

RUNNING_QOS = (
    QosLimits(name="normal"),
    QosLimits(name="capped", max_jobs_per_user=2, grp_tres={"cpu": 12}),
    QosLimits(name="acct", max_jobs_per_account=3, max_tres_per_user={"node": 2}),
)
RUNNING_ASSOCIATIONS = (
    Association(account="root"),
    Association(account="physics", parent="root", grp_jobs=5, max_jobs=2),
    Association(account="physics", user="ann"),
    Association(account="physics", user="bob", max_jobs=4),
    Association(account="physics", user="ann", partition="dyn", grp_tres={"cpu": 6}),
)
SHAPE = NodeShape(8, 16_000 * MIB)
TARGET = Target("cpu", "cpu", shape=SHAPE)


def running(job_id: int, **kw: Any) -> Job:
    return fresh(**({"job_id": job_id, "state": "RUNNING", "reason": "None", "nodes": "x1"} | kw))


def demand(jobs: list[Job], config: SlurmConfig | None = ENFORCED, target: Target = TARGET) -> Demand:
    snap = limited(jobs, qos=RUNNING_QOS, associations=RUNNING_ASSOCIATIONS, config=config)
    return compute_demand(snap, [target])[target.name]


def test_budgets_in_slurmctld_order_with_its_reason_names() -> None:
    limits = JobLimits.of(limited(qos=RUNNING_QOS, associations=RUNNING_ASSOCIATIONS))
    assert limits is not None and limits.running
    # job counts first (QOS, then the association's GrpJobs up the tree, then its MaxJobs), then TRES
    assert [(b[0], b[1], b[3]) for b in limits.budgets("capped", "physics", "ann", "cpu")] == [
        (("qos-user", "capped", "ann", "jobs"), 2, "QOSMaxJobsPerUserLimit"),
        (("assoc", "physics", "ann", "", "own-jobs"), 2, "AssocMaxJobsLimit"),  # physics' MaxJobs, inherited
        (("assoc", "physics", "", "", "jobs"), 5, "AssocGrpJobsLimit"),
        (("qos", "capped", "cpu"), 12, "QOSGrpCpuLimit"),
    ]
    # bob's own MaxJobs; ann's association in dyn has a GrpTRES of its own
    assert ("assoc", "physics", "bob", "", "own-jobs") in {
        b[0] for b in limits.budgets("normal", "physics", "bob", "cpu")
    }
    dyn = limits.budgets("acct", "physics", "ann", "dyn")
    assert [b[3] for b in dyn] == [
        "MaxJobsPerAccount",  # slurmctld names the per-account limits without "QOS"
        "AssocMaxJobsLimit",
        "AssocGrpJobsLimit",
        "QOSMaxNodePerUserLimit",
        "AssocGrpCpuLimit",
    ]
    assert limits.budgets("normal", "nobody", "eve", "cpu") == ()  # no QOS limit, no association


def test_usage_counts_running_and_suspended_jobs_only() -> None:
    limits = JobLimits.of(limited(qos=RUNNING_QOS, partitions=()))
    assert limits is not None
    jobs = [
        running(1, qos="capped", cpus=4),
        running(2, qos="capped", cpus=2, state="SUSPENDED"),
        running(3, qos="capped", cpus=8, state="COMPLETING"),  # released as it completes
        running(4, qos="capped", cpus=8, state_flags=("COMPLETING",)),
        fresh(job_id=5, qos="capped", cpus=8),  # pending: holds nothing
    ]
    used = limits.usage(jobs)
    assert used[("qos", "capped", "cpu")] == 6
    assert used[("qos-user", "capped", "ann", "jobs")] == 2


def test_pending_jobs_count_only_within_what_the_budgets_leave() -> None:
    # capped: MaxJobsPerUser=2, GrpTRES cpu=12. ann runs one 4-CPU job: one more of hers may start; bob
    # (his association: MaxJobs=3) may start two (the user limit), their CPUs within 12 - 4 = 8.
    jobs = [
        running(1, qos="capped", cpus=4),
        *(fresh(job_id=10 + i, qos="capped", cpus=4, priority=100 - i) for i in range(3)),
        *(fresh(job_id=20 + i, qos="capped", cpus=2, user="bob", priority=50 - i) for i in range(3)),
    ]
    d = demand(jobs)
    # ann: 1 of 3 (user limit); bob: 2 of 3 (user limit), 4 + 2 + 2 = 8 CPUs ≤ 12
    assert d.eligible == 3
    assert d.ignored == {"QOSMaxJobsPerUserLimit": 3}
    assert d.needed == 1  # 4 + 2 + 2 CPUs on one 8-CPU node
    # GrpTRES cpu=12 runs short when ann's running job holds 10: none of hers (4 CPUs each) and one of
    # bob's (2 CPUs) fit; each of the others is over the CPUs first (its user's job count is not reached)
    d = demand([running(1, qos="capped", cpus=10), *jobs[1:]])
    assert d.eligible == 1 and d.ignored == {"QOSGrpCpuLimit": 5}


def test_association_budgets_up_the_tree_and_per_partition() -> None:
    # physics: GrpJobs=5 over all its users, MaxJobs=2 per user (ann inherits it; bob has 4). A user's own
    # MaxJobs is checked before the account's GrpJobs (slurmctld walks the tree from the user up)
    jobs = [fresh(job_id=i, user="ann", priority=100 - i) for i in range(4)]
    jobs += [fresh(job_id=10 + i, user="bob", priority=50 - i) for i in range(4)]
    d = demand(jobs)
    assert d.eligible == 5  # ann 2, bob 3: the account's 5
    assert d.ignored == {"AssocMaxJobsLimit": 2, "AssocGrpJobsLimit": 1}
    d = demand([*jobs, running(30, user="bob")])  # bob's running job is one of his 4 and of the 5
    assert d.eligible == 4 and d.ignored == {"AssocMaxJobsLimit": 2, "AssocGrpJobsLimit": 2}
    # ann in dyn: her per-partition association, GrpTRES cpu=6 (and physics' MaxJobs=2, GrpJobs=5)
    dyn = Target("dyn", "dyn", shape=SHAPE)
    jobs = [fresh(job_id=i, partitions=("dyn",), cpus=4, priority=100 - i) for i in range(3)]
    d = demand(jobs, target=dyn)
    assert d.eligible == 1 and d.ignored == {"AssocGrpCpuLimit": 2}


def test_a_job_that_never_fits_draws_nothing() -> None:
    # ann's MaxJobs=2 (physics'): her first job asks 16 CPUs of one task (nodes of 8), too large — it
    # never starts, so both of her jobs are left to the next three (two of them)
    jobs = [fresh(job_id=1, qos="acct", cpus=16, cpus_per_task=16, priority=9)]
    jobs += [fresh(job_id=2 + i, qos="acct", cpus=1, priority=5 - i) for i in range(3)]
    d = demand(jobs)
    assert [t.job for t in d.too_large] == ["1"]
    assert d.eligible == 2 and d.ignored == {"AssocMaxJobsLimit": 1}


def test_budgets_hold_beyond_job_by_job_order() -> None:
    # beyond ORDER_JOBS pending records the model orders kinds, not jobs: the budgets still bound them
    jobs = [fresh(job_id=i, qos="capped", cpus=1, priority=10_000 - i) for i in range(ORDER_JOBS + 10)]
    d = demand(jobs)
    assert d.eligible == 2 and d.ignored == {"QOSMaxJobsPerUserLimit": ORDER_JOBS + 8}


def test_budgets_are_not_judged_where_limits_are_not_enforced() -> None:
    jobs = [fresh(job_id=i, qos="capped", cpus=4, priority=100 - i) for i in range(3)]
    assert demand(jobs, config=SlurmConfig(accounting_storage_enforce=("associations",))).eligible == 3
    assert demand(jobs, config=None).eligible == 3


# ------------------------------------------------------------- GPUs and memory (TRES gres/gpu, mem)

GPU_QOS = (
    QosLimits(
        name="gpu",
        max_tres_per_job={"gres/gpu": 4, "mem": 20_000 * MIB},
        max_tres_per_user={"gres/gpu": 5, "mem": 30_000 * MIB},
        max_tres_per_account={"gres/gpu": 9},
        grp_tres={"gres/gpu": 12},
    ),
)
GPU_ASSOCIATIONS = (
    Association(account="root"),
    Association(account="physics", parent="root", grp_tres={"gres/gpu": 10, "mem": 60_000 * MIB}),
    Association(account="physics", user="ann"),
    Association(account="physics", user="bob"),
    Association(account="physics", user="dee"),
    Association(account="bio", parent="root", max_tres_per_job={"gres/gpu": 2, "mem": 8000 * MIB}),
    Association(account="bio", user="cy"),
)
GPU_SHAPE = NodeShape(8, 16_000 * MIB, 4)
GPU_TARGET = Target("gpu", "gpu", shape=GPU_SHAPE)


def gpu_job(job_id: int, gpus: int, mem_mb: int, **kw: Any) -> Job:
    """A one-node job of ``gpus`` GPUs and ``mem_mb`` MB under the ``gpu`` QOS, as ``tres_req_str`` shows."""
    memory = mem_mb * MIB
    tres = {"cpu": 1, "mem": memory, "node": 1} | ({"gres/gpu": gpus} if gpus else {})
    base: dict[str, Any] = {
        "partitions": ("gpu",),
        "qos": "gpu",
        "priority": 1000 - job_id,
        "gpus": gpus,
        "gpus_per_node": gpus,
        "memory_bytes": memory,
        "memory_per_node_bytes": memory,
        "tres_requested": tres,
    }
    return fresh(**({"job_id": job_id} | base | kw))


def gpu_demand(jobs: list[Job]) -> Demand:
    snap = limited(jobs, qos=GPU_QOS, associations=GPU_ASSOCIATIONS, partitions=(Partition(name="gpu"),))
    return compute_demand(snap, [GPU_TARGET])[GPU_TARGET.name]


def test_per_job_gpu_and_memory_limits_with_slurms_reason_names() -> None:
    bars = Bars.of(limited(qos=GPU_QOS, associations=GPU_ASSOCIATIONS, partitions=()))
    assert settled_reason(gpu_job(1, 4, 20_000), bars) == "PartitionConfig"  # at both limits
    assert settled_reason(gpu_job(1, 5, 1000), bars) == "QOSMaxGRESPerJob"
    assert settled_reason(gpu_job(1, 1, 20_001), bars) == "QOSMaxMemoryPerJob"
    # memory before nodes before GPUs (slurmctld's TRES order), CPUs first of all
    assert settled_reason(gpu_job(1, 5, 20_001), bars) == "QOSMaxMemoryPerJob"
    over_nodes = gpu_job(1, 5, 1000, tres_requested={"cpu": 1, "node": 2, "gres/gpu": 5}, qos="normal")
    assert settled_reason(over_nodes, bars) == "PartitionConfig"  # no QOS "normal", no node limit here
    # bio's association: MaxTRES gres/gpu=2, mem=8000M (its user's association inherits them)
    cy = {"account": "bio", "user": "cy", "qos": "none"}
    assert settled_reason(gpu_job(1, 3, 1000, **cy), bars) == "AssocMaxGRESPerJob"
    assert settled_reason(gpu_job(1, 2, 8001, **cy), bars) == "AssocMaxMemPerJob"
    assert settled_reason(gpu_job(1, 2, 8000, **cy), bars) == "PartitionConfig"
    # the TRES a record names rule (what slurmctld compares); the job's fields where it names none
    assert settled_reason(gpu_job(1, 5, 1000, tres_requested={}), bars) == "QOSMaxGRESPerJob"


def test_gpu_and_memory_budgets_of_running_jobs() -> None:
    # QOS gpu: MaxTRESPerUser gres/gpu=5, mem=30000M. ann runs 4 GPUs / 10000 MB: her 1-GPU job starts (5
    # GPUs), her 2-GPU one would make 7 (QOSMaxGRESPerUser), her 14000-MB job makes 25000 MB and starts,
    # her 8000-MB one would make 33000 (QOSMaxMemoryPerUser). Nodes: 4 GPUs / 16000 MB each.
    jobs = [
        gpu_job(1, 4, 10_000, state="RUNNING", reason="None", nodes="x1"),
        gpu_job(10, 1, 1000),
        gpu_job(11, 2, 1000),
        gpu_job(12, 0, 14_000),
        gpu_job(13, 0, 8000),
    ]
    d = gpu_demand(jobs)
    assert d.eligible == 2
    assert d.ignored == {"QOSMaxGRESPerUser": 1, "QOSMaxMemoryPerUser": 1}
    assert d.needed == 1  # 1 GPU + 1000 MB and 14000 MB on one new node
    # without the running job: 1 + 2 GPUs, then 1000 + 1000 + 14000 + 8000 = 24000 MB, all within
    d = gpu_demand(jobs[1:])
    assert d.eligible == 4 and d.ignored == {}


def test_gpu_budgets_per_account_per_qos_and_up_the_association_tree() -> None:
    # the QOS: MaxTRESPerUser gres/gpu=5, MaxTRESPerAccount 9, GrpTRES 12; physics' association GrpTRES
    # gres/gpu=10. ann 4, bob 4 + 1: physics holds 9; ann's next one would make physics 10 > 9
    # (MaxGRESPerAccount, before the association's 10); cy (bio) 2 makes the QOS 11, his next 2 would
    # make 13 (QOSGrpGRES), his 1 makes 12 and starts (each job judged on its own, in order)
    jobs = [
        gpu_job(1, 4, 1000, user="ann"),
        gpu_job(2, 4, 1000, user="bob"),
        gpu_job(3, 1, 1000, user="bob"),
        gpu_job(4, 1, 1000, user="ann"),
        gpu_job(5, 2, 1000, account="bio", user="cy"),
        gpu_job(6, 2, 1000, account="bio", user="cy"),
        gpu_job(7, 1, 1000, account="bio", user="cy"),
    ]
    d = gpu_demand(jobs)
    assert d.ignored == {"MaxGRESPerAccount": 1, "QOSGrpGRES": 1}
    assert d.eligible == 5
    # physics' GrpTRES mem=60000M over its users, each within the QOS's 30000M per user: dee's job
    # would make 61000 (AssocGrpMemLimit)
    jobs = [gpu_job(10 + i, 0, 15_000, user=user) for i, user in enumerate(["ann", "ann", "bob", "bob"])]
    d = gpu_demand([*jobs, gpu_job(20, 0, 1000, user="dee")])
    assert d.eligible == 4 and d.ignored == {"AssocGrpMemLimit": 1}


# ------------------------------------------------------------------------------ a partition's QOS

PARTITION_QOS = (
    QosLimits(name="part", grp_tres={"cpu": 18}),
    QosLimits(name="job", max_jobs_per_user=4, grp_tres={"cpu": 100}),
    QosLimits(name="over", flags=("OVERRIDE_PARTITION_QOS",), grp_tres={"cpu": 40}),
)


def partition_qos_snapshot(jobs: list[Job], qos: tuple[QosLimits, ...] = PARTITION_QOS) -> Snapshot:
    return limited(jobs, qos=qos, partitions=(Partition(name="cpu", qos="part"), Partition(name="dyn")))


def test_the_partitions_qos_comes_first_unless_the_jobs_overrides_it() -> None:
    limits = JobLimits.of(partition_qos_snapshot([]))
    assert limits is not None
    assert limits.qos_order("job", "cpu") == ("part", "job")
    assert limits.qos_order("over", "cpu") == ("over", "part")  # OverPartQOS
    assert limits.qos_order("part", "cpu") == ("part",)  # the same QOS once
    assert limits.qos_order("job", "dyn") == ("job",)  # a partition without a QOS
    assert limits.qos_order("unknown", "cpu") == ("part", "unknown")
    # budgets: the partition's GrpTRES cpu=18 before the job QOS's 100; its MaxJobsPerUser fills in
    assert [(b[0], b[1], b[3]) for b in limits.budgets("job", "acct", "ann", "cpu")] == [
        (("qos-user", "job", "ann", "jobs"), 4, "QOSMaxJobsPerUserLimit"),
        (("qos", "part", "cpu"), 18, "QOSGrpCpuLimit"),
    ]
    assert [b[1] for b in limits.budgets("over", "acct", "ann", "cpu")] == [40]  # over's GrpTRES first


def test_per_job_limits_of_the_partitions_qos() -> None:
    qos = (
        QosLimits(name="part", max_tres_per_job={"cpu": 6}),
        QosLimits(name="job", max_tres_per_job={"cpu": 8, "node": 1}),
        QosLimits(name="over", flags=("OVERRIDE_PARTITION_QOS",), max_tres_per_job={"cpu": 16}),
    )
    bars = Bars.of(partition_qos_snapshot([], qos))
    assert settled_reason(fresh(cpus=7, qos="job"), bars) == "QOSMaxCpuPerJobLimit"  # the partition's 6
    assert settled_reason(fresh(cpus=6, qos="job"), bars) == "PartitionConfig"
    two_nodes = fresh(qos="job", min_nodes=2, tres_requested={"cpu": 1, "node": 2})
    assert settled_reason(two_nodes, bars) == "QOSMaxNodePerJobLimit"  # the job QOS's, filled in
    assert settled_reason(fresh(cpus=7, qos="over"), bars) == "PartitionConfig"  # over's 16 first
    assert settled_reason(fresh(cpus=7, qos="job", partitions=("dyn",)), bars) == "PartitionConfig"


def test_budgets_of_the_partitions_qos_as_in_the_lab() -> None:
    # the oracle mix partition_qos_limits by hand: the partition's GrpTRES cpu=18 binds the 8-CPU jobs
    # of QOS "job" (c8c, c8d), its MaxJobsPerUser=4 the 1-CPU ones (c1c); QOS "over" (OverPartQOS) has
    # GrpTRES cpu=40 of its own: its job starts. 8 | 8 | 1 + 1 | 8 on nodes of 8 CPUs: 4
    jobs = [fresh(job_id=i, qos="job", cpus=8, priority=100 - i) for i in range(4)]
    jobs += [fresh(job_id=10 + i, qos="job", cpus=1, priority=50 - i) for i in range(3)]
    jobs += [fresh(job_id=20, qos="over", cpus=8, priority=10)]
    d = compute_demand(partition_qos_snapshot(jobs), [TARGET])[TARGET.name]
    assert d.eligible == 5
    assert d.ignored == {"QOSGrpCpuLimit": 2, "QOSMaxJobsPerUserLimit": 1}
    assert d.needed == 4


def test_a_running_job_holds_of_both_qos() -> None:
    # a running job of QOS "over" in the partition holds 8 of over's CPUs and 8 of the partition QOS's
    # (slurmctld adds it to both): one pending 8-CPU job of QOS "job" fits the partition's 18, not two
    running_over = running(1, qos="over", cpus=8)
    limits = JobLimits.of(partition_qos_snapshot([running_over]))
    assert limits is not None
    used = limits.usage([running_over])
    assert used[("qos", "over", "cpu")] == 8 and used[("qos", "part", "cpu")] == 8
    jobs = [running_over, *(fresh(job_id=10 + i, qos="job", cpus=8, priority=9 - i) for i in range(2))]
    d = compute_demand(partition_qos_snapshot(jobs), [TARGET])[TARGET.name]
    assert d.eligible == 1 and d.ignored == {"QOSGrpCpuLimit": 1}
