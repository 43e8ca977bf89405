"""The TLS record layer of one connection: records in, application data out to an inner consumer.

``TlsLayer`` has a codec's interface (``data``, ``gap``, ``close``, the drains, ``connection_facts``)
so ``DecodingConsumer`` uses it where it would use a codec. Per direction it cuts the stream into
records (RFC 5246 6.2, RFC 8446 5.1), reads the hellos, and once the ServerHello names the version
and suite, looks the ClientHello random up in the key log:

- keys found: protected records are opened (TLS 1.2 after ChangeCipherSpec; TLS 1.3 every outer
  application_data record, handshake keys until the sender's Finished, then traffic secret 0 and a
  new secret per KeyUpdate); application data goes to the inner consumer as its stream, at
  plaintext offsets; record headers, nonces, tags, padding and handshake, alert and
  ChangeCipherSpec content are overhead;
- no key, or a version or suite we do not decrypt: every byte of each direction is one error
  region from offset 0, as for TLS before keys were known (reason ``tls``).

Per direction: overhead + plaintext + undecrypted bytes = stream bytes fed, and the inner
consumer's frame + error bytes = plaintext bytes. A record whose tag does not verify, a
malformed record header or missing TCP bytes leave the rest of the direction undecrypted (the
record sequence number is lost with them).
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable
from typing import Any, cast

from amqplens.decode.streaming import Codec, ErrorRegion
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionRecord
from amqplens.decode.tls import handshake as hs
from amqplens.decode.tls import keylog as kl
from amqplens.decode.tls.keyschedule import Decryptor, tls12_decryptors, tls13_decryptor, tls13_next_secret
from amqplens.decode.tls.suites import SUITES, TLS12, TLS13, suite_name, version_name

DECRYPTED, NO_KEY, UNSUPPORTED_SUITE, DECRYPT_FAILED = "decrypted", "no_key", "unsupported_suite", "decrypt_failed"
TLS_STATUSES = (DECRYPTED, NO_KEY, UNSUPPORTED_SUITE, DECRYPT_FAILED)

CCS, ALERT, HANDSHAKE, APPLICATION_DATA, HEARTBEAT = 20, 21, 22, 23, 24
RECORD_HEADER = 5
MAX_FRAGMENT = (1 << 14) + 2048  # RFC 5246 6.2.3: the largest TLSCiphertext.length
# Bytes of a connection held before the ServerHello says which keys apply: a ClientHello and the
# server's first flight are a few KiB; this much without a ServerHello means there is none to read.
HOLD_BYTES = 64 * 1024
_HEADER = struct.Struct(">BHH")
# A key log with only the traffic secrets: the sender's encrypted handshake flight (EncryptedExtensions to
# Finished, a few records) cannot be opened and is counted as overhead, up to this many records.
PROBE_RECORDS = 8

NOT_DECODED = {
    NO_KEY: ("tls", "TLS records without a matching key log entry (the ClientHello random): recorded, not decoded"),
    UNSUPPORTED_SUITE: ("tls", "TLS records of a version or cipher suite amqplens does not decrypt: recorded, not decoded"),
}
MALFORMED = ("tls_malformed_record", "bytes that are not a TLS record header; the rest of the direction is not decrypted")
DECRYPT_FAILED_REASON = ("tls_decrypt_failed", "a TLS record whose authentication tag did not verify with the key log's keys; the rest of the direction is not decrypted")
AFTER_GAP = ("tls_after_gap", "TLS records after missing TCP bytes (the record sequence is lost): not decrypted")
TRUNCATED = ("tls_truncated", "a partial TLS record at the end of the stream")


class _Direction:
    """One direction's record buffer, keys and byte counters."""

    __slots__ = ("name", "buf", "base", "marks", "shadow", "opaque", "region", "decryptor", "pending", "secret",
                 "later", "probe", "hs", "overhead", "plaintext", "undecrypted", "gap", "fed", "plain_offset")  # fmt: skip

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.marks: collections.deque = collections.deque()  # (stream offset, ts_us) per feed
        # every byte until the keys are known, as the region it becomes if they are not
        self.shadow: ErrorRegion | None = ErrorRegion(0, 0, *NOT_DECODED[NO_KEY], cap)
        self.opaque: tuple[str, str] | None = None  # (reason, detail) of the bytes that are no longer decrypted
        self.region: ErrorRegion | None = None
        self.decryptor: Decryptor | None = None
        self.pending: Decryptor | None = None  # TLS 1.2: what ChangeCipherSpec turns on
        self.secret: bytes | None = None  # TLS 1.3: the traffic secret of ``decryptor``
        self.later: list[bytes] = []  # TLS 1.3: secrets of the next epochs (traffic secret 0 after the handshake's)
        self.probe = 0  # TLS 1.3 without handshake secrets: protected records still allowed not to open (see _record)
        self.hs = bytearray()  # handshake bytes not yet cut into messages
        self.overhead = self.plaintext = self.undecrypted = self.gap = self.fed = self.plain_offset = 0

    @property
    def expected(self) -> int:
        return self.base + len(self.buf)

    def ts(self, offset: int) -> int:
        marks = self.marks
        while len(marks) > 1 and marks[1][0] <= offset:
            marks.popleft()
        return marks[0][1] if marks else 0


