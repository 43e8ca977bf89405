"""The per-connection stream decoder of AMQP 0-10.

``Amqp010StreamDecoder`` is a ``StreamConsumer`` (``amqp_decode.tcp.records``)
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

from amqp_decode.detect import D0_10, describe, detect_protocol_header
from amqp_decode.errors import DecodeError
from amqp_decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionRecord
from amqp_decode.v0_10 import spec
from amqp_decode.v0_10.facts import ConnectionFacts
from amqp_decode.v0_10.framing import OPAQUE, SYNCED, DirectionFramer
from amqp_decode.v0_10.rows import FRAME_TEMPLATE, promote, promote_header, to_json
from amqp_decode.v0_10.segments import BODY, COMMAND, CONTROL, HEADER, SEGMENT_TYPES, ChannelState
from amqp_decode.v0_10.types import read_packed, read_struct, READERS

MAX_ERROR_BYTES = 4096  # raw bytes one error row keeps (its sha256 covers them all)
METHOD_PACK = 2  # controls and commands carry 2 octets of packing flags
_TABLES = {CONTROL: spec.CONTROLS, COMMAND: spec.COMMANDS}
_SECRETS = frozenset({("connection", "start-ok"), ("connection", "secure-ok")})


def decode_method(stype: int, payload) -> tuple:
    """(meta or None, args or None, sync, error) of a whole control or command segment."""
    if len(payload) < 2:
        return None, None, None, f"truncated: a {SEGMENT_TYPES[stype]} segment of {len(payload)} octets"
    meta = _TABLES[stype].get((payload[0], payload[1]))
    if meta is None:
        return None, None, None, f"unknown_{SEGMENT_TYPES[stype]}: class {payload[0]} code {payload[1]}"
    off, sync = 2, None
    try:
        if stype == COMMAND:
            header, off = read_struct("session.header", payload, off)
            sync = header["sync"]
        args, off = read_packed(meta[1], payload, off, len(payload), pack=METHOD_PACK, fields=meta[2])
    except DecodeError as exc:
        return meta, None, sync, f"{exc.reason}: {exc}"
    error = f"unexpected_payload: {len(payload) - off} octets after the arguments" if off != len(payload) else None
    return meta, args, sync, error


def decode_header(payload) -> tuple[dict, str | None]:
    """The struct32 entries of a header segment, by struct name."""
    out, off, error = {}, 0, None
    try:
        while off < len(payload):
            value, off = READERS["struct32"](payload, off, 0)
            out[value.pop("type", None) or f"struct-{value['class_code']}-{value['struct_code']}"] = value
    except DecodeError as exc:
        error = f"{exc.reason}: {exc}"
    return out, error


class Amqp010StreamDecoder:
    """Decode one AMQP 0-10 connection from its two byte streams.

    Options: ``max_error_bytes``, ``body_prefix_bytes`` (keep the first N body bytes
    of each message, default 0), ``redact`` (default True) and ``redaction_key``.
    """

    def __init__(self, connection_id: str, *, max_error_bytes: int = MAX_ERROR_BYTES, body_prefix_bytes: int = 0,
                 redact: bool = True, redaction_key: bytes | None = None) -> None:  # fmt: skip
        self.connection_id = connection_id
        self.dialect = D0_10
        self.redact = redact
        self.body_prefix_bytes = body_prefix_bytes
        self._facts = ConnectionFacts(connection_id, redaction_key, redact)
        self._frames: list[dict] = []
        self._errors: list[dict] = []
        self._framers = {d: DirectionFramer(d, self, max_error_bytes) for d in (TO_SERVER, TO_CLIENT)}
        self._channels: dict[tuple, ChannelState] = {}
        self._frame_counts = {TO_SERVER: 0, TO_CLIENT: 0}
        self._messages = {TO_SERVER: 0, TO_CLIENT: 0}
        self._decode_errors = self._internal_errors = 0
        self._secrets_end: int | None = None  # to_server offset after which no SASL response follows
        self._closed = False

    # -- StreamConsumer ---------------------------------------------------------------------
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        framer = self._framers.get(direction)
        if framer is None or self._closed:
            return
        try:
            framer.feed(offset, ts_us, data)
        except Exception as exc:  # a decoder bug must not fail the task: keep the bytes as an error
            self._internal_error(framer, exc, ts_us)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        framer = self._framers.get(direction)
        if framer is None or self._closed:
            return
        try:
            framer.gap(offset, length, ts_us)
            for (d, _), state in self._channels.items():
                if d == direction:
                    state.reset()
        except Exception as exc:
            self._internal_error(framer, exc, ts_us)

    def close(self, connection: ConnectionRecord | None = None) -> None:
        if self._closed:
            return
        for framer in self._framers.values():
            try:
                framer.close()
            except Exception as exc:
                self._internal_error(framer, exc, 0)
        if connection is not None:
            self._facts.facts["transport_end_reason"] = connection.end_reason
            self._facts.facts["transport_closed_by"] = connection.closed_by
        self._closed = True

    # -- output -----------------------------------------------------------------------------
    def drain_frames(self) -> list[dict]:
        rows, self._frames = self._frames, []
        return rows

    def drain_errors(self) -> list[dict]:
        rows, self._errors = self._errors, []
        return rows

    def connection_facts(self) -> dict:
        out = dict(self._facts.facts)
        for d, framer in self._framers.items():
            out[f"stream_bytes_{d}"] = framer.fed
            out[f"frame_bytes_{d}"] = framer.frame_bytes
            out[f"error_bytes_{d}"] = framer.error_bytes
            out[f"gap_bytes_{d}"] = framer.gap_bytes
            out[f"frames_{d}"] = self._frame_counts[d]
            out[f"messages_{d}"] = self._messages[d]
        out["frame_decode_errors"] = self._decode_errors
        out["internal_errors"] = self._internal_errors
        return out

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
        row["arguments_json"] = to_json(describe(head))
        self._append(row, framer.direction)
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
            row["decode_error"] = f"internal_error: {type(exc).__name__}: {exc}"
            self._internal_errors += 1
        if row["decode_error"] is None and (flags & 0x30 or r1 or r2 or track > 0x0F):
            row["decode_error"] = "reserved_bits: reserved bits of the frame header are set"
        if row["decode_error"] is not None:
            self._decode_errors += 1
        self._append(row, framer.direction)

    def on_error(self, framer: DirectionFramer, region) -> None:
        raw, detail = bytes(region.raw), region.detail
        if self.redact and framer.direction == TO_SERVER and (self._secrets_end is None or region.offset < self._secrets_end):
            raw, detail = None, detail + " (raw bytes withheld: they may hold credentials)"
        self._errors.append({
            "connection_id": self.connection_id, "direction": framer.direction, "stream_offset": region.offset,
            "length": region.length, "reason": region.reason, "detail": detail, "raw": raw,
            "raw_sha256": region.hasher.hexdigest(), "raw_length": region.length, "ts_us": region.ts_us,
        })  # fmt: skip

    # -- frames -----------------------------------------------------------------------------
    def _row(self, framer, offset: int, ts_us: int, kind: str, channel, size: int) -> dict:
        row = FRAME_TEMPLATE.copy()
        row.update(connection_id=self.connection_id, direction=framer.direction, stream_offset=offset, ts_us=ts_us,
                   dialect=D0_10, frame_type=kind, channel=channel, size=size)  # fmt: skip
        return row

    def _append(self, row: dict, direction: str) -> None:
        self._frames.append(row)
        self._frame_counts[direction] += 1

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
                row["method_name"] = meta[1] if meta else None
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
            return "segment_too_large: the segment's bytes were not kept"
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
        class_name, name = meta[0], meta[1]
        if class_name == "session":
            self._session(direction, channel, name, args)
        elif class_name == "connection":
            self._facts.on_method(direction, class_name, name, args)  # redacts secrets in place
            if direction == TO_SERVER and name in ("tune-ok", "open") and self._secrets_end is None:
                self._secrets_end = row["stream_offset"] + row["size"]
        if stype == COMMAND and meta[3] and not flags & 4:  # header and body segments follow
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
            for d in (TO_SERVER, TO_CLIENT):
                other = self._channels.get((d, channel))
                if other is not None:
                    other.forget_ids()

    # -- safety -----------------------------------------------------------------------------
    def _internal_error(self, framer: DirectionFramer, exc: Exception, ts_us: int) -> None:
        self._internal_errors += 1
        lost = framer.fed - framer.frame_bytes - framer.error_bytes
        framer.pending, framer.chunks, framer.chunks_len, framer.region = b"", [], 0, None
        framer.base = framer.expected
        framer.mode = OPAQUE
        framer.opaque_reason = ("internal_error", "the decoder failed; later bytes of this direction are kept raw")
        framer.error_bytes += lost
        if lost > 0:
            self._errors.append({
                "connection_id": self.connection_id, "direction": framer.direction, "stream_offset": framer.base - lost,
                "length": lost, "reason": "internal_error", "detail": f"{type(exc).__name__}: {exc}", "raw": None,
                "raw_sha256": None, "raw_length": lost, "ts_us": ts_us,
            })  # fmt: skip


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    dec = Amqp010StreamDecoder(connection_id, **options)
    if to_server:
        dec.data(TO_SERVER, 0, 0, to_server)
    if to_client:
        dec.data(TO_CLIENT, 0, 0, to_client)
    dec.close()
    return dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
