"""The fake Kubernetes API server (:mod:`testkit.fake_kube`) in a process of its own, for benchmarks: a real
API server does not share the controller's CPU, so a controller measured beside an in-process fake pays for
the fake's work too. The parent talks to it over a pipe: create objects, count and read bindings."""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from testkit.fake_kube import TOKEN, FakeKube, serve_kube

Obj = dict[str, Any]


def _serve(conn: Connection, objects: list[tuple[str, Obj]]) -> None:
    asyncio.run(_answer(conn, objects))


async def _answer(conn: Connection, objects: list[tuple[str, Obj]]) -> None:
    fake = FakeKube(token=TOKEN)
    for plural, doc in objects:
        fake.put(plural, doc)
    done = asyncio.Event()

    def command() -> None:
        cmd, arg = conn.recv()
        if cmd == "put":
            plural, docs = arg
            conn.send([fake.put(plural, doc) for doc in docs])
        elif cmd == "bound":
            conn.send(len(fake.bound_at))
        elif cmd == "bindings":  # "ns/name" → (bound at, the pod's annotations)
            conn.send(
                {
                    f"{ns}/{name}": (
                        at,
                        (fake.get("pods", ns, name) or {}).get("metadata", {}).get("annotations", {}),
                    )
                    for (_, ns, name), at in fake.bound_at.items()
                }
            )
        else:
            done.set()
            conn.send(None)

    async with serve_kube(fake) as url:
        conn.send(url)
        asyncio.get_running_loop().add_reader(conn.fileno(), command)
        await done.wait()


class KubeProcess:
    """``async with KubeProcess(objects) as kube:`` — a fake API server holding ``objects`` ((plural,
    document) pairs) in a child process at ``kube.url`` (token :data:`testkit.fake_kube.TOKEN`)."""

    def __init__(self, objects: list[tuple[str, Obj]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, objects), name="fake-kube", daemon=True)
        self._lock = asyncio.Lock()
        self.url = ""

    async def __aenter__(self) -> KubeProcess:
        self._process.start()
        self.url = await asyncio.to_thread(self._conn.recv)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._call("stop")
        finally:
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()

    async def _call(self, cmd: str, arg: Any = None) -> Any:
        async with self._lock:
            self._conn.send((cmd, arg))
            return await asyncio.to_thread(self._conn.recv)

    async def put(self, plural: str, docs: list[Obj]) -> list[Obj]:
        """Create ``docs`` (all at once, in the server's own loop); the stored objects."""
        return list(await self._call("put", (plural, docs)))

    async def bound(self) -> int:
        """Pods bound so far."""
        return int(await self._call("bound"))

    async def bindings(self) -> dict[str, tuple[float, dict[str, str]]]:
        """``namespace/name`` of each bound pod → (when it was bound, epoch seconds; its annotations)."""
        return dict(await self._call("bindings"))
