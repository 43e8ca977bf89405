"""The compiled 1.0 frame walk (``v1_0.hot_kernel``) against the reference decoder's rows.

Every frame the walk cuts must be a frame the reference cuts at the same offset and size; every frame it reads
(``R_HOT``) must be one the reference decodes without an error, with the same performative and the same values in
every column the walk fills (a transfer's message sections may still be in error: those are the message
tracker's), and for a whole one-transfer message the same body size and SHA-256. Inputs: the 1.0
broker fixtures (RabbitMQ, Qpid Proton), the public 1.0 captures, the test conversation (SASL, a message over three
transfers, an aborted one, dispositions, an error), a generated stream of every encoding the walk takes and many it
leaves, and a few thousand mutations of each (a byte changed, dropped or repeated anywhere)."""

from __future__ import annotations

import hashlib
import pathlib
import random

import numpy as np
import pytest

pytest.importorskip("numba")

from amqplens.decode.v1_0 import hot_kernel as hk  # noqa: E402
from amqplens.decode.v1_0.stream import decode_streams  # noqa: E402
from tools import fuzz_targets as ft  # noqa: E402

from . import encoder as E  # noqa: E402
from .conversation import conversation, load  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
CAPTURES = sorted(DATA.glob("broker/amqp10_*.pcap")) + sorted(DATA.glob("public/*amqp10*.pcap*"))
LIMIT = 1 << 20
NAMES = {hk.FLOW: "flow", hk.TRANSFER: "transfer", hk.DISPOSITION: "disposition"}
# walk column -> (reference column, the reference's value of the walk's integer)
INTS = {hk.F_HANDLE: "handle", hk.F_FORMAT: "message_format", hk.F_FIRST: "first", hk.F_LAST: "last",
        hk.F_NEXT_IN: "next_incoming_id", hk.F_IN_WINDOW: "incoming_window", hk.F_NEXT_OUT: "next_outgoing_id",
        hk.F_OUT_WINDOW: "outgoing_window", hk.F_COUNT: "delivery_count", hk.F_CREDIT: "link_credit",
        hk.F_AVAILABLE: "available"}
BOOLS = {hk.F_SETTLED: "settled", hk.F_MORE: "more", hk.F_ABORTED: "aborted", hk.F_DRAIN: "drain", hk.F_ECHO: "echo"}


def check(to_server: bytes, to_client: bytes) -> int:
    """Walk both directions and compare with the reference's rows; the number of frames the walk read."""
    frames, _, _ = decode_streams(to_server, to_client)
    hot = 0
    for direction, raw in (("to_server", to_server), ("to_client", to_client)):
        ref = {r["stream_offset"]: r for r in frames if r["direction"] == direction and r["frame_type"] != "protocol_header"}
        buf = np.frombuffer(raw, np.uint8)
        rec, _ = hk.walk_stream(buf, LIMIT)
        sizes, digests = hk.bodies(buf, rec)
        for i, row in enumerate(rec):
            r = ref.get(int(row[hk.R_POS]))
            assert r is not None and r["size"] == row[hk.R_SIZE], (direction, row[hk.R_POS])
            if r["frame_type"] in ("amqp", "sasl"):
                assert r["channel"] == row[hk.R_CHANNEL]
            if row[hk.R_HOT] != 1:
                continue
            hot += 1
            assert r["performative"] == NAMES[int(row[hk.R_CODE])], r
            # a transfer's message sections are the message tracker's: the walk reads the performative, and a body
            # only through ``sections``, below
            assert r["decode_error"] is None or r["performative"] == "transfer", r
            for col, name in INTS.items():
                if row[col] >= 0 or name != "delivery_count" or r["performative"] != "attach":
                    assert r[name] == (None if row[col] < 0 else row[col]), (name, r)
            for col, name in BOOLS.items():
                assert r[name] == (None if row[col] < 0 else bool(row[col])), (name, r)
            if row[hk.F_DELIVERY_ID] >= 0:  # a continuation's column is its first transfer's (the message's)
                assert r["delivery_id"] == row[hk.F_DELIVERY_ID]
            tag = None if row[hk.F_TAG_AT] < 0 else raw[row[hk.F_TAG_AT]:row[hk.F_TAG_AT] + row[hk.F_TAG_LEN]]
            assert r["delivery_tag_bin"] == tag
            assert r["role"] == {-1: None, 0: "sender", 1: "receiver"}[int(row[hk.F_ROLE])]
            assert r["rcv_settle_mode"] == {-1: None, 0: "first", 1: "second"}[int(row[hk.F_RCV_SETTLE])]
            assert r["state"] == {-1: None, hk.ACCEPTED: "accepted", hk.RELEASED: "released"}[int(row[hk.F_STATE])]
            if sizes[i] >= 0 and r["decode_error"] is None:
                assert (r["body_size"], r["body_sha256"]) == (sizes[i], bytes(digests[i]).hex()), r
    return hot


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_the_walk_reads_what_the_reference_reads_on_the_1_0_captures(path):
    streams = ft.streams_of(path, 1 << 30)  # every connection's in-order bytes, up to a hole
    assert streams
    hot = sum(check(s["to_server"], s["to_client"]) for s in streams)
    assert hot > 0 or "boolean" in path.name  # the boolean-types capture has no transfer, flow or disposition


