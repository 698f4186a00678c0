"""``slurm-keda serve``'s HTTP side through a real TCP server on 127.0.0.1 and the aiohttp client:
content negotiation, gzip, the per-snapshot render cache, health between scrapes, /readyz, TLS and
mTLS, basic auth, bad web-config files, and ``promtool check metrics`` on a real scrape.

The poller polls a real in-process fake slurmrestd serving the lab's recorded 26.05 answers.
Certificates are made at test time with the ``openssl`` CLI.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import re
import shutil
import ssl
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.collector import Cardinality
from exporter.errors import ConfigError
from exporter.server import RENDERER, make_app, negotiate
from exporter.webconfig import BasicAuth, WebConfig, load_web_config, ssl_context
from slurm_keda import cli
from testkit.paths import RECORDED
from testkit.pki import PKI, have_openssl, make_pki
from testkit.served import get, served, value

DATA = RECORDED / "slurm-26.05.5"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no recorded 26.05 payloads")

TEXT_CT = "text/plain; version=0.0.4; charset=utf-8"
OM_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
PASSWORD = "s3cret pass:word"


def families(body: bytes) -> list[str]:
    """Family names in order of their ``# TYPE`` lines."""
    return re.findall(r"^# TYPE (\S+) ", body.decode(), re.M)


# --------------------------------------------------------------------------------- probes, formats


async def test_readyz_before_and_after_first_poll() -> None:
    async with served() as s:
        status, _, body = await get(s.url + "/readyz")
        assert status == 503 and body.startswith(b"not ready")
        assert (await get(s.url + "/healthz"))[0] == 200
        status, _, body = await get(s.url + "/metrics")
        assert status == 200 and value(body, "slurm_up") == 0.0
        assert "slurm_jobs" not in families(body) and s.renders == []
        assert (await get(s.url + "/snapshot"))[0] == 503
        assert b"no snapshot yet" in (await get(s.url + "/"))[2]

        assert await s.poller.poll_once() is not None
        status, _, body = await get(s.url + "/readyz")
        assert status == 200 and body == b"ready\n"
        status, _, page = await get(s.url + "/")
        assert status == 200
        for text in (b"slurm-keda 0.", b"API version v0.0.45", b"last poll", b"26.05.5", b"/metrics"):
            assert text in page
        status, headers, snap = await get(s.url + "/snapshot")
        assert status == 200 and headers["Content-Type"] == "application/json" and b'"jobs"' in snap


async def test_text_format_by_default() -> None:
    async with served() as s:
        await s.poller.poll_once()
        for accept in ("", "text/plain", "*/*", "application/json"):
            status, headers, body = await get(s.url + "/metrics", accept=accept)
            assert status == 200 and headers["Content-Type"] == TEXT_CT
            assert b"# EOF" not in body
            names = families(body)
            assert len(names) == len(set(names)), "a family appears twice"
            assert {"slurm_up", "slurm_jobs", "slurm_node_cpus", "slurm_exporter_info"} <= set(names)
            assert value(body, "slurm_up") == 1.0
            parsed = {f.name for f in parse_text(body.decode())}
            assert {"slurm_jobs", "slurm_exporter_poll_errors"} <= parsed


async def test_openmetrics_when_asked() -> None:
    async with served() as s:
        await s.poller.poll_once()
        status, headers, body = await get(s.url + "/metrics", accept=OM_ACCEPT)
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert body.endswith(b"\n# EOF\n") and body.count(b"# EOF") == 1
        names = families(body)
        assert len(names) == len(set(names)), "a family appears twice"
        # the strict OpenMetrics parser accepts the whole body (it raises on a misplaced # EOF,
        # interleaved families, bad names...)
        parsed = {f.name: f for f in parse_openmetrics(body.decode())}
        assert {"slurm_up", "slurm_jobs", "slurm_exporter", "slurm_exporter_poll_errors"} <= parsed.keys()
        assert parsed["slurm_exporter"].type == "info"
        assert parsed["slurm_up"].samples[0].value == 1.0


