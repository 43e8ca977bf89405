"""The JSON text of a 1.0 frame's columns, compiled: ``arguments_json`` of the walk's hot performatives and the
``properties_json`` of a one-transfer message, as ``composites.to_json`` writes them (compact, keys in their order,
UTF-8 as is), for the values peers put there; anything else is left to the reference (the frame is not hot).

What is rendered:

- ``arguments(...)``: a flow's, transfer's or disposition's fields from the walk's columns (``hot_kernel``: the
  spec's names in its order, absent and null fields left out, a delivery tag as hex, an accepted or released
  state as its described form).
- ``properties(...)``: a message's non-body sections in the order they come (``header`` and ``properties`` as
  field dicts, the annotations, application-properties and footer as maps), then ``"body"``, the body sections'
  names, as ``messages.MessageTracker`` stores them. A value is rendered when it is null, a boolean, an integer of
  any width (timestamps too: milliseconds as a number), a uuid, a binary (hex), or a string or symbol of printable
  ASCII; a map's keys must be strings or symbols, none repeated (a dict keeps one). Not rendered, so the reference
  decodes the message: floats, decimals, chars, lists, arrays and described values among the values, other key
  types, control characters and bytes past ASCII in a string (the reference's escapes and its UTF-8 decoding),
  a section repeated, unknown or over ``messages.MAX_SECTION_BYTES``, a composite with more fields than the spec's.

Output goes to a byte buffer that may be too small: every write past its end is counted, not made, and the caller
renders again into a buffer of the size returned (``hotpath``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from amqplens.decode.v0_9_1.hot_kernel import _be
from amqplens.decode.v1_0.hot_kernel import (
    ACCEPTED, FLOW, K_BINARY, K_BOOL, K_STATE, K_UBYTE, K_UINT, MAX_FIELDS, R_CODE, R_HOT, R_PAYLOAD,
    R_POS, R_SIZE, _extent,
)

HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
MAX_SECTION_BYTES = 1 << 20  # messages.MAX_SECTION_BYTES (a test keeps them equal)
MAX_KEYS = 64  # a map with more pairs is the reference's (its repeated keys are checked pair by pair)
FAIL = np.int64(-1)


@njit(cache=True, nogil=True, inline="always")
def _put(out, o, b):
    if o < len(out):
        out[o] = b
    return o + 1


@njit(cache=True, nogil=True)
def _text(out, o, src, a, b):
    """``src[a:b]`` as is (names, fixed text)."""
    for k in range(a, b):
        o = _put(out, o, src[k])
    return o


@njit(cache=True, nogil=True)
def _unsigned(out, o, v):
    """``v`` (uint64) in decimal."""
    ten = np.uint64(10)
    digits = 1
    t = v
    while t >= ten:
        t //= ten
        digits += 1
    for k in range(digits - 1, -1, -1):
        if o + k < len(out):
            out[o + k] = np.uint8(48 + v % ten)
        v //= ten
    return o + digits


@njit(cache=True, nogil=True)
def _signed(out, o, v):
    """``v`` (int64) in decimal."""
    if v < 0:
        o = _put(out, o, 45)  # "-"
        return _unsigned(out, o, np.uint64(-(v + 1)) + np.uint64(1))
    return _unsigned(out, o, np.uint64(v))


@njit(cache=True, nogil=True)
def _hex(out, o, src, a, b):
    """``src[a:b]`` as a JSON string of hex digits."""
    o = _put(out, o, 34)
    for k in range(a, b):
        o = _put(out, o, HEX[src[k] >> 4])
        o = _put(out, o, HEX[src[k] & 15])
    return _put(out, o, 34)


@njit(cache=True, nogil=True)
def _string(out, o, src, a, b):
    """``src[a:b]`` as a JSON string, or -1 where a byte needs the reference (a control character, past ASCII)."""
    o = _put(out, o, 34)
    for k in range(a, b):
        c = src[k]
        if c < 0x20 or c > 0x7E:
            return FAIL
        if c == 34 or c == 92:  # '"' and '\\' escaped with a backslash
            o = _put(out, o, 92)
        o = _put(out, o, c)
    return _put(out, o, 34)


@njit(cache=True, nogil=True)
def _uuid(out, o, src, a):
    o = _put(out, o, 34)
    for k in range(16):
        if k == 4 or k == 6 or k == 8 or k == 10:
            o = _put(out, o, 45)
        o = _put(out, o, HEX[src[a + k] >> 4])
        o = _put(out, o, HEX[src[a + k] & 15])
    return _put(out, o, 34)


@njit(cache=True, nogil=True)
def _sized(buf, p, e, width):
    """(start, end) of a variable-width value whose size (``width`` bytes) is at ``p``; (-1, -1) past ``e``."""
    if p + width > e:
        return FAIL, FAIL
    start = p + width
    end = start + _be(buf, p, width)
    if end > e:
        return FAIL, FAIL
    return start, end


@njit(cache=True, nogil=True)
def scalar(buf, p, e, out, o):
    """The value encoded at ``p`` (before ``e``) as JSON: ``(position after it, output position)``, position -1 where
    the value is not one this module renders."""
    if p >= e:
        return FAIL, o
    c = buf[p]
    p += 1
    if c == 0x40:
        return p, _text(out, o, NULL, 0, 4)
    if c == 0x41:
        return p, _text(out, o, TRUE, 0, 4)
    if c == 0x42:
        return p, _text(out, o, FALSE, 0, 5)
    if c == 0x43 or c == 0x44:
        return p, _put(out, o, 48)
    width = 0
    signed = False
    if c == 0x56:
        if p >= e or buf[p] > 1:
            return FAIL, o
        return p + 1, (_text(out, o, TRUE, 0, 4) if buf[p] == 1 else _text(out, o, FALSE, 0, 5))
    if c == 0x50 or c == 0x52 or c == 0x53:
        width = 1
    elif c == 0x60:
        width = 2
    elif c == 0x70:
        width = 4
    elif c == 0x80:
        width = 8
    elif c == 0x51 or c == 0x54 or c == 0x55:
        width, signed = 1, True
    elif c == 0x61:
        width, signed = 2, True
    elif c == 0x71:
        width, signed = 4, True
    elif c == 0x81 or c == 0x83:  # long, timestamp
        width, signed = 8, True
    if width:
        if p + width > e:
            return FAIL, o
        v = _be(buf, p, width)
        if signed:
            if width < 8 and v >= np.int64(1) << (8 * width - 1):
                v -= np.int64(1) << (8 * width)
            return p + width, _signed(out, o, v)
        if width == 8:
            return p + width, _unsigned(out, o, np.uint64(v))  # the bits of a ulong past 2**63 as unsigned
        return p + width, _signed(out, o, v)
    if c == 0x98:
        if p + 16 > e:
            return FAIL, o
        return p + 16, _uuid(out, o, buf, p)
    if c == 0xA0 or c == 0xB0 or c == 0xA1 or c == 0xB1 or c == 0xA3 or c == 0xB3:
        a, b = _sized(buf, p, e, 1 if c < 0xB0 else 4)
        if a < 0:
            return FAIL, o
        if c == 0xA0 or c == 0xB0:
            return b, _hex(out, o, buf, a, b)
        o = _string(out, o, buf, a, b)
        return (FAIL if o < 0 else b), o
    return FAIL, o


@njit(cache=True, nogil=True)
def _compound_head(buf, p, e):
    """``(count, first element, end)`` of the list or map whose constructor is at ``p``; count -1 if it is not one
    (or does not fit)."""
    c = buf[p]
    if c == 0x45:
        return np.int64(0), p + 1, p + 1
    if c == 0xC0 or c == 0xC1:
        width = 1
    elif c == 0xD0 or c == 0xD1:
        width = 4
    else:
        return FAIL, p, p
    if p + 1 + 2 * width > e:
        return FAIL, p, p
    size = _be(buf, p + 1, width)
    end = p + 1 + width + size
    if size < width or end > e:
        return FAIL, p, p
    return _be(buf, p + 1 + width, width), p + 1 + 2 * width, end


@njit(cache=True, nogil=True)
def _same(buf, a1, b1, a2, b2):
    if b1 - a1 != b2 - a2:
        return False
    for k in range(b1 - a1):
        if buf[a1 + k] != buf[a2 + k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _map(buf, p, e, out, o, keys):
    """The map at ``p`` as a JSON object: ``(its end, output position)``, end -1 where the reference renders it."""
    if p >= e or (buf[p] != 0xC1 and buf[p] != 0xD1):
        return FAIL, o
    count, q, end = _compound_head(buf, p, e)
    if count < 0 or count % 2 or count > 2 * MAX_KEYS:
        return FAIL, o
    o = _put(out, o, 123)
    for k in range(count // 2):
        if q >= end:
            return FAIL, o
        c = buf[q]
        if c != 0xA1 and c != 0xA3 and c != 0xB1 and c != 0xB3:
            return FAIL, o
        a, b = _sized(buf, q + 1, end, 1 if c < 0xB0 else 4)
        if a < 0:
            return FAIL, o
        for j in range(k):  # a key seen before (a string and a symbol of the same text are one key)
            if _same(buf, keys[j, 0], keys[j, 1], a, b):
                return FAIL, o
        keys[k, 0], keys[k, 1] = a, b
        if k:
            o = _put(out, o, 44)
        o = _string(out, o, buf, a, b)
        if o < 0:
            return FAIL, o
        o = _put(out, o, 58)
        q, o = scalar(buf, b, end, out, o)
        if q < 0:
            return FAIL, o
    if q != end:
        return FAIL, o
    return end, _put(out, o, 125)


@njit(cache=True, nogil=True)
def _fields(buf, p, e, out, o, names, name_at, first, count_names):
    """The composite list at ``p`` as a field dict (names ``names[name_at[first + i]:name_at[first + i + 1]]``, null
    elements left out): ``(its end, output position)``, end -1 where the reference renders it."""
    if p >= e:
        return FAIL, o
    count, q, end = _compound_head(buf, p, e)
    if count < 0 or (buf[p] != 0x45 and buf[p] != 0xC0 and buf[p] != 0xD0) or count > count_names:
        return FAIL, o
    o = _put(out, o, 123)
    written = 0
    for k in range(count):
        if q >= end:
            return FAIL, o
        if buf[q] == 0x40:
            q += 1
            continue
        if written:
            o = _put(out, o, 44)
        o = _put(out, o, 34)
        o = _text(out, o, names, name_at[first + k], name_at[first + k + 1])
        o = _put(out, o, 34)
        o = _put(out, o, 58)
        q, o = scalar(buf, q, end, out, o)
        if q < 0:
            return FAIL, o
        written += 1
    if q != end:
        return FAIL, o
    return end, _put(out, o, 125)


@njit(cache=True, nogil=True)
def properties(buf, a, b, out, o, names, name_at, n_header, n_props, keys):
    """The sections of the one-transfer message whose payload is ``buf[a:b]`` as ``properties_json``: ``(output
    position after it, 1)``, ``(o, 0)`` for a message without sections (null), ``(-1, 0)`` where the reference
    renders it. ``names[name_at[i]:name_at[i + 1]]``: the section keys (``i`` 0-8: codes 0x70-0x78), then the
    header's ``n_header`` field names and the properties' ``n_props``; ``keys``: room for a map's key spans."""
    start = o
    o = _put(out, o, 123)
    seen = 0
    bodies = 0
    p = a
    written = 0
    while p < b:
        if p + 3 > b or buf[p] != 0x00 or buf[p + 1] != 0x53:
            return FAIL, 0
        code = np.int64(buf[p + 2])
        if code < 0x70 or code > 0x78:
            return FAIL, 0
        q = _extent(buf, p + 3, b)
        if q < 0:
            return FAIL, 0
        if code >= 0x75 and code <= 0x77:
            bodies += 1
            p = q
            continue
        bit = np.int64(1) << (code - 0x70)
        if seen & bit or q - p > MAX_SECTION_BYTES:
            return FAIL, 0
        seen |= bit
        if written:
            o = _put(out, o, 44)
        o = _put(out, o, 34)
        o = _text(out, o, names, name_at[code - 0x70], name_at[code - 0x70 + 1])
        o = _put(out, o, 34)
        o = _put(out, o, 58)
        if code == 0x70:
            end, o = _fields(buf, p + 3, q, out, o, names, name_at, 9, n_header)
        elif code == 0x73:
            end, o = _fields(buf, p + 3, q, out, o, names, name_at, 9 + n_header, n_props)
        else:
            end, o = _map(buf, p + 3, q, out, o, keys)
        if end != q:
            return FAIL, 0
        written += 1
        p = q
    if bodies:  # "body": the body sections' names in their order, after the other sections (the tracker adds it last)
        if written:
            o = _put(out, o, 44)
        o = _text(out, o, BODY_KEY, 0, len(BODY_KEY))
        p = a
        k = 0
        while p < b:
            code = np.int64(buf[p + 2])
            if code >= 0x75 and code <= 0x77:
                if k:
                    o = _put(out, o, 44)
                o = _body_name(out, o, code)
                k += 1
            p = _extent(buf, p + 3, b)
        o = _put(out, o, 93)
        written += 1
    if not written:
        return start, 0
    return _put(out, o, 125), 1


