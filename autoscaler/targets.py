"""Scaling targets from KEDA trigger metadata (or a targets file): ``{key: str}`` → :class:`Target`.

The keys (trigger ``metadata:`` of a ScaledObject, or one entry of ``--autoscaler-targets``):

==============  ========  ================================================================================
key             required  meaning
==============  ========  ================================================================================
partition       yes       Slurm partition whose pending jobs and nodes are counted
nodeset         no        NodeSet name: the target is named after it, and (unless ``nodeFeature`` or
                          ``nodeNames`` say otherwise) its nodes are the partition's nodes with the Slurm
                          feature of that name — Slinky registers a NodeSet's slurmd nodes with
                          ``Feature=<nodeset name>``
nodeFeature     no        select the partition's nodes (and constrained jobs) by this feature instead
nodeNames       no        select nodes by Slurm host list (``ns-[0-9]``) or prefix (``ns-*``)
cpusPerNode     no        node shape used while the target has no nodes (scale from zero): CPUs,
memoryPerNode   no        memory (MiB as a plain number, or with a binary unit: ``64G``, ``64Gi``,
                          ``512M``, ``1T``; ``K``/``Ki``, ``M``/``Mi``, … all mean powers of 1024),
gpusPerNode     no        and GPUs per node. ``cpusPerNode`` is needed for a shape.
threadsPerCore  no        hardware threads of each core of a new node (``ThreadsPerCore``, default 1; must
                          divide ``cpusPerNode``): slurmctld allocates whole cores (``CR_Core*``)
socketsPerNode  no        sockets and cores per socket of a new node (``Sockets``, ``CoresPerSocket``):
coresPerSocket            a job asking more (``--sockets-per-node``, ``--cores-per-socket``) never runs;
                          sockets × cores × threads must be ``cpusPerNode`` (one alone must divide it)
featuresPerNode no        Slurm features a new node has (comma-separated; besides the NodeSet's own),
                          for judging ``--constraint`` while the target has no nodes
nodeRanges      no        ``minimum`` (default): a ``-N min-max`` job asks for its minimum, enough to start
                          it; ``largest``: as many as its range and tasks allow — what slurmctld takes
                          from idle nodes, so what its own power saving resumes
cpusPerGpu      no        the partition's ``DefCpuPerGPU`` (``JobDefaults``), which slurmrestd does not
                          report: CPUs for each GPU of a job that gave no ``-c`` (default 0: none)
min             no        lower bound of desired nodes (default 0)
max             no        upper bound of desired nodes (default unbounded); larger jobs are reported
metricName      no        metric name KEDA asks for (default ``slurm-desired-nodes-<partition>[-<nodeset>]``)
==============  ========  ================================================================================

A key may also come as ``<key>FromEnv`` (KEDA resolves it from the scaled workload's environment);
the plain key wins when both are given. KEDA's own keys (``scalerAddress``, ``caCert``,
``tlsClientCert``, ``tlsClientKey``, ``unsafeSsl``, ``enableTLS``) are accepted and ignored. Any other
key is an error (a typo such as ``partiton`` must not silently give a target that never scales).
Errors are :class:`MetadataError`, naming the key. Values are bounded: at most :data:`MAX_VALUE_CHARS`
characters, numbers of ASCII digits up to :data:`MAX_COUNT` (memory up to :data:`MAX_MEMORY_BYTES`), host
lists of at most :data:`MAX_NODE_NAMES` hosts (counted, never expanded here); errors quote a value
shortened (:func:`shown`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from autoscaler.demand import NodeShape, Target
from exporter.model import MIB
from exporter.slurmtext import hostlist_count

__all__ = [
    "KEYS",
    "MetadataError",
    "check_metric_name",
    "load_targets_file",
    "metric_name",
    "parse_memory_bytes",
    "target_from_metadata",
]

KEYS = frozenset(
    {
        "partition",
        "nodeset",
        "nodeFeature",
        "nodeNames",
        "cpusPerNode",
        "memoryPerNode",
        "gpusPerNode",
        "threadsPerCore",
        "socketsPerNode",
        "coresPerSocket",
        "featuresPerNode",
        "nodeRanges",
        "cpusPerGpu",
        "min",
        "max",
        "metricName",
    }
)
KEDA_KEYS = frozenset({"scalerAddress", "caCert", "tlsClientCert", "tlsClientKey", "unsafeSsl", "enableTLS"})
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_METRIC_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
"""What a ``metricName`` may hold: Kubernetes puts it in a URL path segment (HPA's
``validateMetricIdentifier``: no ``/`` or ``%``, not ``.`` or ``..``), KEDA rewrites other punctuation."""
_HOSTLIST = re.compile(r"[A-Za-z0-9_.\-\[\],*]+")
_MEMORY = re.compile(r"(\d+)\s*([KMGTP]i?)?B?", re.IGNORECASE)
_UNIT_BYTES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


MAX_VALUE_CHARS = 256
"""Longest metadata value accepted (a Slurm name, a host list, a number): longer is an error, never a
target — one 1 MB partition name grew /metrics from 22 KB to 12 MB."""
MAX_COUNT = 1_000_000
"""Largest ``min``, ``max``, ``cpusPerNode``, ``gpusPerNode`` (a number KEDA's int64 metric must hold)."""
MAX_MEMORY_BYTES = 1 << 50
"""Largest ``memoryPerNode``: 1 PiB."""
MAX_NODE_NAMES = 100_000
"""Most hosts a ``nodeNames`` host list may name (counted without expanding it)."""
_SHOWN = 64


def shown(raw: str) -> str:
    """A metadata value as quoted in errors and logs: at most :data:`_SHOWN` characters."""
    return repr(raw) if len(raw) <= _SHOWN else f"{raw[:_SHOWN]!r}… ({len(raw)} characters)"


class MetadataError(ValueError):
    """Bad trigger metadata; ``key`` names the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"metadata {key!r}: {message}")
        self.key = key
        self.message = message


def parse_memory_bytes(text: str) -> int:
    """``"64G"``/``"64Gi"``/``"65536"`` (MiB) → bytes; units are powers of 1024, as in Slurm. ASCII
    digits only; at most :data:`MAX_MEMORY_BYTES`."""
    m = _MEMORY.fullmatch(text.strip())
    if m is None or not m.group(1).isascii() or len(m.group(1)) > 20:
        raise ValueError(f"{shown(text)} is not a memory size (MiB, or a number with K/M/G/T[i])")
    unit = (m.group(2) or "M")[0].upper()
    value = int(m.group(1)) * _UNIT_BYTES[unit]
    if value > MAX_MEMORY_BYTES:
        raise ValueError(f"{shown(text)} is more than {MAX_MEMORY_BYTES // MIB} MiB")
    return value


def _raw(meta: Mapping[str, str], key: str) -> str | None:
    """The stripped value of ``key`` (None when absent or empty); too long a value is an error."""
    raw = meta.get(key)
    if raw is None or raw.strip() == "":
        return None
    if len(raw) > MAX_VALUE_CHARS:
        raise MetadataError(key, f"{shown(raw)} is longer than {MAX_VALUE_CHARS} characters")
    return raw.strip()


def _int(meta: Mapping[str, str], key: str, *, minimum: int = 0) -> int | None:
    raw = _raw(meta, key)
    if raw is None:
        return None
    digits = raw.removeprefix("-").removeprefix("+")
    if not (digits.isascii() and digits.isdigit()):
        raise MetadataError(key, f"{shown(raw)} is not an integer")
    value = int(raw)
    if not minimum <= value <= MAX_COUNT:
        raise MetadataError(key, f"must be between {minimum} and {MAX_COUNT}, got {shown(raw)}")
    return value


def _check_layout(cpus: int, threads: int, sockets: int | None, cores: int | None) -> None:
    """Sockets × cores per socket × threads per core is the node's CPUs (Slurm's ``CPUs`` without boards);
    one of the two alone must divide what the threads leave."""
    per_thread = cpus // threads
    if sockets is not None and cores is not None:
        if sockets * cores * threads != cpus:
            raise MetadataError(
                "coresPerSocket",
                f"{sockets} sockets × {cores} cores × {threads} threads is not cpusPerNode ({cpus})",
            )
    elif sockets is not None and per_thread % sockets:
        raise MetadataError("socketsPerNode", f"{sockets} does not divide {per_thread} cores per node")
    elif cores is not None and per_thread % cores:
        raise MetadataError("coresPerSocket", f"{cores} does not divide {per_thread} cores per node")


def _name(meta: Mapping[str, str], key: str, pattern: re.Pattern[str] = _NAME) -> str | None:
    value = _raw(meta, key)
    if value is None:
        return None
    if not pattern.fullmatch(value):
        raise MetadataError(key, f"{shown(value)} is not a valid name")
    return value


def _resolve_from_env(meta: Mapping[str, str]) -> dict[str, str]:
    """KEDA hands ``<key>FromEnv`` on with the value it resolved from the workload's environment."""
    out = dict(meta)
    for key, value in meta.items():
        base = key.removesuffix("FromEnv")
        if base != key and base in KEYS:
            del out[key]
            out.setdefault(base, value)
    return out


