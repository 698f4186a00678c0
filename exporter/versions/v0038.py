"""API generation v0.0.38 (Slurm 22.05, ``openapi/v0.0.38`` plugin).

Shape differences from v0.0.40+ (checked against 22.05.8 payloads and its OpenAPI document):

* numbers are plain JSON numbers; "not set" is ``null`` (documented types are sometimes
  ``string`` for numbers, e.g. ``cpus_per_task``, so those accept int, numeric string or null);
  INFINITE limits of partitions are ``-1`` (``max_time_limit``, ``maximum_nodes_per_job``,
  ``maximum_cpus_per_node``); 0 times mean "not set"; any value ≥ NO_VAL is treated as unset.
* ``job_state`` is a string; node ``state`` is a lower-case base-state string plus a separate
  ``state_flags`` list; node ``features``/``active_features`` are comma strings;
  ``free_memory`` (not ``free_mem``).
* a job without ``--mem``/``--mem-per-cpu`` shows ``memory_per_node: null`` and
  ``memory_per_cpu: null`` (whole-node memory; ``tres_req_str`` has the node's memory).
* ``shared`` is a string (``"none"`` = exclusive), there is no ``exclusive`` field.
* partition ``flags`` is lower case (``["default"]``); the minimum node count is spelled
  ``"min nodes per job"`` in real answers (``min_nodes_per_job`` in the document; both accepted).
* the envelope has ``meta.Slurm.release`` (capital S), no cluster, no ``last_update``, and
  ``errors[]`` entries ``{error, error_number}``; no ``warnings``.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter import errors, slurmtext
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

VERSIONS = ("v0.0.38",)
NO_VAL = c.NO_VAL


def v(x: int | None) -> int | None:
    """A plain Slurm number: None for null, negative (INFINITE as -1) or ≥ NO_VAL."""
    if x is None or x < 0 or x >= NO_VAL:
        return None
    return x


def _num(x: int | str | None) -> int | None:
    if isinstance(x, str):
        x = int(x) if x.strip().isdigit() else None
    return v(x)


def _node_request(r: RawJob) -> NodeRequest | None:
    """What the job asks of sockets, cores and threads, and whom it shares nodes with; None for most."""
    shared = (r.shared or "").lower()
    request = NodeRequest(
        sockets_per_node=_num(r.sockets_per_node) or None,
        cores_per_socket=_num(r.cores_per_socket) or None,
        threads_per_core=_num(r.threads_per_core) or None,
        tasks_per_core=_num(r.tasks_per_core) or None,
        exclusive_to=shared if shared in ("user", "mcs") else None,
    )
    return request if any(x is not None for x in request) else None


class RawMeta(Struct, gc=False):
    Slurm: c.RawSlurm | None = None
    slurm: c.RawSlurm | None = None


class RawEnvelope(Struct, gc=False):
    meta: RawMeta | None = None
    errors: list[c.RawError] | None = None
    last_update: int | None = None


def to_envelope(r: RawEnvelope) -> Envelope:
    s = None
    if r.meta is not None:
        s = r.meta.Slurm if r.meta.Slurm is not None else r.meta.slurm
    return c.envelope(s, r.last_update, r.errors, None)


# ----------------------------------------------------------------------------------------- jobs


class RawJob(Struct, gc=False):
    job_id: int
    job_state: str
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_tasks: int | None = None
    array_task_string: str | None = None
    het_job_id: int | None = None
    het_job_offset: int | None = None
    name: str | None = None
    state_reason: str | None = None
    partition: str | None = None
    user_name: str | None = None
    user_id: int | None = None
    account: str | None = None
    qos: str | None = None
    priority: int | None = None
    node_count: int | None = None
    max_nodes: int | None = None
    cpus: int | None = None
    tasks: int | None = None
    cpus_per_task: int | str | None = None
    sockets_per_node: int | str | None = None
    cores_per_socket: int | str | None = None
    threads_per_core: int | str | None = None
    tasks_per_core: int | str | None = None
    memory_per_node: int | None = None
    memory_per_cpu: int | None = None
    tres_req_str: str | None = None
    tres_alloc_str: str | None = None
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    time_limit: int | None = None
    time_minimum: int | None = None
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    eligible_time: int | None = None
    nodes: str | None = None
    required_nodes: str | None = None
    excluded_nodes: str | None = None
    features: str | None = None
    dependency: str | None = None
    licenses: str | None = None
    resv_name: str | None = None
    shared: str | None = None
    admin_comment: str | None = None
    comment: str | None = None


class RawJobs(RawEnvelope, gc=False):
    jobs: list[RawJob] | UnsetType = UNSET


def convert_jobs(raw: list[RawJob], caches: c.Caches) -> list[Job]:
    intern = caches.strings.setdefault
    tres_info = caches.tres_info
    states_get = caches.states.get
    parts = caches.partitions
    arrays = caches.array
    gpus_of = caches.gpus
    epoch = c.epoch
    out: list[Job] = []
    append = out.append
    for r in raw:
        st = states_get(r.job_state)
        if st is None:
            st = caches.job_state(r.job_state)
        req, req_mem, req_gpus = tres_info(r.tres_req_str)
        alloc, alloc_mem, alloc_gpus = tres_info(r.tres_alloc_str)

        array_job_id = v(r.array_job_id) or None
        array_task_id = v(r.array_task_id)
        ats = r.array_task_string
        if ats:
            tasks_str, pending, throttle = arrays(ats)
        else:
            tasks_str, pending, throttle = "", 0, None
        if throttle is None:
            throttle = v(r.array_max_tasks) or None

        mem_node = v(r.memory_per_node)
        mem_cpu = v(r.memory_per_cpu) or None
        whole = mem_node == 0 or (mem_node is None and mem_cpu is None)

        tpn = r.tres_per_node or ""
        tpj = r.tres_per_job or ""
        gpn = gpus_of(tpn) if tpn else 0
        min_nodes = v(r.node_count) or 1
        # TRES strings carry gres/gpu only when AccountingStorageTRES lists it: fall back to the
        # per-job, then per-node request.
        gpus = alloc_gpus or req_gpus or (gpus_of(tpj) if tpj else 0) or gpn * min_nodes
        tasks = v(r.tasks) or 1
        cpt = _num(r.cpus_per_task) or 1
        cpus = v(r.cpus) or 0
        if cpus < tasks * cpt and st[0] == "PENDING":
            min_nodes = c.requested_nodes(min_nodes, cpus, tasks, cpt, req.get("node"))

        append(
            Job(
                job_id=r.job_id,
                array_job_id=array_job_id,
                array_task_id=array_task_id if array_job_id is not None else None,
                array_task_string=tasks_str,
                array_max_tasks=throttle if array_job_id is not None else None,
                array_pending_tasks=pending,
                het_job_id=r.het_job_id or None,
                het_job_offset=r.het_job_offset if r.het_job_id else None,
                name=intern(r.name, r.name) if r.name else "",
                state=st[0],
                state_flags=st[1],
                reason=intern(r.state_reason, r.state_reason) if r.state_reason else "None",
                partitions=parts(r.partition),
                user=intern(r.user_name, r.user_name) if r.user_name else "",
                user_id=r.user_id,
                account=intern(r.account, r.account) if r.account else "",
                qos=intern(r.qos, r.qos) if r.qos else "",
                priority=r.priority or 0,
                min_nodes=min_nodes,
                max_nodes=v(r.max_nodes) or None,
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
                time_limit_seconds=c.minutes(r.time_limit),
                time_min_seconds=c.minutes(r.time_minimum),
                submit_time=epoch(r.submit_time),
                start_time=epoch(r.start_time),
                end_time=epoch(r.end_time),
                eligible_time=epoch(r.eligible_time),
                nodes=intern(r.nodes, r.nodes) if r.nodes else "",
                required_nodes=r.required_nodes or "",
                excluded_nodes=r.excluded_nodes or "",
                features=intern(r.features, r.features) if r.features else "",
                dependency=r.dependency or "",
                licenses=intern(r.licenses, r.licenses) if r.licenses else "",
                reservation=intern(r.resv_name, r.resv_name) if r.resv_name else "",
                exclusive=(r.shared or "").lower() == "none",
                node_request=_node_request(r),
                admin_comment=r.admin_comment or "",
                comment=r.comment or "",
            )
        )
    return out


# ---------------------------------------------------------------------------------------- nodes


class RawNode(Struct, gc=False):
    name: str
    state: str = ""
    state_flags: tuple[str, ...] | None = None
    cpus: int | None = None
    alloc_cpus: int | None = None
    sockets: int | None = None
    cores: int | None = None
    threads: int | None = None
    real_memory: int | None = None
    alloc_memory: int | None = None
    free_memory: int | None = None
    gres: str | None = None
    gres_used: str | None = None
    partitions: tuple[str, ...] | None = None
    reason: str | None = None
    reason_set_by_user: str | None = None
    reason_changed_at: int | None = None
    features: str | None = None
    active_features: str | None = None
    address: str | None = None
    hostname: str | None = None
    weight: int | None = None
    cpu_load: int | None = None
    boot_time: int | None = None
    last_busy: int | None = None


class RawNodes(RawEnvelope, gc=False):
    nodes: list[RawNode] | UnsetType = UNSET


def convert_node(r: RawNode, caches: c.Caches) -> Node:
    alloc_cpus = v(r.alloc_cpus) or 0
    key = (r.state, r.state_flags, alloc_cpus > 0)
    st = caches.nstates.get(key)
    if st is None:
        st = caches.nstates[key] = slurmtext.node_state(r.state, r.state_flags or (), alloc_cpus=alloc_cpus)
    intern = caches.intern
    cpus = v(r.cpus) or 0
    return Node(
        name=r.name,
        state=st[0],
        flags=st[1],
        cpus=cpus,
        alloc_cpus=alloc_cpus,
        effective_cpus=cpus,
        sockets=r.sockets or 0,
        cores_per_socket=r.cores or 0,
        threads_per_core=r.threads or 1,
        memory_bytes=c.mb(r.real_memory) or 0,
        alloc_memory_bytes=c.mb(r.alloc_memory) or 0,
        free_memory_bytes=c.mb(r.free_memory),
        gpus=caches.gpus(r.gres),
        gpus_used=caches.gpus(r.gres_used),
        gres=r.gres or "",
        gres_used=r.gres_used or "",
        partitions=tuple(intern(p) for p in r.partitions or ()),
        reason=r.reason or "",
        reason_set_by=r.reason_set_by_user or "",
        reason_time=c.epoch(r.reason_changed_at),
        features=tuple(intern(f) for f in slurmtext.split_list(r.features)),
        active_features=tuple(intern(f) for f in slurmtext.split_list(r.active_features)),
        address=r.address or "",
        hostname=r.hostname or "",
        weight=r.weight if r.weight is not None else 1,
        cpu_load=c.node_cpu_load(r.cpu_load),
        boot_time=c.epoch(r.boot_time),
        last_busy=c.epoch(r.last_busy),
    )


# ----------------------------------------------------------------------------------- partitions


class RawPartition(Struct, gc=False):
    name: str
    flags: tuple[str, ...] | None = None
    nodes: str | None = None
    total_nodes: int | None = None
    total_cpus: int | None = None
    maximum_nodes_per_job: int | None = None
    min_nodes_per_job: int | None = None
    min_nodes_per_job_spaced: int | None = msgspec.field(default=None, name="min nodes per job")
    max_time_limit: int | None = None
    default_time_limit: int | None = None
    maximum_cpus_per_node: int | None = None
    default_memory_per_cpu: int | None = None
    default_memory_per_node: int | None = None
    maximum_memory_per_cpu: int | None = None
    maximum_memory_per_node: int | None = None
    priority_tier: int | None = None
    state: str | None = None
    tres: str | None = None
    qos: str | None = None


class RawPartitions(RawEnvelope, gc=False):
    partitions: list[RawPartition] | UnsetType = UNSET


def convert_partition(r: RawPartition) -> Partition:
    min_nodes = r.min_nodes_per_job if r.min_nodes_per_job is not None else r.min_nodes_per_job_spaced
    return Partition(
        name=r.name,
        state=(r.state or "UP").upper(),
        nodes=r.nodes or "",
        total_nodes=v(r.total_nodes) or 0,
        total_cpus=v(r.total_cpus) or 0,
        max_nodes_per_job=v(r.maximum_nodes_per_job),
        min_nodes_per_job=v(min_nodes) or 0,
        max_time_seconds=c.minutes(r.max_time_limit),
        default_time_seconds=c.minutes(r.default_time_limit),
        max_cpus_per_node=v(r.maximum_cpus_per_node),
        default_memory_per_cpu_bytes=c.pos_mb(v(r.default_memory_per_cpu)),
        default_memory_per_node_bytes=c.pos_mb(v(r.default_memory_per_node)),
        max_memory_per_cpu_bytes=c.pos_mb(v(r.maximum_memory_per_cpu)),
        max_memory_per_node_bytes=c.pos_mb(v(r.maximum_memory_per_node)),
        is_default=any(f.upper() == "DEFAULT" for f in r.flags or ()),
        priority_tier=r.priority_tier or 0,
        tres=r.tres or "",
        qos=r.qos or "",
    )


# ------------------------------------------------------------------- diag, licenses, reservations


class RawDiag(RawEnvelope, gc=False):
    statistics: c.RawStats[int] | UnsetType = UNSET


class RawLicenses(RawEnvelope, gc=False):
    licenses: list[c.RawLicense] | UnsetType = UNSET


class RawReservations(RawEnvelope, gc=False):
    reservations: list[c.RawReservation[int]] | UnsetType = UNSET


# -------------------------------------------------------------------------------------- adapter


class Adapter038(c.Adapter):
    """Translator for v0.0.38."""

    def shares(self, body: bytes) -> tuple[list[Share], Envelope]:
        """v0.0.38 has no ``/shares`` (slurmrestd 22.05 does not offer it)."""
        raise errors.VersionError(f"{self.version} has no /shares (v0.0.40 and later have)")

    def slurmdb_jobs(self, body: bytes) -> tuple[list[EndedJob], Envelope]:
        """Slurm 22.05's slurmdbd answers (``dbv0.0.38``) are not read."""
        raise errors.VersionError(f"{self.version}: slurmdbd's jobs are read from v0.0.40 on")

    def conf(self, body: bytes) -> tuple[SlurmConfig, Envelope]:
        """22.05 offers no configuration endpoint."""
        raise errors.VersionError(f"{self.version} has no /conf (v0.0.45 has)")

    def qos(self, body: bytes) -> tuple[list[QosLimits], Envelope]:
        """Not read from 22.05's slurmdbd answers."""
        raise errors.VersionError(f"{self.version}: slurmdbd's QOS are read from v0.0.40 on")

    def associations(self, body: bytes) -> tuple[list[Association], Envelope]:
        """Not read from 22.05's slurmdbd answers."""
        raise errors.VersionError(f"{self.version}: slurmdbd's associations are read from v0.0.40 on")

    schema = c.Schema(
        versions=VERSIONS,
        to_envelope=to_envelope,
        num=v,
        count=v,
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
