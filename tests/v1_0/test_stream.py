"""The stream decoder on synthetic connections: framing, SASL/AMQP/TLS headers, transfers into
messages, resynchronisation, byte accounting and the row contract."""

from __future__ import annotations

import hashlib
import json
import random
import struct

import pytest

from amqplens.decode.v0_9_1 import FRAME_KEYS
from amqplens.decode.v1_0 import FRAME_KEYS_1_0, Amqp10StreamDecoder
from amqplens.contracts.tables import FRAMES

from . import encoder as E
from .conversation import BIG_BODY, SMALL_BODY, conversation, message
from .helpers import performatives, run, strip_ts

C2S, S2C = conversation()


def _transfers(frames, direction="to_server"):
    return [r for r in frames if r["performative"] == "transfer" and r["direction"] == direction]


def test_frame_keys_are_0_9_1_keys_plus_the_1_0_columns_of_the_frames_table():
    table = [c.name for c in FRAMES.columns]
    ours_1_0 = FRAME_KEYS_1_0[len(FRAME_KEYS) :]
    assert FRAME_KEYS_1_0[: len(FRAME_KEYS)] == FRAME_KEYS
    assert list(ours_1_0) == [c for c in table if c in ours_1_0] and set(ours_1_0) <= set(table)
    assert set(ours_1_0) == set(table[table.index("performative") : table.index("target_address") + 1])


def test_a_whole_conversation():
    frames, errors, facts = run(C2S, S2C)
    assert errors == []
    assert performatives(frames, "to_server") == [
        "protocol_header", "sasl-init", "protocol_header", "open", "begin", "attach", "attach", "flow", "transfer",
        "transfer", "empty", "transfer", "transfer", "transfer", "transfer", "disposition", "detach", "end", "close",
    ]  # fmt: skip
    assert performatives(frames, "to_client") == [
        "protocol_header", "sasl-mechanisms", "sasl-outcome", "protocol_header", "open", "begin", "attach", "attach",
        "flow", "transfer", "disposition", "disposition", "empty", "detach", "end", "close",
    ]  # fmt: skip
    assert {r["dialect"] for r in frames} == {"1.0"}
    assert all(r["decode_error"] is None for r in frames)
    by_type = {r["frame_type"] for r in frames}
    assert by_type == {"protocol_header", "sasl", "amqp", "empty"}
    sasl = [r for r in frames if r["frame_type"] == "sasl"]
    assert {r["performative"] for r in sasl} == {"sasl-init", "sasl-mechanisms", "sasl-outcome"}
    assert [r["descriptor"] for r in sasl] == [0x41, 0x40, 0x44]
    attach = next(r for r in frames if r["performative"] == "attach")
    assert (attach["link_name"], attach["handle"], attach["role"], attach["snd_settle_mode"], attach["rcv_settle_mode"]) == (
        "sender-link", 0, "sender", "mixed", "first")
    assert (attach["source_address"], attach["target_address"], attach["delivery_count"], attach["channel"]) == ("client-src", "/queue/q", 0, 1)
    flow = next(r for r in frames if r["performative"] == "flow")
    assert (flow["handle"], flow["link_credit"], flow["delivery_count"], flow["drain"], flow["echo"]) == (1, 10, 0, False, None)
    assert (flow["next_incoming_id"], flow["incoming_window"], flow["next_outgoing_id"], flow["outgoing_window"]) == (0, 100, 0, 100)
    dispositions = [r for r in frames if r["performative"] == "disposition" and r["direction"] == "to_client"]
    assert [(r["role"], r["first"], r["last"], r["settled"], r["state"]) for r in dispositions] == [
        ("receiver", 0, 1, True, "accepted"), ("receiver", 2, None, True, "rejected")]
    assert (dispositions[1]["error_condition"], dispositions[1]["error_description"]) == ("amqp:invalid-field", "bad")
    detach = next(r for r in frames if r["performative"] == "detach" and r["direction"] == "to_client")
    assert (detach["error_condition"], detach["error_description"]) == ("amqp:link:detach-forced", "bye")
    assert facts["closed_by"] == "client" and facts["close_seen_server"]
    assert (facts["client_protocol_header"], facts["protocol_rejected"], facts["sasl"]) == ("414d515003010000", False, True)


