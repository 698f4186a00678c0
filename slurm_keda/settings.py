"""Settings, grouped per component; every option is one flag ``--name`` and one variable ``SLURM_KEDA_NAME``.

Each group is a model of its own (:class:`SlurmSettings`, :class:`PollSettings`, ...); a field's alias is
its option name (``slurmrestd_url`` → ``--slurmrestd-url``, ``SLURM_KEDA_SLURMRESTD_URL``), the same
names as before the grouping. Priority (highest first): command-line flag > environment variable > file
in the secrets directory (``--secrets-dir``, default ``/var/run/secrets/slurm-keda``; one file per option,
named like the environment variable in lower case, e.g. ``slurm_keda_jwt``) > default. The JWT may also
come from the plain ``SLURM_JWT`` variable Slurm's own tools use, or, best in Kubernetes, from
``--token-file`` (re-read whenever the mounted Secret changes).

A bad value stops the program at start with one line naming the option (see :func:`load`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from exporter.ctldstats import DEFAULT_RPC_TOP_USERS
from exporter.errors import ConfigError

ENV_PREFIX = "SLURM_KEDA_"
DEFAULT_SECRETS_DIR = Path("/var/run/secrets/slurm-keda")


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _readable(v: Path | None) -> Path | None:
    if v is not None and not v.is_file():
        raise ValueError(f"{v} is not a readable file")
    return v


def _dns_label(v: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v):
        raise ValueError("lower-case letters, digits and '-', at most 63")
    return v


class SlurmSettings(_Group):
    """How to reach slurmrestd: the shared session's client and version. Durations are seconds."""

    url: str = Field(
        "http://127.0.0.1:6820",
        alias="slurmrestd_url",
        description="slurmrestd base URL: http://host:port, https://host:port or unix:/path/to.sock",
    )
    token_file: Path | None = Field(
        None,
        alias="token_file",
        description="file holding the JWT (re-read when it changes); overrides --jwt/SLURM_JWT",
    )
    jwt: SecretStr | None = Field(
        None, alias="jwt", description="the JWT itself (prefer --token-file); else $SLURM_JWT"
    )
    user_name: str | None = Field(
        None,
        alias="user_name",
        description="sent as X-SLURM-USER-NAME (needed with a daemon token, and by Slurm 22.05)",
    )
    api_version: str | None = Field(
        None,
        alias="api_version",
        description="force this slurmrestd API version (e.g. v0.0.42) instead of the highest common",
    )
    request_timeout: float = Field(
        30.0, gt=0.0, alias="request_timeout", description="seconds allowed for one small request"
    )
    stream_timeout: float = Field(
        600.0, gt=0.0, alias="stream_timeout", description="seconds allowed for one /jobs request"
    )
    stream_idle_timeout: float = Field(
        30.0,
        gt=0.0,
        alias="stream_idle_timeout",
        description="seconds a request may go without receiving a byte (a frozen slurmrestd); a /jobs "
        "listing's first byte may take this plus 0.01 s a job (slurmrestd renders it whole first)",
    )
    min_transfer_rate: float = Field(
        1024.0,
        ge=0.0,
        alias="min_transfer_rate",
        description="bytes/s an answer must average per --stream-idle-timeout window (ends a drip-feed)",
    )
    max_body_bytes: int = Field(
        16 << 30,
        ge=1 << 20,
        alias="max_body_bytes",
        description="largest /jobs answer accepted, in bytes (an error above it)",
    )
    max_record_bytes: int = Field(
        16 << 20,
        ge=64 << 10,
        alias="max_record_bytes",
        description="largest single job record, and text around the records, accepted in a /jobs answer",
    )
    retries: int = Field(
        2, ge=0, le=10, alias="retries", description="extra attempts after a retryable failure"
    )
    max_concurrency: int = Field(
        4, ge=1, le=64, alias="max_concurrency", description="requests in flight to slurmrestd at most"
    )
    tls_ca_file: Path | None = Field(
        None, alias="tls_ca_file", description="CA bundle to verify an https slurmrestd"
    )
    tls_insecure: bool = Field(
        False, alias="tls_insecure", description="do not verify slurmrestd's TLS certificate"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://", "unix:")):
            raise ValueError("must start with http://, https:// or unix:")
        if v.startswith("unix:") and not v[len("unix:") :]:
            raise ValueError("unix: needs a socket path, e.g. unix:/run/slurmrestd.sock")
        return v

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"v\d+\.\d+\.\d+", v):
            raise ValueError("must look like v0.0.42")
        return v

    @field_validator("token_file")
    @classmethod
    def _files(cls, v: Path | None) -> Path | None:
        return _readable(v)

    def jwt_value(self) -> str | None:
        """The fixed JWT: ``--jwt``/``SLURM_KEDA_JWT``, else ``$SLURM_JWT``."""
        if self.jwt is not None:
            return self.jwt.get_secret_value()
        return os.environ.get("SLURM_JWT") or None


