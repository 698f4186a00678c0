"""Settings: flags, environment, secrets directory, one-line errors; the CLI's pure parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.errors import ConfigError
from exporter.model import Job, Node, Snapshot
from exporter.versions import adapter_for
from slurm_keda import cli
from slurm_keda.settings import OPTIONS, load
from slurm_keda.table import format_table
from testkit.paths import RECORDED


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("SLURM_KEDA_") or name == "SLURM_JWT":
            monkeypatch.delenv(name)


def test_defaults(tmp_path: Path) -> None:
    s = load({}, tmp_path / "none")
    assert s.slurm.url == "http://127.0.0.1:6820"
    assert s.poll.interval == 5.0 and s.poll.use_update_time and s.slurm.retries == 2
    assert s.slurm.jwt_value() is None


def test_env_and_flag_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_KEDA_POLL_INTERVAL", "7")
    monkeypatch.setenv("SLURM_KEDA_SLURMRESTD_URL", "unix:/run/slurmrestd.sock")
    s = load({}, tmp_path)
    assert s.poll.interval == 7.0 and s.slurm.url == "unix:/run/slurmrestd.sock"
    s = load({"poll_interval": "3"}, tmp_path)
    assert s.poll.interval == 3.0  # the flag wins over the environment


def test_secrets_dir_and_slurm_jwt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "slurm_keda_jwt").write_text("from-secret")
    assert load({}, tmp_path).slurm.jwt_value() == "from-secret"
    monkeypatch.setenv("SLURM_KEDA_JWT", "from-env")
    assert load({}, tmp_path).slurm.jwt_value() == "from-env"  # environment beats the secrets dir
    monkeypatch.delenv("SLURM_KEDA_JWT")
    monkeypatch.setenv("SLURM_JWT", "plain")
    assert load({}, tmp_path / "none").slurm.jwt_value() == "plain"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"poll_interval": "0.5"},
            "invalid --poll-interval (env SLURM_KEDA_POLL_INTERVAL): Input should be greater",
        ),
        ({"retries": "many"}, "invalid --retries (env SLURM_KEDA_RETRIES): Input should be a valid integer"),
        ({"slurmrestd_url": "slurm:6820"}, "invalid --slurmrestd-url (env SLURM_KEDA_SLURMRESTD_URL)"),
        (
            {"api_version": "42"},
            "invalid --api-version (env SLURM_KEDA_API_VERSION): Value error, must look like",
        ),
        ({"token_file": "/nonexistent/token"}, "invalid --token-file (env SLURM_KEDA_TOKEN_FILE)"),
        ({"listen_port": "70000"}, "invalid --listen-port"),
    ],
)
def test_bad_values_name_the_option(given: dict[str, str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(given, tmp_path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_cli_bad_value_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["serve", "--poll-interval", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("slurm-keda: invalid --poll-interval")


def test_cli_bad_env_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_KEDA_MAX_CONCURRENCY", "0")
    assert cli.main(["snapshot"]) == 2
    assert "invalid --max-concurrency (env SLURM_KEDA_MAX_CONCURRENCY)" in capsys.readouterr().err


def test_cli_unreachable_is_one_line_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["snapshot", "--slurmrestd-url", "http://127.0.0.1:9", "--retries", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("slurm-keda: openapi: cannot reach slurmrestd at http://127.0.0.1:9")


@pytest.mark.skipif(not (RECORDED / "slurm-26.05.5").is_dir(), reason="no recorded 26.05 payloads")
def test_table_lists_every_record() -> None:
    d = RECORDED / "slurm-26.05.5" / "v0.0.45"
    ad = adapter_for("v0.0.45")
    jobs, env = ad.jobs((d / "jobs.json").read_bytes())
    nodes, _ = ad.nodes((d / "nodes.json").read_bytes())
    parts, _ = ad.partitions((d / "partitions.json").read_bytes())
    snap = Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        cluster=env.cluster,
        slurm_version=env.slurm_version,
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        partitions=tuple(parts),
    )
    text = format_table(snap)
    lines = text.splitlines()
    assert lines[0].startswith(f"cluster {env.cluster}  Slurm 26.05.5  API v0.0.45")
    for n in nodes:
        assert any(line.split()[:2] == [n.name, n.state] for line in lines)
    pending_array = [j for j in jobs if j.array_task_string]
    for j in pending_array:
        assert any(line.startswith(f"{j.array_job_id}_[{j.array_task_string}]") for line in lines)
    assert len(lines) == 1 + 2 + len(parts) + 2 + len(nodes) + 2 + len(jobs)


def test_every_setting_is_a_flag_of_serve() -> None:
    # an option added to Settings but not to a command's flags is settable only by environment
    from slurm_keda.cli import SERVE_OPTIONS

    assert set(OPTIONS) - set(SERVE_OPTIONS) == set()


def test_the_webhook_is_https_only_and_the_bridges(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces: {team-a: {user_id: 1001, partitions: [cpu]}}\n")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("x")
    key.write_text("y")
    bridge = {"bridge": True, "bridge_policy_file": str(policy)}
    with pytest.raises(ConfigError, match="--webhook-listen is the bridge's webhook: it needs --bridge"):
        load({"webhook_listen": "0.0.0.0:9443"}, tmp_path)
    with pytest.raises(ConfigError, match="HTTPS only: it needs --webhook-cert-file and --webhook-key-file"):
        load({**bridge, "webhook_listen": "0.0.0.0:9443", "webhook_cert_file": str(cert)}, tmp_path)
    with pytest.raises(ConfigError, match="must be host:port"):
        load({**bridge, "webhook_listen": "9443"}, tmp_path)
    files = {"webhook_cert_file": str(cert), "webhook_key_file": str(key)}
    with pytest.raises(ConfigError, match="--listen-port and --webhook-listen both name port 9341"):
        load({**bridge, **files, "webhook_listen": "0.0.0.0:9341"}, tmp_path)
    s = load({**bridge, **files, "webhook_listen": "[::]:9443"}, tmp_path)
    assert s.bridge.webhook_port == 9443


def test_the_bridge_needs_a_policy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--bridge needs --bridge-policy-file"):
        load({"bridge": True}, tmp_path)
    with pytest.raises(ConfigError, match="--bridge-instance"):
        load({"bridge_instance": "Cluster A"}, tmp_path)


def test_the_table_cuts_nothing_and_names_states_as_squeue_does() -> None:
    flags = ("CLOUD", "POWERED_DOWN", "POWERING_UP", "NOT_RESPONDING")
    booting = Job(job_id=7, state="RUNNING", state_flags=("CONFIGURING",), partitions=("cloud",))
    array = Job(job_id=8, state="PENDING", array_job_id=8, array_task_string="1-40", array_pending_tasks=40)
    reason = "ReqNodeNotAvail,_UnavailableNodes:p[1-12]"
    waiting = Job(job_id=9, state="PENDING", reason=reason)
    snap = Snapshot(
        taken_at=0.0,
        api_version="v0.0.45",
        jobs=(booting, array, waiting),
        nodes=(Node(name="p1", state="IDLE", flags=flags),),
    )
    lines = format_table(snap).splitlines()
    node = next(line for line in lines if line.startswith("p1 "))
    assert ",".join(flags) in node  # every flag, POWERING_UP too (was cut at 22 characters)
    job7 = next(line for line in lines if line.startswith("7 "))
    assert job7.split()[2] == "CONFIGURING"  # not RUNNING: its nodes still boot
    header = next(line for line in lines if line.startswith("JOBID"))
    assert "ARRAY" in header.split() and "TASKS" not in header.split()
    job8 = next(line for line in lines if line.startswith("8_[1-40]"))
    assert job8.split()[-1] == "40"  # the array tasks the record stands for (no NODELIST yet)
    assert reason in next(line for line in lines if line.startswith("9 "))
