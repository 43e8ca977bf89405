"""The AMQP 1.0 type system (Part 1): one constructor byte, then the value.

``decode(buf, offset) -> (value, new_offset)`` reads one encoded value.
Dispatch goes through ``READERS``, a 256-slot table indexed by the constructor
byte, built from the generated encoding table (``spec.ENCODINGS``); every slot
is a reader ``(buf, offset, depth) -> (value, new_offset)`` that starts after
the constructor byte (``depth`` only matters to compound and described
values). ``extent(buf, offset)`` finds where a value ends without building it.

Python values: null None, boolean bool, the integer types int, float/double
float, decimal32/64/128 ``AmqpDecimal`` (a str: the type and the big-endian
hex, the bits are kept, not interpreted), char str, timestamp ``Timestamp``
(int, milliseconds since the Unix epoch), uuid ``uuid.UUID``, binary bytes,
string str (invalid UTF-8 kept with backslash escapes), symbol ``Symbol``
(a str), list and array list, map dict (an unhashable key is frozen into a
tuple), described ``Described(descriptor, value)``.

Bad input raises ``Truncated`` (a size or value runs past the buffer) or
``Malformed`` (an unknown constructor, a count no size can hold, nesting past
``MAX_DEPTH``); a size is checked against the buffer before anything is
built, so a claimed 4 GiB list is an error, never an allocation.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from amqplens.decode.errors import Malformed, Truncated
from amqplens.decode.v1_0.spec import ENCODINGS

DESCRIBED_CONSTRUCTOR = 0x00  # Part 1 §1.2: a descriptor value, then the described value (not in types.bare.xml)
MAX_DEPTH = 64  # compound/described nesting: real performatives and sections need < 10; Python's stack needs a bound
MAX_ELEMENTS = 1 << 20  # elements of one compound or array: more than any performative or section needs
ZERO_WIDTH_PER_BYTE = 8  # an array of 0-width elements (null, true, uint0, list0...) costs only its count: cap it by its size


class Symbol(str):
    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch (a 64-bit signed integer on the wire)."""

    __slots__ = ()


class AmqpDecimal(str):
    """An IEEE 754 decimal kept as ``"decimal64:<hex>"``: its bits, not a number."""

    __slots__ = ()


class Described(NamedTuple):
    descriptor: object  # ulong (numeric) or Symbol (symbolic); anything else is kept as read
    value: object


_U8, _U32 = struct.Struct(">B"), struct.Struct(">I")
_FIXED = {
    ("ushort", 2): ">H", ("uint", 4): ">I", ("ulong", 8): ">Q", ("short", 2): ">h", ("int", 4): ">i",
    ("long", 8): ">q", ("float", 4): ">f", ("double", 8): ">d",
}  # fmt: skip
_CONSTANTS = {"null": None, "true": True, "false": False, "uint0": 0, "ulong0": 0}


def _need(buf, pos: int, n: int) -> None:
    if pos + n > len(buf):
        raise Truncated(f"value needs {n} bytes at offset {pos}, {len(buf) - pos} left", needed=pos + n - len(buf), offset=pos)


def _unknown(code: int):
    def read(buf, pos, depth):
        raise Malformed(f"unknown constructor 0x{code:02x}", offset=pos - 1)

    return read


def _constant(value):
    if value is None:
        return lambda buf, pos, depth: (None, pos)
    return lambda buf, pos, depth: (value, pos)


def _list0(buf, pos, depth):
    return [], pos


def _number(fmt: str, width: int, wrap=None):
    unpack = struct.Struct(fmt).unpack_from

    def read(buf, pos, depth):
        if pos + width > len(buf):
            _need(buf, pos, width)
        return unpack(buf, pos)[0], pos + width

    def read_wrapped(buf, pos, depth):
        if pos + width > len(buf):
            _need(buf, pos, width)
        return wrap(unpack(buf, pos)[0]), pos + width

    return read_wrapped if wrap else read


def _small(signed: bool):
    def read(buf, pos, depth):
        if pos >= len(buf):
            _need(buf, pos, 1)
        b = buf[pos]
        return (b - 256 if signed and b > 127 else b), pos + 1

    return read


def _boolean(buf, pos, depth):
    _need(buf, pos, 1)
    b = buf[pos]
    if b > 1:
        raise Malformed(f"boolean octet 0x{b:02x} is neither 0x00 nor 0x01", offset=pos)
    return b == 1, pos + 1