class PollSettings(_Group):
    """The poller's rhythm."""

    interval: float = Field(
        5.0, ge=1.0, le=3600.0, alias="poll_interval", description="seconds between polls (a floor)"
    )
    standby_interval: float = Field(
        0.0,
        ge=0.0,
        le=3600.0,
        alias="standby_poll_interval",
        description="seconds between a standby's own polls (it has no fresh copy of the leader's); 0: as "
        "--poll-interval",
    )
    full_refresh: float = Field(
        60.0,
        ge=0.0,
        alias="full_refresh",
        description="seconds after which data is re-fetched in full despite update_time",
    )
    use_update_time: bool = Field(
        True, alias="use_update_time", description="send update_time to skip unchanged data"
    )
    incremental_jobs: bool = Field(
        True,
        alias="incremental_jobs",
        description="between full /jobs listings, read /jobs/state and only the jobs whose state moved",
    )
    jobs_full_refresh: float = Field(
        0.0,
        ge=0.0,
        alias="jobs_full_refresh",
        description="seconds between full /jobs listings with --incremental-jobs (at least 10 times the "
        "last listing's duration; 0: none, the sweep keeps reasons); each listing grows slurmrestd 26.05 "
        "by ~135 KB per job",
    )
    jobs_sweep_rate: float = Field(
        20.0,
        ge=0.0,
        le=100_000.0,
        alias="jobs_sweep_rate",
        description="jobs per second read again in turn whatever moved: a pending job's reason-only change "
        "shows within (jobs not ended) / rate seconds; 0: none",
    )
    jobs_recheck_rate: float = Field(
        50.0,
        gt=0.0,
        le=100_000.0,
        alias="jobs_recheck_rate",
        description="jobs per second read again after slurmctld counted a job-changing RPC (hold, release, "
        "scontrol update) — the jobs of the users whose RPCs moved with it first, then newest first — until "
        "as many changed jobs were found",
    )
    accounting: bool = Field(
        True,
        alias="accounting",
        description="read slurmdbd's ended jobs (jobs ended per state, wait and run times, CPU efficiency, "
        "CPU/GPU-seconds) and the QOS and association limits where slurmrestd serves openapi/slurmdbd; the "
        "status page says when it does not",
    )
    accounting_interval: float = Field(
        30.0,
        ge=1.0,
        le=3600.0,
        alias="accounting_interval",
        description="seconds between reads of the jobs that ended since the last one",
    )
    limits_interval: float = Field(
        60.0,
        ge=1.0,
        le=3600.0,
        alias="limits_interval",
        description="with --accounting: seconds between reads of slurmdbd's QOS and association limits",
    )
    shares_interval: float = Field(
        60.0,
        ge=1.0,
        le=3600.0,
        alias="shares_interval",
        description="with --metrics-fairshare: seconds between /shares fetches (Slurm recomputes fair share "
        "every PriorityCalcPeriod, 5 minutes by default)",
    )
    jobs_changes_limit: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        alias="jobs_changes_limit",
        description="jobs read one by one in one poll at most; more changed jobs mean a full listing (or, "
        "within 10 listing durations of the last one, the rest in the next polls); re-reads fit in what "
        "is left",
    )
    jobs_listing_max: int = Field(
        10_000,
        ge=0,
        le=100_000_000,
        alias="jobs_listing_max",
        description="most jobs in Slurm for a full /jobs listing at the first poll or a mass change; beyond, "
        "the jobs are read one by one (--jobs-changes-limit a poll), partial meanwhile (scale-down held, "
        "the bridge waits): slurmrestd keeps ~135 KB a listed job; 0: no limit",
    )
    jobs_states_targeted_min: int = Field(
        20_000,
        ge=0,
        le=100_000_000,
        alias="jobs_states_targeted_min",
        description="jobs in Slurm from which a poll asks /jobs/state only about the records /diag's job "
        "counters say can have moved; 0: always the whole answer",
    )
    jobs_states_full_every: float = Field(
        60.0,
        gt=0.0,
        alias="jobs_states_full_every",
        description="seconds between whole /jobs/state answers at most beyond --jobs-states-targeted-min",
    )
    jobs_states_pending_budget: int = Field(
        1_000,
        ge=0,
        le=1_000_000,
        alias="jobs_states_pending_budget",
        description="pending jobs asked about, highest priority first, when /diag counted a start beyond "
        "--jobs-states-targeted-min",
    )
    up_max_age: float = Field(
        30.0,
        gt=0.0,
        alias="up_max_age",
        description="slurm_up is 0 once jobs, nodes or partitions data is older than this many seconds",
    )


