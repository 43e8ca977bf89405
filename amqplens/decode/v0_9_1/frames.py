"""Frame payloads of the 0-8 / 0-9 / 0-9-1 family, decoded through the generated tables.

A frame on the wire is ``type:octet channel:short size:long payload[size] 0xCE``
in all three dialects (the 0-9 *draft*, with its extra cycle octet, and
AMQP/Fast are other codecs). The stream decoder (``stream.py``) finds frame
boundaries; this module turns one payload into values:

- method: class id, method id, then the arguments of that method in the order
  of the spec table (consecutive bit fields share an octet, low bit first);
- content header: class id, weight, body size, property flags (15 flags per
  16-bit word, bit 15 first; bit 0 set means another flags word follows), then
  the flagged properties of that class;
- body, heartbeat, trace, oob frames: opaque.

Decoding never raises: a failure comes back as an error text and whatever
values were read before it (a frame row keeps its promoted fields even when a
later argument is malformed).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

from amqplens.decode.errors import FrameError
from amqplens.decode.errors import DecodeError
from amqplens.decode.v0_9_1 import primitives as p
from amqplens.decode.v0_9_1 import spec_0_8, spec_0_9, spec_0_9_1
from amqplens.decode.v0_9_1.fieldtable import RABBITMQ, FieldTableReader
from amqplens.decode.v0_9_1.rows import PROMOTED
from amqplens.decode.v0_9_1.spec_types import MethodSpec

SPECS = {m.DIALECT: m for m in (spec_0_8, spec_0_9, spec_0_9_1)}
FRAME_END = 0xCE
FRAME_OVERHEAD = 8  # 7-octet header + frame-end
CONNECTION_CLASS = 10
FLAGS_PER_WORD = 15  # bit 0 of each flags word is the continuation bit
FLAG_PLAN_CACHE = 4096  # distinct property-flag combinations remembered per dialect; the wire picks them
ALL_METHOD_KEYS = frozenset(k for spec in SPECS.values() for k in spec.METHODS)  # any dialect's method


def _compile(fields: tuple, tables: FieldTableReader) -> tuple:
    """A decode plan: ``(name, reader)`` steps; a run of up to 8 bits is ``(names, None)``."""
    steps: list[tuple] = []
    i = 0
    while i < len(fields):
        name, wire = fields[i]
        if wire == "bit":
            run: list[str] = []
            while i < len(fields) and fields[i][1] == "bit" and len(run) < 8:
                run.append(fields[i][0])
                i += 1
            steps.append((tuple(run), None))
            continue
        steps.append((name, tables.read_table if wire == "table" else p.READERS[wire]))
        i += 1
    return tuple(steps)


def decode_plan(plan: tuple, buf: memoryview, offset: int = 0) -> tuple[dict, str | None]:
    """Run a plan over ``buf`` (exactly the bytes of the arguments and nothing after)."""
    args: dict = {}
    try:
        for name, reader in plan:
            if reader is None:
                try:
                    octet = buf[offset]
                except IndexError:
                    raise p.truncated(buf, offset, 1) from None
                for i, bit_name in enumerate(name):
                    args[bit_name] = bool(octet >> i & 1)
                offset += 1
            else:
                args[name], offset = reader(buf, offset)
    except DecodeError as exc:
        return args, FrameError("malformed_arguments", f"{exc}")
    if offset != len(buf):
        return args, FrameError("trailing_bytes", f"{len(buf) - offset} bytes after the arguments")
    return args, None


# -- compiled plans ----------------------------------------------------------------------
# A plan (or a property list) is also compiled into one straight-line Python function: the fixed-size
# fields of a run read by one struct call, strings sliced inline, no reader call per field. It only
# handles well-formed input: anything else (a short buffer, a bad table, trailing bytes) makes it give
# up, and the generic reader (``decode_plan`` / ``DialectTables._properties``), the reference, decodes
# the payload again, errors and all. Both are pure, so the result is the same either way.
_FIXED = {p.read_octet: "B", p.read_short: "H", p.read_long: "I", p.read_longlong: "Q", p.read_timestamp: "Q"}


class _GiveUp(Exception):
    pass


def _compile_fast(steps: tuple, bit_properties: bool = False):
    """``fn(buf, offset) -> dict`` for ``steps`` (plan steps, or property steps when ``bit_properties``:
    a bit property is its flag alone and reads no octet); raises when the input is not well formed."""
    env = {"_GiveUp": _GiveUp, "text": p.text, "U32": p.U32.unpack_from}
    lines = ["def fast(buf, offset):", "    size = len(buf)", "    args = {}"]
    fixed: list = []  # a pending run of fixed-size fields: (name, format char)

    def flush() -> None:
        if not fixed:
            return
        fmt = ">" + "".join(c for _, c in fixed)
        k = f"S{len(env)}"
        env[k] = struct.Struct(fmt).unpack_from
        names = [repr(n) for n, _ in fixed]
        lines.append(f"    v = {k}(buf, offset)")
        for i, n in enumerate(names):
            lines.append(f"    args[{n}] = v[{i}]")
        lines.append(f"    offset += {struct.calcsize(fmt)}")
        fixed.clear()

    for name, reader in steps:
        if reader is None:
            flush()
            if bit_properties:
                lines.append(f"    args[{name!r}] = True")
                continue
            lines.append("    octet = buf[offset]")
            for i, bit_name in enumerate(name):
                lines.append(f"    args[{bit_name!r}] = bool(octet >> {i} & 1)")
            lines.append("    offset += 1")
        elif reader in _FIXED:
            fixed.append((name, _FIXED[reader]))
        elif reader is p.read_shortstr:
            flush()
            lines += ["    end = offset + 1 + buf[offset]", "    if end > size:", "        raise _GiveUp",
                      f"    args[{name!r}] = text(buf[offset + 1 : end])", "    offset = end"]
        elif reader is p.read_longstr:
            flush()
            lines += ["    end = offset + 4 + U32(buf, offset)[0]", "    if end > size:", "        raise _GiveUp",
                      f"    args[{name!r}] = text(buf[offset + 4 : end])", "    offset = end"]
        else:  # tables, 0-9's content: the reader itself
            flush()
            k = f"R{len(env)}"
            env[k] = reader
            lines.append(f"    args[{name!r}], offset = {k}(buf, offset)")
    flush()
    lines += ["    if offset != size:", "        raise _GiveUp", "    return args"]
    exec("\n".join(lines), env)  # noqa: S102 - generated from the spec tables, no input data
    return env["fast"]


def _fast_plan(plan: tuple):
    """The plan as ``fn(buf, offset) -> (args, error)``: the compiled function, the generic one when it gives up."""
    fast = _compile_fast(plan)

    def decode(buf: memoryview, offset: int) -> tuple[dict, str | None]:
        try:
            return fast(buf, offset), None
        except Exception:  # noqa: BLE001 - not well formed: the reference decodes it, errors and all
            return decode_plan(plan, buf, offset)

    return decode


class DialectTables:
    """One dialect's generated tables, compiled into decode plans (built once, shared)."""

    def __init__(self, dialect: str, letters: str = RABBITMQ, compiled: bool = True) -> None:
        """``compiled=False``: the generic readers alone (the reference the tests compare the compiled ones with)."""
        spec = SPECS[dialect]
        self.compiled = compiled
        self.dialect = dialect
        self.spec = spec
        self.field_tables = FieldTableReader(letters)
        self.frame_types: dict[int, str] = dict(spec.FRAME_TYPES)
        self.methods: dict[int, MethodSpec] = spec.METHODS
        self.classes: dict[int, str] = spec.CLASSES
        self.plans = {key: _compile(m.fields, self.field_tables) for key, m in spec.METHODS.items()}
        self.fast_plans = {key: _fast_plan(plan) if compiled else functools.partial(decode_plan, plan)
                           for key, plan in self.plans.items()}
        # key -> the method's (argument, frame column) pairs worth promoting
        self.promoted = {key: tuple((f, PROMOTED[f]) for f, _ in m.fields if f in PROMOTED) for key, m in spec.METHODS.items()}
        self._flag_steps: dict[tuple, tuple] = {}
        self._fast_properties: dict[tuple, Callable] = {}  # the same keys: compiled readers of ``_flag_steps``
        self.property_plans = {
            class_id: tuple(
                (name, None if wire == "bit" else self.field_tables.read_table if wire == "table" else p.READERS[wire])
                for name, wire in props
            )
            for class_id, props in spec.PROPERTIES.items()
        }

    # -- method frames -----------------------------------------------------------------
    def decode_method(self, payload: memoryview) -> tuple[int | None, dict | None, str | None]:
        """``(key, arguments, error)``; key is ``class_id << 16 | method_id``."""
        if len(payload) < 4:
            return None, None, FrameError("malformed_method", f"payload of {len(payload)} bytes has no class and method id")
        class_id, method_id = p.METHOD_IDS.unpack_from(payload, 0)
        key = class_id << 16 | method_id
        plan = self.fast_plans.get(key)
        if plan is None:
            return key, None, FrameError("unknown_method", f"class {class_id} method {method_id} is not in the {self.dialect} tables")
        args, error = plan(payload, 4)
        return key, args, error

    # -- content header frames --------------------------------------------------------------
    def decode_header(self, payload: memoryview) -> tuple[tuple | None, dict | None, str | None]:
        """``((class_id, weight, body_size), properties, error)``."""
        try:
            class_id, weight, body_size = p.CONTENT_HEADER.unpack_from(payload, 0)
        except struct.error:
            return None, None, FrameError("malformed_header", f"payload of {len(payload)} bytes is shorter than 14")
        head = (class_id, weight, body_size)
        words = []
        offset = 12
        try:
            while True:
                word, offset = p.read_short(payload, offset)
                words.append(word)
                if not word & 1:
                    break
        except DecodeError as exc:
            return head, None, FrameError("malformed_header", f"property flags: {exc}")
        plan = self.property_plans.get(class_id)
        if plan is None:
            return head, None, FrameError("unknown_class", f"content class {class_id} has no properties in the {self.dialect} tables")
        key = (class_id, tuple(words))
        steps = self._flag_steps.get(key)
        if steps is None:  # few flag combinations occur: compile each once (a bounded cache)
            steps = _flag_plan(plan, words)
            if len(self._flag_steps) < FLAG_PLAN_CACHE:
                self._flag_steps[key] = steps
                if not steps[1] and self.compiled:  # no unknown flags: a compiled reader for the well-formed case
                    self._fast_properties[key] = _compile_fast(steps[0], bit_properties=True)
        fast = self._fast_properties.get(key)
        if fast is not None:
            try:
                return head, fast(payload, offset), None
            except Exception:  # noqa: BLE001 - not well formed: the reference decodes it, errors and all
                pass
        return (head, *self._properties(steps, payload, offset))

    @staticmethod
    def _properties(steps: tuple, payload: memoryview, offset: int) -> tuple[dict, str | None]:
        props: dict = {}
        present, extra = steps
        try:
            for name, reader in present:
                if reader is None:  # a bit property is its flag alone
                    props[name] = True
                else:
                    props[name], offset = reader(payload, offset)
        except DecodeError as exc:
            return props, FrameError("malformed_properties", f"{exc}")
        if extra:
            return props, FrameError("unknown_properties", f"flags {list(extra)} set beyond the {len(steps[0])} known properties")
        if offset != len(payload):
            return props, FrameError("trailing_bytes", f"{len(payload) - offset} bytes after the properties")
        return props, None


