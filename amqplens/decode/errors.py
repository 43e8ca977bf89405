"""The decoder's error family: one root, ``Truncated`` apart from ``Malformed``.

Inside the pipeline these never escape a partition function: each becomes a
``decode_errors`` row (see ``schemas``). They carry typed fields so the row can
say exactly what was wrong and where.
"""

from __future__ import annotations


class DecodeError(Exception):
    """Root of every error the decoder raises on bad input."""

    reason = "decode_error"

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class Truncated(DecodeError):
    """More bytes are needed than the buffer holds (dpkt's ``NeedData``)."""

    reason = "truncated"

    def __init__(self, message: str, *, needed: int | None = None, offset: int | None = None) -> None:
        super().__init__(message, offset=offset)
        self.needed = needed


class Malformed(DecodeError):
    """The bytes are present but cannot be what the format says."""

    reason = "malformed"


class CaptureFormatError(Malformed):
    """A file is not a capture we can read (bad magic, bad block, unknown link type)."""

    reason = "capture_format"


class FrameError(str):
    """A frame's ``decode_error``: its text, ``"reason: detail"``, is the frames table's column, and it keeps the two
    parts, so the decode_errors row (stage frame) takes them as they are instead of parsing the text back.

    A ``str``, so every row, batch and comparison takes it as the text it is.
    """

    reason: str
    detail: str

    def __new__(cls, reason: str, detail: str) -> "FrameError":
        self = super().__new__(cls, f"{reason}: {detail}")
        self.reason, self.detail = reason, detail
        return self
