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
from dataclasses import dataclass, field

from exporter.model import Association, Job, Snapshot

__all__ = ["JobLimits"]


PerJob = tuple[int | None, int | None, int | None]
"""(``MaxTRESPerJob`` cpu, ``MaxTRESPerJob`` node, ``MaxWall`` seconds); None: no limit."""


@dataclass(frozen=True)
class JobLimits:
    """The per-job limits of one snapshot, by QOS and association."""

    qos: Mapping[str, PerJob]
    """QOS name → its per-job limits."""
    associations: Mapping[tuple[str, str, str], Association]
    """(account, user, partition) → association; accounts' own with user ``""``."""
    _resolved: dict[tuple[str, str, str], PerJob] = field(default_factory=dict, compare=False, repr=False)
    """(account, user, partition) → the limits that apply, each the nearest set up the tree (filled as
    jobs ask: many jobs share an association)."""

    @classmethod
    def of(cls, snapshot: Snapshot) -> JobLimits | None:
        """The limits to judge by, or None where slurmctld does not enforce them or they are unknown."""
        conf = snapshot.config
        if conf is None or "limits" not in conf.accounting_storage_enforce:
            return None
        if not snapshot.qos and not snapshot.associations:
            return None
        return cls(
            qos={q.name: _per_job(q.max_tres_per_job, q.max_wall_seconds) for q in snapshot.qos},
            associations={(a.account, a.user, a.partition): a for a in snapshot.associations},
        )

    def _chain(self, account: str, user: str, partition: str) -> list[Association]:
        """The association of (account, user, partition), then its account's and their parents' (nearest
        first)."""
        out: list[Association] = []
        own = self.associations.get((account, user, partition)) or self.associations.get((account, user, ""))
        if own is not None:
            out.append(own)
        seen: set[str] = set()
        while account and account not in seen:
            seen.add(account)
            a = self.associations.get((account, "", ""))
            if a is None:
                break
            out.append(a)
            account = a.parent
        return out

    def _association_limits(self, job: Job) -> PerJob:
        key = (job.account, job.user, job.partitions[0] if job.partitions else "")
        hit = self._resolved.get(key)
        if hit is None:
            chain = self._chain(*key)

            def nearest(get: Callable[[Association], int | None]) -> int | None:
                return next((v for a in chain if (v := get(a)) is not None), None)

            hit = self._resolved[key] = (
                nearest(lambda a: a.max_tres_per_job.get("cpu")),
                nearest(lambda a: a.max_tres_per_job.get("node")),
                nearest(lambda a: a.max_wall_seconds),
            )
        return hit

    def reason(self, job: Job) -> str | None:
        """The per-job limit ``job`` is over (Slurm's reason name), or None."""
        cpus = max(job.cpus, job.tasks * job.cpus_per_task)
        nodes = job.tres_requested.get("node", job.min_nodes)
        wall = job.time_limit_seconds
        qos = self.qos.get(job.qos)
        if qos is not None:
            why = _over("QOS", qos, cpus, nodes, wall)
            if why is not None:
                return why
        return _over("Assoc", self._association_limits(job), cpus, nodes, wall)


def _per_job(tres: Mapping[str, int], max_wall: int | None) -> PerJob:
    return (tres.get("cpu"), tres.get("node"), max_wall)


def _over(who: str, limits: PerJob, cpus: int, nodes: int, wall: int | None) -> str | None:
    max_cpus, max_nodes, max_wall = limits
    if max_cpus is not None and cpus > max_cpus:
        return f"{who}MaxCpuPerJobLimit"
    if max_nodes is not None and nodes > max_nodes:
        return f"{who}MaxNodePerJobLimit"
    if max_wall is not None and wall is not None and wall > max_wall:
        return f"{who}MaxWallDurationPerJobLimit"
    return None
