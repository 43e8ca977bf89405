"""Decode throughput on a synthetic stream of small transfers (single core).

    .venv/bin/python -m tests.v1_0.bench_decode [messages]
    .venv/bin/python -m tests.v1_0.bench_decode walk [messages]

Each message is one transfer frame (handle, delivery-id, delivery-tag,
message-format) carrying header, properties, application-properties and a
64-byte data section, followed by a flow every 10 messages.

``walk``: the reference decoder against the compiled frame walk (``v1_0.hot_kernel``) per frame, on that stream and
on ``conversation.load`` (a sender and a receiver: transfers of several sizes and encodings, some over two frames,
flows and dispositions both ways), best of three each.
"""

from __future__ import annotations

import sys
import time

from amqplens.decode.v1_0 import Amqp10StreamDecoder
from tests.v0_9_1.bench_decode import measure

from . import encoder as E


def synthetic(messages: int) -> bytes:
    payload = (
        E.section("header", E.lst(E.boolean(True)))
        + E.section("properties", E.lst(E.string("msg-id"), (0x40, None), E.string("orders.created"), (0x40, None), (0x40, None), (0x40, None), E.symbol("application/json")))
        + E.section("application-properties", E.mp([(E.string("x-trace"), E.string("abc")), (E.string("n"), E.uint(1))]))
        + E.section("data", E.binary(b"{" + b"x" * 62 + b"}"))
    )
    out = [E.AMQP_HEADER, E.performative("open", container_id="bench"), E.performative("begin", next_outgoing_id=0, incoming_window=2**31, outgoing_window=2**31)]
    for i in range(messages):
        out.append(E.performative("transfer", payload=payload, handle=0, delivery_id=i % 2**32, delivery_tag=i.to_bytes(4, "big"), message_format=0))
        if i % 10 == 9:
            out.append(E.performative("flow", next_incoming_id=i, incoming_window=2**31, next_outgoing_id=i, outgoing_window=2**31, handle=0, delivery_count=i, link_credit=1000))
    return b"".join(out)


def main(messages: int = 100_000, segment: int = 65536) -> None:
    measure(Amqp10StreamDecoder("bench"), synthetic(messages), segment)


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def walk(messages: int = 20_000) -> None:
    """Per frame: the reference decoder (whole streams, rows drained), the walk, the walk and the bodies' hashes."""
    import numpy as np

    from amqplens.decode.v1_0 import hot_kernel as hk
    from amqplens.decode.v1_0.stream import decode_streams

    from .conversation import load

    for name, streams in (("synthetic", (synthetic(messages), b"")), ("load", load(messages))):
        frames = len(decode_streams(*streams)[0])
        bufs = [np.frombuffer(s, np.uint8) for s in streams]
        hk.bodies(bufs[0], hk.walk_stream(bufs[0], 1 << 20)[0])  # compiled or loaded from the disk cache
        ref = _best(lambda: decode_streams(*streams), 1)
        walked = _best(lambda: [hk.walk_stream(b, 1 << 20) for b in bufs])
        hot = sum(int((hk.walk_stream(b, 1 << 20)[0][:, hk.R_HOT] == 1).sum()) for b in bufs)
        hashed = _best(lambda: [hk.bodies(b, hk.walk_stream(b, 1 << 20)[0]) for b in bufs])
        mb = sum(len(s) for s in streams) / 1e6
        print(f"{name}: {frames:,} frames ({hot:,} read by the walk), {mb:.1f} MB: reference {ref / frames * 1e6:.2f} us/frame, "
              f"walk {walked / frames * 1e9:.0f} ns/frame, walk + bodies {hashed / frames * 1e9:.0f} ns/frame")


if __name__ == "__main__":
    if sys.argv[1:2] == ["walk"]:
        walk(*(int(a) for a in sys.argv[2:]))
    else:
        main(*(int(a) for a in sys.argv[1:]))
