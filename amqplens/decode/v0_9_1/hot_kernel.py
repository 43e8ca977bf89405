"""The numba-compiled frame walk of the 0-9-1 hot path (imported only through ``hotpath.load_kernel``).

``walk`` cuts a direction's buffer into frames, as ``DirectionFramer._synced`` does, and
for the frames of the hot methods, content headers, bodies and heartbeats it reads the
frame columns straight into arrays. It proves each hot frame well formed the way the
reference decoder would see it: arguments that fill the payload exactly, text that JSON
keeps as it is (printable ASCII), integers a signed 64-bit column holds. Any frame it
cannot prove so is marked for the reference decoder; a frame the framing loop would not
accept (too large, cut short, a bad frame-end, an unknown type) or a connection-class
method (the facts and the dialect follow those) ends the walk, and the Python loop takes
over from there. The tables it reads are built by ``hotpath.HotTables``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# record columns (one row per frame the walk accepted)
R_POS, R_TYPE, R_CHANNEL, R_SIZE, R_HOT, R_ROW = range(6)
N_REC = 6
# hot kinds (R_HOT); 0: the reference decodes the frame
K_METHOD, K_HEADER, K_BODY, K_HEARTBEAT = 1, 2, 3, 4
# hot row columns (HotBuilder.vals)
V_OFFSET, V_KIND, V_CHANNEL, V_SIZE, V_CLASS, V_METHOD, V_HOT_METHOD, V_BODY_SIZE = range(8)
V_BOOL_SET, V_BOOL_VALUE, V_STR_SET = 8, 9, 10  # bit sets: bools (and ints from bit 32), bool values, strings
V_INTS = 11  # first of the integer promoted columns
N_INTS = 4
N_VALS = V_INTS + N_INTS
# the static tables in one array (HotTables.meta)
M_KINDS, M_METHODS, M_STOP_CLASS, M_HEADER_CLASS, M_NPROPS, M_KEY_ROOM, M_NFIELDS = 0, 256, 512, 513, 514, 515, 516
# argument and property operations (HotTables)
OP_OCTET, OP_SHORT, OP_LONG, OP_LONGLONG, OP_SHORTSTR, OP_BIT, OP_TABLE, OP_FLAG = 1, 2, 3, 4, 5, 6, 7, 8
# plan[h, f, :] fields
F_OP, F_BIT, F_SLOT, F_KEY, F_KEY_END = range(5)
# string columns (HotBuilder.sdata rows): 0 arguments_json, 1 properties_json, 2.. promoted text columns
S_ARGS, S_PROPS, S_PROMOTED = 0, 1, 2
N_STR = 6
FRAME_END = 0xCE
JSON_PER_BYTE = 40  # at most 40 JSON octets per payload octet: eight bits of ',"name":false'
MAX_TABLE_NAMES = 64  # names of one headers table the walk compares for repeats; a longer table goes to the reference


@njit(cache=True, nogil=True, inline="always")
def _be(buf, at, width):
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[at + i])
    return v


@njit(cache=True, nogil=True, inline="always")
def _put(out, o, src, a, b):
    for i in range(a, b):
        out[o] = src[i]
        o += 1
    return o


@njit(cache=True, nogil=True, inline="always")
def _put_int(out, o, v):
    if v == 0:
        out[o] = 48
        return o + 1
    digits = 0
    t = v
    while t > 0:
        digits += 1
        t //= 10
    for i in range(digits - 1, -1, -1):
        out[o + i] = 48 + v % 10
        v //= 10
    return o + digits


@njit(cache=True, nogil=True, inline="always")
def _put_signed(out, o, v):
    if v < 0:
        out[o] = 45
        return _put_int(out, o + 1, -v)
    return _put_int(out, o, v)


@njit(cache=True, nogil=True, inline="always")
def _signed(v, bits):
    """A ``bits``-wide big-endian value read as unsigned, as two's complement."""
    return v - (np.int64(1) << bits) if v >> (bits - 1) else v


