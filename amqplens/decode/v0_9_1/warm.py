"""Compile the 0-9-1 hot path (and the capture header scan) once and keep it in numba's on-disk cache (an install step).

    python -m amqplens.decode.v0_9_1.warm

A task that finds the cache loads the compiled walk in a fraction of a second instead of
compiling it (``hotpath.cache_dir()`` says where it lives). Without numba it says so and
succeeds: the decoder then runs its Python path.
"""

from __future__ import annotations

import struct
import sys
import time

import numpy as np

from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_9_1 import hotpath
from amqplens.decode.v0_9_1.stream import Amqp091StreamDecoder


def _frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + b"\xce"


def sample_stream(messages: int = 64) -> bytes:
    """A 0-9-1 stream that takes every branch of the walk: publish, header, body, ack, heartbeat."""
    publish = _frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x01x\x01k\x00")
    header = _frame(2, 1, struct.pack(">HHQH", 60, 0, 1, 0x9000) + b"\x0atext/plain\x02")
    ack = _frame(1, 1, struct.pack(">HHQB", 60, 80, 1, 0))
    one = publish + header + _frame(3, 1, b"x") + ack + _frame(8, 0, b"")
    return b"AMQP\x00\x00\x09\x01" + one * messages


def warm() -> float:
    """Seconds spent loading (or compiling) and running the walk once per direction, and the message state's steps."""
    t0 = time.perf_counter()
    if hotpath.load_kernel() is None:
        return -1.0
    dec = Amqp091StreamDecoder("warm", compiled=True)
    data = sample_stream()
    dec.data(TO_SERVER, 0, 0, data)
    dec.data(TO_CLIENT, 0, 0, data[8:])
    dec.close()
    dec.drain_frame_parts()  # the hot rows' Arrow columns are built here too (FrameBatch), so that code is warm as well
    held = Amqp091StreamDecoder("warm-ahead", compiled=True)  # a window decoded ahead (ahead.window_ok) and put in order
    held.data(TO_SERVER, 0, 0, data[:8])
    held.data(TO_CLIENT, 0, 0, data[8:40])
    for at in range(8, len(data) - 64, 64):
        held.data(TO_SERVER, at, at, data[at : at + 64])
        held.data(TO_CLIENT, at + 24, at, data[at + 32 : at + 96])
    held.drain_frame_parts()
    runs = hotpath.run_kernel()  # the TCP reassembler's runs, with the argument types it passes
    if runs is not None:
        ints = np.zeros(4, np.int64)
        runs.run_end(0, 4, 0, ints, ints, ints, 0, 1, 0, 1, ints, 7, ints, ints, np.zeros(4, np.bool_), 0, 0, True, True,
                     np.zeros(4, np.int8))
        runs.history_kept(ints, ints, 1, 0)
    content = hotpath.array_content()()  # the message state's steps for the frames the Python decoder reads
    content.on_method(1, 60, True)
    content.on_header(1, 60, 1)
    content.on_body(1, memoryview(b"x"))
    content.reset()
    return time.perf_counter() - t0


def main() -> int:
    from amqplens.decode.capture import headscan  # the direct path's header scan shares the cache

    scan = headscan.warm()
    if scan >= 0:
        print(f"amqplens.decode: capture header scan ready in {scan:.1f} s")
    seconds = warm()
    if seconds < 0:
        print("amqplens.decode: numba is not installed; the 0-9-1 decoder runs its Python path")
        return 0
    print(f"amqplens.decode: 0-9-1 hot path ready in {seconds:.1f} s (numba cache: {hotpath.cache_dir()})")
    from amqplens.decode.v1_0 import warm as warm10  # AMQP 1.0's walk, renderer and window scan

    print(f"amqplens.decode: AMQP 1.0 hot path ready in {warm10.warm():.1f} s")
    from amqplens.lifecycle import array091  # the fused lifecycle's passes share the cache

    print(f"amqplens.lifecycle: 0-9-1 array passes ready in {array091.warm():.1f} s")
    from amqplens.lifecycle import array10

    print(f"amqplens.lifecycle: AMQP 1.0 array pass ready in {array10.warm():.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
