"""A direction decoded ahead of the other (``v0_9_1.ahead``, the compiled path) against the Python decoder fed
segment by segment, the reference: the same frame rows in the same order, the same error rows, frame errors and
facts, whatever the held windows hold.

Inputs: every 0-9-1 connection of the real-broker fixtures (``tests/data/broker``), as the reassembler hands it
(its segments and times) and cut into random segments with the directions taking turns at random, drained every
few segments so that windows end mid-connection (the case the compiled path is for), with:

- nothing changed (windows are decoded ahead; the test counts them);
- a frame-end flipped, or a frame's size raised past the limit, somewhere in the middle (those windows are fed
  one by one; the rows after the damage are the reference's resynchronisation);
- a body with no header before it and an ack of channel 0 in both directions in one window (frame errors from
  both directions, put back in the reference's order);
- a repeated or skipped segment (not contiguous: fed one by one).
"""

from __future__ import annotations

import functools
import pathlib
import random
import struct

import pytest

from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_9_1 import Amqp091StreamDecoder, ahead, hotpath
from tools.bench_hotpath import streams

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed: only the Python path exists")


def _frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + b"\xce"


BROKER = pathlib.Path(__file__).resolve().parents[1] / "data" / "broker"


@functools.cache
def _recorded() -> list[list[tuple]]:
    """The reassembler's calls of every 0-9-1 connection of the broker fixtures with no gap."""
    out = []
    for path in sorted(BROKER.glob("*.pcap")):
        for rec in streams(str(path)):
            first = next((c for c in rec.calls if c[0] == "data" and c[1] == TO_SERVER), None)
            if first is not None and first[4].startswith(b"AMQP\x00\x00\x09\x01") and all(c[0] == "data" for c in rec.calls):
                out.append(rec.calls)
    return out


def _streams() -> list[tuple[bytes, bytes]]:
    """Each of those connections as its two whole streams (the most bytes both ways first)."""
    out = [tuple(b"".join(c[4] for c in calls if c[1] == d) for d in (TO_SERVER, TO_CLIENT)) for calls in _recorded()]
    return sorted(out, key=lambda s: -min(len(s[0]), len(s[1])))


def _calls(to_server: bytes, to_client: bytes, rnd: random.Random, drain_every: int) -> list[tuple]:
    """("data", direction, offset, ts, bytes) and ("drain",) calls: random segments, directions taking turns."""
    pieces: dict[str, list] = {}
    for d, stream in ((TO_SERVER, to_server), (TO_CLIENT, to_client)):
        at, out = 0, []
        while at < len(stream):
            n = rnd.choice((rnd.randrange(1, 40), rnd.randrange(40, 600), rnd.randrange(600, 3000)))
            out.append((at, stream[at : at + n]))
            at += n
        pieces[d] = out
    calls: list[tuple] = []
    ts = 1_000
    while pieces[TO_SERVER] or pieces[TO_CLIENT]:
        d = rnd.choice([d for d in pieces if pieces[d]])
        for _ in range(rnd.choice((1, 1, 1, 2, 5))):
            if pieces[d]:
                offset, data = pieces[d].pop(0)
                ts += rnd.choice((0, 1, 7))
                calls.append(("data", d, offset, ts, data))
                if len(calls) % drain_every == 0:
                    calls.append(("drain",))
    return calls


def _run(compiled: bool, calls: list[tuple]) -> tuple:
    dec = Amqp091StreamDecoder("c", compiled=compiled, body_prefix_bytes=8)
    frames, errors, frame_errors = [], [], []
    for call in calls:
        if call[0] == "data":
            dec.data(*call[1:])
        else:
            frames += dec.drain_frames()
            errors += dec.drain_errors()
            frame_errors += dec.drain_frame_errors()
    dec.close()
    frames += dec.drain_frames()
    errors += dec.drain_errors()
    frame_errors += dec.drain_frame_errors()
    return (frames, errors, frame_errors, dec.connection_facts()), dec._held


def _assert_alike(calls: list[tuple]) -> ahead.Held:
    got, held = _run(True, calls)
    want, _ = _run(False, calls)
    for name, g, w in zip(("frames", "errors", "frame_errors", "facts"), got, want):
        assert g == w, name
    assert [list(r) for r in got[0]] == [list(r) for r in want[0]]  # the keys in the same order too
    return held


