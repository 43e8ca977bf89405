"""Per-frame decode time of the 0-9-1 codec, Python path against the compiled hot path (no Spark).

    python -m tools.bench_hotpath CAPTURE.pcap [--repeat 2]

Two measures, each with ``decode.compiled`` off and on, CPU seconds of this process (the
machine is shared), best of ``--repeat``:

- codec: the TCP reassembler's ``data`` calls of every connection are recorded once, then
  replayed into the 0-9-1 decoder, whose frames become one Arrow struct array of the frames
  contract (what the codec and the row conversion cost, per frame);
- decode_flows: the capture's packets (one split, sorted as the ingest shuffle sorts them)
  through ``pipeline.decode_flows``: TCP reassembly, the codecs, redaction and the frame
  batches, what an ingest task does between the shuffle read and the Parquet write.

Both paths must give the same frames, row for row; the exit status says whether they did.
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode import pipeline
from amqplens.decode.codecs import DecodeOptions
from amqplens.decode.api import reassemble
from amqplens.decode.v0_9_1 import Amqp091StreamDecoder, hotpath


def packets(path: str) -> pa.Table:
    split = pa.RecordBatch.from_pylist([{"capture_id": "bench", "path": path, "start": 0, "end": 1 << 62, "split_index": 0}],
                                       schema=pipeline.SPLITS_SCHEMA)  # fmt: skip
    table = pa.Table.from_batches(list(pipeline.read_splits([split])))
    keys = [("kind", "ascending"), ("capture_id", "ascending"), ("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")]
    return table.sort_by(keys)


class _Record:
    """A StreamConsumer that keeps the calls it gets."""

    def __init__(self, info) -> None:
        self.connection_id = info.connection_id
        self.calls: list[tuple] = []

    def data(self, direction, offset, ts_us, data) -> None:
        self.calls.append(("data", direction, offset, ts_us, bytes(data)))

    def gap(self, direction, offset, length, ts_us) -> None:
        self.calls.append(("gap", direction, offset, length, ts_us))

    def close(self, connection) -> None:
        pass


def streams(path: str) -> list[_Record]:
    """Every connection's consumer calls, as the reassembler makes them."""
    recorded: list[_Record] = []

    def factory(info):
        recorded.append(_Record(info))
        return recorded[-1]

    reassemble(path, factory, capture_id="bench")
    return recorded


def codec(recorded: list[_Record], compiled: bool) -> tuple[float, pa.Array]:
    from amqplens.contracts.arrow import frame_struct

    typ = frame_struct()
    t0 = time.process_time()
    arrays = []
    for rec in recorded:
        dec = Amqp091StreamDecoder(rec.connection_id, compiled=compiled)
        for call in rec.calls:
            getattr(dec, call[0])(*call[1:])
        dec.close()
        parts = dec.drain_frame_parts()
        if parts:
            arrays.append(pipeline.frame_array(parts, typ))
    seconds = time.process_time() - t0
    return seconds, pa.concat_arrays(arrays)


def decode(table: pa.Table, compiled: str) -> tuple[float, pa.Table]:
    from amqplens.contracts.arrow import facts_struct, frame_struct

    options = pipeline.Options(decode_options=DecodeOptions(compiled=compiled), frame_struct=frame_struct(), facts_struct=facts_struct())
    t0 = time.process_time()
    out = list(pipeline.decode_flows(table.to_batches(max_chunksize=8192), options))
    seconds = time.process_time() - t0
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
    recorded = streams(args.capture)
    same = True
    for measure, fn, paths in (("codec", lambda c: codec(recorded, c == "auto"), ("off", "auto")),
                               ("decode_flows", lambda c: decode(table, c), ("off", "auto"))):  # fmt: skip
        results = {}
        for choice in paths:
            best, frames = None, None
            for _ in range(args.repeat):
                seconds, frames = fn(choice)
                best = seconds if best is None else min(best, seconds)
            results[choice] = (best, frames)
            n = len(frames)
            print(f"{measure} compiled={choice}: {n} frames, {best:.2f} CPU s, {best / max(n, 1) * 1e6:.2f} us per frame", flush=True)
        equal = _chunks(results["off"][1]).equals(_chunks(results["auto"][1]))
        same = same and equal
        print(f"{measure}: same frames {equal}; compiled {results['off'][0] / results['auto'][0]:.2f}x faster (best of {args.repeat})")
    return 0 if same else 1


def _chunks(values) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


if __name__ == "__main__":
    sys.exit(main())
