"""The slurmrestd client against a real local HTTP server that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import itertools
import socket
from pathlib import Path

import pytest

from exporter import errors
from exporter.client import (
    ClientConfig,
    NotModified,
    SlurmClient,
    TokenSource,
    check_status,
    choose_version,
    versions_from_openapi,
)
from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.loopback import RawServer
from testkit.paths import RECORDED
from testkit.tools import no_sleep

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")


def _client(url: str, **kw: object) -> SlurmClient:
    cfg = ClientConfig(base_url=url, token=TokenSource(token="good-token"), **kw)  # type: ignore[arg-type]
    return SlurmClient(cfg, sleep=no_sleep)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- pure parts --------------------------------------------------------------------------------


def test_versions_from_openapi_keeps_server_paths() -> None:
    doc = {
        "paths": {
            "/slurm/v0.0.42/jobs/": {},
            "/slurm/v0.0.42/jobs/state/": {},
            "/slurm/v0.0.42/job/{job_id}": {},
            "/slurm/v0.0.38/nodes": {},
            "/slurmdb/v0.0.42/jobs/": {},
            "/slurmdb/v0.0.41/jobs/": {},  # slurmdbd's alone is no version to poll
            "/slurmdb/v0.0.42/qos/": {},
            "/slurmdb/v0.0.42/qos/{qos}": {},
            "/slurmdb/v0.0.42/users/": {},  # not read
        }
    }
    got = versions_from_openapi(doc)
    assert got == {
        "v0.0.42": {
            "jobs": "/slurm/v0.0.42/jobs/",
            "slurmdb_jobs": "/slurmdb/v0.0.42/jobs/",
            "qos": "/slurmdb/v0.0.42/qos/",
        },
        "v0.0.38": {"nodes": "/slurm/v0.0.38/nodes"},
    }


def test_choose_version_highest_common_and_forced() -> None:
    offered = {"v0.0.40": {}, "v0.0.41": {}, "v0.0.42": {}, "v0.0.99": {}}
    supported = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.45")
    assert choose_version(offered, supported, None) == "v0.0.42"
    assert choose_version(offered, supported, "v0.0.40") == "v0.0.40"
    with pytest.raises(errors.VersionError, match="not served"):
        choose_version(offered, supported, "v0.0.45")
    with pytest.raises(errors.VersionError, match="not supported"):
        choose_version(offered, supported, "v0.0.39")
    with pytest.raises(errors.VersionError, match=r"no common .* offers v0.0.37, v0.0.39"):
        choose_version({"v0.0.37": {}, "v0.0.39": {}}, supported, None)


def test_check_status_quotes_slurm_errors() -> None:
    body = b'{"errors": [{"description": "Unable to query nodes", "error_number": -1}]}'
    with pytest.raises(errors.HTTPStatusError) as info:
        check_status(500, body, "nodes")
    assert info.value.kind == "http_500"
    assert str(info.value) == "nodes: HTTP 500 Internal Server Error: Unable to query nodes"
    with pytest.raises(errors.AuthError):
        check_status(401, b"", "jobs")
    check_status(200, b"whatever", "jobs")


# -- I/O -----------------------------------------------------------------------------------------


async def test_get_sends_token_and_user_name() -> None:
    fake = FakeSlurmrestd(DATA)
    async with serve(fake) as url:
        cfg = ClientConfig(base_url=url, token=TokenSource(token="good-token"), user_name="alice")
        async with SlurmClient(cfg) as c:
            body = await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert body == (DATA / "v0.0.45" / "ping.json").read_bytes()
    _, _, headers = fake.requests[-1]
    assert headers["X-SLURM-USER-TOKEN"] == "good-token"
    assert headers["X-SLURM-USER-NAME"] == "alice"


async def test_openapi_lists_versions() -> None:
    fake = FakeSlurmrestd(DATA, versions=["v0.0.42", "v0.0.45"])
    async with serve(fake) as url, _client(url) as c:
        got = await c.openapi()
    assert sorted(got) == ["v0.0.42", "v0.0.45"]
    assert got["v0.0.45"]["jobs"] == "/slurm/v0.0.45/jobs/"


async def test_unreachable_is_transport_error_after_retries() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    c = _client(url, retries=2)
    async with c:
        with pytest.raises(errors.TransportError, match="cannot reach slurmrestd") as info:
            await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert info.value.kind == "unreachable"
    assert c.requests_sent == 3


@pytest.mark.parametrize(
    ("fault", "error", "kind", "text"),
    [
        ("status:500:Unable to query jobs", errors.HTTPStatusError, "http_500", "Unable to query jobs"),
        ("status:404", errors.HTTPStatusError, "http_404", "HTTP 404"),
        ("truncate", errors.TruncatedError, "truncated", "body"),
    ],
)
async def test_http_failures_are_typed(fault: str, error: type[Exception], kind: str, text: str) -> None:
    fake = FakeSlurmrestd(DATA, faults={"jobs": fault})
    async with serve(fake) as url, _client(url, retries=1) as c:
        with pytest.raises(error, match=text) as info:
            await c.get("/slurm/v0.0.45/jobs/", endpoint="jobs")
    assert info.value.kind == kind  # type: ignore[attr-defined]


async def test_retryable_status_is_retried_then_succeeds() -> None:
    fake = FakeSlurmrestd(DATA, faults={"ping": "status:503"}, fault_times={"ping": 2})
    async with serve(fake) as url:
        c = _client(url, retries=3)
        async with c:
            body = await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert body.startswith(b"{")
    assert c.requests_sent == 3


async def test_client_error_is_not_retried() -> None:
    fake = FakeSlurmrestd(DATA, faults={"ping": "status:400:bad"})
    async with serve(fake) as url:
        c = _client(url, retries=3)
        async with c:
            with pytest.raises(errors.HTTPStatusError):
                await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert c.requests_sent == 1


async def test_timeout_is_typed() -> None:
    fake = FakeSlurmrestd(DATA, faults={"ping": "hang"})
    async with serve(fake) as url, _client(url, timeout=0.3, retries=0) as c:
        with pytest.raises(errors.RequestTimeout, match=r"0\.3s") as info:
            await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert info.value.kind == "timeout"


async def test_304_raises_not_modified() -> None:
    fake = FakeSlurmrestd(DATA, faults={"nodes": "304"})
    async with serve(fake) as url, _client(url) as c:
        with pytest.raises(NotModified):
            await c.get("/slurm/v0.0.45/nodes/", endpoint="nodes", params={"update_time": "5"})
    assert fake.requests[-1][1] == {"update_time": "5"}


async def test_401_rereads_token_file_once(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    fake = FakeSlurmrestd(DATA, token="good-token")
    async with serve(fake) as url:
        cfg = ClientConfig(base_url=url, token=TokenSource(token_file=token_file))
        async with SlurmClient(cfg, sleep=no_sleep) as c:
            token_file.write_text("old-token\n")  # unchanged content: 401 surfaces after one re-read
            with pytest.raises(errors.AuthError, match="Authentication failure"):
                await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
            # the Secret is rotated while a request is failing: the re-read picks it up at once
            fake.token = "rotated"
            token_file.write_text("SLURM_JWT=rotated\n")
            body = await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
    assert body.startswith(b"{")
    assert fake.requests[-1][2]["X-SLURM-USER-TOKEN"] == "rotated"


async def test_one_request_per_endpoint_in_flight() -> None:
    fake = FakeSlurmrestd(DATA, delay=0.05)
    async with serve(fake) as url, _client(url, max_concurrency=8) as c:
        await asyncio.gather(
            *(c.get("/slurm/v0.0.45/nodes/", endpoint="nodes") for _ in range(4)),
            *(c.get("/slurm/v0.0.45/diag/", endpoint="diag") for _ in range(4)),
        )
    assert fake.max_in_flight == {"nodes": 1, "diag": 1}


async def test_concurrency_cap_across_endpoints() -> None:
    fake = FakeSlurmrestd(DATA, delay=0.05)
    eps = ["nodes", "diag", "jobs", "partitions", "licenses", "reservations"]
    async with serve(fake) as url, _client(url, max_concurrency=2) as c:
        tasks = [asyncio.create_task(c.get(f"/slurm/v0.0.45/{e}/", endpoint=e)) for e in eps]
        peak = 0
        while not all(t.done() for t in tasks):
            peak = max(peak, sum(fake.in_flight.values()))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
    assert 1 <= peak <= 2


async def test_unix_socket(tmp_path: Path) -> None:
    from aiohttp import web

    fake = FakeSlurmrestd(DATA, token=None)
    runner = web.AppRunner(fake.app())
    await runner.setup()
    sock = tmp_path / "restd.sock"
    site = web.UnixSite(runner, str(sock))
    await site.start()
    try:
        async with SlurmClient(ClientConfig(base_url=f"unix:{sock}")) as c:
            got = await c.openapi()
    finally:
        await runner.cleanup()
    assert "v0.0.45" in got


def test_bad_base_url() -> None:
    with pytest.raises(ValueError, match="must start with"):
        SlurmClient(ClientConfig(base_url="ftp://x"))


def test_token_source_rereads_rotated_file(tmp_path: Path) -> None:
    f = tmp_path / "jwt"
    f.write_text("one\n")
    src = TokenSource(token_file=f)
    assert src.current() == "one"
    f.write_text("two-longer\n")
    assert src.current() == "two-longer"
    # Kubernetes swaps a symlink to a new file
    new = tmp_path / "jwt.new"
    new.write_text("three\n")
    f.unlink()
    f.symlink_to(new)
    assert src.current() == "three"
    assert TokenSource(token=" fixed ").current() == "fixed"


# -- answers aiohttp would not take as they come -------------------------------------------------------


def _http(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Connection: Close", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


SLURM_511 = (
    b'{"errors": [{"description": "Failure to query nodes", "error_number": 1007, '
    b'"error": "Protocol authentication error", "source": "_dump_nodes"}], "warnings": []}'
)


async def test_a_doubled_511_is_a_refused_token_and_the_token_file_is_reread(tmp_path: Path) -> None:
    # slurmrestd 26.05 writes an error answer twice on one connection (seen in the lab with a bad token);
    # aiohttp refuses the second copy ("Data after Connection: close") before handing out the first
    token_file = tmp_path / "token"
    token_file.write_text("expired\n")
    answer = _http("511 Network Authentication Required", SLURM_511, "Content-Type: application/json")
    server = RawServer(
        answer * 2, on_request=lambda: token_file.write_text("rotated\n")
    )  # the Secret rotates
    async with server as url:
        cfg = ClientConfig(base_url=url, token=TokenSource(token_file=token_file), retries=0)
        async with SlurmClient(cfg, sleep=no_sleep) as c:
            with pytest.raises(errors.AuthError) as err:
                await c.get("/slurm/v0.0.45/nodes/", endpoint="nodes")
    assert err.value.kind == "http_511" and err.value.status == 511
    assert err.value.errors == ("Failure to query nodes: Protocol authentication error",)
    # slurmrestd's text (description and error), not the raw body
    assert str(err.value) == (
        "nodes: HTTP 511 Network Authentication Required: "
        "Failure to query nodes: Protocol authentication error"
    )
    tokens = [
        line for r in server.requests for line in r.split(b"\r\n") if line.startswith(b"X-SLURM-USER-TOKEN")
    ]
    assert tokens == [b"X-SLURM-USER-TOKEN: expired", b"X-SLURM-USER-TOKEN: rotated"]


async def test_redirects_are_not_followed_and_the_token_goes_nowhere() -> None:
    thief = RawServer(_http("200 OK", b'{"pings": []}'))
    async with thief as elsewhere:
        redirect = _http("302 Found", b"", f"Location: {elsewhere}/steal")
        async with RawServer(redirect) as url, _client(url, retries=0) as c:
            with pytest.raises(errors.HTTPStatusError) as err:
                await c.get("/slurm/v0.0.45/ping/", endpoint="ping")
        assert err.value.kind == "http_302"
        assert f"redirect to {elsewhere}/steal not followed" in str(err.value)
        assert b"good-token" not in str(err.value).encode()
        assert thief.requests == []  # never asked, so never given the token


async def test_a_stream_that_stops_sending_ends_after_the_idle_timeout() -> None:
    # a frozen slurmrestd (SIGSTOP) kept /jobs open for the whole --stream-timeout (600 s): slurm_up and
    # the next poll waited that long; no byte for --stream-idle-timeout ends it
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    server = RawServer(head + b'{"jobs": [', stall=10.0)
    async with server as url, _client(url, retries=0, stream_timeout=30.0, idle_timeout=0.2) as c:
        started = asyncio.get_running_loop().time()
        with pytest.raises(errors.RequestTimeout, match=r"no byte from slurmrestd for 0\.2s") as info:
            async for _ in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs"):
                pass
        assert asyncio.get_running_loop().time() - started < 5.0  # not the 30 s stream limit
    assert info.value.kind == "timeout"


async def test_a_listing_may_take_long_to_begin_but_not_to_go_on() -> None:
    """slurmrestd renders a listing whole before its first byte (27 s at 20,000 jobs, 26.05 lab): that wait
    is bounded by --stream-timeout, not the idle timeout (which cut every such listing and made slurmrestd
    render it again and again); a small answer still gets the idle limit for its first byte."""
    body = b'{"jobs": []}'
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    async with (
        RawServer(head + body, render=0.6) as url,
        _client(url, retries=0, stream_timeout=5.0, idle_timeout=0.2) as c,
    ):
        got = b"".join([chunk async for chunk in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs")])
        assert got == body
        with pytest.raises(errors.RequestTimeout, match=r"no byte from slurmrestd for 0\.2s"):
            await c.get("/slurm/v0.0.45/diag/", endpoint="diag")
    async with (
        RawServer(head + body, render=2.0) as url,
        _client(url, retries=0, stream_timeout=0.5, idle_timeout=0.2) as c,
    ):
        with pytest.raises(errors.RequestTimeout, match=r"no complete answer within 0\.5s"):
            async for _ in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs"):
                pass


async def test_a_drip_fed_stream_ends_at_the_rate_floor() -> None:
    # a byte every 50 ms never trips the idle timeout; averaged over each idle window it is far under
    # the floor, so the request ends within about two windows instead of at the stream limit
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    dripping = RawServer(head + b'{"jobs": [' + b" " * 5000, drip=(1, 0.05))
    async with (
        dripping as url,
        _client(url, retries=0, stream_timeout=60.0, idle_timeout=0.4, min_rate=1000.0) as c,
    ):
        started = asyncio.get_running_loop().time()
        with pytest.raises(errors.RequestTimeout, match=r"under the 1000 bytes/s floor") as info:
            async for _ in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs"):
                pass
        assert asyncio.get_running_loop().time() - started < 10.0  # not the 60 s stream limit
    assert info.value.kind == "timeout"


async def test_a_steady_slow_stream_above_the_floor_is_read_whole() -> None:
    body = b'{"jobs": []' + b" " * 400 + b"}"
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    async with (
        RawServer(head + body, drip=(100, 0.02)) as url,
        _client(url, retries=0, idle_timeout=0.1, min_rate=500.0) as c,
    ):
        got = b"".join([chunk async for chunk in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs")])
    assert got == body


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_cap_is_too_large(announced: bool) -> None:
    body = b'{"jobs": [' + b" " * 300_000 + b"]}"
    if announced:
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        wire = head + body
    else:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        wire = head + b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 4096]), body[i : i + 4096]) for i in range(0, len(body), 4096)
        )
        wire += b"0\r\n\r\n"
    async with RawServer(wire) as url, _client(url, retries=0, max_body_bytes=100_000) as c:
        with pytest.raises(errors.TooLargeError, match="over the 0 MiB cap") as info:
            async for _ in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs"):
                pass
    assert info.value.kind == "too_large"
    assert info.value.endpoint == "jobs"


async def test_the_event_loop_runs_between_chunks_already_buffered() -> None:
    # aiohttp hands out buffered chunks without yielding; a big body must not hold the loop the whole time
    body = b"x" * 200_000
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with RawServer(head + body) as url, _client(url, retries=0, chunk_bytes=1000) as c:
        await asyncio.sleep(0.2)  # nothing sent yet: the answer goes out on the request
        task = asyncio.create_task(ticker())
        try:
            seen = []
            async for chunk in c.stream("/slurm/v0.0.45/jobs/", endpoint="jobs"):
                seen.append((len(chunk), ticks))
        finally:
            task.cancel()
    assert sum(n for n, _ in seen) == len(body)
    between = [b[1] - a[1] for a, b in itertools.pairwise(seen)]
    assert min(between) >= 1, "a chunk was handed out without the loop running other tasks"


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"<html>502</html>", "not_json"),
        (b"[1, 2]", "shape"),
        (b'{"paths": ', "truncated"),
        (b"[" * 5000, "shape"),
    ],
    ids=["html", "not-an-object", "cut", "deep"],
)
async def test_a_bad_openapi_document_is_a_typed_error(body: bytes, kind: str) -> None:
    answer = _http("200 OK", body, "Content-Type: application/json")
    async with RawServer(answer) as url, _client(url, retries=0) as c:
        with pytest.raises(errors.SlurmError) as info:
            await c.openapi()
    assert info.value.kind == kind
    assert info.value.endpoint == "openapi"


async def test_writes_have_their_own_slots_beside_the_reads() -> None:
    """A read holding every read slot (a long listing) does not hold the bridge's submissions back."""
    from aiohttp import web

    from testkit.tools import serve_app

    release = asyncio.Event()

    async def slow_read(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"jobs": []})

    async def submit(request: web.Request) -> web.Response:
        return web.json_response({"job_id": 7})

    app = web.Application()
    app.router.add_get("/read", slow_read)
    app.router.add_post("/submit", submit)
    async with serve_app(app) as url, _client(url, retries=0, max_concurrency=1, write_concurrency=2) as c:
        reading = asyncio.ensure_future(c.get("/read", endpoint="jobs"))
        await asyncio.sleep(0.1)
        answers = await asyncio.wait_for(
            asyncio.gather(
                *(c.send("POST", "/submit", endpoint=f"job/submit:{i}", body=b"{}") for i in range(3))
            ),
            5.0,
        )
        assert not reading.done()  # the read still holds its slot; the writes went beside it
        release.set()
        await reading
    assert answers == [b'{"job_id": 7}'] * 3
    assert c.requests_by_endpoint == {"jobs": 1, "job/submit": 3}
