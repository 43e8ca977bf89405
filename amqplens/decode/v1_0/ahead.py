"""AMQP 1.0's direction decoded ahead of the other (the compiled path): a connection's segments held, then framed a
direction at a time, their rows put back in the order segment-by-segment feeding gives (0-9-1's ``v0_9_1.ahead``).

Under load a 1.0 connection's directions take turns a segment or two at a time (2.3 frames a walk on the 1.0 load
capture when each segment was framed as it came), so the Python around each walk cost more than the walk saved.
Once both directions are framing in the AMQP layer (after SASL, or with no protocol header seen: a capture that
starts mid-connection) ``Amqp10StreamDecoder`` holds what it is fed
(``v0_9_1.ahead.Held``) until a drain, a gap, the close or ``MAX_BYTES``, then ``catch_up``:

- finds in each direction's held bytes the first frame not to decode ahead (``hot_kernel.window_ok``): a protocol
  header, a frame the framing loop would not cut, a SASL frame, an open or a close (what the other direction reads:
  the frame limit, the connection facts) or a performative it cannot tell; what lies between (begin, attach,
  transfers, flows, dispositions, detach, end: their effects stay in their direction's message tracker) is
  decoded ahead; the held segment where the first such frame starts, the earlier of the two directions', is the
  barrier;
- feeds each direction's segments before the barrier in one call, then puts their frame rows back in the
  reference's order (``Ordered10``): a frame is decoded when the segment that completes it is fed, so its place is
  that segment's place among the held ones, then its offset; frame errors alike;
- feeds the segments from the barrier on one by one, as they came.

The rows are the reference's, in its order (``tests/v1_0/test_hotpath.py``).
"""

from __future__ import annotations

import numpy as np

from amqplens.decode.streaming import SYNCED, StreamDecoderBase
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_9_1.ahead import Held
from amqplens.decode.v1_0.hotpath import Hot10Rows, Ordered10

MAX_BYTES = 4 << 20  # bytes held per connection before they are decoded anyway
_DIRECTIONS = (TO_SERVER, TO_CLIENT)


def steady(dec) -> bool:
    """Whether ``dec`` may start holding: both directions framing, in the AMQP layer or with no protocol header seen
    (a capture that starts after the connection opened: the framers resynchronised), nothing buffered beyond a
    partial frame."""
    if dec._closed or dec._facts.facts["dialect_source"] is None or "sasl" in dec._layer.values():
        return False
    return all(f.mode == SYNCED and f.started and f.region is None and not f.chunks for f in dec._framers.values())


def catch_up(dec, held: Held) -> None:
    """Decode what ``held`` holds (see the module's text) and empty it."""
    segments = held.segments
    held.segments, held.bytes = [], 0
    if not segments:
        return
    barrier = _ahead(dec, held, segments)
    if barrier < len(segments):
        held.in_order += 1
        for seg in segments[barrier:]:
            StreamDecoderBase.data(dec, *seg)


def _ahead(dec, held: Held, segments: list) -> int:
    """Decode the segments before the barrier ahead; returns the barrier (0: nothing decoded ahead, a direction's
    held segments not contiguous or the first one starting a frame not to decode ahead)."""
    from amqplens.decode.v1_0.hot_kernel import window_ok

    runs: dict[str, list[int]] = {TO_SERVER: [], TO_CLIENT: []}
    for i, seg in enumerate(segments):
        runs[seg[0]].append(i)
    barrier = len(segments)
    for d, idx in runs.items():
        if not idx:
            continue
        framer = dec._framers[d]
        expected = framer.expected
        for i in idx:
            _, offset, _, data = segments[i]
            if offset != expected:
                return 0
            expected += len(data)
        buf = b"".join([framer.pending, *(segments[i][3] for i in idx)])
        stop = window_ok(np.frombuffer(buf, np.uint8), len(buf), dec.frame_limit(d))
        if stop < len(buf):
            at = int(np.searchsorted([segments[i][1] for i in idx], framer.base + stop, "right")) - 1
            barrier = min(barrier, idx[at] if at >= 0 else 0)
    if barrier == 0:
        return 0
    held.ahead += 1
    ahead = {d: [i for i in idx if i < barrier] for d, idx in runs.items()}
    f0, e0 = len(dec._frames), len(dec._frame_errors)
    cuts = []
    for d in _DIRECTIONS:
        idx = ahead[d]
        if idx:
            framer = dec._framers[d]
            data = b"".join([segments[i][3] for i in idx])
            try:
                framer.feed_run(segments[idx[0]][1], data, [(segments[i][1], segments[i][2]) for i in idx])
            except Exception as exc:  # a decoder bug must not fail the task: keep the bytes as an error
                dec._internal_error(framer, exc, segments[idx[-1]][2])
        cuts.append((len(dec._frames), len(dec._frame_errors)))
    if ahead[TO_SERVER] and ahead[TO_CLIENT]:
        keys = {d: (np.array([segments[i][1] for i in ahead[d]], np.int64), np.array(ahead[d], np.int64)) for d in _DIRECTIONS}
        (fa, ea), (fb, eb) = cuts
        if f0 < fa < fb:
            items = dec._frames[f0:]
            places = np.concatenate([_places(dec._frames[f0:fa], keys[TO_SERVER]), _places(dec._frames[fa:fb], keys[TO_CLIENT])])
            dec._frames[f0:] = [Ordered10(items, np.argsort(places, kind="stable"))]
        if e0 < ea < eb:
            errors = dec._frame_errors[e0:]
            errors.sort(key=lambda row: _place(keys[row["direction"]], row["stream_offset"] + row["length"] - 1))
            dec._frame_errors[e0:] = errors
    return barrier


def _place(key: tuple[np.ndarray, np.ndarray], last_byte: int) -> int:
    starts, places = key
    return int(places[np.searchsorted(starts, last_byte, "right") - 1])


def _places(items: list, key: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Each row's place: that of the held segment holding its last byte (rows of one direction, in their order)."""
    from amqplens.decode.v1_0 import hot_kernel as hk

    ends: list[np.ndarray] = []
    loose: list[int] = []  # the row dicts' last bytes since the last run of hot rows, made one array at once
    for item in items:
        if isinstance(item, Hot10Rows):
            if loose:
                ends.append(np.array(loose, np.int64))
                loose = []
            ends.append(item.offsets + item.rec[:, hk.R_SIZE] - 1)
        else:
            loose.append(item["stream_offset"] + item["size"] - 1)
    if loose:
        ends.append(np.array(loose, np.int64))
    starts, places = key
    return places[np.searchsorted(starts, np.concatenate(ends), "right") - 1]
