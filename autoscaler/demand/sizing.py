"""How many nodes one job needs on a node shape, and what it asks of each. Pure.

:func:`size` turns a job's :class:`Request` into a :data:`~autoscaler.demand.packing.Piece` ``(nodes,
CPUs, memory bytes, GPUs per node)``, or a :class:`~autoscaler.demand.types.Misfit` when it can never
run on the shape. The rules (``docs/demand.md``, "Job size"): nodes ``n = max(min_nodes, ⌈cpus/C⌉,
⌈tasks/⌊C/cpus_per_task⌋⌉, ⌈memory/M⌉, min(⌈gpus/G⌉, the job's maximum))`` on a shape of C CPUs, M
bytes, G GPUs; each node an even share; exclusive jobs whole nodes; ``--spread-job`` a node per task
within the maxima. On a shape of T > 1 threads per core (slurmctld allocating whole cores), a job's CPUs
on a node are whole cores, and a task of ``--threads-per-core=1`` / ``--hint=nomultithread`` /
``--ntasks-per-core=1`` whole cores of its own (:func:`_on_cores`).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from autoscaler.demand.packing import Piece
from autoscaler.demand.types import Misfit, NodeShape
from exporter.model import NodeRequest

__all__ = [
    "NO_RULES",
    "NUMBER_FIELDS",
    "Request",
    "SizeRules",
    "number_columns",
    "request_columns",
    "size",
    "size_columns",
]


class Request(NamedTuple):
    """The job fields sizing reads, named as on :class:`exporter.model.Job` (memory in bytes)."""

    min_nodes: int
    max_nodes: int | None
    cpus: int
    tasks: int
    cpus_per_task: int
    memory_per_node_bytes: int | None
    memory_per_cpu_bytes: int | None
    whole_node_memory: bool
    memory_bytes: int
    gpus_per_node: int
    gpus: int
    exclusive: bool
    spread: bool
    tasks_exact: bool
    cpus_exact: bool
    node_range: bool
    node_request: NodeRequest | None


class SizeRules(NamedTuple):
    """What a target adds to sizing (``Target.node_ranges``, ``Target.cpus_per_gpu``)."""

    largest_ranges: bool = False
    """A ``-N min-max`` job takes as many nodes as its range and its tasks allow (what slurmctld takes from
    idle nodes), not its minimum."""
    cpus_per_gpu: int = 0
    """The partition's ``DefCpuPerGPU`` (0: none): CPUs for each GPU of a job that gave no ``-c`` —
    slurmctld applies it when it tests the job on nodes, and no slurmrestd answer shows it before."""


NO_RULES = SizeRules()
"""A target that adds nothing (the default)."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _within_memory_per_cpu(r: Request, max_memory_per_cpu: int) -> Request:
    """What slurmctld starts a job asking more than the partition's ``MaxMemPerCPU`` with: ``--mem-per-cpu``
    above it → CPUs per task × ⌈asked/max⌉, the memory per CPU divided alike (the same total); the job's
    record keeps what was asked (lab: 26.05.5, ``docs/demand.md``)."""
    mem_per_cpu = r.memory_per_cpu_bytes
    if mem_per_cpu is None or mem_per_cpu <= max_memory_per_cpu or r.whole_node_memory:
        return r
    if r.memory_per_node_bytes is not None:
        return r
    ratio = _ceil(mem_per_cpu, max_memory_per_cpu)
    cpt = max(r.cpus_per_task, 1)
    return r._replace(
        cpus=max(r.cpus, r.tasks * cpt) * ratio,
        cpus_per_task=cpt * ratio,
        memory_per_cpu_bytes=_ceil(mem_per_cpu, ratio),
    )


