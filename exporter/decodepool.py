"""Decode streamed ``/jobs`` bodies on every core, without blocking the event loop.

msgspec holds the GIL while it parses, so threads cannot share the work. :class:`DecodePool`
keeps a few worker processes; the event loop only cuts the stream (:class:`ArrayCutter`, mostly a
``bytes.rfind``), sends each batch of job objects to a worker, and turns the worker's compact
msgpack answer back into :class:`~exporter.model.Job` structs (≈ 2 µs per job, ~15× cheaper than
parsing the JSON). Batches are decoded in parallel and collected in order.

An unproven fast cut that fails to decode in a worker (see :class:`ArrayCutter`) makes the pool
drop the later in-flight batches and cut their bytes again by scan — results stay exact.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor

import msgspec

from .errors import NotJSONError, TruncatedError
from .jsonsplit import ArrayCutter, Cut, StreamingArrayDecoder
from .model import Job

_ENCODER = msgspec.msgpack.Encoder()
_JOBS = msgspec.msgpack.Decoder(list[Job])


def _decode_in_worker(version: str, array: bytes) -> bytes:
    """Worker side: JSON batch → msgpack of model Jobs (errors travel back pickled)."""
    from . import versions

    return _ENCODER.encode(versions.adapter_for(version).job_array(array))


def _warm_up() -> None:
    from . import versions  # noqa: F401  (import once at worker start, not on the first batch)


class DecodePool:
    """Worker processes decoding ``/jobs`` batches; ``workers=0`` decodes in the calling thread."""

    def __init__(self, workers: int | None = None, *, max_in_flight: int | None = None) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        self._max_in_flight = max_in_flight or max(2, 2 * self.workers)
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("forkserver"),
                initializer=_warm_up,
            )
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    async def decode_jobs(
        self,
        version: str,
        chunks: AsyncIterator[bytes],
        *,
        min_batch_bytes: int = 2 << 20,
    ) -> tuple[list[Job], bytes, ArrayCutter]:
        """Decode a streamed /jobs body; return the jobs, the envelope bytes and the cutter."""
        from . import versions

        jobs: list[Job] = []
        if self.workers <= 0:
            here = StreamingArrayDecoder(
                b"jobs", versions.adapter_for(version).job_array, min_batch_bytes=min_batch_bytes
            )
            async for chunk in chunks:
                got = here.feed(chunk)
                if got:
                    jobs += got
                    await asyncio.sleep(0)  # let scrapes run between batches
            envelope, rest = here.finish()
            return jobs + rest, envelope, here.cutter

        versions.adapter_for(version)  # unknown version: fail here, not in a worker
        cutter = ArrayCutter(b"jobs", min_batch_bytes=min_batch_bytes)

        loop = asyncio.get_running_loop()
        pool = self._pool()
        in_flight: deque[tuple[Cut, asyncio.Future[bytes]]] = deque()

        def submit(cuts: list[Cut]) -> None:
            for cut in cuts:
                in_flight.append((cut, loop.run_in_executor(pool, _decode_in_worker, version, cut.array)))

        async def collect_first() -> None:
            cut, fut = in_flight.popleft()
            try:
                packed = await fut
            except (NotJSONError, TruncatedError):
                if cut.proven:
                    raise
                raws = [cut.raw]
                for later, later_fut in in_flight:
                    later_fut.cancel()
                    raws.append(later.raw)
                in_flight.clear()
                submit(cutter.rewind(b"".join(raws)))
                return
            jobs.extend(_JOBS.decode(packed))

        try:
            async for chunk in chunks:
                submit(cutter.feed(chunk))
                while in_flight and (len(in_flight) > self._max_in_flight or in_flight[0][1].done()):
                    await collect_first()
            while in_flight:  # the remainder is only well-defined once every fast cut is proven
                await collect_first()
            envelope, cuts = cutter.finish()
            submit(cuts)
            while in_flight:
                await collect_first()
        finally:
            for _, fut in in_flight:
                fut.cancel()
        return jobs, envelope, cutter