def test_connection_facts():
    _, _, facts = run(C2S, S2C)
    expected = {
        "dialect": "1.0", "dialect_source": "protocol_header", "channel_max": 9, "frame_max": 1200,
        "client_container_id": "client-1", "client_hostname": "localhost", "client_max_frame_size": 1200,
        "client_channel_max": 9, "client_desired_capabilities_json": '["ANONYMOUS-RELAY"]',
        "server_container_id": "broker", "server_max_frame_size": 4096, "server_channel_max": 99,
        "server_idle_timeout_ms": 30000, "server_offered_capabilities_json": '["ANONYMOUS-RELAY"]',
        "server_product": "test-broker", "sasl_mechanisms": '["PLAIN","ANONYMOUS"]', "sasl_mechanism": "PLAIN",
        "sasl_hostname": "localhost", "sasl_outcome": 0, "sasl_outcome_name": "ok", "user": "guest",
        "stream_bytes_to_server": len(C2S), "frame_bytes_to_server": len(C2S), "error_bytes_to_server": 0,
        "frames_to_server": 19, "frames_to_client": 16, "frame_decode_errors": 0,
    }  # fmt: skip
    assert {k: facts[k] for k in expected} == expected
    dec = Amqp10StreamDecoder("c")  # the server speaks first this time: its close is the first
    dec.data("to_client", 0, 1, S2C)
    dec.data("to_server", 0, 2, C2S)
    dec.close()
    facts = dec.connection_facts()
    assert (facts["closed_by"], facts["close_condition"], facts["close_description"]) == ("server", "amqp:connection:forced", "shutdown")


def test_a_server_asking_for_sasl_rejects_the_plain_header():
    _, _, facts = run(E.AMQP_HEADER, E.SASL_HEADER)
    assert facts["protocol_rejected"] is True


def test_transfers_reassemble_per_link():
    frames, _, facts = run(C2S, S2C)
    t = _transfers(frames)
    assert [r["message_seq"] for r in t] == [0, 1, 1, 1, 2, 2]
    assert [r["delivery_id"] for r in t] == [0, 1, 1, 1, 2, 2]  # continuations take the first transfer's id
    assert [r["more"] for r in t] == [None, True, True, False, True, None]
    assert [r["aborted"] for r in t] == [None, None, None, None, None, True]
    assert [r["delivery_tag_bin"] for r in t] == [b"t0", b"t1", None, None, b"t2", None]
    assert [r["body_size"] for r in t] == [len(SMALL_BODY), None, None, len(BIG_BODY), None, None]
    assert t[0]["body_sha256"] == hashlib.sha256(SMALL_BODY).hexdigest()
    assert t[3]["body_sha256"] == hashlib.sha256(BIG_BODY).hexdigest()
    assert t[1]["properties_json"] is None and t[5]["body_sha256"] is None
    props = json.loads(t[3]["properties_json"])
    assert props == {
        "header": {"durable": True, "priority": 4},
        "message_annotations": {"x-opt-jms-dest": 0},
        "properties": {"message_id": "big", "to": "/queue/q"},
        "application_properties": {"n": -5},
        "footer": {"x-sum": 7},
        "body": ["data"],
    }
    assert all(r["body_prefix"] is None for r in t)
    assert (facts["messages_to_server"], facts["incomplete_messages_to_server"], facts["messages_to_client"]) == (2, 1, 1)
    received = _transfers(frames, "to_client")
    assert [(r["handle"], r["message_seq"], r["body_size"]) for r in received] == [(8, 0, 13)]


@pytest.mark.parametrize("cut", range(0, 400, 7))
def test_a_message_split_anywhere_over_two_transfers(cut):
    body = bytes(range(200)) * 2
    payload = message(body, "split")
    c = (
        E.AMQP_HEADER
        + E.performative("transfer", payload=payload[:cut], handle=3, delivery_id=9, delivery_tag=b"a", more=True)
        + E.performative("transfer", payload=payload[cut:], handle=3, more=False)
    )
    frames, errors, _ = run(c)
    last = frames[-1]
    assert errors == [] and last["decode_error"] is None
    assert (last["body_size"], last["body_sha256"], last["delivery_id"]) == (len(body), hashlib.sha256(body).hexdigest(), 9)
    assert json.loads(last["properties_json"])["properties"]["message_id"] == "split"


