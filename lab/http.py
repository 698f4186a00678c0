"""Minimal blocking HTTP requests to slurmrestd over TCP or a unix socket (stdlib only)."""

from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()  # not yet listening (lab starting): no unclosed socket left to the GC
            raise
        self.sock = sock


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


def get(url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> Response:
    """GET ``path`` from ``url`` (``http://HOST:PORT`` or ``unix:/path/to.sock``); raw bytes back."""
    return request("GET", url, path, headers, timeout=timeout)


def request(
    method: str,
    url: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 30.0,
) -> Response:
    """``method`` ``path`` on ``url`` with ``body``; raw bytes back."""
    conn: http.client.HTTPConnection
    if url.startswith("unix:"):
        conn = _UnixConnection(url[len("unix:") :], timeout)
    else:
        host = url.removeprefix("http://").rstrip("/")
        conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Response(status=resp.status, body=resp.read())
    finally:
        conn.close()
