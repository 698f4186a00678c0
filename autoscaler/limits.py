"""QOS and association limits: which per-job limit a fresh job is over before slurmctld's first pass says so,
and which budgets of running jobs a pending job draws from. Pure.

Read only where the snapshot says slurmctld enforces limits (``AccountingStorageEnforce`` with ``limits``,
from ``/slurm/v0.0.45/conf``: Slurm 26.05+) and slurmdbd's QOS and associations are in it; elsewhere
nothing is judged (the job counts until Slurm names the limit, as before). Judged, in this order (the
job's QOS, then its association: its own limit, else its account's, up the account tree):

* CPUs above ``MaxTRESPerJob`` cpu → ``QOSMaxCpuPerJobLimit`` / ``AssocMaxCpuPerJobLimit``;
* requested nodes (``-N``: the TRES node count) above ``MaxTRESPerJob`` node (``MaxNodes``) →
  ``QOSMaxNodePerJobLimit`` / ``AssocMaxNodePerJobLimit``;
* a time limit above ``MaxWall`` → ``QOSMaxWallDurationPerJobLimit`` / ``AssocMaxWallDurationPerJobLimit``
  (a job without one gets MaxWall from slurmctld: never over).

**Budgets** (:meth:`JobLimits.budgets`): the limits that depend on what else runs. Each is a count of jobs,
CPUs or nodes that the running (and suspended) jobs of a QOS, a QOS's user or account, or an association
hold (:meth:`JobLimits.usage`); the demand model hands what is left to the pending jobs in Slurm's order
and counts no job beyond it, as slurmctld starts none (lab: the ``qos_running_limits`` and
``assoc_running_limits`` oracle mixes). In slurmctld's order — job counts before TRES, the QOS before the
association — and with its reason names:

* QOS ``GrpJobs`` → ``QOSGrpJobsLimit``; ``MaxJobsPerUser`` → ``QOSMaxJobsPerUserLimit``;
  ``MaxJobsPerAccount`` → ``QOSMaxJobsPerAccountLimit``;
* association, from the user's up the tree: ``GrpJobs`` (each over its subtree's jobs) →
  ``AssocGrpJobsLimit``, and at the user's ``MaxJobs`` (the nearest set, over the user's association's
  own jobs) → ``AssocMaxJobsLimit``;
* QOS ``GrpTRES`` cpu/node → ``QOSGrpCpuLimit`` / ``QOSGrpNodeLimit``; ``MaxTRESPerUser`` →
  ``QOSMaxCpuPerUserLimit`` / ``QOSMaxNodePerUserLimit``; ``MaxTRESPerAccount`` →
  ``QOSMaxCpuPerAccountLimit`` / ``QOSMaxNodePerAccountLimit``;
* association ``GrpTRES`` cpu/node (up the tree) → ``AssocGrpCpuLimit`` / ``AssocGrpNodeLimit``.

A job draws 1 job, its CPUs (tasks × CPUs per task at least) and its requested nodes; a running job what
it holds. Counted per scaling target: a user whose jobs pend in two targets' partitions gets the whole
budget in each (more nodes, never fewer). Node budgets add each job's nodes: where running jobs of one
budget share a node, slurmctld counts that node once, so the model may see a node budget used up early
(not checked in the lab; the mixes' node counts are whole nodes).

Not judged (counted until Slurm names them): memory and GRES limits (per job and budgets), per-node TRES,
a partition's QOS (the snapshot does not say which), the minutes-based limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from exporter.model import Association, Job, QosLimits, Snapshot

__all__ = ["CPUS", "JOBS", "NODES", "Budget", "JobLimits", "Who"]


PerJob = tuple[int | None, int | None, int | None]
"""(``MaxTRESPerJob`` cpu, ``MaxTRESPerJob`` node, ``MaxWall`` seconds); None: no limit."""

JOBS, CPUS, NODES = 0, 1, 2
"""What a :data:`Budget` counts (an index into a job's draw ``(1, cpus, nodes)``)."""

Budget = tuple[tuple[str, ...], int, int, str]
"""``(key, limit, what, reason)``: the running jobs with this ``key`` may hold at most ``limit`` of ``what``
(:data:`JOBS`, :data:`CPUS`, :data:`NODES`); a job that would go beyond pends with ``reason``."""

Who = tuple[str, str, str]
"""A job's (QOS, account, user): what its budgets depend on, with its partition."""

_TRES = ((CPUS, "cpu", "Cpu"), (NODES, "node", "Node"))


def _qos_runs(q: QosLimits) -> bool:
    return (
        q.grp_jobs is not None
        or q.max_jobs_per_user is not None
        or q.max_jobs_per_account is not None
        or any(
            t in tres
            for tres in (q.grp_tres, q.max_tres_per_user, q.max_tres_per_account)
            for t in ("cpu", "node")
        )
    )


def _assoc_runs(a: Association) -> bool:
    return a.grp_jobs is not None or a.max_jobs is not None or "cpu" in a.grp_tres or "node" in a.grp_tres


@dataclass(frozen=True)
class JobLimits:
    """The per-job limits of one snapshot, by QOS and association."""

    qos: Mapping[str, PerJob]
    """QOS name → its per-job limits."""
    associations: Mapping[tuple[str, str, str], Association]
    """(account, user, partition) → association; accounts' own with user ``""``."""
    qos_limits: Mapping[str, QosLimits] = field(default_factory=dict)
    """QOS name → all its limits (the budgets')."""
    running: bool = False
    """Whether any QOS or association sets a limit that depends on what runs (:meth:`budgets`)."""
    _resolved: dict[tuple[str, str, str], PerJob] = field(default_factory=dict, compare=False, repr=False)
    """(account, user, partition) → the limits that apply, each the nearest set up the tree (filled as
    jobs ask: many jobs share an association)."""
    _budgets: dict[tuple[str, str, str, str], tuple[Budget, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """(QOS, account, user, partition) → its budgets (filled as jobs ask)."""

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
            qos_limits={q.name: q for q in snapshot.qos},
            running=any(map(_qos_runs, snapshot.qos)) or any(map(_assoc_runs, snapshot.associations)),
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

    def budgets(self, qos: str, account: str, user: str, partition: str) -> tuple[Budget, ...]:
        """The budgets a job of this QOS, account, user and partition draws from, in slurmctld's order
        (module docstring); ``()`` where none is set."""
        at = (qos, account, user, partition)
        hit = self._budgets.get(at)
        if hit is None:
            hit = self._budgets[at] = self._make_budgets(qos, account, user, partition)
        return hit

    def _make_budgets(self, qos: str, account: str, user: str, partition: str) -> tuple[Budget, ...]:
        counts: list[Budget] = []
        tres: list[Budget] = []
        q = self.qos_limits.get(qos)
        if q is not None:
            for key, limit, reason in (
                (("qos", qos), q.grp_jobs, "QOSGrpJobsLimit"),
                (("qos-user", qos, user), q.max_jobs_per_user, "QOSMaxJobsPerUserLimit"),
                (("qos-account", qos, account), q.max_jobs_per_account, "QOSMaxJobsPerAccountLimit"),
            ):
                if limit is not None:
                    counts.append(((*key, "jobs"), limit, JOBS, reason))
            for what, name, word in _TRES:
                for key, limits, reason in (
                    (("qos", qos), q.grp_tres, f"QOSGrp{word}Limit"),
                    (("qos-user", qos, user), q.max_tres_per_user, f"QOSMax{word}PerUserLimit"),
                    (("qos-account", qos, account), q.max_tres_per_account, f"QOSMax{word}PerAccountLimit"),
                ):
                    if name in limits:
                        tres.append(((*key, name), limits[name], what, reason))
        chain = self._chain(account, user, partition)
        for i, a in enumerate(chain):  # the user's association, then its accounts up the tree
            at = ("assoc", a.account, a.user, a.partition)
            if a.grp_jobs is not None:
                counts.append(((*at, "jobs"), a.grp_jobs, JOBS, "AssocGrpJobsLimit"))
            if i == 0 and a.user:  # MaxJobs: the nearest set, over the user's association's own jobs
                max_jobs = next((b.max_jobs for b in chain if b.max_jobs is not None), None)
                if max_jobs is not None:
                    counts.append(((*at, "own-jobs"), max_jobs, JOBS, "AssocMaxJobsLimit"))
            for what, name, word in _TRES:
                if name in a.grp_tres:
                    tres.append(((*at, name), a.grp_tres[name], what, f"AssocGrp{word}Limit"))
        return (*counts, *tres)

    def usage(self, jobs: Iterable[Job]) -> dict[tuple[str, ...], int]:
        """What the running and suspended jobs among ``jobs`` hold of each budget's key (a COMPLETING
        job's share is released when it starts completing)."""
        used: dict[tuple[str, ...], int] = {}
        for job in jobs:
            if job.state not in ("RUNNING", "SUSPENDED") or "COMPLETING" in job.state_flags:
                continue
            budgets = self.budgets(
                job.qos, job.account, job.user, job.partitions[0] if job.partitions else ""
            )
            if not budgets:
                continue
            draw = (1, job.cpus, max(job.min_nodes, 1))
            for key, _, what, _ in budgets:
                used[key] = used.get(key, 0) + draw[what]
        return used

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
