"""``slurm-keda``: the one console script.

Subcommands: ``serve`` (poller, metrics HTTP, demand, optional gRPC scaler and bridge), ``bridge`` (serve
with the bridge on), ``snapshot`` (one poll, printed), ``demand`` (one poll, the nodes each target needs),
``explain`` (one poll, why each target asks for what it does, as the status page says it),
``dashboards`` (build, check, render), ``version``. Every option is a flag generated from
:data:`slurm_keda.settings.OPTIONS` and an environment variable ``SLURM_KEDA_<NAME>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import msgspec

from autoscaler.report import demand_json, demand_table, target_line
from autoscaler.service import DemandService, StaticSource
from dashboards.cli import main as dashboards_main
from exporter import __version__
from exporter.client import SlurmClient
from exporter.errors import ConfigError, SlurmError
from exporter.logs import configure as configure_logging
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.session import SlurmSession

from .configs import client_config, poller_config
from .settings import OPTIONS, Settings, flag_name, load, option
from .table import format_table
from .targets import targets_from_flags

log = logging.getLogger("slurm_keda")

POLL_OPTIONS = [
    "slurmrestd_url",
    "token_file",
    "jwt",
    "user_name",
    "api_version",
    "request_timeout",
    "stream_timeout",
    "stream_idle_timeout",
    "min_transfer_rate",
    "max_body_bytes",
    "max_record_bytes",
    "retries",
    "max_concurrency",
    "tls_ca_file",
    "tls_insecure",
    "use_update_time",
    "log_level",
    "log_format",
]
"""The options of the one-poll commands (``snapshot``, ``demand``)."""
SERVE_OPTIONS = list(OPTIONS)
"""``serve`` takes every option."""


GROUP_TITLES = {
    "slurm": "slurmrestd",
    "poll": "polling",
    "http": "HTTP server (/metrics, /targets, /snapshot, probes, status page)",
    "metrics": "metrics (which series)",
    "grpc": "KEDA external scaler (gRPC)",
    "demand": "autoscaler",
    "bridge": "bridge and its admission webhook",
    "lease": "bridge leader election",
    "log": "logging",
}
"""``--help``'s sections, one per settings group, in this order."""

ENV_NOTE = (
    "Every option is also an environment variable SLURM_KEDA_<OPTION> (--poll-interval: "
    "SLURM_KEDA_POLL_INTERVAL) or a file of that name in --secrets-dir; flags win. Durations are seconds. "
    "Each option in full is in docs/settings.md."
)
_SECONDS = ("timeout", "interval", "refresh", "age", "deadline", "period", "stale_after", "duration")


def _seconds(name: str) -> bool:
    return any(word in name for word in _SECONDS)


def human_default(name: str, value: object) -> str | None:
    """An option's default as ``--help`` shows it: ``30 s``, ``16 GiB``, ``on``/``off``; None: none."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float) and name.endswith("_bytes"):
        size, unit = float(value), "bytes"
        for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
            if size < 1024 or unit == "TiB":
                break
            size /= 1024
        return f"{size:g} {unit}"
    if isinstance(value, int | float) and _seconds(name):
        return f"{value:g} s"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _metavar(name: str, annotation: object) -> str:
    if name.endswith("_bytes"):
        return "BYTES"
    if _seconds(name):
        return "SECONDS"
    text = str(annotation)
    if "Path" in text:
        return "FILE"
    if "int" in text or "float" in text:
        return "N"
    return "TEXT"


def _short(description: str | None) -> str:
    """The first clause of an option's description, up to a ``; `` or `` — `` outside parentheses (the rest
    is in the docs)."""
    text = description or ""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and (text.startswith("; ", i) or text.startswith(" — ", i)):
            return text[:i]
    return text


class _Help(argparse.HelpFormatter):
    """``--help`` up to 110 columns wide (the terminal's width when narrower), flags in a 36-column gutter."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=36, width=min(110, shutil.get_terminal_size().columns))


def _add_option_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """The options ``names`` as flags, in one section per settings group."""
    sections: dict[str, argparse._ArgumentGroup] = {}
    for name in sorted(names, key=lambda n: list(GROUP_TITLES).index(OPTIONS[n][0])):
        group = OPTIONS[name][0]
        if group not in sections:
            sections[group] = parser.add_argument_group(GROUP_TITLES[group])
        info = option(name)
        default = human_default(name, info.default)
        help_ = _short(info.description) + (f" (default {default})" if default else "")
        section = sections[group]
        if info.annotation is bool:
            section.add_argument(
                flag_name(name), dest=name, action=argparse.BooleanOptionalAction, help=help_
            )
        else:
            choices = get_args(info.annotation) if "Literal" in str(info.annotation) else None
            section.add_argument(
                flag_name(name),
                dest=name,
                default=None,
                choices=choices or None,
                metavar=None if choices else _metavar(name, info.annotation),
                help=help_,
            )


def _add_target_flag(parser: argparse.ArgumentParser) -> None:
    """``--target``, the same for ``serve``, ``bridge`` and ``demand``."""
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="a scaling target as KEDA trigger metadata, e.g. partition=gpu,nodeset=slurm-gpu,cpusPerNode=64 "
        "(repeatable; instead of --autoscaler-targets-file; default: one target per partition)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurm-keda", description="Slurm exporter, KEDA autoscaler and bridge, fed by slurmrestd."
    )
    parser.add_argument("--secrets-dir", type=Path, default=None, help="directory of mounted secrets")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, help_, options in (
        ("serve", "poll slurmrestd and serve /metrics", SERVE_OPTIONS),
        (
            "bridge",
            "serve with the bridge on (the same flags as serve)",
            [o for o in SERVE_OPTIONS if o != "bridge"],
        ),
    ):
        usage = "%(prog)s [options] [--target KEY=VALUE,...]"
        serving = sub.add_parser(command, help=help_, usage=usage, epilog=ENV_NOTE, formatter_class=_Help)
        _add_option_flags(serving, options)
        _add_target_flag(serving)
    snap = sub.add_parser("snapshot", help="poll once and print the normalised snapshot")
    _add_option_flags(snap, POLL_OPTIONS)
    snap.add_argument("--format", choices=["json", "table"], default="table")
    dem = sub.add_parser("demand", help="poll once and print the nodes each scaling target needs")
    _add_option_flags(dem, [*POLL_OPTIONS, "autoscaler_targets_file"])
    _add_target_flag(dem)
    dem.add_argument("--format", choices=["json", "table"], default="table")
    exp = sub.add_parser(
        "explain",
        help="poll once and say, in words, why each scaling target (or the one named) asks for what it does",
    )
    _add_option_flags(exp, [*POLL_OPTIONS, "autoscaler_targets_file"])
    _add_target_flag(exp)
    exp.add_argument(
        "name", nargs="?", default=None, help="a target's name or partition (default: every target)"
    )
    sub.add_parser(
        "dashboards", help="Grafana dashboards and rules: build, check, render (--help)", add_help=False
    )
    sub.add_parser("version", help="print the version")
    return parser