def target_from_metadata(meta: Mapping[str, str]) -> Target:
    """Build the target a trigger's metadata describes; :class:`MetadataError` names a bad key."""
    meta = _resolve_from_env(meta)
    for key in sorted(meta):
        if key not in KEYS and key not in KEDA_KEYS:
            raise MetadataError(key[:_SHOWN], f"unknown key (known: {', '.join(sorted(KEYS))})")
    partition = _name(meta, "partition")
    if partition is None:
        raise MetadataError("partition", "is required (the Slurm partition to scale for)")
    nodeset = _name(meta, "nodeset")
    feature = _name(meta, "nodeFeature")
    node_names = _name(meta, "nodeNames", _HOSTLIST)
    if node_names is not None and not node_names.endswith("*"):
        try:  # counted, not expanded: n[0-999999] would take the event loop for half a second
            count = hostlist_count(node_names)
        except ValueError as e:
            raise MetadataError("nodeNames", f"not a Slurm host list: {e}") from None
        if count > MAX_NODE_NAMES:
            raise MetadataError("nodeNames", f"names {count} hosts, more than {MAX_NODE_NAMES}")
    if nodeset is not None and feature is None and node_names is None:
        feature = nodeset
    cpus = _int(meta, "cpusPerNode", minimum=1)
    gpus = _int(meta, "gpusPerNode")
    threads = _int(meta, "threadsPerCore", minimum=1)
    sockets = _int(meta, "socketsPerNode", minimum=1)
    cores = _int(meta, "coresPerSocket", minimum=1)
    memory = 0
    raw_mem = _raw(meta, "memoryPerNode")
    if raw_mem is not None:
        try:
            memory = parse_memory_bytes(raw_mem)
        except ValueError as e:
            raise MetadataError("memoryPerNode", str(e)) from None
    shape = None
    if cpus is not None:
        if threads is not None and cpus % threads:
            raise MetadataError("threadsPerCore", f"{threads} does not divide cpusPerNode ({cpus})")
        _check_layout(cpus, threads or 1, sockets, cores)
        shape = NodeShape(
            cpus=cpus,
            memory_bytes=memory,
            gpus=gpus or 0,
            threads_per_core=threads or 1,
            sockets=sockets or 0,
            cores_per_socket=cores or 0,
        )
    else:
        given = [
            key
            for key, value in (
                ("gpusPerNode", gpus),
                ("memoryPerNode", memory or None),
                ("threadsPerCore", threads),
                ("socketsPerNode", sockets),
                ("coresPerSocket", cores),
            )
            if value is not None
        ]
        if given:
            raise MetadataError(given[0], "a node shape needs cpusPerNode too")
    features: frozenset[str] = frozenset()
    raw_features = _raw(meta, "featuresPerNode")
    if raw_features is not None:
        names = [f.strip() for f in raw_features.split(",") if f.strip()]
        bad = [f for f in names if not _NAME.fullmatch(f)]
        if bad:
            raise MetadataError("featuresPerNode", f"{shown(bad[0])} is not a valid feature name")
        features = frozenset(names)
    _metric_name(meta)
    lo = _int(meta, "min") or 0
    hi = _int(meta, "max")
    if hi is not None and hi < lo:
        raise MetadataError("max", f"{hi} is below min {lo}")
    ranges = _raw(meta, "nodeRanges") or "minimum"
    if ranges not in ("minimum", "largest"):
        raise MetadataError("nodeRanges", f"{shown(ranges)} is neither 'minimum' nor 'largest'")
    return Target(
        name=nodeset or partition,
        partition=partition,
        nodeset_feature=feature,
        node_names=node_names,
        min_nodes=lo,
        max_nodes=hi,
        shape=shape,
        features=features,
        node_ranges="largest" if ranges == "largest" else "minimum",
        cpus_per_gpu=_int(meta, "cpusPerGpu") or 0,
    )


