"""Fixtures of every test: the real Slurm lab plugin (:mod:`testkit.lab_fixtures`), the root logger kept as
pytest set it, and a guard against leaked tasks."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings

from exporter.logs import JsonFormatter, TextFormatter
from testkit.budget import examples

pytest_plugins = ["testkit.lab_fixtures"]

settings.register_profile(
    "slurm-keda", derandomize=True, database=None, deadline=None, max_examples=examples(100)
)
settings.load_profile("slurm-keda")
"""Every property test derandomised (the same examples on every run: CI is deterministic), no example
database, no per-example deadline (CI machines are slow), hypothesis' 100 examples scaled by the run's
budget (:mod:`testkit.budget`); a test's own settings add to these."""


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it.

    Tasks already ending (a library's own, e.g. grpc.aio's per-call tasks right after a server stop)
    get one second to finish; a task still running after that is a leak.
    """
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    if left:
        await asyncio.wait(left, timeout=1.0)
        left = [t for t in left if not t.done()]
    if left:
        for t in left:
            t.cancel()
        pytest.fail(f"test left tasks running: {[t.get_name() for t in left]}")


@pytest.fixture(autouse=True)
def root_logger_kept() -> Iterator[None]:
    """Undo what a command run in the test's process (``cli.main``) did to the root logger: its stderr
    handler (``exporter.logs.configure``) and level stay behind otherwise, and a later test in the same
    worker sees INFO lines it never asked for — which test comes later depends on xdist's scheduling."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if isinstance(handler.formatter, TextFormatter | JsonFormatter):
            root.removeHandler(handler)
    root.setLevel(level)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    reason = str(reason).removeprefix("Skipped: ")
    if "shared" in reason:  # ../shared/schemas, slurm-openapi, slurm-payloads: one cause
        return "../shared is absent (the real CRDs, slurmrestd OpenAPI documents and payloads they check)"
    return reason


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each reason tests were skipped for, once, with how many (``make test`` lists no skip one by one)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)]
    if not skipped:
        return
    reasons = Counter(_skip_reason(r) for r in skipped)
    terminalreporter.section("skipped, by reason")
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"{n:4d} × {reason}")


LAB_FIXTURES = {
    "lab_2605": "26.05",
    "lab_2411": "24.11",
    "lab_host": "host",
    "lab_2605_oracle": "26.05-oracle",
}


def lab_group(item: pytest.Item) -> str | None:
    """The lab a test uses (``lab-26.05``, ``lab-24.11``, ``lab-host``), None when it uses none: with
    ``pytest -n N --dist loadgroup`` the tests of one lab run one after the other in one worker (they share
    its jobs and nodes), the tests of different labs and those without a lab side by side."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    for key in ("flavor", "lab"):
        if isinstance(params.get(key), str):
            return f"lab-{params[key]}"
    names = getattr(item, "fixturenames", ())
    for fixture, flavor in LAB_FIXTURES.items():
        if fixture in names:
            return f"lab-{flavor}"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own: it names each test by its group (``id@group``)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = lab_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
