"""Draw a dashboard's panels to PNG from a Prometheus, without Grafana (matplotlib, ``slurm-keda[render]``).

The pure part — which queries a dashboard runs, with Grafana's variables replaced — is :func:`queries`;
the end-to-end test runs exactly those against a real Prometheus. Grafana's built-ins are replaced as
Grafana does: ``$__rate_interval`` = max(step + scrape interval, 4 × scrape interval), ``$__range`` and
``$__range_s`` = the time range. Dashboard variables are "All" (``.*``) unless given; a panel repeated
by a variable is drawn once per value of that variable found in Prometheus.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD_DIR = Path(__file__).parent
ALL = ".*"


@dataclass(frozen=True)
class Window:
    """The time range drawn: ``end`` epoch seconds, ``range_s`` and ``step_s`` seconds."""

    end: float
    range_s: int = 3600
    step_s: int = 15
    scrape_interval_s: int = 15

    @property
    def rate_interval_s(self) -> int:
        return max(self.step_s + self.scrape_interval_s, 4 * self.scrape_interval_s)


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    """The panel's title, with a repeated panel's variable value in it."""
    kind: str
    """Grafana panel type: ``timeseries`` or ``stat``."""
    unit: str
    expr: str
    """PromQL, every variable replaced."""
    legend: str


def load(name: str) -> dict[str, Any]:
    """A committed dashboard by file stem (``slurm-overview``) or a path to a dashboard JSON file."""
    path = Path(name)
    if not path.is_file():
        path = DASHBOARD_DIR / f"{name}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def interpolate(text: str, variables: dict[str, str], window: Window) -> str:
    """``text`` with ``$name``/``${name}`` of ``variables`` and Grafana's range built-ins replaced."""
    builtins = {
        "__rate_interval": f"{window.rate_interval_s}s",
        "__interval": f"{window.step_s}s",
        "__range_s": str(window.range_s),
        "__range": f"{window.range_s}s",
    }
    values = {**variables, **builtins}

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, text)


def variable_names(dashboard: dict[str, Any]) -> list[str]:
    return [v["name"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]


def _unit(panel: dict[str, Any]) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))


def queries(
    dashboard: dict[str, Any],
    window: Window,
    variables: dict[str, str] | None = None,
    repeat_values: dict[str, list[str]] | None = None,
) -> list[PanelQuery]:
    """Every query of every panel, variables replaced (unset ones are "All"); a panel repeated by a variable
    gives one set per value in ``repeat_values`` (none when it has no values)."""
    chosen = {name: ALL for name in variable_names(dashboard)} | (variables or {})
    out: list[PanelQuery] = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            continue
        repeat = panel.get("repeat")
        copies = (
            [chosen] if not repeat else [chosen | {repeat: v} for v in (repeat_values or {}).get(repeat, [])]
        )
        for values in copies:
            title = interpolate(panel["title"], values, window)
            for target in panel.get("targets", []):
                out.append(
                    PanelQuery(
                        title,
                        panel["type"],
                        _unit(panel),
                        interpolate(target["expr"], values, window),
                        target.get("legendFormat", ""),
                    )
                )
    return out


def repeat_queries(dashboard: dict[str, Any], variables: dict[str, str] | None = None) -> dict[str, str]:
    """For each variable a panel repeats by: an instant query whose results' label ``name`` are its values
    (the variable's ``label_values(selector, name)`` as ``group by (name) (selector)``)."""
    repeated = {p["repeat"] for p in dashboard.get("panels", []) if p.get("repeat")}
    chosen = {name: ALL for name in variable_names(dashboard)} | (variables or {})
    out = {}
    for v in dashboard.get("templating", {}).get("list", []):
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", str(v.get("query", "")))
        if v["name"] in repeated and match:
            selector = interpolate(
                match.group(1), {k: x for k, x in chosen.items() if k != v["name"]}, Window(0)
            )
            out[v["name"]] = f"group by ({match.group(2)}) ({selector})"
    return out


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's ``{{label}}`` legend; ``__auto``/empty gives the series' labels."""
    if template in ("", "__auto"):
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


class Prometheus:
    """The two read calls render needs, over Prometheus' HTTP API (``/api/v1/query``, ``query_range``)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=self.timeout) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused {params.get('query')!r}: {body.get('error')}")
        return body["data"]

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else []
        return result

    def range(self, expr: str, window: Window) -> list[dict[str, Any]]:
        params = {
            "query": expr,
            "start": f"{window.end - window.range_s:.3f}",
            "end": f"{window.end:.3f}",
            "step": str(window.step_s),
        }
        result: list[dict[str, Any]] = self._get("/api/v1/query_range", params)["result"]
        return result


def render(
    dashboard: dict[str, Any],
    prometheus: Prometheus,
    window: Window,
    out: Path,
    variables: dict[str, str] | None = None,
) -> int:
    """Draw every panel of ``dashboard`` into one PNG at ``out``; return the number of panels drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    repeat_values = {
        name: sorted({r["metric"].get(name, "") for r in prometheus.instant(q, window.end)} - {""})
        for name, q in repeat_queries(dashboard, variables).items()
    }
    panels: dict[str, list[PanelQuery]] = {}
    for q in queries(dashboard, window, variables, repeat_values):
        panels.setdefault(q.panel, []).append(q)
    columns = 3
    rows = max(1, math.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.2 * rows), squeeze=False)
    fig.suptitle(str(dashboard.get("title", "")), fontsize=14)
    for ax, (title, panel_queries) in zip(axes.flat, panels.items(), strict=False):
        _draw(ax, title, panel_queries, prometheus, window)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.97))  # room for the dashboard's title
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return len(panels)


UNITS: dict[str, tuple[str, float]] = {
    "percentunit": ("%", 100.0),
    "bytes": ("GiB", 1 / 2**30),
    "s": ("s", 1.0),
    "h": ("h", 1.0),
    "ops": ("per s", 1.0),
    "opm": ("per min", 1.0),
    "bool_yes_no": ("1 = yes", 1.0),
}
"""Grafana unit → (the label drawn, the factor values are multiplied by)."""


def _draw(
    ax: Any, title: str, panel_queries: list[PanelQuery], prometheus: Prometheus, window: Window
) -> None:
    label, factor = UNITS.get(panel_queries[0].unit, ("", 1.0))
    ax.set_title(f"{title} ({label})" if label else title, fontsize=10)
    if panel_queries[0].kind == "stat":
        result = prometheus.instant(panel_queries[0].expr, window.end)
        text = "no data" if not result else f"{float(result[0]['value'][1]) * factor:.4g}"
        ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=28, transform=ax.transAxes)
        ax.axis("off")
        return
    drawn = 0
    for q in panel_queries:
        for series in prometheus.range(q.expr, window):
            times = [float(t) - window.end for t, _ in series["values"]]
            values = [float(v) * factor for _, v in series["values"]]
            name = legend(q.legend, series["metric"]) or "value"
            ax.plot([t / 60 for t in times], values, label=name, linewidth=1.2)
            drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    else:
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel("minutes before now", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
