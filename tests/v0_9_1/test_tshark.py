"""Differential test: our frames against tshark's, on real 0-9-1 captures.

Streams come from tshark's own ``follow,tcp,raw`` (the project's reassembler is
tested on its own); the sequence compared per connection and direction is
(channel, frame type, class id, method id, delivery tag). tshark 4.0 does not
dissect the 0-9-1 protocol header, so that one is checked against the bytes.
"""

from __future__ import annotations

import pathlib

import pytest

from amqplens.decode.v0_9_1 import decode_streams

from . import tshark_oracle as oracle
from .helpers import check_accounting

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC = sorted((ROOT / "tests" / "data" / "public").glob("deepflow_amqp091_*.pcap"))
# the real-broker fixtures of tools/make_fixtures.py; amqp10_* are AMQP 1.0, another codec's
BROKER = sorted(
    p for ext in ("pcap", "pcapng") for p in (ROOT / "tests" / "data" / "broker").glob(f"*.{ext}") if not p.name.startswith("amqp10")
)
CAPTURES = PUBLIC + BROKER

pytestmark = [pytest.mark.tshark, pytest.mark.skipif(not oracle.available(), reason="tshark is not installed")]


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_same_frames_as_tshark(pcap):
    expected = oracle.frames(str(pcap))
    compared = 0
    for stream, s in sorted(oracle.follow(str(pcap), oracle.stream_ids(str(pcap))).items()):
        if not s["to_server"] and not s["to_client"]:
            continue
        frames, errors, facts = decode_streams(s["to_server"], s["to_client"], connection_id=f"{pcap.name}:{stream}")
        check_accounting(frames, errors, {"to_server": len(s["to_server"]), "to_client": len(s["to_client"])})
        for direction in ("to_server", "to_client"):
            theirs = expected.get((stream, direction), [])
            assert oracle.ours(frames, direction) == theirs, (stream, direction)
            compared += len(theirs)
        headers = [r for r in frames if r["frame_type"] == "protocol_header"]
        if s["to_server"].startswith(b"AMQP"):
            assert headers and headers[0]["stream_offset"] == 0 and s["to_server"][:8] == bytes.fromhex(facts["client_protocol_header"])
        assert errors == [], errors
    assert compared > 0


def test_public_captures_present():
    assert len(PUBLIC) >= 2
