"""The Slurm lab itself, against real slurmctld/slurmd/slurmrestd (skipped when no lab can start)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from lab import FLAVORS, Lab, LabError, procs
from lab.cli import main
from lab.conf import LabConfig, Ports, cgroup_conf, slurm_conf
from lab.control import ENV_MARKER, api_versions_from_openapi
from lab.demo import DEMO_JOBS
from lab.record import SINFO_FIELDS, SQUEUE_FIELDS, SQUEUE_FORMAT, parse_pipe, record
from testkit.lab_fixtures import LabEndpoint


# ----- pure parts (no lab needed) ------------------------------------------------------------------
def test_slurm_conf_has_the_lab_partitions() -> None:
    text = slurm_conf(LabConfig(cluster_name="lab2411", inner=PurePosixPath("/lab"), ports=Ports(16800)))
    assert "SlurmctldPort=16800" in text
    assert "PartitionName=cpu Nodes=c1,c2,c3 Default=YES MaxNodes=2" in text
    assert "Nodeset=ns-dyn Feature=dyn" in text
    assert "NodeName=p[1-12]" in text and "State=CLOUD" in text


def test_only_the_cloud_nodes_are_power_managed() -> None:
    for legacy, parts in ((False, "cpu,gpu,dyn"), (True, "cpu,gpu")):
        cfg = LabConfig(
            cluster_name="x", inner=PurePosixPath("/lab"), ports=Ports(16800), legacy_munge=legacy
        )
        assert f"SuspendExcParts={parts}\n" in slurm_conf(cfg)


def test_legacy_slurm_conf_uses_the_labs_own_munge() -> None:
    cfg = LabConfig(
        cluster_name="labhost", inner=PurePosixPath("/s/host"), ports=Ports(17000), legacy_munge=True
    )
    text = slurm_conf(cfg)
    assert "AuthType=auth/munge" in text and "CredType=cred/munge" in text
    assert "AuthInfo=socket=/s/host/munge/munge.socket" in text  # never the system's /run/munge
    assert "PrivateData=cloud" in text  # else 22.05 hides the powered-down cloud nodes
    assert "Nodeset=" not in text and "PartitionName=dyn" not in text and "MaxNodeCount" not in text
    assert "PartitionName=gpu" in text and "State=CLOUD" in text
    assert "disabled" not in cgroup_conf(cfg)  # 22.05 has no CgroupPlugin=disabled


def test_api_versions_from_openapi_sorts_numerically() -> None:
    doc: dict[str, Any] = {
        "paths": {"/slurm/v0.0.42/jobs/": {}, "/slurm/v0.0.40/ping/": {}, "/slurmdb/v0.0.41/x": {}}
    }
    assert api_versions_from_openapi(doc) == ["v0.0.40", "v0.0.42"]


def test_parse_pipe_names_columns() -> None:
    line = "3_[3-20%2]|3|3|3-20%2|PENDING|JobArrayTaskLimit|cpu|root|(null)|(null)|1|1|500M|N/A|30:00|1|"
    (row,) = parse_pipe(line, SQUEUE_FIELDS)
    assert row["array_task_id"] == "3-20%2" and row["reason"] == "JobArrayTaskLimit" and row["nodelist"] == ""


# ----- against a running lab ----------------------------------------------------------------------
def test_up_twice_is_idempotent(lab: Lab) -> None:
    before = lab.status()
    again = lab.up()
    assert again.components == before.components
    assert all(pid is not None for pid in again.components.values()), again.components


def test_status_shows_release_and_api_versions(lab: Lab) -> None:
    st = lab.status()
    assert st.running and st.slurm_release is not None
    assert st.slurm_release.startswith(lab.flavor.name if not lab.flavor.is_host else "22.05")
    assert st.api_versions and all(v.startswith("v0.0.") for v in st.api_versions)
    assert st.url == f"http://127.0.0.1:{lab.ports.slurmrestd}"
    assert st.unix_url is not None and st.unix_url.startswith("unix:/")
    assert {"c1", "g1", "p1"} <= set(st.nodes)


def test_cli_status_json(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--slurm", lab.flavor.name, "--json"]) == 0
    (st,) = json.loads(capsys.readouterr().out)
    assert st["running"] and st["token_file"] == str(lab.token_file)


def test_token_file_and_fresh_token_work_on_every_version(lab_endpoint: LabEndpoint, lab: Lab) -> None:
    for token in (lab_endpoint.token, lab.token(lifespan=60)):
        for ver in lab_endpoint.api_versions:
            resp = lab.get(f"/slurm/{ver}/ping/", token=token)
            assert resp.status == 200, (ver, resp.body[:200])
            assert _ping_up(resp.body), (ver, resp.body[:300])
    bad = lab.get(f"/slurm/{lab_endpoint.newest_version}/ping/", token="not-a-token")
    assert not _ping_up(bad.body)


def test_unix_socket_serves_local_auth(lab: Lab) -> None:
    resp = lab.get("/openapi/v3", unix=True)
    assert resp.status == 200
    ver = api_versions_from_openapi(json.loads(resp.body))[-1]
    nodes = json.loads(lab.get(f"/slurm/{ver}/nodes/", unix=True).body)["nodes"]
    assert {"c1", "g1"} <= {n["name"] for n in nodes}


def test_exec_runs_client_commands(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exec", "--slurm", lab.flavor.name, "--", "sinfo", "-h", "-o", "%P"]) == 0
    assert "cpu*" in capsys.readouterr().out.split()


def test_dynamic_node_joins_and_leaves(lab: Lab) -> None:
    name = f"d{uuid.uuid4().hex[:4]}"
    if lab.flavor.is_host:  # Slurm 22.05: the lab has no nodeset/dyn partition there
        with pytest.raises(LabError, match=r"dynamic nodes .* not supported"):
            lab.add_node(name, dynamic=True)
        assert name not in lab.node_states()
        return
    # less memory than the demo's dyn_wait asks (--mem=1000): it must not start here — removing the node
    # would requeue it, and it would wait ~30 s as BeginTime before the demo is settled again
    node = lab.add_node(name, dynamic=True, cpus=4, memory_mb=512, gpus=1)
    try:
        assert node.dynamic
        rows = {
            r["node"]: r for r in parse_pipe(lab.run(["sinfo", "-N", "-h", "-O", _sinfo()]), SINFO_FIELDS)
        }
        assert rows[name]["partition"] == "dyn"
        assert rows[name]["cpus"].endswith("/4")
        assert rows[name]["gres"].startswith("gpu:1")
    finally:
        lab.remove_node(name)
    assert name not in lab.node_states()


def test_parallel_node_starts_never_race_for_the_sack_socket(lab_2605: Lab) -> None:
    """An operator starting NodeSet pods at once: every slurmd of a chroot lab re-creates the chroot's one
    /run/slurm/sack.socket at start, and two interleaved starts killed one (seen in 1 of 20-40 lab starts
    before they were serialised). Six threads, twice over: every node registers and no slurmd log has a
    fatal line. A regression check: it cannot force the interleaving (slurmd's unlink-then-bind). On a
    fresh lab: no pending job (the demo's ``dyn`` job) may start on the new nodes."""
    lab = lab_2605
    lab.restart()
    for round_ in range(2):
        names = [f"race{round_}-{i}" for i in range(6)]
        with ThreadPoolExecutor(len(names)) as pool:
            added = list(pool.map(lambda n: lab.add_node(n, dynamic=True), names))
        try:
            assert [n.name for n in added] == names
            states = lab.node_states()
            assert all(states[n].rstrip("-") == "idle" for n in names), states
        finally:
            with ThreadPoolExecutor(len(names)) as pool:
                list(pool.map(lab.remove_node, names))
        fatal = [n for n in names if "fatal" in lab.log_path(f"slurmd-{n}").read_text()]
        assert not fatal, [procs.why(lab.log_path(f"slurmd-{n}")) for n in fatal]


def _kill_slurmd(lab: Lab, node: str) -> None:
    pid = procs.read_pid(lab.state_dir / "run" / f"slurmd-{node}.lab-pid")
    assert pid is not None
    procs.terminate([pid])


def test_a_slurmd_that_dies_at_start_is_named_with_its_own_log_line(lab_2605: Lab) -> None:
    lab = lab_2605
    _kill_slurmd(lab, "c3")
    assert any(p.startswith("node c3 has no slurmd") for p in lab.health_problems())
    with socket.socket() as taken:  # c3's port: its slurmd exits at once
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("0.0.0.0", lab.ports.cpu_node(3)))
        taken.listen()
        started = time.monotonic()
        with pytest.raises(LabError, match=r"slurmd-c3 .* exited: .*fatal: Unable to bind listen port"):
            lab.up()
        assert time.monotonic() - started < 10  # not the 60 s start timeout
    lab.up()  # the port is free again: up restarts the missing slurmd
    assert lab.health_problems() == []
    lab.restart()  # whatever ran on c3 is gone: a clean lab for the tests after


def test_up_demo_restarts_a_lab_with_a_node_down(lab_2605: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    lab = lab_2605
    _kill_slurmd(lab, "c2")
    assert main(["up", "--slurm", lab.flavor.name, "--demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"lab {lab.flavor.name}: node c2 has no slurmd") and "restarting it" in out, out
    assert lab.health_problems() == []


def test_unknown_static_node_needs_dynamic(lab: Lab) -> None:
    with pytest.raises(LabError, match="--dynamic"):
        lab.add_node("nosuchnode")


def test_demo_reaches_expected_states(lab_demo: tuple[Lab, dict[str, int]]) -> None:
    lab, jobs = lab_demo
    rows = parse_pipe(lab.run(["squeue", "-h", "-o", SQUEUE_FORMAT]), SQUEUE_FIELDS)
    reasons = {r["reason"] for r in rows if r["state"] == "PENDING"}
    assert {
        "Resources",
        "Priority",
        "JobHeldUser",
        "Dependency",
        "BeginTime",
        "PartitionNodeLimit",
        "JobArrayTaskLimit",
    } <= reasons
    assert set(jobs) >= {j.key for j in DEMO_JOBS if not j.optional}


def test_record_writes_raw_payloads(lab_demo: tuple[Lab, dict[str, int]], tmp_path: Path) -> None:
    lab, _ = lab_demo
    out = record(lab, tmp_path)
    meta = json.loads((out / "meta.json").read_text())
    for ver in meta["api_versions"]:
        body = (out / ver / "jobs.json").read_bytes()
        assert json.loads(body)["jobs"]
    assert (out / "squeue-r.txt").read_text().count("\n") > (out / "squeue.txt").read_text().count("\n")


def test_port_in_use_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    monkeypatch.setenv("SLURM_KEDA_LAB_STATE", str(tmp_path))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["up", "--slurm", "24.11", "--port-base", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"{port} (slurmctld)" in err and "in use" in err and err.count("\n") == 1


def test_down_only_stops_its_own_processes(lab_2411: Lab) -> None:
    lab = lab_2411
    lab.up()
    decoy = subprocess.Popen(["sleep", "300"])  # same name as the jobs' processes, outside the chroot
    try:
        lab_pids = [p for p in lab.status().components.values() if p is not None]
        stopped = lab.down()
        assert set(lab_pids) <= set(stopped)
        assert decoy.poll() is None, "down() killed a process that is not the lab's"
        assert not any(procs.alive(p) for p in lab_pids)
        assert not procs.pids_under_root(lab.root)
        assert not lab.is_running() and not lab.status().running
    finally:
        decoy.kill()
        decoy.wait()
        started = time.monotonic()
        lab.up()
        assert time.monotonic() - started < 60


def test_host_down_only_stops_its_own_processes(lab_host: Lab) -> None:
    """Without a chroot, down() finds the host lab's job steps by its environment mark and open files."""
    lab = lab_host
    lab.up()
    # gpu partition, 5 min: backfill starts it even beside the demo workload (gpu_two waits ~30 min)
    sbatch = ["sbatch", "-o", "/dev/null", "-p", "gpu", "-n1", "--mem=100", "-t", "5", "--wrap", "sleep 300"]
    job = int(lab.run(sbatch).split()[-1])
    deadline = time.monotonic() + 30
    while lab.run(["squeue", "-h", "-j", str(job), "-o", "%T"]).strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.2)
    decoy = subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin"})  # a `sleep` outside the lab
    # the other labs' daemons (make test restarts those labs beside this test: alive or not, they must not be
    # among what this down() stopped)
    others = [p for name in FLAVORS if name != "host" for p in Lab(name).status().components.values() if p]
    try:
        lab_pids = [p for p in lab.status().components.values() if p is not None]
        steps = procs.pids_of_lab(ENV_MARKER, lab.state_dir)
        assert set(steps) - set(lab_pids), "the job's slurmstepd/processes were not found"
        stopped = lab.down()
        assert set(lab_pids) <= set(stopped)  # (slurmscriptd dies with slurmctld, before the sweep)
        assert decoy.poll() is None, "down() killed a process that is not the lab's"
        assert not set(others) & set(stopped), "down() of host stopped another lab's daemons"
        assert not any(procs.alive(p) for p in steps)
        assert not procs.pids_of_lab(ENV_MARKER, lab.state_dir)
        assert not lab.is_running() and not lab.status().running
    finally:
        decoy.kill()
        decoy.wait()
        started = time.monotonic()
        lab.up()
        assert time.monotonic() - started < 60


def _sinfo() -> str:
    from lab.record import SINFO_FORMAT

    return SINFO_FORMAT


def _ping_up(body: bytes) -> bool:
    """slurmctld answered: ``responding`` (v0.0.41+), ``pinged == "UP"`` (v0.0.40) or ``ping == "UP"``
    (v0.0.38)."""
    try:
        pings = json.loads(body).get("pings") or [{}]
    except ValueError:
        return False
    ping = pings[0]
    return bool(ping.get("responding", "UP" in (ping.get("pinged"), ping.get("ping"))))
