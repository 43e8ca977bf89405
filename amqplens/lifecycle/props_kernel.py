"""A strict JSON scanner (numba) for the deliveries' properties: ``props.py`` says what it reads and when the
reference reads a text instead. Loaded through ``hotpath.load_compiled`` (the decoder's disk cache).

Each text is walked once: the object's members, the wanted ones read, every other value checked and skipped (JSON
as ``json.loads`` takes it: strings with their escapes and no raw control characters, numbers by the grammar,
true / false / null, arrays and objects to a depth of ``MAX_DEPTH``). Whatever the scanner does not read exactly
as ``json.loads`` would (a wanted key given twice, a key or wanted string with escapes, a wanted text that is not a
string, a top level that is not an object, NaN or Infinity, anything invalid, nesting too deep) marks the text
for the reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MAX_DEPTH = 64
# what a text's scan gives, per text: spans of the three text fields, two integers, two booleans, a flag
# (columns of ``out``): the text fields' start and end (-1: absent or null)
(O_REF, O_T0S, O_T0E, O_T1S, O_T1E, O_T2S, O_T2E, O_I0, O_I1, O_B0, O_B1, O_HEADER) = range(12)
NO_INT = -1  # an integer field absent, null, not an integer or out of 0..2^31-1 (``records._int``)


@njit(cache=True, nogil=True)
def _ws(data, i, end):
    while i < end and (data[i] == 32 or data[i] == 9 or data[i] == 10 or data[i] == 13):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _string(data, i, end):
    """A string at ``data[i] == '"'``: (index after it, escapes, ok)."""
    i += 1
    escapes = False
    while i < end:
        c = data[i]
        if c == 34:
            return i + 1, escapes, True
        if c < 32:
            return i, escapes, False
        if c == 92:
            escapes = True
            if i + 1 >= end:
                return i, escapes, False
            e = data[i + 1]
            if e == 117:  # \uXXXX
                if i + 5 >= end:
                    return i, escapes, False
                for k in range(i + 2, i + 6):
                    h = data[k]
                    if not ((48 <= h <= 57) or (65 <= h <= 70) or (97 <= h <= 102)):
                        return i, escapes, False
                i += 6
                continue
            if e not in (34, 92, 47, 98, 102, 110, 114, 116):
                return i, escapes, False
            i += 2
            continue
        i += 1
    return i, escapes, False


@njit(cache=True, nogil=True)
def _number(data, i, end):
    """A number by JSON's grammar: (index after it, an integer?, its value if an integer in 0..2^31-1 else -1, ok)."""
    start = i
    negative = False
    if data[i] == 45:
        negative = True
        i += 1
    if i >= end or not (48 <= data[i] <= 57):
        return i, False, NO_INT, False
    if data[i] == 48:
        i += 1
        if i < end and 48 <= data[i] <= 57:  # a leading zero
            return i, False, NO_INT, False
    else:
        while i < end and 48 <= data[i] <= 57:
            i += 1
    digits = i - start - (1 if negative else 0)
    integer = True
    if i < end and data[i] == 46:
        integer = False
        i += 1
        if i >= end or not (48 <= data[i] <= 57):
            return i, False, NO_INT, False
        while i < end and 48 <= data[i] <= 57:
            i += 1
    if i < end and (data[i] == 101 or data[i] == 69):
        integer = False
        i += 1
        if i < end and (data[i] == 43 or data[i] == 45):
            i += 1
        if i >= end or not (48 <= data[i] <= 57):
            return i, False, NO_INT, False
        while i < end and 48 <= data[i] <= 57:
            i += 1
    value = NO_INT
    if integer and digits <= 10:
        v = 0
        for k in range(start + (1 if negative else 0), start + (1 if negative else 0) + digits):
            v = v * 10 + (data[k] - 48)
        if negative:
            v = -v
        if 0 <= v < (1 << 31):
            value = v
    return i, integer, value, True


@njit(cache=True, nogil=True)
def _literal(data, i, end):
    """true, false or null: (index after, 1 / 0 / -1, ok)."""
    if i + 4 <= end and data[i] == 116 and data[i + 1] == 114 and data[i + 2] == 117 and data[i + 3] == 101:
        return i + 4, 1, True
    if i + 5 <= end and data[i] == 102 and data[i + 1] == 97 and data[i + 2] == 108 and data[i + 3] == 115 and data[i + 4] == 101:
        return i + 5, 0, True
    if i + 4 <= end and data[i] == 110 and data[i + 1] == 117 and data[i + 2] == 108 and data[i + 3] == 108:
        return i + 4, -1, True
    return i, -1, False


@njit(cache=True, nogil=True)
def _key(data, i, end):
    """A member's key and its colon at ``i``: (index after the colon, ok)."""
    if i >= end or data[i] != 34:
        return i, False
    i, _, ok = _string(data, i, end)
    if not ok:
        return i, False
    i = _ws(data, i, end)
    if i >= end or data[i] != 58:
        return i, False
    return i + 1, True