def _on_cores(r: Request, threads: int) -> Request:
    """A job on cores of ``threads`` threads each, allocated whole (lab: 26.05.5, ``CR_Core_Memory``, 4 cores
    × 2 threads): a task that may use fewer threads of a core than it has (``--threads-per-core``,
    ``--hint=nomultithread`` → 1) takes ⌈CPUs per task / threads it uses⌉ cores, one of
    ``--ntasks-per-core=1`` ⌈CPUs per task / threads⌉ cores (``-n2 --hint=nomultithread``: 4 CPUs;
    ``-n3 --ntasks-per-core=1``: 6); each as CPUs per task of that many whole cores. Other jobs are rounded
    up to whole cores per node by :func:`size` (``-n1``: 2 CPUs, ``-c3``: 4, ``-n2``: 2)."""
    if r.node_request is None:
        return r
    use, tasks_per_core = r.node_request.threads_per_core, r.node_request.tasks_per_core
    cpt = max(r.cpus_per_task, 1)
    if use is not None and use < threads:
        per_task = _ceil(cpt, use) * threads
    elif tasks_per_core is not None and tasks_per_core < threads:  # taken as 1 (T > 2: more, not fewer)
        per_task = _ceil(cpt, threads) * threads
    else:
        return r
    tasks = max(r.tasks, 1)
    return r._replace(cpus=max(tasks * per_task, r.cpus), cpus_per_task=per_task)


def _layout_misfit(cores: NodeRequest, shape: NodeShape) -> Misfit | None:
    """A socket, core or thread count the shape's nodes do not have (slurmctld: ``BadConstraints`` once
    such nodes exist; lab: ``--cores-per-socket=2`` on 8 one-core sockets). A layout the shape does not
    know (0) is not judged."""
    sockets, cores_per_socket, threads = (
        cores.sockets_per_node,
        cores.cores_per_socket,
        cores.threads_per_core,
    )
    if sockets is not None and shape.sockets and sockets > shape.sockets:
        return Misfit("sockets_per_node", sockets, shape.sockets)
    if cores_per_socket is not None and shape.cores_per_socket and cores_per_socket > shape.cores_per_socket:
        return Misfit("cores_per_socket", cores_per_socket, shape.cores_per_socket)
    if threads is not None and threads > shape.threads_per_core:
        return Misfit("threads_per_core", threads, shape.threads_per_core)
    return None


def _gpus_by_socket(cores: NodeRequest, cpus: int, shape: NodeShape) -> int:
    """``--gpus-per-socket`` × the sockets the job's ``cpus`` on a node span (at least its
    ``--sockets-per-node``): lab, 26.05.5, nodes of 8 one-core sockets, GPUs without a socket binding —
    ``--gpus-per-socket=2 --sockets-per-node=1 -n2`` was allocated 4 GPUs (2 CPUs on 2 sockets)."""
    per_socket = shape.cores_per_socket * shape.threads_per_core
    sockets = _ceil(cpus, per_socket) if per_socket else 1
    return (cores.gpus_per_socket or 0) * max(sockets, cores.sockets_per_node or 1)


