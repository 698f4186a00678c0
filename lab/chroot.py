"""Debian chroots holding a given Slurm release: build once with debootstrap, cache, reuse.

A finished chroot has a marker file; a build goes to ``SUITE.partial`` and is renamed only on success,
so an interrupted build never looks finished. Builds of one suite are serialised with a lock file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from lab.errors import LabError
from lab.flavors import CHROOT_PACKAGES, cache_dir
from lab.procs import locked, tail

MARKER = ".slurm-keda-chroot"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
RESTD_USER = "slurmrestd"
RESTD_UID = 64030
LAB_USERS = (("ann", 2001), ("bob", 2002))
"""Users besides root that tests and benchmarks submit and act as (``sbatch --uid``, ``scontrol -u``)."""
INNER_STATE = "/lab"
"""Where a lab's state directory is bind-mounted inside its chroot."""


def find_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt already uses (deb822 ``URIs:`` or one-line ``deb`` entries)."""
    candidates: list[str] = []
    files = (
        sorted((sources / "sources.list.d").glob("*.sources"))
        + sorted((sources / "sources.list.d").glob("*.list"))
        + [sources / "sources.list"]
    )
    for file in files:
        try:
            text = file.read_text()
        except OSError:
            continue
        candidates += re.findall(r"^URIs:\s*(\S+)", text, flags=re.MULTILINE)
        candidates += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, flags=re.MULTILINE)
    for uri in candidates:
        if re.search(r"/debian/?$", uri) and "security" not in uri:
            return uri.rstrip("/")
    return FALLBACK_MIRROR


def is_built(root: Path) -> bool:
    return (root / MARKER).is_file()


def ensure_chroot(suite: str, progress: bool = False) -> Path:
    """Return the cached chroot for ``suite``, debootstrapping it first if needed (~50 s, ~290 MB)."""
    root = cache_dir() / suite
    if is_built(root) and not missing_packages(root):
        prepare(root)
        return root
    with locked(cache_dir() / f".{suite}.lock"):
        if is_built(root):
            install_missing(root, progress)
            prepare(root)
            return root
        if shutil.which("debootstrap") is None:
            raise LabError("debootstrap is not installed; run: apt-get install -y debootstrap")
        partial = cache_dir() / f"{suite}.partial"
        log = cache_dir() / f"{suite}.build.log"
        if partial.exists():
            _unmount_below(partial)
            shutil.rmtree(partial)
        mirror = find_mirror()
        argv = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(CHROOT_PACKAGES)}",
            suite,
            str(partial),
            mirror,
        ]
        if progress:
            print(f"building {suite} chroot in {root} from {mirror} (about a minute, once) ...", flush=True)
        started = time.monotonic()
        with open(log, "wb") as out:
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if result.returncode != 0 or not (partial / "usr/sbin/slurmctld").exists():
            raise LabError(
                f"debootstrap of {suite} failed (exit {result.returncode}); see {log}: "
                + tail(log, 3).replace("\n", " | ")
            )
        if root.exists():
            shutil.rmtree(root)
        partial.rename(root)
        (root / MARKER).write_text(
            f"suite={suite}\nmirror={mirror}\nseconds={time.monotonic() - started:.0f}\n"
        )
    prepare(root)
    return root


MOUNT_POINTS = ("proc", "dev", "sys", INNER_STATE.lstrip("/"))
"""What :func:`mount_all` mounts inside a chroot: a copy leaves them out (and makes them empty)."""
NOT_COPIED = (*MOUNT_POINTS, ".slurm-keda-lab-owner", "core")
"""Top-level entries a copy leaves out: the mount points, whose lab uses the chroot, a core dump."""


def ensure_copy(suite: str, copy: str, progress: bool = False) -> Path:
    """Return the chroot ``SUITE-COPY``: a copy of the cached ``suite`` chroot (built first if needed),
    made once (~20 s, ~900 MB) and remade when the original was built again. The copy leaves out what
    :data:`NOT_COPIED` names — never what is mounted inside the original (its lab may be running)."""
    base = ensure_chroot(suite, progress)
    root = cache_dir() / f"{suite}-{copy}"
    stamp = (base / MARKER).read_text()

    def current() -> bool:
        return is_built(root) and (root / MARKER).read_text() == stamp and not missing_packages(root)

    if current():
        prepare(root)
        return root
    with locked(cache_dir() / f".{suite}-{copy}.lock"):
        if current():
            prepare(root)
            return root
        mounted = [p for p in _mountinfo() if base.resolve() in p.parents]
        strays = [p for p in mounted if p.relative_to(base.resolve()).parts[0] not in MOUNT_POINTS]
        if strays:
            raise LabError(f"cannot copy {base}: {', '.join(map(str, strays))} mounted inside it")
        partial = cache_dir() / f"{suite}-{copy}.partial"
        for old in (partial, root):
            if old.exists():
                _unmount_below(old)
                shutil.rmtree(old)
        if progress:
            print(f"copying the {suite} chroot to {root} (once) ...", flush=True)
        partial.mkdir()
        entries = [str(entry) for entry in base.iterdir() if entry.name not in NOT_COPIED]
        argv = ["cp", "-a", "--reflink=auto", *entries, str(partial)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise LabError(f"copying the {suite} chroot failed: {result.stderr.strip()[-500:]}")
        for name in MOUNT_POINTS:
            (partial / name).mkdir(exist_ok=True)
        (partial / MARKER).write_text(stamp)
        partial.rename(root)
    prepare(root)
    return root


PACKAGE_FILES = {"slurmdbd": "usr/sbin/slurmdbd", "mariadb-server": "usr/sbin/mariadbd"}
"""A file each package of a chroot built before it was added installs."""


def missing_packages(root: Path) -> list[str]:
    """Packages of :data:`PACKAGE_FILES` a cached chroot lacks (it was built before they were added)."""
    return [name for name, path in PACKAGE_FILES.items() if not (root / path).exists()]


def install_missing(root: Path, progress: bool = False) -> None:
    """apt-get install what :func:`missing_packages` names into the built chroot (services not started:
    a policy-rc.d refuses every start while it runs)."""
    missing = missing_packages(root)
    if not missing:
        return
    if progress:
        print(f"adding {', '.join(missing)} to the {root.name} chroot ...", flush=True)
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    log = cache_dir() / f"{root.name}.install.log"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    try:
        with open(log, "wb") as out:
            for argv in (
                ["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", *missing],
            ):
                result = subprocess.run(
                    ["chroot", str(root), *argv], stdout=out, stderr=subprocess.STDOUT, env=env, check=False
                )
                if result.returncode != 0:
                    raise LabError(
                        f"{' '.join(argv)} in the {root.name} chroot failed (exit {result.returncode}); see "
                        f"{log}: " + tail(log, 3).replace("\n", " | ")
                    )
    finally:
        policy.unlink(missing_ok=True)


def prepare(root: Path) -> None:
    """Idempotent touches a chroot needs: /etc/hosts, the slurmrestd user, the /lab mount point."""
    hosts = root / "etc/hosts"
    if "localhost" not in (hosts.read_text() if hosts.exists() else ""):
        hosts.write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n")
    add_system_user(root, RESTD_USER, RESTD_UID)
    for name, uid in LAB_USERS:
        add_system_user(root, name, uid, "slurm-keda lab user")
    (root / INNER_STATE.lstrip("/")).mkdir(exist_ok=True)


def add_system_user(root: Path, name: str, uid: int, comment: str = "slurm-keda lab slurmrestd") -> None:
    """Add a no-login system user+group by editing passwd/group directly (works on minbase)."""
    passwd, group = root / "etc/passwd", root / "etc/group"
    if any(line.split(":")[0] == name for line in passwd.read_text().splitlines()):
        return
    with open(group, "a") as handle:
        handle.write(f"{name}:x:{uid}:\n")
    with open(passwd, "a") as handle:
        handle.write(f"{name}:x:{uid}:{uid}:{comment}:/nonexistent:/usr/sbin/nologin\n")


def slurm_release(root: Path) -> str:
    """The Slurm release installed in ``root`` (e.g. ``24.11.5``), read from dpkg's status file."""
    status = (root / "var/lib/dpkg/status").read_text()
    match = re.search(
        r"^Package: slurmctld\n(?:[^\n]+\n)*?Version: (?:\d+:)?([0-9.]+)", status, flags=re.MULTILINE
    )
    if not match:
        raise LabError(f"slurmctld is not installed in {root}")
    return match.group(1)


