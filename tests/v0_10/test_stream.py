"""The 0-10 stream decoder on conversations built from the spec: segments, assemblies, command ids, facts."""

from __future__ import annotations

import hashlib
import json

import pytest

from amqplens.decode.v0_10 import Amqp010StreamDecoder, decode_streams, read_field
from tests.v0_10.conversation import CONVERSATIONS, C, S, attach, handshake, large_body, streams, transfer
from tests.v0_10.encoder import BODY, COMMAND, CONTROL, HEADER_SEG, cmd, command, control, ctl, frame, segment
from tests.v0_10.helpers import check_accounting


def decode(turns, **options):
    s = streams(turns)
    frames, errors, facts = decode_streams(s[S], s[C], **options)
    check_accounting(frames, errors, {S: len(s[S]), C: len(s[C])})
    return frames, errors, facts


def rows(frames, direction, kind=None):
    return [r for r in frames if r["direction"] == direction and (kind is None or r["frame_type"] == kind)]


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_every_conversation_decodes_cleanly(name):
    frames, errors, facts = decode(CONVERSATIONS[name]())
    assert not errors and not [r for r in frames if r["decode_error"]]
    assert facts["frame_decode_errors"] == facts["internal_errors"] == 0


def test_command_ids_follow_command_point_and_count_every_command():
    frames, _, _ = decode(CONVERSATIONS["publish_consume"]())
    sent = [(r["class_name"], r["method_name"], r["command_id"]) for r in rows(frames, S, "command")]
    assert [i for *_, i in sent] == list(range(10))
    assert sent[3] == ("message", "transfer", 3) and sent[8] == ("message", "accept", 8)
    header, body = rows(frames, S, "header")[0], rows(frames, S, "body")[0]
    assert (header["class_name"], header["command_id"], body["command_id"]) == ("message", 3, 3)
    assert header["message_seq"] == body["message_seq"] == 1
    assert [r["command_id"] for r in rows(frames, C, "command")] == [0]  # the broker's own sequence
    assert all(r["command_id"] is None for r in rows(frames, S, "control"))


def test_command_point_may_start_anywhere_and_results_point_back():
    frames, _, _ = decode(CONVERSATIONS["results_and_errors"]())
    assert [r["command_id"] for r in rows(frames, S, "command")] == list(range(100, 107))
    acquire, release, reject = rows(frames, S, "command")[:3]
    assert json.loads(acquire["transfers_json"]) == [[5, 9], [12, 12]]
    assert (release["transfers_json"], reject["reply_code"], reject["reply_text"]) == ("[[5,6]]", 1, "unroutable")
    result, query_result, exception = rows(frames, C, "command")
    assert (result["referenced_command_id"], result["transfers_json"]) == (100, "[[5,9]]")
    assert query_result["message_count"] == 3
    assert (exception["reply_code"], exception["reply_text"], exception["referenced_command_id"]) == (404, "not-found: x1", 106)
    sets = {r["method_name"]: r["commands_json"] for r in rows(frames, S, "control") if r["class_name"] == "session"}
    assert sets["gap"] == "[[107,109]]" and sets["expected"] == "[[0,4294967295]]" and sets["confirmed"] == "[[100,101]]"


def test_promoted_message_fields():
    frames, _, _ = decode(CONVERSATIONS["publish_consume"]())
    by_name = {}
    for r in rows(frames, S, "command"):
        by_name.setdefault(r["method_name"], []).append(r)
    sub = by_name["subscribe"][0]
    assert (sub["queue"], sub["destination"], sub["accept_mode"], sub["acquire_mode"]) == ("q1", "d1", "explicit", "pre-acquired")
    assert by_name["set-flow-mode"][0]["flow_mode"] == "credit"
    assert [(f["credit_unit"], f["credit_value"]) for f in by_name["flow"]] == [("message", 10), ("byte", 0xFFFFFFFF)]
    assert by_name["sync"][0]["sync"] is True
    header = rows(frames, C, "header")[0]
    assert (header["redelivered"], header["exchange"], header["routing_key"], header["body_size"]) == (True, "amq.direct", "k1", 10)
    props = json.loads(header["properties_json"])["message.message-properties"]
    assert props["application_headers"] == {"k": "v", "n": 7} and props["message_id"] == "12345678-1234-5678-1234-567812345678"
    completed = [r for r in rows(frames, C, "control") if r["method_name"] == "completed"][0]
    assert completed["commands_json"] == "[[0,7]]" and json.loads(completed["arguments_json"])["timely_reply"] is True
    assert [r["session_name"] for r in rows(frames, S, "control") if r["method_name"] == "attach"] == ["session-1"]


