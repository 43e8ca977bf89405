"""An AMQP 0-10 encoder for tests only: builds wire bytes from the spec tables, never from the decoder.

Values are encoded by their spec type (``amqplens.decode.v0_10.spec``); maps,
lists and arrays take Python values and infer the type code (str -> str16,
int -> int64 or given with ``Typed``). ``control``/``command`` give a segment's
payload; ``frames`` cuts a segment into frames with the four position flags;
``assembly`` puts a command, its header structs and its body together.
"""

from __future__ import annotations

import struct
import uuid

from amqplens.decode.v0_10 import spec

HEADER = b"AMQP\x01\x01\x00\x0a"
CONTROL, COMMAND, HEADER_SEG, BODY = 0, 1, 2, 3
_FMT = {"int8": ">b", "uint8": ">B", "char": ">B", "boolean": ">B", "int16": ">h", "uint16": ">H", "int32": ">i",
        "uint32": ">I", "float": ">f", "char-utf32": ">I", "sequence-no": ">I", "int64": ">q", "uint64": ">Q",
        "double": ">d", "datetime": ">Q"}  # fmt: skip
_SIZE_FMT = {1: ">B", 2: ">H", 4: ">I"}


class Typed:
    def __init__(self, type_name: str, value) -> None:
        self.type_name, self.value = type_name, value


def _infer(value) -> tuple[str, object]:
    if isinstance(value, Typed):
        return value.type_name, value.value
    if isinstance(value, bool):
        return "boolean", value
    if isinstance(value, int):
        return "int64", value
    if isinstance(value, str):
        return "str16", value
    if isinstance(value, bytes):
        return "vbin32", value
    if isinstance(value, dict):
        return "map", value
    if isinstance(value, list):
        return "list", value
    if value is None:
        return "void", None
    raise TypeError(type(value))


def encode(type_name: str, value) -> bytes:
    if type_name in _FMT:
        return struct.pack(_FMT[type_name], int(value) if type_name == "boolean" else value)
    if type_name in ("void", "bit"):
        return b""
    if type_name == "uuid":
        return uuid.UUID(value).bytes if isinstance(value, str) else bytes(value)
    if type_name in ("sequence-set", "byte-ranges"):
        fmt = ">II" if type_name == "sequence-set" else ">QQ"
        body = b"".join(struct.pack(fmt, lo, hi) for lo, hi in value)
        return struct.pack(">H", len(body)) + body
    if type_name == "map":
        body = b"".join(encode("str8", k) + _coded(v) for k, v in value.items())
        return struct.pack(">II", len(body) + 4, len(value)) + body
    if type_name == "list":
        body = b"".join(_coded(v) for v in value)
        return struct.pack(">II", len(body) + 4, len(value)) + body
    if type_name == "array":  # value: (element type, [values])
        etype, items = value
        body = b"".join(encode(etype, v) for v in items)
        return struct.pack(">IBI", len(body) + 5, spec.TYPES[etype][0], len(items)) + body
    if type_name == "struct32":  # value: (struct name, {field: value})
        return struct32(*value)
    if type_name in spec.STRUCTS:
        return encode_struct(type_name, value)
    code, fixed, var = spec.TYPES[type_name]
    raw = value.encode("utf-16-be" if "utf16" in type_name else "latin-1" if "latin" in type_name else "utf-8") if isinstance(value, str) else bytes(value)
    if fixed is not None:
        assert len(raw) == fixed, (type_name, raw)
        return raw
    return struct.pack(_SIZE_FMT[var], len(raw)) + raw


def _coded(value) -> bytes:
    type_name, v = _infer(value)
    return bytes([spec.TYPES[type_name][0]]) + encode(type_name, v)


def packed(fields, values: dict, pack: int) -> bytes:
    """Packing flags (bit i of octet i//8 for field i) and the present fields."""
    flags, body = 0, b""
    for i, (name, type_name, _enum) in enumerate(fields):
        if name not in values or values[name] is None or values[name] is False:
            continue
        flags |= 1 << i
        if type_name != "bit":
            body += encode(type_name, values[name])
    assert not set(values) - {f[0] for f in fields}, set(values) - {f[0] for f in fields}
    return flags.to_bytes(pack, "little") + body if pack else body


def encode_struct(name: str, values: dict) -> bytes:
    cls, code, size_width, pack, fields = spec.STRUCTS[name]
    body = (bytes([cls, code]) if code is not None else b"") + packed(fields, values, pack)
    return (struct.pack(_SIZE_FMT[size_width], len(body)) if size_width else b"") + body


def struct32(name: str, values: dict) -> bytes:
    cls, code, _size, pack, fields = spec.STRUCTS[name]
    body = bytes([cls, code]) + packed(fields, values, pack)
    return struct.pack(">I", len(body)) + body


def _find(table: dict, class_name: str, name: str) -> tuple:
    for key, meta in table.items():
        if meta[0] == class_name and meta[1] == name:
            return key, meta
    raise KeyError((class_name, name))


def control(class_name: str, control_name: str, **values) -> bytes:
    (cls, code), meta = _find(spec.CONTROLS, class_name, control_name)
    return bytes([cls, code]) + packed(meta[2], values, 2)


def command(class_name: str, command_name: str, sync: bool = False, **values) -> bytes:
    (cls, code), meta = _find(spec.COMMANDS, class_name, command_name)
    return bytes([cls, code, 1, 1 if sync else 0]) + packed(meta[2], values, 2)


def frame(flags: int, stype: int, channel: int, payload: bytes, track: int | None = None) -> bytes:
    track = (0 if stype == CONTROL else 1) if track is None else track
    return struct.pack(">BBHBBHI", flags, stype, 12 + len(payload), 0, track, channel, 0) + payload


def segment(stype: int, channel: int, payload: bytes, first_seg: bool = True, last_seg: bool = True, max_payload: int = 65535 - 12) -> bytes:
    """One segment cut into frames of at most ``max_payload`` payload octets."""
    chunks = [payload[i : i + max_payload] for i in range(0, len(payload), max_payload)] or [b""]
    out = b""
    for i, chunk in enumerate(chunks):
        flags = (8 if first_seg else 0) | (4 if last_seg else 0) | (2 if i == 0 else 0) | (1 if i == len(chunks) - 1 else 0)
        out += frame(flags, stype, channel, chunk)
    return out


def assembly(channel: int, cmd: bytes, headers=(), body: bytes | None = None, max_payload: int = 65535 - 12) -> bytes:
    """A command with its header segment (struct32 entries) and body segment."""
    has_header = bool(headers)
    out = segment(COMMAND, channel, cmd, True, not has_header and body is None, max_payload)
    if has_header:
        out += segment(HEADER_SEG, channel, b"".join(struct32(n, v) for n, v in headers), False, body is None, max_payload)
    if body is not None:
        out += segment(BODY, channel, body, False, True, max_payload)
    return out


def ctl(channel: int, class_name: str, control_name: str, **values) -> bytes:
    return segment(CONTROL, channel, control(class_name, control_name, **values))


def cmd(channel: int, class_name: str, command_name: str, sync: bool = False, **values) -> bytes:
    return segment(COMMAND, channel, command(class_name, command_name, sync, **values))
