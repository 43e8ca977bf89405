"""Handshake messages: what the hellos say, cut from a direction's handshake bytes (RFC 5246 7.4, RFC 8446 4).

Only what decryption needs is read: the ClientHello random; the ServerHello random, cipher suite
and version (``supported_versions`` for TLS 1.3); and, for the record layer, where a Finished or a
KeyUpdate ends. Anything that does not read is ``None``, never an exception.
"""

from __future__ import annotations

import hashlib
import struct
import typing

CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET, FINISHED, KEY_UPDATE = 1, 2, 4, 20, 24
EXT_SUPPORTED_VERSIONS = 43
# RFC 8446 4.1.3: a ServerHello with this random is a HelloRetryRequest
HELLO_RETRY_RANDOM = hashlib.sha256(b"HelloRetryRequest").digest()
MAX_HANDSHAKE_MESSAGE = 1 << 18  # a certificate chain is the largest message; beyond this it is not one we wait for
_U16 = struct.Struct(">H")


class ServerHello(typing.NamedTuple):
    random: bytes
    version: int  # the negotiated version: supported_versions if present, else legacy_version
    cipher_suite: int
    retry: bool  # a HelloRetryRequest: another ClientHello and ServerHello follow


def split_messages(buf: bytearray) -> list[tuple[int, bytes]]:
    """Complete (type, body) messages at the start of ``buf``, removed from it; a partial one stays."""
    out = []
    while len(buf) >= 4:
        length = int.from_bytes(buf[1:4], "big")
        if len(buf) < 4 + length:
            break
        out.append((buf[0], bytes(buf[4 : 4 + length])))
        del buf[: 4 + length]
    return out


def client_random(body: bytes) -> bytes | None:
    """legacy_version (2) || random (32) || ..."""
    return body[2:34] if len(body) >= 34 else None


def server_hello(body: bytes) -> ServerHello | None:
    """legacy_version, random, session_id<0..32>, cipher_suite, compression_method, extensions<0..2^16-1>."""
    try:
        legacy = _U16.unpack_from(body, 0)[0]
        random = body[2:34]
        i = 34 + 1 + body[34]
        suite = _U16.unpack_from(body, i)[0]
        i += 3
        version = legacy
        if i + 2 <= len(body):
            end = min(len(body), i + 2 + _U16.unpack_from(body, i)[0])
            i += 2
            while i + 4 <= end:
                ext, size = _U16.unpack_from(body, i)[0], _U16.unpack_from(body, i + 2)[0]
                if ext == EXT_SUPPORTED_VERSIONS and size == 2:
                    version = _U16.unpack_from(body, i + 4)[0]
                i += 4 + size
    except (struct.error, IndexError):
        return None
    if len(random) != 32:
        return None
    return ServerHello(random, version, suite, random == HELLO_RETRY_RANDOM)
