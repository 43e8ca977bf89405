"""A test-only encoder for the 0-8 / 0-9 / 0-9-1 family, driven by the generated tables.

It writes what the decoder reads: frames, method arguments (bits packed low bit
first, eight to an octet), content headers (property flags with the
continuation bit) and field tables. Field values are typed by ``Typed(letter,
value)`` or inferred the way pika infers them (bool t, int I or l, str S,
bytes x, dict F, list A, None V, Decimal D, float d), so bytes can be compared
with pika's own marshalling.
"""

from __future__ import annotations

import dataclasses
import decimal
import struct

from amqplens.decode.detect import HEADER_OF
from amqplens.decode.v0_9_1.frames import SPECS

FRAME_END = b"\xce"
TYPE_OF = {"method": 1, "header": 2, "body": 3, "oob_method": 4, "oob_header": 5, "oob_body": 6, "trace": 7, "heartbeat": 8}


@dataclasses.dataclass(frozen=True)
class Typed:
    letter: str
    value: object


def shortstr(v) -> bytes:
    b = v.encode() if isinstance(v, str) else bytes(v)
    assert len(b) < 256, "shortstr longer than 255"
    return bytes([len(b)]) + b


def longstr(v) -> bytes:
    b = v.encode() if isinstance(v, str) else bytes(v)
    return struct.pack(">I", len(b)) + b


class Encoder:
    def __init__(self, dialect: str = "0-9-1", letters: str = "rabbitmq") -> None:
        self.dialect = dialect
        self.spec = SPECS[dialect]
        self.letters = letters
        self.keys = {(m[0], m[1]): key for key, m in self.spec.METHODS.items()}

    # -- frames ----------------------------------------------------------------------------
    @staticmethod
    def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
        return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + FRAME_END

    def protocol_header(self) -> bytes:
        return HEADER_OF[self.dialect]

    def method(self, channel: int, class_name: str, method_name: str, **args) -> bytes:
        key = self.keys[(class_name, method_name)]
        return self.frame(1, channel, self.method_payload(key, args))

    def method_payload(self, key: int, args: dict) -> bytes:
        return struct.pack(">HH", key >> 16, key & 0xFFFF) + self.fields(self.spec.METHODS[key][4], args)

    def header(self, channel: int, class_id: int, body_size: int, props: dict | None = None, weight: int = 0) -> bytes:
        return self.frame(2, channel, self.header_payload(class_id, body_size, props or {}, weight))

    def header_payload(self, class_id: int, body_size: int, props: dict, weight: int = 0) -> bytes:
        plan = self.spec.PROPERTIES[class_id]
        present = [name in props for name, _ in plan]
        words = []
        for start in range(0, max(len(present), 1), 15):
            word = 0
            for i, flag in enumerate(present[start : start + 15]):
                if flag:
                    word |= 1 << (15 - i)
            words.append(word)
        while len(words) > 1 and words[-1] == 0:
            words.pop()
        for i in range(len(words) - 1):
            words[i] |= 1  # continuation
        out = struct.pack(">HHQ", class_id, weight, body_size) + b"".join(struct.pack(">H", w) for w in words)
        for name, wire in plan:
            if name in props and wire != "bit":
                out += self.value(wire, props[name])
        return out

    def body(self, channel: int, data: bytes) -> bytes:
        return self.frame(3, channel, data)

    def heartbeat(self, channel: int = 0) -> bytes:
        return self.frame(8, channel, b"")

    # -- fields ----------------------------------------------------------------------------
    def fields(self, fields: tuple, args: dict) -> bytes:
        out = bytearray()
        bits: list[bool] = []

        def flush():
            if bits:
                out.append(sum(1 << i for i, b in enumerate(bits) if b))
                bits.clear()

        for name, wire in fields:
            if wire == "bit":
                if len(bits) == 8:
                    flush()
                bits.append(bool(args.get(name, False)))
                continue
            flush()
            out += self.value(wire, args[name])
        flush()
        return bytes(out)

    def value(self, wire: str, v) -> bytes:
        if wire == "octet":
            return struct.pack(">B", v)
        if wire == "short":
            return struct.pack(">H", v)
        if wire == "long":
            return struct.pack(">I", v)
        if wire in ("longlong", "timestamp"):
            return struct.pack(">Q", v)
        if wire == "shortstr":
            return shortstr(v)
        if wire == "longstr":
            return longstr(v)
        if wire == "table":
            return self.table(v)
        if wire == "content":
            kind, data = next(iter(v.items()))
            return bytes([1 if kind == "reference" else 0]) + longstr(data)
        raise ValueError(wire)

    # -- field tables ----------------------------------------------------------------------
    def table(self, d: dict | None) -> bytes:
        body = self.table_entries(d or {})
        return struct.pack(">I", len(body)) + body

    def table_entries(self, d: dict) -> bytes:
        return b"".join(shortstr(k) + self.field_value(v) for k, v in d.items())

    def array(self, items: list) -> bytes:
        body = b"".join(self.field_value(v) for v in items)
        return struct.pack(">I", len(body)) + body

    def infer(self, v) -> Typed:
        if isinstance(v, Typed):
            return v
        if isinstance(v, bool):
            return Typed("t", v)
        if isinstance(v, int):
            return Typed("I" if -(2**31) <= v < 2**31 else ("l" if self.letters == "rabbitmq" else "L"), v)
        if isinstance(v, float):
            return Typed("d", v)
        if isinstance(v, decimal.Decimal):
            return Typed("D", v)
        if isinstance(v, str):
            return Typed("S", v)
        if isinstance(v, (bytes, bytearray)):
            return Typed("x", bytes(v))
        if isinstance(v, dict):
            return Typed("F", v)
        if isinstance(v, (list, tuple)):
            return Typed("A", list(v))
        if v is None:
            return Typed("V", None)
        raise TypeError(type(v))

    def field_value(self, v) -> bytes:
        t = self.infer(v)
        letter, value = t.letter, t.value
        fixed = _FIXED.get(letter)
        if letter == "s":
            enc = shortstr(value) if self.letters == "spec" else struct.pack(">h", value)
        elif letter == "l":
            enc = struct.pack(">Q" if self.letters == "spec" else ">q", value)
        elif fixed is not None:
            enc = struct.pack(fixed, value)
        elif letter == "D":
            sign, digits, exp = value.as_tuple()
            scale = max(-exp, 0)
            enc = struct.pack(">BI", scale, int(value.scaleb(scale)))
        elif letter in ("S", "x"):
            enc = longstr(value)
        elif letter == "F":
            enc = self.table(value)
        elif letter == "A":
            enc = self.array(value)
        elif letter == "V":
            enc = b""
        else:
            raise ValueError(letter)
        return letter.encode() + enc


_FIXED = {
    "t": ">?",
    "b": ">b",
    "B": ">B",
    "U": ">h",
    "u": ">H",
    "I": ">i",
    "i": ">I",
    "L": ">q",
    "f": ">f",
    "d": ">d",
    "T": ">Q",
}
