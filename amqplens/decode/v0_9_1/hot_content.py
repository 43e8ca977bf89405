"""``ContentTracker``'s message state in arrays, for the compiled 0-9-1 path (``content_kernel``, numba).

With ``decode.compiled`` on, a direction's messages live here: the hot frames of a walk go
through ``content_kernel.content_pass`` (no Python per frame) and the frames the Python decoder
reads call ``on_method``/``on_header``/``on_body`` as they would ``ContentTracker``'s, with the
same answers (message_seq, ``(sha256, prefix)`` when a message completes, the same errors), so
the two paths share one state and the rows stay the reference's (tests/v0_9_1/test_hotpath.py,
tests/v0_9_1/test_hot_content.py).
"""

from __future__ import annotations

import numpy as np

from amqplens.decode.errors import FrameError
from amqplens.decode.v0_9_1 import content_kernel as ck

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def error_of(code: int, a: int, b: int) -> FrameError | None:
    """The ``FrameError`` of a content error code (``content_kernel.E_*``) and its two numbers, as ``ContentTracker``
    words it."""
    if code == ck.E_SECOND_HEADER:
        return FrameError("unexpected_header", "a second content header for one message")
    if code == ck.E_CLASS_MISMATCH:
        return FrameError("content_class_mismatch", f"header class {a}, method class {b}")
    if code == ck.E_OVERFLOW:
        return FrameError("body_overflow", f"{a} body bytes, header said {b}")
    if code == ck.E_BODY_FIRST:
        return FrameError("unexpected_body", "body frame before the content header")
    return None


def hex_column(digest: np.ndarray, done: np.ndarray):
    """``(offsets, data)`` of a string column: the hex SHA-256 of the rows where ``done``, empty elsewhere."""
    rows = digest[done]
    data = np.empty((len(rows), 64), np.uint8)
    data[:, 0::2] = _HEX[rows >> 4]
    data[:, 1::2] = _HEX[rows & 15]
    offsets = np.zeros(len(done) + 1, np.int32)
    np.cumsum(done * 64, out=offsets[1:])
    return offsets, data.reshape(-1)


class ArrayContent:
    """One direction's open messages by channel (``ContentTracker``'s interface, ``content_kernel``'s state)."""

    st: np.ndarray
    hs: np.ndarray
    tail: np.ndarray
    prefix: np.ndarray

    def __init__(self, body_prefix_bytes: int = 0, channels: int = 8) -> None:
        self.body_prefix_bytes = body_prefix_bytes
        self.cnt = np.zeros(3, np.int64)
        self._alloc(channels)
        self._out = np.zeros((1, ck.N_OUT), np.int64)  # one row, for the Python decoder's frames
        self._digest = np.zeros((1, 32), np.uint8)
        self._prefixes = np.zeros((1, body_prefix_bytes), np.uint8)

    def _alloc(self, channels: int) -> None:
        st = np.zeros((channels, ck.N_ST), np.int64)
        hs = np.zeros((channels, 8), np.uint32)
        tail = np.zeros((channels, 64), np.uint8)
        prefix = np.zeros((channels, self.body_prefix_bytes), np.uint8)
        if hasattr(self, "st"):  # grown: the channels so far keep their state
            old = self.st.shape[0]
            st[:old], hs[:old], tail[:old], prefix[:old] = self.st, self.hs, self.tail, self.prefix
        self.st, self.hs, self.tail, self.prefix = st, hs, tail, prefix

    def fit(self, channel: int) -> None:
        """Room for ``channel`` (a 16-bit number)."""
        if channel >= self.st.shape[0]:
            self._alloc(max(channel + 1, 2 * self.st.shape[0]))

    # -- ContentTracker's interface ------------------------------------------------------------------
    @property
    def completed(self) -> int:
        return int(self.cnt[ck.N_COMPLETED])

    @property
    def abandoned(self) -> int:
        return int(self.cnt[ck.N_ABANDONED])

    @property
    def open_messages(self) -> int:
        return int(self.cnt[ck.N_OPEN])

    def reset(self) -> None:
        ck.reset(self.st, self.cnt)

    def on_method(self, channel: int, class_id: int, has_content: bool) -> int | None:
        self.fit(channel)
        seq = ck.on_method(self.st, self.hs, self.cnt, channel, class_id, has_content)
        return None if seq < 0 else int(seq)

    def on_header(self, channel: int, class_id: int, body_size: int) -> tuple[int, tuple | None, str | None]:
        self.fit(channel)
        size = min(body_size, int(ck.MAX_BODY))  # a Python int of 2^63 or more would not fit the kernel's int64
        ck.on_header(self.st, self.hs, self.tail, self.cnt, channel, class_id, size, self._out, self._digest, 0)
        seq, done, error = self._result()
        return seq, done, error  # type: ignore[return-value]  # a header always has its message

    def on_body(self, channel: int, payload: memoryview) -> tuple[int | None, tuple | None, str | None]:
        self.fit(channel)
        buf = np.frombuffer(payload, np.uint8)
        ck.on_body(self.st, self.hs, self.tail, self.prefix, self.cnt, channel, buf, 0, len(buf), self._out, self._digest,
                   self._prefixes, 0)  # fmt: skip
        return self._result()

    def _result(self) -> tuple[int | None, tuple | None, str | None]:
        seq, done, err, a, b, n = (int(v) for v in self._out[0])
        completion = None
        if done:
            completion = (self._digest[0].tobytes().hex(), self._prefixes[0, :n].tobytes() if self.body_prefix_bytes else None)
        return (None if seq < 0 else seq), completion, error_of(err, a, b)
