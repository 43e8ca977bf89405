"""Compile AMQP 1.0's hot path once (numba's on-disk cache): ``python -m amqplens.decode.v0_9_1.warm`` runs ``warm``
with the 0-9-1 kernels, so a task loads the compiled walk, renderer and window scan instead of compiling them."""

from __future__ import annotations

import time

from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v1_0 import hotpath
from amqplens.decode.v1_0.stream import Amqp10StreamDecoder


def _frame(body: bytes, channel: int = 0) -> bytes:
    return (8 + len(body)).to_bytes(4, "big") + b"\x02\x00" + channel.to_bytes(2, "big") + body


def _described(code: int, *elements: bytes) -> bytes:
    body = bytes([len(elements)]) + b"".join(elements)
    return bytes([0x00, 0x53, code, 0xC0, len(body)]) + body


def sample_streams(messages: int = 32) -> tuple[bytes, bytes]:
    """Both directions of a 1.0 connection that takes every branch of the compiled path: open, begin, transfers of
    one-transfer messages with sections, flows, dispositions (``warm``)."""
    header = b"AMQP\x00\x01\x00\x00"
    opened = _frame(_described(0x10, b"\xa1\x01w"))
    begin = _frame(_described(0x11, b"\x40", b"\x43", b"\x52\x09", b"\x52\x09"))
    sections = (_described(0x70, b"\x41") + b"\x00\x53\x74\xc1\x06\x02\xa1\x01k\x52\x01" + b"\x00\x53\x75\xa0\x01x")
    client, server = [header, opened, begin], [header, opened]
    for i in range(messages):
        tag = bytes([0xA0, 1, i])
        client.append(_frame(_described(0x14, b"\x43", bytes([0x52, i]), tag, b"\x43", b"\x42") + sections))
        server.append(_frame(_described(0x13, b"\x43", b"\x52\x09", b"\x43", b"\x52\x09", b"\x43", b"\x43", b"\x52\x09")))
        server.append(_frame(_described(0x15, b"\x41", bytes([0x52, i]), b"\x40", b"\x41", b"\x00\x53\x24\x45")))
    return b"".join(client), b"".join(server)


def warm() -> float:
    """Seconds spent loading (or compiling) the 1.0 walk, renderer and window scan and running them; -1 without
    numba (the decoder then runs its Python path)."""
    t0 = time.perf_counter()
    if hotpath.load_kernel() is None:
        return -1.0
    client, server = sample_streams()
    dec = Amqp10StreamDecoder("warm", compiled=True)
    dec.hot_min_bytes = 0
    dec.data(TO_SERVER, 0, 0, client[:8])
    dec.data(TO_CLIENT, 0, 0, server[:8])
    for at in range(8, max(len(client), len(server)), 128):  # both directions framing: held, then decoded ahead
        for d, data in ((TO_SERVER, client), (TO_CLIENT, server)):
            if at < len(data):
                dec.data(d, at, at, data[at:at + 128])
    dec.close()
    dec.drain_frame_parts()
    return time.perf_counter() - t0
