"""Frames that frame but do not decode become decode_errors rows of stage ``frame`` (DESIGN: "a field table
nested a thousand deep ... become[s] a row in decode_errors"), with the frame's own bytes.

The oracle for ``raw`` and ``raw_sha256`` is the input itself: the injected frame's bytes, cut out of what was
fed. Bad input tried: a field table nested 10,000 deep (0-9-1), a 1.0 list claiming 2^32 - 1 elements, a
connection.start-ok whose arguments do not decode (its bytes hold a password), a queue.declare whose arguments
name an ``Authorization`` header and then break, fed whole and in small random chunks.
"""

from __future__ import annotations

import hashlib
import random
import struct

import pytest

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.v0_9_1 import Amqp091StreamDecoder
from amqplens.decode.v1_0 import Amqp10StreamDecoder
from tests.accounting import feed
from tests.e2e import hostile_captures as H
from tests.v0_9_1.encoder import Encoder
from tests.v1_0 import encoder as E10

E = Encoder()
PUBLISH = E.method(1, "basic", "publish", reserved_1=0, exchange="ex", routing_key="rk", mandatory=False, immediate=False)
PASSWORD = b"s3cret-Pa55word"


def _decode(dec, to_server: bytes, chunked: bool) -> tuple[list, list, list]:
    cuts = sorted(random.Random(len(to_server)).sample(range(1, len(to_server)), 40)) if chunked else ()
    feed(dec, "to_server", to_server, cuts)
    dec.close()
    return dec.drain_frames(), dec.drain_errors(), dec.drain_frame_errors()


@pytest.mark.parametrize("chunked", [False, True])
def test_a_nested_table_frame_is_one_frame_row_with_its_bytes(chunked):
    declare = H.nested_table_declare(10_000)
    stream = E.protocol_header() + declare + PUBLISH
    frames, errors, frame_errors = _decode(Amqp091StreamDecoder("c"), stream, chunked)
    assert errors == []  # every byte is in a frame: the byte accounting is unchanged
    bad = [f for f in frames if f["decode_error"]]
    assert [f["stream_offset"] for f in bad] == [8]
    [row] = frame_errors
    assert (row["stream_offset"], row["length"], row["raw_length"]) == (8, len(declare), len(declare))
    assert row["reason"] == "malformed_arguments" and "nested deeper than 64" in row["detail"]
    assert row["raw"] == declare[:4096] and row["raw_sha256"] == hashlib.sha256(declare).hexdigest()
    assert row["ts_us"] == bad[0]["ts_us"]


def test_the_raw_bytes_are_capped_and_the_hash_covers_the_whole_frame():
    declare = H.nested_table_declare(200)
    frames, _, [row] = _decode(Amqp091StreamDecoder("c", max_error_bytes=64), E.protocol_header() + declare, False)
    assert row["raw"] == declare[:64] and row["raw_sha256"] == hashlib.sha256(declare).hexdigest()
    assert row["length"] == len(declare)


def test_a_1_0_list_claiming_2_32_elements_is_a_frame_row():
    stream = E10.AMQP_HEADER + H.LIST_CLAIM
    frames, errors, [row] = _decode(Amqp10StreamDecoder("c"), stream, False)
    assert errors == []
    bad = [f for f in frames if f["decode_error"]]
    assert len(bad) == 1 and bad[0]["decode_error"].startswith(row["reason"] + ": ")
    assert (row["stream_offset"], row["length"], row["raw"]) == (8, len(H.LIST_CLAIM), H.LIST_CLAIM)


def test_frames_that_decode_have_no_frame_rows():
    _, _, frame_errors = _decode(Amqp091StreamDecoder("c"), E.protocol_header() + PUBLISH + PUBLISH, True)
    assert frame_errors == []


def test_a_start_ok_that_does_not_decode_keeps_only_its_hash():
    # connection.start-ok: a client-properties table whose length runs past the frame, then the PLAIN response
    args = struct.pack(">HH", 10, 11) + struct.pack(">I", 4000) + b"\x05PLAIN" + struct.pack(">I", 22) + b"\0guest\0" + PASSWORD
    start_ok = E.frame(1, 0, args)
    frames, _, [row] = _decode(Amqp091StreamDecoder("c"), E.protocol_header() + start_ok, False)
    assert row["raw"] is None and "withheld" in row["detail"]
    assert row["raw_sha256"] == hashlib.sha256(start_ok).hexdigest()
    assert not any(PASSWORD in repr(v).encode() for r in frames + [row] for v in r.values())


