"""A direction decoded ahead of the other (the compiled path): a connection's segments held, then framed a
direction at a time, their rows put back in the order segment-by-segment feeding gives.

The reassembler hands a connection's bytes segment by segment in capture order, and the peers take turns: on a
broker's load the same direction's consecutive segments average 1.15 packets (2.8 frames per segment), so the
compiled walk saw a segment's few frames per call and the Python around each call cost more than the walk saved.
Once both directions are framing (``SYNCED``) and the dialect is known, ``Amqp091StreamDecoder`` holds what it is
fed (``Held``) until a drain, a gap, the close or ``MAX_BYTES``, then ``catch_up``:

- finds in each direction's held bytes the first frame not to decode ahead (``hot_kernel.window_ok``): one the
  framing loop would not accept or the walk does not know, or a method of the connection class (the only frames
  with effects the other direction reads: the connection facts, the frame limit, the dialect); the held segment
  where it starts, the earlier of the two directions', is the barrier;
- feeds each direction's segments before the barrier in one call (one walk), then puts their frame rows and frame
  errors back in the reference's order: a frame is decoded when the segment that completes it is fed, so its place
  is that segment's place among the held ones, then its offset; every frame completed before the barrier is one
  the walk knows and that reads nothing the other direction changes;
- feeds the segments from the barrier on one by one, exactly as they came (the connection's close, damage). A
  short connection is held whole, its handshake included, so all of it goes this way: decoding the rest ahead
  after each handshake frame (rounds of barriers) was measured slower, see docs/performance.md.

The rows are the reference's, in its order (``tests/v0_9_1/test_hotpath.py``, ``tests/v0_9_1/test_ahead.py``).
"""

from __future__ import annotations

import numpy as np

from amqplens.decode.streaming import SYNCED, StreamDecoderBase
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, Run
from amqplens.decode.v0_9_1.hotpath import HotPieces, HotRows, hot_tables

MAX_BYTES = 4 << 20  # bytes held per connection before they are decoded anyway
ROUND_SEGMENTS = 256  # segments after a barrier worth decoding ahead again (a round); fewer go one by one
MAX_ROUNDS = 16  # rounds a window at most: each scans the rest of the window's bytes
_DIRECTIONS = (TO_SERVER, TO_CLIENT)


class Held:
    """Segments held since the last catch-up, in the order they came: ``(direction, offset, ts_us, data)`` tuples
    and ``Run``s."""

    __slots__ = ("segments", "bytes", "ahead", "in_order")

    def __init__(self) -> None:
        self.segments: list = []
        self.bytes = 0
        self.ahead = self.in_order = 0  # catch-ups that decoded ahead (some segments) / fed segments one by one


def steady(dec) -> bool:
    """Whether ``dec`` may start holding: both directions framing, nothing buffered beyond a partial frame."""
    if dec._closed or dec._facts.facts["dialect_source"] is None:
        return False
    return all(f.mode == SYNCED and f.started and f.region is None and not f.chunks for f in dec._framers.values())


def hold_run(dec, held: Held, run: Run, steady_now, catch_up_now, max_bytes: int) -> None:
    """A decoder's ``data_run``: the run held whole where ``data`` would hold its first segment (``steady_now``), else
    its segments fed one by one through ``data``. Held, the bytes decoded (``catch_up_now``) once ``max_bytes`` are
    held: later in the run than ``data`` would, which changes where the catch-ups fall, not the rows (a catch-up's
    rows are those of the one-by-one feed wherever it falls)."""
    if dec._closed or not (held.segments or steady_now(dec)):
        for segment in run.segments():
            dec.data(*segment)
        return
    held.segments.append(run)
    held.bytes += int(run.lengths.sum())
    if held.bytes >= max_bytes:
        catch_up_now(dec, held)