async def test_any_accept_value_gives_one_of_two_bodies() -> None:
    # the client library echoed the Accept's version into the content type: every distinct value was a
    # body rendered and kept for good (6,000 values: RSS 288 → 419 MB), and version=1.x answered 500
    oddities = [f"application/openmetrics-text; version=1.{i}" for i in range(40)]
    oddities += ["application/openmetrics-text; version=1.x", "application/openmetrics-text; escaping=values"]
    async with served() as s:
        await s.poller.poll_once()
        for accept in oddities:
            status, headers, body = await get(s.url + "/metrics", accept=accept)
            assert status == 200, (accept, body[:200])
            assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0"), accept
            assert body.endswith(b"\n# EOF\n")
        status, headers, _ = await get(
            s.url + "/metrics", accept="application/openmetrics-text;q=0, text/plain"
        )
        assert status == 200 and headers["Content-Type"] == TEXT_CT
        assert len(s.renders) == 2 and s.renders[1] == TEXT_CT  # one OpenMetrics body for all of them


@pytest.mark.parametrize("accept", ["", OM_ACCEPT], ids=["text", "openmetrics"])
async def test_gzip(accept: str) -> None:
    async with served() as s:
        await s.poller.poll_once()
        _, plain_headers, plain = await get(s.url + "/metrics", accept=accept)
        assert "Content-Encoding" not in plain_headers
        status, headers, raw = await get(s.url + "/metrics", accept=accept, encoding="gzip", decompress=False)
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert headers["Content-Type"] == plain_headers["Content-Type"]
        assert len(raw) < len(plain) / 4
        # ONE gzip member (readers that stop after the first member see everything)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert d.decompress(raw) == plain and d.eof and d.unused_data == b""
        assert gzip.decompress(raw) == plain
        # and the aiohttp client's own decoding, with gzip among other encodings
        _, _, body = await get(s.url + "/metrics", accept=accept, encoding="br;q=1.0, gzip;q=0.8")
        assert body == plain
        _, headers, body = await get(s.url + "/metrics", accept=accept, encoding="gzip;q=0")
        assert "Content-Encoding" not in headers and body == plain


async def test_gzip_before_first_poll() -> None:
    async with served() as s:
        _, headers, raw = await get(s.url + "/metrics", encoding="gzip", decompress=False)
        assert headers["Content-Encoding"] == "gzip"
        assert value(gzip.decompress(raw), "slurm_up") == 0.0


# ----------------------------------------------------------------------------------------- cache


async def test_slurm_families_rendered_once_per_snapshot_and_format() -> None:
    async with served() as s:
        first = await s.poller.poll_once()
        assert first is not None
        bodies = [(await get(s.url + "/metrics"))[2] for _ in range(3)]
        assert s.renders == [TEXT_CT]
        assert bodies[0] == bodies[1] == bodies[2]
        await get(s.url + "/metrics", encoding="gzip")  # gzip reuses the rendered text
        assert s.renders == [TEXT_CT]
        await get(s.url + "/metrics", accept=OM_ACCEPT)
        await get(s.url + "/metrics", accept=OM_ACCEPT, encoding="gzip")
        assert len(s.renders) == 2 and s.renders[1].startswith("application/openmetrics-text")

        s.clock.now += 10
        second = await s.poller.poll_once()
        assert second is not None and second is not first
        await get(s.url + "/metrics")
        await get(s.url + "/metrics")
        # the first scrape started the new snapshot's render in a thread; the scrapes that came
        # while it ran got the previous body: wait for that one render (shared, not a second one)
        renderer = s.app[RENDERER]
        await renderer.part(second, negotiate(""), False)
        _, _, body = await get(s.url + "/metrics")
        assert s.renders[2:] == [TEXT_CT]
        assert value(body, "slurm_exporter_snapshot_age_seconds") == 0.0  # the new one, not held