def size(
    request: Request,
    shape: NodeShape,
    max_nodes: int | None,
    max_memory_per_cpu: int | None = None,
    rules: SizeRules = NO_RULES,
) -> Piece | Misfit:
    """The piece of ``request`` on ``shape`` (``max_nodes``: the target's maximum; ``max_memory_per_cpu``:
    the partition's ``MaxMemPerCPU`` in bytes; ``rules``: the target's), or why it never fits."""
    if max_memory_per_cpu is not None:
        request = _within_memory_per_cpu(request, max_memory_per_cpu)
    cores = request.node_request
    if cores is not None:
        misfit = _layout_misfit(cores, shape)
        if misfit is not None:
            return misfit
    threads = shape.threads_per_core
    if threads > 1:
        request = _on_cores(request, threads)
    (
        min_nodes, job_max_nodes, job_cpus, tasks, cpt, mem_per_node, mem_per_cpu, whole_node_memory,
        memory_bytes, gpus_per_node, gpus, exclusive, spread, tasks_exact, cpus_exact, node_range, _,
    ) = request  # once, into locals: a NamedTuple's attribute reads cost ~50 ns each  # fmt: skip
    c_node, m_node, g_node = shape.cpus, shape.memory_bytes, shape.gpus
    if rules.cpus_per_gpu and gpus and not cpus_exact:  # DefCpuPerGPU, where the job gave no -c
        job_cpus = max(job_cpus, gpus * rules.cpus_per_gpu)
    cpus = max(job_cpus, tasks * cpt if cpt > 1 else 0, 1)
    n = max(min_nodes, 1, _ceil(cpus, c_node))
    if cpt > 1:  # a task never splits across nodes
        per_node_tasks = c_node // cpt
        if per_node_tasks == 0:
            return Misfit("cpus_per_task", cpt, c_node)
        n = max(n, _ceil(max(tasks, 1), per_node_tasks))
    total_mem = 0
    if whole_node_memory:
        pass
    elif mem_per_node is not None:
        if mem_per_node > m_node:
            return Misfit("memory_per_node", mem_per_node, m_node)
    elif mem_per_cpu is not None:
        if mem_per_cpu > m_node:
            return Misfit("memory_per_cpu", mem_per_cpu, m_node)
        total_mem = cpus * mem_per_cpu
    else:
        total_mem = memory_bytes
    if total_mem and m_node:
        n = max(n, _ceil(total_mem, m_node))
    elif total_mem:
        return Misfit("memory_without_memory", total_mem, 0)
    if gpus_per_node:
        if gpus_per_node > g_node:
            return Misfit("gpus_per_node", gpus_per_node, g_node)
    elif gpus:
        if not g_node:
            return Misfit("gpus_without_gpus", gpus, 0)
        # more GPUs than a node has: a node each G of them, as many as the job may use (Slurm then runs
        # it on those with the GPUs they have: lab, 26.05.5, -n1 --gpus=6 on 4-GPU nodes, one node)
        by_gpus = _ceil(gpus, g_node)
        n = max(n, min(by_gpus, job_max_nodes) if job_max_nodes else by_gpus)
    if node_range and rules.largest_ranges and job_max_nodes is not None:
        # -N min-max from idle nodes: slurmctld aims at the maximum, a task a node (lab: 26.05.5)
        most = min(job_max_nodes, max(tasks, 1) if tasks_exact else job_max_nodes, max_nodes or job_max_nodes)
        n = max(n, most)
    if spread:  # one task per node, as far as the job's and the target's maxima allow
        most = max(tasks, 1)
        n = max(n, min(most, job_max_nodes or most, max_nodes or most))
    if mem_per_cpu is not None and not whole_node_memory and mem_per_node is None:
        while _ceil(cpus, n) * mem_per_cpu > m_node:  # the CPUs of the fullest node must fit its memory
            n += 1
    if job_max_nodes is not None and n > job_max_nodes:
        return Misfit("job_max_nodes", n, job_max_nodes)
    if max_nodes is not None and n > max_nodes:
        return Misfit("target_max_nodes", n, max_nodes)
    if exclusive:
        return (n, c_node, m_node, g_node)
    cpu_pn = _ceil(cpus, n)
    if threads > 1:  # whole cores
        cpu_pn = min(_ceil(cpu_pn, threads) * threads, c_node)
    if max_memory_per_cpu and mem_per_node is not None and not whole_node_memory:
        # --mem above MaxMemPerCPU × its CPUs: slurmctld gives each node CPUs enough for the memory
        cpu_pn = max(cpu_pn, _ceil(mem_per_node, max_memory_per_cpu))
        if cpu_pn > c_node:
            return Misfit("cpus_for_memory", cpu_pn, c_node)
    gpu_pn = gpus_per_node or min(_ceil(gpus, n), g_node)
    if cores is not None and cores.gpus_per_socket:
        gpu_pn = _gpus_by_socket(cores, cpu_pn, shape)
        if gpu_pn > g_node:
            return Misfit("gpus_per_node", gpu_pn, g_node)
    if whole_node_memory:
        mem_pn = m_node
    elif mem_per_node is not None:
        mem_pn = mem_per_node
    elif mem_per_cpu is not None:
        mem_pn = cpu_pn * mem_per_cpu
    else:
        mem_pn = _ceil(total_mem, n)
    return (n, cpu_pn, mem_pn, gpu_pn)


NUMBER_FIELDS = Request._fields[:-1]
"""The :class:`Request` fields :func:`size_columns` reads, as int64 columns in this order (every field but
``node_request``; ``None`` → −1, booleans 0/1)."""
_NULLABLE = frozenset({"max_nodes", "memory_per_node_bytes", "memory_per_cpu_bytes"})
_COUNT_LIMIT = 1 << 31
"""Counts (nodes, CPUs, tasks, GPUs) at or beyond this are sized one by one (:func:`size`): their products
stay far inside int64."""
_I64 = np.ndarray[Any, np.dtype[np.int64]]
_BOOL = np.ndarray[Any, np.dtype[np.bool_]]


