"""One slurmrestd, shared: the client and the API version negotiated with it.

The poller, the bridge's job watch and its submissions all talk to slurmrestd through one
:class:`SlurmSession`, so they share the client's token, TLS, request lanes (``--max-concurrency``) and
the version chosen from ``/openapi/v3`` — nobody reaches into another component for it. The poller
negotiates (:meth:`SlurmSession.negotiate`, on its first poll and again after slurmrestd was upgraded);
the others read :attr:`SlurmSession.api_version` and wait for it to be set.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from . import versions
from .client import ApiPaths, SlurmClient, choose_jobs_version, choose_version, version_key
from .errors import HTTPStatusError, ShapeError, SlurmError, SlurmReportedError
from .jobsync import StatesRead, parse_states
from .model import Envelope, Job
from .validate import check_jobs, decode_each, job_stand_in

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Negotiated:
    """The outcome of one negotiation."""

    version: str
    """The API version every endpoint but ``/jobs`` is read with (the highest both sides know, or forced)."""
    jobs_version: str
    """The version ``/jobs`` and ``/job/{id}`` are read with (differs on Slurm 26.05: job exclusivity)."""
    offered: tuple[str, ...]
    """Every version slurmrestd offers, oldest first."""
    paths: dict[str, str]
    """Endpoint name → path slurmrestd lists for it (``/jobs`` with :attr:`jobs_version`)."""
    adapter: versions.Adapter
    jobs_adapter: versions.Adapter


class SlurmSession:
    """The client and the negotiated version; single-job reads for the bridge's fast path."""

    def __init__(self, client: SlurmClient, *, api_version: str | None = None) -> None:
        self.client = client
        self.forced_version = api_version
        """``--api-version``: this version instead of the highest common one."""
        self.negotiated: Negotiated | None = None

    @property
    def api_version(self) -> str | None:
        """The negotiated version; None before the first negotiation (and after :meth:`forget`)."""
        return self.negotiated.version if self.negotiated is not None else None

    async def negotiate(self) -> Negotiated:
        """Read ``/openapi/v3`` and choose the versions (logged). Raises SlurmError."""
        offered: ApiPaths = await self.client.openapi()
        version = choose_version(offered, versions.SUPPORTED_VERSIONS, self.forced_version)
        adapter = versions.adapter_for(version)
        jobs_version = choose_jobs_version(offered, version, self.forced_version)
        jobs_adapter = versions.adapter_for(jobs_version)
        paths = dict(offered.get(version, {}))
        paths["jobs"] = offered.get(jobs_version, {}).get("jobs") or f"/slurm/{jobs_version}/jobs"
        self.negotiated = Negotiated(
            version=version,
            jobs_version=jobs_version,
            offered=tuple(sorted(offered, key=version_key)),
            paths=paths,
            adapter=adapter,
            jobs_adapter=jobs_adapter,
        )
        log.info(
            "slurmrestd offers API %s; using %s%s%s",
            ", ".join(self.negotiated.offered) or "none",
            version,
            " (forced)" if self.forced_version else "",
            f", /jobs with {jobs_version} (job exclusivity)" if jobs_version != version else "",
        )
        return self.negotiated

    def forget(self) -> None:
        """Negotiate again before the next read (slurmrestd answered 404 everywhere: it was upgraded)."""
        self.negotiated = None

    async def job_states(
        self, first_byte: float | None = None, ids: Sequence[int] = (), *, lane: str = ""
    ) -> StatesRead:
        """``GET /jobs/state/``: every job record's state (:func:`exporter.jobsync.parse_states`; no other
        field: 1.6 MB and under a second for 20,000 jobs where ``/jobs`` takes 27 s; ~16–19 s at 100,000),
        or only those of ``ids`` (``?job_id=N&job_id=M``: an array's id brings its tasks' records; an
        unknown id, nothing). ``first_byte``: seconds its answer may take to begin (slurmrestd renders it
        whole first; None: the small-request limits). ``lane``: a request lane of its own (a whole answer
        read beside the polls does not hold up their asks).
        Raises SlurmError (also before the first negotiation)."""
        if self.negotiated is None:
            raise SlurmError("no API version negotiated yet", endpoint="jobs/state")
        path = f"/slurm/{self.negotiated.jobs_version}/jobs/state/"
        # one job_id= a record: slurmrestd 24.11 and 26.05 refuse the comma list the OpenAPI document
        # describes ("Unable to parse query."); 2,000 ids (28 KB) pass, 10,000 are "Insane message length"
        params = [("job_id", str(i)) for i in ids] if ids else None
        return parse_states(
            await self.client.get(
                path,
                endpoint=f"jobs/state:{lane}" if lane else "jobs/state",
                params=params,
                retries=0,
                first_byte=first_byte,
            )
        )

    async def job_records(self, job_id: int, *, lane: int = 0) -> tuple[list[Job], list[tuple[Job, str]]]:
        """``GET /job/{job_id}``: the job's records as the listing reads them (an array's or het job's
        leader id brings all of its records), split into valid ones and those dropped for impossible
        values (with why); both empty when Slurm no longer knows the job. ``lane`` picks one of several
        request lanes, so single-job reads run side by side. Raises SlurmError."""
        if self.negotiated is None:
            raise SlurmError("no API version negotiated yet", endpoint="job")
        adapter = self.negotiated.jobs_adapter
        path = f"/slurm/{adapter.version}/job/{job_id}"
        try:
            body = await self.client.get(path, endpoint=f"job:{lane}", retries=0)
        except HTTPStatusError as e:
            if e.unknown_job:
                return [], []
            raise
        try:
            jobs, env = adapter.jobs(body)
            undecodable: list[tuple[Job, str]] = []
        except ShapeError:
            jobs, undecodable, env = _jobs_each(adapter, body)
        if env.errors and not jobs and not undecodable:
            if any("Invalid job id" in text or "Unable to query" in text for text in env.errors):
                return [], []
            raise SlurmReportedError("; ".join(env.errors), endpoint="job")
        good, dropped = check_jobs(jobs)
        return list(good), [*dropped, *undecodable]

    async def job(self, job_id: int, *, lane: int = 0) -> Job | None:
        """The record of ``job_id`` alone (:meth:`job_records`); None when Slurm no longer knows it."""
        good, _ = await self.job_records(job_id, lane=lane)
        return next((j for j in good if j.job_id == job_id), None)


def _jobs_each(adapter: versions.Adapter, body: bytes) -> tuple[list[Job], list[tuple[Job, str]], Envelope]:
    """A ``/job/{id}`` answer that did not decode whole, record by record
    (:func:`exporter.validate.decode_each`): the jobs that decode, the refused ones, the envelope. Raises
    the whole answer's error when its ``jobs`` array or envelope is what fails."""
    try:
        doc = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        array = doc.pop("jobs")
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
        jobs, env = adapter.jobs(body)  # raises the typed error of the whole answer
        return jobs, [], env
    _, env = adapter.jobs(msgspec.json.encode({**doc, "jobs": []}))
    good, bad = decode_each(bytes(array), adapter.job_array, job_stand_in)
    return good, bad, env
