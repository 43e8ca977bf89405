"""The 0-10 lifecycle on the real 0-10 fixtures (tests/data/v0_10/*.pcap), decoded as the ingest job decodes them.

What to expect is read from how each fixture was built, not from the decoder:
``tests.v0_10.conversation`` gives the bytes each side sent; ``_transfers``
walks them with a frame parser of its own (12-octet frame headers, the four
position flags) to find every message.transfer assembly and the stream offset
of each of its frames, which the frame ids name. The outcomes and pairs are
those the conversations' comments spell out.
"""

from __future__ import annotations

import struct

import pytest

from amqplens.lifecycle import LifecycleRunner
from amqplens.decode.v0_10 import spec
from tests.v0_10.conversation import CONVERSATIONS, streams

from .captures import DATA, frames_of

V0_10 = DATA / "v0_10"
NAMES = sorted(p.stem for p in V0_10.glob("*.pcap"))
TRANSFER = next(k for k, m in spec.COMMANDS.items() if m[:2] == ("message", "transfer"))
WORD = {"to_server": "to_broker", "to_client": "from_broker"}


def _transfers(data: bytes) -> list[list[int]]:
    """Per message.transfer assembly in one direction's bytes: the stream offsets of its frames."""
    off = 8 if data[:4] == b"AMQP" else 0
    out, open_ = [], {}
    while off + 12 <= len(data):
        flags, stype, size, _, _, channel, _ = struct.unpack(">BBHBBHI", data[off:off + 12])
        payload = data[off + 12:off + size]
        if stype == 1 and flags & 8 and flags & 2:  # a command's first frame begins an assembly
            open_.pop(channel, None)
            if (payload[0], payload[1]) == TRANSFER:
                open_[channel] = []
                out.append(open_[channel])
        if channel in open_ and stype in (1, 2, 3):
            open_[channel].append(off)
            if flags & 4 and flags & 1:  # last frame of the last segment
                del open_[channel]
        off += size
    return out


def _run(name: str):
    frames = frames_of(V0_10 / f"{name}.pcap")
    runner = LifecycleRunner()
    runner.feed(frames)
    runner.finish()
    return frames, runner.drain_deliveries(), runner.drain_flow_events(), runner.drain_request_responses(), runner


# What each conversation says (tests/v0_10/conversation.py): per delivery direction and outcome, and the pairs.
OUTCOMES = {
    # the client's transfer (id 3, accept-mode explicit) is completed by [0, 7] but never accepted, then detach;
    # the broker's transfer to d1 (id 0) is accepted by the client's message.accept [[0, 0]]
    "publish_consume": {("to_broker", "unsettled_at_close"): 1, ("from_broker", "accepted"): 1},
    # one 20000-octet publish, explicit, completed by [0, 2], never accepted
    "large_body": {("to_broker", "unsettled_at_close"): 1},
    # no transfers: the release [5, 6] and reject [7, 7] name ids the broker never sent
    "results_and_errors": {},
    "file_and_stream": {},
}
PAIRS = {
    "publish_consume": ["connection.start", "connection.tune", "connection.open", "session.attach", "execution.sync",
                        "session.detach", "connection.close"],
    "large_body": ["connection.start", "connection.tune", "connection.open", "session.attach", "tx.commit", "session.detach",
                   "connection.close"],
    "results_and_errors": ["connection.start", "connection.tune", "connection.open", "session.attach", "message.acquire",
                           "queue.query", "exchange.declare", "dtx.start", "connection.close"],
    "file_and_stream": ["connection.start", "connection.tune", "connection.open", "session.attach", "session.detach",
                        "connection.close"],
}
STATUS = {"results_and_errors": {"exchange.declare": ("error", 404), "dtx.start": ("unanswered", None)}}


def test_every_fixture_is_covered():
    assert set(NAMES) == set(CONVERSATIONS) == set(OUTCOMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_transfer_frame_belongs_to_exactly_one_delivery(name):
    frames, deliveries, *_ = _run(name)
    cid = frames[0]["connection_id"]
    sent = streams(CONVERSATIONS[name]())
    expected = sorted((WORD[d], tuple(f"{cid}-{'s' if d == 'to_server' else 'c'}-{o}" for o in offs))
                      for d, data in sent.items() for offs in _transfers(data))
    got = sorted((x["direction"], tuple(x["frame_ids"])) for x in deliveries)
    assert got == expected
    listed = [fid for x in deliveries for fid in x["frame_ids"]]
    assert len(listed) == len(set(listed))
    transfer_frames = {f["frame_id"] for f in frames if f["class_name"] == "message" and (
        f["method_name"] == "transfer" or f["frame_type"] in ("header", "body"))}
    assert set(listed) == transfer_frames


@pytest.mark.parametrize("name", NAMES)
def test_outcomes_agree_with_the_conversation(name):
    _, deliveries, flows, pairs, runner = _run(name)
    got: dict = {}
    for x in deliveries:
        got[(x["direction"], x["outcome"])] = got.get((x["direction"], x["outcome"]), 0) + 1
    assert got == OUTCOMES[name]
    assert [x["request"] for x in pairs] == PAIRS[name]
    for x in pairs:
        assert (x["status"], x["reply_code"]) == STATUS.get(name, {}).get(x["request"], ("ok", None)), x
    assert runner.stats["unsupported_frames"] == runner.stats["bad_frames"] == 0


def test_publish_consume_rows():
    frames, deliveries, flows, *_ = _run("publish_consume")
    by_dir = {x["direction"]: x for x in deliveries}
    pub, dlv = by_dir["to_broker"], by_dir["from_broker"]
    accept = next(f for f in frames if f["method_name"] == "accept")
    detach = next(f for f in frames if f["method_name"] == "detach")
    assert (dlv["transfer_id"], dlv["consumer_tag"], dlv["queue"], dlv["settled_by_frame_id"], dlv["redelivered"]) == (
        0, "d1", "q1", accept["frame_id"], True)
    assert (pub["transfer_id"], pub["exchange"], pub["settled_by_frame_id"], pub["flags"]) == (
        3, "amq.direct", detach["frame_id"], ["completed_unsettled"])
    for x in (pub, dlv):
        assert (x["body_size"], x["content_type"], x["delivery_mode"], x["priority"], x["settle_mode"]) == (
            10, "text/plain", 2, 4, "explicit/pre-acquired")
    # set-flow-mode credit, message credit 10, unlimited bytes, one transfer, cancel
    link = [(x["event"], x["link_credit"], x["at_limit"]) for x in flows if x["entity"] == "link"]
    assert link == [("flow", 0, True), ("credit", 10, False), ("credit", 10, False), ("transfer", 9, False), ("close", 9, False)]


def test_results_and_errors_settle_rows_name_the_unknown_ids():
    frames, _, flows, *_ = _run("results_and_errors")
    release = next(f for f in frames if f["method_name"] == "release")
    reject = next(f for f in frames if f["method_name"] == "reject")
    assert [(x["frame_id"], x["reason"]) for x in flows] == [
        (release["frame_id"], "release_of_unknown_id"), (reject["frame_id"], "reject_of_unknown_id")]


def test_large_body_lists_all_seven_frames():
    _, (row,), *_ = _run("large_body")
    # command + header + ceil(20000 / 4084) = 5 body frames
    assert len(row["frame_ids"]) == 7 and row["body_size"] == 20000
