"""The stream decoder of the two pre-standard drafts: the 0-9 draft (seed 000) and AMQP/Fast 0.9a5 (seed 003).

``DraftStreamDecoder(connection_id, dialect=...)`` is a ``StreamConsumer`` with the
siblings' outputs (``drain_frames``, ``drain_errors``, ``connection_facts``); rows
have the keys of ``v1_0.rows.FRAME_KEYS_1_0``. Neither document gives class or
method ids, so methods are decoded by id (0-9 draft: class-id and method-id
shorts; AMQP/Fast: class and method octets and a reserved short) with their
arguments kept raw (hex). Content headers give class, weight and body size;
structured content (weight > 0: that many child contents between a header and
its bodies) is followed on a stack per channel, and a mismatch between the
weight and the frames that follow is a ``decode_error`` (seed 000, "Structured
Content": "The peer MUST correctly detect a mismatch").
"""

from __future__ import annotations

import hashlib
import struct

from amqplens.decode.errors import FrameError
from amqplens.decode.detect import detect_protocol_header, describe_json
from amqplens.decode.drafts.framing import OPAQUE, SYNCED, DraftFramer
from amqplens.decode.drafts.layouts import AMQP_FAST, D0_9_DRAFT, FAST_FRAME_TYPES, FRAME_TYPES, LAYOUTS
from amqplens.decode.streaming import MAX_ERROR_BYTES, StreamDecoderBase, decode_both
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.common.rows import to_json
from amqplens.decode.v1_0.rows import FRAME_KEYS_1_0

MAX_CONTENT_DEPTH = 64  # structured content nests at most this deep: deeper is noise, not content
FRAME_TEMPLATE = dict.fromkeys(FRAME_KEYS_1_0)
# (method head, content header head) per dialect: seed 000 "Method Frames"/"The Content Header",
# seed 003 "Method Frame Body Wire Format"/"Content Header Frame Wire Format"
_METHOD = {D0_9_DRAFT: struct.Struct(">HH"), AMQP_FAST: struct.Struct(">BBH")}
_HEADER = {D0_9_DRAFT: struct.Struct(">HHQ"), AMQP_FAST: struct.Struct(">BBQ")}
_HEADERS = {D0_9_DRAFT: {b"AMQP\x01\x01\x09\x01"}, AMQP_FAST: {b"AMQP\x01\x01\x00\x09"}}
_CHANNEL_ZERO = frozenset({"heartbeat", "trace", "meta"})


