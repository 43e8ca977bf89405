"""Which codec decodes a connection: chosen from its first bytes, then fed every byte.

``DecodingConsumer`` is the ``StreamConsumer`` the TCP reassembler gets for
each selected connection. It holds the first few bytes until the protocol
header (or its absence) says which codec to use, then replays them into that
codec, so the choice never loses or repeats a byte. A stream that opens with a
TLS handshake (or any stream on a TLS port that does not open with ``AMQP``)
goes to ``amqplens.decode.tls.TlsLayer`` instead, which decrypts it with the key
log's secrets and hands the application data to a DecodingConsumer of its own.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import cast

from amqplens.decode import detect
from amqplens.decode.redaction import DEFAULT_REDACT_HEADERS
from amqplens.decode.redaction import shared as redaction_for
from amqplens.decode.streaming import Codec
from amqplens.decode.tcp.reassembly import TLS_HANDSHAKE
from amqplens.decode.tcp.records import TO_SERVER, ConnectionRecord
from amqplens.decode.tls import KeyLog, TlsLayer
from amqplens.decode.v0_9_1 import Amqp091StreamDecoder
from amqplens.decode.v0_9_1.hotpath import FrameBatch, compiled_enabled
from amqplens.decode.v1_0.hotpath import Frame10Batch

HEADER_LEN = 8

# the SASL and TLS layers of 1.0 are still dialect 1.0
DIALECT_OF_HEADER = {"1.0-sasl": "1.0", "1.0-tls": "1.0"}


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    field_table_letters: str = "rabbitmq"
    max_error_bytes: int = 4096
    body_prefix_bytes: int = 0
    redact_headers: tuple[str, ...] = DEFAULT_REDACT_HEADERS  # header/property names whose values are withheld
    # TLS secrets (amqplens.decode.tls.KeyLog), or a handle whose ``value`` is one (the job's Spark broadcast):
    # never compared, printed or fingerprinted; the job fingerprints ``KeyLog.fingerprint()`` instead
    tls_keys: object = dataclasses.field(default=None, repr=False, compare=False)

    def key_log(self) -> KeyLog | None:
        return cast("KeyLog | None", getattr(self.tls_keys, "value", self.tls_keys))
    compiled: str = "auto"  # auto | on | off: the 0-9-1 hot frames (v0_9_1.hotpath, ahead) and 1.0 flows, dispositions and one-transfer messages (v1_0.hotpath, ahead) through the numba walks; same rows (docs/performance.md)


def _v0_9_1(connection_id: str, dialect: str | None, o: DecodeOptions):
    return Amqp091StreamDecoder(
        connection_id, dialect=dialect if dialect in detect.FAMILY_0_9_1 else None,
        field_table_letters=o.field_table_letters, max_error_bytes=o.max_error_bytes, body_prefix_bytes=o.body_prefix_bytes,
        compiled=compiled_enabled(o.compiled),
    )


def _v1_0(connection_id: str, dialect: str | None, o: DecodeOptions):
    try:
        from amqplens.decode.v1_0 import Amqp10StreamDecoder
    except ImportError:  # the 1.0 codec is not installed: 0-9-1's decoder records the bytes as unsupported
        return _v0_9_1(connection_id, None, o)
    return Amqp10StreamDecoder(connection_id, max_error_bytes=o.max_error_bytes, body_prefix_bytes=o.body_prefix_bytes,
                               compiled=compiled_enabled(o.compiled))


def _v0_10(connection_id: str, dialect: str | None, o: DecodeOptions):
    from amqplens.decode.v0_10 import Amqp010StreamDecoder

    return Amqp010StreamDecoder(connection_id, max_error_bytes=o.max_error_bytes, body_prefix_bytes=o.body_prefix_bytes)


def _draft(connection_id: str, dialect: str | None, o: DecodeOptions):
    from amqplens.decode.drafts import DraftStreamDecoder

    # a draft's name: the CODECS key it is registered under, or the framing SharedHeaderConsumer chose
    return DraftStreamDecoder(connection_id, dialect=cast(str, dialect), max_error_bytes=o.max_error_bytes)


def _v0_9_or_fast(connection_id: str, dialect: str | None, o: DecodeOptions):
    """AMQP 1 1 0 9: the published 0-9 or AMQP/Fast 0.9a5, whichever framing the first frames follow."""
    from amqplens.decode.drafts import AMQP_FAST, SharedHeaderConsumer

    return SharedHeaderConsumer(lambda name: (_draft if name == AMQP_FAST else _v0_9_1)(connection_id, name, o))


# protocol header name (amqplens.decode.detect) -> codec factory. Headers of
# dialects without a codec yet go to the 0-9-1 family decoder, which records
# them as an unsupported dialect (every byte accounted for).
CODECS: dict[str | None, Callable] = {  # looked up with the detected name, None when there is none
    "0-8": _v0_9_1,
    "0-9": _v0_9_or_fast,
    "0-9-1": _v0_9_1,
    "1.0": _v1_0,
    "1.0-sasl": _v1_0,
    "1.0-tls": _v1_0,
    "0-10": _v0_10,
    "0-9-draft": _draft,
    "amqp-fast-0.9a5": _draft,
}


_U32 = struct.Struct(">I")
SNIFF_WINDOW = 4096  # bytes searched for a frame boundary when a capture starts mid-stream


def _v1_0_frame_at(buf: bytes, i: int) -> int:
    """Length of a plausible 1.0 frame at i (0 if none): size >= 8, doff >= 2, type AMQP or SASL."""
    if i + 8 > len(buf):
        return 0
    size = _U32.unpack_from(buf, i)[0]
    return size if 8 <= size <= (1 << 20) and buf[i + 4] >= 2 and buf[i + 5] in (0, 1) and size >= 4 * buf[i + 4] else 0


def _v0_9_1_frame_at(buf: bytes, i: int) -> int:
    """Length of a plausible 0-9-1 family frame at i (0 if none): known type and the 0xCE frame-end."""
    if i + 7 > len(buf) or buf[i] not in (1, 2, 3, 8):
        return 0
    size = _U32.unpack_from(buf, i + 3)[0]
    end = i + 7 + size
    return size + 8 if end < len(buf) and buf[end] == 0xCE else 0


def _v0_10_frame_at(buf: bytes, i: int) -> int:
    """Length of a plausible 0-10 frame at i (0 if none): version 0, a segment type, every reserved bit zero."""
    if i + 12 > len(buf):
        return 0
    b = buf[i : i + 12]
    size = (b[2] << 8) | b[3]
    ok = b[0] < 0x10 and b[1] < 4 and size >= 12 and b[4] == 0 and b[5] < 0x10 and b[8:12] == b"\0\0\0\0"
    return size if ok else 0


SNIFFERS = (("0-9-1", _v0_9_1_frame_at), ("1.0", _v1_0_frame_at), ("0-10", _v0_10_frame_at))


def sniff_framing(buf: bytes) -> str | None:
    """The dialect whose framing parses at the earliest offset, two frames in a row where the bytes allow."""
    for i in range(min(len(buf), SNIFF_WINDOW)):
        for name, frame_at in SNIFFERS:
            n = frame_at(buf, i)
            if n and (i + n >= len(buf) or frame_at(buf, i + n)):
                return name
    return None


def _ignore_close(consumer, connection) -> None:
    pass


class DecodingConsumer:
    def __init__(self, connection_id: str, options: DecodeOptions, on_close: Callable[["DecodingConsumer", ConnectionRecord], None],
                 tls_port: bool = False):
        self.connection_id = connection_id
        self.tls_port = tls_port  # on a TLS port, a stream that does not open with an AMQP header is TLS
        self.options = options
        self.on_close = on_close
        self.codec: Codec | None = None
        self._held: list[tuple] = []  # ("data"|"gap", args) until the codec is chosen
        self._head = b""
        self.detected: str | None = None  # the protocol header's dialect, if the client sent one
        self._redactor = redaction_for(tuple(options.redact_headers))

    def _choose(self, first: bytes | None) -> None:
        first = first or b""
        tls = first.startswith(TLS_HANDSHAKE) or (self.tls_port and not first.startswith(b"AMQP"))
        name = detect.detect_protocol_header(first) if first else None
        if tls:  # decrypted with the key log's secrets where it has them; the AMQP inside gets a consumer of its own
            inner = functools.partial(DecodingConsumer, self.connection_id, self.options, _ignore_close)
            self.codec = TlsLayer(self.connection_id, self.options.key_log(), inner, self.options.max_error_bytes)
        else:
            if name is None:
                name = sniff_framing(next((a[3] for k, a in self._held if k == "data"), b""))
            self.detected = name
            self.codec = CODECS.get(name, _v0_9_1)(self.connection_id, name, self.options)
        held, self._held = self._held, []
        for kind, args in held:
            getattr(self.codec, kind)(*args)

    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        if self.codec is None:
            self._held.append(("data", (direction, offset, ts_us, data)))
            if direction == TO_SERVER and offset == len(self._head):
                self._head += data[: HEADER_LEN - len(self._head)]
                prefix = self._head[:4]
                if len(self._head) >= HEADER_LEN or b"AMQP"[: len(prefix)] != prefix:
                    self._choose(self._head)
            else:
                # Mid-stream, or the server spoke first: no header to go by.
                self._choose(self._head if self._head[:4] == b"AMQP" else None)
            return
        self.codec.data(direction, offset, ts_us, data)

    def data_run(self, run) -> None:
        """``data`` of each segment of a run (``v0_9_1.ahead.Run``): the codec's ``data_run`` where it has one."""
        codec = self.codec
        data_run = getattr(codec, "data_run", None) if codec is not None else None
        if data_run is not None:
            data_run(run)
            return
        for segment in run.segments():
            self.data(*segment)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        if self.codec is None:
            # Wait for the bytes after the gap: their framing tells the dialect.
            self._held.append(("gap", (direction, offset, length, ts_us)))
            self._head = b"-"  # no protocol header can follow a gap at offset 0
            return
        self.codec.gap(direction, offset, length, ts_us)

    def close(self, connection: ConnectionRecord) -> None:
        if self.codec is None:
            self._choose(self._head if self._head[:4] == b"AMQP" else None)
        cast(Codec, self.codec).close(connection)  # chosen by now
        self.on_close(self, connection)

    def drain_frames(self) -> list[dict]:
        rows: list[dict] = self.codec.drain_frames() if self.codec is not None else []
        for row in rows:
            self._redactor.row(row)
        return rows

    def drain_frame_parts(self) -> list:
        """Frame rows in wire order as parts: lists of dicts, or the compiled path's ``FrameBatch`` (redacted like
        ``drain_frames``)."""
        parts_of = getattr(self.codec, "drain_frame_parts", None)
        if parts_of is None:
            rows = self.drain_frames()
            return [rows] if rows else []
        parts = parts_of()
        for part in parts:
            if isinstance(part, (FrameBatch, Frame10Batch)):
                part.redact(self._redactor)
            else:
                for row in part:
                    self._redactor.row(row)
        return parts

    def drain_errors(self) -> list[dict]:
        return self.codec.drain_errors() if self.codec is not None else []

    def drain_frame_errors(self) -> list[dict]:
        """The codec's rows for frames whose content did not decode. Their raw bytes never went through the
        header redaction (nothing decoded), so a frame that names a redacted header keeps only its hash."""
        rows: list[dict] = self.codec.drain_frame_errors() if self.codec is not None else []
        for row in rows:
            if row["raw"] is not None and self._redactor.mentions(row["raw"]):
                row["raw"], row["detail"] = None, row["detail"] + " (raw bytes withheld: they name a redacted header)"
        return rows

    def connection_facts(self) -> dict:
        facts = self.codec.connection_facts() if self.codec is not None else {}
        if self.detected is not None and self.detected not in detect.FAMILY_0_9_1:
            facts["dialect"] = DIALECT_OF_HEADER.get(self.detected, self.detected)
        elif not any(facts.get(f"frame_bytes_{d}") for d in ("to_server", "to_client")):
            facts["dialect"] = None  # nothing decoded: the codec's default says nothing
        return self._redactor.row(facts, [k for k in facts if k.endswith("_properties_json")])
