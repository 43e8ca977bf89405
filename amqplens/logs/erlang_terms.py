"""Just enough of Erlang's printed term syntax for the tracing plugin's text log.

It prints routing keys as ``[<<"key">>]`` and message properties as an AMQP
field table in Erlang form: ``[{<<"message_id">>,longstr,<<"m0">>},
{<<"headers">>,table,[{<<"seq">>,signedint,0}]}]``. ``parse_term`` reads
lists, tuples, binaries (``<<"text">>`` with Erlang escapes, or ``<<1,2,3>>``),
strings, atoms, integers and floats; ``proplist`` turns a field table into a
dict.
"""

from __future__ import annotations

from typing import Any

import re

MAX_DEPTH = 64  # tables nest; a deeper term is not a real header table

_TOKEN = re.compile(r"""\s*(?:(<<)|(>>)|([\[\]{},])|("(?:[^"\\]|\\.)*")|('(?:[^'\\]|\\.)*')|(-?\d+\.\d+(?:[eE][-+]?\d+)?)|(-?\d+)|([a-z][A-Za-z0-9_@]*))""", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "s": " ", "e": "\x1b", "v": "\v", "b": "\b", "f": "\f", "d": "\x7f"}


class TermError(ValueError):
    pass


def parse_term(text: str):
    value, pos = _term(text, 0, 0)
    if text[pos:].strip():
        raise TermError(f"text after the term at {pos}: {text[pos:pos + 40]!r}")
    return value


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        m = re.match(r"[0-7]{1,3}", body[i + 1 :])
        if m:
            out.append(chr(int(m.group(0), 8)))
            i += 1 + len(m.group(0))
        else:
            nxt = body[i + 1 : i + 2]
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _token(text: str, pos: int):
    m = _TOKEN.match(text, pos)
    if m is None or m.end() == pos:
        raise TermError(f"unexpected text at {pos}: {text[pos:pos + 40]!r}")
    return m, m.end()


def _term(text: str, pos: int, depth: int):
    if depth > MAX_DEPTH:
        raise TermError("term nested too deep")
    m, pos = _token(text, pos)
    if m.group(1):  # binary: <<"text">>, <<1,2,3>> or both mixed, as Erlang prints them
        data = bytearray()
        while True:
            t, pos = _token(text, pos)
            if t.group(2):
                return bytes(data), pos
            if t.group(4):
                data += _unescape(t.group(4)[1:-1]).encode("latin-1", "replace")
            elif t.group(7):
                data.append(int(t.group(7)) & 0xFF)
            elif t.group(3) != ",":
                raise TermError(f"bad element in a binary at {pos}")
    if m.group(3) in ("[", "{"):
        close = "]" if m.group(3) == "[" else "}"
        items: list[Any] = []
        while True:
            t, after = _token(text, pos)
            if t.group(3) == close:
                return (items if close == "]" else tuple(items)), after
            if items:
                if t.group(3) != ",":
                    raise TermError(f"expected ',' at {pos}")
                pos = after
            value, pos = _term(text, pos, depth + 1)
            items.append(value)
    if m.group(4):
        return _unescape(m.group(4)[1:-1]), pos
    if m.group(5) or m.group(8):
        return ("atom", (m.group(5) or m.group(8)).strip("'")), pos
    if m.group(6):
        return float(m.group(6)), pos
    if m.group(7):
        return int(m.group(7)), pos
    raise TermError(f"unexpected {m.group(0)!r} at {pos}")


def _plain(type_name: str, value, depth: int):
    if type_name == "table":
        return proplist(value, depth + 1)
    if type_name == "array":
        return [_plain(_atom(t), v, depth + 1) for t, v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "atom":
        return value[1]
    return value


def _atom(v) -> str:
    return v[1] if isinstance(v, tuple) and len(v) == 2 and v[0] == "atom" else str(v)


def proplist(term, depth: int = 0) -> dict:
    """An AMQP field table printed as ``[{Name, Type, Value}, ...]`` -> ``{name: value}``."""
    if depth > MAX_DEPTH:
        raise TermError("table nested too deep")
    if not isinstance(term, list):
        raise TermError("a field table is a list")
    out = {}
    for item in term:
        if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], bytes)):
            raise TermError(f"not a {{Name, Type, Value}} field: {item!r}"[:200])
        out[item[0].decode("utf-8", "replace")] = _plain(_atom(item[1]), item[2], depth)
    return out