def test_body_prefix_and_other_body_sections():
    seq = E.section("amqp-sequence", E.lst(E.uint(1), E.string("two")))
    c = (
        E.AMQP_HEADER
        + E.performative("transfer", payload=E.section("data", E.binary(b"abc")) + E.section("data", E.binary(b"defg")), handle=0, delivery_id=0)
        + E.performative("transfer", payload=seq + seq, handle=0, delivery_id=1)
        + E.performative("transfer", payload=E.section("data", E.binary(b"")), handle=0, delivery_id=2)
        + E.performative("transfer", handle=0, delivery_id=3)  # no payload at all
    )
    frames, errors, _ = run(c, body_prefix_bytes=5)
    t = _transfers(frames)
    assert errors == [] and all(r["decode_error"] is None for r in t)
    assert (t[0]["body_size"], t[0]["body_sha256"], t[0]["body_prefix"]) == (7, hashlib.sha256(b"abcdefg").hexdigest(), b"abcde")
    seq_value = E.encode(E.lst(E.uint(1), E.string("two")))
    assert t[1]["body_sha256"] == hashlib.sha256(seq_value * 2).hexdigest()
    assert json.loads(t[1]["properties_json"]) == {"body": ["amqp-sequence", "amqp-sequence"]}
    assert (t[2]["body_size"], t[3]["body_size"], t[3]["properties_json"]) == (0, 0, None)
    assert [r["message_seq"] for r in t] == [0, 1, 2, 3]


def test_bad_sections_are_a_decode_error_not_a_lost_frame():
    cases = {
        b"\x41\x41": "bad_section",  # not a described type
        E.section("header", E.lst(E.boolean(True)))[:-1]: "incomplete_section",
        E.section("data", E.string("not binary")): "not binary",
        b"\x00\x53\x70\xc0\x02\x09\x41": "bad_section",  # header list claims 9 elements in 1 byte
    }
    for payload, error in cases.items():
        frames, errors, _ = run(E.AMQP_HEADER + E.performative("transfer", payload=payload, handle=0, delivery_id=0))
        assert errors == [] and error in frames[-1]["decode_error"], (payload, frames[-1]["decode_error"])


def test_interleaved_links_and_an_unknown_section():
    unknown = E.encode((0x00, (E.symbol("x-vendor:section"), E.string("hi"))))
    c = (
        E.AMQP_HEADER
        + E.performative("transfer", payload=message(b"A" * 50)[:30], handle=1, delivery_id=0, more=True)
        + E.performative("transfer", payload=unknown + E.section("data", E.binary(b"B")), handle=2, delivery_id=1)
        + E.performative("transfer", payload=message(b"A" * 50)[30:], handle=1)
    )
    frames, errors, _ = run(c)
    t = _transfers(frames)
    assert [(r["handle"], r["message_seq"], r["delivery_id"], r["body_size"]) for r in t] == [(1, 0, 0, None), (2, 0, 1, 1), (1, 0, 0, 50)]
    assert json.loads(t[1]["properties_json"])["unknown_sections"] == [{"descriptor": "x-vendor:section", "value": "hi"}]


def test_extended_header_and_empty_frames():
    begin = E.encode(E.composite("begin", next_outgoing_id=1, incoming_window=2, outgoing_window=3))
    c = E.AMQP_HEADER + E.frame(begin, channel=5, doff=4, ext=b"\xde\xad\xbe\xef" * 2) + E.frame(channel=7) + E.frame(doff=3, ext=b"\x00" * 4)
    frames, errors, _ = run(c)
    assert errors == []
    assert [(r["frame_type"], r["channel"], r["size"], r["performative"]) for r in frames[1:]] == [
        ("amqp", 5, 16 + len(begin), "begin"), ("empty", 7, 8, None), ("empty", 0, 12, None)]
    assert frames[1]["next_outgoing_id"] == 1


def test_tls_header_leaves_the_rest_as_one_error_row():
    c = E.TLS_HEADER + b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 4
    s = E.TLS_HEADER + b"\x16\x03\x03\x00\x10" + b"x" * 16
    frames, errors, facts = run(c, s, cuts=(3, 20, 100))
    assert [(r["frame_type"], r["direction"]) for r in frames] == [("protocol_header", "to_server"), ("protocol_header", "to_client")]
    assert [(e["direction"], e["reason"], e["stream_offset"], e["length"]) for e in errors] == [
        ("to_server", "tls", 8, len(c) - 8), ("to_client", "tls", 8, len(s) - 8)]
    assert errors[0]["raw"] == c[8 : 8 + 4096]
    assert facts["tls"] is True


def test_another_protocol_header_makes_the_rest_unsupported():
    s = b"AMQP\x00\x00\x09\x01" + b"\x01\x00\x00"
    frames, errors, _ = run(C2S[:8], s)
    assert [e["reason"] for e in errors] == ["unsupported_dialect"]
    assert json.loads(frames[1]["arguments_json"])["dialect"] == "0-9-1"


