"""Qpid Proton frame traces into frame rows: the differential test against the capture of the same run.

tools/make_fixtures.py ran the proton clients with PN_TRACE_FRM=1 inside the
tcpdump of the same scenario, so the trace and the pcap hold the same frames.
The trace is the client's view: frames it never read (amqp10_rich's second
connection gets a second close from the broker after proton stopped reading)
are only in the capture.
"""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.logs.helpers import of_kind, records
from tests.v1_0.captures import decode_capture

BROKER = DATA / "broker"
COMPARED = ("performative", "channel", "handle", "delivery_id", "settled", "link_credit", "delivery_count", "first",
            "last", "state", "role", "more", "link_name", "message_seq", "error_condition", "error_description",
            "source_address", "target_address", "next_incoming_id", "incoming_window", "drain")


def _per_connection(frames):
    out: dict = {}
    for f in frames:
        out.setdefault(f["connection_id"], []).append(f)
    return sorted(out.values(), key=lambda fs: fs[0]["stream_offset"])


def _view(frames, direction, columns=COMPARED):
    return [tuple(f[c] for c in columns) for f in frames if f["direction"] == direction and f["performative"]]


@pytest.mark.parametrize("name", ["amqp10_proton", "amqp10_rich"])
def test_trace_frames_equal_the_captured_frames_in_order(name):
    recs = records(BROKER / f"{name}.trace.txt", log_id=name)
    traced = _per_connection(of_kind(recs, "frame"))
    captured = sorted(decode_capture(BROKER / f"{name}.pcap"), key=lambda d: d.record.start_ts_us)
    assert len(traced) == len(captured) == len(of_kind(recs, "connection"))
    for trace, cap in zip(traced, captured):
        for direction in ("to_server", "to_client"):
            ours, wire = _view(trace, direction), _view(cap.frames, direction)
            assert ours == wire[: len(ours)]
            # only what the client never read may be missing: the broker's close after proton's
            assert [w[0] for w in wire[len(ours):]] in ([], ["close"]) and len(ours) >= len(wire) - 1
    assert [e["reason"] for e in of_kind(recs, "error")] == []


def test_messages_whose_payload_was_printed_whole_have_the_captured_body_hash():
    recs = records(BROKER / "amqp10_proton.trace.txt")
    (cap,) = decode_capture(BROKER / "amqp10_proton.pcap")
    cols = ("delivery_id", "message_seq", "body_size", "body_sha256", "properties_json")
    for d in ("to_server", "to_client"):
        assert _view(of_kind(recs, "frame"), d, ("performative", *cols)) == _view(cap.frames, d, ("performative", *cols))


def test_a_truncated_payload_leaves_body_size_and_hash_null():
    path = BROKER / "amqp10_rich.trace.txt"
    lines = path.read_text().splitlines()
    last_parts = {n for n, line in enumerate(lines, 1) if line.endswith("(truncated)") and "more=true" not in line}
    frames = {f["stream_offset"]: f for f in of_kind(records(path), "frame")}
    assert len(last_parts) == 2  # the 20000-octet message each way
    assert all(frames[n]["body_size"] is None and frames[n]["body_sha256"] is None for n in last_parts)
    assert all(frames[n]["message_seq"] is not None for n in last_parts)


def test_old_format_trace_gives_the_same_rows_as_the_new_one():
    """tests/data/logs/amqp10_proton_old_format.trace.txt: the same frames as proton-c wrote them before 0.36."""
    new = records(BROKER / "amqp10_proton.trace.txt", log_id="same")
    old = records(DATA / "logs" / "amqp10_proton_old_format.trace.txt", log_id="same")
    drop = lambda rows: [{k: v for k, v in r.items() if k != "trace_pointer"} for r in rows]  # noqa: E731
    assert of_kind(old, "frame") == of_kind(new, "frame")
    assert drop(of_kind(old, "connection")) == drop(of_kind(new, "connection"))


def test_the_sasl_password_never_reaches_a_row():
    recs = records(BROKER / "amqp10_rich.trace.txt")
    text = repr(recs)
    assert "\\x00guest" not in text and "\\x00noperm" not in text  # PLAIN: \0user\0password
    inits = [f["arguments_json"] for f in of_kind(recs, "frame") if f["performative"] == "sasl-init"]
    assert len(inits) == 2 and all("redacted" in a for a in inits)
    users = [r["user"] for r in of_kind(recs, "connection")]
    assert users == ["guest", "amqp10_rich-noperm"]


def test_bad_trace_lines_are_counted_and_the_frames_around_them_kept(tmp_path):
    lines = (BROKER / "amqp10_proton.trace.txt").read_bytes().splitlines(keepends=True)
    bad = [b"Traceback (most recent call last):\n",  # not a trace line
           lines[9][:60] + b"\n",  # a performative cut short
           b"[0x556de8f68310]: AMQP:FRAME:0 -> @open(16) [container-id=\"\xff\xfe\"]\n"]  # not UTF-8
    path = tmp_path / "trace.txt"
    path.write_bytes(b"".join(lines[:9] + bad + lines[9:]))
    recs = records(path)
    assert [(e["line_number"], e["reason"]) for e in of_kind(recs, "error")] == [
        (10, "not_a_trace_line"), (11, "bad_trace_frame"), (12, "bad_encoding")]
    clean = of_kind(records(BROKER / "amqp10_proton.trace.txt"), "frame")
    got = [f for f in of_kind(recs, "frame") if f["stream_offset"] != 12]
    assert [f["performative"] for f in got] == [f["performative"] for f in clean]


def test_a_traced_frame_that_does_not_decode_is_also_an_error_row_of_stage_frame(tmp_path):
    """Bad input tried: a transfer whose handle was cut from the line (no link to put the message on)."""
    lines = (BROKER / "amqp10_proton.trace.txt").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b"@transfer(20) [handle=0x0, " in line)
    lines[at] = lines[at].replace(b"handle=0x0, ", b"", 1)
    path = tmp_path / "trace.txt"
    path.write_bytes(b"".join(lines))
    recs = records(path)
    bad = [f for f in of_kind(recs, "frame") if f["decode_error"] is not None]
    assert [(f["stream_offset"], f["performative"]) for f in bad] == [(at + 1, "transfer")]
    assert bad[0]["decode_error"].startswith("bad_transfer: ")
    errors = of_kind(recs, "error")
    assert [(e["line_number"], e["stage"], e["reason"]) for e in errors] == [(at + 1, "frame", "bad_transfer")]
    assert errors[0]["raw"] == lines[at].rstrip(b"\n") and errors[0]["detail"].startswith(f"line {at + 1}: transfer frame: ")
    # the other frames are the clean trace's
    clean = of_kind(records(BROKER / "amqp10_proton.trace.txt"), "frame")
    assert len(of_kind(recs, "frame")) == len(clean) and not any(f["decode_error"] for f in clean)
