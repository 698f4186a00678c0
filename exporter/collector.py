"""Snapshot → Prometheus metric families (pure: no I/O, nothing kept between scrapes).

:func:`snapshot_families` builds fresh families from one snapshot (the HTTP side renders them once per
snapshot, :mod:`exporter.server`), :func:`health_families` the exporter's own from the poller's status.
The metric surface is built from small pure functions (snapshot → families), each documented with the
rules it applies:

* units are base units: bytes, seconds, epoch seconds;
* state and flag label values are lower case; pending reasons keep Slurm's spelling (Resources...);
* jobs count tasks: a pending array record counts ``task_count`` jobs, and its per-task CPUs,
  memory, GPUs and nodes are multiplied by ``task_count`` in the pending-demand families;
* a whole-node memory request counts the memory of the partition's largest node per node requested;
* counters that slurmctld resets (``sdiag``) are gauges, and their HELP says so.

Cardinality: per-node series are on by default, per-user/per-account series and node reasons off.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from .aggregate import Sums, aggregate_jobs
from .ctldstats import DEFAULT_RPC_TOP_USERS, diag_families, rpc_families
from .fairshare import fairshare_families
from .gresfamilies import gres_families
from .model import License, Node, Reservation, Snapshot
from .pollstate import PollStatus
from .queueage import queue_age_families
from .validate import JOB_REASONS, NODE_REASONS

REFUSAL_REASONS = {"jobs": JOB_REASONS, "nodes": NODE_REASONS}
"""The reasons every refused-records series is exported for (0 until one is refused: a counter that
appears at 3 would be read by ``increase()`` as no increase)."""


def health_families(snap: Snapshot | None, status: PollStatus, now: float) -> Iterable[Metric]:
    """Exporter health: up, poll durations and errors per endpoint, snapshot age, info."""
    up = GaugeMetricFamily(
        "slurm_up",
        "1 while slurmrestd's jobs, nodes and partitions were all fetched (or confirmed unchanged) within "
        "--up-max-age seconds, else 0 (also during a poll stuck on a frozen slurmrestd)",
    )
    up.add_metric([], 1.0 if status.up(now) else 0.0)
    yield up
    data_age = GaugeMetricFamily(
        "slurm_exporter_data_age_seconds",
        "Seconds since the oldest of the jobs, nodes and partitions data was fetched or confirmed unchanged",
    )
    age_now = status.data_age(now)
    if age_now is not None:
        data_age.add_metric([], age_now)
    yield data_age
    duration = GaugeMetricFamily(
        "slurm_exporter_poll_duration_seconds",
        "Seconds the last fetch of each slurmrestd endpoint took (decode included)",
        labels=["endpoint"],
    )
    errors = CounterMetricFamily(
        "slurm_exporter_poll_errors",
        "Failed fetches of slurmrestd endpoints, by endpoint and error kind",
        labels=["endpoint", "kind"],
    )
    dropped = CounterMetricFamily(
        "slurm_exporter_records_dropped",
        "Records slurmrestd sent with impossible values (negative CPUs, job id below 1, a count that is "
        "not an integer, ...) and that were refused, by endpoint and reason (the field, or undecodable)",
        labels=["endpoint", "reason"],
    )
    refused = GaugeMetricFamily(
        "slurm_exporter_records_refused",
        "Records refused for impossible values in the data held now, by endpoint and reason: the targets "
        "of the partitions they name are held (never lowered) while this is above 0",
        labels=["endpoint", "reason"],
    )
    fetched = GaugeMetricFamily(
        "slurm_exporter_endpoint_fetched_timestamp_seconds",
        "When each endpoint's data in the current snapshot was fetched or confirmed unchanged",
        labels=["endpoint"],
    )
    for st in (status.negotiation, *status.endpoints.values()):
        duration.add_metric([st.name], st.last_duration)
        for kind, n in sorted(st.errors.items()):
            errors.add_metric([st.name, kind], float(n))
        if st.fetched_at is not None:
            fetched.add_metric([st.name], st.fetched_at)
        reasons = REFUSAL_REASONS.get(st.name, ())
        for reason in sorted({*reasons, *st.dropped_by}):
            dropped.add_metric([st.name, reason], float(st.dropped_by.get(reason, 0)))
            n, _ = st.refused_now.get(reason, (0, ""))
            refused.add_metric([st.name, reason], float(n))
    yield duration
    yield errors
    yield dropped
    yield refused
    yield fetched
    yield from jobs_sync_families(status)
    last = GaugeMetricFamily(
        "slurm_exporter_last_success_timestamp_seconds", "When the current snapshot was taken (epoch seconds)"
    )
    age = GaugeMetricFamily(
        "slurm_exporter_snapshot_age_seconds", "Seconds since the current snapshot was taken"
    )
    if snap is not None:
        last.add_metric([], snap.taken_at)
        age.add_metric([], max(0.0, now - snap.taken_at))
    yield last
    yield age
    info = InfoMetricFamily(
        "slurm_exporter",
        "Slurm cluster name (slurm_cluster: the label cluster is left to Prometheus target labels), Slurm "
        "release and slurmrestd API version in use",
    )
    if snap is not None:
        info.add_metric(
            [],
            {
                "slurm_cluster": snap.cluster,
                "slurm_version": snap.slurm_version,
                "api_version": snap.api_version,
            },
        )
    yield info


def jobs_sync_families(status: PollStatus) -> Iterable[Metric]:
    """How the jobs are kept: full ``/jobs`` listings by why, incremental fetches and the requests they
    made (:mod:`exporter.jobsync`)."""
    sync = status.jobs_sync
    mode = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_incremental",
        "1 when the last jobs fetch was incremental (/jobs/state and the jobs whose state moved), 0 when it "
        "listed /jobs in full",
    )
    mode.add_metric([], 1.0 if sync.incremental else 0.0)
    yield mode
    listings = CounterMetricFamily(
        "slurm_exporter_poll_jobs_listings",
        "Full /jobs listings, by why: first, period, changes (more changed jobs than --jobs-changes-limit), "
        "requested, off (incremental reads off or not offered); one read beside the polls is counted when "
        "its data is taken",
        labels=["reason"],
    )
    for reason, n in sorted(sync.full_listings.items()):
        listings.add_metric([reason], float(n))
    yield listings
    incremental = CounterMetricFamily(
        "slurm_exporter_poll_jobs_incremental_fetches", "Incremental jobs fetches that succeeded"
    )
    incremental.add_metric([], float(sync.incremental_fetches))
    yield incremental
    reads = CounterMetricFamily(
        "slurm_exporter_poll_jobs_reads",
        "Requests the incremental jobs fetches sent, by endpoint: jobs/state (every job's state) and job "
        "(one job's records)",
        labels=["endpoint"],
    )
    reads.add_metric(["jobs/state"], float(sync.state_reads))
    reads.add_metric(["job"], float(sync.job_reads))
    yield reads
    yield CounterMetricFamily(
        "slurm_exporter_poll_jobs_states_reused",
        "Incremental fetches that used the last /jobs/state answer again while a backlog of changed jobs "
        "drained (it costs slurmrestd ~16 s at 100,000 jobs: read again after 10 times what it took)",
        value=float(sync.states_reused),
    )
    asks = CounterMetricFamily(
        "slurm_exporter_poll_jobs_states_asks",
        "Incremental fetches by what they asked /jobs/state: whole (every job), some (beyond "
        "--jobs-states-targeted-min jobs: the records that can have moved for what /diag's job counters "
        "counted), none (no counter moved)",
        labels=["what"],
    )
    for what in ("whole", "some", "none"):
        asks.add_metric([what], float(sync.states_asks[what]))
    yield asks
    yield GaugeMetricFamily(
        "slurm_exporter_poll_jobs_counts_unaccounted",
        "1 while a job count /diag moved was not accounted for by the records asked about: the jobs are "
        "whole only as of before it, until the next whole /jobs/state answer",
        value=float(sync.unaccounted),
    )
    rereads = CounterMetricFamily(
        "slurm_exporter_poll_jobs_rereads",
        "Jobs read again whatever their state, by why: follow (a fresh reason about to move), recheck "
        "(after a job-changing RPC: its senders' jobs, then the newest first), sweep (every job in turn)",
        labels=["reason"],
    )
    for reason in ("follow", "recheck", "sweep"):
        rereads.add_metric([reason], float(sync.rereads[reason]))
    yield rereads
    yield CounterMetricFamily(
        "slurm_exporter_poll_jobs_partial_snapshots",
        "Snapshots published while one poll's single-job reads went on (a burst of changes): the jobs "
        "read so far in, the others as before",
        value=float(sync.partial_snapshots),
    )
    recheck = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_recheck_left",
        "Jobs left to read again after job-changing RPCs (hold, release, scontrol update) not yet found",
    )
    recheck.add_metric([], float(len(sync.recheck)))
    yield recheck
    sweep = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_sweep_period_seconds",
        "Seconds one turn of the sweep takes (jobs not yet ended / --jobs-sweep-rate): a change no state "
        "and no RPC tells, such as a pending job's reason, is current within it",
    )
    sweep.add_metric([], sync.sweep_period)
    yield sweep
    unreadable = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_state_entries_unreadable",
        "Entries of the last /jobs/state whose job id could not be read (no job is dropped while any are)",
    )
    unreadable.add_metric([], float(sync.unreadable_entries))
    yield unreadable
    changed = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_changed", "Jobs the last incremental fetch read one by one"
    )
    changed.add_metric([], float(sync.last_changed))
    yield changed
    backlog = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_backlog",
        "Changed jobs left for the next polls (more than --jobs-changes-limit changed while a full listing "
        "was not allowed, or not read yet by a start without a listing): the jobs data is partial",
    )
    backlog.add_metric([], float(sync.backlog))
    yield backlog
    yield GaugeMetricFamily(
        "slurm_exporter_poll_jobs_unlisted",
        "1 when the poller started without a full /jobs listing (more jobs than --jobs-listing-max) and "
        "reads the jobs one by one instead",
        value=1.0 if sync.unlisted else 0.0,
    )
    listed = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_listed_timestamp_seconds",
        "When the last full /jobs listing was requested",
    )
    if sync.listed_at is not None:
        listed.add_metric([], sync.listed_at)
    yield listed
    listing = GaugeMetricFamily(
        "slurm_exporter_poll_jobs_listing_duration_seconds", "Seconds the last full /jobs listing took"
    )
    listing.add_metric([], sync.listing_duration)
    yield listing


# ------------------------------------------------------------------------------------------------ jobs

UNAVAILABLE_NODE_FLAGS = frozenset({"DRAIN", "FAIL"})
"""Flags that make a node's free resources "other" rather than idle (as ``sinfo`` CPUsState does)."""