def test_a_body_in_many_frames_is_one_segment_with_one_hash():
    frames, _, facts = decode(large_body(size=20000, max_payload=4084))
    bodies = rows(frames, S, "body")
    assert len(bodies) == 5 and all(r["size"] <= 4096 for r in bodies)
    assert [(r["first_frame"], r["last_frame"]) for r in bodies] == [(True, False), (False, False), (False, False), (False, False), (False, True)]
    expected = bytes(i % 251 for i in range(20000))
    assert (bodies[-1]["body_size"], bodies[-1]["body_sha256"]) == (20000, hashlib.sha256(expected).hexdigest())
    assert all(r["body_size"] is None for r in bodies[:-1]) and all(r["command_id"] == 0 for r in bodies)
    assert facts["messages_to_server"] == 1


def test_a_command_and_a_header_cut_into_frames_decode_on_their_last_frame():
    turns = handshake() + attach() + [(S, transfer(1, "amq.direct", "k", b"x" * 30, max_payload=7))]
    frames, errors, _ = decode(turns)
    cmd_rows = rows(frames, S, "command")
    assert len(cmd_rows) > 1 and all((r["class_name"], r["method_name"], r["command_id"]) == ("message", "transfer", 0) for r in cmd_rows)
    assert [r["arguments_json"] is not None for r in cmd_rows] == [False] * (len(cmd_rows) - 1) + [True]
    assert cmd_rows[-1]["destination"] == "amq.direct"
    headers = rows(frames, S, "header")
    assert headers[-1]["routing_key"] == "k" and headers[-1]["body_size"] == 30


def test_byte_by_byte_feeding_gives_the_same_rows():
    s = streams(CONVERSATIONS["publish_consume"]())
    whole, _, _ = decode_streams(s[S], s[C])
    dec = Amqp010StreamDecoder("c")
    for d in (S, C):
        for i in range(len(s[d])):
            dec.data(d, i, 0, s[d][i : i + 1])
    dec.close()
    assert dec.drain_frames() == whole and not dec.drain_errors()


def test_a_gap_costs_the_frames_it_cuts_and_the_command_ids_after_it():
    s = streams(CONVERSATIONS["publish_consume"]())
    data = s[S]
    start = data.index(command("message", "subscribe", queue="q1", destination="d1", accept_mode=0, acquire_mode=0)) - 12
    dec = Amqp010StreamDecoder("c")
    dec.data(S, 0, 0, data[: start + 5])
    dec.gap(S, start + 5, 10, 1)
    dec.data(S, start + 15, 2, data[start + 15 :])
    dec.close()
    frames, errors = dec.drain_frames(), dec.drain_errors()
    check_accounting(frames, errors, {S: len(data)}, {S: 10})
    after = [r for r in frames if r["stream_offset"] > start and r["frame_type"] == "command"]
    assert [r["method_name"] for r in after] == ["set-flow-mode", "flow", "flow", "accept", "cancel"]
    assert all(r["command_id"] is None for r in after)  # the sequence is lost with the cut command
    assert {e["reason"] for e in errors} == {"truncated_by_gap", "resync_skipped"}


def test_a_capture_that_starts_mid_stream_resynchronises():
    s = streams(CONVERSATIONS["publish_consume"]())
    data = s[S][205:]
    dec = Amqp010StreamDecoder("c")
    dec.data(S, 205, 0, data)
    dec.close()
    frames, errors = dec.drain_frames(), dec.drain_errors()
    assert errors[0]["reason"] == "resync_skipped" and errors[0]["stream_offset"] == 205
    assert sum(r["size"] for r in frames) + sum(e["length"] for e in errors) == len(data)
    assert frames and not [r for r in frames if r["decode_error"] and not r["decode_error"].startswith("orphan")]


def test_credentials_never_reach_a_row():
    frames, errors, facts = decode(handshake(user=b"alice", password=b"hunter2"))
    text = repr(frames) + repr(errors) + repr(facts)
    assert "hunter2" not in text and "68756e74657232" not in text
    start_ok = [r for r in frames if r["method_name"] == "start-ok"][0]
    assert json.loads(start_ok["arguments_json"])["response"] == "<redacted len=14>"
    assert facts["user"] == "alice" and facts["sasl_mechanism"] == "PLAIN"


