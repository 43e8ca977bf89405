"""Transfers into messages: per link, a delivery's transfer payloads are one message (Part 2 §2.6.14).

Per direction, a link is (channel, handle). A transfer opens a message on its
link unless one is open there (then it is a continuation: the spec forbids
interleaving deliveries on one link); ``more=false`` completes it, ``aborted``
discards it. Each message gets a ``message_seq`` (0-based per link and
direction) carried by all its frames.

The payload is read section by section as it arrives (Part 3 §3.2), without
keeping the message: header, delivery-annotations, message-annotations,
properties, application-properties and footer are decoded (each up to
``MAX_SECTION_BYTES``); the body sections are only hashed. The body bytes are
the binary content of each ``data`` section and the encoded value (constructor
onward) of each ``amqp-sequence`` / ``amqp-value`` section, in order:
``body_size`` counts them, ``body_sha256`` hashes them, and with
``body_prefix_bytes`` their first bytes are kept.
"""

from __future__ import annotations

import hashlib

from amqplens.decode.errors import DecodeError, FrameError, Truncated
from amqplens.decode.streaming import MessageTrackerBase
from amqplens.decode.v1_0.composites import COMPOSITE, NAMES, code_of, fields
from amqplens.decode.v1_0.types import decode, extent

MAX_SECTION_BYTES = 1 << 20  # a non-body section is buffered to be decoded; real ones are a few KB, bigger ones are skipped
DATA, AMQP_SEQUENCE, AMQP_VALUE = 0x75, 0x76, 0x77
_VBIN = {0xA0: 1, 0xB0: 4}
_BODY = frozenset({DATA, AMQP_SEQUENCE, AMQP_VALUE})
_SECTION_KEYS = {code: name.replace("-", "_") for code, name in NAMES.items()}
HEAD_CHUNK = 256  # payload bytes moved into the section-header buffer at a time
HEAD, BODY, COLLECT, SKIP, JUNK = range(5)


class _Message:
    __slots__ = ("seq", "delivery_id", "mode", "head", "remaining", "collected", "hasher", "prefix", "body_size", "sections", "body", "error")

    def __init__(self, seq: int, delivery_id) -> None:
        self.seq, self.delivery_id = seq, delivery_id
        self.mode, self.head, self.remaining, self.collected = HEAD, bytearray(), 0, bytearray()
        self.hasher = hashlib.sha256()
        self.prefix = bytearray()
        self.body_size = 0
        self.sections: dict = {}
        self.body: list[str] = []  # the body sections' names, in order
        self.error: str | None = None


