"""The AMQP 0-10 type system (seed 004, "Types"; specs/0-10 <type>): bytes in, Python values out.

Every reader has one shape, ``(buf: memoryview, offset, depth) -> (value, new_offset)``,
and raises ``Truncated`` or ``Malformed`` only. A value whose type code is not
in the spec is still skipped by the width its code's high nibble gives (seed
004, "Type codes": 0x0-0x7 fixed 2^n octets, 0x8-0xa sized by 1/2/4 octets,
0xc/0xd fixed 5/9 octets, 0xf empty) and kept as raw bytes.

Structs (``read_struct``): the size (0, 1, 2 or 4 octets), the class and struct
codes of a coded struct, the packing flags (bit i of the flags, octet i//8,
least significant bit first, says whether field i is present; a ``bit`` field
is its flag) and the fields that are present.
"""

from __future__ import annotations

import decimal
import struct
import uuid
from typing import cast

from amqplens.decode.errors import Malformed, Truncated
from amqplens.decode.v0_10 import spec

MAX_DEPTH = 32  # maps, lists, arrays and structs nest at most this deep: deeper is an attack, not data
MAX_COUNT = 1 << 20  # entries one compound may claim; its size must hold them anyway

_U8, _U16, _U32, _U64 = (struct.Struct(f">{c}") for c in "BHIQ")
_FIXED = {
    "int8": struct.Struct(">b"), "uint8": _U8, "char": _U8, "int16": struct.Struct(">h"), "uint16": _U16,
    "int32": struct.Struct(">i"), "uint32": _U32, "float": struct.Struct(">f"), "char-utf32": _U32,
    "sequence-no": _U32, "int64": struct.Struct(">q"), "uint64": _U64, "double": struct.Struct(">d"), "datetime": _U64,
}  # fmt: skip
_SIZE = {1: _U8, 2: _U16, 4: _U32}
_TEXT = {"str8-latin": "latin-1", "str8": "utf-8", "str8-utf16": "utf-16-be",
         "str16-latin": "latin-1", "str16": "utf-8", "str16-utf16": "utf-16-be"}  # fmt: skip


def _need(buf, off: int, n: int) -> None:
    if off + n > len(buf):
        raise Truncated(f"{n} octets needed at offset {off}, {len(buf) - off} left", needed=off + n - len(buf), offset=off)


def _sized(buf, off: int, width: int) -> tuple[memoryview, int]:
    _need(buf, off, width)
    n = _SIZE[width].unpack_from(buf, off)[0]
    off += width
    _need(buf, off, n)
    return buf[off : off + n], off + n


def _fixed(name: str):
    s = _FIXED[name]

    def read(buf, off, depth):
        _need(buf, off, s.size)
        return s.unpack_from(buf, off)[0], off + s.size

    return read


def _boolean(buf, off, depth):
    _need(buf, off, 1)
    return buf[off] != 0, off + 1


def _bytes(width: int, variable: bool):
    def read(buf, off, depth):
        if variable:
            raw, off = _sized(buf, off, width)
            return bytes(raw), off
        _need(buf, off, width)
        return bytes(buf[off : off + width]), off + width

    return read


def _text(width: int, encoding: str):
    def read(buf, off, depth):
        raw, off = _sized(buf, off, width)
        return bytes(raw).decode(encoding, "backslashreplace"), off

    return read


def _uuid(buf, off, depth):
    _need(buf, off, 16)
    return str(uuid.UUID(bytes=bytes(buf[off : off + 16]))), off + 16


def _dec(width: int):
    s = struct.Struct(">Bi" if width == 5 else ">Bq")

    def read(buf, off, depth):
        _need(buf, off, s.size)
        exp, mantissa = s.unpack_from(buf, off)
        return decimal.Decimal(mantissa).scaleb(-exp), off + s.size

    return read


def _ranges(pair: struct.Struct):
    def read(buf, off, depth):
        raw, end = _sized(buf, off, 2)
        if len(raw) % pair.size:
            raise Malformed(f"a range set of {len(raw)} octets is not a whole number of {pair.size}-octet ranges", offset=off)
        return [list(pair.unpack_from(raw, i)) for i in range(0, len(raw), pair.size)], end

    return read


def _void(buf, off, depth):
    return None, off


def _enter(depth: int, off: int) -> int:
    if depth >= MAX_DEPTH:
        raise Malformed(f"nesting deeper than {MAX_DEPTH}", offset=off)
    return depth + 1


def _count(raw, off: int) -> int:
    _need(raw, 0, 4)
    n = _U32.unpack_from(raw, 0)[0]
    if n > min(MAX_COUNT, len(raw)):
        raise Malformed(f"a compound claims {n} entries in {len(raw)} octets", offset=off)
    return n


def _map(buf, off, depth):
    depth = _enter(depth, off)
    raw, end = _sized(buf, off, 4)
    out, pos = {}, 4
    for _ in range(_count(raw, off)):
        key, pos = _text(1, "utf-8")(raw, pos, depth)
        _need(raw, pos, 1)
        out[key], pos = read_coded(raw[pos], raw, pos + 1, depth)
    return out, end