class DraftStreamDecoder(StreamDecoderBase):
    FRAME_TEMPLATE = FRAME_TEMPLATE

    def __init__(self, connection_id: str, *, dialect: str = D0_9_DRAFT, max_error_bytes: int = MAX_ERROR_BYTES, redact: bool = True) -> None:
        if dialect not in LAYOUTS:
            raise ValueError(f"dialect must be one of {sorted(LAYOUTS)}, not {dialect!r}")
        self._init_streams(connection_id, {d: DraftFramer(d, self, LAYOUTS[dialect], max_error_bytes) for d in (TO_SERVER, TO_CLIENT)})
        self.dialect, self.redact = dialect, redact
        self.frame_types = FAST_FRAME_TYPES if dialect == AMQP_FAST else FRAME_TYPES
        self._contents: dict[tuple, list] = {}  # (direction, channel) -> stack of [children left, body left, seq, hasher]
        self._messages = {TO_SERVER: 0, TO_CLIENT: 0}
        self._facts = {"connection_id": connection_id, "dialect": dialect, "dialect_source": None,
                       "client_protocol_header": None, "server_protocol_header": None,
                       "transport_end_reason": None, "transport_closed_by": None}  # fmt: skip

    # -- StreamConsumer ---------------------------------------------------------------------
    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        super().gap(direction, offset, length, ts_us)
        for key in [k for k in self._contents if k[0] == direction]:
            del self._contents[key]

    def _internal_error(self, framer: DraftFramer, exc: Exception, ts_us: int) -> None:
        super()._internal_error(framer, exc, 0)  # this codec's internal_error rows carry no time

    def _unaccounted(self, framer: DraftFramer) -> int:
        return max(super()._unaccounted(framer), 0)

    def _facts_dict(self) -> dict:
        return self._facts

    def _direction_facts(self, out: dict, d: str) -> None:
        out[f"messages_{d}"] = self._messages[d]

    # no handshake is decoded: any client bytes may hold a secret (StreamDecoderBase._may_hold_secret)

    # -- callbacks --------------------------------------------------------------------------
    def on_protocol_header(self, framer: DraftFramer, offset: int, ts_us: int, head: bytes) -> str:
        side = "client" if framer.direction == TO_SERVER else "server"
        self._facts[f"{side}_protocol_header"] = self._facts[f"{side}_protocol_header"] or head.hex()
        self._facts["dialect_source"] = "protocol_header"
        row = self._row(framer, offset, ts_us, "protocol_header", None, len(head))
        row["arguments_json"] = describe_json(head, to_json)
        ours = head in _HEADERS[self.dialect]
        if not ours:
            row["dialect"] = detect_protocol_header(head)
        self._append(row)
        return SYNCED if ours else OPAQUE

    def on_frame(self, framer: DraftFramer, offset: int, ts_us: int, frame, buf: bytes) -> None:
        self._facts["dialect_source"] = self._facts["dialect_source"] or "framing"
        kind = self.frame_types[frame.ftype]
        row = self._row(framer, offset, ts_us, kind, frame.channel, frame.total)
        payload = memoryview(buf)[frame.payload]
        try:
            row["decode_error"] = _HANDLERS.get(kind, DraftStreamDecoder._opaque)(self, row, framer.direction, frame, payload)
        except Exception as exc:
            row["decode_error"] = FrameError("internal_error", f"{type(exc).__name__}: {exc}")
            self._internal_errors += 1
        if row["decode_error"] is None and kind in _CHANNEL_ZERO and frame.channel != 0:
            row["decode_error"] = FrameError("channel_error", f"a {kind} frame on channel {frame.channel} (must be 0)")
        if row["decode_error"] is not None:
            self._frame_error(framer, row)
        self._append(row)

    # -- frames -----------------------------------------------------------------------------
    def _extras(self, frame) -> dict:
        extras = {"cycle": frame.cycle} if frame.cycle is not None else {}
        return {**extras, "extended": True} if frame.extended else extras

    def _method(self, row: dict, direction: str, frame, payload) -> str | None:
        head = _METHOD[self.dialect]
        if len(payload) < head.size:
            return FrameError("truncated", f"a method frame of {len(payload)} octets")
        ids = head.unpack_from(payload, 0)
        row["class_id"], row["method_id"] = ids[0], ids[1]
        args = {**self._extras(frame), "arguments": bytes(payload[head.size :]).hex()}
        if self.redact and direction == TO_SERVER and ids[0] in (1, 10):  # the connection class carries SASL responses
            args["arguments"] = f"<redacted len={len(payload) - head.size}>"
        row["arguments_json"] = to_json(args)
        if len(ids) == 3 and ids[2]:
            return FrameError("reserved_not_zero", f"the method's reserved short is {ids[2]}")
        return None

    def _header(self, row: dict, direction: str, frame, payload) -> str | None:
        head = _HEADER[self.dialect]
        if len(payload) < head.size:
            return FrameError("truncated", f"a content header of {len(payload)} octets")
        class_id, weight, body_size = head.unpack_from(payload, 0)
        row["class_id"], row["body_size"] = class_id, body_size
        stack = self._contents.setdefault((direction, frame.channel), [])
        error = None
        if stack and stack[-1][0] > 0:
            stack[-1][0] -= 1  # a child content of the open parent
        elif stack:
            error = FrameError("content_weight_mismatch", "a content header where the open content expects body frames")
            stack.clear()
        if len(stack) >= MAX_CONTENT_DEPTH:
            return FrameError("content_too_deep", f"structured content nested over {MAX_CONTENT_DEPTH} levels")
        if not stack:
            self._messages[direction] += 1
        seq = stack[0][2] if stack else self._messages[direction]
        stack.append([weight, body_size, seq, hashlib.sha256()])
        row["message_seq"] = seq
        row["properties_json"] = to_json({**self._extras(frame), "weight": weight, "depth": len(stack) - 1,
                                          "properties": bytes(payload[head.size :]).hex()})  # fmt: skip
        self._settle(row, stack)
        return error

    def _body(self, row: dict, direction: str, frame, payload) -> str | None:
        stack = self._contents.get((direction, frame.channel))
        if not stack:
            return FrameError("orphan_body", "a body frame without a content header before it")
        top = stack[-1]
        row["message_seq"] = top[2]
        if top[0] > 0:
            stack.clear()
            return FrameError("content_weight_mismatch", f"a body frame while {top[0]} child contents are still due")
        top[1] -= len(payload)
        top[3].update(payload)
        if top[1] < 0:
            stack.clear()
            return FrameError("body_overrun", "more body octets than the content header announced")
        self._settle(row, stack)
        return None

    @staticmethod
    def _settle(row: dict, stack: list) -> None:
        while stack and stack[-1][0] == 0 and stack[-1][1] == 0:
            done = stack.pop()
            if not stack:
                row["body_sha256"] = done[3].hexdigest()

    def _opaque(self, row: dict, direction: str, frame, payload) -> str | None:
        extras = self._extras(frame)
        if len(payload) or extras:
            row["arguments_json"] = to_json({**extras, "payload_length": len(payload)})
        if row["frame_type"] == "heartbeat" and len(payload):
            return FrameError("heartbeat_payload", f"{len(payload)} payload octets, must be 0")
        return None


_HANDLERS = {"method": DraftStreamDecoder._method, "header": DraftStreamDecoder._header, "body": DraftStreamDecoder._body}


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    return decode_both(DraftStreamDecoder, to_server, to_client, connection_id, **options)
