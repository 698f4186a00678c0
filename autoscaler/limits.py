"""QOS and association limits: which per-job limit a fresh job is over before slurmctld's first pass says so,
and which budgets of running jobs a pending job draws from. Pure.

Read only where the snapshot says slurmctld enforces limits (``AccountingStorageEnforce`` with ``limits``,
from ``/slurm/v0.0.45/conf``: Slurm 26.05+) and slurmdbd's QOS and associations are in it; elsewhere
nothing is judged (the job counts until Slurm names the limit, as before). Judged, in this order (the
job's QOS, then its association: its own limit, else its account's, up the account tree):

* CPUs above ``MaxTRESPerJob`` cpu → ``QOSMaxCpuPerJobLimit`` / ``AssocMaxCpuPerJobLimit``;
* memory (the job's TRES ``mem``) above ``MaxTRESPerJob`` mem → ``QOSMaxMemoryPerJob`` /
  ``AssocMaxMemPerJob``;
* requested nodes (``-N``: the TRES node count) above ``MaxTRESPerJob`` node (``MaxNodes``) →
  ``QOSMaxNodePerJobLimit`` / ``AssocMaxNodePerJobLimit``;
* GPUs (TRES ``gres/gpu``) above ``MaxTRESPerJob`` gres/gpu → ``QOSMaxGRESPerJob`` / ``AssocMaxGRESPerJob``;
* a time limit above ``MaxWall`` → ``QOSMaxWallDurationPerJobLimit`` / ``AssocMaxWallDurationPerJobLimit``
  (a job without one gets MaxWall from slurmctld: never over).

**Budgets** (:meth:`JobLimits.budgets`): the limits that depend on what else runs. Each is a count of jobs,
CPUs or nodes that the running (and suspended) jobs of a QOS, a QOS's user or account, or an association
hold (:meth:`JobLimits.usage`); the demand model hands what is left to the pending jobs in Slurm's order
and counts no job beyond it, as slurmctld starts none (lab: the ``qos_running_limits`` and
``assoc_running_limits`` oracle mixes). In slurmctld's order — job counts before TRES, the QOS before the
association — and with its reason names:

* QOS ``GrpJobs`` → ``QOSGrpJobsLimit``; ``MaxJobsPerUser`` → ``QOSMaxJobsPerUserLimit``;
  ``MaxJobsPerAccount`` → ``MaxJobsPerAccount``;
* association, from the user's up the tree: ``GrpJobs`` (each over its subtree's jobs) →
  ``AssocGrpJobsLimit``, and at the user's ``MaxJobs`` (the nearest set, over the user's association's
  own jobs) → ``AssocMaxJobsLimit``;
* QOS TRES, in slurmctld's TRES order (cpu, mem, node, gres/gpu), each ``GrpTRES`` → ``QOSGrpCpuLimit`` /
  ``QOSGrpMemLimit`` / ``QOSGrpNodeLimit`` / ``QOSGrpGRES``, ``MaxTRESPerUser`` → ``QOSMaxCpuPerUserLimit``
  / ``QOSMaxMemoryPerUser`` / ``QOSMaxNodePerUserLimit`` / ``QOSMaxGRESPerUser``, ``MaxTRESPerAccount`` →
  ``MaxCpuPerAccount`` / ``MaxMemoryPerAccount`` / ``MaxNodePerAccount`` / ``MaxGRESPerAccount``;
* association ``GrpTRES`` (up the tree) → ``AssocGrpCpuLimit`` / ``AssocGrpMemLimit`` /
  ``AssocGrpNodeLimit`` / ``AssocGrpGRES``.

Reason names as slurmctld spells them (``src/common/job_state_reason.c``: the per-account ones carry no
``QOS`` prefix). A job draws 1 job, its CPUs (tasks × CPUs per task at least), its memory (TRES ``mem``),
its requested nodes and its GPUs; a running job what it holds. Counted per scaling target: a user whose
jobs pend in two targets' partitions gets the whole budget in each (more nodes, never fewer). Node budgets
add each job's nodes: where running jobs of one budget share a node, slurmctld counts that node once, so
the model may see a node budget used up early (not checked in the lab; the mixes' node counts are whole
nodes).

**A partition's QOS** (``QOS=`` of the partition, :attr:`exporter.model.Partition.qos`): its limits come
first and the job's QOS fills in those it does not set — the job's first where its QOS has
``OverPartQOS`` (:meth:`JobLimits.qos_order`) — per job and for the budgets; a running job counts in both
QOS's budgets. A job pending in several partitions is judged by the first one's QOS per job, by the QOS
of the partition it is counted in for the budgets.

Not judged (counted until Slurm names them): GRES other than GPUs, licenses and billing as TRES limits,
per-node TRES, the minutes-based limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from exporter.model import Association, Job, QosLimits, Snapshot

__all__ = ["CPUS", "JOBS", "NODES", "Budget", "JobLimits", "Who"]


PerJob = tuple[int | None, int | None, int | None, int | None, int | None]
"""``MaxTRESPerJob`` cpu, mem (bytes), node, gres/gpu, and ``MaxWall`` seconds; None: no limit."""

JOBS, CPUS, NODES, MEMORY, GPUS = 0, 1, 2, 3, 4
"""What a :data:`Budget` counts (an index into a job's draw ``(1, cpus, nodes, memory bytes, gpus)``)."""

Budget = tuple[tuple[str, ...], int, int, str]
"""``(key, limit, what, reason)``: the running jobs with this ``key`` may hold at most ``limit`` of ``what``
(:data:`JOBS`, :data:`CPUS`, :data:`NODES`, :data:`MEMORY`, :data:`GPUS`); a job that would go beyond
pends with ``reason``."""

Who = tuple[str, str, str]
"""A job's (QOS, account, user): what its budgets depend on, with its partition."""

_TRES: tuple[tuple[int, str, tuple[str, str, str, str]], ...] = (
    # (what, TRES, reasons: QOS GrpTRES, MaxTRESPerUser, MaxTRESPerAccount, association GrpTRES)
    (CPUS, "cpu", ("QOSGrpCpuLimit", "QOSMaxCpuPerUserLimit", "MaxCpuPerAccount", "AssocGrpCpuLimit")),
    (MEMORY, "mem", ("QOSGrpMemLimit", "QOSMaxMemoryPerUser", "MaxMemoryPerAccount", "AssocGrpMemLimit")),
    (NODES, "node", ("QOSGrpNodeLimit", "QOSMaxNodePerUserLimit", "MaxNodePerAccount", "AssocGrpNodeLimit")),
    (GPUS, "gres/gpu", ("QOSGrpGRES", "QOSMaxGRESPerUser", "MaxGRESPerAccount", "AssocGrpGRES")),
)
"""The TRES judged, in slurmctld's TRES order, with its reason names (``job_state_reason.c``)."""
_JUDGED = tuple(name for _, name, _ in _TRES)
_PER_JOB_REASONS = (
    ("MaxCpuPerJobLimit", "MaxCpuPerJobLimit"),
    ("MaxMemoryPerJob", "MaxMemPerJob"),
    ("MaxNodePerJobLimit", "MaxNodePerJobLimit"),
    ("MaxGRESPerJob", "MaxGRESPerJob"),
    ("MaxWallDurationPerJobLimit", "MaxWallDurationPerJobLimit"),
)
"""Per :data:`PerJob` slot the reason after ``QOS`` and after ``Assoc``."""
OVER_PARTITION_QOS = "OVERRIDE_PARTITION_QOS"
"""The QOS flag ``OverPartQOS`` (as slurmrestd spells it): the job's QOS's limits before the partition's."""


def _qos_runs(q: QosLimits) -> bool:
    return (
        q.grp_jobs is not None
        or q.max_jobs_per_user is not None
        or q.max_jobs_per_account is not None
        or any(
            t in tres for tres in (q.grp_tres, q.max_tres_per_user, q.max_tres_per_account) for t in _JUDGED
        )
    )


def _assoc_runs(a: Association) -> bool:
    return a.grp_jobs is not None or a.max_jobs is not None or any(t in a.grp_tres for t in _JUDGED)


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
    partition_qos: Mapping[str, str] = field(default_factory=dict)
    """Partition → its QOS (``QOS=``), where it has one."""
    _resolved: dict[tuple[str, str, str], PerJob] = field(default_factory=dict, compare=False, repr=False)
    """(account, user, partition) → the limits that apply, each the nearest set up the tree (filled as
    jobs ask: many jobs share an association)."""
    _qos_resolved: dict[tuple[str, str], PerJob] = field(default_factory=dict, compare=False, repr=False)
    """(QOS, partition) → the QOS limits that apply (:meth:`_qos_limits`)."""
    _budgets: dict[tuple[str, str, str, str], tuple[tuple[Budget, ...], tuple[Budget, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """(QOS, account, user, partition) → its budgets, and those a QOS before it set already (what the
    running jobs hold is counted in them all; filled as jobs ask)."""

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
            partition_qos={p.name: p.qos for p in snapshot.partitions if p.qos},
        )

    def qos_order(self, qos: str, partition: str) -> tuple[str, ...]:
        """The QOS whose limits a job of ``qos`` in ``partition`` is held to, the first's before the
        second's (each limit the first QOS sets; the second's fill in the rest): the partition's QOS, then
        the job's — the job's first where it has ``OverPartQOS`` (slurmctld's
        ``acct_policy_set_qos_order``)."""
        own = self.partition_qos.get(partition)
        if own is None or own == qos:
            return (qos,)
        job_qos = self.qos_limits.get(qos)
        if job_qos is not None and OVER_PARTITION_QOS in job_qos.flags:
            return (qos, own)
        return (own, qos)

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
                nearest(lambda a: a.max_tres_per_job.get("mem")),
                nearest(lambda a: a.max_tres_per_job.get("node")),
                nearest(lambda a: a.max_tres_per_job.get("gres/gpu")),
                nearest(lambda a: a.max_wall_seconds),
            )
        return hit

    def budgets(self, qos: str, account: str, user: str, partition: str) -> tuple[Budget, ...]:
        """The budgets a job of this QOS, account, user and partition draws from, in slurmctld's order
        (module docstring); ``()`` where none is set."""
        return self._budgets_of(qos, account, user, partition)[0]

    def _budgets_of(
        self, qos: str, account: str, user: str, partition: str
    ) -> tuple[tuple[Budget, ...], tuple[Budget, ...]]:
        at = (qos, account, user, partition)
        hit = self._budgets.get(at)
        if hit is None:
            hit = self._budgets[at] = self._make_budgets(qos, account, user, partition)
        return hit

    def _make_budgets(
        self, qos: str, account: str, user: str, partition: str
    ) -> tuple[tuple[Budget, ...], tuple[Budget, ...]]:
        counts: list[Budget] = []
        tres: list[Budget] = []
        shadowed: list[Budget] = []  # set by a QOS whose limit a QOS before it sets too
        taken: set[tuple[str, str]] = set()  # (scope, what) a QOS before set
        for qos_name in self.qos_order(qos, partition):
            q = self.qos_limits.get(qos_name)
            if q is None:
                continue
            mine: set[tuple[str, str]] = set()
            jobs = [
                ("qos", ("qos", qos_name), q.grp_jobs, "QOSGrpJobsLimit"),
                ("user", ("qos-user", qos_name, user), q.max_jobs_per_user, "QOSMaxJobsPerUserLimit"),
                ("account", ("qos-account", qos_name, account), q.max_jobs_per_account, "MaxJobsPerAccount"),
            ]
            for scope, key, limit, reason in jobs:
                if limit is not None:
                    budget = ((*key, "jobs"), limit, JOBS, reason)
                    (shadowed if (scope, "jobs") in taken else counts).append(budget)
                    mine.add((scope, "jobs"))
            for what, tres_name, (grp, per_user, per_account, _) in _TRES:
                for scope, key, limits, reason in (
                    ("qos", ("qos", qos_name), q.grp_tres, grp),
                    ("user", ("qos-user", qos_name, user), q.max_tres_per_user, per_user),
                    ("account", ("qos-account", qos_name, account), q.max_tres_per_account, per_account),
                ):
                    if tres_name in limits:
                        budget = ((*key, tres_name), limits[tres_name], what, reason)
                        (shadowed if (scope, tres_name) in taken else tres).append(budget)
                        mine.add((scope, tres_name))
            taken |= mine
        chain = self._chain(account, user, partition)
        for i, a in enumerate(chain):  # the user's association, then its accounts up the tree
            at = ("assoc", a.account, a.user, a.partition)
            if a.grp_jobs is not None:
                counts.append(((*at, "jobs"), a.grp_jobs, JOBS, "AssocGrpJobsLimit"))
            if i == 0 and a.user:  # MaxJobs: the nearest set, over the user's association's own jobs
                max_jobs = next((b.max_jobs for b in chain if b.max_jobs is not None), None)
                if max_jobs is not None:
                    counts.append(((*at, "own-jobs"), max_jobs, JOBS, "AssocMaxJobsLimit"))
            for what, name, (*_, assoc_grp) in _TRES:
                if name in a.grp_tres:
                    tres.append(((*at, name), a.grp_tres[name], what, assoc_grp))
        return (*counts, *tres), tuple(shadowed)

    def usage(self, jobs: Iterable[Job]) -> dict[tuple[str, ...], int]:
        """What the running and suspended jobs among ``jobs`` hold of each budget's key (a COMPLETING
        job's share is released when it starts completing) — of both QOS where the partition has its own,
        as slurmctld adds a running job to both, whichever sets a limit."""
        used: dict[tuple[str, ...], int] = {}
        for job in jobs:
            if job.state not in ("RUNNING", "SUSPENDED") or "COMPLETING" in job.state_flags:
                continue
            chosen, shadowed = self._budgets_of(
                job.qos, job.account, job.user, job.partitions[0] if job.partitions else ""
            )
            budgets = chosen + shadowed
            if not budgets:
                continue
            draw = (1, job.cpus, max(job.min_nodes, 1), job.memory_bytes, job.gpus)
            for key, _, what, _ in budgets:
                used[key] = used.get(key, 0) + draw[what]
        return used

    def reason(self, job: Job) -> str | None:
        """The per-job limit ``job`` is over (Slurm's reason name), or None."""
        asks = (
            max(job.cpus, job.tasks * job.cpus_per_task),
            job.tres_requested.get("mem", job.memory_bytes),
            job.tres_requested.get("node", job.min_nodes),
            job.tres_requested.get("gres/gpu", job.gpus),
            job.time_limit_seconds,
        )
        why = _over(0, self._qos_limits(job.qos, job.partitions[0] if job.partitions else ""), asks)
        if why is not None:
            return why
        return _over(1, self._association_limits(job), asks)

    def _qos_limits(self, qos: str, partition: str) -> PerJob:
        """The per-job QOS limits a job of ``qos`` in ``partition`` is held to: each the first QOS of
        :meth:`qos_order` that sets it (filled as jobs ask: many jobs share a QOS and partition)."""
        key = (qos, partition)
        hit = self._qos_resolved.get(key)
        if hit is None:
            limits: PerJob = (None, None, None, None, None)
            for name in self.qos_order(qos, partition):
                own = self.qos.get(name)
                if own is not None:
                    limits = _first_set(limits, own)
            hit = self._qos_resolved[key] = limits
        return hit


def _per_job(tres: Mapping[str, int], max_wall: int | None) -> PerJob:
    return (tres.get("cpu"), tres.get("mem"), tres.get("node"), tres.get("gres/gpu"), max_wall)


def _first_set(first: PerJob, then: PerJob) -> PerJob:
    """Each limit of ``first``, where it sets none ``then``'s."""
    a, b, c, d, e = (mine if mine is not None else theirs for mine, theirs in zip(first, then, strict=True))
    return (a, b, c, d, e)


def _over(side: int, limits: PerJob, asks: tuple[int, int, int, int, int | None]) -> str | None:
    """The first per-job limit (``side`` 0: a QOS's, 1: an association's) below what the job asks."""
    for limit, ask, reasons in zip(limits, asks, _PER_JOB_REASONS, strict=True):
        if limit is not None and ask is not None and ask > limit:
            return ("QOS", "Assoc")[side] + reasons[side]
    return None
