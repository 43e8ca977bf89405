"""Feeding a codec like the TCP reassembler does, and checking its byte accounting (shared by the codec tests)."""

from __future__ import annotations

DIRECTIONS = ("to_server", "to_client")


def feed(dec, direction: str, data: bytes, cuts=(), gaps=(), ts0: int = 1000) -> int:
    """Feed ``data`` cut at ``cuts``; ``gaps`` are (start, end) ranges reported as missing.

    Each chunk gets its own ts (ts0 + chunk index). Returns the gap bytes reported.
    """
    points = sorted({0, len(data), *[c for c in cuts if 0 < c < len(data)], *[g for ab in gaps for g in ab if 0 <= g <= len(data)]})
    missing = 0
    for i, (a, b) in enumerate(zip(points, points[1:])):
        if any(ga <= a and b <= gb for ga, gb in gaps):
            dec.gap(direction, a, b - a, ts0 + i)
            missing += b - a
        else:
            dec.data(direction, a, ts0 + i, data[a:b])
    return missing


def check_accounting(frames: list, errors: list, totals: dict, gaps: dict | None = None, *,
                     frame_keys: tuple, error_keys: tuple, ordered: bool = True) -> None:
    """sum(frame sizes) + sum(error lengths) + gap bytes == stream bytes, per direction, with no overlap.

    ``ordered``: rows must carry the keys in exactly the codec's order (else as a set).
    """
    gaps = gaps or {}
    shape = tuple if ordered else set
    for row in frames:
        assert shape(row) == shape(frame_keys)
    for row in errors:
        assert shape(row) == shape(error_keys)
        assert row["length"] == row["raw_length"] > 0
    for d in DIRECTIONS:
        spans = sorted(
            [(r["stream_offset"], r["size"]) for r in frames if r["direction"] == d]
            + [(r["stream_offset"], r["length"]) for r in errors if r["direction"] == d]
        )
        covered = sum(n for _, n in spans)
        assert covered + gaps.get(d, 0) == totals.get(d, 0), (d, covered, gaps.get(d, 0), totals.get(d, 0))
        for (a, n), (b, _) in zip(spans, spans[1:]):
            assert a + n <= b, f"rows overlap at {a}+{n} > {b} ({d})"


def run_decoder(dec, check, to_server: bytes = b"", to_client: bytes = b"", cuts=(), gaps=()):
    """Feed both directions with the given cuts/gaps, close, and check accounting (rows and facts)."""
    missing = {}
    for d, data in (("to_server", to_server), ("to_client", to_client)):
        if data:
            missing[d] = feed(dec, d, data, cuts, gaps)
    dec.close()
    frames, errors, facts = dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
    check(frames, errors, {"to_server": len(to_server), "to_client": len(to_client)}, missing)
    for d in DIRECTIONS:
        assert facts[f"frame_bytes_{d}"] + facts[f"error_bytes_{d}"] == facts[f"stream_bytes_{d}"]
        assert facts[f"gap_bytes_{d}"] == missing.get(d, 0)
    return frames, errors, facts


def strip_ts(rows: list) -> list:
    return [{k: v for k, v in r.items() if k != "ts_us"} for r in rows]


class CountedMemo(dict):
    """A decoder's memo dict (``stream._MEMO``) that counts its hits: ``get`` calls that found a value."""

    def __init__(self) -> None:
        super().__init__()
        self.hits = 0

    def get(self, key, default=None):
        value = super().get(key, default)
        self.hits += value is not None
        return value