async def test_concurrent_scrapes_of_a_new_snapshot_share_one_render() -> None:
    async with served() as s:
        await s.poller.poll_once()
        results = await asyncio.gather(
            *(get(s.url + "/metrics", encoding="gzip" if i % 2 else "identity") for i in range(20))
        )
        assert s.renders == [TEXT_CT]
        # same snapshot, same clock: same body but for the count of open connections
        open_now = re.compile(rb"^slurm_exporter_http_connections .*\n", re.M)
        assert len({open_now.sub(b"", body) for _, _, body in results}) == 1


async def test_health_block_changes_between_scrapes_of_one_snapshot() -> None:
    async with served() as s:
        snap = await s.poller.poll_once()
        assert snap is not None
        _, _, body1 = await get(s.url + "/metrics")
        s.clock.now += 7.5
        _, _, body2 = await get(s.url + "/metrics", encoding="gzip")
        assert value(body2, "slurm_exporter_snapshot_age_seconds") == pytest.approx(
            value(body1, "slurm_exporter_snapshot_age_seconds") + 7.5
        )
        # a poll where every endpoint fails keeps the snapshot but changes the health block
        s.fake.faults = dict.fromkeys(
            ("jobs", "nodes", "partitions", "diag", "licenses", "reservations"), "status:500"
        )
        assert await s.poller.poll_once() is None and s.poller.snapshot is snap
        _, _, body3 = await get(s.url + "/metrics")
        _, _, body4 = await get(s.url + "/metrics", accept=OM_ACCEPT, encoding="gzip")
        assert s.renders == [TEXT_CT, s.renders[1]] and len(s.renders) == 2  # no re-render of Slurm data
        assert value(body1, "slurm_up") == 1.0 and value(body3, "slurm_up") == 0.0
        assert value(body3, 'slurm_exporter_poll_errors_total{endpoint="jobs",kind="http_500"}') == 1.0
        assert value(body4, 'slurm_exporter_poll_errors_total{endpoint="jobs",kind="http_500"}') == 1.0
        # the Slurm families still come from the snapshot
        assert value(body3, 'slurm_jobs{partition="cpu",state="running"}') == value(
            body1, 'slurm_jobs{partition="cpu",state="running"}'
        )


async def test_warm_renders_ahead_of_the_first_scrape() -> None:
    async with served() as s:
        renderer = make_app(s.poller, clock=s.clock, on_render=s.renders.append)[RENDERER]
        task = asyncio.create_task(renderer.warm())
        try:
            await s.poller.poll_once()
            for _ in range(500):
                if s.renders:
                    break
                await asyncio.sleep(0.01)
            assert s.renders == [TEXT_CT]
            body, ct = await renderer.body("", False)
            assert ct == TEXT_CT and s.renders == [TEXT_CT] and b"slurm_jobs{" in body
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


# -------------------------------------------------------------------------------------- promtool


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize(
    "app_kw",
    [{}, {"cardinality": Cardinality(per_user=True, per_account=True, node_reasons=True)}],
    ids=["defaults", "all-flags"],
)
async def test_promtool_check_metrics_on_a_real_scrape(app_kw: dict[str, Any]) -> None:
    async with served(**app_kw) as s:
        await s.poller.poll_once()
        s.fake.faults = {"diag": "status:500"}  # an error counter series too
        await s.poller.poll_once()
        _, _, body = await get(s.url + "/metrics", encoding="gzip")
        _, _, om = await get(s.url + "/metrics", accept=OM_ACCEPT)
    assert b"slurm_exporter_poll_errors_total{" in body
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )
    assert out.stdout + out.stderr == b"" and out.returncode == 0
    # promtool (2.42) reads only the Prometheus text format; the OpenMetrics body is checked by the
    # strict OpenMetrics parser instead (test_openmetrics_when_asked) — here, with every flag on
    assert om.count(b"# EOF") == 1 and om.endswith(b"# EOF\n")
    list(parse_openmetrics(om.decode()))


