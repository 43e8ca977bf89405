"""Golden wire cases of the two drafts, written from the seeds' own diagrams and grammar."""

from __future__ import annotations

import hashlib
import json

import pytest

from amqplens.decode.drafts import AMQP_FAST, D0_9_DRAFT, decode_streams, parse_draft, parse_fast
from tests.drafts.encoder import (HEADER_DRAFT, HEADER_FAST, draft_frame, draft_header, draft_method, fast_extended,
                                  fast_frame, fast_header, fast_method)  # fmt: skip
from tests.v0_10.helpers import DIRECTIONS


def decode(dialect, to_server=b"", to_client=b""):
    frames, errors, facts = decode_streams(to_server, to_client, dialect=dialect)
    for d, data in zip(DIRECTIONS, (to_server, to_client)):
        covered = sum(r["size"] for r in frames if r["direction"] == d) + sum(e["length"] for e in errors if e["direction"] == d)
        assert covered == len(data)
    return frames, errors, facts


# -- seed 000: the 0-9 draft ------------------------------------------------------------------
def test_draft_general_frame_format():
    # seed 000 "General Frame Format": | type | cycle | channel | size | payload | frame-end |, octet octet short long
    raw = bytes.fromhex("01 07 0001 00000004 000a000b ce")
    frame = parse_draft(raw, 0)
    assert (frame.ftype, frame.cycle, frame.channel, frame.total, raw[frame.payload]) == (1, 7, 1, 13, bytes.fromhex("000a000b"))


@pytest.mark.parametrize("ftype, name", [(1, "method"), (2, "header"), (3, "body"), (4, "oob_method"), (5, "oob_header"),
                                         (6, "oob_body"), (7, "trace"), (8, "heartbeat")])  # fmt: skip
def test_draft_frame_types_1_to_8(ftype, name):
    # seed 000: "AMQP defines these frame types: Type = 1, METHOD ... Type = 8, HEARTBEAT"
    frames, errors, _ = decode(D0_9_DRAFT, to_client=draft_frame(ftype, 0 if ftype in (7, 8) else 1))
    assert [r["frame_type"] for r in frames] == [name] and not errors


def test_draft_method_and_content_with_the_cycle_octet():
    # grammar: method-frame = %d1 frame-properties method-payload frame-end; method-payload = class-id method-id *amqp-field
    stream = (HEADER_DRAFT + draft_method(1, 60, 40, b"\x00\x01x", cycle=3) + draft_header(1, 60, 0, 5)
              + draft_frame(3, 1, b"he") + draft_frame(3, 1, b"llo"))  # fmt: skip
    frames, errors, facts = decode(D0_9_DRAFT, to_server=stream)
    method, header, b1, b2 = frames[1:]
    assert (method["class_id"], method["method_id"], json.loads(method["arguments_json"])) == (60, 40, {"cycle": 3, "arguments": "000178"})
    assert (header["class_id"], header["body_size"], header["message_seq"]) == (60, 5, 1)
    assert b2["body_sha256"] == hashlib.sha256(b"hello").hexdigest() and b1["body_sha256"] is None
    assert facts["dialect"] == D0_9_DRAFT and facts["messages_to_server"] == 1 and not errors


def test_draft_structured_content():
    # seed 000 "Structured Content": [parent-header weight = 1] [child-header weight = 0] [child-body] [parent-body]
    stream = draft_header(1, 60, 1, 3) + draft_header(1, 60, 0, 2) + draft_frame(3, 1, b"cc") + draft_frame(3, 1, b"ppp")
    frames, errors, _ = decode(D0_9_DRAFT, to_client=stream)
    assert [r["decode_error"] for r in frames] == [None] * 4
    assert [json.loads(r["properties_json"])["depth"] for r in frames[:2]] == [0, 1]
    assert {r["message_seq"] for r in frames} == {1} and frames[-1]["body_sha256"] == hashlib.sha256(b"ppp").hexdigest()


def test_draft_weight_mismatch_is_detected():
    # seed 000: "The peer MUST correctly detect a mismatch between the content weight and the frames that follow"
    frames, _, _ = decode(D0_9_DRAFT, to_client=draft_header(1, 60, 1, 3) + draft_frame(3, 1, b"ppp"))
    assert frames[1]["decode_error"].startswith("content_weight_mismatch")


