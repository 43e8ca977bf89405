"""1.0 numbers a peer sent in a type the spec does not allow: a field the spec types unsigned, encoded as a signed
``int`` with the value -1 (bytes 0x71 ff ff ff ff, written here over the real broker fixture's uint). The frames and
connections columns hold counts and limits that our invariant ``*.non_negative`` checks; the value as sent is the
peer's, kept in arguments_json, and the column stays null (before: -1 in the column, and validate exit 4)."""

from __future__ import annotations

import json

from amqplens.decode.api import decode_capture
from tests.conftest import DATA

FIXTURE = DATA / "broker" / "amqp10_proton.pcap"
INT_MINUS_1 = b"\x71\xff\xff\xff\xff"


def _patched(tmp_path, descriptor: bytes, field: bytes) -> tuple:
    """The fixture with the first ``field`` (a uint, 0x70 + 4 octets) after the first ``descriptor`` set to int -1."""
    data = bytearray(FIXTURE.read_bytes())
    at = data.index(field, data.index(descriptor))
    assert at - data.index(descriptor) < 64  # inside that performative's field list
    data[at:at + 5] = INT_MINUS_1
    path = tmp_path / "patched.pcap"
    path.write_bytes(bytes(data))
    return decode_capture(path).connections


def test_a_negative_incoming_window_is_kept_as_sent_not_in_the_column(tmp_path):
    # the first flow (descriptor 0x13, list8): next-incoming-id uint0, then incoming-window uint 65535 (0x70 0000ffff)
    (conn,) = _patched(tmp_path, b"\x00\x53\x13\xc0", b"\x70\x00\x00\xff\xff")
    flow = next(f for f in conn.frames if f["performative"] == "flow")
    assert flow["incoming_window"] is None
    assert json.loads(flow["arguments_json"])["incoming_window"] == -1


def test_a_negative_idle_time_out_is_not_a_connection_limit(tmp_path):
    # the server's open (descriptor 0x10, list32): idle-time-out uint 60000 (0x70 0000ea60)
    (conn,) = _patched(tmp_path, b"\x00\x53\x10\xd0", b"\x70\x00\x00\xea\x60")
    assert conn.facts["server_idle_timeout_ms"] is None
    assert conn.facts["client_idle_timeout_ms"] is None  # the client's open has none (its bytes above: no 0x70 after 0x7fff)
    opened = next(f for f in conn.frames if f["performative"] == "open" and f["direction"] == "to_client")
    assert json.loads(opened["arguments_json"])["idle_time_out"] == -1


def test_a_negative_priority_is_not_a_delivery_priority(tmp_path):
    """The conversation's messages carry header priority ubyte 4 (0x50 04); here the first one says byte -1 (0x51 ff)."""
    from amqplens.lifecycle import LifecycleRunner
    from tests.lifecycle.captures import frames_of
    from tests.v1_0 import encoder as E
    from tests.v1_0.conversation import conversation
    from tests.v1_0.pcap_writer import connection_pcap

    c2s, s2c = conversation()
    header = E.section("header", E.lst(E.boolean(True), (0x50, 4)))
    c2s = c2s.replace(header, E.section("header", E.lst(E.boolean(True), (0x51, -1))), 1)
    path = tmp_path / "priority.pcap"
    path.write_bytes(connection_pcap([("to_server", c2s), ("to_client", s2c)]))
    runner = LifecycleRunner()
    runner.feed(frames_of(str(path)))
    runner.finish()
    by_id = {d["message_id"]: d for d in runner.drain_deliveries() if d["message_id"]}
    assert by_id["m1"]["priority"] is None  # the first message (message_id m1): not -1
    assert json.loads(by_id["m1"]["properties_json"])["header"]["priority"] == -1  # as sent
    assert by_id["big"]["priority"] == 4  # the next keeps the 4 it was sent with