UNAVAILABLE_NODE_STATES = frozenset({"DOWN"})

_NO_PARTITION: tuple[str, ...] = ("",)
_RESOURCES = ("cpus", "memory_bytes", "gpus", "nodes")


_JOB_RESOURCE_HELP = {
    "cpus": ("CPUs", ""),
    "memory_bytes": ("Memory", " in bytes"),
    "gpus": ("GPUs", ""),
    "nodes": ("Nodes", " (summed over jobs: a node shared by two jobs counts twice)"),
}


def _resource_families(
    prefix: str,
    label: str,
    allocated: Sums,
    pending: Sums,
    keys: Iterable[str],
    what: str,
) -> Iterable[Metric]:
    """``<prefix>_allocated_<res>`` and ``<prefix>_pending_<res>`` gauges, one series per key."""
    keys = sorted(set(keys) | allocated.keys() | pending.keys())
    zero = (0.0, 0.0, 0.0, 0.0)
    for i, res in enumerate(_RESOURCES):
        noun, unit = _JOB_RESOURCE_HELP[res]
        fam = GaugeMetricFamily(
            f"{prefix}_allocated_{res}",
            f"{noun} allocated to running, suspended and completing jobs{unit}, by {what}",
            labels=[label],
        )
        for k in keys:
            fam.add_metric([k], float(allocated.get(k, zero)[i]))
        yield fam
    pend_help = {
        "cpus": "CPUs requested by pending jobs, by {w}; a pending array counts each pending task",
        "memory_bytes": (
            "Memory requested by pending jobs in bytes, by {w}; a pending array counts each pending task; "
            "a whole-node request (--mem=0) counts the memory of the partition's largest node per node"
        ),
        "gpus": "GPUs requested by pending jobs, by {w}; a pending array counts each pending task",
        "nodes": (
            "Nodes (minimum) requested by pending jobs, by {w}; a pending array counts each pending task"
        ),
    }
    for i, res in enumerate(_RESOURCES):
        fam = GaugeMetricFamily(f"{prefix}_pending_{res}", pend_help[res].format(w=what), labels=[label])
        for k in keys:
            fam.add_metric([k], float(pending.get(k, zero)[i]))
        yield fam


