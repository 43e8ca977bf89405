"""Content reassembly of the compiled 0-9-1 path in numba (imported only through ``hot_content``).

The message state of one direction (``ContentTracker``'s, in arrays): per channel whether a
message is open, its ``message_seq``, class, announced body size, bytes received, the channel's
next ``message_seq``, and the SHA-256 of the body so far (eight state words, the unhashed tail of
the last 64-byte block) with its first ``body_prefix_bytes``. ``content_pass`` runs the hot
frames of a walk through it in wire order with no Python per frame; ``on_method``/``on_header``/
``on_body`` are the same steps for the frames the Python decoder reads, so both paths share one
state. The SHA-256 is FIPS 180-4's, checked against ``hashlib`` (tests/v0_9_1/test_hot_content.py).

The 64-byte blocks go through OpenSSL's ``SHA256_Transform`` (the libcrypto Python's ``hashlib`` uses; with the
CPU's SHA instructions where it has them), called from the compiled code by symbol name, so numba's disk cache
keeps working: 1.4 GB/s here against 155 MB/s for ``_compress``, this module's own block function, which is what
runs where libcrypto or the symbol is missing (``SHA_TRANSFORM`` says which). The 2 GB load capture's bodies are
904 MB: about 5 CPU s of its ingest.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
from numba import njit, types


def _libcrypto_transform():
    """``SHA256_Transform`` as a function numba can call (None where there is no libcrypto that exports it)."""
    try:
        import llvmlite.binding as llvm

        name = ctypes.util.find_library("crypto")
        if not name or not hasattr(ctypes.CDLL(name), "SHA256_Transform"):
            return None
        llvm.load_library_permanently(name)
        return types.ExternalFunction("SHA256_Transform", types.void(types.uintp, types.uintp))
    except (OSError, ImportError, RuntimeError, AttributeError):
        return None


_TRANSFORM = _libcrypto_transform()
SHA_TRANSFORM = "openssl" if _TRANSFORM is not None else "numba"

# st[channel, :] columns
C_OPEN, C_SEQ, C_CLASS, C_BODY, C_RECV, C_NEXT = range(6)
MAX_BODY = np.int64(2**63 - 1)  # the body-size that stands in for any of 2^63 or more (on_header)
N_ST = 6
# cnt[:]
N_COMPLETED, N_ABANDONED, N_OPEN = 0, 1, 2
# error codes (hot_content.ERRORS)
E_NONE, E_SECOND_HEADER, E_CLASS_MISMATCH, E_OVERFLOW, E_BODY_FIRST = 0, 1, 2, 3, 4
# out[row, :] columns of the hot rows
O_SEQ, O_DONE, O_ERR, O_ERR_A, O_ERR_B, O_PREFIX = range(6)
N_OUT = 6
# the walk's record columns (hot_kernel.R_*) and hot row columns (hot_kernel.V_*) it reads
R_POS, R_SIZE, R_HOT, R_ROW, R_CHANNEL = 0, 3, 4, 5, 2
V_HOT_METHOD, V_BODY_SIZE = 6, 7

_K = np.array([
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
], np.uint32)  # fmt: skip
_H0 = np.array([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19], np.uint32)


M32 = 0xFFFFFFFF


@njit(cache=True, nogil=True, inline="always")
def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & M32


@njit(cache=True, nogil=True)
def _compress(h, block, at):
    """One 64-byte block of ``block`` from ``at`` into the state words ``h`` (numba widens 32-bit arithmetic to
    64 bits, so the words are int64 here, masked to 32 bits)."""
    w = np.empty(64, np.int64)
    for i in range(16):
        j = at + 4 * i
        w[i] = (np.int64(block[j]) << 24) | (np.int64(block[j + 1]) << 16) | (np.int64(block[j + 2]) << 8) | np.int64(block[j + 3])
    for i in range(16, 64):
        a, b = w[i - 15], w[i - 2]
        s0 = _rotr(a, 7) ^ _rotr(a, 18) ^ (a >> 3)
        s1 = _rotr(b, 17) ^ _rotr(b, 19) ^ (b >> 10)
        w[i] = (w[i - 16] + s0 + w[i - 7] + s1) & M32
    a, b, c, d = np.int64(h[0]), np.int64(h[1]), np.int64(h[2]), np.int64(h[3])
    e, f, g, hh = np.int64(h[4]), np.int64(h[5]), np.int64(h[6]), np.int64(h[7])
    for i in range(64):
        t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g & M32)) + np.int64(_K[i]) + w[i]) & M32
        t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) & M32
        hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & M32, c, b, a, (t1 + t2) & M32
    h[0] = (np.int64(h[0]) + a) & M32
    h[1] = (np.int64(h[1]) + b) & M32
    h[2] = (np.int64(h[2]) + c) & M32
    h[3] = (np.int64(h[3]) + d) & M32
    h[4] = (np.int64(h[4]) + e) & M32
    h[5] = (np.int64(h[5]) + f) & M32
    h[6] = (np.int64(h[6]) + g) & M32
    h[7] = (np.int64(h[7]) + hh) & M32


@njit(cache=True, nogil=True)
def _blocks_numba(h, buf, a, n):
    """``n`` 64-byte blocks of ``buf`` from ``a`` into the state words ``h``."""
    for k in range(n):
        _compress(h, buf, a + 64 * k)


if _TRANSFORM is not None:

    @njit(cache=True, nogil=True)
    def _blocks(h, buf, a, n):
        """``_blocks_numba`` through OpenSSL: the words in a ``SHA256_CTX`` (its first eight 32-bit fields, all
        ``SHA256_Transform`` reads and writes), a block at a time from ``buf``'s memory (a strided view: ours)."""
        if buf.strides[0] != 1:
            _blocks_numba(h, buf, a, n)
            return
        ctx = np.empty(28, np.uint32)
        for i in range(8):
            ctx[i] = np.uint32(h[i])
        p = ctx.ctypes.data
        base = buf.ctypes.data + a
        for k in range(n):
            _TRANSFORM(p, base + 64 * k)
        for i in range(8):
            h[i] = ctx[i]
