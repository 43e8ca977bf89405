"""Large loopback segments captured out of order: the rows of the capture as if they had come in order.

Issue 38, case 6: a 2 GB capture of pika publishers (three channels each) held
segments of 65,483 bytes with the second captured after the third; the
reassembler released the third's bytes with their own, earlier time, the job's
sort by time put its hundreds of frames before the second's, beyond the
lifecycle's reorder window, and the lifecycle met a content header before its
basic.publish: two rows with one delivery_id (one ``content_incomplete``, one
``method_not_seen``), ``deliveries.key_unique`` failed.

Built from the real-broker fixture ``tests/data/broker/pipelined_publish.pcap``
(600 publishes of 256 octets, round robin on three confirm-mode channels, one
burst in segments of 27 to 53 KB; see its README): three consecutive client
segments A, B, C, each holding hundreds of frames of the three channels. Tried:

- ``swapped``: B and C trade places (the times stay with the places, so C is
  captured ahead of the hole B leaves);
- ``overlapping``: C ahead of the hole, then in place of B a retransmission
  from 100 bytes before B to 100 bytes into C (overlapping both neighbours);
- ``overflow``: ``swapped`` with an out-of-order buffer smaller than C
  (``capture.max_ooo_buffer`` 16 KiB): the hole is given up (a gap row), the
  codec resyncs after it and the late B is a retransmission.

Oracles: the in-order capture's rows (frames, deliveries, connections; only
times and the out-of-order and retransmission counters may differ), the
client's own counts (``pipelined_publish.oracle.json``), and tshark with
``tcp.reassemble_out_of_order`` for the frames of the reordered files.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json

import pytest

from amqplens.decode import decode_capture
from amqplens.lifecycle import LifecycleRunner
from amqplens.lifecycle.records import frame_id_of
from tests.tcp.reorder_burst import FIXTURE, OVERLAP, SMALL_BUFFER, variant
from tests.v0_9_1 import tshark_oracle

DIRECTIONS = ("to_server", "to_client")
# what legitimately follows the packets' order: the frames' and deliveries' times, the out-of-order counters
FRAME_TIME = {"ts_us"}
DELIVERY_TIMES = {"sent_ts_us", "settle_latency_us"}


@functools.lru_cache(maxsize=None)
def rows(kind: str, tmp: str) -> dict:
    """Decode (and run the lifecycle on) the in-order fixture (``kind`` "original") or a variant."""
    path = FIXTURE
    where: dict = {}
    if kind != "original":
        data, where = variant("swapped" if kind == "overflow" else kind)
        path = f"{tmp}/{kind}.pcap"
        with open(path, "wb") as f:
            f.write(data)
    cap = decode_capture(path, capture_id="cap", tls=False,
                         max_ooo_bytes=SMALL_BUFFER if kind == "overflow" else 4 << 20)
    frames = cap.frames()  # sorted as the lifecycle job sorts them
    for f in frames:
        f["frame_id"], f["capture_id"] = frame_id_of(f), "cap"
    runner = LifecycleRunner()
    runner.feed(frames)
    runner.finish()
    (conn,) = cap.connections
    return {"path": str(path), "capture": cap, "conn": conn, "frames": frames, "deliveries": runner.drain_deliveries(),
            "stats": runner.stats, "where": where}


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("ooo"))
    return lambda kind: rows(kind, tmp)


def _by_key(frames: list, drop=FRAME_TIME) -> dict:
    return {(f["direction"], f["stream_offset"]): {k: v for k, v in f.items() if k not in drop} for f in frames}


def _deliveries(deliveries: list) -> dict:
    return {d["delivery_id"]: {k: v for k, v in d.items() if k not in DELIVERY_TIMES} for d in deliveries}


def _record(conn, drop=()) -> dict:
    return {k: v for k, v in dataclasses.asdict(conn.record).items() if k not in drop}


# ---------------------------------------------------------------------------- in order again


@pytest.mark.parametrize("kind", ["swapped", "overlapping"])
def test_a_hole_filled_late_gives_the_rows_of_the_capture_in_order(decoded, kind):
    ref, got = decoded("original"), decoded(kind)
    where = got["where"]
    assert got["conn"].record.out_of_order_bytes_to_server == where["c_len"]  # the case happened
    assert _by_key(got["frames"]) == _by_key(ref["frames"])
    assert _deliveries(got["deliveries"]) == _deliveries(ref["deliveries"])
    assert got["stats"]["late_frames"] == 0
    counters = {"out_of_order_bytes_to_server"}
    if kind == "overlapping":  # a larger packet, and 2 * OVERLAP bytes that came twice (the same bytes)
        counters |= {"retransmitted_bytes_to_server", "wire_bytes_to_server"}
        assert got["conn"].record.retransmitted_bytes_to_server == 2 * OVERLAP
        assert got["conn"].record.overlap_conflicts == 0
    assert _record(got["conn"], counters) == _record(ref["conn"], counters)
    assert got["capture"].gaps == []


def test_frames_that_waited_for_the_hole_take_the_time_it_filled(decoded):
    ref, got = decoded("original"), decoded("swapped")
    lo = got["where"]["b_off"]
    hi = lo + got["where"]["b_len"] + got["where"]["c_len"]
    theirs = {(f["direction"], f["stream_offset"]): f["ts_us"] for f in ref["frames"]}
    mine = {(f["direction"], f["stream_offset"]): f["ts_us"] for f in got["frames"]}
    moved = {k for k in theirs if k[0] == "to_server" and lo <= k[1] < hi}
    assert {k: mine[k] for k in theirs if k not in moved} == {k: t for k, t in theirs.items() if k not in moved}
    # B's packet now comes last, at C's old time; C's frames waited for it
    assert {mine[k] for k in moved} == {max(theirs[k] for k in moved)}
    deliveries = {d["delivery_id"]: d for d in ref["deliveries"]}
    for d in got["deliveries"]:
        assert d["settled_ts_us"] == deliveries[d["delivery_id"]]["settled_ts_us"]  # the broker's confirms did not move
        assert d["sent_ts_us"] == mine[("to_server", int(d["frame_ids"][0].rsplit("-", 1)[1]))]


def test_the_client_counted_what_the_rows_say(decoded):
    client = json.loads(FIXTURE.with_suffix(".oracle.json").read_text())["client"]
    for kind in ("original", "swapped", "overlapping"):
        deliveries = decoded(kind)["deliveries"]
        assert len({d["delivery_id"] for d in deliveries}) == len(deliveries), kind
        assert collections.Counter(d["outcome"] for d in deliveries) == {"confirmed": client["published"]}, kind
        assert client["confirmed"] == client["published"]
        assert not [d for d in deliveries if d["flags"]], kind
        assert sorted(collections.Counter(d["channel"] for d in deliveries).values()) == [200, 200, 200], kind


def test_a_directions_frame_times_never_go_back_in_stream_order(decoded):
    for kind in ("swapped", "overlapping", "overflow"):
        frames = decoded(kind)["frames"]
        for d in DIRECTIONS:
            times = [f["ts_us"] for f in sorted(frames, key=lambda f: f["stream_offset"]) if f["direction"] == d]
            assert times == sorted(times), (kind, d)


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_oracle.available(), reason="tshark is not installed")
@pytest.mark.parametrize("kind", ["swapped", "overlapping"])
def test_tshark_reads_the_same_frames_from_the_reordered_file(decoded, kind):
    got = decoded(kind)
    (theirs_in_order,) = [tshark_oracle.frames(str(FIXTURE))]
    theirs = tshark_oracle.frames(got["path"])
    assert theirs == theirs_in_order  # tshark reassembles the reordered file as the original
    ours = sorted(got["frames"], key=lambda f: f["stream_offset"])
    for d in DIRECTIONS:
        (key,) = [k for k in theirs if k[1] == d]
        assert tshark_oracle.ours(ours, d) == theirs[key], d
    channels = collections.Counter(f[0] for f in theirs[next(k for k in theirs if k[1] == "to_server")] if f[1] == 3)
    assert channels == {1: 200, 2: 200, 3: 200}  # a body of every publish, on each of the three channels


# ---------------------------------------------------------------------------- a hole the buffer cannot wait for


def test_a_hole_larger_than_the_buffer_is_a_gap_then_a_resync_not_a_collision(decoded):
    ref, got = decoded("original"), decoded("overflow")
    where, conn = got["where"], got["conn"]
    b_start, b_end = where["b_off"], where["b_off"] + where["b_len"]
    gaps = [(g.connection_id, g.direction, g.offset, g.length, g.reason) for g in got["capture"].gaps]
    assert gaps == [(conn.record.connection_id, "to_server", b_start, where["b_len"], "buffer_overflow")]
    assert conn.record.retransmitted_bytes_to_server == where["b_len"]  # B came after all, too late
    mine, theirs = _by_key(got["frames"]), _by_key(ref["frames"])
    assert set(mine) <= set(theirs)  # nothing invented
    (cut,) = [k for k, f in theirs.items() if k[0] == "to_server" and k[1] < b_start < k[1] + f["size"]]
    errors = [(e["direction"], e["stream_offset"], e["length"], e["reason"]) for e in conn.errors]
    assert errors == [("to_server", cut[1], b_start - cut[1], "truncated_by_gap")]
    # every other frame outside the hole decodes as in the original: the codec resyncs at C's first frame; after the
    # hole it numbers the channels' messages on from what it saw (it cannot know how many the hole held)
    outside = {k for k, f in theirs.items() if k != cut and (k[1] + f["size"] <= b_start or k[1] >= b_end or k[0] == "to_client")}
    assert outside == set(mine)
    renumbered = {"message_seq"}
    for k in outside:
        after = k[0] == "to_server" and k[1] >= b_end
        assert {c: v for c, v in mine[k].items() if not (after and c in renumbered)} == \
            {c: v for c, v in theirs[k].items() if not (after and c in renumbered)}, k
    # one row per publish seen, plus one for the content whose publish the hole took; no two share an id
    deliveries = got["deliveries"]
    publishes = sum(1 for f in got["frames"] if f["method_name"] == "publish")
    flags = collections.Counter(f for d in deliveries for f in d["flags"] or ())
    assert flags == {"content_incomplete": 1, "method_not_seen": 1}
    assert len(deliveries) == publishes + 1 == len({d["delivery_id"] for d in deliveries})
    assert got["stats"]["late_frames"] == 0


# ---------------------------------------------------------------------------- byte accounting


@pytest.mark.parametrize("kind", ["original", "swapped", "overlapping", "overflow"])
def test_frames_plus_errors_plus_gaps_are_the_stream(decoded, kind):
    got = decoded(kind)
    conn = got["conn"]
    frame_at = {(f["direction"], f["stream_offset"]) for f in conn.frames}
    for d in DIRECTIONS:
        spans = sorted([(f["stream_offset"], f["size"]) for f in conn.frames if f["direction"] == d]
                       + [(e["stream_offset"], e["length"]) for e in conn.errors  # frame errors are frame bytes
                          if e["direction"] == d and (d, e["stream_offset"]) not in frame_at]
                       + [(g.offset, g.length) for g in got["capture"].gaps if g.direction == d])
        assert sum(n for _, n in spans) == getattr(conn.record, f"bytes_{d}"), (kind, d)
        assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:])), (kind, d)  # they tile the stream
