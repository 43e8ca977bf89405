"""The per-connection stream decoder of AMQP 1.0.

``Amqp10StreamDecoder`` is a ``StreamConsumer`` (``amqplens.decode.tcp.records``)
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

from typing import Unpack, cast

from amqplens.decode.errors import FrameError
from amqplens.decode.detect import D1_0, D1_0_SASL, D1_0_TLS, detect_protocol_header, describe_json
from amqplens.decode.errors import DecodeError
from amqplens.decode.streaming import FramedOptions, StreamDecoderBase, decode_both
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionRecord
from amqplens.decode.v1_0.composites import NAMES, PERFORMATIVES, SASL_FRAMES, code_of, fields, to_json
from amqplens.decode.v1_0.facts import ConnectionFacts
from amqplens.decode.v1_0 import hotpath
from amqplens.decode.v1_0.framing import AMQP_FRAME, OPAQUE, SYNCED, DirectionFramer
from amqplens.decode.v1_0.messages import MessageTracker
from amqplens.decode.v1_0.rows import FRAME_TEMPLATE, promote
from amqplens.decode.v1_0.types import Described, decode

MIN_MAX_FRAME_SIZE = 512  # Part 2 §2.7.1: no peer may announce less
# sasl-init and sasl-response performatives as they start on the wire (smallulong, ulong, symbol descriptors)
_SECRET_MARKERS = (b"\x00\x53\x41", b"\x00\x53\x43", b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x41",
                   b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x43", b"amqp:sasl-init", b"amqp:sasl-response")  # fmt: skip
_LAYER: dict[str | None, str] = {D1_0: "amqp", D1_0_SASL: "sasl"}  # by protocol header name (None: none)
_FRAME_TYPE_NAME = {0: "amqp", 1: "sasl"}
_PEER = {TO_SERVER: "server", TO_CLIENT: "client"}  # whose max-frame-size limits frames in this direction

# On the compiled path the reference's performatives come from a bounded memo when their frame body was seen before:
# real load repeats them connection after connection (the 1.0 load capture's short connections: one distinct body
# for 2,408 detaches, ends and closes each, two for 2,410 begins; opens half, attaches never: their link names). The memo
# holds what the body alone decides (the descriptor, the performative, its arguments as the facts read them, the
# promoted columns, the JSON, the bytes after it); the row's layer error, the facts and the rest are the frame's own.
# Only the performatives of a body that starts with their small-ulong descriptor (``00 53 code``) are looked up.
# Never remembered: every SASL frame (credentials: held no longer than their row needs), transfers (their message
# state), flows and dispositions (the walk's kinds: what reaches the reference is a long connection's small segments,
# whose ids and credit differ frame by frame; remembered, they cost the 1.0 slice's long connections 7% of their
# decode in misses and churned the memo). At most MEMO_ENTRIES bodies of at most MEMO_BYTES, emptied when full. The
# facts' handlers of the performatives remembered (open, close) read the arguments and never change them. The
# reference (``decode.compiled=off``) decodes every frame; the tests compare the two.
MEMO_ENTRIES = 2048
MEMO_BYTES = 1024
_MEMO_CODES = frozenset(c for c in PERFORMATIVES if c not in (0x13, 0x14, 0x15))
_MEMO: dict[bytes, tuple] = {}


class Amqp10StreamDecoder(StreamDecoderBase):
    """Decode one AMQP 1.0 connection from its two byte streams.

    Options: ``max_frame_size`` (hard cap on any frame), ``resync_max_frame``,
    ``max_error_bytes``, ``body_prefix_bytes`` (keep the first N body bytes of each
    message, default 0), ``redact`` (default True) and ``redaction_key``.
    """

    FRAME_TEMPLATE = FRAME_TEMPLATE

    def __init__(self, connection_id: str, compiled: bool = False, **options: Unpack[FramedOptions]) -> None:
        self._messages = self._init_framed(connection_id, DirectionFramer, MessageTracker, ConnectionFacts, **options)
        self.dialect = D1_0
        self._layer: dict[str, str | None] = {TO_SERVER: None, TO_CLIENT: None}
        self._secrets_end: int | None = None  # to_server offset after which no SASL frame follows
        # ``compiled``: flows and dispositions through the numba walk as columns (``hotpath``); the same rows
        self.hot_kernel = hotpath.load_kernel() if compiled else None
        self.hot_min_bytes = hotpath.MIN_BYTES  # buffers smaller than this stay on the Python path (tests lower it)
        self._held = None
        if self.hot_kernel is not None:
            from amqplens.decode.v1_0 import ahead

            self._ahead = ahead
            self._held = ahead.Held()  # the compiled path decodes a direction ahead of the other

    # -- input: the compiled path holds segments and decodes each direction's at once (``ahead``) ---------------
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        held = self._held
        if held is not None and (held.segments or self._ahead.steady(self)):
            if direction in self._framers and not self._closed:
                held.segments.append((direction, offset, ts_us, data))
                held.bytes += len(data)
                if held.bytes >= self._ahead.MAX_BYTES:
                    self._ahead.catch_up(self, held)
            return
        super().data(direction, offset, ts_us, data)

    def data_run(self, run) -> None:
        """``data`` of each segment of a run (the reassembler's in-order runs), held whole where ``data`` holds."""
        if self._held is None:
            for segment in run.segments():
                self.data(*segment)
            return
        from amqplens.decode.v0_9_1.ahead import hold_run

        hold_run(self, self._held, run, self._ahead.steady, self._ahead.catch_up, self._ahead.MAX_BYTES)

    def catch_up(self) -> None:
        """Decode the held segments (before anything reads the rows, the facts or the framers' state)."""
        if self._held is not None and self._held.segments:
            self._ahead.catch_up(self, self._held)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        self.catch_up()
        super().gap(direction, offset, length, ts_us)

    def close(self, connection: ConnectionRecord | None = None) -> None:
        self.catch_up()
        super().close(connection)

    def drain_errors(self) -> list[dict]:
        self.catch_up()
        return super().drain_errors()

    def connection_facts(self) -> dict:
        self.catch_up()
        return super().connection_facts()

    def drain_frame_errors(self) -> list[dict]:
        self.catch_up()
        return super().drain_frame_errors()

    def hot_ready(self, direction: str) -> bool:
        """Whether the compiled walk may frame ``direction`` now: not in the SASL layer (its frames are SASL's)."""
        return self._layer[direction] != "sasl"

    # -- output: the compiled path's rows stay columns until the batch is built ------------------------------
    def drain_frames(self) -> list[dict]:
        """Frame rows as dicts, the compiled path's rows too (``drain_frame_parts`` keeps those columnar)."""
        out: list[dict] = []
        for part in self.drain_frame_parts():
            out.extend(part.to_rows() if isinstance(part, hotpath.Frame10Batch) else part)
        return out

    def drain_frame_parts(self) -> list:
        """Frame rows in wire order: ``[rows]`` (dicts), or ``[Frame10Batch]`` when the compiled path made some."""
        self.catch_up()
        items = super().drain_frames()
        if not any(isinstance(item, (hotpath.Hot10Rows, hotpath.Ordered10)) for item in items):
            return [items] if items else []
        return [hotpath.Frame10Batch(items)]

    # -- output -----------------------------------------------------------------------------
    def _direction_facts(self, out: dict, d: str) -> None:
        super()._direction_facts(out, d)
        out[f"orphan_transfers_{d}"] = self._messages[d].orphans

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
        row["arguments_json"] = describe_json(head, to_json)
        self._append(row)
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
            row["decode_error"] = FrameError("internal_error", f"{type(exc).__name__}: {exc}")
            self._internal_errors += 1
        if row["decode_error"] is not None:
            self._frame_error(framer, row)
        self._append(row)

    # -- frames -----------------------------------------------------------------------------
    def _frame_body(self, row: dict, direction: str, ftype: int, channel: int, body: memoryview) -> None:
        if not len(body):
            if ftype == AMQP_FRAME:
                row["frame_type"] = "empty"
            else:
                row["decode_error"] = FrameError("empty_sasl_frame", "a SASL frame must carry a SASL performative")
            return
        memo_key = None
        if (self.hot_kernel is not None and ftype == AMQP_FRAME and len(body) <= MEMO_BYTES and len(body) > 2
                and body[0] == 0 and body[1] == 0x53 and body[2] in _MEMO_CODES):
            memo_key = bytes(body)
            cached = _MEMO.get(memo_key)
            if cached is not None:
                row["descriptor"] = cached[0]
                self._performative(row, direction, ftype, *cached[1:])
                return
        try:
            value, end = decode(body, 0)
        except DecodeError as exc:
            row["decode_error"] = FrameError(exc.reason, str(exc))
            return
        if not isinstance(value, Described):
            row["decode_error"] = FrameError("not_a_performative", f"the frame body starts with a {type(value).__name__}, not a described type")
            return
        code = code_of(value.descriptor)
        row["descriptor"] = code if code is not None else (value.descriptor if type(value.descriptor) is int and value.descriptor < 1 << 63 else None)
        args = fields(code, value.value) if code in PERFORMATIVES or code in SASL_FRAMES else None
        if args is None:
            row["decode_error"] = FrameError("unknown_performative", f"descriptor {value.descriptor!r}")
            row["arguments_json"] = to_json(value)
            return
        # args is set only for a performative's code
        code = cast(int, code)
        if memo_key is not None and code in _MEMO_CODES:
            promoted: dict = {}
            promote(promoted, args)
            if len(_MEMO) >= MEMO_ENTRIES:
                _MEMO.clear()
            cached = _MEMO[memo_key] = (row["descriptor"], code, len(body) - end, args, promoted, to_json(args))
            self._performative(row, direction, ftype, *cached[1:])
            return
        self._performative(row, direction, ftype, code, len(body) - end, args,
                           transfer=(channel, body[end:]) if code == 0x14 else None)

    def _performative(self, row: dict, direction: str, ftype: int, code: int, trailing: int, args: dict,
                      promoted: dict | None = None, text: str | None = None, transfer: tuple | None = None) -> None:
        """A decoded performative's row: its name, the layer error, the connection facts, the promoted columns
        (``promoted``: the memo's, else from ``args``), a transfer's message (``transfer``: its channel and the
        bytes after the performative) or the error of ``trailing`` bytes after it, and its JSON (``text``: the
        memo's, else of ``args`` after the facts, which may redact a SASL frame's)."""
        name = row["performative"] = NAMES[code]
        error = self._layer_error(direction, ftype, code)
        self._facts.on_performative(direction, name, args)  # may redact args (never those the memo holds)
        if promoted is None:
            promote(row, args)
        else:
            row.update(promoted)
        if transfer is not None:
            error = self._transfer(row, direction, transfer[0], args, transfer[1]) or error
        elif trailing:
            error = error or FrameError("unexpected_payload", f"{trailing} bytes after the {name} performative")
        row["arguments_json"] = to_json(args) if text is None else text
        row["decode_error"] = error

    def _layer_error(self, direction: str, ftype: int, code: int) -> str | None:
        sasl = code in SASL_FRAMES
        if sasl != (ftype != AMQP_FRAME):
            return FrameError("frame_type_mismatch", f"a {'SASL' if sasl else 'AMQP'} performative in a frame of type {ftype}")
        layer = self._layer[direction]
        if layer is not None and layer != ("sasl" if sasl else "amqp"):
            return FrameError("layer_mismatch", f"a {'SASL' if sasl else 'AMQP'} frame after the {layer.upper()} protocol header")
        return None

    def _transfer(self, row: dict, direction: str, channel: int, args: dict, payload: memoryview) -> str | None:
        if row["handle"] is None:
            return FrameError("bad_transfer", "no handle, so no link to reassemble the message on")
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


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    return decode_both(Amqp10StreamDecoder, to_server, to_client, connection_id, **options)
