"""Content reassembly: a content method, its header and its body frames are one message.

Per direction and channel, a content-bearing method (basic.publish, deliver,
return, get-ok, ...) opens a message; the content header gives the body size;
body frames count towards it until it is reached. Frames of other channels
may interleave freely. Bodies are never kept: each message gets a size and a
SHA-256 (and, when asked, its first N bytes).

Every frame of one message carries the message's ``message_seq`` (0-based per
channel and direction); the frame that completes it carries ``body_sha256``.
"""

from __future__ import annotations

import hashlib

from amqplens.decode.errors import FrameError
from amqplens.decode.streaming import MessageTrackerBase


class _Message:
    __slots__ = ("seq", "class_id", "body_size", "received", "hasher", "prefix")

    def __init__(self, seq: int, class_id: int | None) -> None:
        self.seq = seq
        self.class_id = class_id
        self.body_size: int | None = None  # unknown until the header
        self.received = 0
        self.hasher = hashlib.sha256()
        self.prefix = bytearray()


class ContentTracker(MessageTrackerBase[int, _Message]):
    """Open messages of one direction, by channel; ``abandoned`` counts those cut short by a new method, a gap or
    the end."""

    def _start(self, channel: int, class_id: int | None) -> _Message:
        if channel in self._open:
            self.abandoned += 1
        msg = self._open[channel] = _Message(self._number(channel), class_id)
        return msg

    def on_method(self, channel: int, class_id: int, has_content: bool) -> int | None:
        """A method frame; returns the message_seq when it opens a message."""
        if has_content:
            return self._start(channel, class_id).seq
        if channel in self._open:  # any other frame on the channel ends an unfinished content
            del self._open[channel]
            self.abandoned += 1
        return None

    def on_header(self, channel: int, class_id: int, body_size: int) -> tuple[int, tuple | None, str | None]:
        """``(message_seq, completion, error)``; completion is ``(sha256, prefix)``."""
        msg = self._open.get(channel)
        error = None
        if msg is None or msg.body_size is not None:
            if msg is not None:
                error = FrameError("unexpected_header", "a second content header for one message")
            msg = self._start(channel, class_id)  # mid-stream start: the method was not seen
        elif msg.class_id is not None and msg.class_id != class_id:
            error = FrameError("content_class_mismatch", f"header class {class_id}, method class {msg.class_id}")
        msg.body_size = body_size
        return msg.seq, self._maybe_complete(channel, msg), error

    def on_body(self, channel: int, payload: memoryview) -> tuple[int | None, tuple | None, str | None]:
        msg = self._open.get(channel)
        if msg is None or msg.body_size is None:
            return None, None, None if msg is None else FrameError("unexpected_body", "body frame before the content header")
        n = len(payload)
        msg.hasher.update(payload)
        room = self.body_prefix_bytes - len(msg.prefix)
        if room > 0:
            msg.prefix += payload[:room]
        msg.received += n
        if msg.received > msg.body_size:
            del self._open[channel]
            self.abandoned += 1
            return msg.seq, None, FrameError("body_overflow", f"{msg.received} body bytes, header said {msg.body_size}")
        return msg.seq, self._maybe_complete(channel, msg), None

    def _maybe_complete(self, channel: int, msg: _Message) -> tuple | None:
        if msg.received != msg.body_size:
            return None
        del self._open[channel]
        self.completed += 1
        return msg.hasher.hexdigest(), bytes(msg.prefix) if self.body_prefix_bytes else None
