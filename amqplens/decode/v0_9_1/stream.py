"""The per-connection stream decoder of the AMQP 0-8 / 0-9 / 0-9-1 family.

``Amqp091StreamDecoder`` is a ``StreamConsumer`` (``amqplens.decode.tcp.records``):
the TCP reassembler feeds it the in-order bytes of both directions, gaps and
finally ``close``. It emits plain-dict rows, drained by the caller:

- ``drain_frames()``: one row per frame (``rows.FRAME_KEYS``);
- ``drain_errors()``: one row per run of bytes that is not a frame
  (``rows.ERROR_KEYS``);
- ``connection_facts()``: dialect, negotiated limits, peer identity, SASL user,
  vhost, close, and the byte and frame counts per direction.

Nothing raises out of ``data``/``gap``/``close``: bad bytes become error rows
(see ``framing``), bad arguments a ``decode_error`` on the frame row.
"""

from __future__ import annotations

from typing import Unpack, cast

from amqplens.decode.errors import FrameError
from amqplens.decode.detect import D0_8, D0_9_1, FAMILY_0_9_1, detect_protocol_header, describe_json
from amqplens.decode.streaming import FramedOptions, StreamDecoderBase, decode_both
from amqplens.decode.tcp.records import TO_SERVER, ConnectionRecord
from amqplens.decode.v0_9_1 import ahead
from amqplens.decode.v0_9_1.content import ContentTracker
from amqplens.decode.v0_9_1.facts import FACT_CLASSES, ConnectionFacts
from amqplens.decode.v0_9_1.spec_types import MethodSpec
from amqplens.decode.v0_9_1.fieldtable import RABBITMQ
from amqplens.decode.v0_9_1.frames import ALL_METHOD_KEYS, channel_rule, tables_for
from amqplens.decode.v0_9_1.framing import FOREIGN, SYNCED, DirectionFramer
from amqplens.decode.v0_9_1.hotpath import MIN_BYTES, FrameBatch, HotBuilder, HotPieces, HotRows, array_content, hot_tables, load_kernel
from amqplens.decode.v0_9_1.primitives import CONTENT_HEADER, METHOD_IDS
from amqplens.decode.v0_9_1.rows import FRAME_TEMPLATE, promote, to_json

# method ids (class 10) whose frames carry secrets: start-ok, secure-ok, update-secret
_SECRET_METHODS = (b"\x00\x0a\x00\x0b", b"\x00\x0a\x00\x15", b"\x00\x0a\x00\x46")

# The compiled path's memo of method frames decoded by Python: real load repeats the same handshakes, declares and
# closes connection after connection (the same client library, broker, vhost and names), so a payload seen before
# gives its arguments (copied where the facts' handlers may redact them), promoted columns and JSON without being
# decoded again. Keyed by the dialect's tables, the payload and the redaction settings (the JSON is the arguments
# after the facts redacted them); at most MEMO_ENTRIES payloads of at most MEMO_BYTES (emptied when full). Not
# remembered: the frames that carry secrets (held no longer than their row needs) and the basic class (its hot
# methods' tags and its consumers' names vary frame by frame: they would only churn the memo). The reference
# (``decode.compiled=off``) decodes every frame; the tests compare the two.
MEMO_ENTRIES = 2048
MEMO_BYTES = 1024
_NOT_MEMO = frozenset(_SECRET_METHODS) | frozenset(b"\x00\x3c" + bytes([0, m]) for m in range(256))
_MEMO: dict[tuple, tuple] = {}


def _remember(key: tuple, value: tuple) -> None:
    if len(_MEMO) >= MEMO_ENTRIES:
        _MEMO.clear()
    _MEMO[key] = value


