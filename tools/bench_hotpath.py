"""Per-frame decode time of the 0-9-1 codec, Python path against the compiled hot path (no Spark).

    python -m tools.bench_hotpath CAPTURE.pcap [--repeat 2] [--limit-mb 100]

Reads the capture's packets (one split), sorts them as the ingest shuffle does (capture, flow,
time, record offset) and times ``pipeline.decode_flows`` over them with ``decode.compiled`` off
and on: TCP reassembly, the codec, redaction and the frame rows as Arrow struct batches, which
is what an ingest task does between the shuffle read and the Parquet write. Prints the best of
``--repeat`` runs per path and checks that both gave the same frames (row for row).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc

from amqp_decode import pipeline
from amqp_decode.codecs import DecodeOptions
from amqp_decode.v0_9_1 import hotpath


def packets(path: str) -> pa.Table:
    split = pa.RecordBatch.from_pylist([{"capture_id": "bench", "path": path, "start": 0, "end": 1 << 62, "split_index": 0}],
                                       schema=pipeline.SPLITS_SCHEMA)  # fmt: skip
    table = pa.Table.from_batches(list(pipeline.read_splits([split])))
    keys = [("kind", "ascending"), ("capture_id", "ascending"), ("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")]
    return table.sort_by(keys)


def decode(table: pa.Table, compiled: str) -> tuple[float, pa.Table]:
    from jobs.ingest_captures import facts_struct, frame_struct

    options = pipeline.Options(decode_options=DecodeOptions(compiled=compiled), frame_struct=frame_struct(), facts_struct=facts_struct())
    t0 = time.perf_counter()
    out = list(pipeline.decode_flows(table.to_batches(max_chunksize=8192), options))
    seconds = time.perf_counter() - t0
    frames = pa.Table.from_batches([b for b in out if b.num_rows], schema=options.flows_schema)
    frames = frames.filter(pc.equal(frames.column("kind"), "frame")).column("frame")
    return seconds, frames


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_hotpath", description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    load = hotpath.available()
    print(f"numba hot path: {'loaded' if load else 'not available'} ({time.perf_counter() - t0:.2f}s, cache {hotpath.cache_dir()})")
    table = packets(args.capture)
    results = {}
    for choice in ("off", "auto"):
        best, frames = None, None
        for _ in range(args.repeat):
            seconds, frames = decode(table, choice)
            best = seconds if best is None else min(best, seconds)
        results[choice] = (best, frames)
        n = len(frames)
        print(f"compiled={choice}: {n} frames in {best:.2f}s, {best / max(n, 1) * 1e6:.2f} us per frame (best of {args.repeat})", flush=True)
    same = results["off"][1].combine_chunks().equals(results["auto"][1].combine_chunks())
    print(f"same frames: {same}; speed-up {results['off'][0] / results['auto'][0]:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
