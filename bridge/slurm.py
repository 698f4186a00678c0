"""The bridge's writes to Slurm — submit a placeholder job, update one (its excluded nodes, its admin
comment), cancel one — through the project's slurmrestd client (its token handling, TLS and typed errors).
Every read comes from the poller's snapshot.

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

__all__ = [
    "cancel_job",
    "exclude_nodes",
    "parse_submit_answer",
    "set_admin_comment",
    "submit_job",
    "update_node",
]


class _Error(msgspec.Struct):
    description: str | None = None
    error: str | None = None
    error_number: int | None = None


class _SubmitAnswer(msgspec.Struct):
    job_id: int | None = None
    job_submit_user_msg: str | None = None
    errors: list[_Error] = []


_ANSWER = msgspec.json.Decoder(_SubmitAnswer)


class _SignalError(msgspec.Struct):
    code: int = 0
    message: str | None = None
    string: str | None = None


class _SignalStatus(msgspec.Struct):
    error: _SignalError = msgspec.field(default_factory=_SignalError)


class _CancelAnswer(msgspec.Struct):
    status: list[_SignalStatus] = []
    errors: list[_Error] = []


_CANCEL = msgspec.json.Decoder(_CancelAnswer)
GONE_CODES = frozenset({2017, 2021})
"""slurmctld's answers to cancelling a job it does not know (``Invalid job id specified``) or one that
already ended (``Job/step already completing or completed``) — slurmrestd says so with HTTP 200."""
NOT_PENDING_CODES = GONE_CODES | {2073}
"""slurmctld's answers to updating a job's excluded nodes when it is unknown, done, or no longer pending
(2073, ``Job is no longer pending execution``: slurmrestd 26.05 says it with HTTP 422, 24.11 with HTTP 500;
seen in the labs)."""
NOT_PENDING = "no longer pending"


def _texts(errors: Sequence[_Error]) -> list[str]:
    out = []
    for e in errors:
        parts = [p for p in (e.description, e.error) if p]
        out.append(": ".join(dict.fromkeys(parts)) or f"error {e.error_number}")
    return out


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
    lane: int = 0,
) -> int:
    """Submit ``request``'s placeholder job; its Slurm job id. ``lane`` picks one of several request lanes
    (the client sends one request per lane at a time), so submissions can run side by side."""
    body: dict[str, Any] = submit_body(request, version, instance=instance, excluded_nodes=excluded_nodes)
    answer = await client.send(
        "POST", f"/slurm/{version}/job/submit", endpoint=f"job/submit:{lane}", body=json.dumps(body).encode()
    )
    return parse_submit_answer(answer)


async def cancel_job(client: SlurmClient, version: str, job_id: int) -> bool:
    """Cancel ``job_id``. False when there was nothing to cancel: Slurm does not know the job, or it
    already ended (slurmrestd answers both with HTTP 200 and a per-job error code, see :data:`GONE_CODES`)."""
    try:
        body = await client.send("DELETE", f"/slurm/{version}/job/{job_id}", endpoint="job/cancel")
    except HTTPStatusError as e:
        if e.unknown_job:
            return False
        raise
    answer = decode(_CANCEL, body, "job/cancel")
    if answer.errors:
        raise SlurmReportedError("; ".join(_texts(answer.errors)), endpoint="job/cancel")
    codes = [st.error.code for st in answer.status if st.error.code]
    if codes and all(c in GONE_CODES for c in codes):
        return False
    if codes:
        texts = [
            st.error.message or st.error.string or str(st.error.code) for st in answer.status if st.error.code
        ]
        raise SlurmReportedError(f"job {job_id}: " + "; ".join(texts), endpoint="job/cancel")
    return True


class _UpdateResult(msgspec.Struct):
    job_id: int | None = None
    error: str | None = None
    error_code: int | None = None


class _UpdateAnswer(msgspec.Struct):
    results: list[_UpdateResult] | None = None
    """26.05 answers ``null`` here for a pending job updated."""
    errors: list[_Error] = []


_UPDATE = msgspec.json.Decoder(_UpdateAnswer)


async def exclude_nodes(client: SlurmClient, version: str, job_id: int, nodes: Sequence[str]) -> bool:
    """Set the nodes a pending job may not use (its ``ExcNodeList``, all of them: an empty list clears
    it). False when there was nothing to update: Slurm does not know the job, or it is no longer pending
    (it started meanwhile: the binding checks its node). Raises for any other refusal."""
    # a comma-separated string: an empty list leaves ExcNodeList as it was, "" clears it (26.05, the lab;
    # 24.11 takes the string as well, with a warning that it expected an array, and "" clears it too)
    return await _update_job(client, version, job_id, {"excluded_nodes": ",".join(nodes)})


async def update_node(client: SlurmClient, version: str, node: str, state: str, reason: str = "") -> None:
    """Set a Slurm node's state (``DRAIN`` with ``reason``, ``RESUME``): ``POST /node/{name}``. Raises for
    a refusal (slurmctld's text)."""
    fields: dict[str, Any] = {"state": [state]}
    if reason:
        fields["reason"] = reason
    answer = await client.send(
        "POST", f"/slurm/{version}/node/{node}", endpoint="node/update", body=json.dumps(fields).encode()
    )
    parsed = decode(_UPDATE, answer, "node/update")
    if parsed.errors:
        raise SlurmReportedError("; ".join(_texts(parsed.errors)), endpoint="node/update")


async def set_admin_comment(client: SlurmClient, version: str, job_id: int, text: str) -> bool:
    """Replace a job's ``admin_comment`` (pending or running). False when Slurm does not know the job or it
    already ended; raises for any other refusal."""
    return await _update_job(client, version, job_id, {"admin_comment": text})


async def _update_job(client: SlurmClient, version: str, job_id: int, fields: dict[str, Any]) -> bool:
    """``POST /job/{id}`` with ``fields``; False for a job unknown, ended or (where the field needs it)
    no longer pending, see :data:`NOT_PENDING_CODES`."""
    body = json.dumps(fields).encode()
    try:
        answer = await client.send("POST", f"/slurm/{version}/job/{job_id}", endpoint="job/update", body=body)
    except HTTPStatusError as e:
        # a job that started meanwhile: "Job is no longer pending execution" (2073), HTTP 422 (26.05) or 500
        # (24.11; POSTs are never retried, so the 500 comes straight here)
        if e.unknown_job or any(NOT_PENDING in t for t in e.errors):
            return False
        raise
    parsed = decode(_UPDATE, answer, "job/update")
    results = parsed.results or []
    codes = [r.error_code for r in results if r.error_code]
    if parsed.errors and not codes:
        raise SlurmReportedError("; ".join(_texts(parsed.errors)), endpoint="job/update")
    if codes and all(c in NOT_PENDING_CODES for c in codes):
        return False
    if codes:
        texts = [r.error or str(r.error_code) for r in results if r.error_code]
        raise SlurmReportedError(f"job {job_id}: " + "; ".join(texts), endpoint="job/update")
    return True
