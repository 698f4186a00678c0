"""A real, in-process HTTP server that answers like slurmrestd, from the lab's recorded answers.

It serves ``/openapi/v3`` listing the recorded API versions and ``/slurm/<v>/<endpoint>/`` with the
recorded bytes, checks ``X-SLURM-USER-TOKEN`` against the current expected token, and can be told
per endpoint to misbehave (``faults``) so tests see every error class through the real client.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from testkit.fake_jobs import JobTable
from testkit.tools import serve_app

Fault = str
"""``"ok"``, ``"status:<code>"``, ``"status:<code>:<errors[] text>"``, ``"not_json"``, ``"truncate"``
(Content-Length promises more than is sent), ``"cut_json"`` (2xx, JSON cut short), ``"shape"``, ``"deep"``
(1,100 nested arrays in the first record), ``"pretty:<code>"`` (slurmrestd's error answer: pretty-printed
JSON, empty ``errors[]``), ``"impossible"`` (job id −2, node CPUs −9), ``"hang"`` (never
answers), ``"304"``, ``"empty_list"`` (valid answer with no records)."""


@dataclass
class FakeSlurmrestd:
    data_dir: Path
    """A recorded ``slurm-<release>`` directory (``v0.0.NN/<endpoint>.json`` inside)."""
    token: str | None = "good-token"
    """Expected token; None accepts anything."""
    versions: list[str] = field(default_factory=list)
    """Versions offered by /openapi/v3 (default: every recorded one)."""
    faults: dict[str, Fault] = field(default_factory=dict)
    """Endpoint (``jobs``, ``nodes``, ..., ``openapi``; ``job/<id>`` for one job's reads) → fault; missing
    means ok."""
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    """(path, query, headers) of every request seen."""
    slurmdb_job_queries: list[list[tuple[str, str]]] = field(default_factory=list)
    """Every ``/slurmdb/.../jobs`` query as (name, value) pairs, repeated names kept (``state=``)."""
    clock: Callable[[], float] = time.time
    """slurmdbd's clock: what ``now`` means in a ``/slurmdb/.../jobs`` time."""
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: dict[str, int] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds every answer waits before it is sent."""
    delays: dict[str, float] = field(default_factory=dict)
    """Endpoint → seconds its answers wait before they are sent (beside :attr:`delay`)."""
    override: dict[str, bytes] = field(default_factory=dict)
    """Endpoint → body to send instead of the recorded one."""
    fault_times: dict[str, int] = field(default_factory=dict)
    """Endpoint → how many more requests get its fault (then it answers ok); missing = always."""
    hang_seconds: float = 1.0
    hang_until: asyncio.Event | None = None
    """When set, ``"hang"`` waits for this event instead of ``hang_seconds``."""
    offered: tuple[str, ...] = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations", "ping")
    """The endpoints /openapi/v3 lists for every version."""
    whole_states_gate: asyncio.Event | None = None
    """When set, a whole ``/jobs/state`` answer (no ``job_id``) of :attr:`jobs_table` is made when asked and
    sent once this event is set: as slurmrestd renders a large one, as of its request, seconds later."""
    jobs_table: JobTable | None = None
    """When set, ``/jobs``, ``/jobs/state/`` and ``/job/{id}`` answer from this table (faults still apply, by
    the endpoint names ``jobs``, ``jobs/state`` and ``job``)."""
    whole_states_waiting: int = 0
    """Whole ``/jobs/state`` answers made and held back by :attr:`whole_states_gate`."""
    _made: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.versions:
            self.versions = sorted(p.name for p in self.data_dir.glob("v0.0.*"))

    async def whole_states_made(self) -> None:
        """Until a whole ``/jobs/state`` answer is made and held back by :attr:`whole_states_gate` (at once
        when one is): over real HTTP a request reaches the fake a moment after the poller sent it, and a
        test that changes the table meanwhile would have it answer as of later than its request."""
        await self._made.wait()

    def body(self, version: str, endpoint: str) -> bytes:
        if endpoint in self.override:
            return self.override[endpoint]
        raw = (self.data_dir / version / f"{endpoint}.json").read_bytes()
        if endpoint == "diag" and self.jobs_table is not None and self.jobs_table.counts:
            doc = json.loads(raw)  # the recorded counters plus what happened to the job table
            for name, n in self.jobs_table.counts.items():
                doc["statistics"][f"jobs_{name}"] += n
            return json.dumps(doc).encode()
        return raw

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/openapi/v3", self._openapi)
        app.router.add_get(r"/slurm/{version}/jobs/state/", self._job_states)
        app.router.add_get(r"/slurm/{version}/job/{job_id}", self._job)
        app.router.add_get(r"/slurm/{version}/{endpoint:[a-z]+}{slash:/?}", self._endpoint)
        app.router.add_get(r"/slurmdb/{version}/{what:jobs|qos|associations}{slash:/?}", self._slurmdb)
        return app

    def _auth(self, request: web.Request) -> web.Response | None:
        if self.token is None or request.headers.get("X-SLURM-USER-TOKEN") == self.token:
            return None
        body = {"errors": [{"description": "Authentication failure", "error_number": 1007}]}
        return web.json_response(body, status=401)

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, dict(request.query), dict(request.headers)))
        fault = self.faults.get("openapi", "ok")
        if fault != "ok":
            return await self._fault(request, fault, b"{}")
        slurmdb = {"slurmdb_jobs": "jobs", "qos": "qos", "associations": "associations"}
        paths = {
            (f"/slurmdb/{v}/{slurmdb[e]}/" if e in slurmdb else f"/slurm/{v}/{e}/"): {"get": {}}
            for v in self.versions
            for e in self.offered
        }
        return web.json_response({"openapi": "3.0.2", "paths": paths})

    async def _slurmdb(self, request: web.Request) -> web.StreamResponse:
        what = request.match_info["what"]
        return await self._endpoint(request, "slurmdb_jobs" if what == "jobs" else what)

    async def _job_states(self, request: web.Request) -> web.StreamResponse:
        return await self._endpoint(request, "jobs/state")

    async def _job(self, request: web.Request) -> web.StreamResponse:
        return await self._endpoint(request, "job")

    def _table_body(self, request: web.Request, endpoint: str) -> bytes | None:
        """The job table's answer; None for 304 (``jobs``) or 404 (``job``)."""
        table = self.jobs_table
        assert table is not None
        if endpoint == "jobs/state":
            asked = request.query.getall("job_id", [])
            return table.states([int(i) for i in asked] if asked else None)
        if endpoint == "job":
            return table.job(int(request.match_info["job_id"]))
        since = request.query.get("update_time")
        return table.listing(int(since) if since else None)

    async def _endpoint(self, request: web.Request, endpoint: str = "") -> web.StreamResponse:
        endpoint = endpoint or request.match_info["endpoint"]
        version = request.match_info["version"]
        self.requests.append((request.path, dict(request.query), dict(request.headers)))
        self.in_flight[endpoint] = self.in_flight.get(endpoint, 0) + 1
        self.max_in_flight[endpoint] = max(self.max_in_flight.get(endpoint, 0), self.in_flight[endpoint])
        try:
            if self.delay or endpoint in self.delays:
                await asyncio.sleep(self.delay + self.delays.get(endpoint, 0.0))
            denied = self._auth(request)
            if denied is not None:
                return denied
            if version not in self.versions:
                return web.json_response({"errors": [{"description": "Unknown version"}]}, status=404)
            fault = self.faults.get(endpoint, "ok")
            if "job_id" in request.match_info:  # "job/<id>": one job's reads only
                fault = self.faults.get(f"{endpoint}/{request.match_info['job_id']}", fault)
            if endpoint in self.fault_times:
                if self.fault_times[endpoint] <= 0:
                    fault = "ok"
                self.fault_times[endpoint] -= 1
            if endpoint == "jobs/state" and any("," in i for i in request.query.getall("job_id", [])):
                return web.Response(status=400, text="Unable to parse query.")  # as slurmrestd 24.11/26.05
            if self.jobs_table is not None and endpoint in ("jobs", "jobs/state", "job"):
                answer = self._table_body(request, endpoint)
                whole = endpoint == "jobs/state" and not request.query.getall("job_id", [])
                if whole and self.whole_states_gate is not None:
                    self.whole_states_waiting += 1
                    self._made.set()
                    try:
                        await self.whole_states_gate.wait()
                    finally:
                        self.whole_states_waiting -= 1
                        if not self.whole_states_waiting:
                            self._made.clear()
                if answer is None and fault == "ok" and endpoint == "job":
                    errors = [{"description": "Unable to query JobId", "error": "Invalid job id specified"}]
                    return web.json_response({"jobs": [], "errors": errors}, status=404)
                if answer is None and fault == "ok":
                    return web.Response(status=304)
                body = answer or b'{"jobs": []}'
            elif endpoint in ("jobs/state", "job"):
                return web.json_response(
                    {"errors": [{"description": "Unable find requested URL"}]}, status=404
                )
            elif endpoint == "slurmdb_jobs":
                self.slurmdb_job_queries.append(list(request.query.items()))
                body = self.body(version, endpoint)
                states = request.query.getall("state", [])
                if states:
                    answer = slurmdb_jobs_in_states(body, states, request.query, version, self.clock())
                    if isinstance(answer, web.Response):
                        return answer
                    body = answer
            else:
                body = self.body(version, endpoint)
            return await self._fault(request, fault, body)
        finally:
            self.in_flight[endpoint] -= 1

    async def _fault(self, request: web.Request, fault: Fault, body: bytes) -> web.StreamResponse:
        if fault == "ok":
            return web.Response(body=body, content_type="application/json")
        if fault.startswith("pretty:"):  # slurmrestd's own error answer: pretty JSON, errors[] empty
            doc = {"meta": {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld"}}}
            text = json.dumps({**doc, "errors": [], "warnings": []}, indent=2)
            return web.Response(text=text, status=int(fault[7:]), content_type="application/json")
        if fault.startswith("status:"):
            _, code, *text = fault.split(":", 2)
            errors = [{"description": text[0], "error_number": 9}] if text else []
            return web.json_response({"errors": errors}, status=int(code))
        if fault == "not_json":
            return web.Response(body=b"<html>502 Bad Gateway</html>", content_type="text/html")
        if fault == "cut_json":
            return web.Response(body=body[: len(body) // 2], content_type="application/json")
        if fault == "shape":
            return web.json_response({"jobs": "not a list", "nodes": 7, "partitions": {"x": 1}})
        if fault == "deep":  # 1,100 nested arrays in an unknown field of the first record
            deep = b"[" * 1100 + b"]" * 1100
            first = rb'("(?:jobs|nodes|partitions|licenses|reservations)":\s*\[\s*\{|"statistics":\s*\{)'
            doc = re.sub(first, lambda m: m.group(1) + b'"x": ' + deep + b", ", body, count=1)
            return web.Response(body=doc, content_type="application/json")
        if fault == "impossible":  # the first record says what no Slurm record can
            doc = json.loads(body)
            if doc.get("jobs"):
                doc["jobs"][0]["job_id"] = -2
            if doc.get("nodes"):
                doc["nodes"][0]["cpus"] = -9
            return web.json_response(doc)
        if fault == "empty_list":
            doc = json.loads(body)
            for key in ("jobs", "nodes", "partitions", "reservations", "licenses"):
                if key in doc:
                    doc[key] = []
            return web.json_response(doc)
        if fault == "304":
            return web.Response(status=304)
        if fault == "hang":
            if self.hang_until is not None:
                await self.hang_until.wait()
            else:
                await asyncio.sleep(self.hang_seconds)
            return web.Response(body=body, content_type="application/json")
        if fault == "truncate":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(body)
            await resp.prepare(request)
            await resp.write(body[: len(body) // 2])
            assert request.transport is not None
            request.transport.close()
            return resp
        raise AssertionError(f"unknown fault {fault}")


def serve(fake: FakeSlurmrestd) -> AbstractAsyncContextManager[str]:
    """Run ``fake`` on 127.0.0.1 (free port); yield its base URL."""
    return serve_app(fake.app())


def slurmdb_jobs_in_states(
    body: bytes, states: list[str], query: Mapping[str, str], version: str, now: float
) -> bytes | web.Response:
    """What slurmrestd 24.11/26.05 answer to ``/slurmdb/.../jobs?state=...`` (seen in the labs): each
    ``state=`` one state name (a comma list is one unknown flag: HTTP 500 with error 9207, as slurmrestd);
    the jobs in those states that ended within ``start_time``–``end_time`` (without ``end_time`` slurmdbd
    takes the start: nothing ended in a zero-length window). Times are epoch numbers (refused by v0.0.40
    and v0.0.41: HTTP 422, error 9202) or sacct's ``now[+-N]`` (seconds) against ``now``."""
    for state in states:
        if "," in state:
            error = {"description": f'Unknown flag "{state}"', "error_number": 9207}
            return web.json_response({"jobs": [], "errors": [error]}, status=500)
    times: dict[str, float] = {}
    for name in ("start_time", "end_time"):
        text = query.get(name)
        if text is None:
            continue
        relative = re.fullmatch(r"now(?:([+-])(\d+))?", text)
        if relative is not None:
            sign, n = relative.groups()
            times[name] = now + (int(n) if sign == "+" else -int(n) if sign else 0)
        elif text.isdigit() and version not in ("v0.0.40", "v0.0.41"):
            times[name] = int(text)
        else:
            error = {"description": f"Parsing of {text} for timestamp failed", "error_number": 9202}
            return web.json_response({"errors": [error]}, status=422)
    start = times.get("start_time", 0.0)
    end = times.get("end_time", start)
    doc = json.loads(body)
    doc["jobs"] = [
        j
        for j in doc.get("jobs", [])
        if j["state"]["current"][0] in states and start <= j["time"]["end"] <= end and j["time"]["end"]
    ]
    return json.dumps(doc).encode()
