"""Key schedules: the TLS 1.2 PRF key expansion (RFC 5246 5, 6.3) and TLS 1.3 HKDF-Expand-Label
(RFC 8446 7.1-7.3), and the record decryptor each yields (nonce and additional data per record).

HMAC is the standard library's; the AEAD is ``cryptography``'s (``Suite.aead``).
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.exceptions import InvalidTag

from amqplens.decode.tls.suites import TAG_LEN, Suite

_AAD12 = struct.Struct(">QBHH")  # seq_num, type, version, length (RFC 5246 6.2.3.3)


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def p_hash(hash_name: str, secret: bytes, seed: bytes, length: int) -> bytes:
    """RFC 5246 5: P_hash(secret, seed) = HMAC(secret, A(1) + seed) + HMAC(secret, A(2) + seed) + ..."""
    out, a = b"", seed
    while len(out) < length:
        a = _hmac(hash_name, secret, a)
        out += _hmac(hash_name, secret, a + seed)
    return out[:length]


def prf12(hash_name: str, secret: bytes, label: bytes, seed: bytes, length: int) -> bytes:
    return p_hash(hash_name, secret, label + seed, length)


def hkdf_expand(hash_name: str, prk: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 2.3."""
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = _hmac(hash_name, prk, t + info + bytes([i]))
        out += t
        i += 1
    return out[:length]


def hkdf_expand_label(hash_name: str, secret: bytes, label: bytes, context: bytes, length: int) -> bytes:
    """RFC 8446 7.1: HkdfLabel = length (2) || opaque label<7..255> ("tls13 " + label) || opaque context<0..255>."""
    full = b"tls13 " + label
    info = struct.pack(">HB", length, len(full)) + full + bytes([len(context)]) + context
    return hkdf_expand(hash_name, secret, info, length)


def hash_len(hash_name: str) -> int:
    return hashlib.new(hash_name).digest_size


class Decryptor:
    """One direction's record protection for one key: ``open(type, version, fragment)`` -> plaintext or None.

    The sequence number counts the records this key protected (RFC 5246 6.1, RFC 8446 5.3); a record
    whose tag does not verify returns None and does not advance it.
    """

    __slots__ = ("suite", "aead", "iv", "iv_int", "seq", "tls13")

    def __init__(self, suite: Suite, key: bytes, iv: bytes, tls13: bool) -> None:
        self.suite, self.aead, self.iv, self.seq, self.tls13 = suite, suite.aead(key), iv, 0, tls13
        self.iv_int = int.from_bytes(iv, "big")

    def _xor_nonce(self) -> bytes:
        """RFC 8446 5.3 / RFC 7905 2: the 64-bit sequence number, left-padded, XORed with the IV."""
        return (self.iv_int ^ self.seq).to_bytes(12, "big")

    def open(self, content_type: int, version: int, fragment: bytes) -> bytes | None:
        explicit = self.suite.explicit_nonce_len
        if len(fragment) < explicit + TAG_LEN:
            return None
        if self.tls13:  # RFC 8446 5.2: the additional data is the record header
            nonce, aad, data = self._xor_nonce(), struct.pack(">BHH", content_type, version, len(fragment)), fragment
        else:
            data = fragment[explicit:]
            nonce = self.iv + fragment[:explicit] if explicit else self._xor_nonce()
            aad = _AAD12.pack(self.seq, content_type, version, len(data) - TAG_LEN)
        try:
            plain = self.aead.decrypt(nonce, data, aad)
        except (InvalidTag, ValueError):
            return None
        self.seq += 1
        return plain


def tls12_decryptors(suite: Suite, master_secret: bytes, client_random: bytes, server_random: bytes) -> tuple[Decryptor, Decryptor]:
    """(client_write, server_write) for an AEAD suite: RFC 5246 6.3 key_block = PRF(master_secret,
    "key expansion", server_random + client_random), cut into the client and server write keys and IVs
    (AEAD suites have no MAC keys)."""
    k, v = suite.key_len, suite.fixed_iv_len
    block = prf12(suite.hash_name, master_secret, b"key expansion", server_random + client_random, 2 * (k + v))
    client_key, server_key = block[:k], block[k : 2 * k]
    client_iv, server_iv = block[2 * k : 2 * k + v], block[2 * k + v :]
    return Decryptor(suite, client_key, client_iv, False), Decryptor(suite, server_key, server_iv, False)


def tls13_decryptor(suite: Suite, traffic_secret: bytes) -> Decryptor:
    """RFC 8446 7.3: [sender]_write_key and _iv from a traffic secret."""
    key = hkdf_expand_label(suite.hash_name, traffic_secret, b"key", b"", suite.key_len)
    iv = hkdf_expand_label(suite.hash_name, traffic_secret, b"iv", b"", 12)
    return Decryptor(suite, key, iv, True)


def tls13_next_secret(suite: Suite, traffic_secret: bytes) -> bytes:
    """RFC 8446 7.2: application_traffic_secret_N+1 after a KeyUpdate."""
    return hkdf_expand_label(suite.hash_name, traffic_secret, b"traffic upd", b"", hash_len(suite.hash_name))
