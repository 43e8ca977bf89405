"""Decode throughput on a synthetic stream of small publishes (single core).

    .venv/bin/python -m tests.v0_9_1.bench_decode [messages]
"""

from __future__ import annotations

import sys
import time

from amqplens.decode.v0_9_1 import Amqp091StreamDecoder

from .encoder import Encoder


def synthetic(messages: int) -> bytes:
    e = Encoder()
    one = (
        e.method(1, "basic", "publish", reserved_1=0, exchange="amq.direct", routing_key="orders.created", mandatory=False, immediate=False)
        + e.header(1, 60, 64, {"content_type": "application/json", "delivery_mode": 2, "headers": {"x-trace": "abc", "n": 1}})
        + e.body(1, b"{" + b"x" * 62 + b"}")
    )
    return e.protocol_header() + one * messages


def measure(decoder, data: bytes, segment: int) -> None:
    """Feed ``data`` to ``decoder`` as one to_server stream in ``segment``-byte pieces and print the rate."""
    t0 = time.perf_counter()
    frames = 0
    for off in range(0, len(data), segment):
        decoder.data("to_server", off, off, data[off : off + segment])
        frames += len(decoder.drain_frames())
    decoder.close()
    frames += len(decoder.drain_frames())
    dt = time.perf_counter() - t0
    assert not decoder.drain_errors()
    print(f"{frames} frames, {len(data) / 1e6:.1f} MB in {dt:.2f} s: {frames / dt:,.0f} frames/s, {len(data) / dt / 1e6:.2f} MB/s")


def main(messages: int = 100_000, segment: int = 65536) -> None:
    measure(Amqp091StreamDecoder("bench"), synthetic(messages), segment)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
