"""``slurm-keda dashboards``: ``build`` (write the generated files), ``check`` (are they current?),
``render`` (a dashboard's panels to PNG from a Prometheus)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slurm-keda dashboards")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "build", help="write dashboards/*.json, the rule file and the PrometheusRule (needs [test])"
    )
    sub.add_parser("check", help="exit 1 if a generated file is not what the code generates")
    render = sub.add_parser("render", help="draw a dashboard's panels to PNG (needs slurm-keda[render])")
    render.add_argument("dashboard", help="file stem (slurm-overview, slurm-autoscaling, ...) or a JSON path")
    render.add_argument("--prometheus-url", required=True)
    render.add_argument("--out", type=Path, required=True, help="PNG file to write")
    render.add_argument("--range", type=int, default=3600, help="seconds before --end to draw (default 3600)")
    render.add_argument("--step", type=int, default=15, help="seconds between points (default 15)")
    render.add_argument("--scrape-interval", type=int, default=15, help="for $__rate_interval (default 15)")
    render.add_argument("--end", type=float, default=None, help="epoch seconds (default now)")
    render.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE", help="a dashboard variable"
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("build", "check"):
        try:
            from .build import stale, write
        except ImportError as e:
            print(f"slurm-keda dashboards: {e} (pip install 'slurm-keda[test]')", file=sys.stderr)
            return 2
        if args.command == "build":
            for path in write():
                print(path)
            return 0
        old = stale()
        for name in old:
            print(f"{name} is not what the code generates: run `make dashboards`", file=sys.stderr)
        if not old:
            print("dashboards, rules and the PrometheusRule are what the code generates")
        return 1 if old else 0
    from .render import Prometheus, Window, load, render

    variables = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"slurm-keda dashboards: --var {item!r} is not NAME=VALUE", file=sys.stderr)
            return 2
        variables[name] = value
    window = Window(args.end or time.time(), args.range, args.step, args.scrape_interval)
    try:
        count = render(load(args.dashboard), Prometheus(args.prometheus_url), window, args.out, variables)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"slurm-keda dashboards render: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}: {count} panels")
    return 0
