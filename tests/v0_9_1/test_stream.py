"""The stream decoder: splits, gaps, resynchronisation, hostile input, content, dialects."""

from __future__ import annotations

import hashlib
import json
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplens.decode.v0_9_1 import Amqp091StreamDecoder

from .conversation import BODIES, FRAME_MAX, body_hashes, conversation
from .encoder import Encoder, Typed
from .helpers import check_accounting, run, strip_ts

E = Encoder()
C2S, S2C = conversation()
PUBLISH = E.method(1, "basic", "publish", reserved_1=0, exchange="ex", routing_key="rk", mandatory=False, immediate=False)


def test_whole_conversation():
    frames, errors, facts = run(C2S, S2C)
    assert errors == []
    assert all(r["decode_error"] is None for r in frames)
    assert [r["body_sha256"] for r in frames if r["direction"] == "to_server" and r["body_sha256"]] == body_hashes()
    assert [r["body_sha256"] for r in frames if r["direction"] == "to_client" and r["body_sha256"]] == body_hashes()
    assert facts["user"] == "alice" and facts["vhost"] == "/vh" and facts["sasl_mechanism"] == "PLAIN"
    assert (facts["channel_max"], facts["frame_max"], facts["heartbeat"]) == (2047, FRAME_MAX, 60)
    assert facts["server_frame_max"] == 131072
    assert (facts["server_product"], facts["client_product"]) == ("RabbitMQ", "pika")
    assert json.loads(facts["server_capabilities_json"]) == {"publisher_confirms": True, "basic.nack": True}
    assert (facts["closed_by"], facts["close_code"], facts["close_text"]) == ("client", 200, "Normal shutdown")
    assert facts["close_ok_seen"] and facts["blocked_count"] == 1 and facts["last_blocked_reason"] == "low on memory"
    assert facts["messages_to_server"] == facts["messages_to_client"] == len(BODIES)
    assert facts["incomplete_messages_to_server"] == 0
    deliver = [r for r in frames if r["method_name"] == "deliver"]
    assert [r["delivery_tag"] for r in deliver] == [1, 2, 3]
    assert all(r["consumer_tag"] == "ctag" and r["exchange"] == "ex" for r in deliver)
    qos = next(r for r in frames if r["method_name"] == "qos")
    assert (qos["prefetch_count"], qos["prefetch_size"], qos["global_qos"]) == (10, 0, False)
    blocked = next(r for r in frames if r["method_name"] == "blocked")
    assert blocked["reason"] == "low on memory"


def test_message_seq_marks_every_frame_of_a_message():
    frames, _, _ = run(C2S)
    ch1 = [(r["frame_type"], r["message_seq"]) for r in frames if r["channel"] == 1 and r["frame_type"] != "method" or r["method_name"] == "publish"]
    assert ch1 == [
        ("method", 0), ("header", 0), ("body", 0),
        ("method", 1), ("header", 1), ("body", 1), ("body", 1), ("body", 1),
        ("method", 2), ("header", 2),
    ]


def test_split_at_every_byte_boundary_decodes_identically():
    data = C2S[:1200]
    whole, whole_err, _ = run(data)
    for cut in range(1, len(data)):
        frames, errors, _ = run(data, cuts=[cut])
        assert strip_ts(frames) == strip_ts(whole), cut
        assert strip_ts(errors) == strip_ts(whole_err)
        for r in frames:  # ts of the data() call that delivered the first byte
            assert r["ts_us"] == (1000 if r["stream_offset"] < cut else 1001)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, len(C2S) - 1), max_size=40))
def test_any_chunking_decodes_identically(cuts):
    whole, _, _ = run(C2S, S2C)
    frames, errors, _ = run(C2S, S2C, cuts=cuts)
    assert errors == []
    assert strip_ts(frames) == strip_ts(whole)


