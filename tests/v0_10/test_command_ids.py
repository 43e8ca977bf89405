"""Both sides' commands carry their implicit command-id on the real fixture pcaps.

Each side numbers its commands from its own session.command-point (0-10 spec, session class);
the peer's session.attached must not reset the sender's count.
"""

from __future__ import annotations

import pathlib

import pytest

from .captures import decode_capture

FIXTURES = sorted((pathlib.Path(__file__).resolve().parents[1] / "data" / "v0_10").glob("*.pcap"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_command_after_a_command_point_has_an_id(path):
    checked = 0
    for _record, frames, _errors, _facts in decode_capture(path):
        for direction in ("to_server", "to_client"):
            pointed = False
            ids = []
            for f in frames:
                if f["direction"] != direction:
                    continue
                if f["class_name"] == "session" and f["method_name"] == "command-point":
                    pointed = True
                elif f["frame_type"] == "command" and f["last_frame"] and pointed:
                    assert f["command_id"] is not None, (path.name, direction, f["class_name"], f["method_name"])
                    ids.append(f["command_id"])
            assert ids == sorted(ids)
            checked += len(ids)
    assert checked > 0
