"""/metrics latency of the real server while a poll is decoding, and slurm-keda vs slurmctld's own metrics.

Part A — synthetic. A 100k-job / 5k-node snapshot (``bench_collector.synthetic``) is served by the real
app (:func:`exporter.server.make_app` + :func:`exporter.server.start`, 127.0.0.1, port 0) in THIS process,
with the metrics-warm task running as in ``slurm-keda serve``. A background task on the same event loop
keeps "decoding a poll" the way the poller does: a synthetic v0.0.45 ``/jobs`` body (recorded 26.05 job
records cloned, slurmrestd's indented layout) is fed in 256 KiB chunks through
:class:`exporter.jsonsplit.StreamingArrayDecoder` with ``adapter_for("v0.0.45").job_array``, yielding to
the loop after every chunk and every decoded batch, poll after poll. Scrapers run in ANOTHER process (this
file with ``--scrape``): 1 scraper and 50 concurrent scrapers (each its own keep-alive connection), text
0.0.4 and gzip. Printed per case:

* ``client`` p50/p99: send → last body byte as the scraper process sees it (client-side time INCLUDED:
  request write, the scraper's own event loop, reading the body; gzip bodies are not decompressed);
* ``handler`` p50/p99: the /metrics handler inside the server (render/join + health block; EXCLUDES HTTP
  parsing, waiting for the busy loop, and writing the body);
* over the same window: how late a 10 ms ticker ran, the longest stretches the decode held the loop, the
  decode rate (proof it ran), and full (generation-2) garbage collections, which stop the loop too.

Also the first scrape right after a new snapshot is published (``POST /bench/publish`` swaps in a fresh
copy; the scrape waits for the warm render).

Part B — the 26.05 lab (``python -m lab up --slurm 26.05``, root; skipped otherwise). N individual held
jobs are submitted with a loop of ``sbatch -H`` inside the lab (named ``bench-serve``, half in partition
cpu, half in gpu; an array would be one pending record). Then, interleaved over a few rounds, median of:
slurmctld's ``/metrics/jobs`` and ``/metrics/partitions`` (``MetricsType=metrics/openmetrics``), and the
cached ``/metrics`` of a ``slurm-keda serve`` subprocess polling that lab's slurmrestd; printed with the
ratio ours / (jobs + partitions). For context: the serve's own poll duration of /jobs and an in-process
fetch + streamed decode of /jobs. The jobs are cancelled afterwards (``scancel -n bench-serve``); the lab
is left up. Cancelled jobs stay in slurmctld for MinJobAge (300 s) and count against MaxJobCount (10000).

Run (root, 26.05 lab up): ``.venv/bin/python benchmarks/bench_serve.py``
Smoke test: ``.venv/bin/python benchmarks/bench_serve.py --jobs 2000 --nodes 100 --decode-jobs 2000 \
--scrapes 20 --per-scraper 2 --lab-jobs 100``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import re
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from exporter import server
from exporter.jsonsplit import StreamingArrayDecoder
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.pollstate import EndpointState, PollerConfig, PollStatus
from exporter.versions import adapter_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import synthetic

ROOT = Path(__file__).resolve().parents[1]
RECORDED_JOBS = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5" / "v0.0.45" / "jobs.json"
API = "v0.0.45"
CHUNK = 256 << 10
JOB_NAME = "bench-serve"
VARIANTS: dict[str, dict[str, str]] = {
    "text": {"Accept-Encoding": "identity"},
    "gzip": {"Accept-Encoding": "gzip"},
}


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def p50_p99(xs: list[float]) -> str:
    return f"p50 {pct(xs, 50):7.2f} ms  p99 {pct(xs, 99):7.2f} ms  max {max(xs):7.2f} ms"


# -- the decode load -------------------------------------------------------------------------------


class JobsBody:
    """A big v0.0.45 /jobs body made of the recorded 26.05 job records with new ids, built chunk by
    chunk (never held whole)."""

    SENTINEL = 987_654_321

    def __init__(self, n_jobs: int) -> None:
        doc = json.loads(RECORDED_JOBS.read_bytes())
        self.n_jobs = n_jobs
        self.templates: list[tuple[bytes, bytes]] = []
        for job in doc["jobs"]:
            text = json.dumps({**job, "job_id": self.SENTINEL}, indent=2).replace("\n", "\n    ")
            head, sep, tail = ("    " + text).partition(f'"job_id": {self.SENTINEL}')
            assert sep, "job_id not found in a recorded job"
            self.templates.append((f'{head}"job_id": '.encode(), tail.encode()))
        rest = {k: v for k, v in doc.items() if k != "jobs"}
        self.head = b'{\n  "jobs": [\n'
        self.tail = b"\n  ],\n" + json.dumps(rest, indent=2)[1:].encode()

    def chunks(self) -> Iterator[bytes]:
        buf = bytearray(self.head)
        for i in range(self.n_jobs):
            head, tail = self.templates[i % len(self.templates)]
            buf += head + str(1000 + i).encode() + tail
            if i + 1 < self.n_jobs:
                buf += b",\n"
            if len(buf) >= CHUNK:
                yield bytes(buf)
                buf.clear()
        buf += self.tail
        yield bytes(buf)


@dataclass
class LoadStats:
    polls: int = 0
    jobs: int = 0
    decode_seconds: float = 0.0
    lateness: list[float] = field(default_factory=list)
    held_ms: list[float] = field(default_factory=list)
    """How long the decode task held the loop between two yields (a chunk fed, its batches decoded)."""
    handler_ms: list[float] = field(default_factory=list)
    gc_ms: list[float] = field(default_factory=list)
    """Durations of full (generation 2) garbage collections: they hold the GIL, so the loop too."""
    first_ms: list[float] = field(default_factory=list)
    """Handler time of the first /metrics after each publish."""
    after_publish: bool = False


async def decode_forever(body: JobsBody, stats: LoadStats) -> None:
    """The poller's /jobs path (see Poller._fetch_jobs), poll after poll."""
    adapter = adapter_for(API)
    resumed = time.perf_counter()

    async def pause() -> None:
        """Yield to the loop, noting how long the decode task held it since it last got it back."""
        nonlocal resumed
        stats.held_ms.append((time.perf_counter() - resumed) * 1e3)
        await asyncio.sleep(0)
        resumed = time.perf_counter()

    async def arriving() -> AsyncIterator[bytes]:
        for chunk in body.chunks():
            yield chunk
            await pause()  # the network read returns to the loop

    while True:
        t0 = time.perf_counter()
        decoder = StreamingArrayDecoder(b"jobs", adapter.job_array)
        jobs: list[Any] = []
        async for chunk in arriving():
            got = decoder.feed(chunk)
            if got:
                jobs.extend(got)
                stats.jobs += len(got)
                await pause()  # as the poller: let scrapes run between batches
        envelope, rest = decoder.finish()
        jobs.extend(rest)
        stats.jobs += len(rest)
        adapter.envelope(envelope, "jobs")
        assert len(jobs) == body.n_jobs, (len(jobs), body.n_jobs)
        stats.polls += 1
        stats.decode_seconds += time.perf_counter() - t0