def _metric_name(meta: Mapping[str, str]) -> str | None:
    """The ``metricName`` given (stripped), or None; too long, or characters a Kubernetes metric name in a
    URL path cannot hold, are a :class:`MetadataError` (never sent back to KEDA in GetMetricSpec)."""
    value = _raw(meta, "metricName")
    return None if value is None else check_metric_name(value)


def check_metric_name(value: str) -> str:
    """``value`` if it can be a metric name KEDA and Kubernetes take, else :class:`MetadataError`."""
    if len(value) > MAX_VALUE_CHARS:
        raise MetadataError("metricName", f"{shown(value)} is longer than {MAX_VALUE_CHARS} characters")
    if not _METRIC_NAME.fullmatch(value) or value in (".", ".."):
        raise MetadataError(
            "metricName",
            f"{shown(value)} is not a metric name (letters, digits, '-', '_', '.', ':'; "
            "Kubernetes puts it in a URL path)",
        )
    return value


def metric_name(meta: Mapping[str, str], target: Target) -> str:
    """The metric name KEDA uses for this trigger (``metricName`` or a name from the target); a bad
    ``metricName`` is a :class:`MetadataError`."""
    given = _metric_name(_resolve_from_env(meta))
    if given:
        return given
    if target.name != target.partition:
        return f"slurm-desired-nodes-{target.partition}-{target.name}"
    return f"slurm-desired-nodes-{target.partition}"


def load_targets_file(path: Path) -> list[Target]:
    """Targets from a YAML file: a list (or ``{targets: [...]}``) of metadata mappings.

    Raises ``ValueError`` naming the entry and key.
    """
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: {e}") from None
    entries = doc.get("targets") if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty list of targets (or targets: [...])")
    out: list[Target] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: target #{i + 1} is not a mapping")
        meta = {str(k): "" if v is None else str(v) for k, v in entry.items()}
        try:
            target = target_from_metadata(meta)
        except MetadataError as e:
            raise ValueError(f"{path}: target #{i + 1}: {e}") from None
        if any(t.name == target.name for t in out):
            raise ValueError(f"{path}: target #{i + 1}: name {target.name!r} used twice")
        out.append(target)
    return out
