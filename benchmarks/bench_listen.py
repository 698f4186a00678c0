"""Listener benchmark: ``slurm-keda serve`` with its open-files limit at 300 while 1,000 half-open connections
are held, against a fake slurmrestd on loopback.

Prints how many of 20 scrapes were answered during the flood and how long they took, the connection counters
``serve`` exports, and how many log lines the flood caused — against a baseline scrape of the same ``serve``
before the flood, measured in the same run. (Before issue 9: scrapes timed out and asyncio logged 523,379
``accept()`` errors in 20 s.)

Run: ``.venv/bin/python benchmarks/bench_listen.py`` (needs ``prlimit``, util-linux)
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.fake_slurmrestd import FakeSlurmrestd, serve  # noqa: E402
from testkit.paths import RECORDED  # noqa: E402
from testkit.scale_harness import free_port  # noqa: E402

SCRIPT = Path(sys.executable).parent / "slurm-keda"


async def scrape(port: int) -> tuple[bool, float]:
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return data.split(b" ", 2)[1] == b"200", time.perf_counter() - t0
    except (OSError, TimeoutError, IndexError):
        return False, time.perf_counter() - t0


async def main() -> None:
    async with serve(FakeSlurmrestd(RECORDED / "slurm-26.05.5" / "v0.0.45")) as url:
        port = free_port()
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "serve.log"
            with log.open("wb") as out:
                proc = await asyncio.create_subprocess_exec(
                    "prlimit",
                    "--nofile=300:300",
                    str(SCRIPT),
                    "serve",
                    *("--slurmrestd-url", url, "--listen-address", "127.0.0.1", "--listen-port", str(port)),
                    *("--grpc-listen", f"127.0.0.1:{free_port()}"),
                    stderr=out,
                    env=dict(os.environ, SLURM_JWT="good-token"),
                )
            try:
                for _ in range(100):
                    if (await scrape(port))[0]:
                        break
                    await asyncio.sleep(0.1)
                base = [await scrape(port) for _ in range(5)]
                lines_before = log.read_text().count("\n")
                held = []
                for _ in range(1000):
                    try:
                        held.append(socket.create_connection(("127.0.0.1", port)))
                    except OSError:
                        break
                during = [await scrape(port) for _ in range(20)]
                for s in held:
                    s.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
                body = (await reader.read()).decode()
                writer.close()
            finally:
                proc.terminate()
                await proc.wait()
            flood_lines = log.read_text().count("\n") - lines_before
    ok = sum(1 for good, _ in during if good)
    print(f"baseline: {sum(g for g, _ in base)}/5 scrapes, best {min(t for _, t in base) * 1e3:.1f} ms")
    print(
        f"{len(held)} half-open connections held; during the flood {ok}/20 scrapes answered, "
        f"slowest {max(t for _, t in during) * 1e3:.1f} ms"
    )
    for line in body.splitlines():
        if line.startswith("slurm_exporter_http_") and not line.startswith("#"):
            print(" ", line)
    print(f"log lines during the flood: {flood_lines}")


if __name__ == "__main__":
    asyncio.run(main())