def test_error_bytes_before_the_handshake_ends_are_withheld():
    turns = [(S, b"AMQP\x01\x01\x00\x0a" + frame(0x0F, CONTROL, 0, b"\x01\x02garbage-with-password")[:-3])]
    frames, errors, _ = decode(turns)
    assert errors and all(e["raw"] is None for e in errors if e["direction"] == S)


def test_connection_facts():
    _, _, facts = decode(CONVERSATIONS["results_and_errors"]())
    assert facts["dialect"] == "0-10" and (facts["version_major"], facts["version_minor"]) == (0, 10)
    assert (facts["channel_max"], facts["frame_max"], facts["heartbeat"], facts["server_heartbeat"]) == (32767, 65535, 60, 120)
    assert facts["server_product"] == "test-broker" and facts["client_product"] == "test-client"
    assert facts["server_mechanisms"] == "PLAIN ANONYMOUS" and facts["vhost"] == "/"
    assert (facts["close_code"], facts["close_text"], facts["closed_by"]) == (320, "connection forced", "server")


def test_what_is_wrong_in_a_segment_goes_on_its_row():
    bad = [
        segment(CONTROL, 0, bytes([1, 99, 0, 0])),  # no control 99 in class connection
        segment(COMMAND, 1, command("queue", "declare", queue="q") + b"\xff"),  # trailing octet
        segment(CONTROL, 0, bytes([1, 5, 0x10, 0])),  # tune has 4 fields: flag 4 names none
        segment(HEADER_SEG, 1, b"\x00\x00\x00\x09\x04\x01", first_seg=False),  # a header with no command before it
        frame(0x0F, BODY, 1, b"x"),  # a body that begins an assembly
    ]
    frames, errors, _ = decode([(S, b"AMQP\x01\x01\x00\x0a" + b"".join(bad))])
    reasons = [r["decode_error"].split(":")[0] for r in frames[1:]]
    assert reasons == ["unknown_control", "unexpected_payload", "malformed", "orphan_segment", "bad_assembly"]
    assert not errors


def test_sequence_set_of_the_seed():
    # seed 004, sequence-set: [(0, 2), (5, 6), (15, 15)] "bytes in hex, length (24) prepended"
    raw = bytes.fromhex("0018000000000000000200000005000000060000000F0000000F")
    assert read_field("sequence-set", memoryview(raw), 0) == ([[0, 2], [5, 6], [15, 15]], 26)


def test_maps_lists_arrays_and_unknown_type_codes():
    from tests.v0_10.encoder import Typed, encode

    raw = encode("map", {"s": "x", "i": 7, "l": [1, "a", None], "m": {"t": True}, "u": Typed("uuid", "12345678-1234-5678-1234-567812345678"),
                         "a": Typed("array", ("uint16", [1, 2]))})  # fmt: skip
    value, end = read_field("map", memoryview(raw), 0)
    assert end == len(raw)
    assert value == {"s": "x", "i": 7, "l": [1, "a", None], "m": {"t": True}, "u": "12345678-1234-5678-1234-567812345678", "a": [1, 2]}
    unknown = b"\x00\x00\x00\x0b\x00\x00\x00\x01\x01k\x2e\xaa\xbb\xcc\xdd"  # type 0x2e: 4 octets by its nibble
    assert read_field("map", memoryview(unknown), 0)[0] == {"k": b"\xaa\xbb\xcc\xdd"}


def test_nesting_is_bounded():
    from amqplens.decode.errors import Malformed
    from tests.v0_10.encoder import encode

    value: list = []
    for _ in range(40):
        value = [value]
    with pytest.raises(Malformed):
        read_field("list", memoryview(encode("list", value)), 0)


def test_ids_wrap_around_by_rfc_1982():
    turns = handshake() + attach(first_id=0xFFFFFFFF) + [(S, cmd(1, "execution", "sync") * 2)]
    frames, _, _ = decode(turns)
    assert [r["command_id"] for r in rows(frames, S, "command")] == [0xFFFFFFFF, 0]


def test_attach_forgets_the_ids_until_the_next_command_point():
    turns = handshake() + attach() + [(S, cmd(1, "execution", "sync") + ctl(1, "session", "attach", name=b"again") + cmd(1, "execution", "sync"))]
    frames, _, _ = decode(turns)
    assert [r["command_id"] for r in rows(frames, S, "command")] == [0, None]
    assert control("session", "attach", name=b"x")[:2] == b"\x02\x01"
