"""The conventions every dashboard follows, as builders (grafana-foundation-sdk, Grafana 11.6 schema).

- One data source variable, ``datasource`` (type prometheus), used by every panel and every query.
- ``cluster``, ``job`` and ``instance`` variables from ``label_values`` (multi-value, "All" = ``.*``, which
  also matches series without the label: a single cluster scraped without a ``cluster`` target label), and
  :data:`SELECTOR` in every query of our own series.
- Every panel has a unit and a description (the builders here take both as required arguments).
- Rates and increases use ``$__rate_interval`` (checked by ``tests/unit/test_dashboards.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from grafana_foundation_sdk.builders import common, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models.common import GraphDrawStyle, StackingMode, VisibilityMode
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableHide, VariableRefresh, VariableSort

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
SELECTOR = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
"""Label matchers of every query on slurm-keda's own series."""
CLUSTER = 'cluster=~"$cluster"'
"""Matchers of queries on other exporters' series (KEDA, kube-state-metrics): their job and instance "
"differ."""


class Query(NamedTuple):
    """One PromQL query of a panel and the legend of its series (``{{label}}`` templates)."""

    expr: str
    legend: str = ""


def series(metric: str, matchers: str = "") -> str:
    """``metric{SELECTOR, matchers}``: one of our series, selected by the dashboard's variables."""
    return f"{metric}{{{SELECTOR}{', ' + matchers if matchers else ''}}}"


def data(metric: str, matchers: str = "") -> str:
    """:func:`series` of Slurm data, deduplicated across replicas: every slurm-keda replica (the bridge runs
    two) exports the same cluster, so sums first take one value per series (``max without (instance, pod)``).
    Health series (``slurm_up``, poll durations, the bridge's own) stay per instance."""
    return f"max without (instance, pod) ({series(metric, matchers)})"


def _targets(queries: tuple[Query, ...]) -> list[Builder[Dataquery]]:
    return [
        prometheus.Dataquery()
        .expr(q.expr)
        .legend_format(q.legend or "__auto")
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, q in enumerate(queries)
    ]


def graph(
    title: str,
    description: str,
    unit: str,
    *queries: Query,
    stacked: bool = False,
    width: int = 12,
    bars: bool = False,
) -> timeseries.Panel:
    """A time series panel; ``stacked`` for parts of a whole (nodes by state), ``bars`` for counts per "
    "step."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .span(width)
        .height(8)
        .min(0)
        .fill_opacity(20 if stacked else 5)
        .show_points(VisibilityMode.NEVER)
    )
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL))
    if bars:
        panel = panel.draw_style(GraphDrawStyle.BARS)
    return panel


def single(title: str, description: str, unit: str, query: Query, width: int = 4) -> stat.Panel:
    """A single-value stat panel (the last value), with a sparkline."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .targets(_targets((query,)))
        .span(width)
        .height(4)
    )


def query_variable(name: str, label: str, query: str, *, hide: bool = False) -> db.QueryVariable:
    """A multi-value variable from ``label_values``; "All" is ``.*`` (matches an absent label too)."""
    variable = (
        db.QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    if hide:
        variable = variable.hide(VariableHide.HIDE_VARIABLE)
    return variable


def common_variables() -> list[db.QueryVariable | db.DatasourceVariable]:
    """``datasource``, then ``cluster``, ``job``, ``instance`` (each narrowed by the ones before)."""
    return [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_variable("cluster", "cluster", "label_values(slurm_up, cluster)"),
        query_variable("job", "job", 'label_values(slurm_up{cluster=~"$cluster"}, job)'),
        query_variable(
            "instance", "instance", 'label_values(slurm_up{cluster=~"$cluster", job=~"$job"}, instance)'
        ),
    ]