@njit(cache=True, nogil=True)
def _body_name(out, o, code):
    if code == 0x75:
        return _text(out, o, DATA_NAME, 0, len(DATA_NAME))
    if code == 0x76:
        return _text(out, o, SEQUENCE_NAME, 0, len(SEQUENCE_NAME))
    return _text(out, o, VALUE_NAME, 0, len(VALUE_NAME))


NULL, TRUE, FALSE = (np.frombuffer(t, np.uint8) for t in (b"null", b"true", b"false"))
BODY_KEY = np.frombuffer(b'"body":[', np.uint8)
DATA_NAME, SEQUENCE_NAME, VALUE_NAME = (np.frombuffer(t, np.uint8) for t in (b'"data"', b'"amqp-sequence"', b'"amqp-value"'))


@njit(cache=True, nogil=True)
def arguments(buf, rec, i, fields, names, name_at, out, o):
    """Row ``i``'s performative fields (the walk's columns, ``fields``: ``hot_kernel.PLAN``) as ``arguments_json``:
    the names ``names[name_at[k]:name_at[k + 1]]`` for field ``k`` of performative ``code - FLOW`` at
    ``k = (code - FLOW) * MAX_FIELDS + field``; an accepted or released state's text at ``3 * MAX_FIELDS`` and one
    after."""
    code = rec[i, R_CODE]
    plan = fields[code - FLOW]
    o = _put(out, o, 123)
    written = 0
    for k in range(MAX_FIELDS):
        kind, column = plan[k, 0], plan[k, 1]
        if kind < 0:
            break
        if column < 0 or rec[i, column] < 0:
            continue
        if written:
            o = _put(out, o, 44)
        name = (code - FLOW) * MAX_FIELDS + k
        o = _put(out, o, 34)
        o = _text(out, o, names, name_at[name], name_at[name + 1])
        o = _put(out, o, 34)
        o = _put(out, o, 58)
        v = rec[i, column]
        if kind == K_UINT or kind == K_UBYTE:
            o = _signed(out, o, v)
        elif kind == K_BOOL:
            o = _text(out, o, TRUE, 0, 4) if v == 1 else _text(out, o, FALSE, 0, 5)
        elif kind == K_BINARY:
            o = _hex(out, o, buf, v, v + rec[i, column + 1])
        elif kind == K_STATE:
            state = 3 * MAX_FIELDS + (0 if v == ACCEPTED else 1)
            o = _text(out, o, names, name_at[state], name_at[state + 1])
        written += 1
    return _put(out, o, 125)


