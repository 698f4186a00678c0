"""The host flavor's own munged: Slurm 22.05 (Debian 12) authenticates with munge only.

The lab never uses the system's munge (``/run/munge``, ``/etc/munge/munge.key``, the ``munge`` systemd
service): it runs a private ``munged`` as user ``munge`` with every file under ``<state dir>/munge/``
(socket, key, pid, seed, log), and slurm.conf's ``AuthInfo=socket=...`` points Slurm at that socket.

munged insists on safe permissions: the socket's directory must be executable by everyone and writable
by nobody but its owner, the key file must be owned by the munge user with mode 0600.
"""

from __future__ import annotations

import os
import pwd
import secrets
from pathlib import Path

from lab.conf import MUNGE_SOCKET
from lab.errors import LabError

MUNGE_USER = "munge"
KEY_BYTES = 1024


def munge_ids() -> tuple[int, int]:
    """uid and gid of the ``munge`` user (created by Debian's munge package)."""
    try:
        entry = pwd.getpwnam(MUNGE_USER)
    except KeyError:
        raise LabError("user 'munge' does not exist; run: apt-get install -y munge") from None
    return entry.pw_uid, entry.pw_gid


def munge_dir(state_dir: Path) -> Path:
    return state_dir / MUNGE_SOCKET[0]


def socket_path(state_dir: Path) -> Path:
    return state_dir.joinpath(*MUNGE_SOCKET)


def prepare(state_dir: Path) -> Path:
    """Create ``<state dir>/munge`` (owned by munge, 0755) and its key (random, 0600) if missing; the key."""
    uid, gid = munge_ids()
    folder = munge_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, uid, gid)
    folder.chmod(0o755)
    key = folder / "munge.key"
    if not key.exists() or key.stat().st_size < 32:
        tmp = folder / "munge.key.new"
        tmp.write_bytes(secrets.token_bytes(KEY_BYTES))
        tmp.replace(key)
    os.chown(key, uid, gid)
    key.chmod(0o600)
    return key


def argv(state_dir: Path) -> list[str]:
    """``munged`` in the foreground as user munge, every file in the lab's munge directory."""
    folder = munge_dir(state_dir)
    return [
        "setpriv",
        f"--reuid={MUNGE_USER}",
        f"--regid={MUNGE_USER}",
        "--init-groups",
        "munged",
        "--foreground",
        f"--socket={socket_path(state_dir)}",
        f"--key-file={folder / 'munge.key'}",
        f"--pid-file={folder / 'munged.pid'}",
        f"--log-file={folder / 'munged.log'}",
        f"--seed-file={folder / 'munged.seed'}",
    ]