def _declare_naming(header: str) -> bytes:
    """queue.declare whose arguments table holds ``header`` = a long string, then an unknown type letter."""
    value = b"Bearer " + PASSWORD
    table = bytes([len(header)]) + header.encode() + b"S" + struct.pack(">I", len(value)) + value + b"\x01x\xff"
    return E.frame(1, 1, struct.pack(">HH", 50, 10) + b"\0\0" + b"\x01q" + b"\x00" + struct.pack(">I", len(table)) + table)


@pytest.mark.parametrize(("names", "kept"), [((), True), (("authorization",), False)])
def test_undecoded_frames_naming_a_redacted_header_keep_only_their_hash(names, kept):
    declare = _declare_naming("Authorization")
    consumer = DecodingConsumer("c", DecodeOptions(redact_headers=names), lambda *a: None)
    stream = E.protocol_header() + declare
    consumer.data("to_server", 0, 1, stream)
    consumer.codec.close()
    frames = consumer.drain_frames()
    assert [f["stream_offset"] for f in frames if f["decode_error"]] == [8]
    [row] = consumer.drain_frame_errors()
    assert row["raw_sha256"] == hashlib.sha256(declare).hexdigest()
    assert (row["raw"] == declare) is kept and (row["raw"] is None) is not kept


def test_tls_on_an_amqp_port_is_one_tls_row_per_direction_and_no_frames():
    consumer = DecodingConsumer("c", DecodeOptions(), lambda *a: None)
    for direction, data in H.TLS:
        consumer.data(direction, 0, 1, data[:20])
        consumer.data(direction, 20, 2, data[20:])
    consumer.codec.close()
    assert consumer.drain_frames() == []
    got = sorted((e["direction"], e["reason"], e["stream_offset"], e["length"]) for e in consumer.drain_errors())
    assert got == [("to_client", "tls", 0, len(H.TLS[1][1])), ("to_server", "tls", 0, len(H.TLS[0][1]))]
    assert consumer.connection_facts()["dialect"] is None


def test_a_frame_error_carries_its_parts_and_is_its_text_everywhere():
    """``FrameError`` (amqplens/decode/errors.py): the row's column is the text, the error row takes the parts as
    they are; a text that is no FrameError (the compiled path's, a broker log's) is still read as reason: detail."""
    import pyarrow as pa

    from amqplens.decode.errors import FrameError
    from amqplens.decode.streaming import decode_error_parts

    fe = FrameError("unknown_method", "class 60 method 99: not in the 0-9-1 tables")
    assert fe == "unknown_method: class 60 method 99: not in the 0-9-1 tables" and isinstance(fe, str)
    assert decode_error_parts(fe) == ("unknown_method", "class 60 method 99: not in the 0-9-1 tables")
    assert decode_error_parts(str(fe)) == decode_error_parts(fe)  # the text reads back the same
    assert pa.array([fe, None], pa.string()).to_pylist() == [str(fe), None]
    assert decode_error_parts("no reason here") == ("frame_decode_error", "no reason here")


@pytest.mark.parametrize("chunked", [False, True])
def test_the_codecs_errors_are_frame_errors_whose_parts_match_their_text(chunked):
    """Every frame the codecs flag on the hostile inputs carries a FrameError whose parts are what its text says."""
    from amqplens.decode.errors import FrameError
    from amqplens.decode.streaming import decode_error_parts

    bad = H.nested_table_declare(10_000)  # a field table nested 10,000 deep: one frame that frames, not decodes
    frames, _, frame_errors = _decode(Amqp091StreamDecoder("c"), b"AMQP\x00\x00\x09\x01" + bad + PUBLISH, chunked)
    flagged = [f["decode_error"] for f in frames if f["decode_error"]]
    assert flagged and all(isinstance(e, FrameError) for e in flagged)
    for e in flagged:
        reason, _, detail = str(e).partition(": ")
        assert decode_error_parts(e) == (reason, detail)
    assert [(r["reason"], r["detail"]) for r in frame_errors] == [decode_error_parts(e) for e in flagged]
