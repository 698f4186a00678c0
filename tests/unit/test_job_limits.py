"""Per-job QOS and association limits judged for fresh jobs (autoscaler.limits): only where slurmctld
enforces them; Slurm's reason names (as the lab's cloud partition showed them: the
``qos_assoc_per_job_limits`` oracle mix)."""

from __future__ import annotations

from typing import Any

from autoscaler.eligibility import Bars, settled_reason
from autoscaler.limits import JobLimits
from exporter.model import Association, Job, Partition, QosLimits, SlurmConfig, Snapshot

ENFORCED = SlurmConfig(accounting_storage_enforce=("associations", "limits"))
QOS = (QosLimits(name="normal", max_tres_per_job={"cpu": 4}, max_wall_seconds=3600),)
ASSOCIATIONS = (
    Association(account="root", max_tres_per_job={"node": 1}),
    Association(account="physics", parent="root", max_wall_seconds=1800),
    Association(account="physics", user="ann"),
    Association(account="physics", user="ann", partition="dyn", max_tres_per_job={"cpu": 2}),
)


def snapshot(config: SlurmConfig | None = ENFORCED) -> Snapshot:
    return Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        partitions=(Partition(name="dyn"), Partition(name="cpu")),
        qos=QOS,
        associations=ASSOCIATIONS,
        config=config,
    )


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
    return Job(job_id=1, **(base | kw))


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