def test_the_conversation_and_a_generatedload():
    assert check(*conversation()) > 0
    c, s = load()
    frames, _, _ = decode_streams(c, s)
    hot = check(c, s)
    wanted = sum(1 for r in frames if r["performative"] in NAMES.values() and r["decode_error"] is None)
    # every well-formed transfer, flow and disposition but those the generator wrote in encodings the walk leaves
    assert hot >= wanted - 3 * 16 and hot > 300


def test_bodies_hash_as_hashlib_across_sha_blocks():
    for n in (0, 1, 55, 56, 63, 64, 65, 127, 128, 1000):
        body = (bytes(range(256)) * 4)[:n]
        c = E.performative("transfer", channel=0, payload=E.section("data", E.binary(body)) + E.section("data", E.binary(body)),
                           handle=0, delivery_id=1, delivery_tag=b"t")
        buf = np.frombuffer(c, np.uint8)
        rec, stop = hk.walk_stream(buf, LIMIT)
        assert stop == len(c) and rec[0, hk.R_HOT] == 1
        sizes, digests = hk.bodies(buf, rec)
        assert sizes[0] == 2 * n and bytes(digests[0]) == hashlib.sha256(body + body).digest()


@pytest.mark.parametrize("seed", range(4))
def test_mutations_never_make_the_walk_disagree(seed):
    """Bad input tried: one byte changed, dropped or repeated at a random place of either direction, 400 times a
    seed (frame headers, list sizes and counts, constructors, lengths, section headers): the walk may stop or leave a
    frame to the reference, never read a value the reference does not."""
    rng = random.Random(seed)
    base = load(60, seed)
    for _ in range(400):
        streams = [bytearray(b) for b in base]
        raw = streams[rng.randrange(2)]
        at = rng.randrange(len(raw))
        op = rng.randrange(3)
        if op == 0:
            raw[at] = rng.randrange(256)
        elif op == 1:
            del raw[at]
        else:
            raw.insert(at, raw[at])
        check(bytes(streams[0]), bytes(streams[1]))


def test_the_walk_stops_where_the_framer_would_not_cut_a_frame():
    frame = E.performative("flow", channel=1, next_incoming_id=1, incoming_window=2, next_outgoing_id=3, outgoing_window=4)
    buf = np.frombuffer(frame * 3 + frame[:10], np.uint8)  # the last one cut short
    rec, stop = hk.walk_stream(buf, LIMIT)
    assert len(rec) == 3 and stop == 3 * len(frame) and (rec[:, hk.R_HOT] == 1).all()
    rec, stop = hk.walk_stream(buf, len(frame) - 1)  # over the limit: none
    assert len(rec) == 0 and stop == 0
    bad = bytearray(frame)
    bad[5] = 7  # an unknown frame type
    rec, stop = hk.walk_stream(np.frombuffer(frame + bytes(bad) + frame, np.uint8), LIMIT)
    assert len(rec) == 1 and stop == len(frame)