def job_families(snap: Snapshot, *, per_account: bool = False, per_user: bool = False) -> Iterable[Metric]:
    """Jobs by partition × state and pending reason, allocated and pending resources by partition;
    optionally the same by account and by user."""
    agg = aggregate_jobs(snap, per_account=per_account, per_user=per_user)
    known = [p.name for p in snap.partitions]
    jobs = GaugeMetricFamily(
        "slurm_jobs",
        "Jobs by partition and base state (lower case); a pending array counts each pending task; "
        "a job pending in several partitions counts in each",
        labels=["partition", "state"],
    )
    counts = dict(agg.partition.jobs)
    for p in known:  # pending and running always present for known partitions
        counts.setdefault((p, "PENDING"), 0)
        counts.setdefault((p, "RUNNING"), 0)
    for (p, s), n in sorted(counts.items()):
        jobs.add_metric([p, s.lower()], float(n))
    yield jobs
    reasons = GaugeMetricFamily(
        "slurm_jobs_pending",
        "Pending jobs by partition and Slurm's pending reason (Resources, Priority, Dependency, ...); "
        "a pending array counts each pending task",
        labels=["partition", "reason"],
    )
    for (p, r), n in sorted(agg.reasons.items()):
        reasons.add_metric([p, r], float(n))
    yield reasons
    totals = agg.partition
    yield from _resource_families(
        "slurm_jobs", "partition", totals.allocated, totals.pending, known, "partition"
    )
    for label, by in (("account", agg.account), ("user", agg.user)):
        if by is None:
            continue
        fam = GaugeMetricFamily(
            f"slurm_{label}_jobs",
            f"Jobs by {label} and base state (lower case); a pending array counts each pending task",
            labels=[label, "state"],
        )
        for (k, s), n in sorted(by.jobs.items()):
            fam.add_metric([k, s.lower()], float(n))
        yield fam
        yield from _resource_families(f"slurm_{label}", label, by.allocated, by.pending, (), label)


