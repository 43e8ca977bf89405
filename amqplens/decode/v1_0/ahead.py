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

from amqplens.decode.streaming import SYNCED
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_9_1.ahead import Held
from amqplens.decode.v0_9_1.ahead import catch_up as _catch_up
from amqplens.decode.v1_0.hotpath import Hot10Rows, Ordered10

MAX_BYTES = 4 << 20  # bytes held per connection before they are decoded anyway


def steady(dec) -> bool:
    """Whether ``dec`` may start holding: both directions framing, in the AMQP layer or with no protocol header seen
    (a capture that starts after the connection opened: the framers resynchronised), nothing buffered beyond a
    partial frame."""
    if dec._closed or dec._facts.facts["dialect_source"] is None or "sasl" in dec._layer.values():
        return False
    return all(f.mode == SYNCED and f.started and f.region is None and not f.chunks for f in dec._framers.values())


def catch_up(dec, held: Held) -> None:
    """Decode what ``held`` holds (see the module's text) and empty it: 0-9-1's mechanism (``v0_9_1.ahead``) with
    1.0's window scan and row order."""
    from amqplens.decode.v1_0.hot_kernel import window_ok

    def stop_at(d: str, buf: bytes) -> int:
        return int(window_ok(np.frombuffer(buf, np.uint8), len(buf), dec.frame_limit(d)))

    _catch_up(dec, held, stop_at, _ordered, steady)


def _ordered(a: list, b: list, keys: dict) -> list:
    """Both directions' items as one ``Ordered10``: each row's place is that of the held segment holding its last byte."""
    places = np.concatenate([_places(a, keys[TO_SERVER]), _places(b, keys[TO_CLIENT])])
    return [Ordered10(a + b, np.argsort(places, kind="stable"))]


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
