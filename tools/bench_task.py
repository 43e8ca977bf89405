"""CPU per frame of an ingest task's two halves, without Spark: decode + batches, then the fused lifecycle.

    python -m tools.bench_task CAPTURE.pcap [--repeat 3] [--compiled off,auto] [--fold on,off]

The capture's packets (one split, sorted as the ingest shuffle sorts them) go through
``ingest_captures.decode_and_stage``'s work in one process: ``pipeline.decode_flows`` (TCP
reassembly, the codecs, redaction, the frame batches), the frames table's rows and their
``StagedWriter`` (Parquet under a temporary folder): "decode + batches". The frame and
connection batches it gave are then fed to the fused lifecycle (``ConnectionLifecycle``) and
its rows written the same way: "lifecycle". Each figure is CPU seconds of this process
(``time.process_time``; the machine is shared), best of ``--repeat``, per frame.
For each ``--compiled`` setting and each ``--fold`` setting (on: the fused lifecycle's folding of 0-9-1
content frames, ``amqplens/lifecycle/fold.py``, and its array passes for 0-9-1 and 1.0; off: the machines
alone, frame by frame) the lifecycle tables, frames, connections and
decode_errors must be the same as the first pair's; the exit status says whether they were.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time

import pyarrow as pa

from amqplens.contracts.arrow import facts_struct, frame_struct
from amqplens.decode import pipeline
from amqplens.decode.codecs import DecodeOptions
from amqplens.decode.v0_9_1 import warm
from amqplens.jobs import ingest_captures as ingest
from amqplens.jobs import lifecycle
from amqplens.lake.staging import StagedTable
from amqplens.lifecycle.fused import ConnectionLifecycle
from tools.bench_hotpath import packets


def _staged(root: str, names) -> dict[str, StagedTable]:
    return {name: StagedTable(name, root, "bench") for name in names}


def decode_stage(table: pa.Table, compiled: str, root: str, chunk: int | None = None) -> tuple[float, list, dict]:
    """(CPU seconds, the (kind, capture, batch) events the lifecycle takes, the tables' rows); ``chunk``: packets per
    input batch (the decoder drains after each; default the pipeline's batch_rows)."""
    options = pipeline.Options(
        decode_options=DecodeOptions(compiled=compiled), frame_struct=frame_struct(), facts_struct=facts_struct())
    writers = {n: s.writer(0) for n, s in _staged(root, ingest.STAGED_TABLES).items()}
    events, tables = [], {n: [] for n in ingest.STAGED_TABLES}
    t0 = time.process_time()
    for out in pipeline.decode_flows(table.to_batches(max_chunksize=chunk or options.batch_rows), options):
        kind = out.column(0)[0].as_py() if out.num_rows else None
        cid = out.column(1)[0].as_py() if out.num_rows else None
        if kind == "frame":
            rows = ingest.frame_rows(out)
            writers["frames"].write(cid, rows)
            events.append(("frame", cid, rows))
            tables["frames"].append(rows)
        elif kind == "connection":
            rows = ingest.connection_rows(out)
            writers["connections"].write(cid, rows)
            events.append(("connection", cid, out))
            tables["connections"].append(rows)
        elif kind == "error":
            rows = ingest.error_rows(out)
            writers["decode_errors"].write(cid, rows)
            tables["decode_errors"].append(rows)
    for w in writers.values():
        w.close()
    return time.process_time() - t0, events, tables


def lifecycle_stage(events: list, root: str, fold: bool = True, chunk_frames: int | None = None) -> tuple[float, dict]:
    """``chunk_frames``: the fused lifecycle's (None: the configuration's ``lifecycle.chunk_frames``)."""
    from amqplens.config import load_config

    if chunk_frames is None:
        chunk_frames = load_config()["lifecycle.chunk_frames"]
    fused = ConnectionLifecycle(**lifecycle.structs(), batch_rows=8192, fold_content=fold, arrays=fold,
                                chunk_frames=chunk_frames)
    life = lifecycle.LifecycleWriters({k: StagedTable(t.name, root, "bench") for k, t in lifecycle.OUTPUTS}, 0)
    kept: dict[str, list] = {}
    t0 = time.process_time()

    def write(batches):
        for out in batches:
            life.write(out)
            kept.setdefault(out.column(0)[0].as_py(), []).append(out)

    for kind, cid, batch in events:
        if kind == "frame":
            write(fused.frames(cid, batch))
        else:
            write(fused.closed(cid, batch.column("connection").field("connection_id").to_pylist(), batch.column("meta").to_pylist()))
    write(fused.finish())
    life.close()
    return time.process_time() - t0, kept


def results(tables: dict, life: dict) -> dict[str, pa.Table]:
    """The tables ``decode_stage`` and ``lifecycle_stage`` gave, by name (``life:<kind>`` for the lifecycle's)."""
    out = {name: _canonical(b) for name, b in tables.items()}
    out.update({f"life:{k}": pa.Table.from_struct_array(pa.Table.from_batches(v).column(k).combine_chunks()) for k, v in life.items()})
    return out


def _canonical(batches: list, sort_by: str | None = None) -> pa.Table:
    if not batches:
        return pa.table({})
    t = pa.Table.from_batches(batches)
    return t.sort_by([(sort_by, "ascending")]) if sort_by else t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_task", description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compiled", default="off,auto")
    ap.add_argument("--fold", default="on", help="on, off or both (on,off): the fused lifecycle's content folding")
    ap.add_argument("--chunk-frames", type=int, default=None,
                    help="the fused lifecycle's lifecycle.chunk_frames (default: the configuration's; 0: connections whole)")
    args = ap.parse_args(argv)
    if any(c != "off" for c in args.compiled.split(",")):
        print(f"numba cache warm in {warm.warm():.1f} s")
    table = packets(args.capture)
    reference = None
    same = True
    for choice, fold in [(c, f) for c in args.compiled.split(",") for f in args.fold.split(",")]:
        best_d = best_l = None
        for _ in range(args.repeat):
            root = tempfile.mkdtemp(prefix="bench-task-")
            try:
                d, events, tables = decode_stage(table, choice, root)
                lc, life = lifecycle_stage(events, root, fold == "on", args.chunk_frames)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            print(f"  compiled={choice} fold={fold}: decode + batches {d:.2f} CPU s, lifecycle {lc:.2f} CPU s", flush=True)
            best_d = d if best_d is None else min(best_d, d)
            best_l = lc if best_l is None else min(best_l, lc)
        n = sum(b.num_rows for b in tables["frames"])
        print(f"compiled={choice} fold={fold}: {n} frames; decode + batches {best_d:.2f} CPU s = {best_d / n * 1e6:.2f} "
              f"us/frame; lifecycle {best_l:.2f} CPU s = {best_l / n * 1e6:.2f} us/frame (best of {args.repeat})", flush=True)
        result = results(tables, life)
        if reference is None:
            reference = result
            continue
        for name, t in result.items():
            ref = reference.get(name)
            equal = ref is not None and ref.num_rows == t.num_rows and ref.equals(t)
            if not equal and ref is not None and ref.num_rows == t.num_rows:  # the same rows in another order
                equal = sorted(map(repr, ref.to_pylist())) == sorted(map(repr, t.to_pylist()))
            same = same and equal
            print(f"  {name}: {'same' if equal else 'DIFFERENT'} ({t.num_rows} rows)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
