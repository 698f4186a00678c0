"""A real Slurm cluster on loopback: slurmctld, one slurmd per node and two slurmrestd, per flavor.

Layout of a lab's state directory (``/var/lib/slurm-keda/lab/<flavor>``; bind-mounted at ``/lab`` inside
the flavor's chroot)::

    etc/    slurm.conf cgroup.conf gres.conf slurm.key jwt.key
    munge/  host flavor only: its own munged's socket, key, pid and seed (see lab/munge.py)
    state/  ctld/ (StateSaveLocation), slurmd/<node>/
    run/    <component>.lab-pid, slurmrestd.sock
    log/    slurmctld.log slurmd-<node>.log slurmrestd-*.log power.log
    nodes/  <node>.json for nodes added at run time
    token   a JWT for root, written by ``up``
    lab.json  port base and node count of the running lab

The host flavor runs this machine's own Slurm packages (22.05 on Debian 12) outside any chroot. It never
uses or touches the system's Slurm or munge services: every daemon gets the lab's own files (slurm.conf,
munged socket, state) and ports; its processes carry ``SLURM_KEDA_LAB=<state dir>`` in their environment,
which Slurm hands on to the jobs, and slurmstepd keeps the lab's slurmd log open: so ``down`` finds a
host lab's job steps without a chroot and without matching names (:func:`procs.pids_of_lab`).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from lab import chroot, munge, procs
from lab.conf import (
    ACCOUNTS,
    ACCT_DB,
    DB_PASSWORD,
    DB_USER,
    DYN_FEATURE,
    GPU_COUNT,
    GPU_NODE,
    NODE_CPUS,
    NODE_MEMORY_MB,
    LabConfig,
    Ports,
    cgroup_conf,
    gres_conf,
    mariadb_argv,
    power_script,
    slurm_conf,
    slurmdbd_conf,
)
from lab.errors import LabError, LabNotRunningError
from lab.flavors import DEFAULT_FLAVOR, HOST_PACKAGES, Flavor, get_flavor, host_packages_missing
from lab.http import Response, get, request
from lab.power import PowerEvent, parse_power_log, resumed_hosts
from lab.procs import parse_job_id

DEFAULT_NODES = 3
TOKEN_LIFESPAN = 7 * 24 * 3600
"""Lifespan in seconds of the token ``up`` writes to the token file: a week, so a lab left up stays usable."""
START_TIMEOUT = 60.0
SLURMD_REMOVE_GRACE = 2.0
"""Seconds a removed node's slurmd gets after SIGTERM (:meth:`Lab.remove_node`)."""
JOB_STEP_GRACE = 0.5
"""Seconds a stopping lab's job steps get after SIGTERM before SIGKILL: slurmstepd ignores SIGTERM (its
slurmd is gone by then), so the 10 s every other process gets made each ``down`` with a job running 10 s
long (measured 2026-12-06)."""
RESTD_UNIX_SOCKET = "slurmrestd.sock"
ENV_MARKER = "SLURM_KEDA_LAB"
"""Environment variable naming the state directory in every process of a host-flavor lab."""
HOST_RESTD_USER = "slurm"
"""slurmrestd refuses to run as root; on the host it runs as the ``slurm`` user Debian's packages create."""
MUNGED = "munged"
SACK_SOCKET = ("run", "slurm", "sack.socket")
"""Inside a chroot: the auth socket every slurmd (23.11+) deletes and re-creates at start; all slurmd of a
lab share the chroot and Slurm has no option to move it, so they are started one at a time."""
OPENMETRICS_SINCE = (26, 5)
"""First Slurm release whose slurmctld serves its own /metrics/* (``MetricsType=metrics/openmetrics``)."""


@dataclass(frozen=True)
class NodeRecord:
    """A node whose slurmd the lab runs; ``dynamic`` nodes join with ``slurmd -Z``."""

    name: str
    port: int
    cpus: int = NODE_CPUS
    memory_mb: int = NODE_MEMORY_MB
    gpus: int = 0
    dynamic: bool = False


READY_STATES = frozenset({"idle", "mixed", "allocated", "planned"})
"""Base node states (as sinfo prints them) of a node that runs jobs (``planned``: idle, the backfill
scheduler keeps it for a pending job — the demo's, when one of its jobs was cancelled)."""
NODE_FLAGS = "*~#!%$@^"
"""sinfo's one-character state flags: not responding, powered down, powering up/down, ..."""


def state_base(state: str) -> str:
    """A node state as ``sinfo %T`` prints it without its ``+FLAG`` words and planned-state ``-``:
    ``idle+drain`` → ``idle``, ``mixed-`` → ``mixed``, ``IDLE*`` → ``idle*`` (one-character flags kept)."""
    return state.split("+")[0].rstrip("-").lower()


