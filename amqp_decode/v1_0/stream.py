"""The per-connection stream decoder of AMQP 1.0.

``Amqp10StreamDecoder`` is a ``StreamConsumer`` (``amqp_decode.tcp.records``)
with the same shape as ``Amqp091StreamDecoder``: the TCP reassembler feeds it
the in-order bytes of both directions, gaps and finally ``close``; rows are
drained by the caller:

- ``drain_frames()``: one row per protocol header and frame (``rows.FRAME_KEYS_1_0``);
- ``drain_errors()``: one row per run of bytes that is not a frame (``rows.ERROR_KEYS``);
- ``connection_facts()``: container ids, limits, capabilities, SASL, close, and
  the byte and frame counts per direction.

Nothing raises out of ``data``/``gap``/``close``: bad bytes become error rows
(``framing``), a performative that does not decode a ``decode_error`` on its row.
"""

from __future__ import annotations

from amqp_decode.detect import D1_0, D1_0_SASL, D1_0_TLS, describe, detect_protocol_header
from amqp_decode.errors import DecodeError
from amqp_decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionRecord
from amqp_decode.v1_0.composites import NAMES, PERFORMATIVES, SASL_FRAMES, code_of, fields, to_json
from amqp_decode.v1_0.facts import ConnectionFacts
from amqp_decode.v1_0.framing import AMQP_FRAME, OPAQUE, SYNCED, DirectionFramer
from amqp_decode.v1_0.messages import MessageTracker
from amqp_decode.v1_0.rows import FRAME_TEMPLATE, promote
from amqp_decode.v1_0.types import Described, decode