# ----------------------------------------------------------------------------------------------- nodes


def node_available(node: Node) -> bool:
    """False for a node whose free resources are not schedulable: base DOWN, or DRAIN/FAIL flagged
    (``sinfo`` counts their free CPUs as "other", not idle). Powered-down cloud nodes are available."""
    return node.state not in UNAVAILABLE_NODE_STATES and not UNAVAILABLE_NODE_FLAGS.intersection(node.flags)


def node_families(snap: Snapshot, *, per_node: bool = True, node_reasons: bool = False) -> Iterable[Metric]:
    """Nodes by partition × base state and × flag, partitions' resources, and per-node series."""
    by_state: dict[tuple[str, str], int] = {}
    by_flag: dict[tuple[str, str], int] = {}
    # partition → [cpus, alloc cpus, idle cpus, mem, alloc mem, idle mem, gpus, alloc gpus, idle gpus, nodes]
    res: dict[str, list[int]] = {}
    for n in snap.nodes:
        avail = node_available(n)
        idle_cpus = max((n.effective_cpus or n.cpus) - n.alloc_cpus, 0) if avail else 0
        idle_mem = max(n.memory_bytes - n.alloc_memory_bytes, 0) if avail else 0
        idle_gpus = max(n.gpus - n.gpus_used, 0) if avail else 0
        state = n.state.lower()
        flags = [f.lower() for f in n.flags]
        for p in n.partitions or _NO_PARTITION:
            k = (p, state)
            by_state[k] = by_state.get(k, 0) + 1
            for f in flags:
                k = (p, f)
                by_flag[k] = by_flag.get(k, 0) + 1
            r = res.get(p)
            if r is None:
                r = res[p] = [0] * 10
            r[0] += n.cpus
            r[1] += n.alloc_cpus
            r[2] += idle_cpus
            r[3] += n.memory_bytes
            r[4] += n.alloc_memory_bytes
            r[5] += idle_mem
            r[6] += n.gpus
            r[7] += n.gpus_used
            r[8] += idle_gpus
            r[9] += 1

    fam = GaugeMetricFamily(
        "slurm_nodes",
        "Nodes by partition and base state (idle, mixed, allocated, down, ...; lower case); "
        "a node in several partitions counts in each",
        labels=["partition", "state"],
    )
    for (p, s), c in sorted(by_state.items()):
        fam.add_metric([p, s], float(c))
    yield fam
    fam = GaugeMetricFamily(
        "slurm_nodes_flagged",
        "Nodes by partition and state flag (drain, draining, maintenance, reserved, not_responding, "
        "powered_down, planned, cloud, ...; lower case); a node has any number of flags",
        labels=["partition", "flag"],
    )
    for (p, f), c in sorted(by_flag.items()):
        fam.add_metric([p, f], float(c))
    yield fam
    yield from partition_families(snap, res)
    if per_node:
        yield from per_node_families(snap)
    if node_reasons:
        yield from node_reason_families(snap)


