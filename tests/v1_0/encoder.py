"""An AMQP 1.0 encoder for tests only: typed values, performatives, frames, messages.

A typed value is a node ``(code, payload)``: the constructor byte to use and
what it carries, so a test can pick every encoding of the type system:

- fixed codes: the Python value (``(0x52, 7)``; 0x40-0x45 ignore the payload);
- 0xa0/0xb0 bytes, 0xa1/0xb1 str, 0xa3/0xb3 str;
- 0xc0/0xd0 a list of nodes; 0xc1/0xd1 a list of (key node, value node);
- 0xe0/0xf0 ``(element constructor, [payloads])``, the element constructor a
  code or ``(descriptor node, code)`` for described elements;
- 0x00 ``(descriptor node, value node)``.

``encode(node)`` gives the bytes, ``expected(node)`` what the decoder should
return. ``auto(value)`` picks a node for a plain Python value. Nothing here
imports the decoder under test, only the generated spec tables.
"""

from __future__ import annotations

import struct
import uuid

from amqplens.decode.v1_0.spec import DESCRIBED

_FIXED = {
    0x50: ">B", 0x51: ">b", 0x52: ">B", 0x53: ">B", 0x54: ">b", 0x55: ">b", 0x56: ">B", 0x60: ">H", 0x61: ">h",
    0x70: ">I", 0x71: ">i", 0x72: ">f", 0x80: ">Q", 0x81: ">q", 0x82: ">d", 0x83: ">q",
}  # fmt: skip
_CONSTANT = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0, 0x45: []}
_WIDE = {0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0}


def _sized(code: int, body: bytes, count: int | None = None) -> bytes:
    wide = code in _WIDE
    fmt = ">I" if wide else ">B"
    if count is None:
        return struct.pack(fmt, len(body)) + body
    inner = struct.pack(fmt, count) + body
    return struct.pack(fmt, len(inner)) + inner


def encode_body(code: int, payload) -> bytes:
    """The value after its constructor byte."""
    if code in _CONSTANT:
        return b""
    if code in _FIXED:
        return struct.pack(_FIXED[code], int(payload) if code == 0x56 else payload)
    if code == 0x73:
        return struct.pack(">I", ord(payload))
    if code in (0x74, 0x84, 0x94, 0x98):
        return bytes(payload.bytes if isinstance(payload, uuid.UUID) else payload)
    if code in (0xA0, 0xB0):
        return _sized(code, bytes(payload))
    if code in (0xA1, 0xB1):
        return _sized(code, payload.encode("utf-8"))
    if code in (0xA3, 0xB3):
        return _sized(code, payload.encode("ascii"))
    if code in (0xC0, 0xD0):
        return _sized(code, b"".join(encode(n) for n in payload), len(payload))
    if code in (0xC1, 0xD1):
        return _sized(code, b"".join(encode(k) + encode(v) for k, v in payload), 2 * len(payload))
    if code in (0xE0, 0xF0):
        element, items = payload
        if isinstance(element, tuple):
            descriptor, elem_code = element
            head = b"\x00" + encode(descriptor) + bytes([elem_code])
        else:
            elem_code, head = element, bytes([element])
        return _sized(code, head + b"".join(encode_body(elem_code, p) for p in items), len(items))
    if code == 0x00:
        descriptor, value = payload
        return encode(descriptor) + encode(value)
    raise ValueError(f"no encoding for 0x{code:02x}")


def encode(node) -> bytes:
    code, payload = node
    return bytes([code]) + encode_body(code, payload)


_DECIMAL = {0x74: "decimal32", 0x84: "decimal64", 0x94: "decimal128"}


def expected_body(code: int, payload):
    if code in _CONSTANT:
        return _CONSTANT[code]
    if code == 0x56:
        return bool(payload)
    if code in _DECIMAL:
        return f"{_DECIMAL[code]}:{bytes(payload).hex()}"
    if code == 0x98:
        return payload if isinstance(payload, uuid.UUID) else uuid.UUID(bytes=bytes(payload))
    if code == 0x72:
        return struct.unpack(">f", struct.pack(">f", payload))[0]
    if code in (0xA0, 0xB0):
        return bytes(payload)
    if code in (0xC0, 0xD0):
        return [expected(n) for n in payload]
    if code in (0xC1, 0xD1):
        return {expected(k): expected(v) for k, v in payload}
    if code in (0xE0, 0xF0):
        element, items = payload
        if isinstance(element, tuple):
            d = expected(element[0])
            return [(d, expected_body(element[1], p)) for p in items]
        return [expected_body(element, p) for p in items]
    if code == 0x00:
        return (expected(payload[0]), expected(payload[1]))
    return payload


