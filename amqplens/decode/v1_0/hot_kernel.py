"""AMQP 1.0's frame walk compiled (issue 32 for 1.0): the walk ``hotpath`` runs over a direction's bytes.

``walk`` cuts a direction's in-order bytes into frames as ``framing.DirectionFramer._synced`` does (size, doff,
type, channel), stopping where that loop would not cut a frame: fewer than 8 bytes left, a protocol header, a
header ``framing.header_problem`` rejects, a frame running past the buffer. Of the three performatives a 1.0
connection under load is made of (transfer, disposition, flow) it reads the fields into integer columns, for the
encodings peers use for them: uint (0x70, 0x52, 0x43) and ulong (0x80, 0x53, 0x44), boolean (0x41, 0x42, 0x56),
ubyte (0x50), binary (0xa0, 0xb0), the list forms (0x45, 0xc0, 0xd0) and, as a delivery state, an accepted or
released outcome (an empty described list). A frame it cannot read so (any other performative, another encoding,
fields past the spec's, bytes after a flow or disposition, a transfer without a handle) has ``R_HOT`` 0: the
reference decoder (``stream.Amqp10StreamDecoder``) would decode it. ``sections`` walks a one-transfer message's
payload (Part 3 §3.2) to its body, hashed with the 0-9-1 content pass's SHA-256 (``content_kernel``): the bytes
of each data section's binary, the encoded value of an amqp-sequence or amqp-value section (``messages.py``).
``window_ok`` finds where a direction's held bytes stop being safe to decode ahead of the other (``ahead``).

The reference is the Python decoder: ``tests/v1_0/test_hot_kernel.py`` compares every column with its rows on the
1.0 fixtures, generated streams and mutations of them; ``python -m tests.v1_0.bench_decode walk`` measures it
(docs/performance.md, "AMQP 1.0 under load").
"""

from __future__ import annotations

import numpy as np
from numba import njit

from amqplens.decode.v0_9_1.content_kernel import _H0, _final, _update
from amqplens.decode.v0_9_1.hot_kernel import _be

# frame columns (rec[i, :])
R_POS, R_SIZE, R_DOFF, R_TYPE, R_CHANNEL, R_CODE, R_HOT, R_PAYLOAD = range(8)
# the hot performatives' fields (-1: absent or null; booleans 0 / 1)
(F_HANDLE, F_DELIVERY_ID, F_TAG_AT, F_TAG_LEN, F_FORMAT, F_SETTLED, F_MORE, F_RCV_SETTLE, F_STATE, F_RESUME,
 F_ABORTED, F_BATCHABLE, F_ROLE, F_FIRST, F_LAST, F_NEXT_IN, F_IN_WINDOW, F_NEXT_OUT, F_OUT_WINDOW, F_COUNT,
 F_CREDIT, F_AVAILABLE, F_DRAIN, F_ECHO) = range(8, 32)
N_REC = 32
FLOW, TRANSFER, DISPOSITION = 0x13, 0x14, 0x15
ACCEPTED, RELEASED = 0x24, 0x26
DATA, AMQP_SEQUENCE, AMQP_VALUE = 0x75, 0x76, 0x77
# value kinds of a field
K_UINT, K_BOOL, K_UBYTE, K_BINARY, K_STATE, K_NULL_ONLY = range(6)
# each hot performative's fields in the spec's order: (kind, column)
_FIELDS = {
    FLOW: ((K_UINT, F_NEXT_IN), (K_UINT, F_IN_WINDOW), (K_UINT, F_NEXT_OUT), (K_UINT, F_OUT_WINDOW),
           (K_UINT, F_HANDLE), (K_UINT, F_COUNT), (K_UINT, F_CREDIT), (K_UINT, F_AVAILABLE), (K_BOOL, F_DRAIN),
           (K_BOOL, F_ECHO), (K_NULL_ONLY, -1)),
    TRANSFER: ((K_UINT, F_HANDLE), (K_UINT, F_DELIVERY_ID), (K_BINARY, F_TAG_AT), (K_UINT, F_FORMAT),
               (K_BOOL, F_SETTLED), (K_BOOL, F_MORE), (K_UBYTE, F_RCV_SETTLE), (K_STATE, F_STATE), (K_BOOL, F_RESUME),
               (K_BOOL, F_ABORTED), (K_BOOL, F_BATCHABLE)),
    DISPOSITION: ((K_BOOL, F_ROLE), (K_UINT, F_FIRST), (K_UINT, F_LAST), (K_BOOL, F_SETTLED), (K_STATE, F_STATE),
                  (K_BOOL, F_BATCHABLE)),
}  # fmt: skip
MAX_FIELDS = 11
# the width of a value after its constructor, by the constructor's high nibble (Part 1 §1.2.2 subcategories):
# fixed widths, -1 / -4 a 1- / 4-byte size first (variable, compound, array), -5 no such constructor
_WIDTH = np.array([-5, -5, -5, -5, 0, 1, 2, 4, 8, 16, -1, -4, -1, -4, -1, -4], np.int64)