def catch_up(dec, held: Held, stop_at=None, interleave=None, steady_now=None) -> None:
    """Decode what ``held`` holds (see the module's text) and empty it. ``stop_at(direction, buf)``: where the first
    frame not to decode ahead starts in a direction's held bytes (default 0-9-1's ``hot_kernel.window_ok``, made
    again each round: the frame limit may change); ``interleave(a, b, keys)``: both directions' items in the
    reference's order (default ``_interleave``); ``steady_now(dec)``: whether the decoder may decode ahead again after
    a barrier (default ``steady``). AMQP 1.0 (``v1_0/ahead.py``) passes its own.

    Rounds: where at least ``ROUND_SEGMENTS`` segments follow a barrier (a long connection's first window, its
    handshake at its head), the barrier's segment is fed alone and the rest is a new catch-up, as if a drain had come
    there (a catch-up's rows are the one-by-one feed's wherever it falls); at most ``MAX_ROUNDS`` tries a window, so
    a connection with many connection-class frames (blocked, unblocked) costs a bounded number of scans. A short
    connection's window is fed one by one as before: rounds cost it more than they save (docs/performance.md)."""
    segments = held.segments
    held.segments, held.bytes = [], 0
    if not segments:
        return
    default_stop = stop_at is None
    stop_at = stop_at or _stop_0_9_1(dec)
    if _stops_at_once(dec, segments, stop_at):  # a short connection held whole: no columns, no directions' runs
        held.in_order += 1
        for segment in segments:
            StreamDecoderBase.data(dec, *segment)
        return
    cols = _Columns(segments)
    del segments
    interleave = interleave or _interleave
    steady_now = steady_now or steady
    tries = MAX_ROUNDS
    fed_alone = False
    while True:
        barrier = _ahead(dec, held, cols, stop_at, interleave)
        if barrier >= len(cols.codes):
            return
        if fed_alone is False:
            held.in_order += 1
            fed_alone = True
        rest = cols.segments(barrier, barrier + 1 if tries else None)
        for segment in rest:
            StreamDecoderBase.data(dec, *segment)
        barrier += len(rest)
        if not tries or len(cols.codes) - barrier < ROUND_SEGMENTS or not steady_now(dec):
            for segment in cols.segments(barrier):
                StreamDecoderBase.data(dec, *segment)
            return
        tries -= 1
        cols = cols.tail(barrier)
        if default_stop:
            stop_at = _stop_0_9_1(dec)  # the frame limit may have changed


def _stops_at_once(dec, segments: list, stop_at) -> bool:
    """Whether the barrier of a window of loose segments, too few for rounds, is its first segment (a frame not to
    decode ahead starts it: a short connection's start-ok or tune): ``_ahead`` would decode nothing ahead, so the
    window is fed one by one without its columns. Only a first segment at the start of its direction's frame (no
    bytes pending) is looked at; anything else goes the long way, which decides the same."""
    if len(segments) > ROUND_SEGMENTS or not all(type(s) is tuple for s in segments):
        return False
    direction, _, _, data = segments[0]
    framer = dec._framers.get(direction)
    return framer is not None and not framer.pending and len(data) > 0 and stop_at(direction, data) == 0