def partition_families(snap: Snapshot, res: dict[str, list[int]]) -> Iterable[Metric]:
    """Partition resources: CPUs/memory/GPUs total, allocated, idle; nodes; limits; state.

    CPU and node totals come from the partition record (configured); memory and GPU totals, and
    every allocated/idle figure, are sums over the partition's nodes. Idle = usable minus allocated
    on available nodes (not DOWN, not DRAIN/FAIL), like ``sinfo``'s CPUsState "I".
    """
    parts = {p.name: p for p in snap.partitions}
    names = sorted(parts.keys() | (res.keys() - {""}))
    zero = [0] * 10
    specs = (
        ("slurm_partition_cpus", "CPUs configured in the partition", None),
        ("slurm_partition_allocated_cpus", "CPUs allocated on the partition's nodes", 1),
        (
            "slurm_partition_idle_cpus",
            "CPUs idle on the partition's available nodes (not down, drained or failed)",
            2,
        ),
        ("slurm_partition_memory_bytes", "Memory (RealMemory) of the partition's nodes in bytes", 3),
        ("slurm_partition_allocated_memory_bytes", "Memory allocated on the partition's nodes in bytes", 4),
        (
            "slurm_partition_idle_memory_bytes",
            "Memory not allocated on the partition's available nodes (not down, drained or failed) in bytes",
            5,
        ),
        ("slurm_partition_gpus", "GPUs of the partition's nodes", 6),
        ("slurm_partition_allocated_gpus", "GPUs in use on the partition's nodes", 7),
        (
            "slurm_partition_idle_gpus",
            "GPUs not in use on the partition's available nodes (not down, drained or failed)",
            8,
        ),
    )
    for name, doc, idx in specs:
        fam = GaugeMetricFamily(name, doc, labels=["partition"])
        for p in names:
            r = res.get(p, zero)
            if idx is None:
                rec = parts.get(p)
                value = rec.total_cpus if rec is not None and rec.total_cpus else r[0]
            else:
                value = r[idx]
            fam.add_metric([p], float(value))
        yield fam
    fam = GaugeMetricFamily(
        "slurm_partition_nodes", "Nodes configured in the partition", labels=["partition"]
    )
    for p in names:
        rec = parts.get(p)
        fam.add_metric(
            [p], float(rec.total_nodes if rec is not None and rec.total_nodes else res.get(p, zero)[9])
        )
    yield fam
    fam = GaugeMetricFamily(
        "slurm_partition_max_nodes_per_job",
        "Most nodes one job may use in the partition (MaxNodes); +Inf when unlimited",
        labels=["partition"],
    )
    for p in names:
        rec = parts.get(p)
        if rec is not None:
            mx = rec.max_nodes_per_job
            fam.add_metric([p], math.inf if mx is None else float(mx))
    yield fam
    fam = GaugeMetricFamily(
        "slurm_partition_state",
        "Partition state (up, down, drain, inactive): 1 on the series of the current state",
        labels=["partition", "state"],
    )
    for p in names:
        rec = parts.get(p)
        if rec is not None:
            fam.add_metric([p, rec.state.lower()], 1.0)
    yield fam