def request_columns(requests: Sequence[tuple[Any, ...]]) -> tuple[_I64, _BOOL]:
    """Requests (:class:`Request` fields, plain tuples or not) as an int64 array ``(len, NUMBER_FIELDS)``,
    and per request whether :func:`size_columns` may size it: no ``node_request`` (a layout: :func:`size`),
    no ``None`` where the field never holds one, nothing negative or beyond 2⁵³."""
    if not requests:
        return np.empty((0, len(NUMBER_FIELDS)), dtype=np.int64), np.empty(0, dtype=np.bool_)
    fields = list(zip(*requests, strict=True))
    plain = np.fromiter(map(operator.is_, fields[-1], repeat(None)), dtype=np.bool_, count=len(requests))
    columns = []
    for name, values in zip(NUMBER_FIELDS, fields, strict=False):
        column, ok = _number_column(values, nullable=name in _NULLABLE)
        columns.append(column)
        plain &= ok
    return np.stack(columns, axis=1), plain


def number_columns(numbers: _I64, missing: _BOOL, plain: _BOOL) -> tuple[_I64, _BOOL]:
    """:func:`request_columns` from requests already read as ints: ``numbers`` (rows of
    :data:`NUMBER_FIELDS`, every value an int within int64, ``None`` as −1), ``missing`` (where a ``None``
    was) and ``plain`` (no ``node_request``) — the same answer (the compiled reading,
    ``autoscaler/demand/_scan.c``). Changes ``numbers`` in place."""
    ok = numbers >= 0
    for c in np.flatnonzero(missing.any(axis=0)).tolist():  # a column with a None: read as floats there
        values, gone = numbers[:, c], missing[:, c]
        exact = ~gone & (values > -_EXACT) & (values < _EXACT)
        ok[:, c] = (exact & (values >= 0)) | (gone & (NUMBER_FIELDS[c] in _NULLABLE))
        numbers[:, c] = np.where(exact, values, -1)
    return numbers, plain & ok.all(axis=1)


_EXACT = 1 << 53
"""Ints a float64 holds exactly (below, in magnitude)."""


def _number_column(values: Sequence[Any], *, nullable: bool) -> tuple[_I64, _BOOL]:
    """One field's values as int64 (``None`` → −1) and where that is exact and may be sized in columns."""
    try:
        column = np.array(values, dtype=np.int64)
    except (TypeError, OverflowError, ValueError):  # a None, or an int beyond int64
        try:
            as_float = np.array(values, dtype=np.float64)  # None → nan
        except (TypeError, ValueError, OverflowError):
            return np.full(len(values), -1, dtype=np.int64), np.zeros(len(values), dtype=np.bool_)
        missing = np.isnan(as_float)
        exact = ~missing & (np.abs(np.where(missing, 0.0, as_float)) < _EXACT)
        column = np.where(exact, as_float, -1).astype(np.int64)
        return column, (exact & (column >= 0)) | (missing & nullable)
    return column, column >= 0


