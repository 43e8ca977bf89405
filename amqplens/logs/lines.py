"""Byte-range splits of a log file, read as lines, grouped into entries.

A log is cut into ``[start, end)`` byte ranges like a capture (one Spark task
each). A split owns the *entries* whose first line starts in its range: it
skips the continuation lines of an entry begun before ``start`` and reads past
``end`` to finish its last entry. Which line continues which is the format's
business (``continues(prev, line)``), so every split of a file agrees on the
cut points and each entry is read exactly once.

Line numbers are the file's (1-based): the job counts the newlines before
each split in a first cheap pass (``count_newlines``) and hands the count in.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Iterator, cast

CHUNK = 1 << 20
MAX_LINE_BYTES = 1 << 20  # a longer "line" is cut here: no real log line is a megabyte, a binary file may be
MAX_ENTRY_LINES = 10_000  # an entry longer than this is ended (a runaway crash report must not fill memory)


@dataclasses.dataclass(frozen=True)
class Line:
    number: int  # 1-based line number in the file
    offset: int  # byte offset of its first byte
    raw: bytes  # without the line end
    truncated: bool = False  # longer than MAX_LINE_BYTES, cut


def plan_splits(path: str | os.PathLike, split_size: int) -> list[tuple[int, int]]:
    """Byte ranges covering the file; an empty file gets one empty split."""
    if split_size <= 0:
        raise ValueError("split_size must be positive")
    size = os.path.getsize(path)
    return [(0, 0)] if size == 0 else [(s, min(s + split_size, size)) for s in range(0, size, split_size)]


def count_newlines(path: str | os.PathLike, start: int, end: int) -> int:
    n = 0
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            block = f.read(min(CHUNK, left))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n


def _lines_from(f, offset: int, number: int) -> Iterator[Line]:
    """Every line from ``offset`` (a line start) to the end of the file."""
    f.seek(offset)
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        size, truncated = len(raw), False
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # cut it; skip to the next line end
            raw, truncated = raw[:MAX_LINE_BYTES], True
            while (rest := f.readline(CHUNK)) and not rest.endswith(b"\n"):
                size += len(rest)
            size += len(rest)
        yield Line(number, offset, raw.rstrip(b"\n").removesuffix(b"\r"), truncated)
        offset += size
        number += 1


def _first_line_start(f, start: int) -> int:
    """The offset of the first line that starts at or after ``start``."""
    if start == 0:
        return 0
    f.seek(start - 1)
    pos = start - 1
    while True:
        block = f.read(CHUNK)
        if not block:
            return pos
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)


def _previous_line(f, line_start: int) -> bytes | None:
    """The line that ends just before ``line_start`` (None at the file's start), up to MAX_LINE_BYTES."""
    if line_start == 0:
        return None
    lo = max(0, line_start - 1 - MAX_LINE_BYTES)
    f.seek(lo)
    text = f.read(line_start - 1 - lo)
    return text[text.rfind(b"\n") + 1 :].rstrip(b"\r")


Continues = Callable[[bytes, bytes], bool]


def read_entries(path: str | os.PathLike, start: int, end: int, first_number: int, continues: Continues) -> Iterator[list[Line]]:
    """The entries (lists of lines) whose first line starts in ``[start, end)``.

    ``first_number`` is the line number of the first line starting at or after
    ``start`` (1 + the newlines before ``start``). An entry keeps at most
    MAX_ENTRY_LINES lines; the rest of it is read and dropped, so that every
    split still cuts the file at the same lines."""
    with open(path, "rb") as f:
        first = _first_line_start(f, start)
        if first >= end:
            return
        number = first_number + (count_newlines(path, start, first) if first > start else 0)
        prev = _previous_line(f, first)
        leading, entry = True, cast("list[Line]", [])
        for line in _lines_from(f, first, number):
            cont = prev is not None and continues(prev, line.raw)
            prev = line.raw
            if leading and cont:
                continue  # the tail of an entry that an earlier split owns
            leading = False
            if entry and cont:
                if len(entry) < MAX_ENTRY_LINES:
                    entry.append(line)
                continue
            if entry:
                yield entry
            if line.offset >= end:
                return
            entry = [line]
        if entry:
            yield entry
