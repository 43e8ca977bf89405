"""Byte accounting and row shapes of the 0-10 decoder's output."""

from __future__ import annotations

from amqp_decode.v0_10 import ERROR_KEYS, FRAME_KEYS_0_10

DIRECTIONS = ("to_server", "to_client")


def check_accounting(frames: list, errors: list, totals: dict, gaps: dict | None = None) -> None:
    """sum(frame sizes) + sum(error lengths) + gap bytes == stream bytes, per direction, with no overlap."""
    gaps = gaps or {}
    for row in frames:
        assert tuple(row) == FRAME_KEYS_0_10
    for row in errors:
        assert tuple(row) == ERROR_KEYS
        assert row["length"] == row["raw_length"] > 0
    for d in DIRECTIONS:
        spans = sorted([(r["stream_offset"], r["size"]) for r in frames if r["direction"] == d]
                       + [(r["stream_offset"], r["length"]) for r in errors if r["direction"] == d])  # fmt: skip
        covered = sum(n for _, n in spans)
        assert covered + gaps.get(d, 0) == totals.get(d, 0), (d, covered, gaps.get(d, 0), totals.get(d, 0))
        for (a, n), (b, _) in zip(spans, spans[1:]):
            assert a + n <= b, f"rows overlap at {a}+{n} > {b} ({d})"
