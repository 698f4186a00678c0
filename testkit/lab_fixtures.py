"""pytest plugin: real Slurm labs (see lab/). Load with ``pytest_plugins = ["testkit.lab_fixtures"]``.

Fixtures (session-scoped unless noted):

- ``lab_2411``, ``lab_2605``, ``lab_host`` — a running :class:`~lab.Lab` (brought up once, left
  running). ``lab_host`` is this machine's own Slurm (22.05 on Debian 12, with the lab's own munged).
  ``lab_2605_oracle``: a second 26.05 lab (its own chroot) for the tests that restart theirs with a
  slurm.conf of their own.
- ``lab`` — parametrised over ``LAB_FLAVORS``: 24.11, 26.05, and ``host`` only when the host packages
  (``HOST_PACKAGES``: slurmctld slurmd slurmrestd slurm-client munge slurm-wlm-jwt-plugin) are installed.
- ``lab_endpoint`` — :class:`LabEndpoint` (base URL, unix URL, token file, API versions) of ``lab``.
- ``lab_demo`` (function scope) — ``lab`` with the demo workload submitted and settled; yields
  ``(lab, {demo key: job id})``.

A lab that cannot start skips the test with the reason, or fails it when ``SLURM_KEDA_REQUIRE_LAB=1``
(CI). Without the host packages ``lab_host`` always skips (it is not a failure that a machine lacks them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab import Lab, LabError
from lab.demo import demo_age, fresh_demo, wait_demo_steady
from lab.flavors import HOST_PACKAGES, host_packages_missing

HOST_MISSING = tuple(host_packages_missing())
"""Host packages not installed (empty: the ``host`` flavor is part of ``LAB_FLAVORS``)."""
HOST_INSTALLED = not HOST_MISSING
LAB_FLAVORS: tuple[str, ...] = ("24.11", "26.05", *(("host",) if HOST_INSTALLED else ()))
DEMO_TIMEOUT = 90.0
SLOW_DEMO = 5.0
"""Seconds of ``lab_demo`` setup beyond which a line in the run's output says what it waited for."""
_failures: dict[str, str] = {}
_unsettled: dict[str, str] = {}
"""Labs whose demo did not settle even after a restart of the lab, and why: later demo tests fail at once."""
NOTE = "lab_setup"
"""The ``user_properties`` name of what :func:`lab_demo` says of a slow or disturbed setup (printed at the
end of the run, :func:`pytest_terminal_summary`: pytest-xdist's workers send them back with their
reports)."""


def require_lab() -> bool:
    return os.environ.get("SLURM_KEDA_REQUIRE_LAB") == "1"


def unavailable(reason: str) -> None:
    """Skip, or fail under ``SLURM_KEDA_REQUIRE_LAB=1``."""
    if require_lab():
        pytest.fail(f"Slurm lab required but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab unavailable: {reason}")


def start_lab(flavor: str) -> Lab:
    """Bring a lab up fresh — restarted when it runs: a test session never finds what an earlier one left
    (jobs, dynamic nodes, reservations, partition settings) — or skip/fail with the reason if it cannot
    start. Once per session and lab (the session fixtures); remembers failures."""
    if flavor in _failures:
        unavailable(_failures[flavor])
    try:
        lab = Lab(flavor)
        if lab.is_running():
            lab.restart()
        else:
            lab.up()
    except LabError as err:
        _failures[flavor] = str(err)
        unavailable(str(err))
    return lab


@dataclass(frozen=True)
class LabEndpoint:
    """How a client reaches a lab's slurmrestd."""

    flavor: str
    slurm_release: str
    base_url: str
    unix_url: str
    token_file: Path
    api_versions: tuple[str, ...]

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    @property
    def newest_version(self) -> str:
        return self.api_versions[-1]


@pytest.fixture(scope="session")
def lab_2411() -> Iterator[Lab]:
    yield start_lab("24.11")


@pytest.fixture(scope="session")
def lab_2605() -> Iterator[Lab]:
    yield start_lab("26.05")


@pytest.fixture(scope="session")
def lab_2605_oracle() -> Iterator[Lab]:
    yield start_lab("26.05-oracle")