def _char(buf, pos, depth):
    _need(buf, pos, 4)
    cp = _U32.unpack_from(buf, pos)[0]
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise Malformed(f"char 0x{cp:x} is not a Unicode scalar value", offset=pos)
    return chr(cp), pos + 4


def _opaque(kind: str, width: int):
    def read(buf, pos, depth):
        _need(buf, pos, width)
        return AmqpDecimal(f"{kind}:{bytes(buf[pos : pos + width]).hex()}"), pos + width

    return read


def _uuid(buf, pos, depth):
    _need(buf, pos, 16)
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _variable(kind: str, width: int):
    size_of = (_U8 if width == 1 else _U32).unpack_from
    text = {"binary": None, "string": "utf-8", "symbol": "ascii"}[kind]
    wrap = Symbol if kind == "symbol" else None

    def read(buf, pos, depth):
        if pos + width > len(buf):
            _need(buf, pos, width)
        start = pos + width
        end = start + size_of(buf, pos)[0]
        if end > len(buf):
            _need(buf, start, end - start)
        if text is None:
            return bytes(buf[start:end]), end
        value = str(buf[start:end], text, "backslashreplace")
        return (wrap(value) if wrap else value), end

    return read


def _header(buf, pos: int, width: int, what: str) -> tuple[int, int, int]:
    """(count, first element offset, end offset) of a compound/array with ``width``-byte size and count."""
    unpack = (_U8 if width == 1 else _U32).unpack_from
    if pos + 2 * width > len(buf):
        _need(buf, pos, width)
    size = unpack(buf, pos)[0]
    end = pos + width + size
    if size < width:
        raise Malformed(f"{what} size {size} cannot hold its {width}-byte count", offset=pos)
    if end > len(buf):
        _need(buf, pos + width, size)
    count = unpack(buf, pos + width)[0]
    if count > MAX_ELEMENTS:
        raise Malformed(f"{what} claims {count} elements, over the limit of {MAX_ELEMENTS}", offset=pos)
    return count, pos + 2 * width, end


def _compound(width: int, is_map: bool):
    what = "map" if is_map else "list"

    def read(buf, pos, depth):
        if depth >= MAX_DEPTH:
            raise Malformed(f"values nested deeper than {MAX_DEPTH}", offset=pos - 1)
        count, pos, end = _header(buf, pos, width, what)
        start = pos
        if count > end - pos:  # every element takes at least its constructor byte
            raise Malformed(f"{what} of {end - pos} bytes cannot hold {count} elements", offset=pos)
        readers = READERS
        items = []
        append = items.append
        depth += 1
        try:
            for _ in range(count):
                v, pos = readers[buf[pos]](buf, pos + 1, depth)
                append(v)
        except (Truncated, IndexError) as exc:  # the frame ends inside an element
            raise Malformed(f"{what} elements run past its size ({end - start} bytes)", offset=start) from exc
        if pos != end:  # elements may read past the compound's size (never past the buffer): caught here
            raise Malformed(f"{what} elements end at {pos}, its size says {end}", offset=pos)
        if is_map:
            if count % 2:
                raise Malformed(f"map with an odd number ({count}) of keys and values", offset=end)
            return _to_dict(items), end
        return items, end

    return read


def _to_dict(items: list) -> dict:
    out = {}
    for i in range(0, len(items), 2):
        key = items[i]
        try:
            out[key] = items[i + 1]
        except TypeError:  # a list or map used as a key: keep it, frozen
            out[_freeze(key)] = items[i + 1]
    return out


def _freeze(value):
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((_freeze(k), _freeze(v)) for k, v in value.items())
    if isinstance(value, Described):
        return Described(_freeze(value.descriptor), _freeze(value.value))
    return value