def test_byte_at_a_time():
    dec = Amqp091StreamDecoder("conn-1")
    for i in range(len(C2S)):
        dec.data("to_server", i, i, C2S[i : i + 1])
    dec.close()
    assert strip_ts(dec.drain_frames()) == strip_ts(run(C2S)[0])


# -- hostile input -------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400), st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6))
def test_any_bytes_yield_frames_or_errors_never_an_exception(a, b, cuts):
    run(a, b, cuts=cuts)
    run(b"AMQP\x00\x00\x09\x01" + a, b, cuts=cuts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, len(C2S) - 1), st.integers(0, 255), st.sampled_from(["flip", "insert", "delete"])), min_size=1, max_size=5),
    st.lists(st.integers(1, len(C2S) - 1), max_size=8),
    st.lists(st.tuples(st.integers(0, len(C2S) - 1), st.integers(1, 3000)), max_size=2),
)
def test_damaged_streams_keep_exact_accounting(edits, cuts, gap_specs):
    data = bytearray(C2S)
    for pos, value, kind in edits:
        pos = min(pos, len(data) - 1)
        if kind == "flip":
            data[pos] ^= value or 1
        elif kind == "insert":
            data[pos:pos] = bytes([value]) * 3
        else:
            del data[pos : pos + 1 + value % 7]
    gaps = [(a, min(a + n, len(data))) for a, n in gap_specs if a < len(data)]
    gaps = [g for i, g in enumerate(sorted(gaps)) if i == 0 or g[0] >= sorted(gaps)[i - 1][1]]
    frames, errors, facts = run(bytes(data), S2C, cuts=cuts, gaps=gaps)
    assert facts["internal_errors"] == 0


def test_frame_claiming_4_gib_is_an_error_not_an_allocation():
    huge = struct.pack(">BHI", 3, 1, 0xFFFFFFFF) + b"\x00" * 64
    t0 = time.perf_counter()
    frames, errors, _ = run(E.protocol_header() + huge + PUBLISH + E.heartbeat())
    assert time.perf_counter() - t0 < 1
    assert [e["reason"] for e in errors] == ["frame_too_large"]
    assert errors[0]["stream_offset"] == 8 and errors[0]["length"] == len(huge)
    assert [r["frame_type"] for r in frames] == ["protocol_header", "method", "heartbeat"]


def test_frame_claiming_4_gib_does_not_wait_for_the_bytes():
    dec = Amqp091StreamDecoder("c")
    dec.data("to_server", 0, 1, E.protocol_header() + struct.pack(">BHI", 1, 1, 0xFFFFFFF0))
    dec.data("to_server", 15, 2, PUBLISH)
    assert [r["method_name"] for r in dec.drain_frames()] == [None, "publish"]
    assert [e["reason"] for e in dec.drain_errors()] == ["frame_too_large"]


def test_field_table_nested_10000_deep():
    body = b""
    for _ in range(10_000):
        body = b"\x01nF" + struct.pack(">I", len(body)) + body
    table = struct.pack(">I", len(body)) + body
    declare = E.frame(1, 1, struct.pack(">HH", 50, 10) + b"\0\0" + b"\x01q" + b"\x00" + table)
    frames, errors, facts = run(E.protocol_header() + declare + PUBLISH)
    assert errors == []
    row = frames[1]
    assert row["method_name"] == "declare" and row["queue"] == "q"
    assert row["decode_error"].startswith("malformed_arguments: field tables nested deeper than 64")
    assert frames[2]["method_name"] == "publish" and facts["frame_decode_errors"] == 1