def per_node_families(snap: Snapshot) -> Iterable[Metric]:
    """One series per node: CPUs, memory, GPUs, base state and flags."""

    def g(name: str, doc: str, labels: tuple[str, ...] = ("node",)) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=list(labels))

    cpus = g("slurm_node_cpus", "CPUs of the node (CPUTot)")
    alloc_cpus = g("slurm_node_allocated_cpus", "CPUs allocated on the node (CPUAlloc)")
    eff_cpus = g(
        "slurm_node_effective_cpus", "CPUs usable by jobs on the node (CPUEfctv: minus specialised cores)"
    )
    mem = g("slurm_node_memory_bytes", "Memory of the node (RealMemory) in bytes")
    alloc_mem = g("slurm_node_allocated_memory_bytes", "Memory allocated on the node (AllocMem) in bytes")
    free_mem = g(
        "slurm_node_free_memory_bytes",
        "Free memory the node's slurmd reported (FreeMem) in bytes; absent when unknown",
    )
    gpus = g("slurm_node_gpus", "GPUs of the node (from its Gres)")
    gpus_used = g("slurm_node_allocated_gpus", "GPUs in use on the node (from its GresUsed)")
    state = g(
        "slurm_node_state",
        "Node base state (idle, mixed, allocated, down, error, future, unknown): "
        "one series per node, value 1, on its current state",
        ("node", "state"),
    )
    flag = g(
        "slurm_node_flag",
        "Node state flags (drain, draining, maintenance, not_responding, powered_down, ...): "
        "one series per flag set, value 1",
        ("node", "flag"),
    )
    for n in snap.nodes:
        lv = [n.name]
        cpus.add_metric(lv, float(n.cpus))
        alloc_cpus.add_metric(lv, float(n.alloc_cpus))
        eff_cpus.add_metric(lv, float(n.effective_cpus))
        mem.add_metric(lv, float(n.memory_bytes))
        alloc_mem.add_metric(lv, float(n.alloc_memory_bytes))
        if n.free_memory_bytes is not None:
            free_mem.add_metric(lv, float(n.free_memory_bytes))
        gpus.add_metric(lv, float(n.gpus))
        gpus_used.add_metric(lv, float(n.gpus_used))
        state.add_metric([n.name, n.state.lower()], 1.0)
        for f in n.flags:
            flag.add_metric([n.name, f.lower()], 1.0)
    yield from (cpus, alloc_cpus, eff_cpus, mem, alloc_mem, free_mem, gpus, gpus_used, state, flag)


def node_reason_families(snap: Snapshot) -> Iterable[Metric]:
    """Why a node is drained/down: an info series per node that has a reason, and when it was set."""
    info = InfoMetricFamily(
        "slurm_node_reason",
        "Reason an administrator or Slurm gave for a node's drain/down state, and who set it",
        labels=["node"],
    )
    since = GaugeMetricFamily(
        "slurm_node_reason_timestamp_seconds",
        "When the node's reason was set (epoch seconds)",
        labels=["node"],
    )
    for n in snap.nodes:
        if n.reason:
            info.add_metric([n.name], {"reason": n.reason, "set_by": n.reason_set_by})
            if n.reason_time is not None:
                since.add_metric([n.name], n.reason_time)
    yield info
    yield since