class HttpSettings(_Group):
    """The metrics HTTP server."""

    address: str = Field("0.0.0.0", alias="listen_address", description="address the HTTP server listens on")
    port: int = Field(
        9341, ge=0, le=65535, alias="listen_port", description="port of the HTTP server (/metrics)"
    )
    max_connections: int = Field(
        1024,
        ge=1,
        le=100_000,
        alias="http_max_connections",
        description="HTTP connections open at once at most; more wait in the listen backlog until a "
        "half-open or idle kept-alive connection is closed for them, or a request ends",
    )
    header_timeout: float = Field(
        10.0,
        gt=0.0,
        alias="http_header_timeout",
        description="seconds an HTTP client has to send a request's headers",
    )
    idle_timeout: float = Field(
        60.0,
        gt=0.0,
        alias="http_idle_timeout",
        description="seconds a kept-alive HTTP connection may sit idle between requests",
    )
    web_config_file: Path | None = Field(
        None,
        alias="web_config_file",
        description="Prometheus exporter-toolkit web config YAML: TLS (tls_server_config) and basic auth "
        "(basic_auth_users, bcrypt hashes) of the HTTP server",
    )


class MetricsSettings(_Group):
    """Cardinality switches of ``/metrics``."""

    per_node: bool = Field(
        True, alias="metrics_per_node", description="export one series per node (CPUs, memory, GPUs, state)"
    )
    per_user: bool = Field(
        False, alias="metrics_per_user", description="export job counts and resources per user"
    )
    per_account: bool = Field(
        False, alias="metrics_per_account", description="export job counts and resources per account"
    )
    node_reasons: bool = Field(
        False,
        alias="metrics_node_reasons",
        description="export each node's drain/down reason as an info series",
    )
    rpc_top_users: int = Field(
        DEFAULT_RPC_TOP_USERS,
        alias="metrics_rpc_top_users",
        ge=0,
        le=1000,
        description="with --metrics-per-user: the per-user RPC series kept, the busiest users first",
    )
    fairshare: bool = Field(
        False,
        alias="metrics_fairshare",
        description="fair share per account and user from /shares (what sshare -l says; Slurm 23.11+, "
        "accounting on); fetched every --shares-interval",
    )
    gres_types: bool = Field(
        True,
        alias="metrics_gres_types",
        description="generic resources by type (gpu:a100, MIG profiles); off: summed per name",
    )


def _host_port(v: str | None, example: str) -> str | None:
    if v is None:
        return v
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be host:port, e.g. {example} or [::]:{example.rpartition(':')[2]}")
    return v