def test_draft_trace_and_heartbeat_live_on_channel_zero():
    # grammar: trace = %d7 cycle %d0 payload-size ...; heartbeat = %d8 cycle %d0 %d0 frame-end; "Trace frames MUST have a channel number of zero"
    frames, _, _ = decode(D0_9_DRAFT, to_client=draft_frame(7, 0, b"t") + draft_frame(7, 2, b"t") + draft_frame(8, 0))
    assert [r["decode_error"] is None for r in frames] == [True, False, True]


def test_draft_bad_frame_end_resynchronises():
    # seed 000: "When a peer reads a frame it MUST check that the frame-end is valid"
    bad = draft_frame(1, 1, b"\x00\x0a\x00\x0b")[:-1] + b"\x00"
    frames, errors, _ = decode(D0_9_DRAFT, to_server=HEADER_DRAFT + bad + draft_frame(8, 0) + draft_frame(8, 0))
    assert errors[0]["reason"] == "bad_frame_end" and [r["frame_type"] for r in frames[1:]] == ["heartbeat", "heartbeat"]


# -- seed 003: AMQP/Fast 0.9a5 --------------------------------------------------------------
def test_fast_frame_header_size_counts_the_frame_end():
    # seed 003: | type | channel | size | frame body (size-1 octets) | frame-end |; "The size field includes the end field"
    raw = bytes.fromhex("01 05 0005 0a0b0000 ce")
    frame = parse_fast(raw, 0)
    assert (frame.ftype, frame.channel, frame.total, raw[frame.payload]) == (1, 5, 9, bytes.fromhex("0a0b0000"))  # "size+4"
    assert parse_fast(bytes.fromhex("08 00 0000"), 0)[0] == "bad_frame_size"  # "The minimum value for the size field is 1"


def test_fast_method_body_and_content():
    # seed 003 "Method Frame Body Wire Format": | class | method | reserved | arguments |, octet octet short
    stream = HEADER_FAST + fast_method(1, 10, 11, b"\x05guest") + fast_header(1, 3, 0, 4) + fast_frame(3, 1, b"body")
    frames, errors, facts = decode(AMQP_FAST, to_server=stream)
    method, header, body = frames[1:]
    assert (method["class_id"], method["method_id"]) == (10, 11)
    assert "guest" not in method["arguments_json"]  # connection class from the client: may carry credentials
    assert (header["class_id"], header["body_size"]) == (3, 4) and body["body_sha256"] == hashlib.sha256(b"body").hexdigest()
    assert facts["dialect"] == AMQP_FAST and not errors


def test_fast_reserved_short_must_be_zero():
    frames, _, _ = decode(AMQP_FAST, to_client=fast_frame(1, 1, b"\x0a\x0b\x00\x01"))
    assert frames[0]["decode_error"].startswith("reserved_not_zero")


def test_fast_meta_frame_then_extended_frame():
    # seed 003 "Meta Frames": META (channel 0, size 0) then | type | flags | channel (short) | frame-size (long long) |
    big = bytes(70000)  # larger than a normal frame body can be (64KB-1)
    stream = fast_header(1, 3, 0, len(big)) + fast_extended(3, 1, big) + fast_extended(1, 300, b"\x0a\x0b\x00\x00")
    frames, errors, _ = decode(AMQP_FAST, to_client=stream)
    assert [r["frame_type"] for r in frames] == ["header", "meta", "body", "meta", "method"] and not errors
    assert frames[2]["size"] == 12 + len(big) + 1 and frames[2]["body_sha256"] == hashlib.sha256(big).hexdigest()
    assert frames[4]["channel"] == 300 and json.loads(frames[4]["arguments_json"])["extended"] is True


def test_fast_meta_frame_with_a_size_is_an_error():
    frames, errors, _ = decode(AMQP_FAST, to_server=HEADER_FAST + b"\x09\x00\x00\x02\x00\xce" + fast_frame(8, 0) + fast_frame(8, 0))
    assert errors[0]["reason"] == "bad_meta_frame" and [r["frame_type"] for r in frames[1:]] == ["heartbeat", "heartbeat"]