else:
    _blocks = _blocks_numba


@njit(cache=True, nogil=True)
def _update(h, tail, done, buf, a, b):
    """Hash ``buf[a:b]`` after ``done`` bytes already hashed (their last ``done % 64`` in ``tail``)."""
    used = done & 63
    if used:
        take = min(64 - used, b - a)
        tail[used : used + take] = buf[a : a + take]
        a += take
        if used + take < 64:
            return
        _blocks(h, tail, 0, 1)
    n = (b - a) // 64
    if n:
        _blocks(h, buf, a, n)
        a += 64 * n
    tail[: b - a] = buf[a:b]


@njit(cache=True, nogil=True)
def _final(h, tail, total, out, row):
    """The digest of ``total`` bytes into ``out[row, :32]`` (``h`` and ``tail`` are used up)."""
    used = total & 63
    block = np.zeros(128, np.uint8)
    block[:used] = tail[:used]
    block[used] = 0x80
    end = 64 if used < 56 else 128
    bits = total * 8
    for i in range(8):
        block[end - 1 - i] = (bits >> (8 * i)) & 0xFF
    _blocks(h, block, 0, end // 64)
    for i in range(8):
        for j in range(4):
            out[row, 4 * i + j] = (np.int64(h[i]) >> (24 - 8 * j)) & 0xFF


@njit(cache=True, nogil=True)
def _start(st, hs, cnt, ch, class_id):
    if st[ch, C_OPEN]:
        cnt[N_ABANDONED] += 1
    else:
        cnt[N_OPEN] += 1
    st[ch, C_OPEN] = 1
    seq = st[ch, C_NEXT]
    st[ch, C_NEXT] = seq + 1
    st[ch, C_SEQ], st[ch, C_CLASS], st[ch, C_BODY], st[ch, C_RECV] = seq, class_id, -1, 0
    hs[ch, :] = _H0
    return seq


@njit(cache=True, nogil=True)
def _end(st, cnt, ch, whole):
    st[ch, C_OPEN] = 0
    cnt[N_OPEN] -= 1
    cnt[N_COMPLETED if whole else N_ABANDONED] += 1


@njit(cache=True, nogil=True)
def _maybe_complete(st, hs, tail, cnt, ch, digest, row):
    if st[ch, C_RECV] != st[ch, C_BODY]:
        return 0
    _end(st, cnt, ch, True)
    _final(hs[ch], tail[ch], st[ch, C_RECV], digest, row)
    return 1


@njit(cache=True, nogil=True)
def on_method(st, hs, cnt, ch, class_id, has_content):
    """A method frame: its message_seq when it opens a message, else -1."""
    if has_content:
        return _start(st, hs, cnt, ch, class_id)
    if st[ch, C_OPEN]:  # any other frame on the channel ends an unfinished content
        _end(st, cnt, ch, False)
    return -1


@njit(cache=True, nogil=True)
def on_header(st, hs, tail, cnt, ch, class_id, body_size, out, digest, row):
    """A content header: out[row] gets seq, done, error (and its two numbers); digest[row] the SHA-256 when done."""
    err, ea, eb = E_NONE, 0, 0
    if not st[ch, C_OPEN] or st[ch, C_BODY] >= 0:
        if st[ch, C_OPEN]:
            err = E_SECOND_HEADER
        _start(st, hs, cnt, ch, class_id)  # mid-stream start: the method was not seen
    elif st[ch, C_CLASS] != class_id:
        err, ea, eb = E_CLASS_MISMATCH, class_id, st[ch, C_CLASS]
    # a body-size of 2^63 or more reads as a negative int64 (the hot kernel's): no stream carries that much, so the
    # largest int64 stands in and the message never completes, as in the reference (content.py, Python ints)
    st[ch, C_BODY] = body_size if body_size >= 0 else MAX_BODY
    out[row, O_SEQ] = st[ch, C_SEQ]
    out[row, O_ERR], out[row, O_ERR_A], out[row, O_ERR_B], out[row, O_PREFIX] = err, ea, eb, 0
    out[row, O_DONE] = _maybe_complete(st, hs, tail, cnt, ch, digest, row)


@njit(cache=True, nogil=True)
def on_body(st, hs, tail, prefix, cnt, ch, buf, a, b, out, digest, prefixes, row):
    """A body frame's payload ``buf[a:b]``: out[row] as ``on_header``; prefixes[row] the body's first bytes when done."""
    out[row, O_SEQ], out[row, O_DONE], out[row, O_ERR] = -1, 0, E_NONE
    if not st[ch, C_OPEN]:
        return
    if st[ch, C_BODY] < 0:
        out[row, O_ERR] = E_BODY_FIRST
        return
    got = st[ch, C_RECV]
    room = prefix.shape[1] - got
    if room > 0:
        take = min(room, b - a)
        prefix[ch, got : got + take] = buf[a : a + take]
    _update(hs[ch], tail[ch], got, buf, a, b)
    got = st[ch, C_RECV] = got + b - a
    out[row, O_SEQ] = st[ch, C_SEQ]
    if got > st[ch, C_BODY]:
        _end(st, cnt, ch, False)
        out[row, O_ERR], out[row, O_ERR_A], out[row, O_ERR_B] = E_OVERFLOW, got, st[ch, C_BODY]
        return
    out[row, O_DONE] = _maybe_complete(st, hs, tail, cnt, ch, digest, row)
    if out[row, O_DONE]:
        n = min(got, prefix.shape[1])
        prefixes[row, :n] = prefix[ch, :n]
        out[row, O_PREFIX] = n


@njit(cache=True, nogil=True)
def reset(st, cnt):
    """Bytes went missing: every open message is abandoned."""
    cnt[N_ABANDONED] += cnt[N_OPEN]
    cnt[N_OPEN] = 0
    st[:, C_OPEN] = 0


@njit(cache=True, nogil=True)
def content_pass(rec, i, buf, base, mark_at, mark_ts, vals, has_content, class_id, st, hs, tail, prefix, cnt, out, digest,
                 prefixes, times, rec_ts):
    """The walk's records from ``i`` while they are hot rows, through the message state, with each record's time
    (``rec_ts``; a hot row's in ``times``): that of the last feed mark at or before its offset (``FramerCore._ts``).
    Returns ``(the first record the Python decoder reads (or the end), content errors, frame bytes, hot rows)``;
    a channel the state has no room for stops the pass there as well (the caller grows it and goes on).
    Hot row r of record j is ``rec[j, R_ROW]``; its frame at ``buf[rec[j, R_POS]:]``."""
    errors = 0
    nbytes = 0
    hot = 0
    n = rec.shape[0]
    m = 0
    while i < n:
        off = base + rec[i, R_POS]
        while m + 1 < len(mark_at) and mark_at[m + 1] <= off:
            m += 1
        rec_ts[i] = mark_ts[m] if len(mark_ts) else 0
        kind = rec[i, R_HOT]
        ch = rec[i, R_CHANNEL]
        if kind == 0 or ch >= st.shape[0]:
            break
        row = rec[i, R_ROW]
        times[row] = rec_ts[i]
        out[row, O_SEQ], out[row, O_DONE], out[row, O_ERR], out[row, O_PREFIX] = -1, 0, E_NONE, 0
        if kind == 1:
            out[row, O_SEQ] = on_method(st, hs, cnt, ch, class_id, has_content[vals[row, V_HOT_METHOD]])
        elif kind == 2:
            on_header(st, hs, tail, cnt, ch, class_id, vals[row, V_BODY_SIZE], out, digest, row)
        elif kind == 3:
            a = rec[i, R_POS] + 7
            on_body(st, hs, tail, prefix, cnt, ch, buf, a, a + rec[i, R_SIZE], out, digest, prefixes, row)
        if out[row, O_ERR]:
            errors += 1
        nbytes += rec[i, R_SIZE] + 8
        hot += 1
        i += 1
    return i, errors, nbytes, hot