def _list(buf, off, depth):
    return _values(buf, off, depth, False)


def _array(buf, off, depth):
    return _values(buf, off, depth, True)


def _values(buf, off, depth, one_type: bool):
    """A list (each value with its type code) or an array (one type code before the count, for every value)."""
    depth = _enter(depth, off)
    raw, end = _sized(buf, off, 4)
    if one_type:
        _need(raw, 0, 1)
    out, pos = [], 4 + one_type
    for _ in range(_count(raw[1:] if one_type else raw, off)):
        if not one_type:
            _need(raw, pos, 1)
            pos += 1
        value, pos = read_coded(raw[0] if one_type else raw[pos - 1], raw, pos, depth)
        out.append(value)
    return out, end


def _struct32(buf, off, depth):
    depth = _enter(depth, off)
    raw, end = _sized(buf, off, 4)
    _need(raw, 0, 2)
    name = spec.STRUCT_BY_CODE.get((raw[0], raw[1]))
    if name is None:
        return {"class_code": raw[0], "struct_code": raw[1], "raw": bytes(raw[2:])}, end
    fields, _ = read_packed(name, raw, 2, len(raw), depth)
    return {"type": name, **fields}, end


READERS = {name: _fixed(name) for name in _FIXED}
READERS.update({name: _text(cast(int, spec.TYPES[name][2]), enc) for name, enc in _TEXT.items()})  # all sized
READERS.update(
    boolean=_boolean, uuid=_uuid, dec32=_dec(5), dec64=_dec(9), void=_void, bit=_void,
    map=_map, list=_list, array=_array, struct32=_struct32,
    **{"sequence-set": _ranges(struct.Struct(">II")), "byte-ranges": _ranges(struct.Struct(">QQ"))},
)  # fmt: skip
for _name, (_code, _fixed_w, _var_w) in spec.TYPES.items():
    if _name not in READERS:  # binN, vbinN: opaque octets
        # every type has a fixed or a size width
        READERS[_name] = _bytes(_fixed_w if _fixed_w is not None else cast(int, _var_w), _fixed_w is None)

_WIDTH_OF_NIBBLE = {0: 1, 1: 2, 2: 4, 3: 8, 4: 16, 5: 32, 6: 64, 7: 128, 0xC: 5, 0xD: 9, 0xF: 0}
_SIZE_OF_NIBBLE = {8: 1, 9: 2, 0xA: 4}


def read_coded(code: int, buf, off: int, depth: int = 0):
    """A value preceded by its type code (map entries, list items, array elements)."""
    name = spec.TYPE_BY_CODE.get(code)
    if name is not None:
        return READERS[name](buf, off, depth)
    nibble = code >> 4
    if nibble in _WIDTH_OF_NIBBLE:
        return _bytes(_WIDTH_OF_NIBBLE[nibble], False)(buf, off, depth)
    if nibble in _SIZE_OF_NIBBLE:
        return _bytes(_SIZE_OF_NIBBLE[nibble], True)(buf, off, depth)
    raise Malformed(f"type code 0x{code:02x} has no defined width", offset=off)


def read_field(type_name: str, buf, off: int, depth: int = 0):
    """A field of a struct, control or command: a primitive type or an (uncoded or coded) struct."""
    reader = READERS.get(type_name)
    if reader is not None:
        return reader(buf, off, depth)
    return read_struct(type_name, buf, off, _enter(depth, off))


def read_struct(name: str, buf, off: int, depth: int = 0):
    """A struct field: its size prefix (if any), codes (if coded), packing flags and fields."""
    cls, code, size_width, _pack, _fields = spec.STRUCTS[name]
    if size_width:
        raw, end = _sized(buf, off, size_width)
        start, limit, buf = 0, len(raw), raw
    else:
        start, limit, end = off, len(buf), None
    if code is not None:
        _need(buf, start, 2)
        start += 2
    value, stop = read_packed(name, buf, start, limit, depth)
    return value, (end if end is not None else stop)


def read_packed(name: str, buf, off: int, limit: int, depth: int = 0, pack: int | None = None, fields=None):
    """Packing flags then the present fields of struct ``name`` (or the given ``fields``)."""
    if fields is None:
        _cls, _code, _size, pack, fields = spec.STRUCTS[name]
    pack = cast(int, pack)  # callers give pack with fields; the tables' packs are ints
    view = buf[:limit]
    _need(view, off, pack)
    flags = int.from_bytes(bytes(view[off : off + pack]), "little")
    off += pack
    out = {}
    for i, (fname, ftype, _enum) in enumerate(fields):
        present = bool(flags >> i & 1) if pack else True
        if ftype == "bit":
            out[fname] = present
        elif present:
            out[fname], off = read_field(ftype, view, off, depth)
    if pack and flags >> len(fields):
        raise Malformed(f"packing flags 0x{flags:x} name fields {name} does not have", offset=off)
    return out, off


__all__ = ["READERS", "read_coded", "read_field", "read_struct", "read_packed", "MAX_DEPTH"]
