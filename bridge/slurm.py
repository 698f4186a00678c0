"""The bridge's writes to Slurm — submit a placeholder job, cancel a job — through the project's slurmrestd
client (its token handling, TLS and typed errors). Every read comes from the poller's snapshot.

Answers are checked: a submission answered 2xx with ``errors[]`` (slurmctld refused the job) raises
:class:`~exporter.errors.SlurmReportedError` with slurmctld's text; an answer without a job id is a
:class:`~exporter.errors.ShapeError`. Cancelling a job Slurm no longer knows is not an error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from exporter.client import SlurmClient
from exporter.errors import HTTPStatusError, ShapeError, SlurmReportedError
from exporter.versions._common import decode

from .jobdesc import submit_body
from .requests import JobRequest

__all__ = ["cancel_job", "parse_submit_answer", "submit_job"]


class _Error(msgspec.Struct):
    description: str | None = None
    error: str | None = None
    error_number: int | None = None


class _SubmitAnswer(msgspec.Struct):
    job_id: int | None = None
    job_submit_user_msg: str | None = None
    errors: list[_Error] = []


_ANSWER = msgspec.json.Decoder(_SubmitAnswer)


def _texts(errors: Sequence[_Error]) -> list[str]:
    return [e.description or e.error or f"error {e.error_number}" for e in errors]


def parse_submit_answer(body: bytes) -> int:
    """The job id of a ``job/submit`` answer; typed errors for a refusal or a malformed answer."""
    answer = decode(_ANSWER, body, "job/submit")
    if answer.errors:
        raise SlurmReportedError("; ".join(_texts(answer.errors)), endpoint="job/submit")
    if answer.job_id is None or answer.job_id < 1:
        raise ShapeError("job/submit answered no job_id - at `$.job_id`", endpoint="job/submit")
    return answer.job_id


async def submit_job(
    client: SlurmClient,
    version: str,
    request: JobRequest,
    *,
    instance: str,
    excluded_nodes: Sequence[str] = (),
) -> int:
    """Submit ``request``'s placeholder job; its Slurm job id."""
    body: dict[str, Any] = submit_body(request, version, instance=instance, excluded_nodes=excluded_nodes)
    answer = await client.send(
        "POST", f"/slurm/{version}/job/submit", endpoint="job/submit", body=json.dumps(body).encode()
    )
    return parse_submit_answer(answer)


async def cancel_job(client: SlurmClient, version: str, job_id: int) -> bool:
    """Cancel ``job_id`` (SIGKILL to nothing: a placeholder runs no pod process). False when Slurm no
    longer knows the job (already gone: nothing to cancel)."""
    try:
        await client.send("DELETE", f"/slurm/{version}/job/{job_id}", endpoint="job/cancel")
    except HTTPStatusError as e:
        if any("Invalid job id" in t or "does not exist" in t for t in e.errors) or e.status == 404:
            return False
        raise
    return True