class Amqp091StreamDecoder(StreamDecoderBase):
    """Decode one connection of the 0-8 / 0-9 / 0-9-1 family from its two byte streams.

    Options: ``dialect`` forces one of "0-8", "0-9", "0-9-1" (otherwise the
    protocol header decides, or connection.start's version, or 0-9-1);
    ``field_table_letters`` "rabbitmq" (default) or "spec"; ``max_frame_size``;
    ``resync_max_frame``; ``max_error_bytes``; ``body_prefix_bytes`` (keep the
    first N body bytes of each message, default 0); ``redact`` (default True)
    and ``redaction_key`` (HMAC key for matchable redactions); ``compiled`` (default False): the hot
    frames through the numba walk (``hotpath``) when numba imports, with the same rows.
    """

    FRAME_TEMPLATE = FRAME_TEMPLATE
    EMPTY_INTERNAL_ERROR_ROWS = True

    def __init__(
        self, connection_id: str, *, dialect: str | None = None, field_table_letters: str = RABBITMQ,
        compiled: bool = False, **options: Unpack[FramedOptions],
    ) -> None:
        if dialect is not None and dialect not in FAMILY_0_9_1:
            raise ValueError(f"dialect must be one of {sorted(FAMILY_0_9_1)}, not {dialect!r}")
        kernel = load_kernel() if compiled else None
        tracker = array_content() if kernel is not None else ContentTracker  # the compiled path keeps messages in arrays
        self._content = self._init_framed(connection_id, DirectionFramer, tracker, ConnectionFacts, **options)
        self.letters = field_table_letters
        self.forced_dialect = dialect
        self._set_dialect(dialect or D0_9_1, "forced" if dialect else None)
        self._secrets_end: int | None = None  # to_server offset after which no SASL response follows
        self.hot_kernel = kernel
        self.body_prefix_bytes = options.get("body_prefix_bytes", 0)
        self.hot_min_bytes = MIN_BYTES  # buffers smaller than this stay on the Python path (tests lower it)
        self._builders: dict[str, HotBuilder] = {}
        self._held = ahead.Held() if kernel is not None else None  # the compiled path decodes a direction ahead

    # -- input: the compiled path holds segments and decodes each direction's at once (``ahead``) ---------------
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        held = self._held
        if held is not None and (held.segments or ahead.steady(self)):
            if direction in self._framers and not self._closed:
                held.segments.append((direction, offset, ts_us, data))
                held.bytes += len(data)
                if held.bytes >= ahead.MAX_BYTES:
                    ahead.catch_up(self, held)
            return
        super().data(direction, offset, ts_us, data)

    def data_run(self, run) -> None:
        """``data`` of each segment of a run (the reassembler's in-order runs), held whole where ``data`` holds."""
        if self._held is None:
            for segment in run.segments():
                self.data(*segment)
            return
        ahead.hold_run(self, self._held, run, ahead.steady, ahead.catch_up, ahead.MAX_BYTES)

    def catch_up(self) -> None:
        """Decode the held segments (before anything reads the rows, the facts or the framers' state)."""
        if self._held is not None and self._held.segments:
            ahead.catch_up(self, self._held)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        self.catch_up()
        super().gap(direction, offset, length, ts_us)

    def close(self, connection: ConnectionRecord | None = None) -> None:
        self.catch_up()
        super().close(connection)

    # -- output -----------------------------------------------------------------------------
    def drain_frames(self) -> list[dict]:
        """Frame rows as dicts, the compiled path's rows too (``drain_frame_parts`` keeps those columnar)."""
        if self.hot_kernel is None:
            return super().drain_frames()
        out: list[dict] = []
        for part in self.drain_frame_parts():
            out.extend(part.to_rows() if isinstance(part, FrameBatch) else part)
        return out

    def drain_frame_parts(self) -> list:
        """Frame rows in wire order: ``[rows]`` (dicts), or ``[FrameBatch]`` when the compiled path made some."""
        self.catch_up()
        items = super().drain_frames()
        if not any(isinstance(item, (HotRows, HotPieces)) for item in items):
            return [items] if items else []
        self._builders = {}  # the batch's Arrow columns keep the builders' arrays
        return [FrameBatch(hot_tables(self.tables), self.connection_id, self.dialect, items)]

    def hot_builder(self, direction: str) -> HotBuilder:
        """The compiled path's rows of ``direction`` since the last drain."""
        builder = self._builders.get(direction)
        if builder is None:
            builder = self._builders[direction] = HotBuilder(direction, self.body_prefix_bytes)
        return builder

    def drain_errors(self) -> list[dict]:
        self.catch_up()
        return super().drain_errors()

    def drain_frame_errors(self) -> list[dict]:
        self.catch_up()
        return super().drain_frame_errors()

    def connection_facts(self) -> dict:
        self.catch_up()
        out = super().connection_facts()
        out["dialect"] = self.dialect  # a key of the facts: it keeps its place
        return out

    # -- dialect ---------------------------------------------------------------------------
    def _set_dialect(self, dialect: str, source: str | None) -> None:
        self.dialect = dialect
        self.tables = tables_for(dialect, self.letters)
        self.frame_types = self.tables.frame_types
        self._facts.facts["dialect_source"] = source

    # -- what the framers ask ------------------------------------------------------------
    def frame_limit(self) -> int:
        fm = self._facts.facts["frame_max"]
        return min(fm, self.max_frame_size) if fm else self.max_frame_size

    def resync_limit(self) -> int:
        fm = self._facts.facts["frame_max"]
        return min(fm or self.resync_max_frame, self.max_frame_size)

    def plausible_payload(self, kind: str, channel: int, payload: memoryview) -> int:
        """0: not this kind of frame; 1: could be; 2: its content says it is."""
        n = len(payload)
        channel_max = self._facts.facts["channel_max"]
        if channel_max and channel > channel_max:
            return 0
        if kind == "method":
            if n < 4:
                return 0
            class_id, method_id = METHOD_IDS.unpack_from(payload, 0)
            ok = (class_id << 16 | method_id) in ALL_METHOD_KEYS
            return 2 if ok and channel_rule("method", channel, class_id) is None else 0
        if kind == "header":
            if n < 14 or channel == 0:
                return 0
            class_id, weight, _ = CONTENT_HEADER.unpack_from(payload, 0)
            return 2 if class_id in self.tables.property_plans and weight == 0 else 0
        if kind == "heartbeat":
            return 2 if channel == 0 and n == 0 else 0
        if kind == "body":
            return 1 if channel != 0 else 0
        return 1 if channel_rule(kind, channel) is None else 0

    def on_protocol_header(self, framer: DirectionFramer, offset: int, ts_us: int, head: bytes) -> str:
        name = detect_protocol_header(head)
        ours = name in FAMILY_0_9_1
        f = self._facts.facts
        if framer.direction == TO_SERVER:
            f["client_protocol_header"] = head.hex()
            if ours and not self.forced_dialect:
                self._set_dialect(cast(str, name), "protocol_header")  # ours: a name of the family
        else:
            f["server_protocol_header"] = head.hex()
            f["protocol_rejected"] = True
        row = self._row(framer, offset, ts_us, "protocol_header", None, 8)
        row["dialect"] = name if ours else self.dialect
        row["arguments_json"] = describe_json(head, to_json)
        self._append(row)
        return SYNCED if ours else FOREIGN

    def on_frame(self, framer: DirectionFramer, offset: int, ts_us: int, kind: str, channel: int, payload: memoryview, size: int) -> None:
        if self._facts.facts["dialect_source"] is None:
            self._facts.facts["dialect_source"] = "framing"
        row = self._row(framer, offset, ts_us, kind, channel, size)
        _FRAME_HANDLERS[kind](self, row, framer.direction, channel, payload)
        if row["decode_error"] is not None:
            self._frame_error(framer, row)
        self._append(row)

    # -- rows -------------------------------------------------------------------------------
    def _method(self, row: dict, direction: str, channel: int, payload: memoryview, oob: bool = False) -> None:
        memo_key = cached = None
        if self.hot_kernel is not None and not oob and len(payload) <= MEMO_BYTES and bytes(payload[:4]) not in _NOT_MEMO:
            facts = self._facts
            memo_key = (self.tables, bytes(payload), facts.redaction_key, facts.redact_secrets)
            cached = _MEMO.get(memo_key)
        if cached is None:
            key, args, error = self.tables.decode_method(payload)
            template = dict(args) if memo_key is not None and args is not None else None  # before the facts redact
        else:
            key, template, error = cached[:3]
            args = template
        meta = self.tables.methods.get(key) if key is not None else None
        class_id = None
        if key is not None:
            class_id = row["class_id"] = key >> 16
            row["method_id"] = key & 0xFFFF
            row["class_name"] = self.tables.classes.get(class_id)
        if meta is not None:
            row["method_name"] = meta.method_name
            # facts and _after_method look at connection-class methods only (FACT_CLASSES: from the facts' handlers)
            if args is not None and not oob and meta.class_name in FACT_CLASSES:
                if cached is not None:
                    args = dict(cast(dict, template))  # the facts' handlers set top-level arguments only
                self._facts.on_method(direction, meta.class_name, meta.method_name, args)  # may redact args
                self._after_method(direction, meta, args, row["stream_offset"] + row["size"])
            if not oob:
                # meta is found by key, so class_id is set
                row["message_seq"] = self._content[direction].on_method(channel, cast(int, class_id), meta.content)
        if cached is not None:
            if args is not None:
                row.update(cached[3])
                row["arguments_json"] = cached[4]
        elif args is not None:
            promoted: dict = {}
            promote(promoted, args, self.tables.promoted.get(key))
            row.update(promoted)
            row["arguments_json"] = to_json(args)
            if memo_key is not None:
                _remember(memo_key, (key, template, error, promoted, row["arguments_json"]))
        elif memo_key is not None:
            _remember(memo_key, (key, None, error, None, None))
        row["decode_error"] = error or channel_rule("method", channel, class_id)

    def _after_method(self, direction: str, meta: MethodSpec, args: dict, end_offset: int) -> None:
        name = (meta.class_name, meta.method_name)
        if name == ("connection", "start") and self._facts.facts["dialect_source"] in (None, "framing"):
            if (args.get("version_major"), args.get("version_minor")) == (8, 0) and self.dialect != D0_8:
                self._set_dialect(D0_8, "connection_start")
        elif direction == TO_SERVER and name in (("connection", "tune-ok"), ("connection", "open")):
            if self._secrets_end is None:
                self._secrets_end = end_offset

    def _header(self, row: dict, direction: str, channel: int, payload: memoryview, oob: bool = False) -> None:
        head, props, error = self.tables.decode_header(payload)
        if head is not None:
            class_id, _weight, body_size = head
            row["class_id"], row["body_size"] = class_id, body_size
            row["class_name"] = self.tables.classes.get(class_id)
            if not oob:
                seq, done, content_error = self._content[direction].on_header(channel, class_id, body_size)
                row["message_seq"] = seq
                self._complete(row, done)
                error = error or content_error
        if props is not None:
            row["properties_json"] = to_json(props)
        row["decode_error"] = error or (channel_rule("header", channel) if channel == 0 else None)

    def _body(self, row: dict, direction: str, channel: int, payload: memoryview) -> None:
        seq, done, error = self._content[direction].on_body(channel, payload)
        row["message_seq"] = seq
        self._complete(row, done)
        row["decode_error"] = error or (channel_rule("body", channel) if channel == 0 else None)

    @staticmethod
    def _complete(row: dict, done) -> None:
        if done is not None:
            row["body_sha256"], row["body_prefix"] = done

    def _heartbeat(self, row: dict, direction: str, channel: int, payload: memoryview) -> None:
        error = channel_rule("heartbeat", channel)
        if len(payload):
            error = error or FrameError("heartbeat_payload", f"{len(payload)} payload bytes, must be 0")
        row["decode_error"] = error

    def _oob_method(self, row, direction, channel, payload) -> None:
        if len(payload):  # the draft sends oob payloads elsewhere; decode one when it is here
            self._method(row, direction, channel, payload, oob=True)

    def _oob_header(self, row, direction, channel, payload) -> None:
        if len(payload):
            self._header(row, direction, channel, payload, oob=True)

    def _opaque(self, row, direction, channel, payload) -> None:
        row["decode_error"] = channel_rule(row["frame_type"], channel)

    # -- safety ----------------------------------------------------------------------------
    def _may_hold_secret(self, direction: str, offset: int, reason: str, raw: bytes) -> bool:
        if not self.redact or direction != TO_SERVER:
            return False
        if any(m in raw for m in _SECRET_METHODS):
            return True
        # other runs start on a frame header, so a secret-bearing frame shows its method id; a run
        # skipped after a gap may start inside a start-ok, before the handshake ended
        return reason == "resync_skipped" and (self._secrets_end is None or offset < self._secrets_end)


_FRAME_HANDLERS = {
    "method": Amqp091StreamDecoder._method,
    "header": Amqp091StreamDecoder._header,
    "body": Amqp091StreamDecoder._body,
    "heartbeat": Amqp091StreamDecoder._heartbeat,
    "oob_method": Amqp091StreamDecoder._oob_method,
    "oob_header": Amqp091StreamDecoder._oob_header,
    "oob_body": Amqp091StreamDecoder._opaque,
    "trace": Amqp091StreamDecoder._opaque,
}


def decode_streams(to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    return decode_both(Amqp091StreamDecoder, to_server, to_client, connection_id, **options)
