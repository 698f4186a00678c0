"""HTTP/1.1 framing rule aiohttp does not apply: nothing after a ``Connection: close`` response is read.

RFC 9112 §9.6: a client that receives a "close" connection option must close the connection after reading
the response that carried it — whatever the server writes after that response is no response. slurmrestd
26.05 writes a second answer after each of its error answers on the same connection (e.g. a JSON 511
"Failure to query nodes" followed by a plain-text 511 "Protocol authentication error"; both say
``Connection: Close``). aiohttp's parser refuses the whole buffer ("Data after `Connection: close`") and
the first, complete answer is lost. :class:`CloseFramedHandler` sits before aiohttp's parser and drops the
bytes after such a response's body, so the first answer is read as any other.

Only responses whose length is known from their head are followed (``Content-Length``, or no body at all:
1xx, 204, 304); on a response without a known length (chunked, read to EOF) the connection is passed
through untouched from then on. Responses are followed one after another on kept-alive connections.
"""

from __future__ import annotations

import functools
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

MAX_HEAD_BYTES = 64 << 10
"""A head longer than this is not followed (aiohttp's own limits refuse it anyway)."""


def response_length(head: bytes) -> tuple[int | None, bool]:
    """``(body length or None when unknown, Connection: close)`` of a response head (status line and
    header lines, without the blank line)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    length: int | None = None
    close = False
    chunked = False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip().lower()
        if key == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
        elif key == b"connection":
            close = close or b"close" in {v.strip().lower() for v in value.split(b",")}
        elif key == b"transfer-encoding":
            chunked = True
    if status < 200 or status in (204, 304):
        return 0, close
    if chunked:
        return None, close
    return length, close


class CloseFramedHandler(ResponseHandler):
    """aiohttp's protocol with :func:`response_length` framing in front: bytes after a response that
    carried ``Connection: close`` are dropped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = b""
        self._body_left = 0
        """Bytes of the current response's body still to come (0 while in a head)."""
        self._closing = False
        """The current response carries ``Connection: close``: nothing after its body is passed on."""
        self._following = True
        """False once a response's length is unknown: the rest is passed through as it comes."""

    def data_received(self, data: bytes) -> None:
        if self._following and data:
            data = self._frame(data)
            if not data:
                return
        super().data_received(data)

    def _frame(self, data: bytes) -> bytes:
        keep = 0  # bytes of `data` followed so far
        while keep < len(data):
            if self._body_left:
                step = min(self._body_left, len(data) - keep)
                self._body_left -= step
                keep += step
                continue
            if self._closing:  # the close response is complete: the rest is no response
                return data[:keep]
            buffered = self._head + data[keep:]
            end = buffered.find(b"\r\n\r\n")
            if end < 0:
                if len(buffered) > MAX_HEAD_BYTES:
                    self._following = False
                    return data
                self._head = buffered
                return data
            used = end + 4 - len(self._head)  # bytes of `data` that finish this head
            length, close = response_length(buffered[:end])
            self._head = b""
            keep += used
            if length is None:
                self._following = False
                return data
            self._body_left = length
            self._closing = close
        return data


def framed(connector: aiohttp.BaseConnector) -> aiohttp.BaseConnector:
    """``connector`` making :class:`CloseFramedHandler` connections (aiohttp builds each connection's
    protocol with the connector's ``_factory``; checked here so an aiohttp without it fails at start)."""
    if not hasattr(connector, "_factory"):
        raise RuntimeError("aiohttp's connector has no protocol factory to frame responses with")
    connector._factory = functools.partial(CloseFramedHandler, loop=connector._loop)  # type: ignore[assignment]
    return connector