class GrpcSettings(_Group):
    """The KEDA external scaler."""

    listen: str | None = Field(
        None,
        alias="grpc_listen",
        description="host:port of the KEDA external scaler gRPC server (e.g. 0.0.0.0:9342); off when unset",
    )
    tls_cert_file: Path | None = Field(
        None,
        alias="grpc_tls_cert_file",
        description="server certificate (PEM) of the gRPC scaler; with --grpc-tls-key-file turns TLS on",
    )
    tls_key_file: Path | None = Field(
        None, alias="grpc_tls_key_file", description="private key (PEM) of --grpc-tls-cert-file"
    )
    tls_client_ca_file: Path | None = Field(
        None,
        alias="grpc_tls_client_ca_file",
        description="CA (PEM) that signed KEDA's client certificate (tlsClientCert): requires mTLS",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return _host_port(v, "0.0.0.0:9342")

    @field_validator("tls_cert_file", "tls_key_file", "tls_client_ca_file")
    @classmethod
    def _files(cls, v: Path | None) -> Path | None:
        return _readable(v)

    @model_validator(mode="after")
    def _tls_pair(self) -> GrpcSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--grpc-tls-cert-file and --grpc-tls-key-file go together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "--grpc-tls-client-ca-file (mTLS) needs --grpc-tls-cert-file/--grpc-tls-key-file"
            )
        return self

    @property
    def port(self) -> int | None:
        """The port of :attr:`listen` (None when the scaler is off)."""
        return None if self.listen is None else int(self.listen.rpartition(":")[2])


class DemandSettings(_Group):
    """The demand model's targets."""

    targets_file: Path | None = Field(
        None,
        alias="autoscaler_targets_file",
        description="YAML list of scaling targets (keys as in trigger metadata) exported as "
        "slurm_autoscaler_* metrics; default: one target per partition",
    )
    stale_after: float = Field(
        60.0,
        gt=0.0,
        alias="demand_stale_after",
        description="seconds after which demand data is flagged stale (its value is held)",
    )

    @field_validator("targets_file")
    @classmethod
    def _files(cls, v: Path | None) -> Path | None:
        return _readable(v)


