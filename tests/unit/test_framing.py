"""Close framing (exporter/framing.py): bytes after a ``Connection: close`` response never reach aiohttp's
parser, however the answers are cut into reads; kept-alive responses pass untouched."""

from __future__ import annotations

import asyncio

import pytest

from exporter.framing import CloseFramedHandler, response_length


def _answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


FIRST = _answer("511 Network Authentication Required", b'{"errors": []}', "Connection: Close")
SECOND = _answer("511 Network Authentication Required", b"Protocol authentication error", "Connection: Close")
KEPT = _answer("200 OK", b'{"pings": []}', "Connection: keep-alive")


@pytest.mark.parametrize(
    ("head", "want"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", (12, False)),
        (b"HTTP/1.1 511 X\r\nConnection: Close\r\nContent-Length: 3", (3, True)),
        (b"HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 0", (0, True)),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99", (0, False)),  # no body whatever it says
        (b"HTTP/1.1 204 No Content", (0, False)),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5", (None, False)),
        (b"HTTP/1.1 200 OK", (None, False)),  # read to EOF
    ],
)
def test_response_length(head: bytes, want: tuple[int | None, bool]) -> None:
    assert response_length(head) == want


def _passed(stream: bytes, piece: int) -> bytes:
    """What the handler passes to aiohttp's parser when ``stream`` arrives ``piece`` bytes at a time."""
    seen: list[bytes] = []

    class Recorder(CloseFramedHandler):
        def __init__(self) -> None:
            super().__init__(loop=asyncio.new_event_loop())

    handler = Recorder()
    try:
        for at in range(0, len(stream), piece):
            chunk = stream[at : at + piece]
            framed = handler._frame(chunk) if handler._following else chunk
            seen.append(framed)
    finally:
        handler._loop.close()
    return b"".join(seen)


@pytest.mark.parametrize("piece", [1, 2, 7, 64, 10_000])
def test_the_second_answer_after_a_close_response_is_dropped(piece: int) -> None:
    assert _passed(FIRST + SECOND, piece) == FIRST
    assert _passed(KEPT + KEPT + FIRST + SECOND, piece) == KEPT + KEPT + FIRST


@pytest.mark.parametrize("piece", [1, 5, 10_000])
def test_a_response_of_unknown_length_passes_the_rest_untouched(piece: int) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"
    assert _passed(chunked + SECOND, piece) == chunked + SECOND  # aiohttp's own rules decide


@pytest.mark.parametrize("drip", [None, (5, 0.0), (200, 0.001)])
async def test_the_client_reads_the_first_of_two_answers_however_they_arrive(
    drip: tuple[int, float] | None,
) -> None:
    from exporter import errors
    from exporter.client import ClientConfig, SlurmClient, TokenSource
    from testkit.loopback import RawServer

    body = (
        b'{"errors": [{"description": "Failure to query nodes", "error": "Protocol authentication error"}]}'
    )
    first = _answer("511 Network Authentication Required", body, "Connection: Close", "Content-Type: a/json")
    async with RawServer(first + SECOND, drip=drip) as url:
        cfg = ClientConfig(base_url=url, token=TokenSource(token="t"), retries=0)
        async with SlurmClient(cfg) as c:
            with pytest.raises(errors.AuthError) as err:
                await c.get("/slurm/v0.0.45/nodes/", endpoint="nodes")
    assert err.value.errors == ("Failure to query nodes: Protocol authentication error",)