class MessageTracker(MessageTrackerBase[tuple, _Message]):
    """The open messages of one direction, by link; ``abandoned`` counts those aborted, or cut short by a gap or
    the end."""

    def __init__(self, body_prefix_bytes: int = 0) -> None:
        super().__init__(body_prefix_bytes)
        self.orphans = 0  # continuation transfers of deliveries whose start was not seen

    def on_transfer(self, link: tuple, delivery_id, delivery_tag, more, aborted, payload: memoryview):
        """``(message_seq, delivery_id, completion, error)``; completion is
        ``(sections, body_size, body_sha256, body_prefix)`` on the frame that completes the message.

        A transfer without delivery-id and delivery-tag on a link with no open message is the
        continuation of a delivery whose first transfer was not seen (lost in a gap, or before the
        capture started): it belongs to no message (all None)."""
        msg = self._open.get(link)
        error = None
        if msg is None and delivery_id is None and delivery_tag is None:
            self.orphans += 1
            return None, None, None, None
        if msg is None:
            msg = self._open[link] = _Message(self._number(link), delivery_id)
        elif delivery_id is not None and msg.delivery_id is not None and delivery_id != msg.delivery_id:
            error = FrameError("delivery_id_mismatch", f"continuation transfer says {delivery_id}, the delivery's first said {msg.delivery_id}")
        if aborted is True:  # §2.7.5: aborted wins over more; the payload and what came before are discarded
            del self._open[link]
            self.abandoned += 1
            return msg.seq, msg.delivery_id, None, error
        if len(payload) and msg.mode != JUNK:
            self._feed(msg, payload)
        if more is True:
            return msg.seq, msg.delivery_id, None, error
        del self._open[link]
        self.completed += 1
        if msg.mode != HEAD or msg.head:
            msg.error = msg.error or "incomplete_section: the message ends inside a section"
        if msg.body:
            msg.sections["body"] = msg.body
        completion = (msg.sections, msg.body_size, msg.hasher.hexdigest(), bytes(msg.prefix) if self.body_prefix_bytes else None)
        return msg.seq, msg.delivery_id, completion, error or msg.error

    # -- sections ------------------------------------------------------------------------
    def _feed(self, msg: _Message, data: memoryview) -> None:
        pos, n = 0, len(data)
        while msg.mode != JUNK:
            if msg.mode == HEAD:
                if not msg.head:
                    pos = self._whole_sections(msg, data, pos)  # the common case: sections inside one payload
                    if pos >= n or msg.mode == JUNK:
                        return
                if not self._section_start(msg):
                    if pos >= n:
                        return
                    take = min(n - pos, HEAD_CHUNK)
                    msg.head += data[pos : pos + take]
                    pos += take
                continue
            if pos >= n:
                return
            take = min(msg.remaining, n - pos)
            self._consume(msg, data[pos : pos + take])
            pos += take

    def _classify(self, buf, pos: int) -> tuple:
        """``(code, mode, header end, section end)`` of the section at ``pos``; ``Truncated`` until
        its descriptor and value header are in ``buf``. The header end is where the body bytes
        start (BODY) or the section's start (COLLECT)."""
        if buf[pos] != 0x00:
            raise DecodeError(f"a section starts with 0x{buf[pos]:02x}, not a descriptor")
        if pos + 2 < len(buf) and buf[pos + 1] == 0x53:  # smallulong: how every peer writes it
            code, value_at = code_of(buf[pos + 2]), pos + 3
        else:
            value_at = extent(buf, pos + 1)
            code = code_of(decode(buf, pos + 1)[0])
        end = extent(buf, value_at)
        if code == DATA and buf[value_at] in _VBIN:
            start = value_at + 1 + _VBIN[buf[value_at]]
            return code, BODY, start, end
        if code in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
            return code, BODY, value_at, end
        return code, COLLECT, pos, end

    def _opened(self, msg: _Message, code, mode: int, hdr_end: int, end: int, start: int) -> int:
        """Book a section just found; returns its mode (SKIP for a non-body section over the limit)."""
        if mode == BODY:
            msg.body.append(NAMES.get(code, "data") if code is not None else "unknown")
            if code == DATA and hdr_end - start < 5:  # no vbin header: the value is not binary
                msg.error = msg.error or "bad_section: a data section whose value is not binary"
        elif end - start > MAX_SECTION_BYTES:
            msg.error = msg.error or f"section_too_large: a {end - start}-byte section was skipped"
            return SKIP
        return mode

    def _whole_sections(self, msg: _Message, data: memoryview, pos: int) -> int:
        """Take every section wholly inside ``data`` from ``pos``; returns where the rest starts."""
        n = len(data)
        while pos < n:
            if n - pos <= MAX_SECTION_BYTES and data[pos] == 0x00 and pos + 2 < n and data[pos + 1] == 0x53 and data[pos + 2] not in _BODY:
                try:  # a small section with a smallulong descriptor: decode it straight away
                    value, end = decode(data, pos)
                except Truncated:
                    return pos  # it continues in the next transfer
                except DecodeError as exc:
                    self._junk(msg, FrameError("bad_section", f"{exc}"))
                    return n
                self._store(msg, value)
                pos = end
                continue
            try:
                code, mode, hdr_end, end = self._classify(data, pos)
            except Truncated:
                return pos
            except DecodeError as exc:
                self._junk(msg, FrameError("bad_section", f"{exc}"))
                return n
            if end > n:
                return pos
            mode = self._opened(msg, code, mode, hdr_end, end, pos)
            if mode == BODY:
                self._body(msg, data[hdr_end:end])
            elif mode == COLLECT:
                self._decode_section(msg, data[pos:end])
            pos = end
        return pos

    def _consume(self, msg: _Message, chunk) -> None:
        """``chunk`` (at most ``msg.remaining`` bytes) belongs to the current section."""
        msg.remaining -= len(chunk)
        if msg.mode == BODY:
            self._body(msg, chunk)
        elif msg.mode == COLLECT:
            msg.collected += chunk
        if msg.remaining == 0:
            if msg.mode == COLLECT:
                self._decode_section(msg, memoryview(msg.collected))
                msg.collected = bytearray()
            msg.mode = HEAD

    def _section_start(self, msg: _Message) -> bool:
        """Read a section's descriptor and value header from ``msg.head``; False until it is all there."""
        head = msg.head
        if not head:
            return False
        try:
            code, mode, hdr_end, end = self._classify(head, 0)
            if hdr_end > len(head):
                raise Truncated("size of a data section", needed=hdr_end - len(head))
        except Truncated:
            if len(head) > MAX_SECTION_BYTES:
                self._junk(msg, FrameError("section_too_large", "a section header longer than the limit"))
            return False
        except DecodeError as exc:
            self._junk(msg, FrameError("bad_section", f"{exc}"))
            return False
        mode = self._opened(msg, code, mode, hdr_end, end, 0)
        msg.head = bytearray()
        msg.collected = bytearray()
        msg.mode, msg.remaining = mode, end - hdr_end
        tail = memoryview(bytes(head[hdr_end:]))
        take = min(msg.remaining, len(tail))
        if msg.remaining == 0:  # an empty data section
            msg.mode = HEAD
        else:
            self._consume(msg, tail[:take])
        msg.head = bytearray(tail[take:])  # the start of the next section
        return True

    def _body(self, msg: _Message, chunk: memoryview) -> None:
        msg.hasher.update(chunk)
        msg.body_size += len(chunk)
        room = self.body_prefix_bytes - len(msg.prefix)
        if room > 0:
            msg.prefix += chunk[:room]

    def _decode_section(self, msg: _Message, raw: memoryview) -> None:
        try:
            value, _ = decode(raw, 0)
        except DecodeError as exc:
            msg.error = msg.error or f"bad_section: {exc}"
            return
        self._store(msg, value)

    @staticmethod
    def _store(msg: _Message, value) -> None:
        code = code_of(value.descriptor)
        if code is None:
            msg.sections.setdefault("unknown_sections", []).append(value)
            return
        body = fields(code, value.value) if code in COMPOSITE else value.value
        msg.sections[_SECTION_KEYS[code]] = body if body is not None else value.value

    def _junk(self, msg: _Message, error: str) -> None:
        msg.mode, msg.head = JUNK, bytearray()
        msg.error = msg.error or error


__all__ = ["MessageTracker", "MAX_SECTION_BYTES"]