class _Columns:
    """Held segments as columns: each one's direction code, offset, time, length and place in its direction's bytes
    (``starts``), and each direction's bytes end to end (``bufs``); Python per loose segment, not per run's."""

    def __init__(self, items: list) -> None:
        parts: list[tuple] = []
        loose: list[tuple] = []
        chunks: dict[str, list[bytes]] = {d: [] for d in _DIRECTIONS}
        for item in items:
            if isinstance(item, Run):
                if loose:
                    parts.append(_loose_columns(loose))
                    loose = []
                parts.append((item.codes, item.offsets, item.times, item.lengths))
                for d, buf in item.bufs.items():
                    if buf:
                        chunks[d].append(buf)
            else:
                loose.append(item)
                chunks[item[0]].append(item[3])
        if loose:
            parts.append(_loose_columns(loose))
        self.codes, self.offsets, self.times, self.lengths = (
            p[0] if len(parts) == 1 else np.concatenate(p) for p in zip(*parts))
        self.bufs = {d: c[0] if len(c) == 1 else b"".join(c) for d, c in chunks.items()}
        self.starts = np.zeros(len(self.codes), np.int64)
        for code in range(len(_DIRECTIONS)):
            mine = self.codes == code
            lengths = self.lengths[mine]
            self.starts[mine] = np.cumsum(lengths) - lengths

    def segments(self, first: int, stop: int | None = None) -> list[tuple[str, int, int, bytes]]:
        """Segments ``first`` to ``stop`` (the last without one) as tuples."""
        bufs = [self.bufs[d] for d in _DIRECTIONS]
        part = slice(first, stop)
        return [(_DIRECTIONS[c], o, t, bufs[c][s:s + n]) for c, o, t, s, n in zip(
            self.codes[part].tolist(), self.offsets[part].tolist(), self.times[part].tolist(),
            self.starts[part].tolist(), self.lengths[part].tolist())]

    def tail(self, first: int) -> "_Columns":
        """The segments ``first`` on as columns of their own (a copy of each direction's bytes from there)."""
        out = _Columns.__new__(_Columns)
        out.codes, out.offsets, out.times, out.lengths = (a[first:] for a in (self.codes, self.offsets, self.times, self.lengths))
        out.starts = self.starts[first:].copy()
        out.bufs = {}
        for code, d in enumerate(_DIRECTIONS):
            mine = out.codes == code
            cut = int(out.starts[mine][0]) if mine.any() else len(self.bufs[d])
            out.bufs[d] = self.bufs[d][cut:]
            out.starts[mine] -= cut
        return out


def _loose_columns(loose: list[tuple]) -> tuple:
    return (np.array([_DIRECTIONS.index(s[0]) for s in loose], np.int8), np.array([s[1] for s in loose], np.int64),
            np.array([s[2] for s in loose], np.int64), np.array([len(s[3]) for s in loose], np.int64))


def _stop_0_9_1(dec):
    from amqplens.decode.v0_9_1.hot_kernel import M_STOP_CLASS, window_ok

    hot = hot_tables(dec.tables)
    limit = dec.frame_limit()
    stop_class = int(hot.meta[M_STOP_CLASS])  # a numpy scalar argument costs numba's dispatcher 13 us a call, an int 0.3
    return lambda d, buf: window_ok(np.frombuffer(buf, np.uint8), len(buf), limit, hot.meta, stop_class)


def _ahead(dec, held: Held, cols: _Columns, stop_at, interleave) -> int:
    """Decode the segments before the barrier ahead; returns the barrier (the segments' count: none), 0 when nothing
    is decoded ahead: a direction's held segments not contiguous (the one-by-one feed handles holes and repeats) or
    a frame not to decode ahead from the first segment on."""
    runs = {d: np.flatnonzero(cols.codes == code) for code, d in enumerate(_DIRECTIONS)}
    barrier = len(cols.codes)  # the first held segment (in arrival order) that starts a frame not to decode ahead
    for d, idx in runs.items():
        if not len(idx):
            continue
        framer = dec._framers[d]
        offsets = cols.offsets[idx]
        if offsets[0] != framer.expected or (offsets[1:] != (offsets + cols.lengths[idx])[:-1]).any():
            return 0
        buf = framer.pending + cols.bufs[d] if framer.pending else cols.bufs[d]
        stop = stop_at(d, buf)
        if stop < len(buf):
            at = int(np.searchsorted(offsets, framer.base + stop, "right")) - 1
            barrier = min(barrier, int(idx[at]) if at >= 0 else 0)
    if barrier == 0:
        return 0
    held.ahead += 1
    ahead = {d: idx[idx < barrier] for d, idx in runs.items()}
    f0, e0 = len(dec._frames), len(dec._frame_errors)
    cuts = []
    for d in _DIRECTIONS:
        idx = ahead[d]
        if len(idx):
            framer = dec._framers[d]
            last = idx[-1]
            data = cols.bufs[d][:int(cols.starts[last] + cols.lengths[last])]
            try:
                framer.feed_run(int(cols.offsets[idx[0]]), data, cols.offsets[idx], cols.times[idx])
            except Exception as exc:  # a decoder bug must not fail the task: keep the bytes as an error
                dec._internal_error(framer, exc, int(cols.times[last]))
        cuts.append((len(dec._frames), len(dec._frame_errors)))
    if len(ahead[TO_SERVER]) and len(ahead[TO_CLIENT]):
        keys = {d: (cols.offsets[ahead[d]], ahead[d].astype(np.int64)) for d in _DIRECTIONS}
        (fa, ea), (fb, eb) = cuts
        if f0 < fa < fb:
            dec._frames[f0:] = interleave(dec._frames[f0:fa], dec._frames[fa:fb], keys)
        if e0 < ea < eb:
            errors = dec._frame_errors[e0:]
            errors.sort(key=lambda row: _key_of(keys[row["direction"]], row["stream_offset"] + row["length"] - 1))
            dec._frame_errors[e0:] = errors
    return barrier


