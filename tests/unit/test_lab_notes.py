"""What the lab fixtures note of a slow or disturbed setup reaches the end of the run, under xdist too:
the lab fixtures plugin reads it from the reports' ``user_properties`` (which xdist's workers send back)."""

from __future__ import annotations

import pytest

from testkit.lab_fixtures import NOTE, lab_notes


def _report(nodeid: str, when: str, props: list[tuple[str, object]]) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("f.py", 1, nodeid), {}, "passed", None, when, user_properties=props)


def test_each_note_once_with_its_test_other_properties_left_out() -> None:
    slow = (NOTE, "lab_demo: the 26.05 demo took 80.0 s to be ready")
    reports = [
        _report("t.py::a", "setup", [slow]),
        _report("t.py::a", "call", [slow, ("other", "x")]),  # the same item's later reports carry it too
        _report("t.py::b", "call", [("other", "y")]),
        "not a report",
    ]
    assert lab_notes(reports) == ["t.py::a: lab_demo: the 26.05 demo took 80.0 s to be ready"]
    assert lab_notes([_report("t.py::b", "call", [])]) == []