@pytest.fixture(scope="session")
def lab_host() -> Iterator[Lab]:
    if not HOST_INSTALLED:
        pytest.skip(
            f"host Slurm packages not installed ({', '.join(HOST_MISSING)}); "
            f"apt-get install -y {' '.join(HOST_PACKAGES)}"
        )
    yield start_lab("host")


@pytest.fixture(scope="session", params=LAB_FLAVORS, ids=[f"slurm{f}" for f in LAB_FLAVORS])
def lab(request: pytest.FixtureRequest) -> Lab:
    name = "lab_" + str(request.param).replace(".", "")  # lab_2411, lab_2605, lab_host
    result: Lab = request.getfixturevalue(name)
    if not result.is_running():  # a test may have taken it down
        result.up()
    return result


@pytest.fixture(scope="session")
def lab_endpoint(lab: Lab) -> LabEndpoint:
    return endpoint_of(lab)


def endpoint_of(lab: Lab) -> LabEndpoint:
    lab.up()
    return LabEndpoint(
        flavor=lab.flavor.name,
        slurm_release=lab.release(),
        base_url=lab.url,
        unix_url=lab.unix_url,
        token_file=lab.token_file,
        api_versions=tuple(lab.api_versions()),
    )


@pytest.fixture()
def lab_demo(lab: Lab, request: pytest.FixtureRequest) -> tuple[Lab, dict[str, int]]:
    """The lab with the demo workload in its steady state (submitted once per lab run; a lab whose demo
    is older than :data:`lab.demo.DEMO_MAX_AGE` is restarted clean first)."""
    t0 = time.monotonic()
    running = lab.is_running()
    age = demo_age(lab)
    lab.up()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if lab.flavor.name in _unsettled:
        pytest.fail(_unsettled[lab.flavor.name], pytrace=False)
    jobs = fresh_demo(lab)
    try:
        first = wait_demo_steady(lab, jobs, timeout=DEMO_TIMEOUT)
    except LabError as err:
        # an earlier test left the demo disturbed (a demo job gone, a node it needed taken): a clean lab
        # and the demo again, once, rather than every later demo test waiting out DEMO_TIMEOUT in turn
        _note(request, reporter, f"lab_demo: {err}; the {lab.flavor.name} lab restarted, the demo again")
        try:
            lab.restart()
            jobs = fresh_demo(lab)
            first = wait_demo_steady(lab, jobs, timeout=DEMO_TIMEOUT)
        except LabError as again:
            _unsettled[lab.flavor.name] = f"{again} (after a restart of the lab, too)"
            pytest.fail(_unsettled[lab.flavor.name], pytrace=False)
    took = time.monotonic() - t0
    if took > SLOW_DEMO:  # in the run's output (a warning would be an error)
        how = "" if running else "; the lab was not running"
        _note(
            request,
            reporter,
            f"lab_demo: the {lab.flavor.name} demo took {took:.1f} s to be ready (its demo was "
            f"{age:.0f} s old{how}); at the first look: {'; '.join(first) or 'settled'}",
        )
    return lab, jobs


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the lab fixtures noted of slow or disturbed setups (:data:`NOTE`), once each."""
    notes = lab_notes(r for reports in terminalreporter.stats.values() for r in reports)
    if notes:
        terminalreporter.section("lab setups")
        for line in notes:
            terminalreporter.write_line(line)


def lab_notes(reports: Iterable[object]) -> list[str]:
    """The :data:`NOTE` properties among ``reports`` (each once, in order), with the test that met them."""
    out: dict[str, None] = {}
    for report in reports:
        if isinstance(report, pytest.TestReport):
            for name, value in report.user_properties:
                if name == NOTE:
                    out.setdefault(f"{report.nodeid}: {value}")
    return list(out)


def _note(request: pytest.FixtureRequest, reporter: object, line: str) -> None:
    """Say ``line`` now (a run without xdist) and at the end of the run (:data:`NOTE`)."""
    request.node.user_properties.append((NOTE, line))
    if reporter is not None and not hasattr(request.config, "workerinput"):  # an xdist worker's is unseen
        reporter.write_line(line)  # type: ignore[attr-defined]


__all__ = [
    "HOST_INSTALLED",
    "LAB_FLAVORS",
    "NOTE",
    "LabEndpoint",
    "endpoint_of",
    "lab_notes",
    "start_lab",
    "wait_demo_steady",
]
