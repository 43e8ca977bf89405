"""Differential test: every 0-10 fixture pcap through the whole decode path and through tshark's 0-10 dissector.

Per direction, frame by frame: segment type, track, channel, the four position
flags, frame size, class code and control/command code must agree (protocol
headers by version). The fixtures are built from the spec by the test encoder
(no 0-10 broker is installable here), so this is what makes them trustworthy.

One reading of tshark's is corrected, not copied: tshark 4.0's ``dissect_amqp_0_10_tx``
reads the method octet at ``offset + 1`` where every other class reads it at
``offset`` (the offset already points past the class octet), so for class tx it
shows the session header's first octet (always 1) as the command code. For tx
commands we compare the class and check that tshark's "method" is that octet.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.v0_10 import tshark_oracle as oracle
from tests.v0_10.captures import decode_capture
from tests.v0_10.fixtures import DATA, pcap_bytes
from tests.v0_10.helpers import DIRECTIONS, check_accounting
from tests.v0_10.conversation import CONVERSATIONS

FIXTURES = sorted(DATA.glob("*.pcap"))
SEGMENT = {"control": 0, "command": 1, "header": 2, "body": 3}
TX = 5

pytestmark = [pytest.mark.tshark, pytest.mark.skipif(not oracle.available(), reason="tshark is not installed")]


def _ours(frames: list, direction: str) -> list:
    out = []
    for r in frames:
        if r["direction"] != direction:
            continue
        if r["frame_type"] == "protocol_header":
            out.append(("header", bytes.fromhex(r["arguments_json"].split('"header":"')[1][:16])[7]))
            continue
        position = r["first_segment"] << 3 | r["last_segment"] << 2 | r["first_frame"] << 1 | r["last_frame"]
        control_or_command = r["frame_type"] in ("control", "command")
        out.append((SEGMENT[r["frame_type"]], r["track"], r["channel"], position, r["size"],
                    r["class_id"] if control_or_command else None, r["method_id"] if control_or_command else None))  # fmt: skip
    return out


def _tshark_tx_reading(entries: list) -> list:
    return [e[:6] + (1,) if e[0] == 1 and e[5] == TX else e for e in entries]


def test_every_conversation_has_its_committed_fixture():
    assert {p.stem for p in FIXTURES} == set(CONVERSATIONS)
    for path in FIXTURES:
        assert path.read_bytes() == pcap_bytes(path.stem), f"{path.name} is stale: run python -m tests.v0_10.fixtures"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_frames_agree_with_tshark(path: pathlib.Path):
    theirs, stderr = oracle.frames(str(path))
    (record, frames, errors, facts), = decode_capture(path)
    assert facts["dialect"] == "0-10" and not errors
    assert not [r for r in frames if r["decode_error"]]
    check_accounting(frames, errors, {"to_server": record.bytes_to_server, "to_client": record.bytes_to_client})
    for d in DIRECTIONS:
        ours = _tshark_tx_reading(_ours(frames, d))
        assert len(ours) == len(theirs[d]) > 2, (d, len(ours), len(theirs[d]))
        for i, (a, b) in enumerate(zip(ours, theirs[d])):
            assert a == b, (d, i, a, b)
    assert oracle.complaints(str(path)) == []
