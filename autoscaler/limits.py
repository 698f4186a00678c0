"""Which per-job QOS and association limit a fresh job is over, before slurmctld's first pass says so. Pure.

Read only where the snapshot says slurmctld enforces limits (``AccountingStorageEnforce`` with ``limits``,
from ``/slurm/v0.0.45/conf``: Slurm 26.05+) and slurmdbd's QOS and associations are in it; elsewhere
nothing is judged (the job counts until Slurm names the limit, as before). Judged, in this order (the
job's QOS, then its association: its own limit, else its account's, up the account tree):

* CPUs above ``MaxTRESPerJob`` cpu → ``QOSMaxCpuPerJobLimit`` / ``AssocMaxCpuPerJobLimit``;
* requested nodes (``-N``: the TRES node count) above ``MaxTRESPerJob`` node (``MaxNodes``) →
  ``QOSMaxNodePerJobLimit`` / ``AssocMaxNodePerJobLimit``;
* a time limit above ``MaxWall`` → ``QOSMaxWallDurationPerJobLimit`` / ``AssocMaxWallDurationPerJobLimit``
  (a job without one gets MaxWall from slurmctld: never over).

Not judged (counted until Slurm names them): memory and GRES per job, per-node TRES, and the limits that
depend on what else runs (``GrpTRES``, ``MaxJobsPerUser``, ``MaxTRESPerUser``, ``GrpJobs``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.model import Association, Job, QosLimits, Snapshot

__all__ = ["JobLimits"]


@dataclass(frozen=True)
class JobLimits:
    """The per-job limits of one snapshot, by QOS and association."""

    qos: Mapping[str, QosLimits]
    associations: Mapping[tuple[str, str, str], Association]
    """(account, user, partition) → association; accounts' own with user ``""``."""

    @classmethod
    def of(cls, snapshot: Snapshot) -> JobLimits | None:
        """The limits to judge by, or None where slurmctld does not enforce them or they are unknown."""
        conf = snapshot.config
        if conf is None or "limits" not in conf.accounting_storage_enforce:
            return None
        if not snapshot.qos and not snapshot.associations:
            return None
        return cls(
            qos={q.name: q for q in snapshot.qos},
            associations={(a.account, a.user, a.partition): a for a in snapshot.associations},
        )

    def _chain(self, job: Job) -> list[Association]:
        """The job's association, then its account's and their parents' (nearest first)."""
        out: list[Association] = []
        partition = job.partitions[0] if job.partitions else ""
        own = self.associations.get((job.account, job.user, partition)) or self.associations.get(
            (job.account, job.user, "")
        )
        if own is not None:
            out.append(own)
        account, seen = job.account, set()
        while account and account not in seen:
            seen.add(account)
            a = self.associations.get((account, "", ""))
            if a is None:
                break
            out.append(a)
            account = a.parent
        return out

    def reason(self, job: Job) -> str | None:
        """The per-job limit ``job`` is over (Slurm's reason name), or None."""
        cpus = max(job.cpus, job.tasks * job.cpus_per_task)
        nodes = job.tres_requested.get("node", job.min_nodes)
        wall = job.time_limit_seconds
        qos = self.qos.get(job.qos)
        if qos is not None:
            why = _over("QOS", qos.max_tres_per_job, qos.max_wall_seconds, cpus, nodes, wall)
            if why is not None:
                return why
        chain = self._chain(job)
        if not chain:
            return None

        def nearest(get: Callable[[Association], int | None]) -> int | None:
            return next((v for a in chain if (v := get(a)) is not None), None)

        per_job: dict[str, int] = {}
        for what in ("cpu", "node"):
            v = next((n for a in chain if (n := a.max_tres_per_job.get(what)) is not None), None)
            if v is not None:
                per_job[what] = v
        return _over("Assoc", per_job, nearest(lambda a: a.max_wall_seconds), cpus, nodes, wall)


def _over(
    who: str, per_job: Mapping[str, int], max_wall: int | None, cpus: int, nodes: int, wall: int | None
) -> str | None:
    limit = per_job.get("cpu")
    if limit is not None and cpus > limit:
        return f"{who}MaxCpuPerJobLimit"
    limit = per_job.get("node")
    if limit is not None and nodes > limit:
        return f"{who}MaxNodePerJobLimit"
    if max_wall is not None and wall is not None and wall > max_wall:
        return f"{who}MaxWallDurationPerJobLimit"
    return None