@njit(cache=True, nogil=True, inline="always")
def _put_shortstr(out, o, buf, p, end):
    """A shortstr at ``p`` written into ``out`` at ``o`` as a JSON string: (its text's start, its end, the new ``o``);
    end -1 when it runs past ``end`` or is not plain text (the Python decoder then reads the frame)."""
    if p >= end:
        return 0, -1, o
    a = p + 1
    b = a + buf[p]
    if b > end or not _plain_text(buf, a, b):
        return 0, -1, o
    out[o] = 34
    o = _put(out, o + 1, buf, a, b)
    out[o] = 34
    return a, b, o + 1


@njit(cache=True, nogil=True, inline="always")
def _put_bool(out, o, v):
    if v:
        out[o], out[o + 1], out[o + 2], out[o + 3] = 116, 114, 117, 101
        return o + 4
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 102, 97, 108, 115, 101
    return o + 5


@njit(cache=True, nogil=True, inline="always")
def _plain_text(buf, a, b):
    """Whether buf[a:b] is text JSON writes as it is (printable ASCII, no quote or backslash)."""
    for i in range(a, b):
        c = buf[i]
        if c < 0x20 or c > 0x7E or c == 0x22 or c == 0x5C:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _method(buf, p, end, plan, nfields, keys, vals, sdata, so):
    """Arguments of a hot method from p to end into ``vals`` and the JSON/text outputs; False: not proven."""
    sbuf = sdata[S_ARGS]
    js = so[S_ARGS]
    octet = 0
    for f in range(nfields):
        op = plan[f, F_OP]
        js = _put(sbuf, js, keys, plan[f, F_KEY], plan[f, F_KEY_END])
        slot = plan[f, F_SLOT]
        if op == OP_BIT:
            if plan[f, F_BIT] == 0:
                if p >= end:
                    return False
                octet = buf[p]
                p += 1
            bit = (octet >> plan[f, F_BIT]) & 1
            js = _put_bool(sbuf, js, bit)
            if slot >= 0:
                vals[V_BOOL_SET] |= 1 << slot
                vals[V_BOOL_VALUE] |= bit << slot
        elif op == OP_SHORTSTR:
            a, b, js = _put_shortstr(sbuf, js, buf, p, end)
            if b < 0:
                return False
            if slot >= 0:
                s = S_PROMOTED + slot
                so[s] = _put(sdata[s], so[s], buf, a, b)
                vals[V_STR_SET] |= 1 << s
            p = b
        else:
            width = 1 if op == OP_OCTET else 2 if op == OP_SHORT else 4 if op == OP_LONG else 8
            if p + width > end or (width == 8 and buf[p] >= 0x80):
                return False
            v = _be(buf, p, width)
            p += width
            js = _put_int(sbuf, js, v)
            if slot >= 0:
                vals[V_INTS + slot] = v
                vals[V_BOOL_SET] |= 1 << (32 + slot)
    if p != end:
        return False
    sbuf[js] = 125 if nfields else 123  # "{}" for a method without arguments
    if not nfields:
        sbuf[js + 1] = 125
        js += 1
    so[S_ARGS] = js + 1
    vals[V_STR_SET] |= 1 << S_ARGS
    return True


