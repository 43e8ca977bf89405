"""AMQP 1.0 values as Qpid Proton prints them in a frame trace, back into the 1.0 codec's types.

Proton's ``pn_inspect`` writes a performative as ``@open(16) [container-id="c",
max-frame-size=0x8000]``: a described type with its name and code, then its
list with the non-null fields named. Values: ``"text"`` and ``b"bytes"`` (non
printable bytes as ``\\xNN``), symbols ``:PLAIN`` or ``:"amqp:not-found"``,
``true``/``false``/``null``, numbers (from about proton 0.36 unsigned integers
in hex, ``0x7fff``; before in decimal), lists ``[...]``, maps ``{k=v}``, arrays
``@<symbol>[...]`` (before 0.36 ``@PN_SYMBOL[...]``), and other described
values ``@name(code) value`` or ``@code value``.

``parse_value`` returns what ``amqplens.decode.v1_0.types.decode`` would have
returned for the same value on the wire: a known composite becomes
``Described(code, [fields in spec order])``, so the codec's own ``fields`` and
``promote`` fill the frame columns.
"""

from __future__ import annotations

from typing import Any

import re
import uuid

from amqplens.decode.v1_0.composites import FIELD_NAMES, code_of
from amqplens.decode.v1_0.types import Described, Symbol

MAX_DEPTH = 64  # real performatives nest a few levels (attach > source > filter > described value)

_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")
_NUMBER = re.compile(r"-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)")
_BARE_SYMBOL = re.compile(r"[^\s,\]\}=\[\{\"]+")
_DESCRIPTOR = re.compile(r"@(?:([A-Za-z][\w\-:.]*)\((\d+|0x[0-9a-fA-F]+)\)|(0x[0-9a-fA-F]+|\d+)|(:\"(?:[^\"\\]|\\.)*\"|:[^\s\[\{\"]+))\s?")
_ARRAY = re.compile(r"@(?:<([\w\-]+)>|PN_([A-Z_]+))\[")
_WORDS = {"true": True, "false": False, "null": None}


class TraceValueError(ValueError):
    """The printed value does not parse (a truncated or garbled trace line)."""


def unquote(raw: str) -> bytes:
    """Proton's quoted bytes (printable ASCII as is, the rest ``\\xNN``) back to bytes."""
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw.encode("latin-1", "backslashreplace"))


def _quoted(text: str, pos: int) -> tuple[str, int]:
    """The body of a ``"..."`` starting at ``pos`` (the opening quote) and the position after it.
    Proton writes a quote or backslash inside as ``\\x22`` / ``\\x5c``, so the next quote ends it."""
    end = text.find('"', pos + 1)
    if end < 0:
        raise TraceValueError(f"unterminated quote at {pos}")
    return text[pos + 1 : end], end + 1


def parse_value(text: str, pos: int = 0, depth: int = 0):
    """``(value, position after it)``."""
    if depth > MAX_DEPTH:
        raise TraceValueError("value nested too deep")
    if pos >= len(text):
        raise TraceValueError("the line ends where a value should be")
    c = text[pos]
    if c == '"':
        body, pos = _quoted(text, pos)
        return unquote(body).decode("utf-8", "replace"), pos
    if c == "b" and text.startswith('b"', pos):
        body, pos = _quoted(text, pos + 1)
        return unquote(body), pos
    if c == ":":
        if text.startswith(':"', pos):
            body, pos = _quoted(text, pos + 1)
            return Symbol(unquote(body).decode("utf-8", "replace")), pos
        m = _BARE_SYMBOL.match(text, pos + 1)
        if m is None:
            raise TraceValueError(f"empty symbol at {pos}")
        return Symbol(m.group(0)), m.end()
    if c == "[":
        return _sequence(text, pos, depth, "]")
    if c == "{":
        items, pos = _sequence(text, pos, depth, "}")
        return dict(items), pos
    if c == "@":
        return _at(text, pos, depth)
    if text.startswith("UUID(", pos):
        end = text.index(")", pos)
        return uuid.UUID(text[pos + 5 : end]), end + 1
    for word, value in _WORDS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    m = _NUMBER.match(text, pos)
    if m is not None and m.end() > pos:
        s = m.group(0)
        if "0x" in s:
            return int(s, 16), m.end()
        return (float(s) if any(ch in s for ch in ".einf") else int(s)), m.end()
    raise TraceValueError(f"unexpected {text[pos:pos + 20]!r} at {pos}")


def _sequence(text: str, pos: int, depth: int, close: str):
    """A list ``[a, name=b]`` (named items as (name, value) pairs) or a map's ``{k=v}`` pairs."""
    pos += 1
    items: list[Any] = []  # values, _Named items of a list, (key, value) pairs of a map
    while True:
        pos = _skip(text, pos)
        if text.startswith(close, pos):
            return items, pos + 1
        if items:
            if not text.startswith(",", pos):
                raise TraceValueError(f"expected ',' at {pos}")
            pos = _skip(text, pos + 1)
        name = re.match(r"([a-z][a-z0-9\-]*)=", text[pos:pos + 64]) if close == "]" else None
        if name is not None:
            value, pos = parse_value(text, pos + name.end(), depth + 1)
            items.append(_Named(name.group(1), value))
            continue
        key, pos = parse_value(text, pos, depth + 1)
        if close == "}":
            if not text.startswith("=", pos):
                raise TraceValueError(f"expected '=' at {pos}")
            value, pos = parse_value(text, pos + 1, depth + 1)
            items.append((key, value))
        else:
            items.append(key)


class _Named(tuple):
    """``name=value`` inside a composite's printed list."""

    def __new__(cls, name, value):
        return super().__new__(cls, (name, value))


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] == " ":
        pos += 1
    return pos


def _at(text: str, pos: int, depth: int):
    m = _ARRAY.match(text, pos)
    if m is not None:
        items, end = _sequence(text, m.end() - 1, depth, "]")
        return list(items), end
    m = _DESCRIPTOR.match(text, pos)
    if m is None:
        raise TraceValueError(f"bad described value at {pos}")
    name, code, number, symbol = m.groups()
    if symbol is not None:
        descriptor, _ = parse_value(symbol, 0, depth + 1)
    else:
        descriptor = int(code or number, 16 if (code or number).startswith("0x") else 10)
    value, end = parse_value(text, m.end(), depth + 1)
    return described(descriptor, value), end


def described(descriptor, value) -> Described:
    """A known composite's named fields back into the positional list the wire carries."""
    code = code_of(descriptor)
    if isinstance(value, list) and code is not None and code in FIELD_NAMES:
        names = FIELD_NAMES[code]
        out: list = [None] * len(names)
        for item in value:
            if isinstance(item, _Named):
                key = item[0].replace("-", "_")
                if key in names:
                    out[names.index(key)] = item[1]
                    continue
            out.append(item[1] if isinstance(item, _Named) else item)
        while out and out[-1] is None:
            out.pop()
        return Described(descriptor, out)
    if isinstance(value, list):
        value = [item[1] if isinstance(item, _Named) else item for item in value]
    return Described(descriptor, value)
