"""An HTTP/1.1 proxy on loopback in front of a real slurmrestd that injects one fault at a time.

Every request gets its own upstream connection, closed after one answer, and the client is told
``Connection: close``, so a fault set between two requests applies to the next one whatever the
client's connection pool holds. The request goes upstream as the client sent it: slurmrestd 26.05
answers a ``Connection: close`` request's 304 with the header written after the blank line
(``HTTP/1.1 304 NOT MODIFIED\r\n\r\nConnection: Close\r\n``), which no client can parse. Faults
(:data:`FAULTS`), applied to every request or only to paths containing ``only``:

- ``freeze``: read the request, answer nothing, hold the connection (a SIGSTOPped slurmrestd)
- ``drip``: a 200 with a large Content-Length, then one byte every 50 ms (a drip-feeding peer)
- ``status_503``: a 503 with slurmrestd's ``errors[]`` body
- ``doubled_511``: slurmrestd 26.05's answer to a bad token, written twice on one connection
- ``redirect``: a 302 to another origin (``thief``), which records whether it got a request
- ``garbage``: a 200 whose body is an HTML page
- ``oversize``: a 200 announcing a 20 GiB body
- ``reset``: the connection closed as soon as the request arrives

:meth:`FaultProxy.clear` ends the fault and closes every connection a fault holds open, as a
resumed slurmrestd would finish them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter

from testkit.loopback import LoopbackServer

FAULTS = ("freeze", "drip", "status_503", "doubled_511", "redirect", "garbage", "oversize", "reset")

SLURM_511 = (
    b'{"errors": [{"description": "Failure to query jobs", "error_number": 1007, '
    b'"error": "Protocol authentication error", "source": "_dump_jobs"}], "warnings": []}'
)
_HOP = re.compile(rb"^(connection|keep-alive|proxy-connection):.*\r\n", re.I | re.M)
_LENGTH = re.compile(rb"^content-length:\s*(\d+)\s*\r\n", re.I | re.M)


def _answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Connection: close", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _close_both_ways(head: bytes) -> bytes:
    """A response head with its hop-by-hop headers replaced by ``Connection: close``."""
    first, _, rest = head.partition(b"\r\n")
    return first + b"\r\nConnection: close\r\n" + _HOP.sub(b"", rest)


class FaultProxy(LoopbackServer):
    """``async with FaultProxy("http://127.0.0.1:6820") as url`` — see the module docstring."""

    def __init__(self, upstream: str, thief: str = "http://127.0.0.1:9") -> None:
        super().__init__()
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self._upstream = (host, int(port))
        self.thief = thief
        self.fault: str | None = None
        self.only: str | None = None
        self.applied: Counter[str] = Counter()
        """Requests answered with each fault."""
        self.passed = 0
        """Requests forwarded to slurmrestd."""
        self._cleared = asyncio.Event()

    def set(self, fault: str, only: str | None = None) -> None:
        assert fault in FAULTS, fault
        self.fault, self.only = fault, only
        self._cleared = asyncio.Event()

    def clear(self) -> None:
        self.fault = self.only = None
        self._cleared.set()

    async def serve(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = head.split(b" ", 2)[1].decode("latin-1")
        fault = self.fault if self.only is None or self.only in path else None
        if fault is None:
            self.passed += 1
            await self._forward(head, writer)
        else:
            self.applied[fault] += 1
            await self._inject(fault, path, writer)

    async def _inject(self, fault: str, path: str, writer: asyncio.StreamWriter) -> None:
        cleared = self._cleared
        if fault == "freeze":
            await cleared.wait()
        elif fault == "drip":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9999999\r\n\r\n")
            writer.write(b'{"jobs": [')
            while not cleared.is_set():
                writer.write(b" ")
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(cleared.wait(), 0.05)
        elif fault == "status_503":
            body = b'{"errors": [{"description": "slurmctld busy", "error_number": 1}], "warnings": []}'
            writer.write(_answer("503 Service Unavailable", body, "Content-Type: application/json"))
        elif fault == "doubled_511":
            once = _answer("511 Network Authentication Required", SLURM_511, "Content-Type: application/json")
            writer.write(once + once)
        elif fault == "redirect":
            writer.write(_answer("302 Found", b"", f"Location: {self.thief}{path}"))
        elif fault == "garbage":
            page = b"<html><body>502 Bad Gateway</body></html>"
            writer.write(_answer("200 OK", page, "Content-Type: text/html"))
        elif fault == "oversize":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 21474836480\r\n\r\n{")
            await cleared.wait()
        elif fault == "reset":
            transport = writer.transport
            assert isinstance(transport, asyncio.WriteTransport)
            transport.abort()
            return
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _forward(self, head: bytes, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        try:
            up_writer.write(head)
            await up_writer.drain()
            answer = await up_reader.readuntil(b"\r\n\r\n")
            writer.write(_close_both_ways(answer))
            m = _LENGTH.search(answer)
            status = answer.split(b" ", 2)[1]
            left = 0 if status in (b"204", b"304") else int(m.group(1)) if m else -1
            while left != 0:
                chunk = await up_reader.read(65536 if left < 0 else min(left, 65536))
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()
                if left > 0:
                    left -= len(chunk)
        finally:
            up_writer.close()
            with contextlib.suppress(ConnectionError):
                await up_writer.wait_closed()