@njit(cache=True, nogil=True)
def render(buf, rec, fields, arg_names, arg_at, names, name_at, n_header, n_props, whole, args, args_off, props,
           props_off, props_set):
    """Every hot row's ``arguments_json`` into ``args`` (row ``i``'s text ``args[args_off[i]:args_off[i + 1]]``), and for
    each transfer with ``whole[i]`` (a one-transfer message whose body ``hot_kernel.bodies`` read) its
    ``properties_json`` into ``props`` (``props_set[i]`` 1; 0 for a message without sections), ``whole[i]`` set to 0
    where the sections are the reference's. Returns the bytes each output needs: where one is more than its
    buffer holds, the caller renders again into buffers that size (what was rendered is not kept)."""
    keys = np.empty((MAX_KEYS, 2), np.int64)
    o = np.int64(0)
    q = np.int64(0)
    args_off[0] = 0
    props_off[0] = 0
    for i in range(len(rec)):
        if rec[i, R_HOT] == 1:
            o = arguments(buf, rec, i, fields, arg_names, arg_at, args, o)
        args_off[i + 1] = o
        props_set[i] = 0
        if whole[i]:
            end, set_ = properties(buf, rec[i, R_PAYLOAD], rec[i, R_POS] + rec[i, R_SIZE], props, q, names, name_at,
                                   n_header, n_props, keys)
            if end < 0:
                whole[i] = 0
            else:
                q = end
                props_set[i] = set_
        props_off[i + 1] = q
    return o, q