def test_the_reassemblers_calls_decoded_ahead_give_the_reference_rows_in_its_order():
    ahead_windows = 0
    for calls in _recorded():
        for drain_every in (5, 30, 200):
            with_drains: list[tuple] = []
            for i, call in enumerate(calls):
                with_drains.append(call)
                if i % drain_every == drain_every - 1:
                    with_drains.append(("drain",))
            ahead_windows += _assert_alike(with_drains).ahead
    assert len(_recorded()) >= 10 and ahead_windows > 100, (len(_recorded()), ahead_windows)


def test_random_segments_decoded_ahead_give_the_reference_rows_in_its_order():
    rnd = random.Random(32)
    ahead_windows = both = 0
    for to_server, to_client in _streams():
        for drain_every in (7, 40, 400):
            held = _assert_alike(_calls(to_server, to_client, rnd, drain_every))
            ahead_windows += held.ahead
            both += held.ahead > 0 and held.in_order > 0
    assert ahead_windows > 50 and both > 0, (ahead_windows, both)


def _frame_starts(stream: bytes) -> list[int]:
    pos, out = (8 if stream[:4] == b"AMQP" else 0), []
    while pos + 8 <= len(stream):
        size = int.from_bytes(stream[pos + 3 : pos + 7], "big")
        out.append(pos)
        pos += size + 8
    return out


