"""Choosing the codec of a connection from its first bytes (amqplens/decode/codecs.py)."""

from __future__ import annotations

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer, sniff_framing
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER

# Frames written from the specs' own framing rules:
HEARTBEAT_0_9_1 = bytes.fromhex("08 0000 00000000 ce")  # type 8, channel 0, size 0, frame-end (0-9-1 spec 4.2.3)
EMPTY_1_0 = bytes.fromhex("00000008 02 00 0000")  # size 8, doff 2, type 0 (AMQP), channel 0 (1.0 part 2, 2.3.1)


def consumer():
    closed = []
    return DecodingConsumer("c1", DecodeOptions(), lambda c, rec: closed.append(rec)), closed


def test_protocol_header_split_across_segments_is_still_read():
    c, _ = consumer()
    c.data(TO_SERVER, 0, 1, b"AMQ")
    assert c.codec is None  # could still be a header
    c.data(TO_SERVER, 3, 2, b"P\x00\x01\x00\x00")
    assert c.detected == "1.0" and type(c.codec).__name__ == "Amqp10StreamDecoder"


def test_0_9_1_header_picks_the_0_9_1_codec():
    c, _ = consumer()
    c.data(TO_SERVER, 0, 1, b"AMQP\x00\x00\x09\x01")
    assert c.detected == "0-9-1" and type(c.codec).__name__ == "Amqp091StreamDecoder"


def test_mid_stream_framing_decides():
    assert sniff_framing(EMPTY_1_0 * 3) == "1.0"
    assert sniff_framing(HEARTBEAT_0_9_1 * 3) == "0-9-1"
    assert sniff_framing(b"\x17\x42" + HEARTBEAT_0_9_1 * 2) == "0-9-1"  # a frame boundary after a cut frame
    assert sniff_framing(b"GET / HTTP/1.1\r\n\r\n") is None


def test_after_a_gap_the_bytes_that_follow_decide_and_nothing_is_lost():
    c, _ = consumer()
    c.gap(TO_SERVER, 0, 100, 1)
    assert c.codec is None
    c.data(TO_SERVER, 100, 2, EMPTY_1_0 * 2)
    assert type(c.codec).__name__ == "Amqp10StreamDecoder"
    c.close(None)
    facts = c.connection_facts()
    assert facts["gap_bytes_to_server"] == 100 and facts["frame_bytes_to_server"] == 16


def test_server_speaking_first_mid_stream():
    c, _ = consumer()
    c.data(TO_CLIENT, 0, 1, HEARTBEAT_0_9_1 * 2)
    assert type(c.codec).__name__ == "Amqp091StreamDecoder"
