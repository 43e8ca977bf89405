"""Property: whatever happens to the segments, what comes out is the stream.

A random byte stream is cut into random segments, which are reordered within a
window, duplicated (also re-cut, as a retransmission that packs differently),
dropped, or cut short by a snaplen. Whatever arrives, the reassembler must not
raise, every delivered byte must be the stream's byte at that offset, and the
calls must tile the stream (the recording consumer checks that as it goes).
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .tcp_packets import CLIENT, SERVER, handshake, run

M32 = 0xFFFFFFFF


@st.composite
def captures(draw):
    stream = draw(st.binary(min_size=0, max_size=2000))
    isn = draw(st.one_of(st.integers(0, M32), st.integers(M32 - 2500, M32)))
    syn = draw(st.booleans())
    cuts = []
    off = 0
    while off < len(stream):
        size = draw(st.integers(1, 300))
        cuts.append((off, min(off + size, len(stream))))
        off += size
    # Retransmissions: copies of earlier segments, or fresh cuts across them.
    extra = []
    for _ in range(draw(st.integers(0, 6))):
        if cuts and draw(st.booleans()):
            extra.append(draw(st.sampled_from(cuts)))
        elif stream:
            lo = draw(st.integers(0, len(stream) - 1))
            extra.append((lo, draw(st.integers(lo + 1, len(stream)))))
    segments = [(lo, hi, False) for lo, hi in cuts + extra]
    # Each segment may be dropped or cut short by a snaplen.
    kept = []
    for lo, hi, _ in segments:
        fate = draw(st.sampled_from(["keep"] * 6 + ["drop", "snap"]))
        if fate == "keep":
            kept.append((lo, hi, False))
        elif fate == "snap":
            kept.append((lo, draw(st.integers(lo, hi)), True))
    # Reorder within a window: each segment moves back by up to `window` places.
    window = draw(st.integers(0, 8))
    keys = [i + draw(st.floats(0, window)) for i in range(len(kept))]
    order = [seg for _, seg in sorted(zip(keys, kept), key=lambda kv: kv[0])]
    fin = draw(st.booleans())
    max_ooo = draw(st.sampled_from([64, 500, 4096, 1 << 22]))
    return stream, isn, syn, order, fin, max_ooo


def _rows(stream, isn, syn, order, fin):
    rows = handshake(0, c_isn=isn) if syn else []
    t = 1000
    for lo, hi, snapped in order:
        extra = {"truncated": True} if snapped else {}
        rows.append((t, CLIENT, SERVER, "PA", (isn + 1 + lo) & M32, stream[lo:hi], extra))
        t += 10
    if fin:
        rows.append((t, CLIENT, SERVER, "FA", (isn + 1 + len(stream)) & M32, b""))
    return rows


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(captures())
# A segment cut to nothing right after a snaplen hole.
@example((b"\x00" * 4, 0, False, [(0, 1, False), (1, 1, True), (3, 3, True)], False, 64))
def test_delivered_bytes_and_gaps_reproduce_the_stream(capture):
    stream, isn, syn, order, fin, max_ooo = capture
    rows = _rows(stream, isn, syn, order, fin)
    if not rows:
        return
    result = run(rows, max_ooo_bytes=max_ooo)
    if not result.connections:
        assert not syn and all(hi == lo for lo, hi, _ in order)  # nothing but empty segments
        assert result.stats.connections_dropped == 1
        return
    rec, consumer = result.only()
    # Offset 0 is the byte after the SYN, or else the first byte captured.
    first = next((lo for lo, hi, snapped in order if hi > lo or snapped), len(stream) if fin else None)
    base = 0 if syn else first
    if base is None:
        return
    expected = stream[base:]
    for event in consumer.events:
        if event[0] == "data":
            _, _, off, _, data = event
            assert data == expected[off : off + len(data)], off
    assert rec.bytes_to_server <= len(expected)
    if fin:
        assert rec.bytes_to_server == len(expected)
    # A gap never covers a byte captured before it was declared: such bytes were
    # delivered or waiting in the buffer. (Rows are 10 us apart, from t=1000.)
    arrivals = [(1000 + 10 * i, lo, hi) for i, (lo, hi, _) in enumerate(order)]
    snap_ends = {hi - base for lo, hi, snapped in order if snapped}
    for gap in result.gaps:
        lo, hi = base + gap.offset, base + gap.offset + gap.length
        for ts, a, b in arrivals:
            if ts <= gap.ts_us and b > a:
                assert b <= lo or a >= hi, (gap, a, b)
        if gap.reason == "snaplen":
            assert gap.offset in snap_ends, gap
        if gap.reason == "buffer_overflow":
            assert max_ooo < len(stream), gap
    # Every captured byte is delivered once or counted as a retransmission (less one-byte keepalives).
    captured = sum(hi - lo for lo, hi, _ in order)
    delivered = sum(len(e[4]) for e in consumer.events if e[0] == "data")
    one_byte = sum(1 for lo, hi, _ in order if hi - lo == 1)
    assert captured - one_byte <= delivered + rec.retransmitted_bytes_to_server <= captured
    assert rec.out_of_order_bytes_to_server <= delivered
