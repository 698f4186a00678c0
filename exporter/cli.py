"""``slurm-keda``: the one console script.

Subcommands: ``serve`` (poller + HTTP), ``snapshot`` (one poll, printed), ``lab`` (the local Slurm
lab, see :mod:`exporter.lab.cli`), ``version``. Every setting is a flag generated from
:class:`exporter.settings.Settings` and an environment variable ``SLURM_KEDA_<NAME>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import msgspec

from autoscaler.demand import Target
from autoscaler.report import demand_json, demand_table
from autoscaler.service import DemandService, StaticSource
from autoscaler.targets import MetadataError, load_targets_file, target_from_metadata

from . import __version__
from .client import ClientConfig, SlurmClient, TokenSource
from .errors import ConfigError, SlurmError
from .logs import configure as configure_logging
from .model import Snapshot
from .poller import Poller, PollerConfig
from .settings import Settings, env_name, flag_name, load
from .supervisor import supervise

log = logging.getLogger("slurm_keda")


def _add_settings_flags(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    for name in fields:
        info = Settings.model_fields[name]
        help_ = f"{info.description} [env {env_name(name)}; default {info.default!r}]"
        if info.annotation is bool:
            parser.add_argument(flag_name(name), dest=name, action=argparse.BooleanOptionalAction, help=help_)
        else:
            choices = get_args(info.annotation) if "Literal" in str(info.annotation) else None
            parser.add_argument(flag_name(name), dest=name, default=None, choices=choices or None, help=help_)


POLL_FIELDS = [
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
SERVE_FIELDS = [
    *POLL_FIELDS,
    "poll_interval",
    "full_refresh",
    "up_max_age",
    "listen_address",
    "listen_port",
    "http_max_connections",
    "http_header_timeout",
    "http_idle_timeout",
    "web_config_file",
    "metrics_per_node",
    "metrics_per_user",
    "metrics_per_account",
    "metrics_node_reasons",
    "grpc_listen",
    "grpc_tls_cert_file",
    "grpc_tls_key_file",
    "grpc_tls_client_ca_file",
    "autoscaler_targets_file",
    "demand_stale_after",
    "bridge",
    "bridge_policy_file",
    "bridge_instance",
    "bridge_scheduler_name",
    "bridge_namespace",
    "bridge_job_watch_interval",
    "bridge_pod_groups",
    "bridge_bind_deadline",
    "bridge_leader_election",
    "bridge_lease_name",
    "bridge_identity",
    "bridge_lease_duration",
    "bridge_lease_renew_deadline",
    "bridge_lease_retry_period",
    "kubeconfig",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurm-keda", description="Slurm exporter, KEDA autoscaler and bridge, fed by slurmrestd."
    )
    parser.add_argument("--secrets-dir", type=Path, default=None, help="directory of mounted secrets")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="poll slurmrestd and serve /metrics")
    _add_settings_flags(serve, SERVE_FIELDS)
    snap = sub.add_parser("snapshot", help="poll once and print the normalised snapshot")
    _add_settings_flags(snap, POLL_FIELDS)
    snap.add_argument("--format", choices=["json", "table"], default="table")
    dem = sub.add_parser("demand", help="poll once and print the nodes each scaling target needs")
    _add_settings_flags(dem, [*POLL_FIELDS, "autoscaler_targets_file"])
    dem.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="a target as KEDA trigger metadata, e.g. partition=gpu,nodeset=slurm-gpu,cpusPerNode=64 "
        "(repeatable; default: the targets file, else one target per partition)",
    )
    dem.add_argument("--format", choices=["json", "table"], default="table")
    bridge = sub.add_parser("bridge", help="serve with the bridge on (the same flags as serve)")
    _add_settings_flags(bridge, [f for f in SERVE_FIELDS if f != "bridge"])
    sub.add_parser("lab", help="the local Slurm lab (slurm-keda lab --help)", add_help=False)
    sub.add_parser(
        "dashboards", help="Grafana dashboards and rules: build, check, render (--help)", add_help=False
    )
    sub.add_parser("version", help="print the version")
    return parser


def client_config(s: Settings) -> ClientConfig:
    return ClientConfig(
        base_url=s.slurmrestd_url,
        token=TokenSource(token=s.jwt_value(), token_file=s.token_file),
        user_name=s.user_name,
        timeout=s.request_timeout,
        stream_timeout=s.stream_timeout,
        idle_timeout=s.stream_idle_timeout,
        min_rate=s.min_transfer_rate,
        max_body_bytes=s.max_body_bytes,
        max_record_bytes=s.max_record_bytes,
        retries=s.retries,
        max_concurrency=s.max_concurrency,
        tls_ca_file=s.tls_ca_file,
        tls_insecure=s.tls_insecure,
    )


def poller_config(s: Settings) -> PollerConfig:
    return PollerConfig(
        interval=s.poll_interval,
        api_version=s.api_version,
        use_update_time=s.use_update_time,
        full_refresh=s.full_refresh,
        up_max_age=s.up_max_age,
    )


async def run_snapshot(s: Settings) -> Snapshot:
    """One poll; raises the first endpoint error if no snapshot could be built."""
    async with SlurmClient(client_config(s)) as client:
        poller = Poller(client, poller_config(s))
        snap = await poller.poll_once()
        if snap is None:
            raise SlurmError(poller.status.last_error or "no data")
        failed = {e.name: e.last_error for e in poller.status.endpoints.values() if e.last_error}
        for name, err in failed.items():
            log.warning("%s: %s", name, err)
        return snap


def format_table(snap: Snapshot) -> str:
    """A human summary of a snapshot: header, partitions, nodes, jobs."""
    out = [
        f"cluster {snap.cluster}  Slurm {snap.slurm_version}  API {snap.api_version}  "
        f"taken {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(snap.taken_at))}",
        "",
        f"{'PARTITION':<12} {'STATE':<8} {'NODES':>5} {'CPUS':>6} {'MAXNODES':>8} {'MAXTIME':>8}",
    ]
    for p in snap.partitions:
        maxn = "-" if p.max_nodes_per_job is None else str(p.max_nodes_per_job)
        maxt = "-" if p.max_time_seconds is None else str(p.max_time_seconds)
        out.append(f"{p.name:<12} {p.state:<8} {p.total_nodes:>5} {p.total_cpus:>6} {maxn:>8} {maxt:>8}")
    out += ["", f"{'NODE':<10} {'STATE':<10} {'FLAGS':<22} {'CPU A/T':>8} {'MEM GiB A/T':>12} {'GPU U/T':>7}"]
    for n in snap.nodes:
        gib = 1 << 30
        mem = f"{n.alloc_memory_bytes / gib:.1f}/{n.memory_bytes / gib:.1f}"
        out.append(
            f"{n.name:<10} {n.state:<10} {','.join(n.flags)[:22]:<22} "
            f"{f'{n.alloc_cpus}/{n.cpus}':>8} {mem:>12} {f'{n.gpus_used}/{n.gpus}':>7}"
        )
    out += [
        "",
        f"{'JOBID':<12} {'PARTITION':<10} {'STATE':<10} {'REASON':<20} {'NODES':>5} {'CPUS':>5} "
        f"{'GPUS':>4} {'TASKS':>5} NODELIST",
    ]
    for j in snap.jobs:
        jid = f"{j.array_job_id}_{j.array_task_id}" if j.array_task_id is not None else str(j.job_id)
        if j.array_task_id is None and j.array_task_string:
            jid = f"{j.array_job_id}_[{j.array_task_string}]"
        out.append(
            f"{jid:<12} {','.join(j.partitions):<10} {j.state:<10} {j.reason[:20]:<20} {j.min_nodes:>5} "
            f"{j.cpus:>5} {j.gpus:>4} {j.task_count:>5} {j.nodes}"
        )
    return "\n".join(out)


def targets_from_flags(target_flags: Sequence[str], s: Settings) -> list[Target]:
    """``--target k=v,...`` flags, else the targets file, else [] (= one per partition). An item without
    ``=`` continues the previous value (``featuresPerNode=ib,nvme``).

    Raises :class:`ConfigError` naming the flag and key.
    """
    if target_flags:
        out = []
        for flag in target_flags:
            meta: dict[str, str] = {}
            last: str | None = None
            for item in flag.split(","):
                key, sep, value = item.partition("=")
                if not sep:
                    if last is None:
                        raise ConfigError(f"--target {flag!r}: {item!r} is not KEY=VALUE")
                    meta[last] += "," + item.strip()
                    continue
                last = key.strip()
                meta[last] = value.strip()
            try:
                out.append(target_from_metadata(meta))
            except MetadataError as e:
                raise ConfigError(f"--target {flag!r}: {e}") from None
        return out
    if s.autoscaler_targets_file is not None:
        try:
            return load_targets_file(s.autoscaler_targets_file)
        except ValueError as e:
            raise ConfigError(f"--autoscaler-targets-file: {e}") from None
    return []


def run_demand(s: Settings, target_flags: Sequence[str], fmt: str) -> int:
    """One poll, then the demand of each target as a table or JSON."""
    try:
        targets = targets_from_flags(target_flags, s)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    snap = asyncio.run(run_snapshot(s))
    service = DemandService(StaticSource(snap), targets=targets)
    demands = service.demands_on(snap)
    if not demands and not all(e in snap.fetched_at for e in ("jobs", "nodes")):
        raise SlurmError("no jobs or nodes data from slurmrestd: cannot compute demand")
    if fmt == "json":
        sys.stdout.write(json.dumps(demand_json(demands), indent=2) + "\n")
    else:
        print(demand_table(demands))
    return 0


async def run_serve(s: Settings) -> int:
    """Poll and serve until SIGINT/SIGTERM (with ``--bridge``, place pods too); 2 when the configuration
    (web config, TLS files, targets, addresses, bridge policy, Kubernetes config) is unusable."""
    from .webconfig import WebConfig, load_web_config

    try:
        web_config = load_web_config(s.web_config_file) if s.web_config_file else WebConfig()
        targets = targets_from_flags((), s)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    async with contextlib.AsyncExitStack() as stack:
        try:
            bridge_parts = await _bridge_parts(s, stack)
        except ConfigError as e:
            print(f"slurm-keda: {e}", file=sys.stderr)
            return 2
        return await _serve(s, web_config, targets, bridge_parts)


async def _bridge_parts(s: Settings, stack: contextlib.AsyncExitStack) -> tuple[Any, Any, Any] | None:
    """(Kube, BridgeOptions, LeaseOptions or None) when ``--bridge`` is on; ConfigError for a bad policy
    or Kubernetes config."""
    if not s.bridge:
        return None
    from kubernetes_asyncio import client as kube_client

    from bridge.actions import BridgeOptions
    from bridge.kube import Kube, KubeError, load_configuration
    from bridge.lease import LeaseOptions, default_identity
    from bridge.policy import PolicyError, load_policy

    assert s.bridge_policy_file is not None
    try:
        policy = load_policy(s.bridge_policy_file)
        cfg = await load_configuration(s.kubeconfig)
    except (PolicyError, KubeError) as e:
        raise ConfigError(str(e)) from None
    namespace = s.bridge_namespace or _own_namespace()
    options = BridgeOptions(
        instance=s.bridge_instance,
        policy=policy,
        scheduler_name=s.bridge_scheduler_name,
        own_namespace=namespace,
        job_watch_interval=s.bridge_job_watch_interval,
        pod_groups=s.bridge_pod_groups,
        bind_deadline=s.bridge_bind_deadline,
    )
    lease = None
    if s.bridge_leader_election:
        lease = LeaseOptions(
            name=s.bridge_lease_name or f"slurm-keda-bridge-{s.bridge_instance}",
            namespace=namespace,
            identity=s.bridge_identity or default_identity(),
            duration=s.bridge_lease_duration,
            renew_deadline=s.bridge_lease_renew_deadline,
            retry_period=s.bridge_lease_retry_period,
        )
    api = await stack.enter_async_context(kube_client.ApiClient(cfg))
    return Kube(api, component=s.bridge_scheduler_name), options, lease


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    try:
        return (
            Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
            or "slurm-keda"
        )
    except OSError:
        return "slurm-keda"


async def _serve(
    s: Settings, web_config: Any, targets: list[Target], bridge_parts: tuple[Any, Any, Any] | None
) -> int:
    from autoscaler.grpc_scaler import GrpcTLS, GrpcTLSError, ScalerServer, start_grpc_server
    from autoscaler.metrics import demand_families

    from .listen import ListenLimits, LoopErrorLimiter, fitting_limits, raise_open_files_limit
    from .server import RENDERER, make_app, start

    asyncio.get_running_loop().set_exception_handler(LoopErrorLimiter())
    limits = fitting_limits(
        ListenLimits(s.http_max_connections, s.http_header_timeout, s.http_idle_timeout),
        raise_open_files_limit(),
    )
    async with SlurmClient(client_config(s)) as client:
        poller = Poller(client, poller_config(s))
        demand = DemandService(poller, targets=targets, stale_after=s.demand_stale_after)
        tasks: dict[str, Any] = {"poller": poller.run, "demand": demand.run}  # started by supervise()
        health: list[Any] = [demand.health_families]
        if bridge_parts is not None:
            from bridge.controller import Bridge

            kube, options, lease = bridge_parts
            bridge = Bridge(poller, kube, client, options)
            tasks["bridge"] = bridge.run
            health.append(lambda now: bridge.stats.families())
            if lease is not None:  # only the Lease's holder runs the bridge; every replica serves
                from bridge.lease import LeaderElector

                elector = LeaderElector(kube, lease)
                tasks["bridge"] = lambda: elector.run(bridge.run)
                health.append(lambda now: elector.families())
        app = make_app(
            poller,
            per_node=s.metrics_per_node,
            per_user=s.metrics_per_user,
            per_account=s.metrics_per_account,
            node_reasons=s.metrics_node_reasons,
            web_config=web_config,
            extra_families=lambda snap: demand_families(demand.demands_on(snap), demand.label, demand.source),
            extra_health=lambda now: [f for h in health for f in h(now)],
            status_lines=lambda now: [demand.status_line(now)],
            listen_limits=limits,
        )
        grpc_server: ScalerServer | None = None
        try:
            http_server = await start(app, s.listen_address, s.listen_port)
        except ConfigError as e:  # port in use, certificate or key that won't load
            print(f"slurm-keda: {e}", file=sys.stderr)
            return 2
        try:
            if s.grpc_listen is not None:  # bound before anything claims to serve
                tls = None
                if s.grpc_tls_cert_file is not None and s.grpc_tls_key_file is not None:
                    tls = GrpcTLS(s.grpc_tls_cert_file, s.grpc_tls_key_file, s.grpc_tls_client_ca_file)
                try:
                    grpc_server = await start_grpc_server(demand, s.grpc_listen, tls=tls)
                except (GrpcTLSError, RuntimeError) as e:
                    print(f"slurm-keda: {e}", file=sys.stderr)
                    return 2
                health.append(lambda now: grpc_server.scaler.families() if grpc_server else [])
            log.info(
                "serving on %s (metrics at /metrics%s)",
                ", ".join(http_server.urls),
                ", basic auth" if web_config.basic_auth_users else "",
            )
            tasks["metrics-warm"] = app[RENDERER].warm
            return await supervise({name: run() for name, run in tasks.items()})
        finally:
            if grpc_server is not None:
                await grpc_server.stop()
            await http_server.close()


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["lab"]:
        try:
            from .lab.cli import main as lab_main
        except ImportError:  # the image leaves the development lab out
            print(
                "slurm-keda: the lab is not part of this installation (install from source)", file=sys.stderr
            )
            return 2
        return lab_main(args_list[1:])
    if args_list[:1] == ["dashboards"]:
        from dashboards.cli import main as dashboards_main

        return dashboards_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "version":
        print(f"slurm-keda {__version__}")
        return 0
    given: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None
    }
    if args.command == "bridge":
        given["bridge"] = True
    try:
        settings = load(given, args.secrets_dir)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
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
        if args.command in ("serve", "bridge"):
            return asyncio.run(run_serve(settings))
    except SlurmError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
