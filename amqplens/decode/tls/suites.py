"""Cipher suites we decrypt, and the record protection of each (RFC 5288, RFC 7905, RFC 8446 B.4).

Only the AEAD primitive comes from ``cryptography``; nonces, additional data, the TLS 1.2 PRF and
the TLS 1.3 HKDF-Expand-Label are ``amqplens.decode.tls.keyschedule``. A suite not in ``SUITES`` makes a
connection ``unsupported_suite`` (its bytes are recorded, not decoded).
"""

from __future__ import annotations

import typing

from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305

TLS12, TLS13 = "1.2", "1.3"
VERSION_NAMES = {0x0300: "ssl3.0", 0x0301: "1.0", 0x0302: "1.1", 0x0303: TLS12, 0x0304: TLS13}
TAG_LEN = 16  # every suite here has a 16-byte tag


class Aead(typing.Protocol):
    """What ``Suite.aead`` makes of a key (``cryptography``'s AESGCM, AESCCM, ChaCha20Poly1305)."""

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None, /) -> bytes: ...


class Suite(typing.NamedTuple):
    name: str
    version: str  # the protocol version the suite belongs to
    aead: typing.Callable[[bytes], Aead]  # key -> an object with decrypt(nonce, data, aad)
    key_len: int
    fixed_iv_len: int  # TLS 1.2: the implicit part of the nonce (4 for GCM, 12 for ChaCha20); TLS 1.3: 12
    explicit_nonce_len: int  # TLS 1.2 GCM sends 8 nonce bytes in each record; ChaCha20 and TLS 1.3 none
    hash_name: str  # the PRF / HKDF hash


def _ccm(key: bytes) -> AESCCM:
    return AESCCM(key, tag_length=TAG_LEN)


def _s12(name, aead, key_len, hash_name="sha256") -> Suite:
    gcm = aead is AESGCM
    return Suite(name, TLS12, aead, key_len, 4 if gcm else 12, 8 if gcm else 0, hash_name)


def _s13(name, aead, key_len, hash_name="sha256") -> Suite:
    return Suite(name, TLS13, aead, key_len, 12, 0, hash_name)


# IANA TLS Cipher Suites registry number -> suite
SUITES: dict[int, Suite] = {
    0x1301: _s13("TLS_AES_128_GCM_SHA256", AESGCM, 16),
    0x1302: _s13("TLS_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    0x1303: _s13("TLS_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32),
    0x1304: _s13("TLS_AES_128_CCM_SHA256", _ccm, 16),
    0x009C: _s12("TLS_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16),
    0x009D: _s12("TLS_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    0x009E: _s12("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16),
    0x009F: _s12("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    0xC02B: _s12("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", AESGCM, 16),
    0xC02C: _s12("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    0xC02F: _s12("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16),
    0xC030: _s12("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    0xCCA8: _s12("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32),
    0xCCA9: _s12("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32),
    0xCCAA: _s12("TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32),
}


def suite_name(number: int) -> str:
    """The IANA name of a suite we decrypt, else its number in hex (``0x002f``)."""
    s = SUITES.get(number)
    return s.name if s else f"0x{number:04x}"


def version_name(number: int) -> str:
    return VERSION_NAMES.get(number, f"0x{number:04x}")
