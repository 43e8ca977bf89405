"""Random bytes and damaged conversations never raise out of the 0-10 stream decoder, and every byte is accounted for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.decode.v0_10 import Amqp010StreamDecoder, decode_header, decode_method
from tests.v0_10.conversation import CONVERSATIONS, C, S, streams
from tests.v0_10.helpers import check_accounting

VALID = streams(CONVERSATIONS["publish_consume"]())


def _run(chunks_by_direction: dict) -> None:
    dec = Amqp010StreamDecoder("c")
    totals = {}
    for d, chunks in chunks_by_direction.items():
        off = 0
        for chunk in chunks:
            dec.data(d, off, off, chunk)
            off += len(chunk)
        totals[d] = off
    dec.close()
    frames, errors = dec.drain_frames(), dec.drain_errors()
    check_accounting(frames, errors, totals)
    assert dec.connection_facts()["internal_errors"] == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6), st.booleans())
def test_random_bytes_never_raise(chunks, with_header):
    if with_header:
        chunks = [b"AMQP\x01\x01\x00\x0a", *chunks]
    _run({S: chunks, C: chunks[::-1]})


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_conversations_never_raise(data):
    raw = bytearray(VALID[S])
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=5)))
    pieces = [bytes(raw[a:b]) for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    _run({S: [p for p in pieces if p], C: [VALID[C]]})


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 3), st.binary(max_size=120))
def test_segment_decoders_only_report(stype, payload):
    if stype in (0, 1):
        meta, args, sync, error = decode_method(stype, memoryview(payload))
        assert args is not None or error is not None
    else:
        decode_header(memoryview(payload))
