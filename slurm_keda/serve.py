"""``slurm-keda serve``: the composition root. Builds one Slurm session, one poller (the snapshot cache
every reader shares), and a runnable per component over them, then hands them to the :class:`Manager`:

    slurmrestd → SlurmSession → Poller → Snapshot → { metrics HTTP, DemandService → gRPC scaler, Bridge }

Runnables, in start order: ``poller``, ``demand``, ``metrics-http`` (the HTTP server, bound at start;
its task pre-renders ``/metrics`` for each new snapshot), ``grpc-scaler`` (bound at start, when
``--grpc-listen``), ``bridge`` (with ``--bridge``; a writer: under leader election it runs only on the
Lease's holder).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client as kube_client
from prometheus_client.core import CounterMetricFamily, Metric

from autoscaler.demand import Target
from autoscaler.grpc_scaler import GrpcTLS, GrpcTLSError, ScalerServer, start_grpc_server
from autoscaler.metrics import demand_families
from autoscaler.service import DemandService
from bridge.actions import BridgeOptions
from bridge.controller import Bridge
from bridge.informer import Informer
from bridge.kube import Kube, KubeError, load_configuration
from bridge.lease import LeaderElector, LeaseOptions, default_identity
from bridge.pods import Namespace
from bridge.policy import PolicyError, load_policy
from bridge.webhook import CertificateFiles, WebhookOptions, WebhookServer
from exporter.client import SlurmClient
from exporter.collector import Cardinality
from exporter.errors import ConfigError
from exporter.follower import ReplicaFollower, read_basic_auth
from exporter.listen import ListenLimits, LoopErrorLimiter, fitting_limits, raise_open_files_limit
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.server import RENDERER, HttpServer, make_app, start
from exporter.session import SlurmSession
from exporter.webconfig import WebConfig, load_web_config

from .configs import client_config, poller_config
from .runtime import Manager, Runnable
from .settings import BridgeSettings, LeaseSettings, Settings
from .targets import targets_from_flags

log = logging.getLogger("slurm_keda")


# -- the runnables -----------------------------------------------------------------------------------


class PollerRunnable(Runnable):
    name = "poller"

    def __init__(self, poller: Poller) -> None:
        self.poller = poller

    async def run(self) -> None:
        await self.poller.run()

    def health_families(self, now: float) -> Iterable[Metric]:
        client = self.poller.client
        requests = CounterMetricFamily(
            "slurm_exporter_slurmrestd_requests",
            "Requests this process sent to slurmrestd (retries included), by endpoint: the poller's and the "
            "bridge's (job/submit, job cancel)",
            labels=["endpoint"],
        )
        for endpoint, n in sorted(client.requests_by_endpoint.items()):
            requests.add_metric([endpoint], float(n))
        yield requests
        received = CounterMetricFamily(
            "slurm_exporter_slurmrestd_received_bytes", "Body bytes this process received from slurmrestd"
        )
        received.add_metric([], float(client.bytes_received))
        yield received


class LeaderListings(Runnable):
    """With leader election: the poller lists the jobs for its period only while this replica leads (the
    standby keeps its jobs from ``/jobs/state`` alone, every ``--standby-poll-interval`` s, and lists in
    full again once it leads)."""

    name = "poller-listings"
    needs_leader = True

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        poller.standby = True

    async def run(self) -> None:
        self.poller.standby = False
        self.poller.poll_soon()  # a standby may have polled less often (--standby-poll-interval)
        try:
            await asyncio.Event().wait()  # until the lead ends (cancelled)
        finally:
            self.poller.standby = True


class FollowerRunnable(Runnable):
    """A standby's copy of the leader's snapshots (:mod:`exporter.follower`): its poller serves the copy
    and polls slurmrestd only while the copy is not fresh."""

    name = "replica-follower"

    def __init__(self, follower: ReplicaFollower) -> None:
        self.follower = follower

    async def run(self) -> None:
        await self.follower.run()

    def health_families(self, now: float) -> Iterable[Metric]:
        return self.follower.families()

    def status_lines(self, now: float) -> Iterable[str]:
        return [self.follower.status_line()]


def replica_follower(poller: Poller, elector: LeaderElector, lease: LeaseSettings) -> ReplicaFollower:
    """The standby side of ``--replica-copy``; ConfigError for an unusable auth or CA file."""
    try:
        auth = read_basic_auth(lease.replica_auth_file) if lease.replica_auth_file else None
        context = ssl.create_default_context(cafile=lease.replica_ca_file) if lease.replica_ca_file else None
    except (OSError, ValueError, ssl.SSLError) as e:
        raise ConfigError(f"--replica-basic-auth-file/--replica-ca-file: {e}") from None
    follower = ReplicaFollower(poller, lambda: elector.leader_url, authorization=auth, ssl_context=context)
    poller.copy_fresh = follower.fresh
    return follower


def advertise_url(s: Settings, web_config: WebConfig) -> str:
    """Where the standbys reach this replica while it leads: ``--replica-advertise-url``, else
    ``http(s)://$POD_IP:<--listen-port>`` (https with the web config's TLS), else "" (none)."""
    if not s.lease.replica_copy:
        return ""
    if s.lease.advertise_url:
        return s.lease.advertise_url.rstrip("/")
    ip = os.environ.get("POD_IP", "").strip()
    if not ip:
        return ""
    host = f"[{ip}]" if ":" in ip else ip
    return f"{'https' if web_config.tls is not None else 'http'}://{host}:{s.http.port}"