def test_garbage_on_5672():
    http = b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n" * 20
    frames, errors, facts = run(http, b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert frames == []
    assert [(e["direction"], e["reason"], e["length"]) for e in errors] == [
        ("to_server", "not_amqp", len(http)),
        ("to_client", "not_amqp", 28),
    ]
    assert errors[0]["raw"] == http[:4096] and errors[0]["raw_length"] == len(http)


def test_truncated_at_close():
    frames, errors, _ = run(E.protocol_header() + PUBLISH + PUBLISH[:10])
    assert [r["frame_type"] for r in frames] == ["protocol_header", "method"]
    assert [(e["reason"], e["stream_offset"], e["length"], e["raw"]) for e in errors] == [
        ("truncated_at_close", 8 + len(PUBLISH), 10, PUBLISH[:10])
    ]


def test_bad_frame_end_then_resync():
    bad = PUBLISH[:-1] + b"\x00"
    frames, errors, _ = run(E.protocol_header() + bad + PUBLISH + E.heartbeat())
    assert [e["reason"] for e in errors] == ["bad_frame_end"]
    assert errors[0]["length"] == len(bad)
    assert [r["frame_type"] for r in frames] == ["protocol_header", "method", "heartbeat"]


def test_unknown_frame_type_well_delimited_is_one_error_and_sync_holds():
    oob = E.frame(4, 1, struct.pack(">HH", 60, 40) + b"\0\0\x00\x00\x00")
    frames, errors, _ = run(E.protocol_header() + oob + PUBLISH)
    assert [(e["reason"], e["length"]) for e in errors] == [("unknown_frame_type", len(oob))]
    # the same bytes in 0-8 are an oob-method frame
    frames08, errors08, _ = run(Encoder("0-8").protocol_header() + oob)
    assert errors08 == [] and frames08[1]["frame_type"] == "oob_method" and frames08[1]["dialect"] == "0-8"


def test_channel_rules():
    rows, errors, _ = run(
        E.protocol_header()
        + E.heartbeat(channel=5)
        + E.method(3, "connection", "close", reply_code=200, reply_text="", class_id=0, method_id=0)
        + E.method(0, "basic", "ack", delivery_tag=1, multiple=False)
        + E.body(0, b"x")
    )
    assert errors == []
    assert [r["decode_error"].split(":")[0] for r in rows[1:]] == ["channel_rule"] * 4


def test_frames_over_the_negotiated_frame_max():
    tune_ok = E.method(0, "connection", "tune-ok", channel_max=0, frame_max=4096, heartbeat=0)
    big = E.body(1, b"y" * 5000)
    frames, errors, facts = run(E.protocol_header() + tune_ok + PUBLISH + big + PUBLISH)
    assert facts["frame_max"] == 4096
    assert [e["reason"] for e in errors] == ["frame_too_large"] and errors[0]["length"] == len(big)
    assert [r["method_name"] for r in frames] == [None, "tune-ok", "publish", "publish"]


def test_unknown_method_and_partial_arguments():
    unknown = E.frame(1, 1, struct.pack(">HH", 60, 999) + b"abc")
    cut = E.frame(1, 1, struct.pack(">HH", 60, 40) + b"\0\0\x02ex\x09rk")  # routing key runs off the frame
    frames, errors, _ = run(E.protocol_header() + unknown + cut)
    assert errors == []
    assert frames[1]["decode_error"].startswith("unknown_method") and frames[1]["class_name"] == "basic"
    assert frames[2]["decode_error"].startswith("malformed_arguments") and frames[2]["exchange"] == "ex"


# -- gaps and resynchronisation ----------------------------------------------------------

def test_resync_after_gap():
    whole, _, _ = run(C2S)
    start = 300
    end = 500
    frames, errors, facts = run(C2S, gaps=[(start, end)])
    after = [r for r in whole if r["stream_offset"] >= end]
    ours = [r for r in frames if r["stream_offset"] >= end]
    # the frame cut by the gap is lost; all frames after it come back (message seq/hash aside)
    lost_frame = next(r for r in whole if r["stream_offset"] < end <= r["stream_offset"] + r["size"])
    keep = [r for r in after if r["stream_offset"] > lost_frame["stream_offset"]]
    cols = ("stream_offset", "frame_type", "channel", "size", "class_id", "method_id", "delivery_tag")
    assert [tuple(r[c] for c in cols) for r in ours] == [tuple(r[c] for c in cols) for r in keep]
    assert {e["reason"] for e in errors} <= {"truncated_by_gap", "resync_skipped"}
    assert facts["gap_bytes_to_server"] == end - start


def test_gap_inside_a_large_body_skips_to_its_end():
    e = Encoder()
    body = e.body(1, b"z" * 20_000)
    data = e.protocol_header() + PUBLISH + e.header(1, 60, 20_000) + body + e.heartbeat() + PUBLISH
    body_at = data.index(body)
    frames, errors, _ = run(data, gaps=[(body_at + 5000, body_at + 6000)])
    assert [r["frame_type"] for r in frames] == ["protocol_header", "method", "header", "heartbeat", "method"]
    assert [(e["reason"], e["length"]) for e in errors] == [("truncated_by_gap", 5000), ("resync_skipped", len(body) - 6000)]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(C2S) - 2), st.integers(1, 2000))
