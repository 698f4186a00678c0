"""Raw TCP servers on loopback that play a misbehaving slurmrestd (answers written byte for byte).

:class:`LoopbackServer` is the shared part: ``async with server as url`` listens on 127.0.0.1 (a free port),
runs :meth:`~LoopbackServer.serve` per connection, and on exit cancels every connection still being served
(a stalling answer is cut off with the server) and closes it. :class:`RawServer` answers every request with
fixed bytes; :class:`testkit.fault_proxy.FaultProxy` forwards to a real slurmrestd or injects a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class LoopbackServer:
    """Base: subclasses implement :meth:`serve`; reading errors of a vanished client are ignored."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        """The head (request line and headers) of every request received."""
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def serve(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer one request whose head was read; the connection is closed afterwards."""
        raise NotImplementedError

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head)
            await self.serve(head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away: nothing to answer
        finally:  # also when cancelled with the server: no transport left for the garbage collector
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()


class RawServer(LoopbackServer):
    """Answers every request with fixed bytes (and remembers requests)."""

    def __init__(
        self,
        answer: bytes,
        on_request: Callable[[], None] = lambda: None,
        stall: float = 0.0,
        drip: tuple[int, float] | None = None,
        render: float = 0.0,
    ) -> None:
        super().__init__()
        self.answer = answer
        self.render = render
        """Seconds of silence before the first byte (slurmrestd renders a listing whole before sending)."""
        self.on_request = on_request
        self.stall = stall
        """Seconds to keep the connection open, silent, after the answer (a frozen slurmrestd)."""
        self.drip = drip
        """``(bytes, seconds)``: after the headers, write the answer that many bytes at a time,
        pausing that long between writes (a drip-feeding peer)."""

    async def serve(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.on_request()
        if self.render:
            await asyncio.sleep(self.render)
        if self.drip is None:
            writer.write(self.answer)
        else:
            size, pause = self.drip
            body_at = self.answer.find(b"\r\n\r\n") + 4
            writer.write(self.answer[:body_at])
            for at in range(body_at, len(self.answer), size):
                writer.write(self.answer[at : at + size])
                await writer.drain()
                await asyncio.sleep(pause)
        await writer.drain()
        if self.stall:
            await asyncio.sleep(self.stall)