def _array(width: int):
    def read(buf, pos, depth):
        if depth >= MAX_DEPTH:
            raise Malformed(f"values nested deeper than {MAX_DEPTH}", offset=pos - 1)
        count, pos, end = _header(buf, pos, width, "array")
        start = pos - width
        sub = buf[:end]
        depth += 1
        descriptor = None
        described = pos < end and sub[pos] == DESCRIBED_CONSTRUCTOR
        if described:
            try:
                descriptor, pos = decode(sub, pos + 1, depth)
            except Truncated as exc:
                raise Malformed("array element descriptor runs past the array's size", offset=pos) from exc
        if pos >= end:
            if count:
                raise Malformed(f"array of {count} elements without an element constructor", offset=pos)
            return [], end
        code = sub[pos]
        pos += 1
        smallest = ENCODINGS[code][3] if code in ENCODINGS else 1  # 0 for null/true/false/uint0/ulong0/list0
        if count * smallest > end - pos or (not smallest and count > ZERO_WIDTH_PER_BYTE * (end - start)):
            raise Malformed(f"array of {end - pos} bytes cannot hold {count} elements of 0x{code:02x}", offset=pos)
        if code == DESCRIBED_CONSTRUCTOR:
            raise Malformed("array element constructor described twice", offset=pos - 1)
        reader = READERS[code]
        items = []
        append = items.append
        try:
            for _ in range(count):
                v, pos = reader(sub, pos, depth)
                append(v)
        except Truncated as exc:
            raise Malformed(f"array elements run past its size ({end - pos} bytes left)", offset=pos) from exc
        if pos != end:
            raise Malformed(f"array elements end at {pos}, its size says {end}", offset=pos)
        if described:
            return [Described(descriptor, v) for v in items], end
        return items, end

    return read


def _described(buf, pos, depth):
    if depth >= MAX_DEPTH:
        raise Malformed(f"values nested deeper than {MAX_DEPTH}", offset=pos - 1)
    if pos + 2 < len(buf) and buf[pos] == 0x53:  # a smallulong descriptor: every performative and section
        value, end = READERS[buf[pos + 2]](buf, pos + 3, depth + 1)
        return Described(buf[pos + 1], value), end
    descriptor, pos = decode(buf, pos, depth + 1)
    value, pos = decode(buf, pos, depth + 1)
    return Described(descriptor, value), pos


def decode(buf, offset: int = 0, depth: int = 0):
    """One value at ``offset``: ``(value, offset after it)``."""
    if offset >= len(buf):
        raise Truncated("a value's constructor is missing", needed=1, offset=offset)
    return READERS[buf[offset]](buf, offset + 1, depth)


def _fixed(kind: str, width: int):
    special = {"boolean": _boolean, "char": _char, "uuid": _uuid, "timestamp": _number(">q", 8, Timestamp)}
    if kind in special:
        return special[kind]
    if kind.startswith("decimal"):
        return _opaque(kind, width)
    if width == 1:
        return _small(kind in ("byte", "int", "long"))
    return _number(_FIXED[(kind, width)], width)


_BY_CATEGORY = {
    "variable": lambda kind, width: _variable(kind, width),
    "compound": lambda kind, width: _compound(width, kind == "map"),
    "array": lambda kind, width: _array(width),
}


def _build() -> list:
    readers = [_unknown(c) for c in range(256)]
    for code, (kind, name, category, width) in ENCODINGS.items():
        if category == "fixed":
            if width == 0:
                readers[code] = _list0 if name == "list0" else _constant(_CONSTANTS[name or kind])
            else:
                readers[code] = _fixed(kind, width)
        else:
            readers[code] = _BY_CATEGORY[category](kind, width)
    readers[DESCRIBED_CONSTRUCTOR] = _described
    return readers


READERS = _build()
# constructor -> (width of the fixed value, or of the size field for variable/compound/array, is it sized)
_EXTENTS = {code: (width, category != "fixed") for code, (_, _, category, width) in ENCODINGS.items()}


def extent(buf, offset: int = 0, depth: int = 0) -> int:
    """Where the value at ``offset`` ends, reading only constructors and sizes (never past the
    buffer: ``Truncated`` says how much more is needed to know)."""
    if depth >= MAX_DEPTH:
        raise Malformed(f"values nested deeper than {MAX_DEPTH}", offset=offset)
    if offset >= len(buf):
        raise Truncated("a value's constructor is missing", needed=1, offset=offset)
    code = buf[offset]
    if code == DESCRIBED_CONSTRUCTOR:
        return extent(buf, extent(buf, offset + 1, depth + 1), depth + 1)
    shape = _EXTENTS.get(code)
    if shape is None:
        raise Malformed(f"unknown constructor 0x{code:02x}", offset=offset)
    width, sized = shape
    if not sized:
        return offset + 1 + width
    _need(buf, offset + 1, width)
    size = (_U8 if width == 1 else _U32).unpack_from(buf, offset + 1)[0]
    return offset + 1 + width + size


__all__ = ["decode", "extent", "READERS", "Described", "Symbol", "Timestamp", "AmqpDecimal", "MAX_DEPTH", "MAX_ELEMENTS"]
