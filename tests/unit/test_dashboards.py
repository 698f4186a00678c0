"""The committed dashboards: what the code generates, and grafana dashboard-linter's conventions (the linter
itself cannot be installed here), checked on the JSON users import."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dashboards.build import generated, stale
from dashboards.definitions import DASHBOARDS
from dashboards.render import Window, interpolate, legend, queries, repeat_queries
from exporter.collector import Cardinality, snapshot_families
from testkit.paths import RECORDED_2605, ROOT
from testkit.tools import recorded_snapshot

FILES = sorted((ROOT / "dashboards").glob("*.json"))
COMMON_VARIABLES = ("cluster", "job", "instance")
FOREIGN = ("keda_", "kube_", "scrape_", "up")
"""Series other programs export: KEDA, kube-state-metrics, Prometheus itself."""


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p["targets"]]


def exported_names() -> set[str]:
    """Every metric name slurm-keda defines: the families of a recorded 26.05 snapshot with every option on
    (names built from parts), and the ``"slurm_..."`` literals of the code (health, autoscaler, bridge)."""
    names: set[str] = set()
    for package in ("exporter", "autoscaler", "bridge"):
        for source in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r'"(slurm_[a-z_]+)"', source.read_text()))
    snap = recorded_snapshot(RECORDED_2605, "v0.0.45")
    families = snapshot_families(
        snap, Cardinality(per_user=True, per_account=True, node_reasons=True, fairshare=True)
    )
    return names | {f.name for f in families}


def test_the_committed_files_are_what_the_code_generates() -> None:
    assert stale() == [], "run `make dashboards`"
    assert {f"dashboards/{p.name}" for p in FILES} == {n for n in generated() if n.endswith(".json")}
    assert len(FILES) == len(DASHBOARDS) == 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_conventions(path: Path) -> None:
    d = load(path)
    assert d["uid"].startswith("slurm-keda-") and len(d["uid"]) <= 40
    assert d["editable"] is False
    assert d["schemaVersion"] >= 39
    assert d["title"].startswith("Slurm / ")
    assert [i["pluginId"] for i in d["__inputs"]] == ["prometheus"]
    required = {(r["type"], r["id"]) for r in d["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= required
    assert {("panel", p["type"]) for p in panels(d)} <= required

    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for name in COMMON_VARIABLES:
        v = variables[name]
        assert v["type"] == "query" and v["query"].startswith("label_values("), name
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert v["includeAll"] and v["allValue"] == ".*"  # "All" also matches series without the label

    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels(d):
        where = f"{path.stem}: {p['title']}"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert p["description"].strip(), f"{where}: no description"
        assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert p["targets"], where
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            expr = t["expr"]
            for window in re.findall(r"\b(?:rate|irate|increase)\([^\[]*\[([^\]]+)\]", expr):
                assert window == "$__rate_interval", f"{where}: {expr}"
            for variable in re.findall(r"\$(\w+)", expr):
                assert variable.startswith("__") or variable in variables, f"{where}: ${variable} undefined"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_query_selects_by_the_dashboard_variables_and_names_real_series(path: Path) -> None:
    d = load(path)
    ours = exported_names()
    recorded = set()
    for e in exprs(d):
        for name, matchers in re.findall(r"\b([a-z_]+)\{([^}]*)\}", e):
            if name.startswith(FOREIGN):
                assert 'cluster=~"$cluster"' in matchers, e
                continue
            assert name.startswith("slurm_"), e
            for variable in COMMON_VARIABLES:
                assert f'{variable}=~"${variable}"' in matchers, f"{name} in {e}"
            base = re.sub(r"_(total|bucket|gcount|gsum)$", "", name)  # counters, (gauge) histograms
            assert base in ours or name in ours, f"{name} is not a metric slurm-keda exports"
            recorded.add(name)
    assert recorded, "no slurm series at all"


def test_the_four_dashboards_cover_what_the_issue_asks_for() -> None:
    text = {p.stem: "\n".join(exprs(load(p))) for p in FILES}
    overview, scaling, scheduler, health = (
        text["slurm-overview"],
        text["slurm-autoscaling"],
        text["slurm-scheduler"],
        text["slurm-keda-health"],
    )
    for name in (
        "slurm_nodes{",
        "slurm_nodes_flagged",
        "slurm_partition_allocated_gpus",
        "slurm_jobs_pending{",
    ):
        assert name in overview
    for name in (
        "slurm_autoscaler_target_nodes",
        "slurm_autoscaler_busy_nodes",
        "slurm_autoscaler_desired_nodes",
        "slurm_autoscaler_needed_nodes",
        "slurm_autoscaler_pending_ignored_jobs",
        "slurm_autoscaler_pending_too_large_jobs",
        "keda_scaler_metrics_value",
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_status_desired_replicas",
    ):
        assert name in scaling
    for name in (
        "slurm_backfill_cycle_max_seconds",
        "slurm_scheduler_server_threads",
        "dbd_agent_queue_size",
    ):
        assert name in scheduler
    for name in (
        "slurm_up",
        "slurm_exporter_poll_errors_total",
        "scrape_duration_seconds",
        "slurm_bridge_pods",
    ):
        assert name in health
    for name in (
        "slurm_jobs_ended_total",
        "slurm_job_wait_seconds_bucket",
        "slurm_job_cpu_efficiency_bucket",
        "slurm_jobs_gpu_seconds_allocated_total",
        "slurm_share_fairshare_factor",
    ):
        assert name in text["slurm-accounting"]
    # supply and demand of one target on one panel, repeated per target
    (supply,) = [p for p in panels(load(ROOT / "dashboards/slurm-autoscaling.json")) if p.get("repeat")]
    assert supply["repeat"] == "target" and len(supply["targets"]) == 4


def test_queries_replace_variables_as_grafana_does() -> None:
    d = load(ROOT / "dashboards/slurm-autoscaling.json")
    window = Window(end=1000.0, range_s=1800, step_s=30, scrape_interval_s=15)
    assert window.rate_interval_s == 60  # max(30 + 15, 4 × 15)
    got = queries(d, window, {"cluster": "c1"}, {"target": ["ns-a", "ns-b"]})
    assert all("$" not in q.expr for q in got), [q.expr for q in got if "$" in q.expr]
    repeated = [q for q in got if q.panel.startswith("Nodes of ")]
    assert {q.panel for q in repeated} == {"Nodes of ns-a", "Nodes of ns-b"}
    assert all('cluster=~"c1"' in q.expr for q in repeated)
    assert 'target=~"ns-a"' in repeated[0].expr
    assert "[1800s:]" in "".join(q.expr for q in got) and "* 1800 / 3600" in "".join(q.expr for q in got)
    # no value of the repeat variable: the panel is not drawn at all
    assert not [q for q in queries(d, window) if q.panel.startswith("Nodes of")]
    assert repeat_queries(d) == {
        "target": 'group by (target) (slurm_autoscaler_target_info{cluster=~".*", job=~".*", instance=~".*"})'
    }
    assert interpolate("rate(x[$__rate_interval]) ${job}", {"job": "j"}, window) == "rate(x[60s]) j"
    assert legend("{{target}} {{reason}}", {"target": "t", "reason": "Dependency"}) == "t Dependency"
    assert legend("__auto", {"__name__": "x", "a": "1"}) == "a=1"


def test_sums_of_slurm_data_count_each_series_once_across_replicas() -> None:
    # the bridge runs two replicas, and each exports the same cluster: a plain sum would double it
    per_instance = ("slurm_up", "slurm_autoscaler_stale", "slurm_autoscaler_target_info")
    for stem in ("slurm-overview", "slurm-autoscaling", "slurm-scheduler"):
        for e in exprs(load(ROOT / f"dashboards/{stem}.json")):
            names = set(re.findall(r"\b(slurm_[a-z_]+)\{", e)) - set(per_instance)
            if names and re.search(r"\b(sum|topk)\b", e):
                assert "max without (instance, pod) (" in e, e


def test_check_says_so_when_everything_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    from dashboards.cli import main

    assert main(["check"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "dashboards, rules and the PrometheusRule are what the code generates"
    )
