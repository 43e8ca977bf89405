"""Parse a whole log file (or its byte-range splits) the way the job's tasks do, without Spark."""

from __future__ import annotations

import os

from amqplens.logs import FORMATS, SNIFF_BYTES, sniff
from amqplens.logs.batches import split_records
from amqplens.logs.lines import count_newlines, plan_splits


def records(path, split_size: int | None = None, log_id: str = "log") -> list[tuple[str, dict]]:
    """Every (kind, row) of the file, read in splits of ``split_size`` bytes (default: one split)."""
    path = str(path)
    with open(path, "rb") as f:
        fmt = sniff(f.read(SNIFF_BYTES)) or "log-unknown"
    size = os.path.getsize(path)
    ranges = plan_splits(path, split_size) if split_size and FORMATS[fmt].splittable else [(0, size)]
    out, before = [], 0
    for start, end in ranges:
        out += list(split_records(path, fmt, log_id, start, end, before + 1))
        before += count_newlines(path, start, end)
    return out


def of_kind(recs, kind: str) -> list[dict]:
    return [r for k, r in recs if k == kind]