@njit(cache=True, nogil=True, inline="always")
def _table(buf, p, end, sbuf, js):
    """A flat field table at p (its length first) as JSON at js: ``(new p, new js)``, p -1 when not proven.

    Proven: names JSON writes as they are, each once (the reference keeps the first of duplicates),
    values of the letters both readings share and that are not nested: S t b B U u I i L T V."""
    if p + 4 > end:
        return -1, js
    tend = p + 4 + _be(buf, p, 4)
    if tend > end:
        return -1, js
    q = p + 4
    names = np.empty(MAX_TABLE_NAMES, np.int64)
    count = 0
    sbuf[js] = 123
    js += 1
    while q < tend:
        a = q + 1
        b = a + buf[q]
        if b >= tend or count == MAX_TABLE_NAMES or not _plain_text(buf, a, b):
            return -1, js
        for k in range(count):  # a repeated name: the reference keeps the first
            c = names[k]
            if buf[c] == b - a:
                same = True
                for i in range(b - a):
                    if buf[c + 1 + i] != buf[a + i]:
                        same = False
                        break
                if same:
                    return -1, js
        names[count] = q
        if count:
            sbuf[js] = 44
            js += 1
        count += 1
        sbuf[js] = 34
        js = _put(sbuf, js + 1, buf, a, b)
        sbuf[js], sbuf[js + 1] = 34, 58
        js += 2
        letter = buf[b]
        q = b + 1
        width = 1 if letter in (116, 98, 66) else 2 if letter in (85, 117) else 4 if letter in (73, 105, 83) else 8 if letter in (76, 84) else 0
        if letter == 86:  # V: void
            sbuf[js], sbuf[js + 1], sbuf[js + 2], sbuf[js + 3] = 110, 117, 108, 108
            js += 4
            continue
        if width == 0 or q + width > tend:
            return -1, js
        v = _be(buf, q, width)
        q += width
        if letter == 83:  # S: long string
            e = q + v
            if e > tend or not _plain_text(buf, q, e):
                return -1, js
            sbuf[js] = 34
            js = _put(sbuf, js + 1, buf, q, e)
            sbuf[js] = 34
            js += 1
            q = e
        elif letter == 116:  # t: bool
            js = _put_bool(sbuf, js, v != 0)
        elif letter == 98 or letter == 85 or letter == 73:  # b U I: signed
            js = _put_signed(sbuf, js, _signed(v, 8 * width))
        elif letter == 76 or letter == 84:  # L, T: 64-bit; a value with the top bit set goes to the reference
            if buf[q - 8] >= 0x80:
                return -1, js
            js = _put_int(sbuf, js, v)
        else:  # B u i: unsigned
            js = _put_int(sbuf, js, v)
    sbuf[js] = 125
    return tend, js + 1


@njit(cache=True, nogil=True, inline="always")
def _properties(buf, p, end, props, nprops, keys, sdata, so):
    """The properties of a content header from p (its first flags word) to end into the JSON output."""
    if p + 2 > end:
        return False
    flags = _be(buf, p, 2)
    p += 2
    if flags & 1:  # a second flags word: the reference
        return False
    sbuf = sdata[S_PROPS]
    js = so[S_PROPS]
    sbuf[js] = 123
    js += 1
    first = True
    for b in range(15):
        if not (flags >> (15 - b)) & 1:
            continue
        if b >= nprops:
            return False
        op = props[b, F_OP]
        if not first:
            sbuf[js] = 44
            js += 1
        first = False
        js = _put(sbuf, js, keys, props[b, F_KEY], props[b, F_KEY_END])
        if op == OP_FLAG:
            js = _put_bool(sbuf, js, 1)
        elif op == OP_SHORTSTR:
            _, e, js = _put_shortstr(sbuf, js, buf, p, end)
            if e < 0:
                return False
            p = e
        elif op == OP_TABLE:
            p, js = _table(buf, p, end, sbuf, js)
            if p < 0:
                return False
        elif op == OP_OCTET or op == OP_SHORT or op == OP_LONG or op == OP_LONGLONG:
            width = 1 if op == OP_OCTET else 2 if op == OP_SHORT else 4 if op == OP_LONG else 8
            if p + width > end or (width == 8 and buf[p] >= 0x80):
                return False
            js = _put_int(sbuf, js, _be(buf, p, width))
            p += width
        else:
            return False
    if p != end:
        return False
    sbuf[js] = 125
    so[S_PROPS] = js + 1
    return True


@njit(cache=True, nogil=True, inline="always")
def _frames(buf, pos, n, limit, meta):
    """How many frames the walk accepts from pos, and the string room their methods and headers may need."""
    count = 0
    room = 0
    while n - pos >= 7:
        ftype = buf[pos]
        size = _be(buf, pos + 3, 4)
        end = pos + size + 8
        kind = meta[M_KINDS + ftype]
        if size > limit or end > n or buf[end - 1] != FRAME_END or kind < 0:
            break
        if kind == K_METHOD and size >= 4 and _be(buf, pos + 7, 2) == meta[M_STOP_CLASS]:
            break
        if kind == K_METHOD or kind == K_HEADER:
            room += meta[M_KEY_ROOM] + JSON_PER_BYTE * size
        count += 1
        pos = end
    return count, room