@pytest.mark.parametrize(
    "bad,reason",
    [
        (struct.pack(">IBBH", 4, 2, 0, 0), "bad_frame_header"),  # size < 8
        (struct.pack(">IBBH", 16, 1, 0, 0) + b"\x00" * 8, "bad_frame_header"),  # doff < 2
        (struct.pack(">IBBH", 12, 4, 0, 0) + b"\x00" * 4, "bad_frame_header"),  # doff*4 > size
        (struct.pack(">IBBH", 12, 2, 7, 0) + b"\x00" * 4, "unknown_frame_type"),
        (struct.pack(">IBBH", 0x7FFFFFFF, 2, 0, 0) + b"\x00" * 40, "frame_too_large"),
    ],
)
def test_bad_headers_become_errors_then_resync(bad, reason):
    after = E.performative("close")
    frames, errors, _ = run(E.AMQP_HEADER + E.performative("open", container_id="x") + bad + after)
    assert [e["reason"] for e in errors] == [reason]
    assert (errors[0]["stream_offset"], errors[0]["length"]) == (8 + len(E.performative("open", container_id="x")), len(bad))
    assert performatives(frames, "to_server") == ["protocol_header", "open", "close"]


def test_the_negotiated_max_frame_size_is_a_limit():
    s = E.AMQP_HEADER + E.performative("open", container_id="b", max_frame_size=512)
    big = E.performative("transfer", payload=b"\x00\x53\x75\xb0" + struct.pack(">I", 600) + bytes(600), handle=0, delivery_id=0)
    dec = Amqp10StreamDecoder("c")
    dec.data("to_client", 0, 1, s)
    dec.data("to_server", 0, 2, E.AMQP_HEADER + big + E.performative("close"))
    dec.close()
    errors = dec.drain_errors()
    assert [e["reason"] for e in errors] == ["frame_too_large"] and errors[0]["length"] == len(big)
    assert [r["performative"] for r in dec.drain_frames() if r["direction"] == "to_server"] == [None, "close"]


def test_performatives_that_do_not_decode():
    cases = [
        (E.frame(E.encode(E.described(0x99, E.lst()))), "unknown_performative"),
        (E.frame(b"\x41"), "not_a_performative"),
        (E.frame(b"\x00\x53\x10\xd0\x00\x00\x00\x04\xff\xff\xff\xff"), "over the limit"),  # a 2^32-field open
        (E.frame(b"\x00\x53\x10" + b"\x00\x53\x01" * 200 + b"\x40"), "nested deeper"),
        (E.frame(b"\x00\x53\x10\xc0\x05\x01\xa1\x09ab"), "malformed"),
        (E.frame(E.encode(E.composite("close")) + b"xx"), "unexpected_payload"),
        (E.frame(E.encode(E.composite("open", container_id="a")), ftype=1), "frame_type_mismatch"),
        (E.frame(ftype=1), "empty_sasl_frame"),
        (E.performative("transfer", delivery_id=1), "bad_transfer"),
    ]
    for frame, error in cases:
        frames, errors, facts = run(E.AMQP_HEADER + frame)
        assert errors == [] and error in frames[1]["decode_error"], (frame.hex(), frames[1]["decode_error"])
        assert facts["frame_decode_errors"] == 1
    frames, _, _ = run(E.AMQP_HEADER + cases[0][0])
    assert json.loads(frames[1]["arguments_json"]) == {"descriptor": 0x99, "value": []}
    frames, _, _ = run(E.SASL_HEADER + E.performative("open", container_id="a"))
    assert "layer_mismatch" in frames[1]["decode_error"]


def test_a_gap_inside_a_transfer_resyncs_and_drops_the_message():
    start = C2S.index(E.performative("transfer", channel=1, payload=message(SMALL_BODY), handle=0, delivery_id=0, delivery_tag=b"t0",
                                     message_format=0, settled=False))
    frames, errors, facts = run(C2S, gaps=[(start + 1500, start + 1600)])
    assert facts["gap_bytes_to_server"] == 100
    assert performatives(frames, "to_server")[-5:] == ["transfer", "disposition", "detach", "end", "close"]
    assert [e["reason"] for e in errors] == ["truncated_by_gap", "resync_skipped"]
    t = _transfers(frames)
    # the message cut by the gap is abandoned; the continuation after it belongs to no message
    assert [(r["delivery_id"], r["message_seq"], r["body_size"], r["decode_error"]) for r in t] == [
        (0, 0, 12, None), (1, 1, None, None), (None, None, None, None), (2, 2, None, None), (2, 2, None, None)]
    assert (facts["incomplete_messages_to_server"], facts["orphan_transfers_to_server"]) == (2, 1)


def test_a_capture_starting_mid_stream():
    dec = Amqp10StreamDecoder("c")
    at = C2S.index(E.performative("begin", channel=1, next_outgoing_id=0, incoming_window=100, outgoing_window=100)) - 5
    dec.data("to_server", at, 1, C2S[at:])
    dec.close()
    frames, errors = dec.drain_frames(), dec.drain_errors()
    assert [(e["reason"], e["stream_offset"], e["length"]) for e in errors] == [("resync_skipped", at, 5)]
    assert frames[0]["performative"] == "begin"
    assert dec.connection_facts()["dialect_source"] == "framing"


