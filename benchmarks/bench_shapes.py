"""Streaming-decoder benchmark on hostile /jobs shapes: one huge job, a huge text before "jobs", deep nesting.

For each shape and size, the time to cut the body into jobs (``StreamingArrayDecoder``, 256 KiB chunks, the
poller's path, caps raised so nothing is refused) against ``msgspec.json.decode`` of the same bytes in the
same run — a linear baseline. A ratio that stays flat as the size doubles means the cutter is linear (before
issue 9 it grew with the size: 25/50/100 MB elements took 4.5/18.8/79.9 s).

Run: ``.venv/bin/python benchmarks/bench_shapes.py [--sizes 16,32,64]`` (MB)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_validate import best
from exporter.jsonsplit import StreamingArrayDecoder

CHUNK = 256 << 10
_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def shapes(n: int) -> dict[str, bytes]:
    return {
        "one huge job": b'{"jobs":[{"job_id":1,"x":"' + b"a" * n + b'"},{"job_id":2}],"meta":{}}',
        "huge head": b'{"pad":"' + b"a" * n + b'","jobs":[{"job_id":1}]}',
        "deep nesting": b'{"jobs":[{"x":' + b"[" * 500 + b"1," * (n // 2) + b"1" + b"]" * 500 + b"}]}",
    }


def cut(body: bytes) -> int:
    dec = StreamingArrayDecoder(
        b"jobs", lambda batch: list(_RAW.decode(batch)), max_element_bytes=1 << 40, max_envelope_bytes=1 << 40
    )
    n = 0
    for at in range(0, len(body), CHUNK):
        n += len(dec.feed(body[at : at + CHUNK]))
    return n + len(dec.finish()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,32,64", help="MB, comma-separated")
    args = ap.parse_args()
    print(f"{'shape':14} {'MB':>4} {'cut s':>7} {'decode s':>9} {'cut/decode':>11}")
    for mb in (int(x) for x in args.sizes.split(",")):
        for name, body in shapes(mb << 20).items():
            t_cut = best(lambda b=body: cut(b))
            t_dec = best(lambda b=body: msgspec.json.decode(b))
            print(f"{name:14} {mb:4d} {t_cut:7.2f} {t_dec:9.3f} {t_cut / t_dec:11.1f}")


if __name__ == "__main__":
    main()