def _flag_plan(plan: tuple, words: list) -> tuple[tuple, tuple]:
    """The flagged properties of ``plan`` in wire order, and the flagged indexes it does not know."""
    flagged = []
    for w, word in enumerate(words):
        for b in range(FLAGS_PER_WORD):  # bit 15 is the first property of this word
            if word >> (15 - b) & 1:
                flagged.append(w * FLAGS_PER_WORD + b)
    present = tuple(plan[i] for i in flagged if i < len(plan))
    return present, tuple(i for i in flagged if i >= len(plan))


def channel_rule(frame_type: str, channel: int, class_id: int | None = None) -> str | None:
    """The framing rules on channel numbers; an error text when broken."""
    rule = _CHANNEL_RULES.get(frame_type)
    return rule(channel, class_id) if rule else None


def _zero(what):
    return lambda ch, cls: None if ch == 0 else FrameError("channel_rule", f"{what} on channel {ch}, must be 0")


def _nonzero(what):
    return lambda ch, cls: None if ch != 0 else FrameError("channel_rule", f"{what} on channel 0")


_CONNECTION_METHOD = _zero("connection method")
_CHANNEL_METHOD = _nonzero("method of a channel class")


def _method_channel(ch: int, class_id: int | None) -> str | None:
    if class_id == CONNECTION_CLASS:
        return _CONNECTION_METHOD(ch, class_id)
    return _CHANNEL_METHOD(ch, class_id) if class_id is not None else None


_CHANNEL_RULES = {
    "method": _method_channel,
    "header": _nonzero("content header"),
    "body": _nonzero("content body"),
    "heartbeat": _zero("heartbeat"),
    "trace": _zero("trace frame"),
}

_TABLES: dict[tuple[str, str], DialectTables] = {}


def tables_for(dialect: str, letters: str = RABBITMQ) -> DialectTables:
    """The shared compiled tables of a dialect (compiled on first use)."""
    key = (dialect, letters)
    t = _TABLES.get(key)
    if t is None:
        t = _TABLES[key] = DialectTables(dialect, letters)
    return t
