"""The Prometheus exporter-toolkit ``web-config`` file: TLS and basic auth of ``slurm-keda serve``.

The same YAML that node_exporter & co. take with ``--web.config.file``, so existing setups carry
over::

    tls_server_config:
      cert_file: server.crt            # relative paths are relative to this file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), VerifyClientCertIfGiven
      client_ca_file: ca.crt
      min_version: TLS12               # TLS10, TLS11, TLS12 (default), TLS13; max_version likewise
    http_server_config:
      headers: {X-Frame-Options: deny}  # added to every response
    basic_auth_users:
      alice: $2y$10$...                # bcrypt hashes (htpasswd -nBC 10 alice)

Go-only TLS knobs (``cipher_suites``, ``curve_preferences``, ``client_allowed_sans``) and the
client-auth types Python's ``ssl`` cannot enforce (``RequestClientCert``, ``RequireAnyClientCert``)
are refused rather than silently ignored; ``http2`` and ``prefer_server_cipher_suites`` are
accepted and ignored (both are no-ops here).

:func:`load_web_config` parses and checks the file (pure: reads files, starts nothing);
:func:`ssl_context` builds the server's TLS context; :class:`BasicAuth` checks credentials. Every
problem is a :class:`~exporter.errors.ConfigError` with a one-line message naming the key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from .errors import ConfigError

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
"""exporter-toolkit ``client_auth_type`` → Python verify mode (the two Go types that accept an
unverified client certificate have no Python equivalent)."""

_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
}
_TLS_UNSUPPORTED = {"cipher_suites", "curve_preferences", "client_allowed_sans", "cert", "key", "client_ca"}
_HTTP_KEYS = {"http2", "headers"}
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class TLSConfig:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True)
class WebConfig:
    """A parsed web-config file; the empty WebConfig means plain HTTP without auth."""

    tls: TLSConfig | None = None
    headers: dict[str, str] = field(default_factory=dict)
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    """User → bcrypt hash."""


def _err(path: Path, key: str, msg: str) -> ConfigError:
    return ConfigError(f"web config {path}: {key}: {msg}" if key else f"web config {path}: {msg}")


def _mapping(path: Path, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(path, key, f"must be a mapping, not {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            raise _err(path, key, f"keys must be strings, not {k!r}")
    return value


def _check_keys(path: Path, where: str, got: dict[str, Any], known: set[str]) -> None:
    for k in got:
        if k not in known:
            hint = ", ".join(sorted(known))
            raise _err(path, f"{where}{k}", f"unknown key (known: {hint})")


def _str(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _err(path, key, "must be a non-empty string")
    return value


def _file(path: Path, key: str, value: Any) -> Path:
    p = Path(_str(path, key, value))
    if not p.is_absolute():
        p = path.parent / p
    if not p.is_file():
        raise _err(path, key, f"{p} is not a readable file")
    return p


def _tls(path: Path, raw: dict[str, Any]) -> TLSConfig | None:
    if not raw:
        return None
    for k in raw:
        if k in _TLS_UNSUPPORTED:
            raise _err(path, f"tls_server_config.{k}", "not supported by slurm-keda (Go-only TLS option)")
    _check_keys(path, "tls_server_config.", raw, _TLS_KEYS)
    for k in ("cert_file", "key_file"):
        if k not in raw:
            raise _err(path, f"tls_server_config.{k}", "missing (needed when tls_server_config is given)")
    cert = _file(path, "tls_server_config.cert_file", raw["cert_file"])
    key = _file(path, "tls_server_config.key_file", raw["key_file"])
    auth = raw.get("client_auth_type") or "NoClientCert"
    if auth not in CLIENT_AUTH_TYPES:
        raise _err(
            path,
            "tls_server_config.client_auth_type",
            f"{auth!r} is not supported (use one of {', '.join(CLIENT_AUTH_TYPES)})",
        )
    ca = raw.get("client_ca_file")
    ca_path = _file(path, "tls_server_config.client_ca_file", ca) if ca else None
    if auth != "NoClientCert" and ca_path is None:
        raise _err(path, "tls_server_config.client_ca_file", f"needed with client_auth_type {auth}")
    if auth == "NoClientCert" and ca_path is not None:
        raise _err(
            path,
            "tls_server_config.client_auth_type",
            "client_ca_file is set but client certs are not checked",
        )
    versions: dict[str, str | None] = {}
    for k in ("min_version", "max_version"):
        v = raw.get(k)
        if v is not None and v not in TLS_VERSIONS:
            raise _err(path, f"tls_server_config.{k}", f"{v!r} is not one of {', '.join(TLS_VERSIONS)}")
        versions[k] = v
    lo, hi = versions["min_version"] or "TLS12", versions["max_version"]
    if hi is not None and TLS_VERSIONS[hi] < TLS_VERSIONS[lo]:
        raise _err(path, "tls_server_config.max_version", f"{hi} is below min_version {lo}")
    return TLSConfig(cert, key, auth, ca_path, lo, hi)


def _users(path: Path, raw: dict[str, Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for user, h in raw.items():
        key = f"basic_auth_users.{user}"
        if ":" in user:
            raise _err(path, key, "a user name may not contain ':'")
        if not isinstance(h, str) or not _BCRYPT.fullmatch(h):
            raise _err(path, key, "must be a bcrypt hash ($2y$10$ + 53 characters; htpasswd -nBC 10 USER)")
        out[user] = h.encode()
    return out


def load_web_config(path: Path) -> WebConfig:
    """Parse and check a web-config file. Raises ConfigError (one line, naming the key)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise _err(path, "", f"cannot read: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise _err(path, "", f"not valid YAML{where}: {problem}") from None
    top = _mapping(path, "", raw)
    _check_keys(path, "", top, _TOP_KEYS)
    tls = _tls(path, _mapping(path, "tls_server_config", top.get("tls_server_config")))
    http = _mapping(path, "http_server_config", top.get("http_server_config"))
    _check_keys(path, "http_server_config.", http, _HTTP_KEYS)
    if not isinstance(http.get("http2", True), bool):
        raise _err(path, "http_server_config.http2", "must be true or false")
    headers = _mapping(path, "http_server_config.headers", http.get("headers"))
    for k, v in headers.items():
        if not isinstance(v, str) or "\n" in v or "\r" in v:
            raise _err(path, f"http_server_config.headers.{k}", "must be a one-line string")
    users = _users(path, _mapping(path, "basic_auth_users", top.get("basic_auth_users")))
    return WebConfig(tls=tls, headers=dict(headers), basic_auth_users=users)


def ssl_context(tls: TLSConfig) -> ssl.SSLContext:
    """The server TLS context of ``tls``. Raises ConfigError when a certificate or key won't load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    if tls.max_version is not None:
        ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(
            f"web config: tls_server_config.cert_file/key_file: cannot load {tls.cert_file} with "
            f"{tls.key_file}: {_ssl_reason(e)}"
        ) from None
    if tls.client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(
                f"web config: tls_server_config.client_ca_file: cannot load {tls.client_ca_file}: "
                f"{_ssl_reason(e)}"
            ) from None
    ctx.verify_mode = CLIENT_AUTH_TYPES[tls.client_auth_type]
    return ctx


def _ssl_reason(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or getattr(e, "strerror", None) or e).replace("\n", " ")


_DUMMY_HASH = b"$2b$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
"""Checked for unknown users, so an unknown user takes as long as a wrong password."""


class BasicAuth:
    """HTTP basic auth against bcrypt hashes.

    A bcrypt check costs ~0.1 s, too much for every scrape, so the last successful check per user
    is cached (as exporter-toolkit does) as a SHA-256 of user, password and hash — the password
    itself is never kept — and compared in constant time. bcrypt checks run in a thread so they
    don't stall the event loop; an unknown user costs one bcrypt check too; failures are never
    cached. Passwords are never logged.
    """

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._ok: dict[str, bytes] = {}
        self.checks = 0
        """bcrypt checks run (tests use it to see the cache working)."""

    async def check(self, authorization: str | None) -> str | None:
        """The authenticated user for an ``Authorization`` header value, else None."""
        creds = parse_basic(authorization)
        if creds is None:
            return None
        user, password = creds
        stored = self.users.get(user)
        digest = hashlib.sha256(b"\0".join((user.encode(), password, stored or b""))).digest()
        cached = self._ok.get(user)
        if stored is not None and cached is not None and hmac.compare_digest(cached, digest):
            return user
        self.checks += 1
        ok = await asyncio.to_thread(_checkpw, password, stored or _DUMMY_HASH)
        if not ok or stored is None:
            return None
        self._ok[user] = digest
        return user


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # e.g. a password over bcrypt's 72-byte limit
        return False


def parse_basic(authorization: str | None) -> tuple[str, bytes] | None:
    """``Basic base64(user:password)`` → (user, password bytes); None if absent or malformed."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        return None
