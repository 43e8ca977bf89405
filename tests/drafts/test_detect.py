"""Which codec the registry picks (amqplens/decode/codecs.py): the seven protocol headers, the shared
``AMQP 1 1 0 9`` told apart by its first frames, and captures that start mid-stream."""

from __future__ import annotations

import pytest

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer, sniff_framing
from amqplens.decode.drafts import choose_framing
from tests.drafts.encoder import HEADER_DRAFT, HEADER_FAST, fast_frame, fast_method
from tests.v0_10.conversation import CONVERSATIONS, C, S, streams

HEARTBEAT_0_9 = bytes.fromhex("08 0000 00000000 ce")  # 7-octet header, frame-end (published 0-9)
START_0_9 = bytes.fromhex("01 0000 00000004 000a000a ce")  # connection.start (class 10, method 10), arguments cut for the test
EMPTY_1_0 = bytes.fromhex("00000008 02 00 0000")
HEADERS = {
    "0-8": b"AMQP\x01\x01\x08\x00",
    "0-9": b"AMQP\x01\x01\x00\x09",
    "0-9-draft": HEADER_DRAFT,
    "0-9-1": b"AMQP\x00\x00\x09\x01",
    "0-10": b"AMQP\x01\x01\x00\x0a",
    "1.0": b"AMQP\x00\x01\x00\x00",
    "1.0-sasl": b"AMQP\x03\x01\x00\x00",
}
CODEC = {"0-8": "Amqp091StreamDecoder", "0-9": "Amqp091StreamDecoder", "0-9-1": "Amqp091StreamDecoder",
         "0-9-draft": "DraftStreamDecoder", "0-10": "Amqp010StreamDecoder", "1.0": "Amqp10StreamDecoder",
         "1.0-sasl": "Amqp10StreamDecoder", "amqp-fast-0.9a5": "DraftStreamDecoder"}  # fmt: skip
DIALECT = {"1.0-sasl": "1.0"}


def run(to_server: bytes, to_client: bytes = b"", server_first: bool = False, start: int = 0):
    c = DecodingConsumer("c", DecodeOptions(), lambda *_: None)
    turns = [(C, to_client), (S, to_server)] if server_first else [(S, to_server), (C, to_client)]
    for d, data in turns:
        if data:
            c.data(d, start if d == S else 0, 1, data)
    c.close(None)
    return c, c.drain_frames(), c.drain_errors(), c.connection_facts()


def codec_name(c) -> str:
    codec = getattr(c.codec, "codec", None) or c.codec  # through the 1 1 0 9 chooser
    return type(codec).__name__


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_each_protocol_header_picks_its_codec(name):
    c, frames, errors, facts = run(HEADERS[name])
    assert c.detected == name and codec_name(c) == CODEC[name]
    assert frames[0]["frame_type"] == "protocol_header" and not errors
    assert facts["dialect"] == DIALECT.get(name, name)


def test_the_seventh_header_tls_is_recorded_not_decoded():
    c, frames, errors, facts = run(b"AMQP\x02\x01\x00\x00" + b"\x16\x03\x01\x00\x05hello")
    assert c.detected == "1.0-tls" and facts["tls"] and errors[0]["reason"] == "tls"


def test_1_1_0_9_with_published_0_9_framing():
    c, frames, errors, facts = run(HEADERS["0-9"] + HEARTBEAT_0_9, START_0_9 + HEARTBEAT_0_9)
    assert codec_name(c) == "Amqp091StreamDecoder" and facts["dialect"] == "0-9" and not errors
    assert [r["frame_type"] for r in frames if r["direction"] == C] == ["method", "heartbeat"]


def test_1_1_0_9_with_amqp_fast_framing():
    server = fast_method(0, 1, 1, b"\x00\x00") + fast_frame(8, 0)
    c, frames, errors, facts = run(HEADER_FAST + fast_frame(8, 0), server)
    assert codec_name(c) == "DraftStreamDecoder" and facts["dialect"] == "amqp-fast-0.9a5" and not errors
    assert [r["frame_type"] for r in frames] == ["protocol_header", "heartbeat", "method", "heartbeat"]


def test_the_chooser_waits_for_enough_bytes_then_decides():
    assert choose_framing(START_0_9[:5]) is None
    assert choose_framing(START_0_9) == "0-9"
    assert choose_framing(fast_frame(8, 0)[:3]) is None
    assert choose_framing(fast_frame(1, 1, b"\x0a\x0b\x00\x00")) == "amqp-fast-0.9a5"
    assert choose_framing(b"\xff" * 20) == "0-9"  # neither: the published dialect keeps the bytes as errors


def test_1_1_0_9_server_speaks_first_and_bytes_arrive_one_by_one():
    c = DecodingConsumer("c", DecodeOptions(), lambda *_: None)
    c.data(S, 0, 1, HEADER_FAST)
    server = fast_method(0, 1, 1) + fast_frame(8, 0)
    for i in range(len(server)):
        c.data(C, i, 2, server[i : i + 1])
    c.close(None)
    frames = c.drain_frames()
    assert codec_name(c) == "DraftStreamDecoder" and sum(r["size"] for r in frames) == 8 + len(server)


def test_0_10_mid_stream_is_sniffed_and_decoded():
    s = streams(CONVERSATIONS["publish_consume"]())
    cut = s[S][205:]
    assert sniff_framing(cut) == "0-10"
    c, frames, errors, facts = run(cut, start=205)
    assert codec_name(c) == "Amqp010StreamDecoder" and facts["dialect"] == "0-10"
    assert any(r["method_name"] == "transfer" for r in frames)
    assert sum(r["size"] for r in frames) + sum(e["length"] for e in errors) == len(cut)


def test_mid_stream_0_9_1_and_1_0_are_still_sniffed():
    assert sniff_framing(b"\x17\x42" + HEARTBEAT_0_9 * 2) == "0-9-1"
    assert sniff_framing(EMPTY_1_0 * 3) == "1.0"
    assert sniff_framing(b"\x00" * 40) != "0-10"  # zero frames are not 0-10 frames (size < 12)