async def tick(stats: LoadStats, period: float = 0.01) -> None:
    nxt = time.perf_counter() + period
    while True:
        await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
        now = time.perf_counter()
        stats.lateness.append((now - nxt) * 1e3)
        nxt = max(nxt + period, now)


# -- the served side ---------------------------------------------------------------------------------


class BenchPoller:
    """What the app reads of a Poller: the snapshot, its status, and waiting for the next one."""

    def __init__(self, snap: Snapshot) -> None:
        now = time.time()
        self._snapshot = snap
        self._changed = asyncio.Event()
        endpoints = {
            e: EndpointState(e, fetched_at=now, last_duration=0.5, successes=1)
            for e in PollerConfig().endpoints
        }
        self.status = PollStatus(
            api_version=API, polls=1, last_poll_finished=now, last_poll_ok=True, last_success=now,
            endpoints=endpoints,
        )  # fmt: skip

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    async def wait_next(self, after: Snapshot | None = None) -> Snapshot:
        while self._snapshot is after:
            await self._changed.wait()
        return self._snapshot

    def publish(self) -> None:
        """A new snapshot object with the same content: every Slurm part must be rendered again."""
        self._snapshot = msgspec.structs.replace(self._snapshot, taken_at=time.time())
        self.status.last_success = self._snapshot.taken_at
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