MAX_FRAME_SIZE = 128 << 20  # hard cap: no real peer negotiates more; a bigger claim is an error, never a buffer
RESYNC_MAX_FRAME = 1 << 20  # largest frame believed while searching, when no max-frame-size is known
MAX_ERROR_BYTES = 4096  # raw bytes one error row keeps (its sha256 covers them all)
MIN_MAX_FRAME_SIZE = 512  # Part 2 §2.7.1: no peer may announce less
# sasl-init and sasl-response performatives as they start on the wire (smallulong, ulong, symbol descriptors)
_SECRET_MARKERS = (b"\x00\x53\x41", b"\x00\x53\x43", b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x41",
                   b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x43", b"amqp:sasl-init", b"amqp:sasl-response")  # fmt: skip
_LAYER = {D1_0: "amqp", D1_0_SASL: "sasl"}
_FRAME_TYPE_NAME = {0: "amqp", 1: "sasl"}
_PEER = {TO_SERVER: "server", TO_CLIENT: "client"}  # whose max-frame-size limits frames in this direction


class Amqp10StreamDecoder:
    """Decode one AMQP 1.0 connection from its two byte streams.

    Options: ``max_frame_size`` (hard cap on any frame), ``resync_max_frame``,
    ``max_error_bytes``, ``body_prefix_bytes`` (keep the first N body bytes of each
    message, default 0), ``redact`` (default True) and ``redaction_key``.
    """

    def __init__(
        self,
        connection_id: str,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        resync_max_frame: int = RESYNC_MAX_FRAME,
        max_error_bytes: int = MAX_ERROR_BYTES,
        body_prefix_bytes: int = 0,
        redact: bool = True,
        redaction_key: bytes | None = None,
    ) -> None:
        self.connection_id = connection_id
        self.dialect = D1_0
        self.max_frame_size = max_frame_size
        self.resync_max_frame = resync_max_frame
        self.redact = redact
        self._facts = ConnectionFacts(connection_id, redaction_key, redact)
        self._frames: list[dict] = []
        self._errors: list[dict] = []
        self._framers = {d: DirectionFramer(d, self, max_error_bytes) for d in (TO_SERVER, TO_CLIENT)}
        self._messages = {d: MessageTracker(body_prefix_bytes) for d in (TO_SERVER, TO_CLIENT)}
        self._layer: dict[str, str | None] = {TO_SERVER: None, TO_CLIENT: None}
        self._frame_counts = {TO_SERVER: 0, TO_CLIENT: 0}
        self._decode_errors = 0
        self._internal_errors = 0
        self._secrets_end: int | None = None  # to_server offset after which no SASL frame follows
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
            self._messages[direction].reset()
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
        for tracker in self._messages.values():
            tracker.reset()
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
            out[f"messages_{d}"] = self._messages[d].completed
            out[f"incomplete_messages_{d}"] = self._messages[d].abandoned + self._messages[d].open_messages
            out[f"orphan_transfers_{d}"] = self._messages[d].orphans
        out["frame_decode_errors"] = self._decode_errors
        out["internal_errors"] = self._internal_errors
        return out

    # -- what the framers ask ---------------------------------------------------------------
    def frame_limit(self, direction: str) -> int:
        announced = self._facts.facts[f"{_PEER[direction]}_max_frame_size"]
        if announced is None:
            return self.max_frame_size
        return min(max(announced, MIN_MAX_FRAME_SIZE), self.max_frame_size)

    def resync_limit(self, direction: str) -> int:
        announced = self._facts.facts[f"{_PEER[direction]}_max_frame_size"]
        return min(max(announced, MIN_MAX_FRAME_SIZE) if announced is not None else self.resync_max_frame, self.max_frame_size)

    def plausible_body(self, ftype: int, body: memoryview) -> int:
        """0: not a frame of this type; 1: could be (an empty frame); 2: starts with a known performative."""
        if not len(body):
            return 1 if ftype == AMQP_FRAME else 0
        if body[0] != 0x00:
            return 0
        try:
            descriptor, _ = decode(body, 1)
        except DecodeError:
            return 0
        return 2 if code_of(descriptor) in (PERFORMATIVES if ftype == AMQP_FRAME else SASL_FRAMES) else 0

    # -- callbacks --------------------------------------------------------------------------
    def on_protocol_header(self, framer: DirectionFramer, offset: int, ts_us: int, head: bytes) -> tuple:
        name = detect_protocol_header(head)
        direction = framer.direction
        self._facts.on_protocol_header(direction, head, name)
        if direction == TO_SERVER and name == D1_0 and self._secrets_end is None:
            self._secrets_end = offset + len(head)
        row = self._row(framer, offset, ts_us, "protocol_header", None, len(head))
        row["arguments_json"] = to_json(describe(head))
        self._append(row, direction)
        self._layer[direction] = _LAYER.get(name)
        if name in _LAYER:
            return (SYNCED,)
        if name == D1_0_TLS:
            return (OPAQUE, "tls", "TLS after the protocol header AMQP 2 1 0 0: recorded, not decoded")
        return (OPAQUE, "unsupported_dialect", f"bytes after the protocol header {head.hex()}, which is not AMQP 1.0")

    def on_frame(self, framer: DirectionFramer, offset: int, ts_us: int, ftype: int, channel: int, frame: memoryview, doff: int) -> None:
        direction = framer.direction
        if self._facts.facts["dialect_source"] is None:
            self._facts.facts["dialect_source"] = "framing"
        row = self._row(framer, offset, ts_us, _FRAME_TYPE_NAME[ftype], channel, len(frame))
        try:
            self._frame_body(row, direction, ftype, channel, frame[doff * 4 :])
        except Exception as exc:  # a bug decoding one frame costs that frame's fields, not the stream
            row["decode_error"] = f"internal_error: {type(exc).__name__}: {exc}"
            self._internal_errors += 1
        if row["decode_error"] is not None:
            self._decode_errors += 1
        self._append(row, direction)

    def on_error(self, framer: DirectionFramer, region) -> None:
        raw = bytes(region.raw)
        detail = region.detail
        if self._may_hold_secret(framer.direction, region.offset, region.reason, raw):
            raw = None
            detail += " (raw bytes withheld: they may hold credentials)"
        self._errors.append(
            {
                "connection_id": self.connection_id,
                "direction": framer.direction,
                "stream_offset": region.offset,
                "length": region.length,
                "reason": region.reason,
                "detail": detail,
                "raw": raw,
                "raw_sha256": region.hasher.hexdigest(),
                "raw_length": region.length,
                "ts_us": region.ts_us,
            }
        )

    # -- frames -----------------------------------------------------------------------------
    def _row(self, framer, offset: int, ts_us: int, kind: str, channel, size: int) -> dict:
        row = FRAME_TEMPLATE.copy()
        row["connection_id"] = self.connection_id
        row["direction"] = framer.direction
        row["stream_offset"] = offset
        row["ts_us"] = ts_us
        row["dialect"] = D1_0
        row["frame_type"] = kind
        row["channel"] = channel
        row["size"] = size
        return row

    def _append(self, row: dict, direction: str) -> None:
        self._frames.append(row)
        self._frame_counts[direction] += 1

    def _frame_body(self, row: dict, direction: str, ftype: int, channel: int, body: memoryview) -> None:
        if not len(body):
            if ftype == AMQP_FRAME:
                row["frame_type"] = "empty"
            else:
                row["decode_error"] = "empty_sasl_frame: a SASL frame must carry a SASL performative"
            return
        try:
            value, end = decode(body, 0)
        except DecodeError as exc:
            row["decode_error"] = f"{exc.reason}: {exc}"
            return
        if not isinstance(value, Described):
            row["decode_error"] = f"not_a_performative: the frame body starts with a {type(value).__name__}, not a described type"
            return
        code = code_of(value.descriptor)
        row["descriptor"] = code if code is not None else (value.descriptor if type(value.descriptor) is int and value.descriptor < 1 << 63 else None)
        args = fields(code, value.value) if code in PERFORMATIVES or code in SASL_FRAMES else None
        if args is None:
            row["decode_error"] = f"unknown_performative: descriptor {value.descriptor!r}"
            row["arguments_json"] = to_json(value)
            return
        name = row["performative"] = NAMES[code]
        error = self._layer_error(direction, ftype, code)
        self._facts.on_performative(direction, name, args)  # may redact args
        promote(row, args)
        if code == 0x14:  # transfer
            error = self._transfer(row, direction, channel, args, body[end:]) or error
        elif end != len(body):
            error = error or f"unexpected_payload: {len(body) - end} bytes after the {name} performative"
        row["arguments_json"] = to_json(args)
        row["decode_error"] = error

    def _layer_error(self, direction: str, ftype: int, code: int) -> str | None:
        sasl = code in SASL_FRAMES
        if sasl != (ftype != AMQP_FRAME):
            return f"frame_type_mismatch: a {'SASL' if sasl else 'AMQP'} performative in a frame of type {ftype}"
        layer = self._layer[direction]
        if layer is not None and layer != ("sasl" if sasl else "amqp"):
            return f"layer_mismatch: a {'SASL' if sasl else 'AMQP'} frame after the {layer.upper()} protocol header"
        return None

    def _transfer(self, row: dict, direction: str, channel: int, args: dict, payload: memoryview) -> str | None:
        if row["handle"] is None:
            return "bad_transfer: no handle, so no link to reassemble the message on"
        seq, delivery_id, completion, error = self._messages[direction].on_transfer(
            (channel, row["handle"]), row["delivery_id"], row["delivery_tag_bin"], args.get("more"), args.get("aborted"), payload
        )
        row["message_seq"] = seq
        if row["delivery_id"] is None:
            row["delivery_id"] = delivery_id
        if completion is not None:
            sections, row["body_size"], row["body_sha256"], row["body_prefix"] = completion
            row["properties_json"] = to_json(sections) if sections else None
        return error

    # -- safety -----------------------------------------------------------------------------
    def _may_hold_secret(self, direction: str, offset: int, reason: str, raw: bytes) -> bool:
        if not self.redact or direction != TO_SERVER or reason == "tls":
            return False
        if any(m in raw for m in _SECRET_MARKERS):
            return True
        # a run that does not show a SASL descriptor may still start inside one (after a gap,
        # or a frame cut short): before the client's AMQP header, trust none
        return self._secrets_end is None or offset < self._secrets_end

    def _internal_error(self, framer: DirectionFramer, exc: Exception, ts_us: int) -> None:
        self._internal_errors += 1
        lost = framer.fed - framer.frame_bytes - framer.error_bytes
        framer.pending, framer.chunks, framer.chunks_len, framer.region = b"", [], 0, None
        framer.base = framer.expected
        framer.mode = OPAQUE
        framer.opaque_reason = ("internal_error", "the decoder failed; later bytes of this direction are kept raw")
        framer.error_bytes += lost
        if lost <= 0:
            return
        self._errors.append(
            {
                "connection_id": self.connection_id,
                "direction": framer.direction,
                "stream_offset": framer.base - lost,
                "length": lost,
                "reason": "internal_error",
                "detail": f"{type(exc).__name__}: {exc}",
                "raw": None,
                "raw_sha256": None,
                "raw_length": lost,
                "ts_us": ts_us,
            }
        )


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    dec = Amqp10StreamDecoder(connection_id, **options)
    if to_server:
        dec.data(TO_SERVER, 0, 0, to_server)
    if to_client:
        dec.data(TO_CLIENT, 0, 0, to_client)
    dec.close()
    return dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