def _key_of(key: tuple[np.ndarray, np.ndarray], last_byte: int) -> int:
    starts, places = key
    return int(places[np.searchsorted(starts, last_byte, "right") - 1])


def _row_keys(items: list, key: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's place (of the segment that completed its frame) and the rows where each item starts."""
    from amqplens.decode.v0_9_1 import hot_kernel as k

    ends: list[np.ndarray] = []
    sizes = np.empty(len(items), np.int64)
    loose: list[int] = []  # the row dicts' last bytes since the last HotRows, made one array at once
    for n, item in enumerate(items):
        if isinstance(item, HotRows):
            if loose:
                ends.append(np.array(loose, np.int64))
                loose = []
            v = item.builder.vals[item.start : item.stop]
            ends.append(v[:, k.V_OFFSET] + v[:, k.V_SIZE] - 1)
            sizes[n] = item.stop - item.start
        else:
            loose.append(item["stream_offset"] + item["size"] - 1)
            sizes[n] = 1
    if loose:
        ends.append(np.array(loose, np.int64))
    starts, places = key
    rows = places[np.searchsorted(starts, np.concatenate(ends), "right") - 1]
    bounds = np.zeros(len(items) + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return rows, bounds


def _interleave(a: list, b: list, keys: dict) -> list:
    """The items of the two directions (each in its own order) merged into the reference's order, cut where the
    other direction's rows come between: runs of each direction's rows, alternating, cut again at its items'
    bounds; the pieces found with a few array operations and handed on as arrays (``HotPieces``: a connection's
    publishes and acks alternate, a piece per frame or two, too many for a Python object each)."""
    ka, bounds_a = _row_keys(a, keys[TO_SERVER])
    kb, bounds_b = _row_keys(b, keys[TO_CLIENT])
    before = np.searchsorted(ka, kb)  # for each to_client row, the to_server rows ahead of it (places differ)
    b_runs = np.concatenate(([0], np.flatnonzero(np.diff(before)) + 1))  # run r of b starts at b_runs[r]
    a_runs = np.concatenate(([0], before[b_runs]))  # run r of a: [a_runs[r], a_runs[r + 1]); the last to the end
    pieces = []
    for source, runs, bounds, order in ((a, a_runs, bounds_a, 0), (b, b_runs, bounds_b, 1)):
        cuts = np.union1d(runs, bounds[:-1])
        cuts = cuts[cuts < bounds[-1]]
        ends = np.append(cuts[1:], bounds[-1])
        run = np.searchsorted(runs, cuts, "right") - 1
        pieces.append((run, np.full(len(cuts), order), cuts, ends, np.searchsorted(bounds, cuts, "right") - 1))
    run, side, starts, ends, item = (np.concatenate(parts) for parts in zip(*pieces))
    sequence = np.lexsort((starts, side, run))
    side, starts, ends, item = side[sequence], starts[sequence], ends[sequence], item[sequence]
    at = item + side * len(a)  # the piece's item in a + b
    first = np.concatenate((bounds_a[:-1], bounds_b[:-1]))[at]
    return [HotPieces(a + b, at, starts - first, ends - first)]
