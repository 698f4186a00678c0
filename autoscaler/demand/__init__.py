"""The demand model: how many nodes each scaling target needs, from one snapshot. Pure, no I/O.

``compute_demand(snapshot, targets[, cache]) -> {target name: Demand}``. A **target** is a partition, or a
NodeSet: the nodes of a partition selected by a feature and/or a host list / prefix (:class:`Target`). A
:class:`ScanCache` passed from one snapshot to the next keeps what was read of each job record (the same
answer; a poll then reads only the records that changed).

The rules, per target (why each holds, the oracle mix that checks it against Slurm's own power saving,
and what it costs: ``docs/demand.md``):

1. **Nodes**: the partition's nodes, narrowed by ``nodeset_feature`` and ``node_names``.
2. **Busy** (the floor): nodes with allocated CPUs, ALLOCATED/MIXED/COMPLETING, or held by a running,
   suspended or completing job.
3. **Shape**: the most common node shape (effective CPUs, memory, GPUs); at zero ``Target.shape``; none →
   nothing counted. The partition's ``MaxCPUsPerNode`` caps its CPUs (and busy nodes' room).
4. **Pending jobs** of the partition — a job pending in several counts once, in the partition Slurm
   tries first (highest ``PriorityTier``, then the job's order) — are eligible or ignored by reason
   (:mod:`autoscaler.reasons`; not-yet-classified jobs by their own fields, :mod:`autoscaler.eligibility`:
   e.g. ``MaxMemPerLimit``, ``RequiredNodes``; a ``--time-min`` under the partition's MaxTime is no time
   bar). A ``--constraint`` must name the NodeSet's feature, and
   with nodes one node must have all ``&``-joined / any ``|``-joined features; at zero the same against
   ``Target.features`` (else only the NodeSet's feature is known).
5. **Arrays**: a record counts its pending tasks; a ``%N`` throttle lets ``N − running`` count.
   **Limits on what runs** (QOS/association ``GrpJobs``, ``MaxJobsPerUser``, ``MaxJobs``, ``GrpTRES``, ...,
   where slurmctld enforces them: :meth:`autoscaler.limits.JobLimits.budgets`): what running jobs leave
   of each budget is handed out in order, as the throttle is.
   **Heterogeneous jobs** (:mod:`~autoscaler.demand.hetjobs`): a job's components on distinct nodes, one
   job of Σ components' nodes, each node asking the most any component asks of one.
6. **Size** (:mod:`~autoscaler.demand.sizing`): nodes from CPUs, tasks × CPUs per task (a task never
   splits), memory (``--mem``, ``--mem-per-cpu``, TRES memory — a partition's DefMemPerGPU —, whole-node
   memory), GPUs (``--gpus[-per-node|-per-task]``, ``--mem-per-gpu``; more than a node has: a node each,
   up to the job's own maximum; ``Target.cpus_per_gpu`` / the cluster's DefCpuPerGPU for jobs without
   ``-c``), ``-N`` minimum (a range its minimum, or with ``Target.node_ranges="largest"`` what slurmctld
   takes from idle nodes; an ``--overcommit`` job's requested nodes, not Slurm's estimate),
   ``--spread-job``; on SMT nodes whole cores (``threads_per_core`` of the shape; ``--hint=nomultithread``,
   ``--threads-per-core``, ``--ntasks-per-core=1`` give a task cores of its own; ``--sockets-per-node`` /
   ``--cores-per-socket`` beyond the shape's layout never fit; ``--gpus-per-socket`` for each socket the
   job's CPUs span); exclusive jobs
   (``--exclusive``, ``OverSubscribe=EXCLUSIVE``) take whole nodes, ``--exclusive=user`` jobs share nodes
   with their own user's jobs only; above the partition's ``MaxMemPerCPU`` a job gets more CPUs, as
   slurmctld gives it when it schedules. A job that can never fit is ``too_large``, not counted.
7. **Packing** (:mod:`~autoscaler.demand.packing`): first fit in Slurm's scheduling order (priority, submit
   time, job id), a job's pieces on distinct nodes; not-yet-scheduled jobs (reason ``None``) first into
   busy nodes' free room. Beyond ~1000 runs of distinct jobs a bounded best fit (within 2·S + n_max),
   compiled where the package was built with a C compiler (``_bestfit.c``; the Python one the reference).
8. ``desired = clamp(busy + needed, min_nodes, max_nodes)``, never below busy.

Where the model's answer differs from Slurm's: Slurm picks the tightest run of *adjacent* nodes for a
multi-node job when powered-down nodes give it the choice; first fit ignores adjacency and may count fewer
nodes, which suffice (the ``multinode_after`` mix: Slurm resumes 9 of 12, on exactly the model's 6 it starts
every job — a live test of that bound). Beyond 2000 pending records, jobs of one
size are placed together at the first one's place (interleaved sizes may cost a node more).
``--exclusive=user|mcs`` (an MCS label taken as the user's): up to 500 jobs packed job by job with users
kept apart (exact first fit), beyond each such user's jobs on nodes of their own (may cost a node more);
such users' fresh jobs never go into busy nodes' room, nor any job into the room of a node another
user's such job holds (whose jobs hold a node is not read). A ``--nodelist`` naming fewer nodes than the
job needs counts only while its named nodes have the CPUs it asks free; a fresh job whose ``--exclude``
names a busy node is kept out of all busy rooms (``autoscaler.eligibility``).
"""

from __future__ import annotations

from autoscaler.demand.compute import compute_demand
from autoscaler.demand.queue import ScanCache
from autoscaler.demand.select import hosts
from autoscaler.demand.types import Demand, Misfit, NodeShape, Packing, Target, TooLarge

__all__ = [
    "Demand",
    "Misfit",
    "NodeShape",
    "Packing",
    "ScanCache",
    "Target",
    "TooLarge",
    "clear_caches",
    "compute_demand",
]


def clear_caches() -> None:
    """Forget the node lists of running jobs read so far (for benchmarks; a :class:`ScanCache` is its
    caller's)."""
    hosts.cache_clear()