async def run_snapshot(s: Settings) -> Snapshot:
    """One poll; raises the first endpoint error if no snapshot could be built."""
    async with SlurmClient(client_config(s.slurm)) as client:
        session = SlurmSession(client, api_version=s.slurm.api_version)
        poller = Poller(session, poller_config(s.poll, fairshare=s.metrics.fairshare))
        snap = await poller.poll_once()
        if snap is None:
            raise SlurmError(poller.status.last_error or "no data")
        failed = {e.name: e.last_error for e in poller.status.endpoints.values() if e.last_error}
        for name, err in failed.items():
            log.warning("%s: %s", name, err)
        return snap


def _one_poll_service(s: Settings, target_flags: Sequence[str]) -> tuple[Snapshot, DemandService]:
    """One poll and a demand service over it, for the targets flags or the targets file name (ConfigError
    naming the flag when they do not parse)."""
    targets = targets_from_flags(target_flags, s.demand.targets_file)
    snap = asyncio.run(run_snapshot(s))
    return snap, DemandService(StaticSource(snap), targets=targets)


def run_demand(s: Settings, target_flags: Sequence[str], fmt: str) -> int:
    """One poll, then the demand of each target as a table or JSON."""
    try:
        snap, service = _one_poll_service(s, target_flags)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    demands = service.demands_on(snap)
    if not demands and not all(e in snap.fetched_at for e in ("jobs", "nodes")):
        raise SlurmError("no jobs or nodes data from slurmrestd: cannot compute demand")
    if fmt == "json":
        sys.stdout.write(json.dumps(demand_json(demands), indent=2) + "\n")
    else:
        print(demand_table(demands))
    return 0


def run_explain(s: Settings, target_flags: Sequence[str], name: str | None) -> int:
    """One poll, then what the status page says of each target (or the one named) and why."""
    try:
        snap, service = _one_poll_service(s, target_flags)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    reports = service.target_reports(snap.taken_at)
    if not reports:
        raise SlurmError("no jobs or nodes data from slurmrestd: cannot compute demand")
    chosen = [r for r in reports if name is None or name in (r.target, r.partition, r.nodeset)]
    if not chosen:
        known = ", ".join(r.target for r in reports)
        print(f"slurm-keda: no target named {name!r} (targets: {known})", file=sys.stderr)
        return 2
    for i, r in enumerate(chosen):
        print(("\n" if i else "") + target_line(r, live=False))
        for line in r.explanation:
            print(f"  {line}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["dashboards"]:
        return dashboards_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "version":
        print(f"slurm-keda {__version__}")
        return 0
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if k in OPTIONS and v is not None}
    if args.command == "bridge":
        given["bridge"] = True
    try:
        settings = load(given, args.secrets_dir)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    configure_logging(settings.log.level, settings.log.format)
    try:
        if args.command == "snapshot":
            snap = asyncio.run(run_snapshot(settings))
            if args.format == "json":
                sys.stdout.write(msgspec.json.format(msgspec.json.encode(snap)).decode() + "\n")
            else:
                print(format_table(snap))
            return 0
        if args.command == "demand":
            return run_demand(settings, args.target, args.format)
        if args.command == "explain":
            return run_explain(settings, args.target, args.name)
        if args.command in ("serve", "bridge"):
            from .serve import run_serve  # the long-running processes' modules (Kubernetes' client ...)

            return asyncio.run(run_serve(settings, args.target))
    except SlurmError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
