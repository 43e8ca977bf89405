"""Decode throughput on a synthetic stream of small transfers (single core).

    .venv/bin/python -m tests.v1_0.bench_decode [messages]

Each message is one transfer frame (handle, delivery-id, delivery-tag,
message-format) carrying header, properties, application-properties and a
64-byte data section, followed by a flow every 10 messages.
"""

from __future__ import annotations

import sys

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


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