def test_damage_inside_a_window_is_fed_one_by_one_and_decodes_as_the_reference():
    rnd = random.Random(33)
    fallbacks = 0
    for to_server, to_client in _streams():
        for damage in ("frame_end", "size"):
            starts = _frame_starts(to_server)
            at = starts[len(starts) * 2 // 3]
            stream = bytearray(to_server)
            if damage == "frame_end":
                size = int.from_bytes(stream[at + 3 : at + 7], "big")
                stream[at + size + 7] ^= 0x01
            else:
                stream[at + 3 : at + 7] = (1 << 30).to_bytes(4, "big")
            held = _assert_alike(_calls(bytes(stream), to_client, rnd, 25))
            fallbacks += held.in_order
    assert fallbacks > 0


def test_frame_errors_of_both_directions_in_one_window_keep_the_reference_order():
    """Bodies on a channel with no open message and basic.acks on channel 0, both ways, in one window after the
    first half of each stream: frame errors from both directions in a window decoded ahead."""
    body = _frame(3, 1, b"orphan body")
    ack0 = _frame(1, 0, struct.pack(">HHQB", 60, 80, 1, 0))
    decoded_ahead = 0
    for to_server, to_client in _streams()[:3]:
        cut_s, cut_c = _frame_starts(to_server), _frame_starts(to_client)
        s_at, c_at = cut_s[len(cut_s) // 2], cut_c[len(cut_c) // 2]
        calls: list[tuple] = [("data", TO_SERVER, 0, 1, to_server[:s_at]), ("data", TO_CLIENT, 0, 2, to_client[:c_at]), ("drain",)]
        s_off, c_off = s_at, c_at
        for ts, (d, piece) in enumerate([(TO_SERVER, body + ack0), (TO_CLIENT, ack0), (TO_SERVER, body), (TO_CLIENT, body + body),
                                         (TO_SERVER, ack0), (TO_CLIENT, ack0)], start=3):
            off = s_off if d == TO_SERVER else c_off
            calls.append(("data", d, off, ts, piece))
            s_off, c_off = (s_off + len(piece), c_off) if d == TO_SERVER else (s_off, c_off + len(piece))
        calls.append(("drain",))
        calls += [("data", TO_SERVER, s_off, 10, to_server[s_at:]), ("data", TO_CLIENT, c_off, 11, to_client[c_at:])]
        held = _assert_alike(calls)
        decoded_ahead += held.ahead
    assert decoded_ahead >= 3


def test_segments_that_are_not_contiguous_are_fed_one_by_one():
    """A segment repeated (the reassembler never does it; the decoder must not care) and one skipped (a hole
    nobody reported)."""
    rnd = random.Random(35)
    to_server, to_client = _streams()[0]
    calls = _calls(to_server, to_client, rnd, 50)
    data_at = [i for i, c in enumerate(calls) if c[0] == "data" and c[1] == TO_CLIENT]
    repeat = calls[data_at[len(data_at) // 2]]
    with_repeat = calls[: data_at[len(data_at) // 2] + 1] + [repeat] + calls[data_at[len(data_at) // 2] + 1 :]
    assert _assert_alike(with_repeat).in_order > 0
    skipped = [c for i, c in enumerate(calls) if i != data_at[2 * len(data_at) // 3]]
    assert _assert_alike(skipped).in_order > 0


@pytest.mark.parametrize("round_segments, max_rounds", [(1, 16), (1, 1), (4, 3), (256, 16)])
def test_a_window_held_whole_is_decoded_ahead_again_after_its_handshake(monkeypatch, round_segments, max_rounds):
    """A connection held whole (nothing drains it until its close): its first barrier (start-ok, tune) is at its
    head. Rounds feed each barrier's segment alone and decode the rest ahead again (``ahead.ROUND_SEGMENTS`` and
    ``MAX_ROUNDS`` lowered so that every fixture's windows take them, and the cap ends them early): the reference's
    rows in its order, and windows decoded ahead that the one-by-one feed alone never decodes ahead."""
    monkeypatch.setattr(ahead, "ROUND_SEGMENTS", round_segments)
    monkeypatch.setattr(ahead, "MAX_ROUNDS", max_rounds)
    rnd = random.Random(36)
    decoded_ahead = fed_alone = 0
    for to_server, to_client in _streams():
        held = _assert_alike(_calls(to_server, to_client, rnd, 10**9))
        decoded_ahead += held.ahead
        fed_alone += held.in_order
    assert fed_alone > 0
    if round_segments == 1:
        assert decoded_ahead > 0, decoded_ahead


def test_rounds_after_damage_decode_as_the_reference(monkeypatch):
    """A frame-end flipped two-thirds into a connection held whole, rounds at every barrier: the decoder leaves its
    steady state at the damage (resynchronising), so the rest is fed one by one, as the reference."""
    monkeypatch.setattr(ahead, "ROUND_SEGMENTS", 1)
    rnd = random.Random(37)
    for to_server, to_client in _streams()[:4]:
        starts = _frame_starts(to_server)
        at = starts[len(starts) * 2 // 3]
        stream = bytearray(to_server)
        size = int.from_bytes(stream[at + 3 : at + 7], "big")
        stream[at + size + 7] ^= 0x01
        _assert_alike(_calls(bytes(stream), to_client, rnd, 10**9))


def test_method_frames_seen_before_give_the_reference_rows_from_the_memo(monkeypatch):
    """The compiled path's memo of method frames decoded by Python (``stream._MEMO``): every broker fixture's
    connection decoded twice over from an empty memo (the second time its handshake, declares and closes are memo
    hits, their arguments copied before the facts' handlers run) gives the reference's frames, errors and facts both
    times; the frames that carry secrets (start-ok) and the basic class are never remembered; the memo empties when
    full and stays at most ``MEMO_ENTRIES``."""
    from amqplens.decode.v0_9_1 import stream

    from tests.accounting import CountedMemo

    memo = CountedMemo()
    monkeypatch.setattr(stream, "_MEMO", memo)
    added = []
    for calls in _recorded():
        for _ in range(2):
            before = len(stream._MEMO)
            _assert_alike(calls)
            added.append(len(stream._MEMO) - before)
    assert sum(added[0::2]) > 0 and sum(added[1::2]) == 0  # the second decoding of each connection: hits only
    assert memo.hits >= 5 * len(_recorded()), memo.hits
    assert stream._MEMO and all(k[1][:4] not in stream._NOT_MEMO for k in stream._MEMO)
    assert not any(k[1][:4] == b"\x00\x0a\x00\x0b" or k[1][:2] == b"\x00\x3c" for k in stream._MEMO)


def test_the_memo_is_bounded(monkeypatch):
    from amqplens.decode.v0_9_1 import stream

    monkeypatch.setattr(stream, "MEMO_ENTRIES", 3)
    monkeypatch.setattr(stream, "_MEMO", {})
    for calls in _recorded()[:4]:
        _assert_alike(calls)
        assert len(stream._MEMO) <= 3