def test_byte_by_byte_and_every_split_of_the_server_stream_decode_identically():
    whole, _, _ = run(C2S, S2C)
    single, _, _ = run(C2S, S2C, cuts=range(1, max(len(C2S), len(S2C))))
    assert strip_ts(single) == strip_ts(whole)
    reference = strip_ts([r for r in whole if r["direction"] == "to_client"])
    for cut in range(1, len(S2C)):
        frames, errors, _ = run(b"", S2C, cuts=(cut,))
        assert errors == [] and strip_ts(frames) == reference, cut


@pytest.mark.parametrize("seed", range(6))
def test_every_split_of_a_client_frame_decodes_identically(seed):
    """Each frame of the client stream, cut at every byte boundary inside it (a few frames per seed)."""
    reference = strip_ts(run(C2S)[0])
    offsets = [r["stream_offset"] for r in run(C2S)[0]] + [len(C2S)]
    spans = list(zip(offsets, offsets[1:]))[seed::6]
    for a, b in spans:
        for cut in range(a + 1, b):
            frames, errors, _ = run(C2S, cuts=(cut,))
            assert errors == [] and strip_ts(frames) == reference, cut


def test_timestamps_are_those_of_the_first_byte():
    frames, _, _ = run(C2S, cuts=(5, 70, 73))
    first = {r["stream_offset"]: r["ts_us"] for r in frames}
    assert (first[0], first[8], first[64], first[72]) == (1000, 1001, 1001, 1002)


def test_random_mutations_never_raise_and_account_for_every_byte():
    rng = random.Random(7)
    for _ in range(300):
        c, s = bytearray(C2S), bytearray(S2C)
        for data in (c, s):
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        cuts = sorted(rng.sample(range(1, 600), 5))
        gaps = [(g, g + rng.randint(1, 50)) for g in rng.sample(range(700), 1)] if rng.random() < 0.3 else []
        run(bytes(c), bytes(s), cuts=cuts, gaps=gaps)


def test_a_decoder_bug_costs_bytes_not_the_task(monkeypatch):
    calls = {"n": 0}
    real = Amqp10StreamDecoder.frame_limit

    def flaky(self, direction):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("boom")
        return real(self, direction)

    monkeypatch.setattr(Amqp10StreamDecoder, "frame_limit", flaky)
    dec = Amqp10StreamDecoder("c")
    for off in range(0, len(C2S), 100):
        dec.data("to_server", off, off, C2S[off : off + 100])
    dec.close()
    frames, errors, facts = dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
    assert facts["internal_errors"] == 1
    assert [e["reason"] for e in errors][:1] == ["internal_error"]
    assert sum(r["size"] for r in frames) + sum(e["length"] for e in errors) == len(C2S)


def test_a_bug_in_one_frame_costs_that_frame_only(monkeypatch):
    def broken(self, *args):
        raise ValueError("bad")

    monkeypatch.setattr(Amqp10StreamDecoder, "_frame_body", broken)
    dec = Amqp10StreamDecoder("c")
    dec.data("to_server", 0, 0, C2S)
    dec.close()
    frames, errors, facts = dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
    assert errors == [] and facts["internal_errors"] == 17
    assert all(r["decode_error"] == "internal_error: ValueError: bad" for r in frames if r["frame_type"] != "protocol_header")


def test_resynchronisation_is_the_same_however_the_bytes_arrive():
    """Garbage before frames (and after a gap): the frames found must not depend on where packets end."""
    garbage = bytes(range(40, 90))
    data = E.AMQP_HEADER + garbage + S2C[58:]
    reference, ref_errors, _ = run(b"", data)
    assert [(e["reason"], e["length"]) for e in ref_errors] == [("unknown_frame_type", len(garbage))]
    assert performatives(reference, "to_client")[2:5] == ["open", "begin", "attach"]
    for cut in range(1, len(garbage) + 40):
        frames, errors, _ = run(b"", data, cuts=(8 + cut,))
        assert strip_ts(frames) == strip_ts(reference) and strip_ts(errors) == strip_ts(ref_errors), cut
    whole, _, _ = run(b"", S2C, gaps=[(100, 140)])
    for cut in range(141, 200):
        frames, _, _ = run(b"", S2C, cuts=(cut,), gaps=[(100, 140)])
        assert strip_ts(frames) == strip_ts(whole), cut