async def run_scraper(url: str, mode: str, variant: str, conc: int, count: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "--scrape", url, mode, variant, str(conc), str(count),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"scraper exited {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


async def part_a(args: argparse.Namespace) -> None:
    t = time.perf_counter()
    snap = synthetic(jobs=args.jobs, nodes=args.nodes)
    print(
        f"synthetic snapshot: {len(snap.jobs)} job records, {len(snap.nodes)} nodes "
        f"(built in {time.perf_counter() - t:.1f} s)"
    )
    poller = BenchPoller(snap)
    stats = LoadStats()
    app = server.make_app(cast(Poller, poller))
    renderer = app[server.RENDERER]

    @web.middleware
    async def timed(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        t0 = time.perf_counter()
        resp = await handler(request)
        if request.path == "/metrics":
            ms = (time.perf_counter() - t0) * 1e3
            stats.handler_ms.append(ms)
            if stats.after_publish:
                stats.first_ms.append(ms)
                stats.after_publish = False
        return resp

    async def publish(request: web.Request) -> web.Response:
        poller.publish()
        stats.after_publish = True
        return web.Response(text="ok\n")

    gc_started = 0.0

    def gc_watch(phase: str, info: dict[str, int]) -> None:
        nonlocal gc_started
        if info["generation"] == 2:
            if phase == "start":
                gc_started = time.perf_counter()
            else:
                stats.gc_ms.append((time.perf_counter() - gc_started) * 1e3)

    gc.callbacks.append(gc_watch)
    app.middlewares.append(timed)
    app.router.add_post("/bench/publish", publish)
    http_server = await server.start(app, "127.0.0.1", 0)
    url = http_server.urls[0]
    tasks = [asyncio.create_task(renderer.warm()), asyncio.create_task(tick(stats))]
    try:
        # renders once, outside the measurement, and registers gzip as a wanted variant for warm()
        for variant in VARIANTS:
            t = time.perf_counter()
            body, _ = await renderer.body("", variant == "gzip")
            ms = (time.perf_counter() - t) * 1e3
            print(f"  first render {variant:<4}: {ms:7.0f} ms, {len(body) / 1e6:.2f} MB")
        print(f"  last render of the Slurm families (thread): {renderer.last_render_seconds * 1e3:.0f} ms")

        jobs_body = JobsBody(args.decode_jobs)
        tasks.append(asyncio.create_task(decode_forever(jobs_body, stats)))
        await asyncio.sleep(1.0)  # let the decode get going
        print(
            f"/metrics on {url} while a {args.decode_jobs}-job v0.0.45 /jobs body is decoded again and again "
            f"on the same loop; scrapers in another process (load average {os.getloadavg()[0]:.1f}, "
            f"{os.cpu_count()} CPUs)"
        )
        print(
            "  client = scraper process, send → last byte (client-side time included); handler = server only"
        )
        cases = [("steady", v, c) for c in (1, 50) for v in VARIANTS] + [("first", v, 1) for v in VARIANTS]
        for mode, variant, conc in cases:
            stats.lateness.clear()
            stats.handler_ms.clear()
            stats.held_ms.clear()
            stats.gc_ms.clear()
            stats.first_ms.clear()
            jobs0, t0 = stats.jobs, time.perf_counter()
            if mode == "steady":
                count = args.scrapes if conc == 1 else args.per_scraper
            else:
                count = args.first_repeats
            res = await run_scraper(url, mode, variant, conc, count)
            rate = (stats.jobs - jobs0) / (time.perf_counter() - t0)
            throughput = f", {len(res['lat_ms']) / res['wall_s']:.0f}/s" if mode == "steady" else ""
            label = f"{conc} scraper{'s' if conc > 1 else ' '}" if mode == "steady" else "first after publish"
            print(
                f"  {variant:<4} {label:<19} client  {p50_p99(res['lat_ms'])}  "
                f"({len(res['lat_ms'])} scrapes, {res['bytes'] / 1e6:.2f} MB body{throughput})"
            )
            handler = stats.handler_ms if mode == "steady" else stats.first_ms
            print(f"  {'':<24} handler {p50_p99(handler)}  ({len(handler)} requests)")
            if mode == "first":
                render_ms = renderer.last_render_seconds * 1e3
                print(f"  {'':<24} last render of the Slurm families (thread): {render_ms:.0f} ms")
            late, held = stats.lateness or [0.0], stats.held_ms or [0.0]
            print(
                f"  {'':<24} loop: 10 ms ticker late p99 {pct(late, 99):.1f} / max {max(late):.1f} ms; "
                f"decode held it p99 {pct(held, 99):.1f} / max {max(held):.1f} ms; {rate:,.0f} jobs/s decoded"
            )
            print(f"  {'':<24} full GCs: {len(stats.gc_ms)}, longest {max(stats.gc_ms, default=0.0):.0f} ms")
        if stats.polls:
            print(
                f"  decode: {stats.polls} full polls of {args.decode_jobs} jobs, "
                f"{stats.decode_seconds / stats.polls:.1f} s each (while serving)"
            )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await http_server.close()
        gc.callbacks.remove(gc_watch)


# -- the scraper process ---------------------------------------------------------------------------


async def scrape(url: str, mode: str, variant: str, conc: int, count: int) -> dict[str, Any]:
    headers = VARIANTS[variant]
    lat: list[float] = []
    size = 0

    async def one(s: ClientSession) -> float:
        nonlocal size
        t = time.perf_counter()
        async with s.get(url + "/metrics", headers=headers) as resp:
            body = await resp.read()
            assert resp.status == 200, resp.status
        size = len(body)
        return (time.perf_counter() - t) * 1e3

    async def scraper(start: asyncio.Barrier) -> None:
        async with ClientSession(auto_decompress=False, timeout=ClientTimeout(total=120)) as s:
            await one(s)  # connect, and make sure this variant is rendered
            await start.wait()
            for _ in range(count):
                if mode == "first":
                    async with s.post(url + "/bench/publish") as resp:
                        await resp.read()
                    lat.append(await one(s))
                    await asyncio.sleep(1.0)  # let the warm renders of this snapshot finish
                    await one(s)
                    await asyncio.sleep(0.5)
                else:
                    lat.append(await one(s))

    start = asyncio.Barrier(conc)
    t0 = time.perf_counter()
    await asyncio.gather(*(scraper(start) for _ in range(conc)))
    return {"lat_ms": lat, "bytes": size, "wall_s": time.perf_counter() - t0}


# -- part B: the 26.05 lab -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def metric_sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


async def timed_get(s: ClientSession, url: str, headers: dict[str, str] | None = None) -> tuple[float, bytes]:
    t = time.perf_counter()
    async with s.get(url, headers=headers or {"Accept-Encoding": "identity"}) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {resp.status}")
    return (time.perf_counter() - t) * 1e3, body


async def part_b(args: argparse.Namespace) -> None:
    from lab import Lab

    lab = Lab("26.05")
    if os.geteuid() != 0 or not lab.is_running():
        print("26.05 lab: not running (or not root); start it with `python -m lab up --slurm 26.05`: skipped")
        return
    native = lab.ctld_metrics_url
    if native is None:
        print(f"26.05 lab runs Slurm {lab.release()}: no slurmctld metrics; skipped")
        return
    print(
        f"26.05 lab (Slurm {lab.release()}): {args.lab_jobs} individual held jobs via a loop of `sbatch -H`"
    )
    serve: asyncio.subprocess.Process | None = None
    try:
        t = time.perf_counter()
        for i, part in enumerate(("cpu", "gpu")):
            n = args.lab_jobs // 2 + (args.lab_jobs % 2 if i == 0 else 0)
            sbatch = f"sbatch -H -p {part} -J {JOB_NAME} --wrap true >/dev/null || exit 1"
            loop = f"i=0; while [ $i -lt {n} ]; do {sbatch}; i=$((i+1)); done"
            lab.run(["sh", "-c", loop], timeout=600)
        held = len(lab.run(["squeue", "-h", "-n", JOB_NAME, "-t", "PD", "-o", "%i"]).split())
        total = len(lab.run(["squeue", "-h", "-o", "%i"]).split())
        print(
            f"  submitted in {time.perf_counter() - t:.1f} s: {held} held {JOB_NAME} jobs, {total} in squeue"
        )

        port = free_port()
        argv = [
            sys.executable, "-c", "import sys; from slurm_keda.cli import main; sys.exit(main())", "serve",
            "--slurmrestd-url", lab.url, "--token-file", str(lab.token_file), "--api-version", API,
            "--poll-interval", "30", "--listen-address", "127.0.0.1", "--listen-port", str(port),
            "--log-level", "warning",
        ]  # fmt: skip
        serve = await asyncio.create_subprocess_exec(*argv, cwd=str(ROOT))
        ours = f"http://127.0.0.1:{port}/metrics"
        # slurmctld closes every connection itself, and answers a request carrying `Connection: close`
        # with a stray "Connection: Close" line after the body (26.05.5), which aiohttp rejects: so
        # slurmctld gets a plain session, slurm-keda one that closes too (a new connection per GET for both).
        timeout = ClientTimeout(total=120)
        async with (
            ClientSession(
                connector=TCPConnector(force_close=True), auto_decompress=False, timeout=timeout
            ) as s,
            ClientSession(auto_decompress=False, timeout=timeout) as ns,
        ):
            deadline = time.monotonic() + 180
            while True:
                try:
                    _, text = await timed_get(s, ours)
                    if metric_sum(text.decode(), "slurm_jobs", state="pending") >= held:
                        break
                except (OSError, RuntimeError):
                    pass
                if serve.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError("slurm-keda serve did not report the submitted jobs in time")
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # the warm renders of this snapshot
            samples: dict[str, list[float]] = {k: [] for k in ("jobs", "partitions", "ours", "ours_gzip")}
            sizes: dict[str, int] = {}
            for _ in range(args.lab_rounds):
                for key, session, u, hdr in (
                    ("jobs", ns, f"{native}/jobs", None),
                    ("partitions", ns, f"{native}/partitions", None),
                    ("ours", s, ours, {"Accept-Encoding": "identity"}),
                    ("ours_gzip", s, ours, {"Accept-Encoding": "gzip"}),
                ):
                    ms, body = await timed_get(session, u, hdr)
                    samples[key].append(ms)
                    sizes[key] = len(body)
            med = {k: statistics.median(v) for k, v in samples.items()}
            print(f"  median of {args.lab_rounds} GETs each (client time included, new connection per GET):")
            for k, label in (
                ("jobs", "slurmctld /metrics/jobs"),
                ("partitions", "slurmctld /metrics/partitions"),
                ("ours", "slurm-keda /metrics (cached, text)"),
                ("ours_gzip", "slurm-keda /metrics (cached, gzip)"),
            ):
                print(f"    {label:<36} {med[k]:7.2f} ms  ({sizes[k] / 1e3:.1f} kB)")
            both = med["jobs"] + med["partitions"]
            print(f"    slurmctld jobs + partitions          {both:7.2f} ms")
            print(
                f"  ratio ours/native: text {med['ours'] / both:.2f}, gzip {med['ours_gzip'] / both:.2f} "
                f"(< 1: slurm-keda's cached scrape is faster)"
            )
            _, text = await timed_get(s, ours)
            poll_ms = metric_sum(text.decode(), "slurm_exporter_poll_duration_seconds", endpoint="jobs") * 1e3
            print(f"  context: slurm-keda serve's last poll of /jobs took {poll_ms:.0f} ms (fetch + decode)")
            token = lab.read_token()
            hdr = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token, "Accept-Encoding": "identity"}
            fetch_ms, body = await timed_get(s, f"{lab.url}/slurm/{API}/jobs", hdr)
            t = time.perf_counter()
            adapter = adapter_for(API)
            decoder = StreamingArrayDecoder(b"jobs", adapter.job_array)
            n = 0
            for i in range(0, len(body), CHUNK):
                n += len(decoder.feed(body[i : i + CHUNK]))
            n += len(decoder.finish()[1])
            decode_ms = (time.perf_counter() - t) * 1e3
            print(
                f"  context: GET /slurm/{API}/jobs {fetch_ms:.0f} ms ({len(body) / 1e6:.1f} MB, {n} jobs), "
                f"streamed decode {decode_ms:.0f} ms"
            )
    finally:
        if serve is not None and serve.returncode is None:
            serve.terminate()
            await serve.wait()
        lab.run(["scancel", "-n", JOB_NAME], check=False)
        left = len(lab.run(["squeue", "-h", "-n", JOB_NAME, "-t", "PD", "-o", "%i"], check=False).split())
        print(f"  cleanup: scancel -n {JOB_NAME} ({left} still pending); lab left up")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--scrape":
        url, mode, variant, conc, count = sys.argv[2:7]
        print(json.dumps(asyncio.run(scrape(url, mode, variant, int(conc), int(count)))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=100_000, help="job records in the served snapshot")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument(
        "--decode-jobs", type=int, default=100_000, help="jobs in the /jobs body decoded meanwhile"
    )
    p.add_argument("--scrapes", type=int, default=200, help="scrapes of the single scraper")
    p.add_argument("--per-scraper", type=int, default=6, help="scrapes of each of the 50 scrapers")
    p.add_argument("--first-repeats", type=int, default=5, help="publish + first scrape, per format")
    p.add_argument("--lab-jobs", type=int, default=4000, help="held jobs submitted to the 26.05 lab")
    p.add_argument("--lab-rounds", type=int, default=9)
    p.add_argument("--no-lab", action="store_true", help="skip part B")
    p.add_argument("--no-synthetic", action="store_true", help="skip part A")
    args = p.parse_args()
    if not args.no_synthetic:
        print("== A: synthetic snapshot, real server, decode running ==")
        asyncio.run(part_a(args))
    if not args.no_lab:
        print("== B: 26.05 lab, slurmctld's own metrics vs slurm-keda ==")
        asyncio.run(part_b(args))


if __name__ == "__main__":
    main()