class BridgeSettings(_Group):
    """The bridge (Slurm places Kubernetes pods)."""

    enabled: bool = Field(
        False, alias="bridge", description="also run the bridge: Slurm places pods that name it as scheduler"
    )
    policy_file: Path | None = Field(
        None,
        alias="bridge_policy_file",
        description="YAML: per namespace, the uid its jobs run as, accounts/QOS/partitions allowed",
    )
    instance: str = Field(
        "default",
        alias="bridge_instance",
        description="this bridge's id in its jobs' admin comments; one per cluster sharing a Slurm",
    )
    scheduler_name: str = Field(
        "slurm-bridge", alias="bridge_scheduler_name", description="spec.schedulerName of the pods it places"
    )
    namespace: str | None = Field(
        None,
        alias="bridge_namespace",
        description="the bridge's own namespace (never placed); default: its service account's",
    )
    bind_deadline: float = Field(
        300.0,
        gt=0.0,
        alias="bridge_bind_deadline",
        description="seconds a running job's pod may keep failing to be bound (retried with backoff) before "
        "the job is cancelled rather than holding its node",
    )
    shared_nodes: bool = Field(
        False,
        alias="bridge_shared_nodes",
        description="nodes shared with the default scheduler: taint Slurm's nodes against it, drain the "
        "Slurm node when Kubernetes cordons it, taint the Kubernetes node while Slurm drains it (needs the "
        "bridge-shared-nodes RBAC component)",
    )
    pod_groups: bool = Field(
        True,
        alias="bridge_pod_groups",
        description="watch scheduler-plugins PodGroups for pod-group gangs",
    )
    kubeconfig: Path | None = Field(
        None,
        alias="kubeconfig",
        description="kubeconfig of the bridge (default: in-cluster, else $KUBECONFIG, ~/.kube/config)",
    )
    webhook_listen: str | None = Field(
        None,
        alias="webhook_listen",
        description="host:port of the bridge's admission webhook (HTTPS: /mutate, /validate; e.g. "
        "0.0.0.0:9443); off when unset",
    )
    webhook_cert_file: Path | None = Field(
        None,
        alias="webhook_cert_file",
        description="the webhook's certificate (PEM), re-read when it changes (a mounted Secret)",
    )
    webhook_key_file: Path | None = Field(
        None, alias="webhook_key_file", description="private key (PEM) of --webhook-cert-file"
    )

    @field_validator("policy_file", "kubeconfig", "webhook_cert_file", "webhook_key_file")
    @classmethod
    def _files(cls, v: Path | None) -> Path | None:
        return _readable(v)

    @field_validator("webhook_listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return _host_port(v, "0.0.0.0:9443")

    @property
    def webhook_port(self) -> int | None:
        return None if self.webhook_listen is None else int(self.webhook_listen.rpartition(":")[2])

    @field_validator("instance", "scheduler_name")
    @classmethod
    def _labels(cls, v: str) -> str:
        return _dns_label(v)

    @model_validator(mode="after")
    def _policy(self) -> BridgeSettings:
        if self.enabled and self.policy_file is None:
            raise ValueError("--bridge needs --bridge-policy-file (who each namespace's jobs run as)")
        if self.webhook_listen is not None:
            if not self.enabled:
                raise ValueError("--webhook-listen is the bridge's webhook: it needs --bridge")
            if self.webhook_cert_file is None or self.webhook_key_file is None:
                raise ValueError(
                    "--webhook-listen is HTTPS only: it needs --webhook-cert-file and --webhook-key-file"
                )
        return self


class LeaseSettings(_Group):
    """The bridge's leader election (a coordination.k8s.io Lease)."""

    enabled: bool = Field(
        True,
        alias="bridge_leader_election",
        description="only the holder of a coordination.k8s.io Lease writes (run several replicas)",
    )
    name: str | None = Field(
        None,
        alias="bridge_lease_name",
        description="the Lease's name, in the bridge's namespace; default: slurm-keda-bridge-<instance>",
    )
    identity: str | None = Field(
        None,
        alias="bridge_identity",
        description="this replica's name in the Lease; default: $POD_NAME (or the host name) and pid",
    )
    duration: float = Field(
        15.0,
        gt=0.0,
        alias="bridge_lease_duration",
        description="seconds a follower waits on an unrenewed Lease before taking it",
    )
    renew_deadline: float = Field(
        10.0,
        gt=0.0,
        alias="bridge_lease_renew_deadline",
        description="seconds the leader may fail to renew before it stops writing",
    )
    retry_period: float = Field(
        2.0,
        gt=0.0,
        alias="bridge_lease_retry_period",
        description="seconds between tries to take or renew the Lease",
    )

    replica_copy: bool = Field(
        True,
        alias="replica_copy",
        description="a standby serves the leader's snapshots, polling slurmrestd only without them",
    )
    advertise_url: str | None = Field(
        None,
        alias="replica_advertise_url",
        description="URL the standbys copy from while this replica leads; default: "
        "http(s)://$POD_IP:<--listen-port> when $POD_IP is set, else none (they poll slurmrestd)",
    )
    replica_auth_file: Path | None = Field(
        None,
        alias="replica_basic_auth_file",
        description="'user:password' for the leader's basic auth (a file)",
    )
    replica_ca_file: Path | None = Field(
        None,
        alias="replica_ca_file",
        description="CA of the leader's HTTPS certificate; default: the system's",
    )

    @field_validator("replica_auth_file", "replica_ca_file")
    @classmethod
    def _files(cls, v: Path | None) -> Path | None:
        return _readable(v)

    @field_validator("advertise_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[^/\s]+/?", v):
            raise ValueError(f"{v!r}: expected http(s)://host:port")
        return v

    @model_validator(mode="after")
    def _durations(self) -> LeaseSettings:
        if not self.retry_period < self.renew_deadline < self.duration:
            raise ValueError(
                "--bridge-lease-retry-period < --bridge-lease-renew-deadline < --bridge-lease-duration"
            )
        return self


class LogSettings(_Group):
    level: Literal["debug", "info", "warning", "error"] = Field(
        "info", alias="log_level", description="log level"
    )
    format: Literal["text", "json"] = Field(
        "text",
        alias="log_format",
        description="log lines as text or as one JSON object each (time, level, logger, message)",
    )


class Settings(BaseModel):
    """Every option of ``slurm-keda``, one group per component."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    poll: PollSettings = Field(default_factory=PollSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    grpc: GrpcSettings = Field(default_factory=GrpcSettings)
    demand: DemandSettings = Field(default_factory=DemandSettings)
    bridge: BridgeSettings = Field(default_factory=BridgeSettings)
    lease: LeaseSettings = Field(default_factory=LeaseSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @model_validator(mode="after")
    def _distinct_ports(self) -> Settings:
        ports = [("--listen-port", self.http.port), ("--grpc-listen", self.grpc.port)]
        ports.append(("--webhook-listen", self.bridge.webhook_port))
        taken: dict[int, str] = {}
        for flag, port in ports:
            if port is None or port == 0:
                continue
            if port in taken:
                raise ValueError(f"{taken[port]} and {flag} both name port {port}: each server needs a port")
            taken[port] = flag
        return self


def _options() -> dict[str, tuple[str, str, FieldInfo]]:
    """Option name → (group, field, its FieldInfo), in declaration order."""
    out: dict[str, tuple[str, str, FieldInfo]] = {}
    for group, info in Settings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, _Group)
        for name, field in model.model_fields.items():
            assert field.alias is not None and field.alias not in out, (group, name)
            out[field.alias] = (group, name, field)
    return out


OPTIONS = _options()
"""Every option: its name (the flag without ``--``, the variable without the prefix) → where it lives."""


def option(name: str) -> FieldInfo:
    """The field of option ``name`` (its default, annotation and description)."""
    return OPTIONS[name][2]


def flag_name(option_name: str) -> str:
    return "--" + option_name.replace("_", "-")


def env_name(option_name: str) -> str:
    return ENV_PREFIX + option_name.upper()


def _option_named(variable: str) -> str | None:
    """The option a variable (or secret file) name ``SLURM_KEDA_<NAME>`` stands for, in any case."""
    upper = variable.upper()
    name = upper[len(ENV_PREFIX) :].lower()
    return name if upper.startswith(ENV_PREFIX) and name in OPTIONS else None


def _environment(env: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(option, value) of every ``SLURM_KEDA_*`` variable naming an option (case-insensitive)."""
    for key, value in env.items():
        if (name := _option_named(key)) is not None:
            yield name, value


def _secrets(folder: Path) -> Iterator[tuple[str, str]]:
    """(option, content) of every file in ``folder`` named like an option's variable (any case)."""
    for path in folder.iterdir():
        if (name := _option_named(path.name)) is not None and path.is_file():
            yield name, path.read_text().strip()


def load(
    cli_values: Mapping[str, Any], secrets_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Settings from explicitly given CLI values (option name → value), else the environment, else the
    secrets directory, else the defaults.

    Raises :class:`ConfigError` with a one-line message naming the option.
    """
    sdir = secrets_dir if secrets_dir is not None else DEFAULT_SECRETS_DIR
    given: dict[str, Any] = {}
    if sdir.is_dir():
        given.update(_secrets(sdir))
    given.update(_environment(os.environ if env is None else env))
    for name, value in cli_values.items():
        if name not in OPTIONS:
            raise ConfigError(f"invalid option {name!r}: not an option")
        given[name] = value
    groups: dict[str, dict[str, Any]] = {}
    for name, value in given.items():
        groups.setdefault(OPTIONS[name][0], {})[name] = value
    try:
        return Settings.model_validate(groups)
    except ValidationError as e:
        first = e.errors()[0]
        msg = first["msg"]
        loc = [str(part) for part in first["loc"]]
        named = next((part for part in reversed(loc[1:]) if part in OPTIONS), None)
        if named is None:  # a rule over several options: the message names them
            raise ConfigError(msg.removeprefix("Value error, ")) from None
        raise ConfigError(f"invalid {flag_name(named)} (env {env_name(named)}): {msg}") from None
