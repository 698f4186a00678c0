"""API generation v0.0.40 – v0.0.45 (Slurm 23.11 – 26.05, ``data_parser`` plugin).

Shape: numbers are ``{"set": bool, "infinite": bool, "number": N}``; ``job_state`` and node
``state`` are lists (base state + flags); every response carries ``meta.slurm``,
``errors[]``, ``warnings[]`` and most a ``last_update`` number struct.

Per-version differences that matter here (checked in the OpenAPI documents of 24.11.5/26.05.5):

* job ``exclusive`` (``["true"]``) exists only in v0.0.40/v0.0.41; v0.0.40–v0.0.44 carry
  ``shared`` (``["none"]`` = exclusive node use). v0.0.45 (26.05) reports ``shared: []`` even for
  an ``--exclusive`` job (seen in the lab: scontrol says ``Exclusive=NODE``) and has no other job
  field for it, so ``Job.exclusive`` is always False there.
* partition ``flags`` (``["DEFAULT", ...]``) exists only in v0.0.45; in v0.0.40–v0.0.44 the API
  does not say which partition is the default (``is_default`` stays False).
* diag ``bf_cycle_max`` is missing in v0.0.40.

All versions: ``tres_req_str``/``tres_alloc_str`` list ``gres/gpu`` only when
AccountingStorageTRES includes it, so ``Job.gpus`` falls back to ``tres_per_job``, then
``tres_per_node`` × nodes, ``tres_per_task`` × tasks, and ``--ntasks-per-gpu`` alone (``tasks_per_tres``
K, no ``tres_per_*``): ceil(tasks / K), as Slurm allocates.

Raw schemas declare ONLY the fields we use; msgspec skips the rest (e.g. ``job_resources``).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter import slurmtext
from exporter.model import (
    MIB,
    Association,
    EndedJob,
    Envelope,
    Job,
    Node,
    NodeRequest,
    Partition,
    QosLimits,
    Share,
    SlurmConfig,
)

from . import _common as c
from ._common import N, n
from .conf import decode_conf
from .limits import decode_associations, decode_qos
from .shares import decode_shares
from .slurmdb import decode_slurmdb_jobs

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


# ------------------------------------------------------------------------------------ envelope


class RawMeta(Struct, gc=False):
    slurm: c.RawSlurm | None = None


class RawEnvelope(Struct, gc=False):
    last_update: N | None = None
    meta: RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


def to_envelope(r: RawEnvelope) -> Envelope:
    s = r.meta.slurm if r.meta is not None else None
    return c.envelope(s, n(r.last_update), r.errors, r.warnings)


# ----------------------------------------------------------------------------------------- jobs


class RawJob(Struct, gc=False):
    job_id: int
    job_state: tuple[str, ...]
    array_job_id: N | None = None
    array_task_id: N | None = None
    array_max_tasks: N | None = None
    array_task_string: str | None = None
    het_job_id: N | None = None
    het_job_offset: N | None = None
    name: str | None = None
    state_reason: str | None = None
    partition: str | None = None
    user_name: str | None = None
    user_id: int | None = None
    account: str | None = None
    qos: str | None = None
    priority: N | None = None
    node_count: N | None = None
    max_nodes: N | None = None
    cpus: N | None = None
    tasks: N | None = None
    cpus_per_task: N | None = None
    sockets_per_node: N | None = None
    cores_per_socket: N | None = None
    threads_per_core: N | None = None
    tasks_per_core: N | None = None
    tasks_per_node: N | None = None
    tasks_per_tres: N | None = None
    memory_per_node: N | None = None
    memory_per_cpu: N | None = None
    tres_req_str: str | None = None
    tres_alloc_str: str | None = None
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    time_limit: N | None = None
    time_minimum: N | None = None
    submit_time: N | None = None
    start_time: N | None = None
    end_time: N | None = None
    eligible_time: N | None = None
    nodes: str | None = None
    required_nodes: str | None = None
    excluded_nodes: str | None = None
    features: str | None = None
    dependency: str | None = None
    licenses: str | None = None
    resv_name: str | None = None
    shared: tuple[str, ...] | None = None
    exclusive: tuple[str, ...] | None = None
    flags: tuple[str, ...] | None = None
    tres_per_task: str | None = None
    tres_per_socket: str | None = None
    memory_per_tres: str | None = None
    cpus_per_tres: str | None = None
    admin_comment: str | None = None
    comment: str | None = None


class RawJobs(RawEnvelope, gc=False):
    jobs: list[RawJob] | UnsetType = UNSET


def convert_jobs(raw: list[RawJob], caches: c.Caches) -> list[Job]:
    """Translate raw job records. Hot path: keep per-field work minimal."""
    intern = caches.strings.setdefault
    tres_info = caches.tres_info
    states_get = caches.states.get
    parts = caches.partitions
    arrays = caches.array
    gpus_of = caches.gpus
    out: list[Job] = []
    append = out.append
    for r in raw:
        st = states_get(r.job_state)
        if st is None:
            st = caches.job_state(r.job_state)
        req, req_mem, req_gpus = tres_info(r.tres_req_str)
        alloc, alloc_mem, alloc_gpus = tres_info(r.tres_alloc_str)

        x = r.array_job_id
        array_job_id = x.number if x is not None and x.set and not x.infinite and x.number else None
        x = r.array_task_id
        array_task_id = x.number if x is not None and x.set and not x.infinite else None
        ats = r.array_task_string
        if ats:
            tasks_str, pending, throttle = arrays(ats)
        else:
            tasks_str, pending, throttle = "", 0, None
        if throttle is None:
            x = r.array_max_tasks
            if x is not None and x.set and not x.infinite and x.number > 0:
                throttle = x.number

        x = r.memory_per_node
        mem_node = x.number if x is not None and x.set and not x.infinite else None
        x = r.memory_per_cpu
        mem_cpu = x.number if x is not None and x.set and not x.infinite and x.number else None
        mem_tres = r.memory_per_tres
        if mem_tres and mem_node and "gpu" in mem_tres:
            # --mem-per-gpu: Slurm keeps the per-GPU figure in memory_per_node; the job's total is its
            # TRES memory (GPUs × per-GPU memory), which sizing then uses
            mem_node = None
        whole = mem_node == 0 or (mem_node is None and mem_cpu is None and not mem_tres)

        tpn = r.tres_per_node or ""
        tpj = r.tres_per_job or ""
        gpn = gpus_of(tpn) if tpn else 0
        x = r.node_count
        min_nodes = x.number if x is not None and x.set and not x.infinite and x.number else 1
        # TRES strings carry gres/gpu only when AccountingStorageTRES lists it: fall back to the
        # per-job, then per-node request.
        tpt = r.tres_per_task or ""
        gpus = alloc_gpus or req_gpus or (gpus_of(tpj) if tpj else 0) or gpn * min_nodes
        flags = r.flags or ()
        if mem_node == 0 and req_mem and gpus and "EXACT_MEMORY_REQUESTED" not in flags:
            # no --mem: the partition's DefMemPerGPU (a GPU job's record shows memory 0, its TRES request
            # GPUs × that default; --mem=0 is marked EXACT_MEMORY_REQUESTED and has no TRES memory)
            mem_node, whole = None, False

        shared = r.shared
        excl = r.exclusive
        exclusive = bool((shared is not None and "none" in shared) or (excl is not None and "true" in excl))
        exclusive_to = _exclusive_to(shared, excl) if shared or excl else None
        x, y, z, w = r.sockets_per_node, r.cores_per_socket, r.threads_per_core, r.tasks_per_core
        node_request = (
            _node_request(r, gpus_of, exclusive_to)
            if (x is not None and x.set)
            or (y is not None and y.set)
            or (z is not None and z.set)
            or (w is not None and w.set)
            or r.tres_per_socket
            or exclusive_to is not None
            else None
        )  # inline: most jobs ask none of it, and this is the decoder's hot loop
        x = r.cpus_per_task
        cpt = x.number if x is not None and x.set and not x.infinite and x.number else 1
        x = r.tasks
        tasks = x.number if x is not None and x.set and not x.infinite and x.number else 1
        if not gpus and tpt:  # --gpus-per-task
            gpus = gpus_of(tpt) * tasks
        if not gpus and (x := r.tasks_per_tres) is not None and x.set and not x.infinite and x.number > 0:
            # --ntasks-per-gpu alone: no tres_per_* field says it, no TRES string without gres/gpu in
            # AccountingStorageTRES; Slurm allocates ceil(tasks / K) GPUs
            gpus = -(-tasks // x.number)
        x = r.cpus
        cpus = x.number if x is not None and x.set and not x.infinite else 0
        cpg = r.cpus_per_tres
        if cpg and gpus and "EXACT_CPU_COUNT_REQUESTED" not in flags:
            # DefCpuPerGPU (or --cpus-per-gpu): shown once slurmctld has tested the job on nodes
            cpus = max(cpus, gpus_of(cpg) * gpus)
        if cpus < tasks * cpt and st[0] == "PENDING":
            min_nodes = c.requested_nodes(min_nodes, cpus, tasks, cpt, req.get("node"))
        x = r.priority
        prio = x.number if x is not None and x.set and not x.infinite else 0
        x = r.time_limit
        tl = x.number * 60 if x is not None and x.set and not x.infinite and x.number else None
        x = r.time_minimum
        time_min = x.number * 60 if x is not None and x.set and not x.infinite and x.number else None
        x = r.max_nodes
        max_nodes = x.number if x is not None and x.set and not x.infinite and x.number else None
        exact_tasks = "EXACT_TASK_COUNT_REQUESTED" in flags
        node_range = (
            max_nodes is not None
            and max_nodes > min_nodes
            and "JOB_IMPLICIT_MAX_NODES" not in flags
            and "PREFER_MINIMUM_NODE_COUNT" not in flags  # --use-min-nodes
            and not (exact_tasks and max_nodes == tasks and req.get("node", 1) <= 1)
        )
        if max_nodes == min_nodes and st[0] == "PENDING":
            max_nodes = c.job_max_nodes(
                max_nodes,
                min_nodes,
                exact_tasks,
                cpt,
                (r.tasks_per_node is not None and r.tasks_per_node.set and r.tasks_per_node.number > 0)
                or (w is not None and w.set and w.number > 0),
            )
        x = r.submit_time
        submit = float(x.number) if x is not None and x.set and not x.infinite and x.number else None
        x = r.start_time
        start = float(x.number) if x is not None and x.set and not x.infinite and x.number else None
        x = r.end_time
        end = float(x.number) if x is not None and x.set and not x.infinite and x.number else None
        x = r.eligible_time
        elig = float(x.number) if x is not None and x.set and not x.infinite and x.number else None
        x = r.het_job_id
        het_job_id = x.number if x is not None and x.set and not x.infinite and x.number else None
        x = r.het_job_offset
        het_offset = x.number if x is not None and x.set and not x.infinite else None

        append(
            Job(
                job_id=r.job_id,
                array_job_id=array_job_id,
                array_task_id=array_task_id if array_job_id is not None else None,
                array_task_string=tasks_str,
                array_max_tasks=throttle if array_job_id is not None else None,
                array_pending_tasks=pending,
                het_job_id=het_job_id,
                het_job_offset=het_offset if het_job_id is not None else None,
                name=intern(r.name, r.name) if r.name else "",
                state=st[0],
                state_flags=st[1],
                reason=intern(r.state_reason, r.state_reason) if r.state_reason else "None",
                partitions=parts(r.partition),
                user=intern(r.user_name, r.user_name) if r.user_name else "",
                user_id=r.user_id,
                account=intern(r.account, r.account) if r.account else "",
                qos=intern(r.qos, r.qos) if r.qos else "",
                priority=prio,
                min_nodes=min_nodes,
                max_nodes=max_nodes,
                cpus=cpus,
                tasks=tasks,
                cpus_per_task=cpt,
                memory_per_node_bytes=mem_node * MIB if mem_node else None,
                memory_per_cpu_bytes=mem_cpu * MIB if mem_cpu else None,
                whole_node_memory=whole,
                memory_bytes=alloc_mem if alloc else req_mem,
                gpus_per_node=gpn,
                gpus=gpus,
                tres_requested=req,
                tres_allocated=alloc,
                tres_per_node=intern(tpn, tpn) if tpn else "",
                tres_per_job=intern(tpj, tpj) if tpj else "",
                time_limit_seconds=tl,
                time_min_seconds=time_min,
                submit_time=submit,
                start_time=start,
                end_time=end,
                eligible_time=elig,
                nodes=intern(r.nodes, r.nodes) if r.nodes else "",
                required_nodes=r.required_nodes or "",
                excluded_nodes=r.excluded_nodes or "",
                features=intern(r.features, r.features) if r.features else "",
                dependency=r.dependency or "",
                licenses=intern(r.licenses, r.licenses) if r.licenses else "",
                reservation=intern(r.resv_name, r.resv_name) if r.resv_name else "",
                exclusive=exclusive,
                node_request=node_request,
                spread="SPREAD_JOB" in flags,
                tasks_exact=exact_tasks,
                node_range=node_range,
                cpus_exact="EXACT_CPU_COUNT_REQUESTED" in flags,
                admin_comment=r.admin_comment or "",
                comment=r.comment or "",
            )
        )
    return out


# ---------------------------------------------------------------------------------------- nodes


class RawNode(Struct, gc=False):
    name: str
    state: tuple[str, ...] = ()
    cpus: int | None = None
    alloc_cpus: int | None = None
    effective_cpus: int | None = None
    sockets: int | None = None
    cores: int | None = None
    threads: int | None = None
    real_memory: int | None = None
    alloc_memory: int | None = None
    free_mem: N | None = None
    gres: str | None = None
    gres_used: str | None = None
    partitions: tuple[str, ...] | None = None
    reason: str | None = None
    reason_set_by_user: str | None = None
    reason_changed_at: N | None = None
    features: tuple[str, ...] | None = None
    active_features: tuple[str, ...] | None = None
    address: str | None = None
    hostname: str | None = None
    weight: int | None = None
    cpu_load: int | None = None
    boot_time: N | None = None
    last_busy: N | None = None


class RawNodes(RawEnvelope, gc=False):
    nodes: list[RawNode] | UnsetType = UNSET


def _set_number(x: N | None) -> int | None:
    """A job's optional count (``--threads-per-core``, ``--ntasks-per-core``, ...): None unless set, finite
    and positive."""
    return x.number if x is not None and x.set and not x.infinite and x.number > 0 else None


def _node_request(
    r: RawJob, gpus_of: Callable[[str | None], int], exclusive_to: str | None
) -> NodeRequest | None:
    """What the job asks of sockets, cores, threads and GPUs per socket, and whom it shares nodes with;
    None for most jobs (every count unset)."""
    s, c, t, k = r.sockets_per_node, r.cores_per_socket, r.threads_per_core, r.tasks_per_core
    tps = r.tres_per_socket
    request = NodeRequest(
        _set_number(s),
        _set_number(c),
        _set_number(t),
        _set_number(k),
        (gpus_of(tps) or None) if tps else None,
        exclusive_to,
    )
    return request if any(x is not None for x in request) else None


def _exclusive_to(shared: tuple[str, ...] | None, exclusive: tuple[str, ...] | None) -> str | None:
    """``user`` / ``mcs`` for ``--exclusive=user|mcs`` (``shared`` v0.0.40–44, ``exclusive`` v0.0.40/41)."""
    for flags in (shared, exclusive):
        if flags:
            for to in ("user", "mcs"):
                if to in flags:
                    return to
    return None


def convert_node(r: RawNode, caches: c.Caches) -> Node:
    alloc_cpus = r.alloc_cpus or 0
    key = (r.state, alloc_cpus > 0)
    st = caches.nstates.get(key)
    if st is None:
        st = caches.nstates[key] = slurmtext.node_state(r.state, alloc_cpus=alloc_cpus)
    intern = caches.intern
    cpus = r.cpus or 0
    return Node(
        name=r.name,
        state=st[0],
        flags=st[1],
        cpus=cpus,
        alloc_cpus=alloc_cpus,
        effective_cpus=r.effective_cpus if r.effective_cpus is not None else cpus,
        sockets=r.sockets or 0,
        cores_per_socket=r.cores or 0,
        threads_per_core=r.threads or 1,
        memory_bytes=c.mb(r.real_memory) or 0,
        alloc_memory_bytes=c.mb(r.alloc_memory) or 0,
        free_memory_bytes=c.mb(n(r.free_mem)),
        gpus=caches.gpus(r.gres),
        gpus_used=caches.gpus(r.gres_used),
        gres=r.gres or "",
        gres_used=r.gres_used or "",
        partitions=tuple(intern(p) for p in r.partitions or ()),
        reason=r.reason or "",
        reason_set_by=r.reason_set_by_user or "",
        reason_time=c.epoch(n(r.reason_changed_at)),
        features=tuple(intern(f) for f in r.features or ()),
        active_features=tuple(intern(f) for f in r.active_features or ()),
        address=r.address or "",
        hostname=r.hostname or "",
        weight=r.weight if r.weight is not None else 1,
        cpu_load=c.node_cpu_load(r.cpu_load),
        boot_time=c.epoch(n(r.boot_time)),
        last_busy=c.epoch(n(r.last_busy)),
    )


# ----------------------------------------------------------------------------------- partitions


class RawPartNodes(Struct, gc=False):
    configured: str | None = None
    total: int | None = None


class RawPartCpus(Struct, gc=False):
    total: int | None = None


class RawPartDefaults(Struct, gc=False):
    partition_memory_per_cpu: N | None = None
    partition_memory_per_node: N | None = None
    time: N | None = None


class RawPartMaximums(Struct, gc=False):
    cpus_per_node: N | None = None
    partition_memory_per_cpu: N | None = None
    partition_memory_per_node: N | None = None
    nodes: N | None = None
    time: N | None = None


class RawPartMinimums(Struct, gc=False):
    nodes: int | None = None


class RawPartState(Struct, gc=False):
    state: tuple[str, ...] = ()


class RawPartPriority(Struct, gc=False):
    tier: int | None = None


class RawPartTres(Struct, gc=False):
    configured: str | None = None


class RawPartQos(Struct, gc=False):
    assigned: str | None = None


class RawPartition(Struct, gc=False):
    name: str
    nodes: RawPartNodes | None = None
    cpus: RawPartCpus | None = None
    defaults: RawPartDefaults | None = None
    maximums: RawPartMaximums | None = None
    minimums: RawPartMinimums | None = None
    partition: RawPartState | None = None
    priority: RawPartPriority | None = None
    tres: RawPartTres | None = None
    flags: tuple[str, ...] | None = None
    qos: RawPartQos | None = None


class RawPartitions(RawEnvelope, gc=False):
    partitions: list[RawPartition] | UnsetType = UNSET


def convert_partition(r: RawPartition) -> Partition:
    nd = r.nodes or RawPartNodes()
    de = r.defaults or RawPartDefaults()
    mx = r.maximums or RawPartMaximums()
    states = r.partition.state if r.partition is not None else ()
    return Partition(
        name=r.name,
        state=states[0].upper() if states else "UP",
        nodes=nd.configured or "",
        total_nodes=nd.total or 0,
        total_cpus=(r.cpus.total or 0) if r.cpus is not None else 0,
        max_nodes_per_job=n(mx.nodes),
        min_nodes_per_job=(r.minimums.nodes or 0) if r.minimums is not None else 0,
        max_time_seconds=c.minutes(n(mx.time)),
        default_time_seconds=c.minutes(n(de.time)),
        max_cpus_per_node=n(mx.cpus_per_node),
        default_memory_per_cpu_bytes=c.pos_mb(n(de.partition_memory_per_cpu)),
        default_memory_per_node_bytes=c.pos_mb(n(de.partition_memory_per_node)),
        max_memory_per_cpu_bytes=c.pos_mb(n(mx.partition_memory_per_cpu)),
        max_memory_per_node_bytes=c.pos_mb(n(mx.partition_memory_per_node)),
        is_default=bool(r.flags) and any(f.upper() == "DEFAULT" for f in r.flags or ()),
        priority_tier=(r.priority.tier or 0) if r.priority is not None else 0,
        tres=(r.tres.configured or "") if r.tres is not None else "",
        qos=(r.qos.assigned or "") if r.qos is not None else "",
    )


# ------------------------------------------------------------------- diag, licenses, reservations


class RawDiag(RawEnvelope, gc=False):
    statistics: c.RawStats[N] | UnsetType = UNSET


class RawLicenses(RawEnvelope, gc=False):
    licenses: list[c.RawLicense] | UnsetType = UNSET


class RawReservations(RawEnvelope, gc=False):
    reservations: list[c.RawReservation[N]] | UnsetType = UNSET


# -------------------------------------------------------------------------------------- adapter


def _count(x: int | None) -> int | None:
    """Plain counts are taken as they are (no NO_VAL check, unlike v0.0.38)."""
    return x


class Adapter040(c.Adapter):
    """Translator for one of :data:`VERSIONS` (the generations share one shape)."""

    def shares(self, body: bytes) -> tuple[list[Share], Envelope]:
        """``/shares`` (:mod:`.shares`)."""
        return decode_shares(body)

    def slurmdb_jobs(self, body: bytes) -> tuple[list[EndedJob], Envelope]:
        """slurmdbd's ``/slurmdb/.../jobs`` (:mod:`.slurmdb`)."""
        return decode_slurmdb_jobs(body)

    def conf(self, body: bytes) -> tuple[SlurmConfig, Envelope]:
        """slurmctld's configuration (:mod:`.conf`; only v0.0.45 offers it)."""
        return decode_conf(body)

    def qos(self, body: bytes) -> tuple[list[QosLimits], Envelope]:
        """slurmdbd's ``/slurmdb/.../qos`` (:mod:`.limits`)."""
        return decode_qos(body)

    def associations(self, body: bytes) -> tuple[list[Association], Envelope]:
        """slurmdbd's ``/slurmdb/.../associations`` (:mod:`.limits`)."""
        return decode_associations(body)

    schema = c.Schema(
        versions=VERSIONS,
        to_envelope=to_envelope,
        num=n,
        count=_count,
        envelope_decoder=msgspec.json.Decoder(RawEnvelope),
        jobs_decoder=msgspec.json.Decoder(RawJobs),
        job_array_decoder=msgspec.json.Decoder(list[RawJob]),
        convert_jobs=convert_jobs,
        nodes_decoder=msgspec.json.Decoder(RawNodes),
        convert_node=convert_node,
        partitions_decoder=msgspec.json.Decoder(RawPartitions),
        convert_partition=convert_partition,
        diag_decoder=msgspec.json.Decoder(RawDiag),
        licenses_decoder=msgspec.json.Decoder(RawLicenses),
        reservations_decoder=msgspec.json.Decoder(RawReservations),
    )
