"""``make test`` runs the live tests with ``pytest -n 3 --dist loadgroup``: the tests of one lab share its
jobs and nodes, so they must run one after the other in one worker (the group ``tests/conftest.py`` gives
each test by the lab fixture it uses). A pytest/pytest-xdist pair that ignores the groups
(pytest-dev/pytest-xdist#1386: pytest 9.2's node ids) runs them side by side on one lab; this fails then."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import json, os
from pathlib import Path
import pytest
from tests.conftest import pytest_collection_modifyitems  # the hook make test relies on

@pytest.fixture(scope="session")
def lab_2605():
    return "26.05"

@pytest.fixture(scope="session")
def lab_2411():
    return "24.11"

@pytest.fixture
def where(request):
    yield
    out = Path(os.environ["WHERE_DIR"]) / (request.node.name + ".json")
    out.write_text(json.dumps(os.environ.get("PYTEST_XDIST_WORKER", "")))
"""

TESTS = """
import pytest

@pytest.mark.parametrize("i", range(4))
def test_on_2605(lab_2605, where, i):
    pass

@pytest.mark.parametrize("i", range(4))
def test_on_2411(lab_2411, where, i):
    pass

@pytest.mark.parametrize("i", range(4))
def test_without_a_lab(where, i):
    pass
"""


def test_the_tests_of_one_lab_run_in_one_worker(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_groups.py").write_text(TESTS)
    where = tmp_path / "where"
    where.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHERE_DIR": str(where)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    workers: dict[str, set[str]] = {}
    for file in where.glob("*.json"):
        kind = file.stem.split("[")[0]
        workers.setdefault(kind, set()).add(json.loads(file.read_text()))
    assert set(workers) == {"test_on_2605", "test_on_2411", "test_without_a_lab"}
    assert len(workers["test_on_2605"]) == 1, f"the 26.05 tests ran on {sorted(workers['test_on_2605'])}"
    assert len(workers["test_on_2411"]) == 1, f"the 24.11 tests ran on {sorted(workers['test_on_2411'])}"
    assert all(workers.values()), "not run under xdist"
