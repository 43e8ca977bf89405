"""The compiled path's message state (``hot_content.ArrayContent``, numba) against ``ContentTracker``, the reference.

Bad input tried: headers without their method, a second header, a header of another class, bodies
before any header and on channels never opened, bodies that overflow the announced size, methods
that cut a message short, gaps (``reset``) mid-message, empty bodies, bodies of every length around
the SHA-256 block boundaries (55, 56, 63, 64, 65 bytes) and split anywhere, channels up to 65535.
The body hash is checked against ``hashlib`` on its own as well.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from amqplens.decode.v0_9_1 import hotpath
from amqplens.decode.v0_9_1.content import ContentTracker

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed: only the Python path exists")


def _content():
    hotpath.load_kernel()
    from amqplens.decode.v0_9_1.hot_content import ArrayContent

    return ArrayContent


@pytest.mark.parametrize("n", [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 70_001])
def test_the_body_hash_is_sha256(n):
    array_content = _content()
    body = bytes(random.Random(n).randrange(256) for _ in range(n))
    t = array_content()
    assert t.on_method(1, 60, True) == 0
    seq, done, error = t.on_header(1, 60, n)
    cuts = sorted(random.Random(n + 1).sample(range(1, n), min(5, n - 1))) if n > 1 else []
    for a, b in zip([0, *cuts], [*cuts, n]):
        if n:
            seq, done, error = t.on_body(1, memoryview(body[a:b]))
    assert (seq, error) == (0, None)
    assert done[0] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("prefix", [0, 5])
@pytest.mark.parametrize("seed", range(12))
def test_random_frame_sequences_give_the_reference_answers(seed, prefix):
    array_content = _content()
    rng = random.Random(seed)
    ref, new = ContentTracker(prefix), array_content(prefix)
    channels = [1, 2, 3, 65535] if seed % 2 else [1, 2]
    for _ in range(3000):
        ch = rng.choice(channels)
        what = rng.random()
        if what < 0.25:
            has, cls = rng.random() < 0.8, rng.choice([60, 60, 60, 50])
            got, want = new.on_method(ch, cls, has), ref.on_method(ch, cls, has)
        elif what < 0.45:
            cls, size = rng.choice([60, 60, 60, 50]), rng.choice([0, 3, 56, 64, 65, 200])
            got, want = new.on_header(ch, cls, size), ref.on_header(ch, cls, size)
        elif what < 0.98:
            body = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 56, 64, 100])))
            got, want = new.on_body(ch, memoryview(body)), ref.on_body(ch, memoryview(body))
        else:
            got, want = new.reset(), ref.reset()
        assert got == want
        assert (new.completed, new.abandoned, new.open_messages) == (ref.completed, ref.abandoned, ref.open_messages)
    assert ref.completed > 50 and ref.abandoned > 50  # the sequences did reach both ends


def test_hex_column_is_the_hex_of_the_done_rows():
    _content()
    from amqplens.decode.v0_9_1.hot_content import hex_column

    digest = np.array([[i] * 32 for i in range(3)], np.uint8)
    offsets, data = hex_column(digest, np.array([True, False, True]))
    assert offsets.tolist() == [0, 64, 64, 128]
    assert data.tobytes() == b"00" * 32 + b"02" * 32


@pytest.mark.parametrize("prefix", [0, 3, 100])
def test_body_prefixes_and_hashes_of_the_compiled_path_are_the_reference_rows(prefix):
    """Bodies cut over several frames and feeds (the prefix spans frames), a header after its message's bodies
    started, a body overflowing its size: the rows of both paths, with ``body_prefix_bytes``."""
    import struct

    from amqplens.decode.tcp.records import TO_SERVER
    from amqplens.decode.v0_9_1 import Amqp091StreamDecoder
    from amqplens.decode.v0_9_1.warm import _frame

    publish = _frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x01x\x01k\x00")

    def header(size):
        return _frame(2, 1, struct.pack(">HHQH", 60, 0, size, 0x9000) + b"\x0atext/plain\x02")

    body = bytes(range(200))
    stream = b"AMQP\x00\x00\x09\x01"
    stream += (publish + header(200) + _frame(3, 1, body[:2]) + _frame(3, 1, body[2:150]) + _frame(3, 1, body[150:])) * 3
    stream += publish + header(5) + _frame(3, 1, b"123456") + header(0) + _frame(3, 1, b"x") + publish + header(1) + _frame(3, 1, b"y")

    def rows(compiled):
        dec = Amqp091StreamDecoder("c", compiled=compiled, body_prefix_bytes=prefix)
        dec.hot_min_bytes = 0
        for at in range(0, len(stream), 97):
            dec.data(TO_SERVER, at, at, stream[at : at + 97])
        dec.close()
        return dec.drain_frames(), dec.drain_frame_errors(), dec.connection_facts()

    _content()
    want = rows(False)
    assert rows(True) == want
    assert [r["body_prefix"] for r in want[0] if r["body_sha256"]][0] == (body[:prefix] if prefix else None)


def test_sha256_blocks_openssl_and_numba_agree():
    """The block function the content pass uses (OpenSSL's SHA256_Transform where libcrypto has it) and the numba
    one it falls back to give the same state words over random blocks, from contiguous buffers and from a strided
    view (which takes the numba one); a body split at odd places still hashes to hashlib's digest."""
    _content()  # the kernels load (numba present)
    from amqplens.decode.v0_9_1 import content_kernel as ck

    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 64 * 37 + 11, dtype=np.uint8)
    for at, n in ((0, 1), (11, 5), (64, 30), (3, 36)):
        h1, h2 = ck._H0.astype(np.int64).copy(), ck._H0.astype(np.int64).copy()
        ck._blocks_numba(h1, data, at, n)
        ck._blocks(h2, data, at, n)
        assert (h1 == h2).all(), (at, n, ck.SHA_TRANSFORM)
    strided = rng.integers(0, 256, 2 * 64 * 3, dtype=np.uint8)[::2]
    h1, h2 = ck._H0.astype(np.int64).copy(), ck._H0.astype(np.int64).copy()
    ck._blocks_numba(h1, np.ascontiguousarray(strided), 0, 3)
    ck._blocks(h2, strided, 0, 3)
    assert (h1 == h2).all()
    for size in (0, 55, 56, 64, 119, 120, 1000):
        body = data[7:7 + size]
        h, tail, out = ck._H0.astype(np.int64).copy(), np.zeros(64, np.uint8), np.zeros((1, 32), np.uint8)
        cut = size // 3
        ck._update(h, tail, 0, body, 0, cut)
        ck._update(h, tail, cut, body, cut, size)
        ck._final(h, tail, size, out, 0)
        assert bytes(out[0]) == hashlib.sha256(body.tobytes()).digest(), size
