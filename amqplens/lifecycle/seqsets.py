"""0-10 sequence sets: the ``[[lo, hi], ...]`` id ranges of accept/reject/release and session.completed.

Ranges are inclusive and run forward from lo to hi modulo 2^32 (RFC 1982
serial numbers: a range may wrap past 2^32 - 1; [0, 2^32 - 1] is every id). Malformed JSON or ranges count as empty: a
bad frame costs its own meaning, never the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from amqplens.lifecycle.amqp10 import M32

MAX_ENUMERATED = 4096  # a set spanning fewer ids than this (and than the candidates) is walked id by id


def parse_ranges(text: str | None) -> list[tuple[int, int]]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    out = []
    if isinstance(value, list):
        for r in value:
            if isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r):
                out.append((r[0] % M32, r[1] % M32))
    return out


def covers(ranges: list[tuple[int, int]], i: int) -> bool:
    return any((i - lo) % M32 <= (hi - lo) % M32 for lo, hi in ranges)


def span(ranges: list[tuple[int, int]]) -> int:
    return sum((hi - lo) % M32 + 1 for lo, hi in ranges)


def members(ranges: list[tuple[int, int]], candidates: dict) -> list:
    """The keys of ``candidates`` (ids) the set covers, in the set's order when it is small, else the dict's."""
    if not ranges or not candidates:
        return []
    n = span(ranges)
    if n <= min(MAX_ENUMERATED, len(candidates)):
        ids: Iterable[int] = ((lo + k) % M32 for lo, hi in ranges for k in range((hi - lo) % M32 + 1))
        return [i for i in ids if i in candidates]
    return [i for i in candidates if type(i) is int and covers(ranges, i)]