class TlsLayer:
    def __init__(self, connection_id: str, keylog: kl.KeyLog | None, inner_factory: Callable[[], Codec], max_error_bytes: int) -> None:
        self.connection_id = connection_id
        self.keylog = keylog or kl.KeyLog()
        self.inner_factory = inner_factory
        self.cap = max_error_bytes
        self.dirs = {d: _Direction(d, max_error_bytes) for d in (TO_SERVER, TO_CLIENT)}
        self.status: str | None = None
        self.client_random: bytes | None = None
        self.version: int | None = None
        self.cipher_suite: int | None = None
        self.inner: Codec | None = None
        self._errors: list[dict] = []

    # -- the codec interface ---------------------------------------------------------------
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        d = self.dirs[direction]
        if offset > d.expected:  # a hole nobody reported
            self.gap(direction, d.expected, offset - d.expected, ts_us, reported=False)
        elif offset < d.expected:
            data, offset = data[d.expected - offset :], d.expected
        if not data:
            return
        d.fed += len(data)
        if d.shadow is not None:
            if not d.shadow.length:
                d.shadow.ts_us = ts_us
            d.shadow.add(data)
        if d.opaque is not None:
            self._undecrypted(d, offset, ts_us, data)
            d.base = offset + len(data)
            return
        d.buf += data
        d.marks.append((offset, ts_us))
        self._run(d)
        if self.status is None and sum(x.fed for x in self.dirs.values()) > HOLD_BYTES:
            self._not_decoded(NO_KEY)

    def gap(self, direction: str, offset: int, length: int, ts_us: int, reported: bool = True) -> None:
        d = self.dirs[direction]
        if reported:
            d.gap += length
        if self.status is None:
            self._not_decoded(NO_KEY)  # a handshake with a hole: the hellos cannot be trusted
        if d.opaque is None:
            self._stop(d, 0, *AFTER_GAP)
        self._flush(d)
        d.base = max(d.expected, offset + length)

    def close(self, connection: ConnectionRecord | None = None) -> None:
        if self.status is None:
            self._not_decoded(NO_KEY)
        for d in self.dirs.values():
            if d.opaque is None and d.buf:
                self._stop(d, 0, *TRUNCATED)
            self._flush(d)
        if self.inner is not None:
            # None only when the layer is closed without a record (tools, tests): the inner DecodingConsumer
            # passes it on to its codec, which takes None, and to _ignore_close
            self.inner.close(cast(ConnectionRecord, connection))

    def drain_frames(self) -> list[dict]:
        return self.inner.drain_frames() if self.inner is not None else []

    def drain_errors(self) -> list[dict]:
        rows, self._errors = self._errors, []
        return rows + (self.inner.drain_errors() if self.inner is not None else [])

    def drain_frame_errors(self) -> list[dict]:
        return self.inner.drain_frame_errors() if self.inner is not None else []

    def connection_facts(self) -> dict:
        out: dict[str, Any] = dict(self.inner.connection_facts()) if self.inner is not None else {}
        for name, d in self.dirs.items():
            out.setdefault(f"frame_bytes_{name}", 0)
            out[f"error_bytes_{name}"] = (out.get(f"error_bytes_{name}") or 0) + d.undecrypted
            out[f"gap_bytes_{name}"] = d.gap
            out[f"stream_bytes_{name}"] = d.fed
            out[f"tls_overhead_bytes_{name}"] = d.overhead
            out[f"tls_plaintext_bytes_{name}"] = d.plaintext
            out[f"tls_undecrypted_bytes_{name}"] = d.undecrypted
        out["tls_status"] = self.status
        out["tls_version"] = version_name(self.version) if self.version is not None else None
        out["tls_cipher_suite"] = suite_name(self.cipher_suite) if self.cipher_suite is not None else None
        return out

    # -- records ---------------------------------------------------------------------------
    def _run(self, d: _Direction) -> None:
        buf, pos = d.buf, 0
        while len(buf) - pos >= RECORD_HEADER and d.opaque is None:
            ct, version, length = _HEADER.unpack_from(buf, pos)
            if not CCS <= ct <= HEARTBEAT or version >> 8 != 3 or length > MAX_FRAGMENT:
                self._stop(d, pos, *MALFORMED)
                self.status = DECRYPT_FAILED if self.status == DECRYPTED else self.status
                return
            end = pos + RECORD_HEADER + length
            if end > len(buf) or (self.status is None and ct in (APPLICATION_DATA, HEARTBEAT)):
                break  # a partial record, or protected data that waits for the keys
            self._record(d, ct, version, bytes(buf[pos + RECORD_HEADER : end]), d.base + pos)
            if d.opaque is not None:  # the record turned the direction opaque (and took the buffer)
                return
            pos = end
        del buf[:pos]
        d.base += pos

    def _record(self, d: _Direction, ct: int, version: int, fragment: bytes, offset: int) -> None:
        size = RECORD_HEADER + len(fragment)
        tls13 = self.version == 0x0304
        if d.decryptor is None or (tls13 and ct != APPLICATION_DATA):
            d.overhead += size  # in the clear: hellos, alerts, ChangeCipherSpec
            if ct == HANDSHAKE:
                self._handshake(d, fragment, protected=False)
            elif ct == CCS and not tls13 and d.pending is not None:
                d.decryptor, d.pending = d.pending, None
            elif ct == APPLICATION_DATA:  # protected data before any key applies (0-RTT early data, say)
                d.overhead -= size
                self._stop(d, offset - d.base, *DECRYPT_FAILED_REASON)
                self.status = DECRYPT_FAILED
            return
        plain = d.decryptor.open(ct, version, fragment)
        if plain is None and tls13:
            plain = self._next_epoch(d, ct, version, fragment)
        if plain is None and d.probe:  # the handshake flight under secrets the key log lacks: overhead
            d.probe -= 1
            d.overhead += size
            return
        d.probe = 0
        if plain is not None and tls13:  # TLSInnerPlaintext: content || type || zero padding
            body = plain.rstrip(b"\0")
            plain, ct = (body[:-1], body[-1]) if body else (None, 0)
        if plain is None:
            self._stop(d, offset - d.base, *DECRYPT_FAILED_REASON)
            self.status = DECRYPT_FAILED
            return
        if ct == APPLICATION_DATA:
            d.overhead += size - len(plain)
            self._plaintext(d, d.ts(offset), plain)
            return
        d.overhead += size
        if ct == HANDSHAKE:
            self._handshake(d, plain, protected=True)

    def _next_epoch(self, d: _Direction, ct: int, version: int, fragment: bytes) -> bytes | None:
        """TLS 1.3 without the handshake secrets in the key log: the first protected record of traffic
        secret 0 tells itself by opening with it."""
        if not d.later:
            return None
        trial = tls13_decryptor(SUITES[cast(int, self.cipher_suite)], d.later[0])  # later: set with the suite
        plain = trial.open(ct, version, fragment)
        if plain is not None:
            d.secret, d.decryptor, d.later = d.later[0], trial, d.later[1:]
        return plain

    def _handshake(self, d: _Direction, content: bytes, protected: bool) -> None:
        d.hs += content
        for msg_type, body in hs.split_messages(d.hs):
            if msg_type == hs.CLIENT_HELLO and d.name == TO_SERVER and self.client_random is None:
                self.client_random = hs.client_random(body)
            elif msg_type == hs.SERVER_HELLO and d.name == TO_CLIENT and self.status is None:
                hello = hs.server_hello(body)
                if hello is None:
                    self._not_decoded(NO_KEY)
                    return
                if not hello.retry:
                    self._decide(hello)
            elif protected and msg_type == hs.FINISHED and self.version == 0x0304 and d.later:
                d.secret, d.later = d.later[0], d.later[1:]  # the sender's next records use traffic secret 0
                # version set: the ServerHello named the suite (cipher_suite) too
                d.decryptor = tls13_decryptor(SUITES[cast(int, self.cipher_suite)], d.secret)
            elif protected and msg_type == hs.KEY_UPDATE and self.version == 0x0304 and d.secret is not None:
                d.secret = tls13_next_secret(SUITES[cast(int, self.cipher_suite)], d.secret)  # as above
                d.decryptor = tls13_decryptor(SUITES[cast(int, self.cipher_suite)], d.secret)
        if len(d.hs) > hs.MAX_HANDSHAKE_MESSAGE:
            d.hs.clear()  # a message longer than any we read: its bytes stay overhead

    def _decide(self, hello: hs.ServerHello) -> None:
        self.version, self.cipher_suite = hello.version, hello.cipher_suite
        secrets = self.keylog.secrets(self.client_random) if self.client_random else {}
        suite = SUITES.get(hello.cipher_suite)
        version = version_name(hello.version)
        if not secrets:
            self._not_decoded(NO_KEY)
        elif suite is None or suite.version != version:
            self._not_decoded(UNSUPPORTED_SUITE)
        elif version == TLS12 and kl.CLIENT_RANDOM in secrets:
            client_random = cast(bytes, self.client_random)  # set: the secrets were found by it
            client, server = tls12_decryptors(suite, secrets[kl.CLIENT_RANDOM], client_random, hello.random)
            self.dirs[TO_SERVER].pending, self.dirs[TO_CLIENT].pending = client, server
            self._keys_found()
        elif version == TLS13 and self._tls13_keys(suite, secrets):
            self._keys_found()
        else:
            self._not_decoded(NO_KEY)

    def _tls13_keys(self, suite, secrets: dict[str, bytes]) -> bool:
        labels = {TO_SERVER: (kl.CLIENT_HANDSHAKE, kl.CLIENT_TRAFFIC_0), TO_CLIENT: (kl.SERVER_HANDSHAKE, kl.SERVER_TRAFFIC_0)}
        epochs = {name: [secrets[label] for label in pair if label in secrets] for name, pair in labels.items()}
        if not all(epochs.values()):
            return False
        for name, (first, *rest) in epochs.items():
            d = self.dirs[name]
            d.secret, d.later, d.decryptor = first, rest, tls13_decryptor(suite, first)
            d.probe = 0 if rest else PROBE_RECORDS
        return True

    def _keys_found(self) -> None:
        self.status = DECRYPTED
        for d in self.dirs.values():
            d.shadow = None
        other = self.dirs[TO_SERVER]
        if other.buf:  # records that waited for the keys
            self._run(other)

    def _not_decoded(self, status: str) -> None:
        """No keys apply: each direction, from offset 0, becomes one error region of what is fed."""
        self.status = status
        reason, detail = NOT_DECODED[status]
        for d in self.dirs.values():
            # status is still None here, and every shadow lives until a status is set
            region, d.shadow = cast(ErrorRegion, d.shadow), None
            region.reason, region.detail = reason, detail
            d.region, d.opaque, d.overhead = region, (reason, detail), 0
            d.base = d.expected
            d.buf.clear()
            d.hs.clear()

    def _stop(self, d: _Direction, pos: int, reason: str, detail: str) -> None:
        """From ``pos`` in the buffer on, the direction's bytes are not decrypted."""
        offset = d.base + pos
        self._flush(d)
        d.opaque = (reason, detail)
        self._undecrypted(d, offset, d.ts(offset), bytes(d.buf[pos:]))
        d.base = d.expected
        d.buf.clear()

    def _undecrypted(self, d: _Direction, offset: int, ts_us: int, data: bytes) -> None:
        if d.region is None:
            d.region = ErrorRegion(offset, ts_us, *cast("tuple[str, str]", d.opaque), self.cap)  # set: not decrypted
        d.region.add(data)

    def _flush(self, d: _Direction) -> None:
        region, d.region = d.region, None
        if region is None or not region.length:
            return
        d.undecrypted += region.length
        self._errors.append({
            "connection_id": self.connection_id, "direction": d.name, "stream_offset": region.offset,
            "length": region.length, "reason": region.reason, "detail": region.detail, "raw": bytes(region.raw),
            "raw_sha256": region.hasher.hexdigest(), "raw_length": region.length, "ts_us": region.ts_us,
        })  # fmt: skip

    def _plaintext(self, d: _Direction, ts_us: int, content: bytes) -> None:
        if not content:
            return
        if self.inner is None:
            self.inner = self.inner_factory()
        self.inner.data(d.name, d.plain_offset, ts_us, content)
        d.plain_offset += len(content)
        d.plaintext += len(content)