def plan() -> np.ndarray:
    """``_FIELDS`` as the array the walk reads: ``plan[code - FLOW, i] = (kind, column)``, kind -1 past the last."""
    out = np.full((3, MAX_FIELDS, 2), -1, np.int64)
    for code, fields in _FIELDS.items():
        for i, (kind, column) in enumerate(fields):
            out[code - FLOW, i] = kind, column
    return out


@njit(cache=True, nogil=True)
def _value(buf, p, e, kind, rec, i, column):
    """Read one field of ``kind`` at ``p`` (before ``e``) into ``rec[i, column]``: the position after it, or -1 where
    the walk does not take the encoding (the reference decodes the frame)."""
    if p >= e:
        return -1
    c = buf[p]
    if c == 0x40:  # null: the column stays -1
        return p + 1
    if kind == K_UINT:
        if c == 0x43 or c == 0x44:
            rec[i, column] = 0
            return p + 1
        if c == 0x52 or c == 0x53:
            if p + 2 > e:
                return -1
            rec[i, column] = buf[p + 1]
            return p + 2
        if c == 0x70:
            if p + 5 > e:
                return -1
            rec[i, column] = _be(buf, p + 1, 4)
            return p + 5
        if c == 0x80:
            if p + 9 > e:
                return -1
            v = _be(buf, p + 1, 8)
            if v < 0:  # above a signed 64-bit column: the reference keeps it in arguments_json only
                return -1
            rec[i, column] = v
            return p + 9
        return -1
    if kind == K_BOOL:
        if c == 0x41 or c == 0x42:
            rec[i, column] = 1 if c == 0x41 else 0
            return p + 1
        if c == 0x56 and p + 2 <= e and buf[p + 1] <= 1:
            rec[i, column] = buf[p + 1]
            return p + 2
        return -1
    if kind == K_UBYTE:
        if c == 0x50 and p + 2 <= e and buf[p + 1] <= 1:  # receiver-settle-mode: first (0) or second (1)
            rec[i, column] = buf[p + 1]
            return p + 2
        return -1
    if kind == K_BINARY:
        if c == 0xA0 and p + 2 <= e:
            n, at = np.int64(buf[p + 1]), p + 2
        elif c == 0xB0 and p + 5 <= e:
            n, at = _be(buf, p + 1, 4), p + 5
        else:
            return -1
        if at + n > e:
            return -1
        rec[i, column] = at
        rec[i, column + 1] = n
        return at + n
    if kind == K_STATE:  # accepted or released: 0x00 0x53 code, an empty list
        if c != 0x00 or p + 4 > e or buf[p + 1] != 0x53 or (buf[p + 2] != ACCEPTED and buf[p + 2] != RELEASED):
            return -1
        if buf[p + 3] == 0x45:
            end = p + 4
        elif buf[p + 3] == 0xC0 and p + 6 <= e and buf[p + 4] == 1 and buf[p + 5] == 0:
            end = p + 6
        else:
            return -1
        rec[i, column] = buf[p + 2]
        return end
    return -1  # K_NULL_ONLY: anything but null


