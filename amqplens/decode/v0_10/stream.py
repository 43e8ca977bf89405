"""The per-connection stream decoder of AMQP 0-10.

``Amqp010StreamDecoder`` is a ``StreamConsumer`` (``amqplens.decode.tcp.records``)
with the siblings' shape: the TCP reassembler feeds it the in-order bytes of
both directions, gaps and finally ``close``; rows are drained by the caller:

- ``drain_frames()``: one row per protocol header and frame (``rows.FRAME_KEYS_0_10``);
- ``drain_errors()``: one row per run of bytes that is not a frame (``rows.ERROR_KEYS``);
- ``connection_facts()``: limits, peer identity, SASL mechanism and user, vhost,
  close, and the byte and frame counts per direction.

A control, command or header segment is decoded when its last frame arrives;
its fields go on that frame's row (every frame of the segment carries the
class, the control or command, and the command id). Nothing raises out of
``data``/``gap``/``close``.
"""

from __future__ import annotations

from collections.abc import Mapping

from amqplens.decode.errors import FrameError
from amqplens.decode.detect import D0_10, detect_protocol_header, describe_json
from amqplens.decode.errors import DecodeError
from amqplens.decode.streaming import MAX_ERROR_BYTES, StreamDecoderBase, decode_both
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_10 import spec
from amqplens.decode.v0_10.facts import ConnectionFacts
from amqplens.decode.v0_10.framing import OPAQUE, SYNCED, DirectionFramer
from amqplens.decode.v0_10.rows import FRAME_TEMPLATE, promote, promote_header, to_json
from amqplens.decode.v0_10.spec_types import Method
from amqplens.decode.v0_10.segments import BODY, COMMAND, CONTROL, HEADER, SEGMENT_TYPES, ChannelState
from amqplens.decode.v0_10.types import read_packed, read_struct, READERS

METHOD_PACK = 2  # controls and commands carry 2 octets of packing flags
_TABLES: dict[int, Mapping[tuple[int, int], Method]] = {CONTROL: spec.CONTROLS, COMMAND: spec.COMMANDS}
_SECRETS = frozenset({("connection", "start-ok"), ("connection", "secure-ok")})


def decode_method(stype: int, payload) -> tuple:
    """(meta or None, args or None, sync, error) of a whole control or command segment."""
    if len(payload) < 2:
        return None, None, None, FrameError("truncated", f"a {SEGMENT_TYPES[stype]} segment of {len(payload)} octets")
    meta = _TABLES[stype].get((payload[0], payload[1]))
    if meta is None:
        return None, None, None, f"unknown_{SEGMENT_TYPES[stype]}: class {payload[0]} code {payload[1]}"
    off, sync = 2, None
    try:
        if stype == COMMAND:
            header, off = read_struct("session.header", payload, off)
            sync = header["sync"]
        args, off = read_packed(meta.name, payload, off, len(payload), pack=METHOD_PACK, fields=meta.fields)
    except DecodeError as exc:
        return meta, None, sync, FrameError(exc.reason, str(exc))
    error = FrameError("unexpected_payload", f"{len(payload) - off} octets after the arguments") if off != len(payload) else None
    return meta, args, sync, error


def decode_header(payload) -> tuple[dict, str | None]:
    """The struct32 entries of a header segment, by struct name."""
    out, off, error = {}, 0, None
    try:
        while off < len(payload):
            value, off = READERS["struct32"](payload, off, 0)
            out[value.pop("type", None) or f"struct-{value['class_code']}-{value['struct_code']}"] = value
    except DecodeError as exc:
        error = FrameError(exc.reason, str(exc))
    return out, error


