"""Typed errors raised while talking to slurmrestd and reading its answers.

Every failure the poller can meet is one of these; each carries a short ``kind``
used as the ``kind`` label of the poll-error counter::

    SlurmError                      base; never raised itself
    ├── TransportError              kind="unreachable": connect/DNS/socket/timeout failures
    │   └── RequestTimeout          kind="timeout": no complete answer within the time limit
    ├── HTTPStatusError             kind="http_<status>": non-2xx status, with slurmrestd's errors[] text
    │   └── AuthError               kind="http_401/403/511": token refused (after one re-read of the token)
    ├── TokenError                  kind="token": the token file is missing, unreadable or holds no token
    ├── ResponseError               a 2xx answer we cannot use
    │   ├── NotJSONError            kind="not_json": body is not JSON (HTML error page, garbage)
    │   ├── TruncatedError          kind="truncated": body ended early (Content-Length short, JSON cut)
    │   ├── TooLargeError           kind="too_large": body, one record or the envelope over its cap
    │   ├── ShapeError              kind="shape": JSON, but not the shape this API version promises
    │   └── SlurmReportedError      kind="slurm_error": 2xx with a non-empty errors[] from slurmctld
    ├── VersionError                kind="version": no API version both sides support / unknown override
    └── ConfigError                 kind="config": bad settings (never raised during polling)
"""

from __future__ import annotations


class SlurmError(Exception):
    """Base class; ``kind`` is a short, stable, label-safe name of the failure class."""

    kind = "error"

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.endpoint = endpoint

    def __str__(self) -> str:
        return f"{self.endpoint}: {self.message}" if self.endpoint else self.message


class TransportError(SlurmError):
    """The request did not reach slurmrestd or no answer came back."""

    kind = "unreachable"


class RequestTimeout(TransportError):
    """No complete answer within the configured time limit."""

    kind = "timeout"


class TokenError(SlurmError):
    """The token file cannot be read or does not hold a token (never quoted: it is a secret)."""

    kind = "token"


class HTTPStatusError(SlurmError):
    """slurmrestd answered with a non-2xx status; ``errors`` holds its ``errors[]`` texts."""

    def __init__(
        self, message: str, *, status: int, errors: tuple[str, ...] = (), endpoint: str = ""
    ) -> None:
        super().__init__(message, endpoint=endpoint)
        self.status = status
        self.errors = errors

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"http_{self.status}"

    @property
    def unknown_job(self) -> bool:
        """slurmrestd's answer about a job id slurmctld does not know (404, or ``Invalid job id``)."""
        return self.status == 404 or any("Invalid job id" in t for t in self.errors)


class AuthError(HTTPStatusError):
    """401/403/511: the token (or user name) was refused, also after re-reading the token once."""


class ResponseError(SlurmError):
    """A 2xx answer that cannot be used."""

    kind = "bad_response"


class NotJSONError(ResponseError):
    """The body is not JSON at all."""

    kind = "not_json"


class TruncatedError(ResponseError):
    """The body ended before the JSON document did."""

    kind = "truncated"


class TooLargeError(ResponseError):
    """The body, one record in it, or the text around the records is larger than its cap."""

    kind = "too_large"


class ShapeError(ResponseError):
    """Valid JSON, but a field is missing or of the wrong type for the API version."""

    kind = "shape"


class SlurmReportedError(ResponseError):
    """slurmrestd answered 2xx but listed errors from slurmctld."""

    kind = "slurm_error"


class VersionError(SlurmError):
    """No supported API version is offered, or the forced version is unknown."""

    kind = "version"


class ConfigError(SlurmError):
    """A setting is invalid; the message names the option."""

    kind = "config"
