"""Random bytes never raise out of the draft decoders or the 1 1 0 9 chooser; every byte is accounted for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.drafts import AMQP_FAST, D0_9_DRAFT, DraftStreamDecoder
from tests.drafts.encoder import HEADER_DRAFT, HEADER_FAST


def _feed(consumer, chunks_by_direction: dict) -> dict:
    totals = {}
    for d, chunks in chunks_by_direction.items():
        off = 0
        for chunk in chunks:
            consumer.data(d, off, off, chunk)
            off += len(chunk)
        totals[d] = off
    consumer.close(None)
    return totals


def _check(frames, errors, totals):
    for d, total in totals.items():
        assert sum(r["size"] for r in frames if r["direction"] == d) + sum(e["length"] for e in errors if e["direction"] == d) == total


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([D0_9_DRAFT, AMQP_FAST]), st.lists(st.binary(max_size=120), max_size=6), st.booleans())
def test_random_bytes_never_raise_out_of_the_draft_decoder(dialect, chunks, with_header):
    if with_header:
        chunks = [HEADER_DRAFT if dialect == D0_9_DRAFT else HEADER_FAST, *chunks]
    dec = DraftStreamDecoder("c", dialect=dialect)
    totals = _feed(dec, {"to_server": chunks, "to_client": chunks[::-1]})
    _check(dec.drain_frames(), dec.drain_errors(), totals)
    assert dec.connection_facts()["internal_errors"] == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=5), st.sampled_from([b"AMQP\x01\x01\x00\x09", b"AMQP\x01\x01\x00\x0a", b"AMQP\x01\x01\x09\x01"]))
def test_random_bytes_after_a_header_never_raise_out_of_the_registry(chunks, header):
    c = DecodingConsumer("c", DecodeOptions(), lambda *_: None)
    totals = _feed(c, {"to_server": [header, *chunks], "to_client": chunks})
    _check(c.drain_frames(), c.drain_errors(), totals)
