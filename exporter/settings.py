"""Settings: every option is a CLI flag ``--name`` and an environment variable ``SLURM_KEDA_NAME``.

Priority (highest first): command-line flag > environment variable > file in the secrets
directory (``--secrets-dir``, default ``/var/run/secrets/slurm-keda``; one file per option, named
like the environment variable in lower case, e.g. ``slurm_keda_jwt``) > default.
The JWT may also come from the plain ``SLURM_JWT`` variable Slurm's own tools use, or, best in
Kubernetes, from ``--token-file`` (re-read whenever the mounted Secret changes).

A bad value stops the program at start with one line naming the option (see :func:`load`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError

ENV_PREFIX = "SLURM_KEDA_"
DEFAULT_SECRETS_DIR = Path("/var/run/secrets/slurm-keda")


class Settings(BaseSettings):
    """All options of ``slurm-keda serve`` / ``snapshot``. Durations are seconds."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    slurmrestd_url: str = Field(
        "http://127.0.0.1:6820",
        description="slurmrestd base URL: http://host:port, https://host:port or unix:/path/to.sock",
    )
    token_file: Path | None = Field(
        None, description="file holding the JWT (re-read when it changes); overrides --jwt/SLURM_JWT"
    )
    jwt: SecretStr | None = Field(None, description="the JWT itself (prefer --token-file); else $SLURM_JWT")
    user_name: str | None = Field(
        None, description="sent as X-SLURM-USER-NAME (needed with a daemon token, and by Slurm 22.05)"
    )
    api_version: str | None = Field(
        None, description="force this slurmrestd API version (e.g. v0.0.42) instead of the highest common"
    )
    poll_interval: float = Field(5.0, ge=1.0, le=3600.0, description="seconds between polls (a floor)")
    full_refresh: float = Field(
        60.0, ge=0.0, description="seconds after which data is re-fetched in full despite update_time"
    )
    use_update_time: bool = Field(True, description="send update_time to skip unchanged data")
    request_timeout: float = Field(30.0, gt=0.0, description="seconds allowed for one small request")
    stream_timeout: float = Field(600.0, gt=0.0, description="seconds allowed for one /jobs request")
    stream_idle_timeout: float = Field(
        30.0, gt=0.0, description="seconds a request may go without receiving a byte (a frozen slurmrestd)"
    )
    min_transfer_rate: float = Field(
        1024.0,
        ge=0.0,
        description="bytes/s an answer must average per --stream-idle-timeout window (ends a drip-feed)",
    )
    max_body_bytes: int = Field(
        16 << 30, ge=1 << 20, description="largest /jobs answer accepted, in bytes (an error above it)"
    )
    max_record_bytes: int = Field(
        16 << 20,
        ge=64 << 10,
        description="largest single job record, and text around the records, accepted in a /jobs answer",
    )
    up_max_age: float = Field(
        30.0,
        gt=0.0,
        description="slurm_up is 0 once jobs, nodes or partitions data is older than this many seconds",
    )
    retries: int = Field(2, ge=0, le=10, description="extra attempts after a retryable failure")
    max_concurrency: int = Field(4, ge=1, le=64, description="requests in flight to slurmrestd at most")
    tls_ca_file: Path | None = Field(None, description="CA bundle to verify an https slurmrestd")
    tls_insecure: bool = Field(False, description="do not verify slurmrestd's TLS certificate")
    listen_address: str = Field("0.0.0.0", description="address the HTTP server listens on")
    listen_port: int = Field(9341, ge=0, le=65535, description="port of the HTTP server (/metrics)")
    http_max_connections: int = Field(
        1024,
        ge=1,
        le=100_000,
        description="HTTP connections open at once at most; more wait in the listen backlog until a "
        "half-open or idle kept-alive connection is closed for them, or a request ends",
    )
    http_header_timeout: float = Field(
        10.0, gt=0.0, description="seconds an HTTP client has to send a request's headers"
    )
    http_idle_timeout: float = Field(
        60.0, gt=0.0, description="seconds a kept-alive HTTP connection may sit idle between requests"
    )
    web_config_file: Path | None = Field(
        None,
        description="Prometheus exporter-toolkit web config YAML: TLS (tls_server_config) and basic auth "
        "(basic_auth_users, bcrypt hashes) of the HTTP server",
    )
    grpc_listen: str | None = Field(
        None,
        description="host:port of the KEDA external scaler gRPC server (e.g. 0.0.0.0:9342); off when unset",
    )
    grpc_tls_cert_file: Path | None = Field(
        None, description="server certificate (PEM) of the gRPC scaler; with --grpc-tls-key-file turns TLS on"
    )
    grpc_tls_key_file: Path | None = Field(None, description="private key (PEM) of --grpc-tls-cert-file")
    grpc_tls_client_ca_file: Path | None = Field(
        None,
        description="CA (PEM) that signed KEDA's client certificate (tlsClientCert): requires mTLS",
    )
    autoscaler_targets_file: Path | None = Field(
        None,
        description="YAML list of scaling targets (keys as in trigger metadata) exported as "
        "slurm_autoscaler_* metrics; default: one target per partition",
    )
    demand_stale_after: float = Field(
        60.0, gt=0.0, description="seconds after which demand data is flagged stale (its value is held)"
    )
    bridge: bool = Field(
        False, description="also run the bridge: Slurm places pods that name it as scheduler"
    )
    bridge_policy_file: Path | None = Field(
        None,
        description="YAML: per namespace, the uid its jobs run as, accounts/QOS/partitions allowed",
    )
    bridge_instance: str = Field(
        "default",
        description="this bridge's id in its jobs' admin comments; one per cluster sharing a Slurm",
    )
    bridge_scheduler_name: str = Field("slurm-bridge", description="spec.schedulerName of the pods it places")
    bridge_namespace: str | None = Field(
        None,
        description="the bridge's own namespace (never placed); default: its service account's",
    )
    bridge_job_watch_interval: float = Field(
        1.0,
        ge=0.0,
        description="seconds between /jobs/state looks at the bridge's awaited jobs between polls (0: off)",
    )
    bridge_bind_deadline: float = Field(
        300.0,
        gt=0.0,
        description="seconds a running job's pod may keep failing to be bound (retried with backoff) before "
        "the job is cancelled rather than holding its node",
    )
    bridge_pod_groups: bool = Field(
        True,
        description="watch scheduler-plugins PodGroups for pod-group gangs (when the API has no PodGroup "
        "CRD this is said once and checked again every 5 minutes)",
    )
    bridge_leader_election: bool = Field(
        True, description="only the holder of a coordination.k8s.io Lease writes (run several replicas)"
    )
    bridge_lease_name: str | None = Field(
        None, description="the Lease's name, in the bridge's namespace; default: slurm-keda-bridge-<instance>"
    )
    bridge_identity: str | None = Field(
        None, description="this replica's name in the Lease; default: $POD_NAME (or the host name) and pid"
    )
    bridge_lease_duration: float = Field(
        15.0, gt=0.0, description="seconds a follower waits on an unrenewed Lease before taking it"
    )
    bridge_lease_renew_deadline: float = Field(
        10.0, gt=0.0, description="seconds the leader may fail to renew before it stops writing"
    )
    bridge_lease_retry_period: float = Field(
        2.0, gt=0.0, description="seconds between tries to take or renew the Lease"
    )
    kubeconfig: Path | None = Field(
        None,
        description="kubeconfig of the bridge (default: in-cluster, else $KUBECONFIG, ~/.kube/config)",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as text or as one JSON object each (time, level, logger, message)"
    )
    metrics_per_node: bool = Field(True, description="export one series per node (CPUs, memory, GPUs, state)")
    metrics_per_user: bool = Field(False, description="export job counts and resources per user")
    metrics_per_account: bool = Field(False, description="export job counts and resources per account")
    metrics_node_reasons: bool = Field(
        False, description="export each node's drain/down reason as an info series"
    )

    @field_validator("slurmrestd_url")
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

    @field_validator("grpc_listen")
    @classmethod
    def _grpc_listen(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be host:port, e.g. 0.0.0.0:9342 or [::]:9342")
        return v

    @field_validator(
        "token_file",
        "grpc_tls_cert_file",
        "grpc_tls_key_file",
        "grpc_tls_client_ca_file",
        "autoscaler_targets_file",
        "bridge_policy_file",
        "kubeconfig",
    )
    @classmethod
    def _token_file(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"{v} is not a readable file")
        return v

    @field_validator("bridge_instance", "bridge_scheduler_name")
    @classmethod
    def _dns_label(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v):
            raise ValueError("lower-case letters, digits and '-', at most 63")
        return v

    @model_validator(mode="after")
    def _bridge_policy(self) -> Settings:
        if self.bridge and self.bridge_policy_file is None:
            raise ValueError("--bridge needs --bridge-policy-file (who each namespace's jobs run as)")
        return self

    @model_validator(mode="after")
    def _lease_durations(self) -> Settings:
        if not self.bridge_lease_retry_period < self.bridge_lease_renew_deadline < self.bridge_lease_duration:
            raise ValueError(
                "--bridge-lease-retry-period < --bridge-lease-renew-deadline < --bridge-lease-duration"
            )
        return self

    @model_validator(mode="after")
    def _distinct_ports(self) -> Settings:
        if self.grpc_listen is not None:
            port = int(self.grpc_listen.rpartition(":")[2])
            if port != 0 and port == self.listen_port:
                raise ValueError(
                    f"--grpc-listen and --listen-port both name port {port}: the gRPC scaler and the HTTP "
                    "server need a port each"
                )
        return self

    @model_validator(mode="after")
    def _grpc_tls_pair(self) -> Settings:
        if (self.grpc_tls_cert_file is None) != (self.grpc_tls_key_file is None):
            raise ValueError("--grpc-tls-cert-file and --grpc-tls-key-file go together")
        if self.grpc_tls_client_ca_file is not None and self.grpc_tls_cert_file is None:
            raise ValueError(
                "--grpc-tls-client-ca-file (mTLS) needs --grpc-tls-cert-file/--grpc-tls-key-file"
            )
        return self

    def jwt_value(self) -> str | None:
        """The fixed JWT: ``--jwt``/``SLURM_KEDA_JWT``, else ``$SLURM_JWT``."""
        if self.jwt is not None:
            return self.jwt.get_secret_value()
        return os.environ.get("SLURM_JWT") or None


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load(cli_values: dict[str, Any], secrets_dir: Path | None = None) -> Settings:
    """Build Settings from explicitly given CLI values (others from env/secrets/defaults).

    Raises :class:`ConfigError` with a one-line message naming the option.
    """
    sdir = secrets_dir if secrets_dir is not None else DEFAULT_SECRETS_DIR
    try:
        return Settings(
            _secrets_dir=str(sdir) if sdir.is_dir() else None,  # type: ignore[call-arg]
            **cli_values,
        )
    except ValidationError as e:
        first = e.errors()[0]
        msg = first["msg"]
        if not first["loc"]:  # a rule over several options: the message names them
            raise ConfigError(msg.removeprefix("Value error, ")) from None
        loc = str(first["loc"][0])
        if loc in Settings.model_fields:
            raise ConfigError(f"invalid {flag_name(loc)} (env {env_name(loc)}): {msg}") from None
        raise ConfigError(f"invalid option {loc!r}: {msg}") from None