@njit(cache=True, nogil=True)
def walk(buf, pos, n, base, limit, meta, plan, props, keys, vals, sdata, soff, rows):
    """``(records, rows, end, rows needed, string bytes needed)`` for the frames from ``pos``.

    Hot rows are written into ``vals``/``sdata``/``soff`` from row ``rows`` on; when they do not
    fit, nothing is written, the records are empty and the two needs say how much room to make.
    ``meta[M_KINDS + type]``: hot kind, 0 (the reference decodes the frame) or -1 (not a type of
    the dialect: the walk ends); ``meta[M_METHODS + method id]``: hot method or -1. ``end``:
    where the Python loop goes on.
    """
    count, room = _frames(buf, pos, n, limit, meta)
    used = 0
    for s in range(N_STR):
        used = max(used, soff[s, rows])
    if rows + count > vals.shape[0] or used + room > sdata.shape[1]:
        return np.empty((0, N_REC), np.int64), rows, pos, rows + count, used + room
    rec = np.empty((count, N_REC), np.int64)
    header_class = meta[M_HEADER_CLASS]
    nprops = meta[M_NPROPS]
    so = soff[:, rows].copy()
    for i in range(count):
        ftype = buf[pos]
        channel = _be(buf, pos + 1, 2)
        size = _be(buf, pos + 3, 4)
        rec[i, R_POS], rec[i, R_TYPE], rec[i, R_CHANNEL], rec[i, R_SIZE] = pos, ftype, channel, size
        kind = meta[M_KINDS + ftype]
        a, end = pos + 7, pos + 7 + size
        v = vals[rows]
        v[:] = 0
        ok = False
        if kind == K_METHOD and channel != 0 and size >= 4 and _be(buf, a, 2) == header_class:
            mid = _be(buf, a + 2, 2)
            h = meta[M_METHODS + mid] if mid < 256 else -1
            if h >= 0:
                saved = so.copy()
                v[V_CLASS], v[V_METHOD], v[V_HOT_METHOD] = header_class, mid, h
                ok = _method(buf, a + 4, end, plan[h], meta[M_NFIELDS + h], keys, v, sdata, so)
                if not ok:
                    so[:] = saved
        elif kind == K_HEADER and channel != 0 and size >= 14 and _be(buf, a, 2) == header_class:
            if buf[a + 4] < 0x80:
                v[V_CLASS], v[V_BODY_SIZE] = header_class, _be(buf, a + 4, 8)
                saved = so[S_PROPS]
                ok = _properties(buf, a + 12, end, props, nprops, keys, sdata, so)
                if ok:
                    v[V_STR_SET] = 1 << S_PROPS
                else:
                    so[S_PROPS] = saved
        elif kind == K_BODY and channel != 0:
            ok = True
        elif kind == K_HEARTBEAT and channel == 0 and size == 0:
            ok = True
        if ok:
            v[V_OFFSET], v[V_KIND], v[V_CHANNEL], v[V_SIZE] = base + pos, kind, channel, size + 8
            rec[i, R_HOT], rec[i, R_ROW] = kind, rows
            rows += 1
            for s in range(N_STR):
                soff[s, rows] = so[s]
        else:
            rec[i, R_HOT], rec[i, R_ROW] = 0, -1
        pos = end + 1  # past the frame-end
    return rec, rows, pos, 0, 0


@njit(cache=True, nogil=True)
def window_ok(buf, n, limit, kinds, stop_class):
    """Where in ``buf[:n]`` (a direction's bytes from a frame boundary) the first frame starts that may not be decoded
    ahead of the other direction's (``n`` when none): one the framing loop would not accept or the walk does not know
    (a kind that is not hot in ``kinds``, more than ``limit`` payload bytes, no frame-end), a method shorter than its
    ids, or one of class ``stop_class`` (the connection class, whose facts the other direction reads). A frame cut
    short at the end is the next window's."""
    pos = 0
    while n - pos >= 7:
        kind = kinds[buf[pos]]
        size = _be(buf, pos + 3, 4)
        if kind <= 0 or size > limit:
            return pos
        end = pos + size + 8
        if end > n:
            return n
        if buf[end - 1] != FRAME_END:
            return pos
        if kind == K_METHOD and (size < 4 or _be(buf, pos + 7, 2) == stop_class):
            return pos
        pos = end
    return n
