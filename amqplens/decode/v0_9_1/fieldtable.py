"""Field tables and field arrays, with either reading of the type letters.

The 0-9-1 spec and RabbitMQ's errata disagree on two letters:

======  ==========================  ======================
letter  0-9-1 spec                  RabbitMQ (and tshark)
======  ==========================  ======================
``s``   short string                signed 16-bit integer
``l``   unsigned 64-bit integer     signed 64-bit integer
======  ==========================  ======================

Every other letter means the same in both, or is used by only one side and so
is accepted by both readings: ``t`` bool, ``b``/``B`` signed/unsigned 8-bit,
``U``/``u`` signed/unsigned 16-bit, ``I``/``i`` signed/unsigned 32-bit, ``L``
signed 64-bit, ``f``/``d`` float/double, ``D`` decimal (scale octet, unsigned
32-bit value), ``S`` long string, ``x`` byte array (RabbitMQ), ``A`` array,
``T`` timestamp, ``F`` table, ``V`` void. Real brokers and clients speak the
RabbitMQ reading, so it is the default; ``letters="spec"`` selects the other.

Values: tables are dicts (the first of duplicate names wins), arrays lists,
decimals ``decimal.Decimal``, timestamps int seconds, void ``None``, ``x``
bytes, strings str-or-bytes as in ``primitives``.
"""

from __future__ import annotations

import decimal
import struct

from amqplens.decode.errors import Malformed
from amqplens.decode.v0_9_1 import primitives as p

MAX_DEPTH = 64  # real tables nest two or three levels; this bounds recursion on hostile input
MAX_ELEMENTS = 1 << 18  # values per top-level table (all levels): bounds memory for a 128 MiB frame

RABBITMQ = "rabbitmq"
SPEC = "spec"


class _Walk:
    """State of one top-level decode: the element budget left."""

    __slots__ = ("budget", "reader")

    def __init__(self, reader: FieldTableReader) -> None:
        self.budget = reader.max_elements
        self.reader = reader


def _scalar(read):
    def value(walk, buf, offset, depth):
        return read(buf, offset)

    return value


def _decimal(walk, buf, offset, depth):
    try:
        scale, raw = p.DECIMAL.unpack_from(buf, offset)
    except struct.error:
        raise p.truncated(buf, offset, 5) from None
    return decimal.Decimal(raw).scaleb(-scale), offset + 5


def _bytes(walk, buf, offset, depth):
    return p.read_longstr_bytes(buf, offset)


def _void(walk, buf, offset, depth):
    return None, offset


def _nested(buf: memoryview, offset: int) -> tuple[memoryview, int]:
    """The sub-view of a length-prefixed table or array, and the offset after it."""
    try:
        n = p.U32.unpack_from(buf, offset)[0]
    except struct.error:
        raise p.truncated(buf, offset, 4) from None
    end = offset + 4 + n
    if end > len(buf):
        raise p.truncated(buf, offset, 4 + n)
    return buf[offset + 4 : end], end


def _table(walk, buf, offset, depth):
    sub, end = _nested(buf, offset)
    return walk.reader.entries(walk, sub, depth + 1), end


def _array(walk, buf, offset, depth):
    sub, end = _nested(buf, offset)
    return walk.reader.elements(walk, sub, depth + 1), end


_COMMON = {
    "t": _scalar(p.read_bool),
    "b": _scalar(p.read_int8),
    "B": _scalar(p.read_octet),
    "U": _scalar(p.read_int16),
    "u": _scalar(p.read_short),
    "I": _scalar(p.read_int32),
    "i": _scalar(p.read_long),
    "L": _scalar(p.read_int64),
    "f": _scalar(p.read_float),
    "d": _scalar(p.read_double),
    "D": _decimal,
    "S": _scalar(p.read_longstr),
    "x": _bytes,
    "A": _array,
    "T": _scalar(p.read_timestamp),
    "F": _table,
    "V": _void,
}
LETTERS = {
    RABBITMQ: {**_COMMON, "s": _scalar(p.read_int16), "l": _scalar(p.read_int64)},
    SPEC: {**_COMMON, "s": _scalar(p.read_shortstr), "l": _scalar(p.read_longlong)},
}


class FieldTableReader:
    """Reads field tables and arrays with one reading of the type letters."""

    def __init__(self, letters: str = RABBITMQ, *, max_depth: int = MAX_DEPTH, max_elements: int = MAX_ELEMENTS):
        if letters not in LETTERS:
            raise ValueError(f"letters must be one of {sorted(LETTERS)}, not {letters!r}")
        self.letters = letters
        self.max_depth = max_depth
        self.max_elements = max_elements
        slots = [None] * 256  # dispatch by the type octet, like a constructor table
        for letter, fn in LETTERS[letters].items():
            slots[ord(letter)] = fn
        self._slots = tuple(slots)

    # -- the primitive-reader shape ------------------------------------------------
    def read_table(self, buf: memoryview, offset: int) -> tuple[dict, int]:
        return _table(_Walk(self), buf, offset, 0)

    def read_array(self, buf: memoryview, offset: int) -> tuple[list, int]:
        return _array(_Walk(self), buf, offset, 0)

    def read_entries(self, buf: memoryview) -> dict:
        """A table's entries without the length prefix (AMQPLAIN's response)."""
        return self.entries(_Walk(self), buf, 1)

    # -- internals -------------------------------------------------------------------
    def _value(self, walk: _Walk, buf: memoryview, offset: int, depth: int):
        try:
            letter = buf[offset]
        except IndexError:
            raise p.truncated(buf, offset, 1) from None
        fn = self._slots[letter]
        if fn is None:
            raise Malformed(f"unknown field type {chr(letter)!r} (0x{letter:02x})", offset=offset)
        walk.budget -= 1
        if walk.budget < 0:
            raise Malformed(f"more than {self.max_elements} field values", offset=offset)
        return fn(walk, buf, offset + 1, depth)

    def _check_depth(self, depth: int) -> None:
        if depth > self.max_depth:
            raise Malformed(f"field tables nested deeper than {self.max_depth}")

    def entries(self, walk: _Walk, buf: memoryview, depth: int) -> dict:
        self._check_depth(depth)
        out: dict = {}
        offset, end = 0, len(buf)
        while offset < end:
            name, offset = p.read_shortstr(buf, offset)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "backslashreplace")
            value, offset = self._value(walk, buf, offset, depth)
            out.setdefault(name, value)
        return out

    def elements(self, walk: _Walk, buf: memoryview, depth: int) -> list:
        self._check_depth(depth)
        out = []
        offset, end = 0, len(buf)
        while offset < end:
            value, offset = self._value(walk, buf, offset, depth)
            out.append(value)
        return out
