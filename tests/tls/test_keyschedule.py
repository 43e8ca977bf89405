"""Key schedules against published vectors, the TLS 1.3 KeyUpdate path, and the package's imports.

- TLS 1.3 HKDF-Expand-Label: RFC 8448 section 3 (Simple 1-RTT Handshake), the server's handshake
  write key and IV from its handshake traffic secret.
- TLS 1.2 PRF (P_SHA256): the test vector posted to the IETF TLS list for RFC 5246's PRF
  (secret 9bbe43..., seed a0ba9f..., label "test label", 100 bytes).
- KeyUpdate: a TLS 1.3 server stream whose second protected record is a KeyUpdate; the record after it
  is sealed (here, with ``cryptography`` directly) under application_traffic_secret_1 (RFC 8446 7.2).
"""

from __future__ import annotations

import ast
import pathlib
import struct
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.tls import KeyLog
from amqplens.decode.tls.keyschedule import hkdf_expand_label, prf12

RFC8448_SERVER_HS_SECRET = bytes.fromhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38")


def test_hkdf_expand_label_gives_rfc8448_server_handshake_key_and_iv():
    assert hkdf_expand_label("sha256", RFC8448_SERVER_HS_SECRET, b"key", b"", 16).hex() == "3fce516009c21727d0f2e4e86ee403bc"
    assert hkdf_expand_label("sha256", RFC8448_SERVER_HS_SECRET, b"iv", b"", 12).hex() == "5d313eb2671276ee13000b30"


def test_prf12_sha256_gives_the_published_vector():
    out = prf12("sha256", bytes.fromhex("9bbe436ba940f017b17652849a71db35"), b"test label",
                bytes.fromhex("a0ba9f936cda311827a6f796ffd5198c"), 100)
    assert out.hex() == (
        "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b4e14baf9af0fa022f7"
        "077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff70187347b66")


def _hello(msg_type: int, body: bytes) -> bytes:
    handshake = bytes([msg_type]) + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x03" + struct.pack(">H", len(handshake)) + handshake


def _sealed(secret: bytes, seq: int, content: bytes, inner_type: int) -> bytes:
    key = hkdf_expand_label("sha256", secret, b"key", b"", 16)
    iv = hkdf_expand_label("sha256", secret, b"iv", b"", 12)
    nonce = bytes(a ^ b for a, b in zip(iv, bytes(4) + seq.to_bytes(8, "big")))
    inner = content + bytes([inner_type]) + bytes(3)  # three bytes of padding
    header = b"\x17\x03\x03" + struct.pack(">H", len(inner) + 16)
    return header + AESGCM(key).encrypt(nonce, inner, header)


def test_a_key_update_moves_the_sender_to_the_next_secret():
    random_ = bytes(range(32))
    c0, s0 = b"\x11" * 32, b"\x22" * 32
    s1 = hkdf_expand_label("sha256", s0, b"traffic upd", b"", 32)
    client_hello = _hello(1, b"\x03\x03" + random_ + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + b"\x00\x00")
    server_hello = _hello(2, b"\x03\x03" + bytes(32) + b"\x00" + b"\x13\x01" + b"\x00" + b"\x00\x06" + b"\x00\x2b\x00\x02\x03\x04")
    key_update = bytes([24, 0, 0, 1, 0])  # KeyUpdate, update_not_requested
    to_client = server_hello + _sealed(s0, 0, b"AAAA", 23) + _sealed(s0, 1, key_update, 22) + _sealed(s1, 0, b"BBBB", 23)
    to_server = client_hello + _sealed(c0, 0, b"CC", 23)
    keys = KeyLog.parse([f"CLIENT_TRAFFIC_SECRET_0 {random_.hex()} {c0.hex()}", f"SERVER_TRAFFIC_SECRET_0 {random_.hex()} {s0.hex()}"])
    c = DecodingConsumer("c", DecodeOptions(tls_keys=keys), lambda *a: None, tls_port=True)
    c.data("to_server", 0, 0, to_server)
    c.data("to_client", 0, 0, to_client)
    c.close(None)
    facts = c.connection_facts()
    assert (facts["tls_status"], facts["tls_version"], facts["tls_cipher_suite"]) == ("decrypted", "1.3", "TLS_AES_128_GCM_SHA256")
    assert facts["tls_plaintext_bytes_to_client"] == 8 and facts["tls_plaintext_bytes_to_server"] == 2
    assert facts["tls_undecrypted_bytes_to_client"] == 0 and facts["tls_overhead_bytes_to_client"] == len(to_client) - 8


def test_the_tls_package_imports_no_spark_and_nothing_but_cryptography():
    allowed = set(sys.stdlib_module_names) | {"amqplens", "cryptography", "__future__"}
    for path in (pathlib.Path(__file__).resolve().parents[2] / "amqplens" / "decode" / "tls").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] in allowed and (not name.startswith("amqplens") or name.startswith("amqplens.decode")), (path.name, name)


def test_the_contract_checks_the_statuses_the_layer_gives():
    from amqplens.decode.tls import TLS_STATUSES
    from amqplens.contracts.expectations import ENUMS

    assert ENUMS["connections"]["tls_status"] == TLS_STATUSES