def expected(node):
    """What the decoder returns (described values as (descriptor, value) tuples)."""
    return expected_body(*node)


# -- plain values -----------------------------------------------------------------------
def uint(v: int):
    return (0x43, None) if v == 0 else (0x52, v) if v < 256 else (0x70, v)


def ulong(v: int):
    return (0x44, None) if v == 0 else (0x53, v) if v < 256 else (0x80, v)


def string(s: str):
    return (0xA1 if len(s.encode()) < 256 else 0xB1, s)


def symbol(s: str):
    return (0xA3 if len(s) < 256 else 0xB3, s)


def binary(b: bytes):
    return (0xA0 if len(b) < 256 else 0xB0, b)


def boolean(v: bool):
    return (0x41, None) if v else (0x42, None)


def lst(*nodes):
    if not nodes:
        return (0x45, None)
    body = sum(len(encode(n)) for n in nodes)
    return (0xC0 if body < 255 and len(nodes) < 256 else 0xD0, list(nodes))


def mp(pairs):
    pairs = list(pairs)
    body = sum(len(encode(k)) + len(encode(v)) for k, v in pairs)
    return (0xC1 if body < 255 and 2 * len(pairs) < 256 else 0xD1, pairs)


def described(code: int, value_node):
    return (0x00, (ulong(code), value_node))


def auto(value):
    """A node for a plain Python value (ints as uint/ulong/long by size, str as string)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int) and value[0] in range(256):
        return value  # already a node
    if value is None:
        return (0x40, None)
    if isinstance(value, bool):
        return boolean(value)
    if isinstance(value, int):
        return uint(value) if 0 <= value < 1 << 32 else ulong(value) if value >= 0 else (0x81, value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, (bytes, bytearray)):
        return binary(bytes(value))
    if isinstance(value, dict):
        return mp((auto(k), auto(v)) for k, v in value.items())
    if isinstance(value, list):
        return lst(*(auto(v) for v in value))
    raise TypeError(f"no automatic node for {value!r}")


# -- composites, frames, messages --------------------------------------------------------------
_BY_NAME = {entry[0]: (code, entry[5]) for code, entry in DESCRIBED.items()}
_CHOICE_CODES = {"role": None, "sender-settle-mode": 0x50, "receiver-settle-mode": 0x50, "sasl-code": 0x50}
_TYPED = {"ushort": 0x60, "ubyte": 0x50}


def _field_node(ftype: str, multiple: bool, value):
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
        return value
    if value is None:
        return (0x40, None)
    if multiple and isinstance(value, list):
        return (0xE0, (0xA3, value)) if ftype in ("symbol", "ietf-language-tag") else lst(*(auto(v) for v in value))
    if ftype in ("symbol", "ietf-language-tag"):
        return symbol(value)
    if ftype in _TYPED or _CHOICE_CODES.get(ftype):
        return (_TYPED.get(ftype) or _CHOICE_CODES[ftype], value)
    if ftype in ("ulong", "section-offset"):
        return ulong(value)
    return auto(value)


def composite(name: str, /, **fields):
    """A described composite by spec name; fields by snake_case name, trailing absent ones dropped."""
    code, spec_fields = _BY_NAME[name]
    values = [fields.pop(f[0], None) for f in spec_fields]
    if fields:
        raise TypeError(f"{name} has no fields {sorted(fields)}")
    while values and values[-1] is None:
        values.pop()
    nodes = [_field_node(f[1], f[2], v) for f, v in zip(spec_fields, values)]
    return described(code, lst(*nodes) if nodes else (0x45, None))


def frame(body: bytes = b"", channel: int = 0, ftype: int = 0, doff: int = 2, ext: bytes | None = None) -> bytes:
    ext = ext if ext is not None else b"\x00" * (doff * 4 - 8)
    return struct.pack(">IBBH", 8 + len(ext) + len(body), doff, ftype, channel) + ext + body


def performative(perf: str, /, channel: int = 0, payload: bytes = b"", **fields) -> bytes:
    ftype = 1 if perf.startswith("sasl-") else 0
    return frame(encode(composite(perf, **fields)) + payload, channel=channel, ftype=ftype)


def section(name: str, value_node) -> bytes:
    return encode(described(_BY_NAME[name][0], value_node))


AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
EMPTY_FRAME = frame()