@njit(cache=True, nogil=True)
def _performative(buf, p, e, fields, rec, i):
    """The performative at ``p`` (the frame body, up to ``e``): its code in ``R_CODE``, and for a hot one its fields;
    returns where its list ends, or -1 if the walk does not read it."""
    if p + 3 > e or buf[p] != 0x00 or buf[p + 1] != 0x53:
        return -1
    code = np.int64(buf[p + 2])
    rec[i, R_CODE] = code
    if code < FLOW or code > DISPOSITION:
        return -1
    p += 3
    if p >= e:
        return -1
    c = buf[p]
    if c == 0x45:
        return p + 1
    if c == 0xC0 and p + 3 <= e:
        end, count, p = p + 2 + np.int64(buf[p + 1]), np.int64(buf[p + 2]), p + 3
    elif c == 0xD0 and p + 9 <= e:
        end, count, p = p + 5 + _be(buf, p + 1, 4), _be(buf, p + 5, 4), p + 9
    else:
        return -1
    if end > e or count > MAX_FIELDS:
        return -1
    plan = fields[code - FLOW]
    for k in range(count):
        kind = plan[k, 0]
        if kind < 0:  # a field past the spec's
            return -1
        p = _value(buf, p, end, kind, rec, i, plan[k, 1])
        if p < 0:
            return -1
    return end if p == end else -1


@njit(cache=True, nogil=True)
def walk(buf, pos, end, limit, fields, rec, cut):
    """Frames of ``buf[pos:end]`` into ``rec`` (at most ``len(rec)``): ``(frames, position after the last)``; with
    ``cut``, up to the first frame that is neither read (``R_HOT``) nor a transfer (``hotpath.run`` decodes no
    further before the reference has seen it)."""
    n = 0
    while n < len(rec) and end - pos >= 8:
        if buf[pos] == 0x41 and buf[pos + 1] == 0x4D and buf[pos + 2] == 0x51 and buf[pos + 3] == 0x50:  # "AMQP"
            break
        size = _be(buf, pos, 4)
        doff = np.int64(buf[pos + 4])
        ftype = np.int64(buf[pos + 5])
        if ftype > 1 or size < 8 or doff < 2 or doff * 4 > size or size > limit or pos + size > end:
            break
        for k in range(N_REC):
            rec[n, k] = -1
        rec[n, R_POS], rec[n, R_SIZE], rec[n, R_DOFF], rec[n, R_TYPE] = pos, size, doff, ftype
        rec[n, R_CHANNEL] = _be(buf, pos + 6, 2)
        rec[n, R_HOT] = 0
        body, frame_end = pos + doff * 4, pos + size
        if ftype == 0 and body < frame_end:
            after = _performative(buf, body, frame_end, fields, rec, n)
            code = rec[n, R_CODE]
            if after >= 0:
                if code == TRANSFER:
                    if rec[n, F_HANDLE] >= 0:
                        rec[n, R_HOT] = 1
                        rec[n, R_PAYLOAD] = after
                elif after == frame_end:
                    rec[n, R_HOT] = 1
        pos += size
        n += 1
        if cut and rec[n - 1, R_HOT] != 1 and rec[n - 1, R_CODE] != TRANSFER:
            break
    return n, pos


@njit(cache=True, nogil=True)
def _extent(buf, p, e):
    """Where the value encoded at ``p`` ends (Part 1 §1.2: the constructor's subcategory gives the width), or -1.
    A described value (0x00) is its descriptor and then its value: each 0x00 adds one value to read."""
    need = 1
    while need > 0:
        if p >= e:
            return -1
        c = np.int64(buf[p])
        if c == 0x00:
            need += 1
            p += 1
            continue
        w = _WIDTH[c >> 4]
        if w < 0:  # a size before the value: 1 or 4 bytes
            if w == -5 or p + 1 - w > e:
                return -1
            w = (1 + np.int64(buf[p + 1])) if w == -1 else (4 + _be(buf, p + 1, 4))
        p += 1 + w
        if p > e:
            return -1
        need -= 1
    return p


