"""Differential test: our frames against tshark's, on every AMQP 1.0 capture we have.

Streams come from the project's own pipeline pieces (``read_capture`` then
``TcpReassembler``, see captures.py). Per connection and direction the sequence
of protocol headers and of (channel, performative code, handle, delivery-id,
settled, link-credit, first, last) must equal tshark's, frame by frame, with
two readings of ours kept where tshark differs:

- Continuation transfers (more=true before them) may omit delivery-id (Part 2
  §2.7.5); we fill it from the delivery's first transfer, and the oracle applies
  the same rule to tshark's fields (``tshark_oracle.fill_continuations``).
  tshark 4.0 also does not reassemble more=true transfers: it decodes message
  sections from each transfer's payload alone, so a section cut at a frame
  boundary (which §2.6.14 allows: "additional data MAY be transferred in
  additional transfer frames") shows as [Malformed Packet] and the continuation
  as "Unknown AMQP type"; the performative fields compared here are unaffected.
- After missing TCP segments tshark (with reassemble_out_of_order) keeps the
  rest of that direction buffered for a reassembly that never completes and
  dissects no further frame; we resynchronise on the next plausible frame header
  (DESIGN.md, "missing segments ... then resynchronisation"), so in a direction
  with a gap tshark's sequence must equal ours up to the gap, and what we decode
  after it must decode cleanly.
"""

from __future__ import annotations

import pathlib

import pytest

from . import tshark_oracle as oracle
from .captures import decode_capture
from .conversation import conversation
from .pcap_writer import connection_pcap

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = ROOT / "tests" / "data" / "public"  # copies of ../shared/captures/public
CAPTURES = [
    SHARED / "adverb_amqp10_hello_world_qpidd_ipv6.pcapng",
    SHARED / "amqpanalyze_amqp10_boolean_types.pcapng",
    ROOT / "tests" / "data" / "broker" / "amqp10_proton.pcap",
    ROOT / "tests" / "data" / "broker" / "amqp10_rich.pcap",
    ROOT / "tests" / "data" / "demo" / "demo.pcap",
]
HEADERS_1_0 = {"414d515000010000", "414d515003010000", "414d515002010000"}

pytestmark = [pytest.mark.tshark, pytest.mark.skipif(not oracle.available(), reason="tshark is not installed")]


def _ours(frames: list, direction: str, before: int | None = None) -> list:
    out = []
    for r in frames:
        if r["direction"] != direction or (before is not None and r["stream_offset"] >= before):
            continue
        if r["frame_type"] == "protocol_header":
            out.append(("header", bytes.fromhex(r["arguments_json"].split('"header":"')[1][:16])[4]))
        else:
            out.append((r["channel"], r["descriptor"], r["handle"], r["delivery_id"], r["settled"], r["link_credit"], r["first"], r["last"]))
    return out


def _compare(path) -> int:
    theirs, _stderr = oracle.frames(str(path))
    compared = 0
    conns = [c for c in decode_capture(path) if c.facts.get("client_protocol_header") in HEADERS_1_0]
    assert conns, path
    for c in conns:
        assert c.errors == [], c.errors
        for direction, total in (("to_server", c.record.bytes_to_server), ("to_client", c.record.bytes_to_client)):
            rows = [r for r in c.frames if r["direction"] == direction]
            assert sum(r["size"] for r in rows) + c.gaps[direction] == total  # byte accounting, no error rows
            assert all(r["decode_error"] is None for r in rows)
            expected = theirs.get((c.record.client_port, direction), [])
            assert _ours(c.frames, direction, c.first_gap.get(direction)) == expected, (c.record.client_port, direction)
            compared += len(expected)
    return compared


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_same_frames_as_tshark(pcap):
    assert _compare(pcap) > 0


def test_same_frames_as_tshark_on_multi_frame_and_aborted_transfers(tmp_path):
    c2s, s2c = conversation()
    path = tmp_path / "conversation.pcap"
    # the client's SASL header first, the server's SASL exchange, then everything else
    path.write_bytes(connection_pcap([("to_server", c2s[:8]), ("to_client", s2c[:58]), ("to_server", c2s[8:]), ("to_client", s2c[58:])]))
    assert _compare(path) == 19 + 16
    (conn,) = decode_capture(path)
    transfers = [r for r in conn.frames if r["performative"] == "transfer" and r["direction"] == "to_server"]
    assert [r["delivery_id"] for r in transfers] == [0, 1, 1, 1, 2, 2]


def test_the_gaps_we_resynchronise_after():
    """The boolean-types capture lost segments in four connections; tshark stops at each gap, we do not."""
    conns = decode_capture(CAPTURES[1])
    after = {
        (c.record.client_port, d): [r["performative"] for r in c.frames if r["direction"] == d and r["stream_offset"] >= at]
        for c in conns
        for d, at in c.first_gap.items()
    }
    assert after == {
        (39178, "to_client"): ["close"],
        (39176, "to_server"): [],  # the gap took the last frames: nothing follows it
        (39166, "to_server"): ["close"],
        (39166, "to_client"): [],
        (39188, "to_client"): ["detach", "close"],
    }


def test_captures_present():
    assert all(p.exists() for p in CAPTURES)
