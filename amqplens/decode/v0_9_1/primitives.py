"""Primitive readers of the AMQP 0-8 / 0-9 / 0-9-1 wire.

Every reader has one shape, ``(buf: memoryview, offset) -> (value, new_offset)``,
and raises ``Truncated`` when the value runs past the end of ``buf``. Callers
hand in a memoryview of exactly one frame payload (or one table), so a length
that points past the frame fails here instead of allocating or reading into the
next frame.

Strings: the specs call shortstr UTF-8 and longstr binary. Both come back as
``str`` when the bytes are valid UTF-8 and as ``bytes`` otherwise, so nothing
is lost and JSON output can render the bytes as hex.
"""

from __future__ import annotations

import struct

from amqplens.decode.errors import Malformed, Truncated

U8 = struct.Struct(">B")
I8 = struct.Struct(">b")
U16 = struct.Struct(">H")
I16 = struct.Struct(">h")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
F32 = struct.Struct(">f")
F64 = struct.Struct(">d")
FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
METHOD_IDS = struct.Struct(">HH")  # class id, method id
CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size
DECIMAL = struct.Struct(">BI")  # scale (decimals), unsigned value


def truncated(buf: memoryview, offset: int, needed: int) -> Truncated:
    have = len(buf) - offset
    return Truncated(f"need {needed} bytes at offset {offset}, {max(have, 0)} left", needed=needed, offset=offset)


def text(raw: memoryview | bytes) -> str | bytes:
    """UTF-8 text when it is valid UTF-8, else the bytes themselves."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return bytes(raw)


def _fixed(st: struct.Struct):
    size = st.size
    unpack_from = st.unpack_from

    def read(buf: memoryview, offset: int):
        try:
            return unpack_from(buf, offset)[0], offset + size
        except struct.error:
            raise truncated(buf, offset, size) from None

    return read


read_octet = _fixed(U8)
read_short = _fixed(U16)
read_long = _fixed(U32)
read_longlong = _fixed(U64)
read_timestamp = read_longlong  # seconds since the epoch, 64-bit unsigned
read_int8 = _fixed(I8)
read_int16 = _fixed(I16)
read_int32 = _fixed(I32)
read_int64 = _fixed(I64)
read_float = _fixed(F32)
read_double = _fixed(F64)


def read_bool(buf: memoryview, offset: int) -> tuple[bool, int]:
    try:
        return buf[offset] != 0, offset + 1
    except IndexError:
        raise truncated(buf, offset, 1) from None


def read_shortstr(buf: memoryview, offset: int) -> tuple[str | bytes, int]:
    try:
        n = buf[offset]
    except IndexError:
        raise truncated(buf, offset, 1) from None
    end = offset + 1 + n
    if end > len(buf):
        raise truncated(buf, offset, 1 + n)
    return text(buf[offset + 1 : end]), end


def _longstr_end(buf: memoryview, offset: int) -> int:
    """Where the long string at ``offset`` (a 32-bit length, then its octets) ends; DecodeError if the buffer does."""
    try:
        n = U32.unpack_from(buf, offset)[0]
    except struct.error:
        raise truncated(buf, offset, 4) from None
    end = offset + 4 + n
    if end > len(buf):
        raise truncated(buf, offset, 4 + n)
    return end


def read_longstr_bytes(buf: memoryview, offset: int) -> tuple[bytes, int]:
    end = _longstr_end(buf, offset)
    return bytes(buf[offset + 4 : end]), end


def read_longstr(buf: memoryview, offset: int) -> tuple[str | bytes, int]:
    end = _longstr_end(buf, offset)
    return text(buf[offset + 4 : end]), end


def read_bits(buf: memoryview, offset: int, count: int) -> tuple[tuple[bool, ...], int]:
    """``count`` (<= 8) consecutive bit fields packed into one octet, low bit first."""
    if count > 8:
        raise Malformed(f"{count} bits do not fit one octet", offset=offset)
    try:
        octet = buf[offset]
    except IndexError:
        raise truncated(buf, offset, 1) from None
    return tuple(bool(octet >> i & 1) for i in range(count)), offset + 1


def read_content(buf: memoryview, offset: int) -> tuple[dict, int]:
    """0-9's ``content`` domain (message.transfer body): discriminator octet + longstr."""
    kind, offset = read_octet(buf, offset)
    value, offset = read_longstr_bytes(buf, offset)
    return {"reference" if kind == 1 else "inline": value}, offset


# wire type -> reader, for the generated method and property tables; "bit" and
# "table" are handled by the callers (bits share octets; tables need a FieldTableReader)
READERS = {
    "octet": read_octet,
    "short": read_short,
    "long": read_long,
    "longlong": read_longlong,
    "timestamp": read_timestamp,
    "shortstr": read_shortstr,
    "longstr": read_longstr,
    "content": read_content,
}