class DemandRunnable(Runnable):
    """The demand service: follows the snapshots; its families ride on each snapshot's render."""

    name = "demand"

    def __init__(self, service: DemandService) -> None:
        self.service = service

    async def run(self) -> None:
        await self.service.run()

    def snapshot_families(self, snap: Snapshot) -> Iterable[Metric]:
        service = self.service
        return demand_families(service.demands_on(snap), service.label, service.source)

    def health_families(self, now: float) -> Iterable[Metric]:
        return self.service.health_families(now)

    def status_lines(self, now: float) -> Iterable[str]:
        return self.service.status_lines(now)

    def json_pages(self) -> Mapping[str, Callable[[float], object]]:
        return {"/targets": self.service.target_reports}


class MetricsHttp(Runnable):
    """The HTTP server (``/metrics``, ``/snapshot``, probes, status page): bound at start; its task
    renders ``/metrics`` ahead of the scrapes for each new snapshot."""

    name = "metrics-http"

    def __init__(self, poller: Poller, settings: Settings, web_config: WebConfig, manager: Manager) -> None:
        limits = fitting_limits(
            ListenLimits(
                settings.http.max_connections, settings.http.header_timeout, settings.http.idle_timeout
            ),
            raise_open_files_limit(),
        )
        m = settings.metrics
        self.app = make_app(
            poller,
            cardinality=Cardinality(
                per_node=m.per_node,
                per_user=m.per_user,
                per_account=m.per_account,
                node_reasons=m.node_reasons,
                rpc_top_users=m.rpc_top_users,
                gres_types=m.gres_types,
                fairshare=m.fairshare,
            ),
            web_config=web_config,
            extra_families=manager.snapshot_families,
            extra_health=manager.health_families,
            status_lines=manager.status_lines,
            listen_limits=limits,
            json_pages=manager.json_pages(),  # the pages of the runnables added before this one (demand)
        )
        self.address, self.port = settings.http.address, settings.http.port
        self.server: HttpServer | None = None

    async def start(self) -> None:
        self.server = await start(self.app, self.address, self.port)  # ConfigError: port in use, bad TLS

    async def run(self) -> None:
        await self.app[RENDERER].warm()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()


class GrpcScaler(Runnable):
    """The KEDA external scaler: bound at start, served by gRPC's own threads and its handlers on this
    loop; its task only holds its place until the stop (cancelling gRPC's ``wait_for_termination`` would
    break the server's graceful shutdown)."""

    name = "grpc-scaler"

    def __init__(self, service: DemandService, address: str, tls: GrpcTLS | None) -> None:
        self.service, self.address, self.tls = service, address, tls
        self.server: ScalerServer | None = None

    async def start(self) -> None:
        try:
            self.server = await start_grpc_server(self.service, self.address, tls=self.tls)
        except (GrpcTLSError, RuntimeError) as e:
            raise ConfigError(str(e)) from None

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()

    def health_families(self, now: float) -> Iterable[Metric]:
        return self.server.scaler.families() if self.server is not None else ()


