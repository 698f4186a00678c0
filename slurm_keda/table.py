"""``slurm-keda snapshot``'s table: one poll as a human reads it (partitions, nodes, jobs)."""

from __future__ import annotations

import time

from exporter.model import Job, Snapshot

GIB = 1 << 30


def job_state(job: Job) -> str:
    """The state as ``squeue`` names it: a running job still booting its nodes is CONFIGURING, one whose
    processes are ending COMPLETING (flags beside Slurm's base state)."""
    for flag in ("CONFIGURING", "COMPLETING"):
        if flag in job.state_flags:
            return flag
    return job.state


def job_id(job: Job) -> str:
    """``123``, an array task ``120_3``, or an array's pending tasks ``120_[4-9]``."""
    if job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    if job.array_task_string:
        return f"{job.array_job_id}_[{job.array_task_string}]"
    return str(job.job_id)


def format_table(snap: Snapshot) -> str:
    """A human summary of a snapshot: header, partitions, nodes, jobs. Columns are as wide as their
    longest value (nothing is cut); ``ARRAY`` is the number of array tasks a record stands for."""
    out = [
        f"cluster {snap.cluster}  Slurm {snap.slurm_version}  API {snap.api_version}  "
        f"taken {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(snap.taken_at))}",
        "",
        f"{'PARTITION':<12} {'STATE':<8} {'NODES':>5} {'CPUS':>6} {'MAXNODES':>8} {'MAXTIME':>8}",
    ]
    for p in snap.partitions:
        maxn = "-" if p.max_nodes_per_job is None else str(p.max_nodes_per_job)
        maxt = "-" if p.max_time_seconds is None else str(p.max_time_seconds)
        out.append(f"{p.name:<12} {p.state:<8} {p.total_nodes:>5} {p.total_cpus:>6} {maxn:>8} {maxt:>8}")
    flags = {n.name: ",".join(n.flags) or "-" for n in snap.nodes}
    fw = max([5, *(len(f) for f in flags.values())])
    out += [
        "",
        f"{'NODE':<10} {'STATE':<10} {'FLAGS':<{fw}} {'CPU A/T':>8} {'MEM GiB A/T':>12} {'GPU U/T':>7}",
    ]
    for n in snap.nodes:
        mem = f"{n.alloc_memory_bytes / GIB:.1f}/{n.memory_bytes / GIB:.1f}"
        out.append(
            f"{n.name:<10} {n.state:<10} {flags[n.name]:<{fw}} "
            f"{f'{n.alloc_cpus}/{n.cpus}':>8} {mem:>12} {f'{n.gpus_used}/{n.gpus}':>7}"
        )
    ids = {id(j): job_id(j) for j in snap.jobs}
    iw = max([12, *(len(i) for i in ids.values())])
    out += [
        "",
        f"{'JOBID':<{iw}} {'PARTITION':<10} {'STATE':<11} {'REASON':<20} {'NODES':>5} {'CPUS':>5} "
        f"{'GPUS':>4} {'ARRAY':>5} NODELIST",
    ]
    for j in snap.jobs:
        array = str(j.task_count) if j.array_task_string or j.array_task_id is not None else "-"
        out.append(
            f"{ids[id(j)]:<{iw}} {','.join(j.partitions):<10} {job_state(j):<11} {j.reason:<20} "
            f"{j.min_nodes:>5} {j.cpus:>5} {j.gpus:>4} {array:>5} {j.nodes}"
        )
    return "\n".join(out)