@njit(cache=True, nogil=True)
def _skip(data, i, end):
    """Any value at ``i``: (index after it, ok)."""
    stack = np.zeros(MAX_DEPTH, np.uint8)  # 1 object, 2 array
    depth = 0
    expect_value = True
    while True:
        i = _ws(data, i, end)
        if i >= end:
            return i, False
        c = data[i]
        if expect_value:
            if c == 123 or c == 91:
                if depth >= MAX_DEPTH:
                    return i, False
                stack[depth] = 1 if c == 123 else 2
                depth += 1
                i = _ws(data, i + 1, end)
                if i < end and ((c == 123 and data[i] == 125) or (c == 91 and data[i] == 93)):  # empty
                    depth -= 1
                    i += 1
                    expect_value = False
                    if depth == 0:
                        return i, True
                    continue
                if c == 123:  # a key, then the value
                    i, ok = _key(data, i, end)
                    if not ok:
                        return i, False
                continue
            if c == 34:
                i, _, ok = _string(data, i, end)
            elif c == 45 or 48 <= c <= 57:
                i, _, _, ok = _number(data, i, end)
            else:
                i, _, ok = _literal(data, i, end)
            if not ok:
                return i, False
            expect_value = False
            if depth == 0:
                return i, True
            continue
        # after a value inside a container: a comma or its end
        top = stack[depth - 1]
        if c == 44:
            i += 1
            if top == 1:
                i, ok = _key(data, _ws(data, i, end), end)
                if not ok:
                    return i, False
            expect_value = True
            continue
        if (top == 1 and c == 125) or (top == 2 and c == 93):
            depth -= 1
            i += 1
            if depth == 0:
                return i, True
            continue
        return i, False


@njit(cache=True, nogil=True)
def _key_is(data, s, e, name) -> bool:
    if e - s != len(name):
        return False
    for k in range(len(name)):
        if data[s + k] != name[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _members(data, i, end, names, kinds, out, row, col_of, seen):
    """The members of an object at ``data[i] == '{'`` whose keys are ``names`` (kinds: 0 text, 1 integer, 2 boolean,
    3 a section: where its value starts, when an object, for the caller): (index after, ok: False marks the text
    for the reference)."""
    i = _ws(data, i + 1, end)
    if i < end and data[i] == 125:
        return i + 1, True
    while True:
        if i >= end or data[i] != 34:
            return i, False
        ks = i + 1
        i, escapes, ok = _string(data, i, end)
        if not ok or escapes:
            return i, False
        ke = i - 1
        i = _ws(data, i, end)
        if i >= end or data[i] != 58:
            return i, False
        i = _ws(data, i + 1, end)
        if i >= end:
            return i, False
        which = -1
        for k in range(len(names)):
            if _key_is(data, ks, ke, names[k]):
                which = k
                break
        if which >= 0:
            if seen[which]:  # a key twice: json.loads keeps the last
                return i, False
            seen[which] = True
        kind = kinds[which] if which >= 0 else -1
        c = data[i]
        if kind == 0:  # a text: a string without escapes, or null
            if c == 34:
                s = i + 1
                i, escapes, ok = _string(data, i, end)
                if not ok or escapes:
                    return i, False
                out[row, col_of[which]] = s
                out[row, col_of[which] + 1] = i - 1
            else:
                i, b, ok = _literal(data, i, end)
                if not ok or b != -1:
                    return i, False
        elif kind == 1:  # an integer in range, else nothing (``records._int``); any value
            if c == 45 or 48 <= c <= 57:
                i, integer, value, ok = _number(data, i, end)
                if not ok:
                    return i, False
                if integer:
                    out[row, col_of[which]] = value
            else:
                i, ok = _skip(data, i, end)
                if not ok:
                    return i, False
        elif kind == 2:  # a boolean or null
            i, b, ok = _literal(data, i, end)
            if not ok:
                return i, False
            out[row, col_of[which]] = b
        elif kind == 3:  # a section: the caller reads it
            if c == 123:
                out[row, col_of[which]] = i
            i, ok = _skip(data, i, end)
            if not ok:
                return i, False
        else:
            i, ok = _skip(data, i, end)
            if not ok:
                return i, False
        i = _ws(data, i, end)
        if i >= end:
            return i, False
        if data[i] == 125:
            return i + 1, True
        if data[i] != 44:
            return i, False
        i = _ws(data, i + 1, end)


@njit(cache=True, nogil=True)
def scan(data, offsets, sections, top_names, top_kinds, top_cols, h_names, h_kinds, h_cols, p_names, p_kinds, p_cols):
    """Every text ``data[offsets[k]:offsets[k+1]]``: its fields into ``out`` (see the module's columns)."""
    n = len(offsets) - 1
    out = np.full((n, 12), -1, np.int64)
    out[:, O_REF] = 0
    for k in range(n):
        start, end = offsets[k], offsets[k + 1]
        i = _ws(data, start, end)
        if i >= end or data[i] != 123:
            out[k, O_REF] = 1
            continue
        seen = np.zeros(len(top_names), np.bool_)
        i, ok = _members(data, i, end, top_names, top_kinds, out, k, top_cols, seen)
        if ok and _ws(data, i, end) != end:  # something after the object
            ok = False
        if ok and sections:
            # the header and properties sections (their value starts, in O_HEADER and O_T0S, when objects)
            h, p = out[k, O_HEADER], out[k, O_T0S]
            out[k, O_T0S] = -1
            out[k, O_HEADER] = 0
            if h >= 0:
                out[k, O_HEADER] = 1
                seen = np.zeros(len(h_names), np.bool_)
                _, ok = _members(data, h, end, h_names, h_kinds, out, k, h_cols, seen)
            if ok and p >= 0:
                seen = np.zeros(len(p_names), np.bool_)
                _, ok = _members(data, p, end, p_names, p_kinds, out, k, p_cols, seen)
        if not ok:
            out[k, :] = -1
            out[k, O_REF] = 1
    return out