@njit(cache=True, nogil=True)
def sections(buf, a, b, digest, row, h, tail):
    """The body of the message whose payload is ``buf[a:b]`` (every section whole): its size, its SHA-256 into
    ``digest[row]``; -1 where a section does not parse (the reference decides what it is)."""
    h[:] = _H0
    total = np.int64(0)
    p = a
    while p < b:
        if p + 3 > b or buf[p] != 0x00 or buf[p + 1] != 0x53:
            return -1
        code = buf[p + 2]
        q = _extent(buf, p + 3, b)
        if q < 0:
            return -1
        if code == DATA:
            c = buf[p + 3]
            at = p + 5 if c == 0xA0 else (p + 8 if c == 0xB0 else -1)
            if at < 0:
                return -1
            _update(h, tail, total, buf, at, q)
            total += q - at
        elif code == AMQP_SEQUENCE or code == AMQP_VALUE:
            _update(h, tail, total, buf, p + 3, q)
            total += q - (p + 3)
        elif code < 0x70 or code > 0x78:
            return -1
        p = q
    _final(h, tail, total, digest, row)
    return total


PLAN = plan()
AMQP_HEADER, SASL_HEADER = b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00"


def walk_stream(buf: np.ndarray, limit: int, pos: int = 0, rows: int = 1 << 14) -> tuple[np.ndarray, int]:
    """Every frame the walk takes of a direction's bytes from ``pos`` (``buf``: uint8), the 1.0 and SASL protocol
    headers stepped over as the framer's header mode does: ``(rec rows, where the walk stopped)``; the reference
    would take over there. Frames after a SASL header are cut, not read (an AMQP performative there is the
    reference's layer error). Python per call and per protocol header, not per frame."""
    out = []
    end = len(buf)
    rec = np.empty((rows, N_REC), np.int64)
    sasl = False
    while True:
        n, pos = walk(buf, pos, end, limit, PLAN, rec, False)
        if n:
            part = rec[:n].copy()
            if sasl:
                part[:, R_HOT] = 0
            out.append(part)
        if n == len(rec):
            continue
        head = bytes(buf[pos:pos + 8])
        if head in (AMQP_HEADER, SASL_HEADER):
            sasl = head == SASL_HEADER
            pos += 8
            continue
        break
    return (np.concatenate(out) if out else np.empty((0, N_REC), np.int64)), pos


@njit(cache=True, nogil=True)
def bodies(buf, rec):
    """For each hot transfer of ``rec`` that is a whole message (more false or absent): its body size (-1 where
    ``sections`` does not take it) and digest; other rows -1 and zeros."""
    n = len(rec)
    size = np.full(n, -1, np.int64)
    digest = np.zeros((n, 32), np.uint8)
    h = np.zeros(8, np.uint32)
    tail = np.zeros(64, np.uint8)
    for i in range(n):
        if rec[i, R_HOT] == 1 and rec[i, R_CODE] == TRANSFER and rec[i, F_MORE] != 1 and rec[i, F_ABORTED] != 1:
            size[i] = sections(buf, rec[i, R_PAYLOAD], rec[i, R_POS] + rec[i, R_SIZE], digest, i, h, tail)
    return size, digest


BEGIN, END = 0x11, 0x17  # begin .. end: the performatives whose effects stay in their direction (not open, close, SASL)


@njit(cache=True, nogil=True)
def window_ok(buf, end, limit):
    """Where the first frame of ``buf[:end]`` (a direction's held bytes from a frame start) that is not to be decoded
    ahead of the other direction starts (``ahead``): a protocol header, a header the framing loop would not accept, a
    SASL frame, an AMQP frame whose performative is not one of begin to end (an open, a close: what the other
    direction reads, the frame limit and the connection facts) or cannot be told; ``end`` when there is none (a frame
    cut short at the end is the framing loop's to wait for)."""
    pos = 0
    while end - pos >= 8:
        if buf[pos] == 0x41 and buf[pos + 1] == 0x4D and buf[pos + 2] == 0x51 and buf[pos + 3] == 0x50:  # "AMQP"
            return pos
        size = _be(buf, pos, 4)
        doff = np.int64(buf[pos + 4])
        ftype = np.int64(buf[pos + 5])
        if ftype != 0 or size < 8 or doff < 2 or doff * 4 > size or size > limit:
            return pos
        if pos + size > end:
            return end
        body = pos + doff * 4
        if body < pos + size:
            if body + 3 > pos + size or buf[body] != 0x00 or buf[body + 1] != 0x53:
                return pos
            if buf[body + 2] < BEGIN or buf[body + 2] > END:
                return pos
        pos += size
    return end