# ------------------------------------------------------------------------------------ scheduler, rest


def license_families(licenses: Iterable[License]) -> Iterable[Metric]:
    """Licenses configured, in use, free and reserved, by license name."""
    lics = sorted(licenses, key=lambda x: x.name)
    for name, doc, attr in (
        ("slurm_licenses", "Licenses configured, by license", "total"),
        ("slurm_licenses_used", "Licenses in use by jobs, by license", "used"),
        ("slurm_licenses_free", "Licenses free, by license", "free"),
        ("slurm_licenses_reserved", "Licenses held by reservations, by license", "reserved"),
    ):
        fam = GaugeMetricFamily(name, doc, labels=["license"])
        for lic in lics:
            fam.add_metric([lic.name], float(getattr(lic, attr)))
        yield fam


def reservation_families(reservations: Iterable[Reservation]) -> Iterable[Metric]:
    """Reservations: an info series (nodes, partition, flags, users, accounts), node and core counts,
    start and end times."""
    resv = sorted(reservations, key=lambda x: x.name)
    info = InfoMetricFamily(
        "slurm_reservation",
        "A reservation's node list, partition, flags (lower case), users and accounts",
        labels=["reservation"],
    )
    nodes = GaugeMetricFamily("slurm_reservation_nodes", "Nodes in the reservation", labels=["reservation"])
    cores = GaugeMetricFamily("slurm_reservation_cores", "Cores in the reservation", labels=["reservation"])
    start = GaugeMetricFamily(
        "slurm_reservation_start_timestamp_seconds",
        "When the reservation starts (epoch seconds)",
        labels=["reservation"],
    )
    end = GaugeMetricFamily(
        "slurm_reservation_end_timestamp_seconds",
        "When the reservation ends (epoch seconds); absent when it has no end",
        labels=["reservation"],
    )
    for r in resv:
        info.add_metric(
            [r.name],
            {
                "nodes": r.nodes,
                "partition": r.partition,
                "flags": ",".join(f.lower() for f in r.flags),
                "users": r.users,
                "accounts": r.accounts,
            },
        )
        nodes.add_metric([r.name], float(r.node_count))
        cores.add_metric([r.name], float(r.core_count))
        if r.start_time is not None:
            start.add_metric([r.name], r.start_time)
        if r.end_time is not None:
            end.add_metric([r.name], r.end_time)
    yield from (info, nodes, cores, start, end)


@dataclass(frozen=True)
class Cardinality:
    """Which optional series /metrics carries (the cardinality guards; ``--metrics-*`` settings)."""

    per_node: bool = True
    per_user: bool = False
    """Job counts and resources per user, and RPCs per user (the busiest ``rpc_top_users``)."""
    per_account: bool = False
    node_reasons: bool = False
    rpc_top_users: int = DEFAULT_RPC_TOP_USERS
    gres_types: bool = True
    """Generic resources by type (``gpu:a100``, MIG profiles), else summed per name."""
    fairshare: bool = False
    """Fair share per association (``/shares``, :mod:`exporter.fairshare`)."""


DEFAULTS = Cardinality()
"""The default series: per node on, everything per user or account and node reasons off."""


def snapshot_families(snap: Snapshot, cardinality: Cardinality = DEFAULTS) -> Iterable[Metric]:
    """Every Slurm family of one snapshot (health families aside), the optional series as
    ``cardinality`` says."""
    c = cardinality
    per_user, per_account, per_node, node_reasons = c.per_user, c.per_account, c.per_node, c.node_reasons
    yield from job_families(snap, per_account=per_account, per_user=per_user)
    yield from queue_age_families(snap)
    yield from node_families(snap, per_node=per_node, node_reasons=node_reasons)
    yield from gres_families(snap, per_node=per_node, by_type=c.gres_types)
    if snap.diag is not None:
        yield from diag_families(snap.diag)
        yield from rpc_families(snap.diag, per_user=per_user, top_users=c.rpc_top_users)
    if c.fairshare:
        yield from fairshare_families(snap)
    yield from license_families(snap.licenses)
    yield from reservation_families(snap.reservations)
