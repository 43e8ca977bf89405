"""Described values by name: composite lists as field dicts, and every value as JSON-ready data.

A described type is known when its descriptor, numeric (``0x10``) or symbolic
(``amqp:open:list``), is in the generated ``spec.DESCRIBED``; anything else
stays a ``Described(descriptor, value)`` and is rendered as such.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import cast

from amqplens.decode.v1_0.spec import CHOICES, DESCRIBED, PROVIDES, SYMBOLS
from amqplens.decode.v1_0.types import AmqpDecimal, Described, Symbol, Timestamp

PERFORMATIVES = PROVIDES["frame"]
SASL_FRAMES = PROVIDES["sasl-frame"]
SECTIONS = PROVIDES["section"]
DELIVERY_STATES = PROVIDES["delivery-state"]
NAMES = {code: entry.name for code, entry in DESCRIBED.items()}
SYMBOL_OF = {code: entry.symbol for code, entry in DESCRIBED.items()}
FIELD_NAMES = {code: tuple(f[0] for f in entry.fields) for code, entry in DESCRIBED.items()}
COMPOSITE = frozenset(code for code, entry in DESCRIBED.items() if entry.type_class == "composite")

ROLE = CHOICES["role"]
SND_SETTLE_MODE = CHOICES["sender-settle-mode"]
RCV_SETTLE_MODE = CHOICES["receiver-settle-mode"]
SASL_CODE = cast("dict[int | None, str]", CHOICES["sasl-code"])  # looked up with a code that may be absent


def code_of(descriptor) -> int | None:
    """The numeric descriptor of a known described type, from either form of its descriptor."""
    if type(descriptor) is int:
        return descriptor if descriptor in DESCRIBED else None
    if isinstance(descriptor, str):
        return SYMBOLS.get(descriptor)
    return None


def fields(code: int, value) -> dict | None:
    """A composite's list as ``{field: value}`` (null and trailing fields absent); None if not a list."""
    if not isinstance(value, list):
        return None
    names = FIELD_NAMES.get(code, ())
    out = {}
    for i, v in enumerate(value):
        if v is not None:
            out[names[i] if i < len(names) else f"_field_{i}"] = v
    return out


def state_name(value) -> str | None:
    """accepted | rejected | released | modified | received | declared | transactional, or None."""
    if not isinstance(value, Described):
        return None
    code = code_of(value.descriptor)
    if code not in DELIVERY_STATES:
        return None
    name = NAMES[code]
    return "transactional" if name == "transactional-state" else name


def plain(value):
    """JSON-ready data: bytes as hex, symbols as strings, described values as
    ``{"descriptor": ..., "value": ...}`` (a known composite's value as a field dict,
    its descriptor as the spec's symbol), map keys as strings, non-finite floats as strings."""
    convert = _PLAIN.get(type(value))
    return convert(value) if convert is not None else _other(value)


def _described(value: Described):
    code = code_of(value.descriptor)
    if code is not None:
        inner = fields(code, value.value) if code in COMPOSITE else None
        body = _dict(inner) if inner is not None else plain(value.value)
        return {"descriptor": SYMBOL_OF[code], "value": body}
    return {"descriptor": plain(value.descriptor), "value": plain(value.value)}


def _list(value):
    return [plain(v) for v in value]


def _dict(value: dict):
    return {k if type(k) is str else _key(k): plain(v) for k, v in value.items()}


def _float(value: float):
    return value if math.isfinite(value) else str(value)


def _same(value):
    return value


def _other(value):
    """Subclasses and the rare types (tuples of frozen keys, bytearray, memoryview, decimals)."""
    if isinstance(value, Described):
        return _described(value)
    if isinstance(value, (list, tuple)):
        return _list(value)
    if isinstance(value, dict):
        return _dict(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    return repr(value)


_PLAIN = {
    type(None): _same, bool: _same, int: _same, str: _same, Symbol: _same, Timestamp: _same, AmqpDecimal: _same,
    float: _float, bytes: bytes.hex, list: _list, dict: _dict, Described: _described, uuid.UUID: str,
}  # fmt: skip


def _key(key) -> str:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).hex()
    simple = plain(key)
    return simple if isinstance(simple, str) else json.dumps(simple, separators=(",", ":"), ensure_ascii=False)


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False).encode


def to_json(value) -> str:
    """Compact JSON of ``plain(value)``."""
    return _ENCODE(plain(value))
