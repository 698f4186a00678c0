"""The version-neutral, immutable model of one Slurm cluster snapshot.

Every API version's JSON is translated into these structs by ``exporter.versions``; everything
downstream (collector, demand model, bridge) reads only these. Units are fixed here:

* memory in **bytes** (Slurm's ``M`` is MiB: 1 M = 1 048 576 bytes),
* times as **epoch seconds** (``float``), durations in **seconds**,
* ``None`` means "not set" or "unlimited/infinite" as each field's comment says,
* states are split into one upper-case base state plus a tuple of upper-case flags.

Structs are frozen and ``gc=False`` (they hold no reference cycles), so a 100k-job snapshot is
cheap to keep and to share between tasks without copying.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import NamedTuple

import msgspec

MIB = 1_048_576
"""Bytes per Slurm megabyte (Slurm's ``M`` suffix and every ``*_memory`` field are MiB)."""


class NodeRequest(NamedTuple):
    """What few jobs ask of a node beyond CPUs, memory and GPUs: its sockets, cores and threads
    (``scontrol``'s ``ReqB:S:C:T`` and ``NtasksPerN:B:S:C``), GPUs per socket, whom it shares a node with.
    None: not asked. (One field on :class:`Job`, None for most jobs: the demand model's hot loop reads
    one attribute for all of them.)"""

    sockets_per_node: int | None = None
    """``--sockets-per-node`` (``-B S``): only nodes with at least this many sockets."""
    cores_per_socket: int | None = None
    """``--cores-per-socket`` (``-B S:C``): only nodes whose sockets have at least this many cores."""
    threads_per_core: int | None = None
    """``--threads-per-core`` (``--hint=nomultithread`` sets 1): the threads of each core its tasks use."""
    tasks_per_core: int | None = None
    """``--ntasks-per-core``: at most this many tasks on one core."""
    gpus_per_socket: int | None = None
    """``--gpus-per-socket`` (``tres_per_socket`` ``gres/gpu:N``): GPUs for each socket the job uses."""
    exclusive_to: str | None = None
    """``user`` / ``mcs`` for ``--exclusive=user|mcs``: the job shares nodes only with jobs of its own user
    (MCS label)."""


class Job(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One job record as slurmrestd returns it.

    A pending job array comes as ONE record whose ``array_task_string`` lists the pending task ids;
    running or finished array tasks come as their own records (``array_task_id`` set).
    """

    job_id: int
    array_job_id: int | None = None
    """Array master job id; None for a job that is not part of an array."""
    array_task_id: int | None = None
    """This record's task id; None for a pending array record or a non-array job."""
    array_task_string: str = ""
    """Pending task ids of an array record, throttle removed, e.g. ``"3-20"``."""
    array_max_tasks: int | None = None
    """The ``%N`` throttle of the array; None when unthrottled."""
    array_pending_tasks: int = 0
    """Number of tasks named by ``array_task_string`` (0 for non-array records)."""
    het_job_id: int | None = None
    """The heterogeneous job this record is a component of (its first component's id); None otherwise."""
    het_job_offset: int | None = None
    """The component's place in its heterogeneous job, from 0."""
    name: str = ""
    state: str
    """Base state: PENDING, RUNNING, SUSPENDED, COMPLETED, CANCELLED, FAILED, TIMEOUT, ..."""
    state_flags: tuple[str, ...] = ()
    """Flags beside the base state: COMPLETING, CONFIGURING, REQUEUED, RESIZING, STAGE_OUT, ..."""
    reason: str = "None"
    """Slurm's state reason (Resources, Priority, Dependency, JobHeldUser, ...); "None" if none."""
    partitions: tuple[str, ...] = ()
    """Partition(s): a pending job may name several; a running job has exactly one."""
    user: str = ""
    user_id: int | None = None
    account: str = ""
    qos: str = ""
    priority: int = 0
    min_nodes: int = 1
    """Nodes requested (at least): Slurm's ``node_count`` (an overcommitting pending job's ``-N``, see
    :func:`exporter.versions._common.requested_nodes`); for a running job, nodes allocated."""
    max_nodes: int | None = None
    """Upper bound of a node range request; None when no upper bound was given."""
    cpus: int = 0
    """CPUs requested (pending) or allocated (running)."""
    tasks: int = 1
    cpus_per_task: int = 1
    memory_per_node_bytes: int | None = None
    """``--mem`` in bytes; None when memory is requested per CPU or not set."""
    memory_per_cpu_bytes: int | None = None
    """``--mem-per-cpu`` in bytes; None when not set."""
    whole_node_memory: bool = False
    """True when the job gets all memory of each node (``--mem=0`` or no memory default)."""
    memory_bytes: int = 0
    """Total memory requested/allocated across all nodes (from the TRES string), bytes."""
    gpus_per_node: int = 0
    """GPUs requested per node (``--gres=gpu:N`` / ``--gpus-per-node``)."""
    gpus: int = 0
    """GPUs requested (pending) or allocated (running) for the whole job."""
    tres_requested: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``tres_req_str`` parsed: {"cpu": 8, "mem": bytes, "node": 1, "gres/gpu": 2, ...}."""
    tres_allocated: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``tres_alloc_str`` parsed like ``tres_requested``; empty while pending."""
    tres_per_node: str = ""
    """Raw ``tres_per_node`` (e.g. ``gres/gpu:2``)."""
    tres_per_job: str = ""
    time_limit_seconds: int | None = None
    """Wall-time limit in seconds; None for unlimited/unset."""
    time_min_seconds: int | None = None
    """``--time-min`` in seconds: the least time limit the job accepts (Slurm may cut its limit down to it, or
    to a partition's MaxTime); None when not set."""
    submit_time: float | None = None
    start_time: float | None = None
    """Actual start (running) or expected start (pending, if Slurm estimated one), epoch seconds."""
    end_time: float | None = None
    eligible_time: float | None = None
    nodes: str = ""
    """Allocated nodes as a Slurm host-list expression (``c[1-2]``); "" while pending."""
    required_nodes: str = ""
    excluded_nodes: str = ""
    features: str = ""
    """Constraint expression (``--constraint``)."""
    dependency: str = ""
    """Slurm's dependency text, e.g. ``afterok:12(unfulfilled)``; "" when none (or all were met)."""
    licenses: str = ""
    """Licenses requested, as Slurm prints them (``matlab:2,fluent``); "" when none."""
    reservation: str = ""
    """The advanced reservation the job must run in (``--reservation``); "" when none."""
    exclusive: bool = False
    """True when the job asked for whole nodes (``--exclusive``)."""
    node_request: NodeRequest | None = None
    """What the job asks of sockets, cores, threads, GPUs per socket, and whom it shares nodes with; None
    when nothing (most jobs)."""
    spread: bool = False
    """True for ``--spread-job``: its tasks go to as many nodes as it may have (job flag ``SPREAD_JOB``)."""
    tasks_exact: bool = False
    """The task count was asked (``-n``; job flag ``EXACT_TASK_COUNT_REQUESTED``): one task a node at most, so
    it bounds the nodes slurmctld gives the job (else slurmctld adds a task for each node it gives)."""
    cpus_exact: bool = False
    """The CPUs per task were asked (``-c``; job flag ``EXACT_CPU_COUNT_REQUESTED``): a partition's
    ``DefCpuPerGPU`` does not apply."""
    node_range: bool = False
    """The job asked a node range (``-N min-max``, max above min): slurmctld aims at the maximum
    (``get_node_cnts``: ``req_nodes = max_nodes``) and takes fewer only where fewer are free. Not set with
    ``--use-min-nodes`` (flag ``PREFER_MINIMUM_NODE_COUNT``), nor for the maximum ``-n`` implies (v0.0.45's
    ``JOB_IMPLICIT_MAX_NODES``; before it, a maximum equal to the task count without ``-N`` above 1 is read
    as implied — ``-N1-4 -n4`` reads as ``-n4``)."""
    admin_comment: str = ""
    comment: str = ""

    @property
    def is_array(self) -> bool:
        return self.array_job_id is not None

    @property
    def task_count(self) -> int:
        """Jobs this record stands for: pending array tasks for an array record, else 1."""
        if self.array_task_id is None and self.array_task_string:
            return self.array_pending_tasks
        return 1


class Node(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One slurmd node."""

    name: str
    state: str
    """Base state: IDLE, ALLOCATED, MIXED, DOWN, ERROR, FUTURE, UNKNOWN."""
    flags: tuple[str, ...] = ()
    """DRAIN, DRAINING (derived: DRAIN and busy), COMPLETING, MAINTENANCE, RESERVED, NOT_RESPONDING,
    POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN, CLOUD, DYNAMIC_NORM, PLANNED, INVALID, ..."""
    cpus: int = 0
    alloc_cpus: int = 0
    effective_cpus: int = 0
    """CPUs usable by jobs (total minus specialised cores)."""
    sockets: int = 0
    """Sockets (0: not reported)."""
    cores_per_socket: int = 0
    """Cores of each socket (0: not reported)."""
    threads_per_core: int = 1
    """Hardware threads of each core (``ThreadsPerCore``): a CPU is one thread."""
    memory_bytes: int = 0
    """Configured RealMemory."""
    alloc_memory_bytes: int = 0
    free_memory_bytes: int | None = None
    """Free memory the node reported; None when unknown."""
    gpus: int = 0
    gpus_used: int = 0
    gres: str = ""
    gres_used: str = ""
    partitions: tuple[str, ...] = ()
    reason: str = ""
    reason_set_by: str = ""
    reason_time: float | None = None
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    address: str = ""
    hostname: str = ""
    weight: int = 1
    cpu_load: float | None = None
    """Load average × 1 (Slurm reports ×100; divided here)."""
    boot_time: float | None = None
    last_busy: float | None = None


class Partition(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One partition (queue)."""

    name: str
    state: str = "UP"
    """UP, DOWN, DRAIN, INACTIVE."""
    nodes: str = ""
    """Configured nodes as a host-list expression (or node set names)."""
    total_nodes: int = 0
    total_cpus: int = 0
    max_nodes_per_job: int | None = None
    """MaxNodes; None for unlimited."""
    min_nodes_per_job: int = 0
    max_time_seconds: int | None = None
    """MaxTime in seconds; None for infinite."""
    default_time_seconds: int | None = None
    max_cpus_per_node: int | None = None
    default_memory_per_cpu_bytes: int | None = None
    default_memory_per_node_bytes: int | None = None
    max_memory_per_cpu_bytes: int | None = None
    max_memory_per_node_bytes: int | None = None
    is_default: bool = False
    priority_tier: int = 0
    tres: str = ""
    qos: str = ""
    """The partition's QOS (``QOS=``): its limits apply to every job of the partition, before the job's own
    QOS's (after them where the job's QOS has ``OverPartQOS``); "" none."""


class Diag(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """slurmctld scheduler statistics (``sdiag``). Counters reset at ``stats_reset_time``/midnight."""

    server_thread_count: int = 0
    agent_queue_size: int = 0
    agent_count: int = 0
    agent_thread_count: int = 0
    dbd_agent_queue_size: int = 0
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_completed: int = 0
    jobs_canceled: int = 0
    jobs_failed: int = 0
    jobs_pending: int = 0
    jobs_running: int = 0
    schedule_cycle_last_seconds: float = 0.0
    schedule_cycle_max_seconds: float = 0.0
    schedule_cycle_mean_seconds: float = 0.0
    schedule_cycle_count: int = 0
    schedule_cycle_mean_depth: float = 0.0
    schedule_queue_length: int = 0
    backfill_cycle_last_seconds: float = 0.0
    backfill_cycle_max_seconds: float = 0.0
    backfill_cycle_mean_seconds: float = 0.0
    backfill_cycle_count: int = 0
    backfill_last_depth: int = 0
    backfill_last_depth_try: int = 0
    backfill_mean_depth: float = 0.0
    backfill_queue_length: int = 0
    backfilled_jobs: int = 0
    last_backfilled_jobs: int = 0
    backfill_active: bool = False
    rpc_counts: Mapping[str, int] = msgspec.field(default_factory=dict)
    """RPCs slurmctld served since ``stats_reset_time``, by message type (``REQUEST_UPDATE_JOB``, ...)."""
    rpc_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Seconds slurmctld spent serving them, by message type."""
    rpc_user_counts: Mapping[str, int] = msgspec.field(default_factory=dict)
    """RPCs slurmctld served since ``stats_reset_time``, by the user who sent them (every type)."""
    rpc_user_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Seconds slurmctld spent serving them, by user."""
    rpc_queued: Mapping[str, int] | None = None
    """RPCs waiting in slurmctld's RPC queue now, by message type (None: the API does not say, 22.05)."""
    rpc_dropped: Mapping[str, int] | None = None
    """RPCs slurmctld dropped from that queue since ``stats_reset_time``, by message type (None: not said)."""
    agent_pending_rpcs: Mapping[str, int] | None = None
    """Outgoing RPCs (to slurmd) waiting in the agent's queue now, by message type (None: not said)."""
    stats_time: float | None = None
    """When slurmctld produced these statistics (``req_time``)."""
    stats_reset_time: float | None = None
    """When the counters were last reset (``req_time_start``)."""

    @property
    def jobs_ended(self) -> int:
        """Jobs completed, cancelled or failed since the counters were reset (slurmctld counts a cancelled
        running job twice: cancelled, then completed)."""
        return self.jobs_completed + self.jobs_canceled + self.jobs_failed


class Share(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One association's fair-share standing (a row of ``sshare -l``; ``/shares``, v0.0.40+)."""

    account: str
    """The account (for a user's row: the account the user is in)."""
    user: str = ""
    """The user; empty on an account's row."""
    parent: str = ""
    """The account's parent account (empty for ``root``)."""
    partition: str = ""
    """Set only for a per-partition association."""
    raw_shares: int | None = None
    """Shares configured (``RawShares``); None when unset (``root``)."""
    normalized_shares: float | None = None
    """Its fraction of the parent's shares among its siblings (``NormShares``)."""
    raw_usage: float = 0.0
    """Decayed usage in billing-TRES-seconds (``RawUsage``)."""
    normalized_usage: float | None = None
    """``RawUsage`` over the cluster's (``NormUsage``)."""
    effective_usage: float | None = None
    """``EffectvUsage``."""
    fairshare: float | None = None
    """The fair-share factor, 0–1 (``FairShare``); None on an account's row with the classic algorithm."""
    level_fs: float | None = None
    """Fair Tree's level fair share (``LevelFS``); ``inf`` for an association without usage."""


class QosLimits(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One QOS's limits (``sacctmgr show qos``; ``/slurmdb/.../qos``, v0.0.40+). None / absent: not set.

    TRES limits map a TRES to its count as in :attr:`Job.tres`: ``cpu``, ``mem`` (bytes), ``node``,
    ``gres/gpu``, ``license/...``. Names are sacctmgr's. Minutes-based limits (``GrpTRESMins``,
    ``MaxTRESMinsPerJob``, ``GrpTRESRunMins``) are not read.
    """

    name: str
    priority: int = 0
    flags: tuple[str, ...] = ()
    grp_jobs: int | None = None
    """``GrpJobs``: jobs of this QOS running at once."""
    grp_submit_jobs: int | None = None
    """``GrpSubmitJobs``: jobs of this QOS pending or running at once."""
    grp_tres: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``GrpTRES``: what this QOS's running jobs hold together."""
    grp_wall_seconds: int | None = None
    """``GrpWall``."""
    max_jobs_per_user: int | None = None
    """``MaxJobsPerUser``: one user's running jobs."""
    max_submit_jobs_per_user: int | None = None
    """``MaxSubmitJobsPerUser``: one user's pending or running jobs."""
    max_jobs_per_account: int | None = None
    """``MaxJobsPerAccount``."""
    max_submit_jobs_per_account: int | None = None
    """``MaxSubmitJobsPerAccount``."""
    max_tres_per_user: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRESPerUser``: what one user's running jobs hold together."""
    max_tres_per_account: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRESPerAccount``."""
    max_tres_per_job: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRESPerJob`` (``MaxTRES``; ``node`` is ``MaxNodesPerJob``)."""
    max_tres_per_node: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRESPerNode``."""
    max_wall_seconds: int | None = None
    """``MaxWall``: one job's time limit."""


class Association(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One association's limits (``sacctmgr show assoc``; ``/slurmdb/.../associations``, v0.0.40+).

    Values as slurmdbd stores them: a user's association carries what it was given, including what
    sacctmgr copied from its account when it was made or its account was modified; a limit left unset
    is inherited from the parent at run time by slurmctld (not resolved here). None / absent: not set.
    TRES as in :class:`QosLimits`.
    """

    account: str
    user: str = ""
    """Empty on an account's association."""
    partition: str = ""
    """Set only for a per-partition association."""
    parent: str = ""
    """The account's parent account (an account's association; empty otherwise)."""
    qos: tuple[str, ...] = ()
    """QOS the association may use."""
    default_qos: str = ""
    grp_jobs: int | None = None
    """``GrpJobs``: running jobs of the association and its children together."""
    grp_submit_jobs: int | None = None
    """``GrpSubmit``."""
    grp_tres: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``GrpTRES``."""
    grp_wall_seconds: int | None = None
    """``GrpWall``."""
    max_jobs: int | None = None
    """``MaxJobs``: the association's running jobs."""
    max_submit_jobs: int | None = None
    """``MaxSubmit``."""
    max_tres_per_job: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRES`` (``node`` is ``MaxNodes``)."""
    max_tres_per_node: Mapping[str, int] = msgspec.field(default_factory=dict)
    """``MaxTRESPerNode``."""
    max_wall_seconds: int | None = None
    """``MaxWall``."""


class EndedJob(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A job as slurmdbd recorded it (``/slurmdb/.../jobs``, what ``sacct -X`` shows), for accounting."""

    job_id: int
    state: str
    """Base state: COMPLETED, FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, ... (or
    PENDING/RUNNING for a job not ended yet)."""
    partition: str = ""
    account: str = ""
    user: str = ""
    submit_time: float | None = None
    start_time: float | None = None
    """None when it never started."""
    end_time: float | None = None
    elapsed_seconds: int = 0
    cpus: int = 0
    """CPUs allocated."""
    memory_bytes: int = 0
    """Memory allocated."""
    gpus: int = 0
    """GPUs allocated (``gres/gpu`` TRES)."""
    cpu_seconds_used: float = 0.0
    """CPU time its steps used, user and system (sacct's ``TotalCPU``)."""
    memory_bytes_used: int | None = None
    """Memory its largest step used: the step's tasks' peak RSS summed (sacct's ``TRESUsageInTot`` mem);
    None when no step was sampled (it ended before ``JobAcctGatherFrequency``'s first sample)."""


class License(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    name: str
    total: int = 0
    used: int = 0
    free: int = 0
    reserved: int = 0
    remote: bool = False


class Reservation(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    name: str
    nodes: str = ""
    node_count: int = 0
    core_count: int = 0
    start_time: float | None = None
    end_time: float | None = None
    partition: str = ""
    flags: tuple[str, ...] = ()
    users: str = ""
    accounts: str = ""


class SlurmConfig(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What of slurmctld's configuration (``scontrol show config``) the snapshot keeps: from
    ``/slurm/v0.0.45/conf`` (Slurm 26.05+; older slurmrestd offer none: no configuration, None)."""

    accounting_storage_enforce: tuple[str, ...] = ()
    """``AccountingStorageEnforce``, lower case (``associations``, ``limits``, ``qos``, ``safe``, ...): which
    association and QOS limits slurmctld enforces (none without ``limits``/``qos``)."""
    priority_type: str = ""
    """``PriorityType``, e.g. ``priority/multifactor``."""
    select_type_parameters: tuple[str, ...] = ()
    """``SelectTypeParameters``, upper case as Slurm prints them (``CR_CORE_MEMORY``, ...)."""
    default_cpus_per_gpu: int = 0
    """The cluster-wide ``JobDefaults=DefCpuPerGPU`` (0: none): CPUs for each GPU of a job that gave no
    ``-c``, in a partition without its own (a partition's ``JobDefaults`` is in no slurmrestd answer)."""


class Envelope(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What every slurmrestd answer carries beside its data."""

    last_update: float | None = None
    """Slurm's ``last_update`` of this data set (epoch seconds); the next ``update_time``."""
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    slurm_version: str = ""
    """Slurm release, e.g. ``"26.05.5"``."""
    cluster: str = ""


ENDPOINTS = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations")
"""The endpoints one poll reads, in the order the snapshot lists them."""
OPTIONAL_ENDPOINTS = ("shares", "qos", "associations", "conf")
"""Fetched only when a setting asks for their data (``--metrics-fairshare``, ``--accounting``) or, ``conf``,
where slurmrestd offers it."""


class Snapshot(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One consistent picture of the cluster, swapped in whole by the poller."""

    taken_at: float
    """When the poll that built this snapshot finished, epoch seconds (or, published while a poll's
    single-job reads went on, when the jobs read so far were folded in)."""
    api_version: str
    slurm_version: str = ""
    cluster: str = ""
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    diag: Diag | None = None
    licenses: tuple[License, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    shares: tuple[Share, ...] = ()
    """Fair share by association (only with ``--metrics-fairshare``; fetched every ``--shares-interval``)."""
    qos: tuple[QosLimits, ...] = ()
    """Every QOS's limits (with ``--accounting`` where slurmdbd is served; every ``--limits-interval``)."""
    associations: tuple[Association, ...] = ()
    """Every association's limits (as :attr:`qos`)."""
    config: SlurmConfig | None = None
    """slurmctld's configuration where slurmrestd serves it (26.05+), read every 5 minutes."""
    fetched_at: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Per endpoint: when its data was last fetched (or confirmed unchanged), epoch seconds."""
    requested_at: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Per endpoint: when the request that fetched (or confirmed) its data was sent, epoch seconds — the
    data holds everything Slurm accepted before then (a 10,000-job /jobs takes seconds to answer)."""
    listed_at: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Per endpoint: when the request of its last full listing was sent, epoch seconds. Jobs kept up to
    date from ``/jobs/state`` (:mod:`exporter.jobsync`) have every state as of ``requested_at``; what
    changes without the state (a pending job's reason or priority) is read again by the sweep, within
    its period (``slurm_exporter_poll_jobs_sweep_period_seconds``), or by a listing."""
    last_update: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Per endpoint: Slurm's ``last_update`` of the data held."""
    dropped: Mapping[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    """Per endpoint whose data held is partly invalid: the partitions named by the records dropped from it
    as impossible (:mod:`exporter.validate`), sorted; ``""`` stands for a record naming no partition (read
    as any). Absent for endpoints whose every record was valid."""

    jobs_unread: int = 0
    """Jobs ``/jobs/state`` lists whose records are not read yet (a start without a full listing, a mass
    change: :attr:`exporter.pollstate.JobsSync.backlog`): the jobs data is partial while it is not 0 —
    the demand service holds scale-down, the bridge waits (:attr:`jobs_as_of`)."""

    @property
    def jobs_as_of(self) -> float:
        """The jobs hold everything Slurm accepted before this: their request's start (else their answer's
        time, else 0 without jobs data)."""
        return self.requested_at.get("jobs", self.fetched_at.get("jobs", 0.0))


def wall_time() -> float:
    """Epoch seconds now: the default clock of the poller, the server and the demand service. Looks
    ``time.time`` up on every call, so a frozen test clock (freezegun) reaches every default."""
    return time.time()