# ------------------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    if not have_openssl():
        pytest.skip("no openssl CLI to make test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


def write_config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web-config.yml"
    p.write_text(text)
    return p


async def test_tls(pki: PKI, tmp_path: Path) -> None:
    cfg = load_web_config(
        write_config(
            tmp_path,
            f"tls_server_config:\n  cert_file: {pki.server.crt}\n  key_file: {pki.server.key}\n"
            "  min_version: TLS12\n",
        )
    )
    async with served(web_config=cfg) as s:
        assert s.url.startswith("https://127.0.0.1:")
        await s.poller.poll_once()
        status, headers, body = await get(s.url + "/metrics", ssl_ctx=pki.client_ctx())
        assert status == 200 and b"slurm_jobs{" in body and headers["Content-Type"] == TEXT_CT
        assert (await get(s.url + "/readyz", ssl_ctx=pki.client_ctx()))[0] == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):  # not our CA: refused
            await get(s.url + "/metrics", ssl_ctx=ssl.create_default_context())
        with pytest.raises(aiohttp.ClientError):  # plain HTTP to the TLS port
            await get(s.url.replace("https://", "http://") + "/metrics")


async def test_mtls_requires_a_client_cert_from_the_ca(pki: PKI, tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    for f in (pki.server.crt, pki.server.key, pki.ca):
        shutil.copy(f, tmp_path / "certs" / f.name)
    # relative paths are relative to the config file's directory, as in exporter-toolkit
    cfg = load_web_config(
        write_config(
            tmp_path,
            "tls_server_config:\n  cert_file: certs/server.crt\n  key_file: certs/server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: certs/ca.crt\n"
            "  min_version: TLS13\n",
        )
    )
    assert cfg.tls is not None and cfg.tls.client_ca_file == tmp_path / "certs" / "ca.crt"
    async with served(web_config=cfg) as s:
        await s.poller.poll_once()
        status, _, body = await get(
            s.url + "/metrics", ssl_ctx=pki.client_ctx(pki.client.crt, pki.client.key)
        )
        assert status == 200 and b"slurm_up 1.0" in body
        with pytest.raises(aiohttp.ClientError):
            await get(s.url + "/metrics", ssl_ctx=pki.client_ctx())
        with pytest.raises(aiohttp.ClientError):
            await get(s.url + "/healthz", ssl_ctx=pki.client_ctx(pki.rogue.crt, pki.rogue.key))


def test_tls_key_that_does_not_match_is_a_config_error(pki: PKI, tmp_path: Path) -> None:
    cfg = load_web_config(
        write_config(
            tmp_path, f"tls_server_config:\n  cert_file: {pki.server.crt}\n  key_file: {pki.client.key}\n"
        )
    )
    assert cfg.tls is not None
    with pytest.raises(ConfigError, match=r"tls_server_config.cert_file/key_file: cannot load") as e:
        ssl_context(cfg.tls)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------ basic auth


def _auth_config(tmp_path: Path) -> WebConfig:
    h = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd's
    other = bcrypt.hashpw(b"other", bcrypt.gensalt(4)).decode()
    return load_web_config(write_config(tmp_path, f"basic_auth_users:\n  alice: '{h}'\n  bob: {other}\n"))


async def test_basic_auth(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    async with served(web_config=_auth_config(tmp_path)) as s:
        await s.poller.poll_once()
        for path in ("/metrics", "/snapshot", "/"):
            status, _, _ = await get(s.url + path, auth=("alice", PASSWORD))
            assert status == 200, path
            for auth in (None, ("alice", "wrong"), ("bob", PASSWORD), ("mallory", PASSWORD), ("alice", "")):
                status, headers, _ = await get(s.url + path, auth=auth)
                assert status == 401, (path, auth)
                assert headers["WWW-Authenticate"].startswith("Basic ")
        assert (await get(s.url + "/metrics", auth=("bob", "other")))[0] == 200
        # kubelet probes need no credentials
        assert (await get(s.url + "/healthz"))[0] == 200
        assert (await get(s.url + "/readyz"))[0] == 200
        # a garbled header is a 401, not a 500
        async with aiohttp.ClientSession() as cs:
            for value_ in ("Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode(), "Bearer x"):
                async with cs.get(s.url + "/metrics", headers={"Authorization": value_}) as r:
                    assert r.status == 401
    assert PASSWORD not in caplog.text


async def test_basic_auth_caches_good_checks_only(tmp_path: Path) -> None:
    auth = BasicAuth(_auth_config(tmp_path).basic_auth_users)
    good = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    wrong = "Basic " + base64.b64encode(b"alice:nope").decode()
    assert await auth.check(good) == "alice" and auth.checks == 1
    assert await auth.check(good) == "alice" and auth.checks == 1  # cached
    assert await auth.check(wrong) is None and auth.checks == 2
    assert await auth.check(wrong) is None and auth.checks == 3  # failures are never cached
    assert await auth.check(good) == "alice" and auth.checks == 3


# ------------------------------------------------------------------------------ bad web configs

BAD_CONFIGS = [
    ("tls_server_config: [unclosed\n", r"not valid YAML at line \d+"),
    ("- a list\n", r"must be a mapping"),
    ("tls_srever_config: {}\n", r"tls_srever_config: unknown key \(known: basic_auth_users,"),
    ("tls_server_config:\n  cert_file: x\n  foo: 1\n", r"tls_server_config.foo: unknown key"),
    ("tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", r"cipher_suites: not supported"),
    ("tls_server_config:\n  key_file: k\n", r"tls_server_config.cert_file: missing"),
    (
        "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
        r"cert_file: .*nope.crt is not a readable",
    ),
    ("basic_auth_users:\n  alice: plaintext\n", r"basic_auth_users.alice: must be a bcrypt hash"),
    (
        "basic_auth_users:\n  alice: '$1$abcdefgh$0123456789012345678901'\n",
        r"basic_auth_users.alice: must be a bcrypt",
    ),
    ("basic_auth_users:\n  alice: 12\n", r"basic_auth_users.alice: must be a bcrypt hash"),
    ("basic_auth_users: [alice]\n", r"basic_auth_users: must be a mapping"),
    (
        "http_server_config:\n  headers:\n    X-A: [1]\n",
        r"http_server_config.headers.X-A: must be a one-line",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_CONFIGS, ids=[m.split(":")[0][:30] for _, m in BAD_CONFIGS])
def test_bad_web_config_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        load_web_config(write_config(tmp_path, text))
    assert "\n" not in str(e.value) and str(tmp_path / "web-config.yml") in str(e.value)


def test_bad_tls_options_name_the_key(pki: PKI, tmp_path: Path) -> None:
    base = f"tls_server_config:\n  cert_file: {pki.server.crt}\n  key_file: {pki.server.key}\n"
    for extra, message in (
        ("  min_version: TLS14\n", r"tls_server_config.min_version: 'TLS14' is not one of TLS10"),
        (
            "  client_auth_type: RequireAnyClientCert\n",
            r"client_auth_type: 'RequireAnyClientCert' is not supported",
        ),
        ("  client_auth_type: RequireAndVerifyClientCert\n", r"client_ca_file: needed with client_auth_type"),
        (f"  client_ca_file: {pki.ca}\n", r"client_auth_type: client_ca_file is set but"),
        ("  min_version: TLS13\n  max_version: TLS12\n", r"max_version: TLS12 is below min_version TLS13"),
    ):
        with pytest.raises(ConfigError, match=message) as e:
            load_web_config(write_config(tmp_path, base + extra))
        assert "\n" not in str(e.value)


def test_empty_web_config_is_plain_http(tmp_path: Path) -> None:
    assert load_web_config(write_config(tmp_path, "")) == WebConfig()
    cfg = load_web_config(
        write_config(
            tmp_path, "tls_server_config: {}\nhttp_server_config:\n  http2: true\nbasic_auth_users:\n"
        )
    )
    assert cfg == WebConfig()


async def test_configured_headers_are_sent(tmp_path: Path) -> None:
    cfg = load_web_config(
        write_config(tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    )
    async with served(web_config=cfg) as s:
        for path in ("/healthz", "/metrics"):
            _, headers, _ = await get(s.url + path)
            assert headers["X-Frame-Options"] == "deny"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.yml", r"web config .*missing.yml: cannot read: No such file"),
        (lambda d: write_config(d, "basic_auth_users:\n  alice: 'not a hash'\n"), r"basic_auth_users.alice"),
        (lambda d: write_config(d, "tls_server_config: {cert_file: [\n"), r"not valid YAML"),
        (lambda d: write_config(d, "no_such_key: 1\n"), r"no_such_key: unknown key \(known: basic_auth"),
        (lambda d: write_config(d, "- a\n- b\n"), r"must be a mapping, not list"),
        (
            lambda d: write_config(
                d, "tls_server_config:\n  cert_file: /nonexistent/c.pem\n  key_file: /nonexistent/k.pem\n"
            ),
            r"tls_server_config\.cert_file: /nonexistent/c\.pem is not a readable file",
        ),
    ],
    ids=["missing-file", "bad-hash", "bad-yaml", "unknown-key", "not-a-mapping", "missing-cert"],
)
def test_serve_with_a_bad_web_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], message: str
) -> None:
    path = make(tmp_path)
    code = cli.main(["serve", "--web-config-file", str(path), "--slurmrestd-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("slurm-keda: web config ")
    assert re.search(message, err[0])


def test_serve_with_an_unloadable_key_exits_2(
    pki: PKI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, f"tls_server_config:\n  cert_file: {pki.server.crt}\n  key_file: {pki.ca}\n")
    code = cli.main(
        ["serve", "--web-config-file", str(cfg), "--listen-address", "127.0.0.1", "--listen-port", "0"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cannot load" in err[0]


async def test_previous_snapshot_is_served_while_a_new_one_renders() -> None:
    """A scrape never waits for a big render when an older body exists: it gets that body whole."""
    import threading

    from exporter.model import Snapshot
    from exporter.pollstate import PollStatus
    from exporter.server import MetricsRenderer, negotiate

    class Source:
        snapshot: Snapshot | None = None
        status = PollStatus(last_poll_ok=True)

    src = Source()
    renderer = MetricsRenderer(src, clock=lambda: 1000.0)  # type: ignore[arg-type]
    release = threading.Event()
    real_render = renderer._render

    def slow_for_second(snap: Snapshot, fmt: Any) -> bytes:
        if snap.cluster == "second":
            assert release.wait(10)
        return real_render(snap, fmt)

    renderer._render = slow_for_second  # type: ignore[method-assign]
    src.snapshot = Snapshot(taken_at=990.0, api_version="v0.0.45", cluster="first")
    body, _ = await renderer.body("", False)
    assert 'slurm_cluster="first"' in body.decode()
    src.snapshot = Snapshot(taken_at=995.0, api_version="v0.0.45", cluster="second")
    body, _ = await asyncio.wait_for(renderer.body("", False), 2)  # does not wait for the render
    text = body.decode()
    assert 'slurm_cluster="first"' in text and 'slurm_cluster="second"' not in text
    assert value(body, "slurm_exporter_snapshot_age_seconds") == 10.0  # the age of what is served
    release.set()
    await renderer.part(src.snapshot, negotiate(""), False)  # the render finishes in its thread
    body, _ = await renderer.body("", False)
    assert 'slurm_cluster="second"' in body.decode()
    assert value(body, "slurm_exporter_snapshot_age_seconds") == 5.0