def _mountinfo() -> list[Path]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.append(Path(field.replace("\\040", " ")))
    return points


def is_mounted(path: Path) -> bool:
    return path.resolve() in _mountinfo()


def mount_all(root: Path, state_dir: Path) -> None:
    """proc, /dev, /sys and the lab's state directory (at /lab) inside ``root``; idempotent."""
    root = root.resolve()
    plan: list[tuple[Path, list[str]]] = [
        (root / "proc", ["-t", "proc", "proc"]),
        (root / "dev", ["--bind", "/dev"]),
        (root / "sys", ["--bind", "/sys"]),
        (root / INNER_STATE.lstrip("/"), ["--bind", str(state_dir)]),
    ]
    for target, how in plan:
        target.mkdir(exist_ok=True)
        if not is_mounted(target):
            result = subprocess.run(["mount", *how, str(target)], capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise LabError(f"mount {' '.join(how)} {target} failed: {result.stderr.strip()}")


def _unmount_below(root: Path) -> None:
    root = root.resolve()
    points = [p for p in _mountinfo() if p == root or root in p.parents]
    for point in sorted(points, key=lambda p: len(p.parts), reverse=True):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def unmount_all(root: Path) -> None:
    """Undo :func:`mount_all` (lazy unmounts, deepest first)."""
    if root.resolve() == Path("/"):
        return
    _unmount_below(root)
