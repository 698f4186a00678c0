"""Job request → the body of slurmrestd's ``POST /slurm/<version>/job/submit``, per API version. Pure.

Two kinds of placeholder job hold a node for a pod and run nothing of the pod's:

* **external** (v0.0.43 and later: Slurm ≥ 25.11): ``flags: ["EXTERNAL_JOB"]`` and no script — the
  job holds its allocation and starts no process (verified on the 26.05 lab, ``docs/bridge.md``).
* **batch** (v0.0.40 – v0.0.42: Slurm 24.11 has no EXTERNAL_JOB): a batch script that only waits
  until the job is cancelled (or its time limit ends it), so the bridge works there too.

Node exclusivity: ``shared: ["none"]`` (what ``sbatch --exclusive`` sets) from v0.0.42 on,
``exclusive: ["true"]`` on v0.0.40/41. Nodes the bridge must avoid (cordoned, NotReady) go into
``excluded_nodes`` — the job is never pinned with ``required_nodes``, so a node that vanishes does not
fail the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from exporter.client import version_key

from .requests import JobRequest

__all__ = ["PLACEHOLDER_SCRIPT", "placeholder_kind", "submit_body"]

PLACEHOLDER_SCRIPT = (
    "#!/bin/sh\n"
    "# slurm-keda bridge placeholder: holds this allocation for a Kubernetes pod until cancelled\n"
    "trap 'exit 0' TERM INT\n"
    "while :; do sleep 3600 & wait $!; done\n"
)
"""The batch placeholder (API versions without EXTERNAL_JOB): waits, and ends cleanly on SIGTERM."""


def placeholder_kind(version: str) -> Literal["external", "batch"]:
    """``external`` where the API has the EXTERNAL_JOB flag (v0.0.43+), else ``batch``."""
    if version_key(version) < (0, 0, 40):
        raise ValueError(f"the bridge needs slurmrestd API v0.0.40 or later (got {version})")
    return "external" if version_key(version) >= (0, 0, 43) else "batch"


def _number(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": value}


def submit_body(
    request: JobRequest, version: str, *, instance: str, excluded_nodes: Sequence[str] = ()
) -> dict[str, Any]:
    """The ``job/submit`` body for ``request`` on API ``version``, tagged with this bridge ``instance``."""
    kind = placeholder_kind(version)
    job: dict[str, Any] = {
        "name": request.name,
        "partition": request.partition,
        "minimum_nodes": request.nodes,
        "maximum_nodes": request.nodes,
        "tasks": request.nodes,
        "tasks_per_node": 1,
        "cpus_per_task": request.cpus,
        "user_id": str(request.user_id),
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/bin:/bin"],
        "admin_comment": request.admin_comment(instance),
    }
    if request.group_id is not None:
        job["group_id"] = str(request.group_id)
    if request.memory_mib is not None:
        job["memory_per_node"] = _number(request.memory_mib)
    if request.time_limit_minutes is not None:
        job["time_limit"] = _number(request.time_limit_minutes)
    tres = [f"gres/gpu:{request.gpus}"] if request.gpus else []
    tres += [f"gres/{name}:{count}" for name, count in request.gres]
    if tres:
        job["tres_per_node"] = ",".join(tres)
    for field in ("account", "qos", "reservation", "constraints", "licenses", "wckey"):
        value = getattr(request, field)
        if value is not None:
            job[field] = value
    if request.exclusive:
        if version_key(version) >= (0, 0, 42):
            job["shared"] = ["none"]
        else:
            job["exclusive"] = ["true"]
    if excluded_nodes:
        job["excluded_nodes"] = list(excluded_nodes)
    if kind == "external":
        job["flags"] = ["EXTERNAL_JOB"]
    else:
        job["script"] = PLACEHOLDER_SCRIPT
    return {"job": job}
