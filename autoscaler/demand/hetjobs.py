"""Heterogeneous jobs (``sbatch … : …``) as the model counts them: one job. Pure.

slurmctld lists one record per component and starts the components together, each on nodes of its own:
two ``-n2`` components that would share one 8-CPU node take two (lab, 26.05.5: the ``hetjob`` oracle mix),
while components of *different* heterogeneous jobs share nodes as any jobs do. :func:`merge_hetjobs`
turns the pending components of one heterogeneous job into one job of Σ nᵢ nodes (nᵢ: a component's
minimum nodes), each node asking what the most demanding component asks of one node — CPUs, memory,
GPUs; exclusive if any component is. Exact when the components ask alike; when they differ, each node is
counted as full as the largest component's node (more than Slurm may use, never less). Components
pending in different partitions, or not all pending, are left as they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import attrgetter

import msgspec

from exporter.model import Job

__all__ = ["merge_hetjobs"]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _merged(parts: list[Job]) -> Job:
    """The job the components ``parts`` (offset order) count as."""
    lead = parts[0]
    nodes = [max(p.min_nodes, 1) for p in parts]
    total = sum(nodes)
    cpus = max(_ceil(max(p.cpus, p.tasks * p.cpus_per_task, 1), n) for p, n in zip(parts, nodes, strict=True))
    whole = any(p.whole_node_memory for p in parts)
    memory = 0
    for p, n in zip(parts, nodes, strict=True):
        if p.memory_per_node_bytes is not None:
            per_node = p.memory_per_node_bytes
        elif p.memory_per_cpu_bytes is not None:
            per_node = _ceil(max(p.cpus, p.tasks * p.cpus_per_task, 1), n) * p.memory_per_cpu_bytes
        else:
            per_node = _ceil(p.memory_bytes, n)
        memory = max(memory, per_node)
    gpus = max(p.gpus_per_node or _ceil(p.gpus, n) for p, n in zip(parts, nodes, strict=True))
    return msgspec.structs.replace(
        lead,
        min_nodes=total,
        max_nodes=None,
        cpus=total * cpus,
        tasks=total,
        cpus_per_task=1,
        memory_per_node_bytes=None if whole else memory,
        memory_per_cpu_bytes=None,
        whole_node_memory=whole,
        memory_bytes=total * memory,
        gpus_per_node=gpus,
        gpus=total * gpus,
        exclusive=any(p.exclusive for p in parts),
        spread=False,
    )


_het_job_id = attrgetter("het_job_id")


def merge_hetjobs(jobs: Sequence[Job]) -> Sequence[Job]:
    """``jobs`` with each pending heterogeneous job as one (module docstring), in its first component's
    place; ``jobs`` itself when none is pending."""
    if not any(map(_het_job_id, jobs)):  # mostly none (read in C)
        return jobs
    components: dict[int, list[Job]] = defaultdict(list)
    for j in jobs:
        if j.het_job_id is not None:
            components[j.het_job_id].append(j)
    mergeable = {
        het: sorted(parts, key=lambda p: p.het_job_offset or 0)
        for het, parts in components.items()
        if len(parts) > 1
        and all(p.state == "PENDING" for p in parts)
        and len({p.partitions for p in parts}) == 1
    }
    if not mergeable:
        return jobs
    out: list[Job] = []
    for j in jobs:
        parts = mergeable.get(j.het_job_id) if j.het_job_id is not None else None
        if parts is None:
            out.append(j)
        elif j is parts[0]:
            out.append(_merged(parts))
    return out