def test_any_gap_keeps_accounting_and_recovers(start, length):
    end = min(start + length, len(C2S))
    frames, errors, facts = run(C2S, S2C, gaps=[(start, end)])
    closing = [r for r in frames if r["method_name"] == "close"]
    if end < len(C2S) - 34:  # the final connection.close is after the gap: it must be found again
        assert closing and closing[-1]["direction"] == "to_server"


def test_capture_starting_mid_stream():
    dec = Amqp091StreamDecoder("c")
    start = C2S.index(b"\x00\x3c\x00\x28") - 7 - 17  # inside the frame before the first publish
    dec.gap("to_server", 0, start, 1)
    dec.data("to_server", start, 2, C2S[start:])
    dec.close()
    frames, errors = dec.drain_frames(), dec.drain_errors()
    check_accounting(frames, errors, {"to_server": len(C2S)}, {"to_server": start})
    assert [e["reason"] for e in errors] == ["resync_skipped"] and errors[0]["length"] == 17
    assert frames[0]["method_name"] == "publish"
    facts = dec.connection_facts()
    assert facts["dialect"] == "0-9-1" and facts["dialect_source"] == "framing"


def test_overlapping_and_skipped_offsets_from_a_sloppy_feeder():
    dec = Amqp091StreamDecoder("c")
    data = E.protocol_header() + PUBLISH + PUBLISH
    dec.data("to_server", 0, 1, data[:20])
    dec.data("to_server", 10, 2, data[10:30])  # overlaps: only the new tail counts
    dec.data("to_server", 30, 3, data[30:])
    dec.close()
    assert [r["method_name"] for r in dec.drain_frames()] == [None, "publish", "publish"]
    assert dec.connection_facts()["stream_bytes_to_server"] == len(data)


# -- content ------------------------------------------------------------------------------

def test_interleaved_channels_and_body_checks():
    e = Encoder()
    data = (
        e.protocol_header()
        + e.method(1, "basic", "publish", reserved_1=0, exchange="", routing_key="a", mandatory=False, immediate=False)
        + e.method(2, "basic", "publish", reserved_1=0, exchange="", routing_key="b", mandatory=False, immediate=False)
        + e.header(1, 60, 6)
        + e.header(2, 60, 2)
        + e.body(1, b"abc")
        + e.body(2, b"xy")
        + e.body(1, b"def")
        + e.method(2, "basic", "publish", reserved_1=0, exchange="", routing_key="c", mandatory=False, immediate=False)
        + e.header(2, 60, 1)
        + e.body(2, b"too long")
    )
    frames, errors, facts = run(data, body_prefix_bytes=4)
    done = [(r["channel"], r["message_seq"], r["body_sha256"], r["body_prefix"]) for r in frames if r["body_sha256"]]
    assert done == [(2, 0, hashlib.sha256(b"xy").hexdigest(), b"xy"), (1, 0, hashlib.sha256(b"abcdef").hexdigest(), b"abcd")]
    assert frames[-1]["decode_error"].startswith("body_overflow") and frames[-1]["message_seq"] == 1
    assert facts["messages_to_server"] == 2 and facts["incomplete_messages_to_server"] == 1