def _ceil_columns(a: _I64, b: _I64 | int) -> _I64:
    return -(-a // b)


def size_columns(
    numbers: _I64, shape: NodeShape, max_nodes: int | None, rules: SizeRules = NO_RULES
) -> tuple[_I64, _BOOL]:
    """:func:`size` of many requests at once (``numbers``: rows of :func:`request_columns`, each plain) on
    a shape of one thread per core, no ``MaxMemPerCPU``: the pieces as rows ``[nodes, CPUs, memory, GPUs
    per node]``, and per row whether it is that piece — a row that is not (a misfit, a count beyond
    :data:`_COUNT_LIMIT`) is for :func:`size` to answer. The same rules, step by step, on arrays
    (``tests/unit/test_sizing_columns.py`` compares the two)."""
    if shape.threads_per_core > 1 or shape.cpus <= 0:
        raise ValueError("size_columns sizes on a shape of one thread per core and some CPUs")
    (
        min_nodes, job_max, job_cpus, tasks, cpt, mem_per_node, mem_per_cpu, whole_col, memory_bytes,
        gpus_per_node, gpus, exclusive, spread, tasks_exact, cpus_exact, node_range,
    ) = numbers.T  # fmt: skip
    c_node, m_node, g_node = shape.cpus, shape.memory_bytes, shape.gpus
    whole = whole_col != 0
    ok = np.maximum.reduce([min_nodes, job_max, job_cpus, tasks, cpt, gpus_per_node, gpus]) < _COUNT_LIMIT
    if rules.cpus_per_gpu:
        by_gpu = (gpus > 0) & (cpus_exact == 0)
        job_cpus = np.where(by_gpu, np.maximum(job_cpus, gpus * rules.cpus_per_gpu), job_cpus)
    cpus = np.maximum(np.maximum(job_cpus, np.where(cpt > 1, tasks * cpt, 0)), 1)
    ok &= (cpus < 1 << 20) & (mem_per_cpu < 1 << 42)  # cpus × memory per CPU within int64
    n = np.maximum(np.maximum(min_nodes, 1), _ceil_columns(cpus, c_node))
    split = cpt > 1
    per_node_tasks = c_node // np.maximum(cpt, 1)
    ok &= ~(split & (per_node_tasks == 0))
    n = np.where(split, np.maximum(n, _ceil_columns(np.maximum(tasks, 1), np.maximum(per_node_tasks, 1))), n)
    by_node = ~whole & (mem_per_node >= 0)
    by_cpu = ~whole & ~by_node & (mem_per_cpu >= 0)
    total = np.where(by_cpu, cpus * mem_per_cpu, np.where(~whole & ~by_node, memory_bytes, 0))
    ok &= ~(by_node & (mem_per_node > m_node)) & ~(by_cpu & (mem_per_cpu > m_node))
    if m_node:
        n = np.where(total > 0, np.maximum(n, _ceil_columns(total, m_node)), n)
    else:
        ok &= total == 0
    per_node_gpus = gpus_per_node > 0
    ok &= ~(per_node_gpus & (gpus_per_node > g_node))
    gpus_only = ~per_node_gpus & (gpus > 0)
    if g_node:
        by_gpus = _ceil_columns(gpus, g_node)
        by_gpus = np.where(job_max > 0, np.minimum(by_gpus, job_max), by_gpus)
        n = np.where(gpus_only, np.maximum(n, by_gpus), n)
    else:
        ok &= ~gpus_only
    if rules.largest_ranges:
        ranged = (node_range != 0) & (job_max >= 0)
        most = np.minimum(job_max, np.where(tasks_exact != 0, np.maximum(tasks, 1), job_max))
        if max_nodes:
            most = np.minimum(most, max_nodes)
        n = np.where(ranged, np.maximum(n, most), n)
    most = np.maximum(tasks, 1)
    most = np.minimum(most, np.where(job_max > 0, job_max, most))
    if max_nodes:
        most = np.minimum(most, max_nodes)
    n = np.where(spread != 0, np.maximum(n, most), n)
    # the fullest node's CPUs × memory per CPU within the node: ⌈cpus/n⌉ ≤ ⌊M/mem_per_cpu⌋ =: k ⇔ n ≥ ⌈cpus/k⌉
    cpus_fit = np.where(by_cpu & (mem_per_cpu > 0), m_node // np.maximum(mem_per_cpu, 1), 0)
    n = np.where(cpus_fit > 0, np.maximum(n, _ceil_columns(cpus, np.maximum(cpus_fit, 1))), n)
    ok &= ~((job_max >= 0) & (n > job_max))
    if max_nodes is not None:
        ok &= n <= max_nodes
    cpu_pn = _ceil_columns(cpus, n)
    gpu_pn = np.where(per_node_gpus, gpus_per_node, np.minimum(_ceil_columns(gpus, n), g_node))
    mem_pn = np.where(
        whole,
        m_node,
        np.where(by_node, mem_per_node, np.where(by_cpu, cpu_pn * mem_per_cpu, _ceil_columns(total, n))),
    )
    alone = exclusive != 0
    pieces = np.stack(
        [
            n,
            np.where(alone, c_node, cpu_pn),
            np.where(alone, m_node, mem_pn),
            np.where(alone, g_node, gpu_pn),
        ],
        axis=1,
    )
    return pieces, ok
