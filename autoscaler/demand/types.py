"""What the demand model reads (a target and its node shape) and what it answers (a :class:`Demand`).

Memory in bytes throughout. The answer holds facts only; :mod:`autoscaler.report` words them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from exporter.model import MIB

__all__ = ["Demand", "Misfit", "MisfitKind", "NodeShape", "Packing", "Target", "TooLarge"]


@dataclass(frozen=True)
class NodeShape:
    """What one node of a target offers to jobs."""

    cpus: int
    memory_bytes: int
    gpus: int = 0
    threads_per_core: int = 1
    """Hardware threads of each core: where slurmctld allocates whole cores (``CR_Core*``), a job's CPUs
    on a node are rounded up to whole cores (:func:`autoscaler.demand.sizing.size`)."""
    sockets: int = 0
    """Sockets of a node (0: not known; a job's ``--sockets-per-node`` is then not judged)."""
    cores_per_socket: int = 0
    """Cores of each socket (0: not known)."""

    def __str__(self) -> str:
        smt = f", {self.threads_per_core} threads per core" if self.threads_per_core > 1 else ""
        return f"{self.cpus} CPUs, {self.memory_bytes // MIB} MiB, {self.gpus} GPUs{smt}"


@dataclass(frozen=True)
class Target:
    """One scaling target: a partition, or a NodeSet (nodes of a partition by feature/names)."""

    name: str
    partition: str
    nodeset_feature: str | None = None
    """Only nodes with this feature; only jobs whose constraint (if any) names it."""
    node_names: str | None = None
    """Only these nodes: a Slurm host list (``ns-[0-9]``) or a prefix ending in ``*`` (``ns-*``)."""
    min_nodes: int = 0
    max_nodes: int | None = None
    """Upper bound of desired; None = unbounded. Jobs needing more nodes are too large."""
    shape: NodeShape | None = None
    """Node shape used while the target has no nodes in the snapshot (scale from zero)."""
    features: frozenset[str] = frozenset()
    """Slurm features a new node of the target has (besides ``nodeset_feature``), used while it has no nodes:
    a job's ``--constraint`` is then judged against them (empty: only ``nodeset_feature`` is known)."""
    node_ranges: Literal["minimum", "largest"] = "minimum"
    """What a ``-N min-max`` job asks for: its minimum (enough to start it; the default), or the largest
    count its range and tasks allow — what slurmctld takes from idle nodes, so what its power saving
    resumes (``docs/demand.md``)."""
    cpus_per_gpu: int = 0
    """The partition's ``DefCpuPerGPU`` (0: none), which no slurmrestd answer shows for a job not yet
    tested on nodes: CPUs for each GPU of a job that gave no ``-c``."""

    def __post_init__(self) -> None:
        if self.min_nodes < 0:
            raise ValueError(f"target {self.name!r}: min_nodes must be >= 0")
        if self.max_nodes is not None and self.max_nodes < self.min_nodes:
            raise ValueError(f"target {self.name!r}: max_nodes < min_nodes")
        if self.shape is not None and (
            self.shape.cpus < 1 or self.shape.memory_bytes < 0 or self.shape.gpus < 0
        ):
            raise ValueError(f"target {self.name!r}: shape needs cpus >= 1, memory >= 0, gpus >= 0")


MisfitKind = Literal[
    "cpus_per_task",
    "cpus_for_memory",
    "memory_per_node",
    "memory_per_cpu",
    "memory_without_memory",
    "gpus_per_node",
    "gpus_without_gpus",
    "job_max_nodes",
    "target_max_nodes",
    "sockets_per_node",
    "cores_per_socket",
    "threads_per_core",
]
"""What of a job exceeds the target: CPUs of one task, CPUs per node its ``--mem`` needs under the
partition's ``MaxMemPerCPU``, ``--mem``, ``--mem-per-cpu``, memory asked of
nodes with none, ``--gpus-per-node``, GPUs asked of nodes with none, the nodes it needs against its own
``--nodes`` maximum, against ``Target.max_nodes``, and a socket, core or thread count the nodes lack."""


class Misfit(NamedTuple):
    """Why a job can never run on a target: it asks ``asked`` of ``kind`` where the target offers
    ``limit`` (per node, or nodes; memory in bytes)."""

    kind: MisfitKind
    asked: int
    limit: int


@dataclass(frozen=True)
class TooLarge:
    """A pending job that can never run on the target (reported, not counted)."""

    job: str
    """Job id as Slurm prints it (``12``, ``3_[3-20]``, ``3_7``)."""
    tasks: int
    misfit: Misfit


@dataclass(frozen=True)
class Packing:
    """How ``Demand.needed`` was found: the jobs packed and whether exactly (first fit in Slurm's order)
    or by the bounded best fit (too many runs of distinct jobs)."""

    jobs: int
    """Eligible pending jobs packed onto new nodes."""
    runs: int
    """Runs of consecutive identical jobs among them."""
    exact: bool
    in_free_room: int = 0
    """Not-yet-scheduled pending jobs (reason ``None``) placed on busy nodes' free room first."""
    free_room_runs: int = 0
    free_room_exact: bool = True


@dataclass(frozen=True)
class Demand:
    """The demand of one target."""

    target: str
    desired: int
    busy: int
    needed: int
    """New nodes the counted pending jobs need (after using busy nodes' free room)."""
    nodes: int
    """Target nodes in the snapshot (any state)."""
    eligible: int
    """Pending jobs counted (array tasks individually), including those fitting free room."""
    ignored: Mapping[str, int]
    """Pending jobs (array tasks individually) not counted, by reason."""
    too_large: tuple[TooLarge, ...]
    shape: NodeShape | None
    """The node shape jobs were sized on (CPUs already capped by ``cpus_cap``)."""
    shape_source: str
    """``snapshot``, ``config`` or ``none``."""
    busy_nodes: tuple[str, ...] = ()
    """Names of the busy nodes, in snapshot order."""
    cpus_cap: int | None = None
    """The partition's ``MaxCPUsPerNode`` when it lowered the shape's CPUs."""
    skipped: int = 0
    """Pending jobs whose ``--constraint`` no node of the target satisfies (another NodeSet's)."""
    packing: Packing | None = None
    """None when nothing was packed (no eligible job, or no shape)."""
    held_back_by_license: Mapping[str, int] = field(default_factory=dict)
    """License name → fresh pending jobs of the target's partition it holds back (the jobs ahead of them
    in Slurm's order took what was free: :mod:`autoscaler.licenses`); counted among ``ignored``'s
    ``Licenses``."""
    held: int | None = None
    """Set (by :class:`autoscaler.service.DemandService`) when the snapshot's jobs or nodes data of the
    target's partition is partly invalid (records dropped as impossible): the desired count the model
    computed on it. ``desired`` is then the larger of it and the last answer on valid data."""
    answered: bool = True
    """False when ``held`` is set and there is no answer on valid data to hold yet: no desired count is
    served (KEDA is told UNAVAILABLE and keeps the replicas it has; no ``desired_nodes`` series)."""
    in_service: int = 0
    """The target's nodes in service (:func:`autoscaler.nodes.in_service`)."""
    unread: int = 0
    """Set (by :class:`autoscaler.service.DemandService`) while the snapshot's jobs data is partial — jobs
    ``/jobs/state`` lists not read yet (:attr:`exporter.model.Snapshot.jobs_unread`, a start without a
    full listing): ``held`` is the model's count on the jobs read, ``desired`` never lower than it, the
    target's nodes in service and the last answer on complete data."""
