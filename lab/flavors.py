"""Which Slurm a lab runs, and where it lives.

Each flavor has its own ports, state directory and cluster name so that labs of different Slurm
versions can run side by side on one machine.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/cache/slurm-keda/chroots")
"""Where debootstrapped chroots are kept and reused (env ``SLURM_KEDA_LAB_CACHE`` overrides)."""

DEFAULT_STATE_ROOT = Path("/var/lib/slurm-keda/lab")
"""Parent of every lab's state directory (env ``SLURM_KEDA_LAB_STATE`` overrides)."""

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
"""Accounting: slurmdbd on a real MariaDB (chroot labs only)."""
CHROOT_PACKAGES = (*SLURM_PACKAGES, *ACCOUNTING_PACKAGES)
"""Installed into each chroot by ``debootstrap --include`` (or into an older cached chroot with apt)."""

HOST_PACKAGES = (*SLURM_PACKAGES, "munge")
"""Needed on the host for the ``host`` flavor (22.05 on Debian 12 uses munge)."""


@dataclass(frozen=True)
class Flavor:
    """One kind of lab.

    ``suite`` is the Debian suite debootstrapped into the chroot; ``None`` means the host's own packages.
    ``copy`` names a second chroot of the same suite (a copy of the first, ``SUITE-COPY``): a chroot
    hosts one lab at a time, so a second lab of one Slurm release needs its own.
    """

    name: str
    suite: str | None
    port_base: int
    copy: str = ""

    @property
    def cluster_name(self) -> str:
        """ClusterName in slurm.conf: only letters and digits."""
        return "lab" + "".join(ch for ch in self.name if ch.isalnum())

    @property
    def is_host(self) -> bool:
        return self.suite is None

    def chroot_dir(self) -> Path:
        """The chroot root, or ``/`` for the host flavor."""
        if self.suite is None:
            return Path("/")
        return cache_dir() / (f"{self.suite}-{self.copy}" if self.copy else self.suite)

    def state_dir(self) -> Path:
        return state_root() / self.name


FLAVORS: dict[str, Flavor] = {
    "24.11": Flavor(name="24.11", suite="trixie", port_base=16800),
    "26.05": Flavor(name="26.05", suite="sid", port_base=16900),
    "host": Flavor(name="host", suite=None, port_base=17000),
    "26.05-oracle": Flavor(name="26.05-oracle", suite="sid", port_base=17100, copy="oracle"),
}
"""Every supported flavor. 24.11 is Debian trixie's Slurm, 26.05 is sid's (sid moves: the real release is
read at run time and reported by ``status``). ``26.05-oracle`` is a second 26.05 lab on a copy of the sid
chroot: the demand model's oracle tests restart their lab for every mix, and on a lab of their own they
run beside the other 26.05 tests (``make test``)."""

DEFAULT_FLAVOR = "26.05"


def cache_dir() -> Path:
    return Path(os.environ.get("SLURM_KEDA_LAB_CACHE", str(DEFAULT_CACHE)))


def state_root() -> Path:
    return Path(os.environ.get("SLURM_KEDA_LAB_STATE", str(DEFAULT_STATE_ROOT)))


def host_packages_missing(packages: tuple[str, ...] = HOST_PACKAGES) -> list[str]:
    """Which of the host flavor's Debian packages are not installed (all of them without dpkg)."""
    try:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", *packages],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return list(packages)
    installed = {
        parts[0]
        for line in result.stdout.splitlines()
        if (parts := line.split()) and parts[-1] == "installed"
    }
    return [p for p in packages if p not in installed]


def get_flavor(name: str) -> Flavor:
    from lab.errors import LabError

    try:
        return FLAVORS[name]
    except KeyError:
        raise LabError(f"unknown lab flavor {name!r}; choose one of {', '.join(FLAVORS)}") from None
