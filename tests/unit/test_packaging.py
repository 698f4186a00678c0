"""The image, as far as it can be tested without a Docker engine: the Dockerfile's shape (multi-stage, slim
base, non-root, HEALTHCHECK, entrypoint ``slurm-keda serve``), and the wheel its build stage builds — from
the same copied paths, with the same removal — checked for content and run from a clean import path."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from testkit.paths import ROOT

LINES = [ln for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln and not ln.startswith("#")]


def stages() -> list[list[str]]:
    out: list[list[str]] = []
    for ln in LINES:
        if ln.startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(ln)
    return out


def test_dockerfile_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    build, final = stages()
    assert any(ln.startswith("ARG PYTHON_IMAGE=python:3.11-slim-bookworm") for ln in LINES)
    # the build stage compiles (setup.py): the full image of the same Python and Debian release
    assert any(ln == "ARG BUILD_IMAGE=python:3.11-bookworm" for ln in LINES)
    assert build[0] == "FROM ${BUILD_IMAGE} AS build" and final[0] == "FROM ${PYTHON_IMAGE}"
    text = "\n".join(final)
    for forbidden in ("gcc", "build-essential", "apt-get install", "lab/", "COPY exporter"):
        assert forbidden not in text, forbidden
    assert "COPY --from=build /wheels /wheels" in final  # only wheels reach the final image
    (user,) = [ln.split()[1] for ln in final if ln.startswith("USER ")]
    assert user.split(":")[0] not in ("0", "root")
    assert any(ln.startswith("HEALTHCHECK ") for ln in final)
    entry = next(json.loads(ln.removeprefix("ENTRYPOINT ")) for ln in final if ln.startswith("ENTRYPOINT "))
    cmd = next(json.loads(ln.removeprefix("CMD ")) for ln in final if ln.startswith("CMD "))
    assert entry + cmd == ["slurm-keda", "serve"]


def test_the_healthcheck_asks_the_default_port_for_healthz() -> None:
    from slurm_keda.settings import option

    line = " ".join(ln.strip().rstrip("\\") for ln in LINES if 'CMD ["python"' in ln)
    argv = json.loads(line[line.index("[") :])
    assert argv[:2] == ["python", "-c"]
    compile(argv[2], "healthcheck", "exec")
    assert f"127.0.0.1:{option('listen_port').default}/healthz" in argv[2]


def test_one_console_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"slurm-keda": "slurm_keda.cli:main"}


@pytest.mark.heavy
def test_the_wheel_the_build_stage_builds(tmp_path: Path) -> None:
    build, _ = stages()
    src = tmp_path / "src"
    src.mkdir()
    for ln in build:  # the build stage's COPY lines, as the engine would run them
        if ln.startswith("COPY "):
            *sources, dest = shlex.split(ln)[1:]
            for s in sources:
                target = src / (Path(s).name if dest.endswith("/") or dest == "./" else dest)
                if (ROOT / s).is_dir():  # less what .dockerignore keeps out
                    shutil.copytree(ROOT / s, target, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
                else:
                    shutil.copy(ROOT / s, target)
    (run,) = [ln for ln in build if ln.startswith("RUN ")]
    assert run.startswith("RUN pip wheel ")
    assert not (src / "lab").exists()  # the lab is never copied, so nothing has to delete it
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("slurm_keda-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith(("lab/", "tests/", "benchmarks/"))]
    for needed in (
        "slurm_keda/cli.py",
        "exporter/poller.py",
        "autoscaler/_proto/externalscaler_pb2.py",
        "bridge/controller.py",
        "dashboards/slurm-overview.json",
        "dashboards/rules/slurm-keda.rules.yaml",
    ):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "slurm-keda = slurm_keda.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    for module in ("_bestfit", "_scan"):
        compiled = [n for n in names if n.startswith(f"autoscaler/demand/{module}") and n.endswith(".so")]
        assert len(compiled) == (1 if shutil.which("cc") else 0), names  # built where a compiler is

    # installed alone (the dependencies from this venv, no editable checkout on the path): it runs
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
    )
    deps = sysconfig.get_paths()["purelib"]
    env = {"PYTHONPATH": f"{site}:{deps}", "PATH": "/usr/bin:/bin"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code = "import sys; from slurm_keda.cli import main; sys.exit(main(sys.argv[1:]))"
        return subprocess.run(
            [sys.executable, "-S", "-c", code, *args],
            env=env,
            cwd=tmp_path,  # not the checkout: -c puts the working directory first on the path
            capture_output=True,
            text=True,
            check=False,
        )

    where = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import exporter, dashboards; print(exporter.__file__, dashboards.__file__)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(p.startswith(str(site)) for p in where.stdout.split()), where.stdout
    native = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "from autoscaler.demand import packing, queue; print(packing.NATIVE, queue._native is not None)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        native.stdout.split() == [str(bool(compiled))] * 2
    )  # the wheel's compiled modules are the ones used
    version = run("version")
    assert version.returncode == 0 and version.stdout.startswith("slurm-keda "), version.stderr
    assert "--slurmrestd-url" in run("serve", "--help").stdout
    lab = run("lab", "status")  # the lab is no subcommand of the product: argparse refuses it
    assert lab.returncode == 2 and "invalid choice: 'lab'" in lab.stderr


def test_the_wheel_takes_the_product_packages_only() -> None:
    # the lab, the test kit and the tests sit beside the product in the checkout: never packaged
    from tests.unit.test_layers import PRODUCT_LAYERS

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert sorted(p.rstrip("*") for p in find["include"]) == sorted(PRODUCT_LAYERS)
    copied = {shlex.split(ln)[1] for ln in stages()[0] if ln.startswith("COPY ") and "/" not in ln.split()[1]}
    assert set(PRODUCT_LAYERS) <= copied and not copied & {"lab", "testkit", "tests", "benchmarks"}