class Amqp010StreamDecoder(StreamDecoderBase):
    """Decode one AMQP 0-10 connection from its two byte streams.

    Options: ``max_error_bytes``, ``body_prefix_bytes`` (keep the first N body bytes
    of each message, default 0), ``redact`` (default True) and ``redaction_key``.
    """

    FRAME_TEMPLATE = FRAME_TEMPLATE

    def __init__(self, connection_id: str, *, max_error_bytes: int = MAX_ERROR_BYTES, body_prefix_bytes: int = 0,
                 redact: bool = True, redaction_key: bytes | None = None) -> None:  # fmt: skip
        self._init_streams(connection_id, {d: DirectionFramer(d, self, max_error_bytes) for d in (TO_SERVER, TO_CLIENT)})
        self.dialect = D0_10
        self.redact = redact
        self.body_prefix_bytes = body_prefix_bytes
        self._facts = ConnectionFacts(connection_id, redaction_key, redact)
        self._channels: dict[tuple, ChannelState] = {}
        self._messages = {TO_SERVER: 0, TO_CLIENT: 0}
        self._secrets_end: int | None = None  # to_server offset after which no SASL response follows

    # -- StreamConsumer hooks ----------------------------------------------------------------
    def _reset_direction(self, direction: str) -> None:
        for (d, _), state in self._channels.items():
            if d == direction:
                state.reset()

    def _direction_facts(self, out: dict, d: str) -> None:
        out[f"messages_{d}"] = self._messages[d]

    def _may_hold_secret(self, direction: str, offset: int, reason: str, raw: bytes) -> bool:
        return self.redact and direction == TO_SERVER and (self._secrets_end is None or offset < self._secrets_end)

    # -- what the framer asks ----------------------------------------------------------------
    def plausible_payload(self, stype: int, payload) -> int:
        if stype in (CONTROL, COMMAND):
            return 2 if len(payload) >= 2 and (payload[0], payload[1]) in _TABLES[stype] else 0
        return 1

    def on_protocol_header(self, framer: DirectionFramer, offset: int, ts_us: int, head: bytes) -> tuple:
        name = detect_protocol_header(head)
        f = self._facts.facts
        side = "client" if framer.direction == TO_SERVER else "server"
        if f[f"{side}_protocol_header"] is None:
            f[f"{side}_protocol_header"] = head.hex()
        if side == "server" and f["client_protocol_header"] not in (None, head.hex()):
            f["protocol_rejected"] = True
        f["dialect_source"] = "protocol_header"
        row = self._row(framer, offset, ts_us, "protocol_header", None, len(head))
        row["arguments_json"] = describe_json(head, to_json)
        self._append(row)
        if name == D0_10:
            return (SYNCED,)
        return (OPAQUE, "unsupported_dialect", f"bytes after the protocol header {head.hex()}, which is not AMQP 0-10")

    def on_frame(self, framer: DirectionFramer, offset: int, ts_us: int, header: tuple, payload) -> None:
        flags, stype, size, r1, track, channel, r2 = header
        if self._facts.facts["dialect_source"] is None:
            self._facts.facts["dialect_source"] = "framing"
        row = self._row(framer, offset, ts_us, SEGMENT_TYPES[stype], channel, size)
        row["track"] = track
        row["first_segment"], row["last_segment"] = bool(flags & 8), bool(flags & 4)
        row["first_frame"], row["last_frame"] = bool(flags & 2), bool(flags & 1)
        try:
            self._frame(row, framer.direction, flags, stype, channel, payload)
        except Exception as exc:  # a bug decoding one frame costs that frame's fields, not the stream
            row["decode_error"] = FrameError("internal_error", f"{type(exc).__name__}: {exc}")
            self._internal_errors += 1
        if row["decode_error"] is None and (flags & 0x30 or r1 or r2 or track > 0x0F):
            row["decode_error"] = FrameError("reserved_bits", "reserved bits of the frame header are set")
        if row["decode_error"] is not None:
            self._frame_error(framer, row)
        self._append(row)

    # -- frames -----------------------------------------------------------------------------
    def _frame(self, row: dict, direction: str, flags: int, stype: int, channel: int, payload) -> None:
        state = self._channels.get((direction, channel))
        if state is None:
            state = self._channels[(direction, channel)] = ChannelState(self.body_prefix_bytes)
        assembly = state.assembly if stype in (HEADER, BODY) else None
        error, complete = state.on_frame(flags, stype, payload)
        if stype in (CONTROL, COMMAND):
            head = state.head
            meta = _TABLES[stype].get(head) if head is not None else None
            if head is not None:
                row["class_id"], row["method_id"] = head
                row["class_name"] = spec.CLASSES.get(head[0])
                row["method_name"] = meta.name if meta else None
            if stype == COMMAND:
                row["command_id"] = state.command_id
        elif assembly is not None:
            row["class_id"], row["class_name"] = assembly[0], spec.CLASSES.get(assembly[0])
            row["command_id"], row["message_seq"] = assembly[2], assembly[3]
        if complete:  # an error about what came before does not stop this segment's decoding; it is told first
            segment_error = self._segment(row, direction, flags, stype, state, channel)
            error = error or segment_error
        row["decode_error"] = error

    def _segment(self, row: dict, direction: str, flags: int, stype: int, state: ChannelState, channel: int) -> str | None:
        if stype == BODY:
            body = state.take_body()
            if body is not None:
                row["body_size"], row["body_sha256"] = body.size, body.hasher.hexdigest()
                row["body_prefix"] = bytes(body.prefix) if body.keep else None
            return None
        payload = state.segment_bytes()
        if payload is None:
            return FrameError("segment_too_large", "the segment's bytes were not kept")
        if stype == HEADER:
            structs, error = decode_header(memoryview(payload))
            row["properties_json"] = to_json(structs)
            promote_header(row, structs)
            content = structs.get("message.message-properties", {})
            if isinstance(content.get("content_length"), int):
                row["body_size"] = content["content_length"]
            return error
        meta, args, sync, error = decode_method(stype, memoryview(payload))
        row["sync"] = sync
        if meta is None or args is None:
            return error
        class_name, name = meta.class_name, meta.name
        if class_name == "session":
            self._session(direction, channel, name, args)
        elif class_name == "connection":
            self._facts.on_method(direction, class_name, name, args)  # redacts secrets in place
            if direction == TO_SERVER and name in ("tune-ok", "open") and self._secrets_end is None:
                self._secrets_end = row["stream_offset"] + row["size"]
        if stype == COMMAND and meta.has_segments and not flags & 4:  # header and body segments follow
            self._messages[direction] += 1
            state.assembly = (row["class_id"], row["method_id"], state.command_id, self._messages[direction])
            row["message_seq"] = self._messages[direction]
        promote(row, class_name, name, args)
        row["arguments_json"] = to_json(args)
        return error

    def _session(self, direction: str, channel: int, name: str, args: dict) -> None:
        """Session controls that move the command-id sequence of their sender."""
        state = self._channels[(direction, channel)]
        if name == "command-point" and isinstance(args.get("command_id"), int):
            state.set_command_point(args["command_id"])
        elif name in ("attach", "attached", "detach", "detached"):
            # Each side numbers its own commands from its own command-point: the peer's attached
            # must not wipe the ids the sender has just set (Qpid sends attach, command-point, then
            # the broker answers attached).
            state.forget_ids()


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    return decode_both(Amqp010StreamDecoder, to_server, to_client, connection_id, **options)