class BridgeRunnable(Runnable):
    """The bridge: a writer, so only the Lease's holder runs it when leader election is on."""

    name = "bridge"
    needs_leader = True

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def run(self) -> None:
        await self.bridge.run()

    def health_families(self, now: float) -> Iterable[Metric]:
        yield from self.bridge.stats.families()
        yield from self.bridge.cache_families()

    def status_lines(self, now: float) -> Iterable[str]:
        return self.bridge.status_lines(now)


class WebhookRunnable(Runnable):
    """The bridge's admission webhook: on every replica (the API server calls whichever the Service
    picks), with its own namespace informer when the policy selects namespaces by label."""

    name = "webhook"

    def __init__(self, server: WebhookServer, namespaces: Informer[Namespace] | None) -> None:
        self.server = server
        self.namespaces = namespaces

    async def start(self) -> None:
        try:
            self.server.bind()
        except OSError as e:
            raise ConfigError(
                f"cannot listen on {self.server.host}:{self.server.port} (--webhook-listen): {e}"
            ) from None

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.server.run(), name="webhook-server")]
        if self.namespaces is not None:
            tasks.append(asyncio.create_task(self.namespaces.run(), name="webhook-namespace-informer"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        """A namespace's labels, None while they are not known (no informer, or not synced)."""
        if self.namespaces is None or not self.namespaces.synced:
            return None
        found = self.namespaces.objects.get(namespace)
        return found.metadata.labels if found is not None else {}

    def health_families(self, now: float) -> Iterable[Metric]:
        return self.server.families()


# -- wiring ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeParts:
    """What ``--bridge`` needs besides the Slurm side: the Kubernetes API and the options."""

    kube: Kube
    options: BridgeOptions
    lease: LeaseOptions | None
    webhook: WebhookServer | None = None


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace() -> str:
    """The bridge's namespace: its service account's, else ``slurm-keda``."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "slurm-keda"
    except OSError:
        return "slurm-keda"


def bridge_options(b: BridgeSettings, policy_file: Path, namespace: str) -> BridgeOptions:
    return BridgeOptions(
        instance=b.instance,
        policy=load_policy(policy_file),
        scheduler_name=b.scheduler_name,
        own_namespace=namespace,
        pod_groups=b.pod_groups,
        bind_deadline=b.bind_deadline,
        shared_nodes=b.shared_nodes,
    )


def lease_options(
    lease: LeaseSettings, instance: str, namespace: str, advertise: str = ""
) -> LeaseOptions | None:
    if not lease.enabled:
        return None
    return LeaseOptions(
        name=lease.name or f"slurm-keda-bridge-{instance}",
        namespace=namespace,
        identity=lease.identity or default_identity(),
        duration=lease.duration,
        renew_deadline=lease.renew_deadline,
        retry_period=lease.retry_period,
        advertise=advertise,
    )


async def bridge_parts(
    s: Settings, stack: contextlib.AsyncExitStack, advertise: str = ""
) -> BridgeParts | None:
    """The bridge's Kubernetes side when ``--bridge`` is on; ConfigError for a bad policy or Kubernetes
    config. ``advertise``: this replica's URL for the standbys (:func:`advertise_url`)."""
    b = s.bridge
    if not b.enabled:
        return None
    assert b.policy_file is not None
    namespace = b.namespace or own_namespace()
    try:
        options = bridge_options(b, b.policy_file, namespace)
        cfg = await load_configuration(b.kubeconfig)
    except (PolicyError, KubeError) as e:
        raise ConfigError(str(e)) from None
    api = await stack.enter_async_context(kube_client.ApiClient(cfg))
    return BridgeParts(
        Kube(api, component=b.scheduler_name),
        options,
        lease_options(s.lease, b.instance, namespace, advertise),
        webhook_server(b, options),
    )


def webhook_server(b: BridgeSettings, options: BridgeOptions) -> WebhookServer | None:
    """The webhook when ``--webhook-listen`` is set; ConfigError when its certificate does not load."""
    if b.webhook_listen is None:
        return None
    assert b.webhook_cert_file is not None and b.webhook_key_file is not None
    try:
        certificates = CertificateFiles(b.webhook_cert_file, b.webhook_key_file)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"--webhook-cert-file/--webhook-key-file: {e}") from None
    host, _, port = b.webhook_listen.rpartition(":")
    decide = WebhookOptions(options.scheduler_name, options.own_namespace, options.policy)
    return WebhookServer(decide, certificates, host.strip("[]"), int(port))


def grpc_tls(s: Settings) -> GrpcTLS | None:
    g = s.grpc
    if g.tls_cert_file is None or g.tls_key_file is None:
        return None
    return GrpcTLS(g.tls_cert_file, g.tls_key_file, g.tls_client_ca_file)


def build(
    s: Settings,
    session: SlurmSession,
    web_config: WebConfig,
    targets: list[Target],
    parts: BridgeParts | None,
) -> Manager:
    """The manager of ``serve``: every runnable over one session and one poller."""
    poller = Poller(session, poller_config(s.poll, fairshare=s.metrics.fairshare))
    demand = DemandService(poller, targets=targets, stale_after=s.demand.stale_after)
    elector = None
    if parts is not None and parts.lease is not None:
        elector = LeaderElector(parts.kube, parts.lease)
    manager = Manager(elector=elector)
    manager.add(PollerRunnable(poller))
    if elector is not None:
        manager.add(LeaderListings(poller))
        if s.lease.replica_copy:
            manager.add(FollowerRunnable(replica_follower(poller, elector, s.lease)))
    manager.add(DemandRunnable(demand))
    manager.add(MetricsHttp(poller, s, web_config, manager))
    if s.grpc.listen is not None:
        manager.add(GrpcScaler(demand, s.grpc.listen, grpc_tls(s)))
    if parts is not None:
        manager.add(BridgeRunnable(Bridge(poller, session, parts.kube, parts.options)))
    if parts is not None and parts.webhook is not None:
        kube = parts.kube
        namespaces: Informer[Namespace] | None = None
        if parts.options.policy.selectors:
            namespaces = Informer(
                "webhook namespaces",
                kube.list_namespaces,
                lambda since: kube.watch_namespaces(since),
                lambda n: n.metadata.name,
            )
        webhook = WebhookRunnable(parts.webhook, namespaces)
        parts.webhook.namespace_labels = webhook.labels
        manager.add(webhook)
    return manager


async def run_serve(s: Settings, target_flags: Sequence[str] = ()) -> int:
    """Poll and serve until SIGINT/SIGTERM (with ``--bridge``, place pods too); 2 when the configuration
    (web config, TLS files, targets, addresses, bridge policy, Kubernetes config) is unusable.
    ``target_flags``: ``--target`` values (else the targets file, else one target per partition)."""
    try:
        web_config = load_web_config(s.http.web_config_file) if s.http.web_config_file else WebConfig()
        targets = targets_from_flags(target_flags, s.demand.targets_file)
    except ConfigError as e:
        print(f"slurm-keda: {e}", file=sys.stderr)
        return 2
    asyncio.get_running_loop().set_exception_handler(LoopErrorLimiter())
    async with contextlib.AsyncExitStack() as stack:
        try:
            parts = await bridge_parts(s, stack, advertise_url(s, web_config))
        except ConfigError as e:
            print(f"slurm-keda: {e}", file=sys.stderr)
            return 2
        client = await stack.enter_async_context(SlurmClient(client_config(s.slurm)))
        session = SlurmSession(client, api_version=s.slurm.api_version)
        try:
            manager = build(s, session, web_config, targets, parts)
            await manager.start()
        except ConfigError as e:  # port in use, certificate or key that won't load, replica auth file
            print(f"slurm-keda: {e}", file=sys.stderr)
            return 2
        http = next(r for r in manager.runnables if isinstance(r, MetricsHttp))
        assert http.server is not None
        log.info(
            "serving on %s (metrics at /metrics%s)",
            ", ".join(http.server.urls),
            ", basic auth" if web_config.basic_auth_users else "",
        )
        return await manager.run()