def test_header_class_must_match_the_method():
    e = Encoder("0-8")
    data = e.protocol_header() + e.method(1, "basic", "publish", ticket=0, exchange="", routing_key="", mandatory=False, immediate=False) + e.header(1, 70, 0)
    frames, _, _ = run(data)
    assert frames[2]["decode_error"].startswith("content_class_mismatch")


# -- dialects ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", ["0-8", "0-9", "0-9-1"])
def test_dialect_from_the_protocol_header(dialect):
    e = Encoder(dialect)
    frames, errors, facts = run(e.protocol_header() + e.method(1, "channel", "flow", active=True))
    assert errors == []
    assert {r["dialect"] for r in frames} == {dialect} and facts["dialect_source"] == "protocol_header"
    assert frames[1]["active"] is True


def test_server_rejects_the_version():
    frames, errors, facts = run(Encoder("0-9").protocol_header(), Encoder("0-9-1").protocol_header())
    assert errors == []
    assert [(r["direction"], r["frame_type"], r["dialect"]) for r in frames] == [
        ("to_server", "protocol_header", "0-9"),
        ("to_client", "protocol_header", "0-9-1"),
    ]
    assert facts["protocol_rejected"] and facts["server_protocol_header"] == "414d515000000901"
    assert facts["client_protocol_header"] == "414d515001010009"


def test_other_amqp_versions_are_not_decoded_here():
    amqp10 = b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x00\x17\x02\x00\x00\x00" + b"\x00" * 15
    frames, errors, facts = run(amqp10, b"AMQP\x00\x01\x00\x00")
    assert [r["frame_type"] for r in frames] == ["protocol_header", "protocol_header"]
    assert json.loads(frames[0]["arguments_json"])["dialect"] == "1.0"
    assert [(e["reason"], e["length"]) for e in errors] == [("unsupported_dialect", len(amqp10) - 8)]


def test_mid_stream_connection_start_of_0_8_switches_the_tables():
    e8 = Encoder("0-8")
    start = e8.method(0, "connection", "start", version_major=8, version_minor=0, server_properties={}, mechanisms="PLAIN", locales="en_US")
    access = e8.method(0, "access", "request-ok", ticket=1)  # class 30 exists only in 0-8/0-9
    frames, errors, facts = run(b"", start + access)
    assert facts["dialect"] == "0-8" and facts["dialect_source"] == "connection_start"
    assert frames[1]["method_name"] == "request-ok" and frames[1]["dialect"] == "0-8"


def test_spec_letters_option():
    e = Encoder(letters="spec")
    declare = e.method(1, "queue", "declare", reserved_1=0, queue="q", passive=False, durable=False, exclusive=False,
                       auto_delete=False, no_wait=False, arguments={"k": Typed("s", "txt")})
    spec_rows, _, _ = run(declare, dialect="0-9-1", field_table_letters="spec")
    assert json.loads(spec_rows[0]["arguments_json"])["arguments"] == {"k": "txt"}
    rabbit_rows, _, _ = run(declare, dialect="0-9-1")
    assert rabbit_rows[0]["decode_error"] is not None  # 's' is an int16 to RabbitMQ: the table no longer parses


def test_a_decoder_bug_becomes_an_error_row_not_an_exception(monkeypatch):
    from amqplens.decode.v0_9_1 import stream

    def boom(self, row, direction, channel, payload):
        raise RuntimeError("bug")

    monkeypatch.setitem(stream._FRAME_HANDLERS, "heartbeat", boom)
    data = E.protocol_header() + PUBLISH + E.heartbeat() + PUBLISH
    frames, errors, facts = run(data)
    assert facts["internal_errors"] == 1
    assert [r["frame_type"] for r in frames] == ["protocol_header", "method"]
    assert [(e["reason"], e["stream_offset"], e["length"]) for e in errors] == [("internal_error", 29, len(data) - 29)]
    assert facts["frames_to_server"] == 2
