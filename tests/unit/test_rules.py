"""Alerting and recording rules: promtool check + promtool test rules, and the mixin conventions."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from dashboards.build import PROMETHEUS_RULE_FILE, RULES_FILE
from dashboards.rules import ALERTS, RECORDS, RUNBOOK
from testkit.paths import ROOT
from testkit.tools import promtool_path

RULES = ROOT / RULES_FILE
CASES = ROOT / "dashboards/rules/tests.yaml"
RUNBOOK_DOC = ROOT / "docs/runbook.md"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool_path(), *args], capture_output=True, text=True, cwd=cwd, check=False)


def test_promtool_checks_the_rule_file_and_the_prometheusrule(tmp_path: Path) -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS) + len(RECORDS)} rules found" in checked.stdout
    # the PrometheusRule of deploy/ carries the very same groups
    spec = yaml.safe_load((ROOT / PROMETHEUS_RULE_FILE).read_text())["spec"]
    assert spec == yaml.safe_load(RULES.read_text())


def test_promtool_unit_tests_pass() -> None:
    ran = promtool("test", "rules", CASES.name, cwd=CASES.parent)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def _cases() -> list[dict[str, Any]]:
    data: dict[str, Any] = yaml.safe_load(CASES.read_text())
    return [case for test in data["tests"] for case in test.get("alert_rule_test", [])]


def test_every_alert_has_a_case_that_fires_and_one_that_must_not() -> None:
    fires = {c["alertname"] for c in _cases() if c["exp_alerts"]}
    silent = {c["alertname"] for c in _cases() if not c["exp_alerts"]}
    names = {a.name for a in ALERTS}
    assert names - fires == set(), "alerts without a firing case"
    assert names - silent == set(), "alerts without a case where they must not fire"
    assert (fires | silent) - names == set(), "cases of alerts that do not exist"


def test_mixin_conventions() -> None:
    headings = set(re.findall(r"^## (\w+)$", RUNBOOK_DOC.read_text(), flags=re.MULTILINE))
    for a in ALERTS:
        rule = a.rule()
        assert re.fullmatch(r"Slurm[A-Z][A-Za-z]+", a.name), a.name
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
        assert summary.endswith(".") and "{{" not in summary and len(summary) < 100, a.name
        assert description.endswith((".", ")", "?")), a.name
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOK}#{a.name.lower()}"
        assert a.name in headings, f"docs/runbook.md has no section ## {a.name}"
        # cluster, job and instance survive every aggregation (a Prometheus may scrape many clusters)
        for by in re.findall(r"\bby \(([^)]*)\)", a.expr):
            assert {"cluster", "job"} <= {x.strip() for x in by.split(",")}, f"{a.name}: by ({by})"
    for r in RECORDS:
        assert re.fullmatch(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+", r.record), r.record
        for by in re.findall(r"\bby \(([^)]*)\)", r.expr):
            assert {"cluster", "job", "instance"} <= {x.strip() for x in by.split(",")}, r.record
    assert {a.name for a in ALERTS} == headings, "runbook sections without an alert"
