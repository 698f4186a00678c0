"""Processes of a lab: start them (optionally inside a chroot), find them, stop them.

Nothing here matches processes by name. A process belongs to a lab when its pid is recorded by the lab
AND its ``/proc/PID/root`` is the lab's root AND its command line names the lab's slurm.conf; job steps
(slurmstepd and the jobs' own processes) are found by their root (chroot labs only).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from lab.errors import LabError

BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def in_root(root: Path, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` inside ``root`` (unchanged for ``/``)."""
    if root == Path("/"):
        return list(argv)
    return ["chroot", str(root), *argv]


def spawn(root: Path, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> int:
    """Start a long-running daemon, detached (not our child), output appended to ``log``; returns its pid.

    A short-lived ``sh`` starts it in the background and prints ``$!``; ``chroot`` execs the daemon, so the
    pid is the daemon's own. The daemon is reparented to init: no zombies, no Popen left to warn about.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    script = f"{shlex.join(in_root(root, argv))} </dev/null >>{shlex.quote(str(log))} 2>&1 & echo $!"
    result = subprocess.run(
        ["/bin/sh", "-c", script],
        env={**BASE_ENV, **env},
        start_new_session=True,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise LabError(f"could not start {argv[0]}: {result.stderr.strip() or result.stdout.strip()}")
    return int(result.stdout.strip())


def _stat_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def reap(pid: int) -> None:
    """Collect ``pid`` if it is our own exited child (else it would linger as a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int) -> bool:
    reap(pid)
    state = _stat_state(pid)
    return state is not None and state not in ("Z", "X")


def root_of(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/root"))
    except OSError:
        return None


def cmdline_of(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def belongs(pid: int, root: Path, marker: str) -> bool:
    """True if ``pid`` is alive, runs under ``root`` and its command line contains ``marker``."""
    if not alive(pid):
        return False
    if root_of(pid) != root.resolve():
        return False
    return any(marker in arg for arg in cmdline_of(pid))


def pids_under_root(root: Path) -> list[int]:
    """Every live process whose root directory is ``root`` (never ``/``)."""
    target = root.resolve()
    if target == Path("/"):
        raise LabError("refusing to select processes by root '/'")
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if pid != os.getpid() and root_of(pid) == target and alive(pid):
                found.append(pid)
    return found


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            out[key] = value
    return out


def _ancestors() -> set[int]:
    """This process and its parents (never selected for stopping)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def holds_file_under(pid: int, folder: Path) -> bool:
    """True if ``pid`` has a file below ``folder`` open (e.g. slurmstepd keeps its slurmd's log open)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            target = Path(os.readlink(fd_dir / fd))
        except OSError:
            continue
        if folder in target.parents:
            return True
    return False


def pids_of_lab(env_key: str, state_dir: Path) -> list[int]:
    """Every live process of a host lab: marked with ``env_key=<state dir>`` in its environment, or holding
    a file below ``state_dir`` open (this process and its parents excepted).

    Slurm passes the environment on to the jobs (``sbatch --export=ALL``, the default), but slurmstepd
    overwrites its own environment with its process title; it keeps its slurmd's log file open, though.
    Nothing is matched by name.
    """
    folder = state_dir.resolve()
    if folder == Path("/") or len(folder.parts) < 3:
        raise LabError(f"refusing to select processes by files under {folder}")
    own = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if pid in own or not alive(pid):
                continue
            if environ_of(pid).get(env_key) == str(state_dir) or holds_file_under(pid, folder):
                found.append(pid)
    return found


def terminate(pids: Iterable[int], timeout: float = 10.0) -> None:
    """SIGTERM the given pids, SIGKILL whatever is left after ``timeout`` seconds."""
    pending = [pid for pid in pids if alive(pid)]
    for pid in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
        pending = [pid for pid in pending if alive(pid)]
    for pid in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = [pid for pid in pending if alive(pid)]


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def port_free(port: int) -> bool:
    """True if nothing listens on ``port`` (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def why(path: Path, lines: int = 3) -> str:
    """A one-line excerpt of a daemon log: its last ``fatal``/``error`` lines, else its last lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    picked = [line for line in text if "fatal" in line] or [line for line in text if "error" in line][-lines:]
    return " | ".join(picked[-lines:] or text[-lines:]) or "(log is empty)"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder): one holder at a time across
    threads (each opens its own file) and processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def parse_job_id(sbatch_output: str) -> int:
    match = re.search(r"Submitted batch job (\d+)", sbatch_output)
    if not match:
        raise LabError(f"unexpected sbatch output: {sbatch_output.strip()!r}")
    return int(match.group(1))