@dataclass(frozen=True)
class LabStatus:
    """What ``lab status`` reports about one lab."""

    flavor: str
    running: bool
    state_dir: str
    slurm_release: str | None = None
    api_versions: list[str] = field(default_factory=list)
    url: str | None = None
    unix_url: str | None = None
    token_file: str | None = None
    slurm_conf: str | None = None
    port_base: int | None = None
    nodes: list[str] = field(default_factory=list)
    components: dict[str, int | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the Slurm lab must run as root (chroot, mounts, slurmd); re-run with sudo")


def api_versions_from_openapi(doc: dict[str, Any]) -> list[str]:
    """Versions with ``/slurm/vX/...`` paths in an ``/openapi/v3`` document, oldest first."""
    found = {m.group(1) for path in doc.get("paths", {}) if (m := re.match(r"^/slurm/(v[0-9.]+)/", path))}
    return sorted(found, key=lambda v: tuple(int(x) for x in v[1:].split(".")))


def _version_tuple(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", release)[:3])


class Lab:
    """One lab (flavor ``24.11``, ``26.05`` or ``host``); every method is safe to call repeatedly."""

    def __init__(
        self, flavor: Flavor | str = DEFAULT_FLAVOR, *, nodes: int | None = None, port_base: int | None = None
    ) -> None:
        self.flavor = get_flavor(flavor) if isinstance(flavor, str) else flavor
        self.state_dir = self.flavor.state_dir()
        saved = self._saved()
        self.nodes = nodes if nodes is not None else int(saved.get("nodes", DEFAULT_NODES))
        self.ports = Ports(
            port_base if port_base is not None else int(saved.get("port_base", self.flavor.port_base))
        )
        self._requested_base = port_base
        self.extra_conf: tuple[str, ...] = ()
        """slurm.conf lines beside the lab's own, from the next start on (e.g. ``AccountingStorageEnforce=
        limits`` for one oracle mix; set back to ``()`` and restart to drop them)."""
        if not 1 <= self.nodes <= self.ports.max_cpu_nodes:
            raise LabError(f"--nodes must be between 1 and {self.ports.max_cpu_nodes}")

    # ----- paths -----------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The chroot (``/`` for the host flavor)."""
        return self.flavor.chroot_dir()

    @property
    def inner(self) -> PurePosixPath:
        """The state directory as the daemons see it."""
        return PurePosixPath(self.state_dir) if self.flavor.is_host else PurePosixPath(chroot.INNER_STATE)

    @property
    def slurm_conf_inner(self) -> str:
        return str(self.inner / "etc/slurm.conf")

    @property
    def slurm_conf(self) -> Path:
        """slurm.conf on the host's file system."""
        return self.state_dir / "etc/slurm.conf"

    @property
    def token_file(self) -> Path:
        return self.state_dir / "token"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.slurmrestd}"

    @property
    def ctld_metrics_url(self) -> str | None:
        """slurmctld's own OpenMetrics endpoints (``/metrics/jobs`` ...) live under this URL on
        SlurmctldPort — Slurm >= 26.05 only (``MetricsType=metrics/openmetrics``); None before."""
        if _version_tuple(self.release()) < OPENMETRICS_SINCE:
            return None
        return f"http://127.0.0.1:{self.ports.slurmctld}/metrics"

    @property
    def unix_socket(self) -> Path:
        return self.state_dir / "run" / "restd" / RESTD_UNIX_SOCKET

    @property
    def unix_url(self) -> str:
        return f"unix:{self.unix_socket}"

    def log_path(self, component: str) -> Path:
        """The daemon's log (stdout and stderr go to ``<component>.out`` beside it)."""
        return self.state_dir / "log" / f"{component}.log"

    def _out_path(self, component: str) -> Path:
        if component.startswith("slurmrestd"):
            return self.log_path(component)
        return self.state_dir / "log" / f"{component}.out"

    def _pid_file(self, component: str) -> Path:
        return self.state_dir / "run" / f"{component}.lab-pid"

    def _saved(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((self.state_dir / "lab.json").read_text())
        except (OSError, ValueError):
            return {}
        return data

    # ----- processes -------------------------------------------------------------------------------
    def _pid(self, component: str) -> int | None:
        """The live pid of one of this lab's daemons, or None."""
        pid = procs.read_pid(self._pid_file(component))
        if pid is not None and procs.belongs(pid, self.root, self._marker(component)):
            return pid
        return None

    def _marker(self, component: str) -> str:
        """What the command line of this lab's ``component`` contains (its slurm.conf, or munged's socket)."""
        if component == MUNGED:
            return f"--socket={munge.socket_path(self.state_dir)}"
        if component == "mariadbd":
            return f"--datadir={self.inner / 'mysql'}"
        if component == "slurmdbd":
            return (
                "slurmdbd"  # no config argument (it reads slurmdbd.conf beside $SLURM_CONF); the root decides
            )
        return self.slurm_conf_inner

    def _components(self) -> list[str]:
        run = self.state_dir / "run"
        if not run.is_dir():
            return []
        return sorted(p.name.removesuffix(".lab-pid") for p in run.glob("*.lab-pid"))

    def is_running(self) -> bool:
        return self._pid("slurmctld") is not None

    def pid(self, component: str) -> int | None:
        """The live pid of one of this lab's daemons (``slurmctld``, ``slurmrestd-tcp``, ``slurmd-c1``...)."""
        return self._pid(component)

    def restart_restd(self, *, timeout: float = 120.0, env: dict[str, str] | None = None) -> int:
        """A fresh TCP slurmrestd (its memory from zero, e.g. for a benchmark; ``env`` added to its
        environment, e.g. ``MALLOC_ARENA_MAX``); its pid once it serves."""
        self._stop("slurmrestd-tcp")
        deadline = time.monotonic() + timeout
        while True:
            self._start_restd(env)
            try:
                self._wait(
                    "slurmrestd (TCP) to serve /openapi/v3", deadline, self._restd_ready, "slurmrestd-tcp"
                )
                break
            except LabError as e:
                # the old one's connections may hold the port in TIME_WAIT for up to a minute (its clients
                # were cut when it was stopped): slurmrestd then cannot bind; try again until the deadline
                if "Address already in use" not in str(e) or time.monotonic() > deadline:
                    raise
                self._stop("slurmrestd-tcp")
                time.sleep(1.0)
        pid = self._pid("slurmrestd-tcp")
        assert pid is not None
        return pid

    def stop_ctld(self) -> None:
        """Stop slurmctld (SIGTERM: it saves its state, jobs keep running on their slurmd)."""
        self._stop("slurmctld")

    def start_ctld(self, *, timeout: float = 60.0) -> int:
        """Start slurmctld again from its saved state (a restart: jobs and nodes recovered); its pid once it
        answers ``scontrol ping``."""
        self._start_ctld(time.monotonic() + timeout)
        pid = self._pid("slurmctld")
        assert pid is not None
        return pid

    def _start_ctld(self, deadline: float) -> None:
        """slurmctld (unless it runs), until it answers ``scontrol ping``."""
        self._start("slurmctld", ["slurmctld", "-D", "-f", self.slurm_conf_inner])
        self._wait("slurmctld to answer `scontrol ping`", deadline, self._ctld_ready, "slurmctld")

    def _start(self, component: str, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        pid = self._pid(component)
        if pid is not None:
            return pid
        pid = procs.spawn(self.root, argv, self._out_path(component), {**self._mark(), **(env or {})})
        self._pid_file(component).write_text(f"{pid}\n")
        return pid

    def _stop(self, component: str, grace: float = 10.0) -> None:
        """SIGTERM ``component``, SIGKILL after ``grace`` seconds."""
        pid = self._pid(component)
        if pid is not None:
            procs.terminate([pid], timeout=grace)
        self._pid_file(component).unlink(missing_ok=True)

    def _mark(self) -> dict[str, str]:
        """The environment mark of a host lab's processes (chroot labs are found by their root)."""
        return {ENV_MARKER: str(self.state_dir)} if self.flavor.is_host else {}

    def _client_env(self) -> dict[str, str]:
        return {**procs.BASE_ENV, "SLURM_CONF": self.slurm_conf_inner, **self._mark()}

    # ----- client commands -------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0) -> str:
        """Run a Slurm client command (squeue, sinfo, scontrol, sbatch ...) against this lab; its stdout."""
        result = self.run_raw(argv, timeout=timeout)
        if check and result.returncode != 0:
            msg = (result.stderr or result.stdout).strip().replace("\n", " | ")
            raise LabError(f"{' '.join(argv)} failed (exit {result.returncode}): {msg}")
        return result.stdout

    def run_raw(self, argv: Sequence[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                procs.in_root(self.root, argv),
                capture_output=True,
                text=True,
                env=self._client_env(),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LabError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None

    def sbatch(self, *args: str, command: str = "sleep 3600", user: str | None = None) -> int:
        """Submit a batch job (``sbatch -o /dev/null ARGS --wrap COMMAND``), as ``user`` if given (one of
        :data:`lab.chroot.LAB_USERS`); its job id."""
        as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
        return parse_job_id(self.run([*as_user, "sbatch", "-o", "/dev/null", *args, "--wrap", command]))

    # ----- power saving (partition cloud) ------------------------------------------------------------
    @property
    def power_log(self) -> Path:
        """Where the cloud nodes' ResumeProgram/SuspendProgram log the host lists slurmctld gave them."""
        return self.state_dir / "log" / "power.log"

    def power_events(self) -> list[PowerEvent]:
        """Every ResumeProgram/SuspendProgram call since the lab (re)started (:mod:`lab.power`)."""
        try:
            return parse_power_log(self.power_log.read_text())
        except FileNotFoundError:
            return []

    def resumed_nodes(self) -> set[str]:
        """Cloud nodes slurmctld powered up for jobs since the lab (re)started."""
        return resumed_hosts(self.power_events())

    def restart(self, *, timeout: float = START_TIMEOUT) -> LabStatus:
        """A fresh cluster (no jobs, no dynamic nodes, every cloud node powered down, an empty power log, a
        fresh accounting database).

        ``down`` + ``up`` takes ~1.8 s on the 26.05 lab (measured 2026-12-06). Powering the cloud nodes
        back down instead (``scontrol update nodename=p[1-12] state=power_down_force``) takes ~45 s
        (SuspendTimeout 30 s, and SuspendRate 60 nodes/min also paces nodes that were never up) and keeps
        finished jobs and the log.
        """
        self.down()
        return self.up(timeout=timeout)

    # ----- up --------------------------------------------------------------------------------------
    def _check_install(self) -> None:
        if self.flavor.is_host:
            missing = host_packages_missing()
            if missing:
                raise LabError(
                    f"host Slurm packages missing ({', '.join(missing)}); run: apt-get install -y "
                    + " ".join(HOST_PACKAGES)
                )
            munge.munge_ids()
            self._restd_ids()
        else:
            assert self.flavor.suite is not None
            if self.flavor.copy:
                chroot.ensure_copy(self.flavor.suite, self.flavor.copy, progress=True)
            else:
                chroot.ensure_chroot(self.flavor.suite, progress=True)

    def release(self) -> str:
        return chroot.slurm_release(self.root)

    def _config(self) -> LabConfig:
        release = _version_tuple(self.release())
        return LabConfig(
            cluster_name=self.flavor.cluster_name,
            inner=self.inner,
            ports=self.ports,
            cpu_nodes=self.nodes,
            legacy_munge=release < (23, 11),
            openmetrics=release >= OPENMETRICS_SINCE,
            accounting=self.has_accounting,
            extra=self.extra_conf,
        )

    @property
    def has_accounting(self) -> bool:
        """slurmdbd and MariaDB run beside slurmctld (chroot labs, whose chroot holds them)."""
        return not self.flavor.is_host and (self.root / "usr/sbin/slurmdbd").exists()

    def _static_nodes(self) -> list[NodeRecord]:
        nodes = [NodeRecord(name=f"c{i}", port=self.ports.cpu_node(i)) for i in range(1, self.nodes + 1)]
        nodes.append(NodeRecord(name=GPU_NODE, port=self.ports.gpu_node, gpus=GPU_COUNT))
        return nodes

    def _runtime_nodes(self) -> list[NodeRecord]:
        folder = self.state_dir / "nodes"
        if not folder.is_dir():
            return []
        return [NodeRecord(**json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]

    def _write_files(self, cfg: LabConfig) -> None:
        sd = self.state_dir
        for sub in ("etc", "state/ctld", "state/slurmd", "run", "log", "bin", "dev", "nodes"):
            (sd / sub).mkdir(parents=True, exist_ok=True)
        for key, size in (("slurm.key", 1024), ("jwt.key", 32)):
            path = sd / "etc" / key
            if not path.exists():
                path.write_bytes(secrets.token_bytes(size))
            path.chmod(0o600)
        (sd / "etc/slurm.conf").write_text(slurm_conf(cfg))
        if cfg.accounting:
            dbd = sd / "etc/slurmdbd.conf"
            dbd.write_text(slurmdbd_conf(cfg))
            dbd.chmod(0o600)  # slurmdbd refuses a readable one
        (sd / "etc/cgroup.conf").write_text(cgroup_conf(cfg))
        self._write_gres(cfg)
        for i in range(GPU_COUNT):
            (sd / "dev" / f"fakegpu{i}").touch()
        for action, script in (("resume", "resume.sh"), ("suspend", "suspend.sh")):
            path = sd / "bin" / script
            path.write_text(power_script(cfg.path("log", "power.log"), action))
            path.chmod(0o755)
        sd.chmod(0o755)
        (sd / "lab.json").write_text(
            json.dumps({"flavor": self.flavor.name, "port_base": self.ports.base, "nodes": self.nodes}) + "\n"
        )

    def _write_gres(self, cfg: LabConfig) -> None:
        gpus = {n.name: n.gpus for n in self._static_nodes() + self._runtime_nodes()}
        (self.state_dir / "etc/gres.conf").write_text(gres_conf(cfg, gpus))

    def _check_ports(self) -> None:
        wanted = {"slurmctld": self.ports.slurmctld, "slurmrestd": self.ports.slurmrestd}
        wanted |= {f"slurmd {n.name}": n.port for n in self._static_nodes()}
        busy = [f"{port} ({what})" for what, port in wanted.items() if not procs.port_free(port)]
        if busy:
            raise LabError(
                f"port(s) in use: {', '.join(busy)}; stop whatever holds them or pick another "
                f"--port-base (lab {self.flavor.name} uses {self.ports.base}..{self.ports.base + 99})"
            )

    def up(self, *, timeout: float = START_TIMEOUT) -> LabStatus:
        """Start the lab, or complete/confirm an already running one. Returns its status. One process at a
        time per lab (a file lock beside its state): test workers running side by side may all ask."""
        require_root()
        with procs.locked(self.state_dir.parent / f".{self.flavor.name}.up.lock"):
            return self._up(timeout)

    def _up(self, timeout: float) -> LabStatus:
        saved_base = self._saved().get("port_base")
        if self.is_running():
            if self._requested_base is not None and saved_base not in (None, self._requested_base):
                raise LabError(
                    f"lab {self.flavor.name} already runs with port base {saved_base}; "
                    "run `lab down` first to change it"
                )
        else:
            self._check_ports()
            self._check_install()
            self._claim_root()
            self.down()
            if not self.flavor.is_host:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                chroot.mount_all(self.root, self.state_dir)
            cfg = self._config()
            # A fresh start is a fresh cluster: no jobs, no dynamic nodes from an earlier run.
            for stale in ("state/ctld", "state/slurmd", "nodes", "log", "mysql"):
                _clear_dir(self.state_dir / stale)
            for name in ("demo.json", "token"):
                (self.state_dir / name).unlink(missing_ok=True)
            self._write_files(cfg)
        deadline = time.monotonic() + timeout
        if self.flavor.is_host:
            # before slurmctld (auth/munge); while the lab runs, this restarts a munged that died
            self._start_munged(deadline)
        cfg = self._config()
        if cfg.accounting:
            self._start_accounting(cfg, deadline)
        self._start_ctld(deadline)
        for node in self._static_nodes() + self._runtime_nodes():
            self._start_slurmd(node, deadline)
        self._start_restd()
        if not self.token_file.exists():
            self.write_token()
        self._wait("slurmrestd (TCP) to serve /openapi/v3", deadline, self._restd_ready, "slurmrestd-tcp")
        self._wait(
            "slurmrestd (unix socket) to serve /openapi/v3",
            deadline,
            lambda: self._restd_ready(unix=True),
            "slurmrestd-unix",
        )
        self._wait(
            "slurmd of every node to register",
            deadline,
            lambda: self._nodes_ready([n.name for n in self._static_nodes()]),
            "slurmctld",
            watch=[f"slurmd-{n.name}" for n in self._static_nodes() + self._runtime_nodes()],
        )
        return self.status()

    def _start_munged(self, deadline: float) -> None:
        """The lab's own munged (host flavor); waits until its socket answers."""
        if self._pid(MUNGED) is None:
            munge.prepare(self.state_dir)
            self._start(MUNGED, munge.argv(self.state_dir))
        self._wait("munged to answer on its socket", deadline, self._munge_ready, MUNGED)

    def _start_accounting(self, cfg: LabConfig, deadline: float) -> None:
        """MariaDB (a fresh database each fresh start), slurmdbd, then the cluster, its accounts and users
        (:data:`lab.conf.ACCOUNTS`) — before slurmctld, which registers with slurmdbd as it starts."""
        if self._pid("mariadbd") is None and not (self.state_dir / "mysql" / "mysql").is_dir():
            install = ["mariadb-install-db", "--user=root", f"--datadir={cfg.path('mysql')}"]
            self.run([*install, "--auth-root-authentication-method=normal", "--skip-test-db"], timeout=120)
        self._start("mariadbd", mariadb_argv(cfg))
        self._wait("MariaDB to answer", deadline, lambda: self._mariadb_ready(cfg), "mariadbd")
        # the database made here, not by slurmdbd (see lab.conf.mariadb_argv: that costs 5 s)
        grant = (
            f"CREATE DATABASE IF NOT EXISTS {ACCT_DB}; "
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
            f"GRANT ALL ON *.* TO '{DB_USER}'@'127.0.0.1'"
        )
        self.run(self._mariadb(cfg, grant))
        self._start("slurmdbd", ["slurmdbd", "-D"], env={"SLURM_CONF": self.slurm_conf_inner})
        self._wait("slurmdbd to answer `sacctmgr`", deadline, self._dbd_ready, "slurmdbd")
        sacctmgr = ["sacctmgr", "-i"]
        if self.flavor.cluster_name not in self.run(
            ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"]
        ):
            self.run([*sacctmgr, "add", "cluster", self.flavor.cluster_name])
        self.run(
            [*sacctmgr, "add", "account", ",".join(ACCOUNTS), f"cluster={self.flavor.cluster_name}"],
            check=False,
        )
        for account, users in ACCOUNTS.items():
            self.run([*sacctmgr, "add", "user", ",".join(users), f"account={account}"], check=False)

    @staticmethod
    def _mariadb(cfg: LabConfig, sql: str) -> list[str]:
        """The mariadb client as root over the server's unix socket, running ``sql``."""
        return [
            "mariadb",
            "--skip-ssl",
            f"--socket={cfg.path('run', 'mysqld.sock')}",
            "-u",
            "root",
            "-e",
            sql,
        ]

    def _mariadb_ready(self, cfg: LabConfig) -> bool:
        return self.run_raw(self._mariadb(cfg, "select 1"), timeout=10).returncode == 0

    def _dbd_ready(self) -> bool:
        return self.run_raw(["sacctmgr", "-n", "list", "cluster"], timeout=10).returncode == 0

    def _munge_ready(self) -> bool:
        sock = munge.socket_path(self.state_dir)
        if not sock.exists():
            return False
        result = subprocess.run(
            ["munge", "--socket", str(sock), "--no-input", "--string", ""],
            capture_output=True,
            check=False,
            timeout=10,
        )
        return result.returncode == 0

    def _wait(
        self,
        what: str,
        deadline: float,
        ready: Callable[[], bool],
        component: str,
        interval: float = 0.2,
        watch: Sequence[str] = (),
    ) -> None:
        """Until ``ready()``; LabError when the deadline passes (quoting ``component``'s log) or when
        slurmctld, munged, ``component`` or one of ``watch`` exited (quoting the dead one's log)."""
        watched = {"slurmctld", MUNGED, component, *watch}
        while True:
            for comp in self._components():
                pid = procs.read_pid(self._pid_file(comp))
                if comp in watched and (pid is None or not procs.alive(pid)):
                    raise LabError(f"{comp} of lab {self.flavor.name} exited: {self._why(comp)}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise LabError(
                    f"timed out waiting for {what} (lab {self.flavor.name}): {self._why(component)}"
                )
            time.sleep(interval)

    def _why(self, component: str) -> str:
        """Last fatal/error lines of a component's logs, naming the files."""
        logs = [p for p in (self.log_path(component), self._out_path(component)) if p.exists()]
        for log in logs:
            text = procs.why(log)
            if "fatal" in text or "error" in text:
                return f"{text} (see {log})"
        return f"{procs.why(logs[0]) if logs else '(no log)'} (see {self.log_path(component)})"

    def _ctld_ready(self) -> bool:
        result = self.run_raw(["scontrol", "ping"], timeout=10)
        return result.returncode == 0 and " is UP" in result.stdout

    def _restd_ready(self, unix: bool = False) -> bool:
        try:
            return self.get("/openapi/v3", unix=unix).status == 200
        except OSError:
            return False

    def _nodes_ready(self, names: Sequence[str]) -> bool:
        """Every node in ``names`` registered and usable (flags such as powered down ``~`` allowed)."""
        states = self.node_states()
        return all(state_base(states.get(n, "")).rstrip(NODE_FLAGS) in READY_STATES for n in names)

    def health_problems(self) -> list[str]:
        """Why a running lab is not fit to use, one phrase per node whose slurmd is gone or whose node is
        not plainly up (not responding ``*``, powered down ``~``, powering ``#%!``, down, drained ...);
        empty when every node the lab runs a slurmd for responds."""
        states = self.node_states()
        problems = []
        for node in self._static_nodes() + self._runtime_nodes():
            state = states.get(node.name, "missing")
            if self._pid(f"slurmd-{node.name}") is None:
                problems.append(f"node {node.name} has no slurmd ({state})")
            elif state_base(state) not in {*READY_STATES, "completing"}:  # a flag (``*``, ``~`` ...) fails
                problems.append(f"node {node.name} is {state}")
        return problems

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as ``sinfo -N -o %N|%T`` shows it (e.g. ``idle``, ``idle~``, ``down*``)."""
        result = self.run_raw(["sinfo", "-h", "-N", "-o", "%N|%T"], timeout=10)
        states: dict[str, str] = {}
        for line in result.stdout.splitlines():
            name, _, state = line.partition("|")
            states[name] = state
        return states

    def _start_slurmd(self, node: NodeRecord, deadline: float) -> int:
        """Start one node's slurmd (if not running) and, in a chroot lab, wait until it has re-created the
        chroot's shared auth socket (:data:`SACK_SOCKET`) or registered — so no two slurmd ever race for
        that socket (``fatal: init_sack_conmgr: ... Address already in use``). Serialised across threads
        and processes by a lock file; a slurmd that dies meanwhile raises :class:`LabError` quoting its
        log."""
        component = f"slurmd-{node.name}"
        pid = self._pid(component)
        if pid is not None:
            return pid
        argv = ["slurmd", "-D", "-N", node.name, "-f", self.slurm_conf_inner]
        if node.dynamic:
            conf = f"CPUs={node.cpus} RealMemory={node.memory_mb} Feature={DYN_FEATURE} Port={node.port}"
            if node.gpus:
                conf += f" Gres=gpu:{node.gpus}"
            argv[1:1] = ["-Z", "--conf", conf]
        (self.state_dir / "state/slurmd" / node.name).mkdir(parents=True, exist_ok=True)
        with procs.locked(self.state_dir / "run" / "slurmd-start.lock"):
            before = self._sack_stamp()
            pid = self._start(component, argv)
            if not self.flavor.is_host:
                self._wait(
                    f"slurmd {node.name} to open {'/'.join(SACK_SOCKET)}",
                    deadline,
                    lambda: self._sack_stamp() not in (None, before) or self._nodes_ready([node.name]),
                    component,
                    interval=0.01,
                )
        return pid

    def _sack_stamp(self) -> tuple[int, int] | None:
        """(inode, ctime ns) of the chroot's auth socket; None when absent. A new socket → a new stamp."""
        try:
            st = self.root.joinpath(*SACK_SOCKET).stat()
        except OSError:
            return None
        return st.st_ino, st.st_ctime_ns

    def _restd_ids(self) -> tuple[str, int, int]:
        """User name, uid and gid slurmrestd runs as (it refuses root)."""
        if not self.flavor.is_host:
            return chroot.RESTD_USER, chroot.RESTD_UID, chroot.RESTD_UID
        try:
            entry = pwd.getpwnam(HOST_RESTD_USER)
        except KeyError:
            raise LabError(
                f"user {HOST_RESTD_USER!r} (created by Debian's Slurm packages) does not exist; "
                "run: apt-get install --reinstall -y " + " ".join(HOST_PACKAGES)
            ) from None
        return HOST_RESTD_USER, entry.pw_uid, entry.pw_gid

    def _start_restd(self, env: dict[str, str] | None = None) -> None:
        user, uid, gid = self._restd_ids()
        release = self.release()
        plugins = "openapi/slurmctld" if _version_tuple(release) >= (23, 11) else "openapi/v0.0.38"
        if self.has_accounting:
            plugins += ",openapi/slurmdbd"

        def argv(auth: str, listen: str) -> list[str]:
            conf = self.slurm_conf_inner
            return ["slurmrestd", "-f", conf, "-u", user, "-g", user, "-a", auth, "-s", plugins, listen]

        self._start(
            "slurmrestd-tcp",
            argv("rest_auth/jwt", f"127.0.0.1:{self.ports.slurmrestd}"),
            env={"SLURM_JWT": "daemon", **(env or {})},
        )
        # rest_auth/local: the caller's uid comes from the socket (root and the slurmrestd user are let in).
        # slurmrestd runs as its own user, so the socket lives in a directory that user owns.
        sock = self.inner / "run" / "restd" / RESTD_UNIX_SOCKET
        if self._pid("slurmrestd-unix") is None:
            self.unix_socket.parent.mkdir(parents=True, exist_ok=True)
            os.chown(self.unix_socket.parent, uid, gid)
            self.unix_socket.unlink(missing_ok=True)
        self._start("slurmrestd-unix", argv("rest_auth/local", f"unix:{sock}"))

    # ----- token, HTTP -----------------------------------------------------------------------------
    def token(self, lifespan: int = 3600, user: str = "root") -> str:
        """A fresh JWT for ``user`` from ``scontrol token``."""
        out = self.run(["scontrol", "token", f"username={user}", f"lifespan={lifespan}"])
        match = re.search(r"SLURM_JWT=(\S+)", out)
        if not match:
            raise LabError(f"unexpected `scontrol token` output: {out.strip()!r}")
        return match.group(1)

    def write_token(self, lifespan: int = TOKEN_LIFESPAN) -> Path:
        token = self.token(lifespan)
        self.token_file.write_text(token + "\n")
        self.token_file.chmod(0o600)
        return self.token_file

    def read_token(self) -> str:
        try:
            return self.token_file.read_text().strip()
        except OSError:
            raise LabNotRunningError(
                f"no token file at {self.token_file}; is lab {self.flavor.name} up?"
            ) from None

    def get(self, path: str, *, unix: bool = False, token: str | None = None) -> Response:
        """GET ``path`` from this lab's slurmrestd (TCP with the lab's token, or the unix socket)."""
        if unix:
            return get(self.unix_url, path)
        headers = {"X-SLURM-USER-NAME": "root"}
        tok = token if token is not None else (self.read_token() if self.token_file.exists() else "")
        if tok:
            headers["X-SLURM-USER-TOKEN"] = tok
        return get(self.url, path, headers)

    def post_as(self, user: str, path: str, doc: Any) -> Response:
        """POST ``doc`` (JSON) to ``path`` as ``user`` (a JWT of theirs: slurmctld counts and authorises the
        RPC as theirs, unlike ``scontrol -u``, which it counts as root's)."""
        headers = {
            "X-SLURM-USER-NAME": user,
            "X-SLURM-USER-TOKEN": self.token(600, user),
            "Content-Type": "application/json",
        }
        return request("POST", self.url, path, headers, json.dumps(doc).encode())

    def openapi(self) -> dict[str, Any]:
        resp = self.get("/openapi/v3")
        if resp.status != 200:
            raise LabError(f"GET /openapi/v3 on {self.url} returned HTTP {resp.status}")
        doc: dict[str, Any] = json.loads(resp.body)
        return doc

    def api_versions(self) -> list[str]:
        return api_versions_from_openapi(self.openapi())

    # ----- nodes at run time -----------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        cpus: int = NODE_CPUS,
        memory_mb: int = NODE_MEMORY_MB,
        gpus: int = 0,
        dynamic: bool = False,
        timeout: float = 30.0,
    ) -> NodeRecord:
        """Start a slurmd: a configured node's (after ``remove_node``), or a new dynamic node (``slurmd -Z``)
        that joins nodeset ``ns-dyn`` (partition ``dyn``). Safe to call from several threads at once (an
        operator starting nodes in parallel): ports and node records are handed out under a lock."""
        self._require_running()
        deadline = time.monotonic() + timeout
        record_path = self.state_dir / "nodes" / f"{name}.json"
        new = not record_path.exists() and name not in {n.name for n in self._static_nodes()}
        try:
            with _node_lock(self.state_dir):
                node = self._start_node(
                    name, cpus=cpus, memory_mb=memory_mb, gpus=gpus, dynamic=dynamic, deadline=deadline
                )
            self._wait(
                f"node {name} to register", deadline, lambda: self._nodes_ready([name]), f"slurmd-{name}"
            )
        except LabError:
            if new:  # a node that never came up is not left behind for the next `up` to start again
                self._stop(f"slurmd-{name}")
                with _node_lock(self.state_dir):
                    record_path.unlink(missing_ok=True)
                    self._write_gres(self._config())
            raise
        return node

    def _start_node(
        self, name: str, *, cpus: int, memory_mb: int, gpus: int, dynamic: bool, deadline: float
    ) -> NodeRecord:
        static = {n.name: n for n in self._static_nodes()}
        record_path = self.state_dir / "nodes" / f"{name}.json"
        if name in static:
            node = static[name]
            self._start_slurmd(node, deadline)
            self.run(["scontrol", "update", f"nodename={name}", "state=resume"], check=False)
        elif record_path.exists():
            node = NodeRecord(**json.loads(record_path.read_text()))
            self._start_slurmd(node, deadline)
        else:
            if not dynamic:
                raise LabError(
                    f"node {name} is not in slurm.conf; add it with --dynamic (joins partition dyn)"
                )
            if self._config().legacy_munge:
                raise LabError(
                    f"lab {self.flavor.name} runs Slurm {self.release()}: dynamic nodes (slurmd -Z joining "
                    "nodeset ns-dyn, partition dyn) are not supported by the lab before Slurm 23.11; "
                    "use --slurm 24.11 or --slurm 26.05"
                )
            used = {n.port for n in self._runtime_nodes()}
            port = next((p for p in self.ports.runtime_nodes if p not in used and procs.port_free(p)), None)
            if port is None:
                raise LabError("no free port left for another node")
            node = NodeRecord(name=name, port=port, cpus=cpus, memory_mb=memory_mb, gpus=gpus, dynamic=True)
            record_path.parent.mkdir(exist_ok=True)
            record_path.write_text(json.dumps(asdict(node)) + "\n")
            self._write_gres(self._config())
            self._start_slurmd(node, deadline)
        return node

    def remove_node(self, name: str, *, timeout: float = 30.0) -> None:
        """Stop a node's slurmd and set it DOWN (its jobs are requeued, as when a pod disappears);
        a dynamic node is then deleted from slurmctld."""
        self._require_running()
        record_path = self.state_dir / "nodes" / f"{name}.json"
        known = {n.name for n in self._static_nodes()}
        if name not in known and not record_path.exists():
            raise LabError(f"lab {self.flavor.name} runs no node named {name}")
        # its node goes DOWN and away: no need to wait out a slurmd still finishing a job's steps (one whose
        # job was suspended, then cancelled, took 8.8 s to exit; measured 2026-12-06)
        self._stop(f"slurmd-{name}", grace=SLURMD_REMOVE_GRACE)
        self.run(["scontrol", "update", f"nodename={name}", "state=down", "reason=lab_node_remove"])
        if name in known:
            return
        deadline = time.monotonic() + timeout
        while True:
            result = self.run_raw(["scontrol", "delete", f"nodename={name}"])
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise LabError(f"could not delete node {name}: {result.stderr.strip()}")
            time.sleep(0.5)
        with _node_lock(self.state_dir):
            record_path.unlink(missing_ok=True)
            self._write_gres(self._config())

    def _require_running(self) -> None:
        require_root()
        if not self.is_running():
            raise LabNotRunningError(
                f"lab {self.flavor.name} is not running; start it with `lab up --slurm {self.flavor.name}`"
            )

    # ----- down ------------------------------------------------------------------------------------
    def down(self) -> list[int]:
        """Stop this lab's processes (recorded pids, then anything else under its chroot) and unmount.

        Returns the pids that were stopped.
        """
        require_root()
        pids = [pid for comp in self._components() if (pid := self._pid(comp)) is not None]
        procs.terminate(pids)
        stopped = list(pids)
        if not self.flavor.is_host and self.root.exists() and self._owner() in (None, self.state_dir):
            stopped += self._clear_root()
        if self.flavor.is_host:
            # job steps (slurmstepd, the jobs' processes) and any daemon whose pid file was lost
            leftovers = procs.pids_of_lab(ENV_MARKER, self.state_dir)
            procs.terminate(leftovers, timeout=JOB_STEP_GRACE)
            stopped += leftovers
        for comp in self._components():
            self._pid_file(comp).unlink(missing_ok=True)
        return stopped

    # A chroot hosts one lab at a time (its state directory is mounted at /lab); the owner file says whose.
    @property
    def _owner_file(self) -> Path:
        return self.root / ".slurm-keda-lab-owner"

    def _owner(self) -> Path | None:
        try:
            return Path(self._owner_file.read_text().strip())
        except OSError:
            return None

    def _clear_root(self) -> list[int]:
        leftovers = procs.pids_under_root(self.root)  # job steps: slurmstepd and the jobs' processes
        procs.terminate(leftovers, timeout=JOB_STEP_GRACE)
        chroot.unmount_all(self.root)
        return leftovers

    def _claim_root(self) -> None:
        if self.flavor.is_host:
            return
        owner = self._owner()
        if owner is not None and owner != self.state_dir:
            pid = procs.read_pid(owner / "run" / "slurmctld.lab-pid")
            if pid is not None and procs.belongs(pid, self.root, self.slurm_conf_inner):
                raise LabError(f"chroot {self.root} is in use by the lab in {owner}; stop that one first")
            self._clear_root()
        self._owner_file.write_text(f"{self.state_dir}\n")

    # ----- status ----------------------------------------------------------------------------------
    def status(self) -> LabStatus:
        running = self.is_running()
        base = LabStatus(flavor=self.flavor.name, running=running, state_dir=str(self.state_dir))
        if not running:
            return base
        versions: list[str] = []
        try:
            versions = self.api_versions()
        except (OSError, LabError, ValueError):
            versions = []
        return LabStatus(
            flavor=self.flavor.name,
            running=True,
            state_dir=str(self.state_dir),
            slurm_release=self.release(),
            api_versions=versions,
            url=self.url,
            unix_url=self.unix_url,
            token_file=str(self.token_file),
            slurm_conf=str(self.slurm_conf),
            port_base=self.ports.base,
            nodes=list(self.node_states()),
            components={comp: self._pid(comp) for comp in self._components()},
        )


_NODE_LOCKS: dict[Path, threading.Lock] = {}
_NODE_LOCKS_GUARD = threading.Lock()


def _node_lock(state_dir: Path) -> threading.Lock:
    """One lock per lab for handing out runtime node ports and records (threads of one process)."""
    with _NODE_LOCKS_GUARD:
        return _NODE_LOCKS.setdefault(state_dir, threading.Lock())


def _clear_dir(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
