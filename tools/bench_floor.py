"""What part of an ingest task's CPU per frame the issue-32 bars leave no room to remove: the staged Parquet writes,
and the Python the issue keeps (the reference decoder on the frames the compiled walk leaves, their rows' conversion
to Arrow).

    python -m tools.bench_floor CAPTURE.pcap [--repeat 3]

The capture goes through ``tools.bench_task``'s two halves once (``decode.compiled`` auto, the fused lifecycle with
its array passes), then:

- **frames write**: the decode's frames batches written again by ``StagedWriter`` (the frames table's settings:
  row groups, dictionary and statistics columns, left-out null columns), CPU seconds, best of ``--repeat``;
- **lifecycle write**: the fused lifecycle's output batches written again by ``LifecycleWriters``, the same way;
- **reference frames**: in one more decode, the CPU inside the reference decoder's frame calls
  (``on_frame``, ``on_protocol_header``: the frames the walk does not take, each through the Python decoder as the
  issue's step 2 says), and inside the conversion of their row dicts to Arrow (``to_struct_array`` on the frames
  struct); each call timed with ``time.process_time``, whose own cost (about 0.2 us a call, measured and printed) is
  taken off.

Each figure is printed in CPU seconds and per frame of the capture. One process, no Spark.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import pyarrow as pa

from amqplens.decode.common import arrow as common_arrow
from amqplens.decode.v0_9_1 import warm
from amqplens.decode.v0_9_1.stream import Amqp091StreamDecoder
from amqplens.decode.v1_0.stream import Amqp10StreamDecoder
from amqplens.jobs import lifecycle
from amqplens.lake.staging import StagedTable
from tools import bench_task
from tools.bench_hotpath import packets


def _best(repeat: int, run) -> float:
    best = None
    for _ in range(repeat):
        root = tempfile.mkdtemp(prefix="bench-floor-")
        try:
            t0 = time.process_time()
            run(root)
            dt = time.process_time() - t0
        finally:
            shutil.rmtree(root, ignore_errors=True)
        best = dt if best is None else min(best, dt)
    return float(best or 0.0)


def _write_frames(batches: list):
    def run(root: str) -> None:
        writer = StagedTable("frames", root, "floor").writer(0)
        for rows in batches:
            writer.write("c", rows)
        writer.close()
    return run


def _write_lifecycle(life: dict):
    def run(root: str) -> None:
        writers = lifecycle.LifecycleWriters({k: StagedTable(t.name, root, "floor") for k, t in lifecycle.OUTPUTS}, 0)
        for batches in life.values():
            for out in batches:
                writers.write(out)
        writers.close()
    return run


def _hot_keys() -> frozenset[int]:
    """The walk's methods (``hotpath.HOT_METHODS``) as ``class_id << 16 | method_id`` keys, from the 0-9-1 tables."""
    from amqplens.decode.detect import D0_9_1
    from amqplens.decode.v0_9_1.frames import tables_for
    from amqplens.decode.v0_9_1.hotpath import HOT_METHODS

    methods = tables_for(D0_9_1).methods
    return frozenset(key for key, m in methods.items() if (m.class_name, m.method_name) in HOT_METHODS)


_HOT_091 = _hot_keys()


def _hot_kind(args: tuple) -> bool:
    """Whether a 0-9-1 ``on_frame`` call is of a kind the walk takes (it left the frame: a small buffer, a cut frame,
    a frame among the handshake's): content headers and bodies, heartbeats, the basic class's hot methods."""
    if len(args) < 6 or not isinstance(args[3], str):
        return False
    kind, payload = args[3], args[5]
    if kind in ("header", "body", "heartbeat"):
        return True
    return kind == "method" and len(payload) >= 4 and int.from_bytes(payload[:4], "big") in _HOT_091


class _Timed:
    """CPU inside the wrapped calls (not counting calls made from inside one), and how many; ``hot``: the share of
    calls ``classify`` says are of a hot kind."""

    def __init__(self, classify=None) -> None:
        self.cpu, self.calls, self.depth, self.classify = 0.0, 0, 0, classify
        self.hot_cpu, self.hot_calls = 0.0, 0

    def wrap(self, fn, only=None):
        def timed(*args, **kwargs):
            if self.depth or (only is not None and not only(*args)):
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.process_time() - t0
                self.cpu += dt
                self.calls += 1
                if self.classify is not None and self.classify(args[1:]):
                    self.hot_cpu += dt
                    self.hot_calls += 1
                self.depth -= 1
        return timed


def _clock_cost() -> float:
    n = 200_000
    t0 = time.process_time()
    for _ in range(n):
        time.process_time()
    return (time.process_time() - t0) / n


def _reference_share(table: pa.Table) -> tuple[_Timed, _Timed]:
    """(the reference decoder's frame calls, the frame dicts' conversion to Arrow) in one decode of ``table``."""
    from amqplens.contracts.arrow import frame_struct
    from amqplens.decode import pipeline

    frames_type = frame_struct()
    ref, conv = _Timed(_hot_kind), _Timed()
    saved = [(cls, name, getattr(cls, name)) for cls in (Amqp091StreamDecoder, Amqp10StreamDecoder)
             for name in ("on_frame", "on_protocol_header")]
    saved += [(pipeline, "to_struct_array", pipeline.to_struct_array)]
    try:
        for cls, name, fn in saved[:-1]:
            setattr(cls, name, ref.wrap(fn))
        pipeline.to_struct_array = conv.wrap(common_arrow.to_struct_array, lambda rows, typ: typ == frames_type)
        root = tempfile.mkdtemp(prefix="bench-floor-")
        try:
            bench_task.decode_stage(table, "auto", root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    return ref, conv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"numba cache warm in {warm.warm():.1f} s")
    table = packets(args.capture)
    root = tempfile.mkdtemp(prefix="bench-floor-")
    try:
        decode_cpu, events, tables = bench_task.decode_stage(table, "auto", root)
        life_cpu, life = bench_task.lifecycle_stage(events, root, True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = sum(b.num_rows for b in tables["frames"])

    def show(name: str, cpu: float, extra: str = "") -> None:
        print(f"{name}: {cpu:.3f} CPU s = {cpu / n * 1e6:.2f} us/frame{extra}", flush=True)

    print(f"{n} frames")
    show("decode + batches (one run)", decode_cpu)
    show("lifecycle (one run)", life_cpu)
    show("frames write", _best(args.repeat, _write_frames(tables["frames"])))
    show("lifecycle write", _best(args.repeat, _write_lifecycle(life)))
    clock = _clock_cost()
    ref, conv = _reference_share(table)
    show("reference decoder's frame calls", max(ref.cpu - 2 * clock * ref.calls, 0.0), f" ({ref.calls} calls)")
    show("  of them of a kind the walk takes (0-9-1)", max(ref.hot_cpu - 2 * clock * ref.hot_calls, 0.0),
         f" ({ref.hot_calls} calls)")
    show("their dict rows to Arrow", max(conv.cpu - 2 * clock * conv.calls, 0.0), f" ({conv.calls} calls)")
    print(f"(process_time costs {clock * 1e6:.2f} us a call; two a timed call taken off)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
