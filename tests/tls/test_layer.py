"""TLS record decryption on real TLS sessions: OpenSSL (Python's ``ssl``) writes the records and the key
log, amqplens decrypts them. The oracle is the plaintext: the AMQP inside must decode exactly as the same
bytes in the clear, and OpenSSL names the version and suite it negotiated.

Bad input tried: no key log entry, a wrong secret, a key log without the TLS 1.3 handshake secrets,
damaged key log lines, a TCP gap, a record cut at close, random byte flips and cuts (nothing raises,
every byte is accounted for), and the PLAIN password inside TLS (it appears in no row).
"""

from __future__ import annotations

import random
import ssl

import pytest

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.tls import KeyLog
from amqplens.decode.tls.suites import suite_name
from tests.v0_9_1 import conversation as conv
from tools.tls_session import MemoryTls, TlsPki

DIRS = ("to_server", "to_client")
CASES = [("1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"), ("1.2", "ECDHE-ECDSA-AES256-GCM-SHA384"),
         ("1.2", "ECDHE-ECDSA-CHACHA20-POLY1305"), ("1.3", None)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TlsPki.create(tmp_path_factory.mktemp("pki"))


def session(pki, tmp_path, version, ciphers, client: bytes, server: bytes) -> tuple[MemoryTls, KeyLog]:
    keylog = tmp_path / f"keys-{version}-{ciphers}.log"
    t = MemoryTls(pki, version, keylog, ciphers)
    t.write("to_server", client[:8])  # the protocol header alone, then the rest as the peers would
    t.write("to_client", server)
    t.write("to_server", client[8:])
    t.close()
    return t, KeyLog.read([keylog])


def decode(turns, keys, *, tls_port=True, cut=None) -> tuple[list, list, dict]:
    c = DecodingConsumer("c", DecodeOptions(tls_keys=keys), lambda *a: None, tls_port=tls_port)
    offsets = dict.fromkeys(DIRS, 0)
    for direction, data in turns:
        if cut and cut[0] == direction and offsets[direction] <= cut[1] < offsets[direction] + len(data):
            c.gap(direction, offsets[direction], len(data), 0)  # a segment the capture missed
        else:
            c.data(direction, offsets[direction], 0, data)
        offsets[direction] += len(data)
    c.close(None)
    frames, errors = c.drain_frames(), c.drain_errors()
    facts = c.connection_facts()
    for d in DIRS if "tls_status" in facts else ():  # nothing is lost: the stream is plaintext + overhead + undecrypted + gaps
        assert offsets[d] == sum(facts[f"{k}_bytes_{d}"] for k in ("tls_plaintext", "tls_overhead", "tls_undecrypted", "gap"))
        assert facts[f"tls_plaintext_bytes_{d}"] == facts[f"frame_bytes_{d}"] + facts[f"error_bytes_{d}"] - facts[f"tls_undecrypted_bytes_{d}"]
        assert facts[f"tls_undecrypted_bytes_{d}"] == sum(e["length"] for e in errors if e["direction"] == d and e["reason"].startswith("tls"))
    return frames, errors, facts


def plain(client: bytes, server: bytes) -> list:
    frames, _, _ = decode([("to_server", client), ("to_client", server)], None, tls_port=False)
    return frames


def _comparable(frames):
    rows = [{k: v for k, v in f.items() if k != "ts_us"} for f in frames]
    return sorted(rows, key=lambda r: (r["direction"], r["stream_offset"]))


def _iana(t: MemoryTls) -> str:
    name = t.client.cipher()[0]
    number = next(c["id"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).get_ciphers() if c["name"] == name) & 0xFFFF
    return number


@pytest.mark.parametrize("version,ciphers", CASES)
def test_decrypted_amqp_decodes_as_the_same_bytes_in_the_clear(pki, tmp_path, version, ciphers):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, version, ciphers, client, server)
    frames, errors, facts = decode(t.turns, keys)
    assert _comparable(frames) == _comparable(plain(client, server)) and len(frames) > 20
    assert [e for e in errors if e["reason"].startswith("tls")] == []
    assert facts["tls_status"] == "decrypted" and facts["dialect"] == "0-9-1"
    assert facts["tls_version"] == {"TLSv1.2": "1.2", "TLSv1.3": "1.3"}[t.client.version()]
    assert facts["tls_cipher_suite"] == suite_name(_iana(t))
    assert facts["tls_plaintext_bytes_to_server"] == len(client) and facts["tls_plaintext_bytes_to_client"] == len(server)
    assert facts["user"] == conv.USER


def test_no_password_inside_tls_reaches_a_row(pki, tmp_path):
    client, server = conv.conversation("PLAIN")
    t, keys = session(pki, tmp_path, "1.3", None, client, server)
    frames, errors, facts = decode(t.turns, keys)
    assert conv.PASSWORD.encode() in client
    assert conv.PASSWORD not in repr((frames, errors, facts))


@pytest.mark.parametrize("version,ciphers", CASES[::3])
def test_without_a_key_each_direction_is_one_tls_row_from_offset_0(pki, tmp_path, version, ciphers):
    client, server = conv.conversation()
    t, _ = session(pki, tmp_path, version, ciphers, client, server)
    other = KeyLog.parse([f"CLIENT_RANDOM {'00' * 32} {'11' * 48}"])
    frames, errors, facts = decode(t.turns, other)
    sizes = {d: sum(len(b) for x, b in t.turns if x == d) for d in DIRS}
    assert frames == [] and facts["tls_status"] == "no_key"
    assert sorted((e["direction"], e["reason"], e["stream_offset"], e["length"]) for e in errors) == [
        ("to_client", "tls", 0, sizes["to_client"]), ("to_server", "tls", 0, sizes["to_server"])]
    assert facts["tls_overhead_bytes_to_server"] == 0 and facts.get("dialect") is None


def test_a_wrong_secret_is_decrypt_failed_and_keeps_every_byte(pki, tmp_path):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, "1.2", CASES[0][1], client, server)
    (random_,) = keys.sessions
    wrong = KeyLog({random_: {"CLIENT_RANDOM": bytes(48)}})
    frames, errors, facts = decode(t.turns, wrong)
    assert frames == [] and facts["tls_status"] == "decrypt_failed"
    assert {e["reason"] for e in errors} == {"tls_decrypt_failed"}


def test_tls13_without_the_handshake_secrets_still_decrypts_the_traffic(pki, tmp_path):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, "1.3", None, client, server)
    (random_,) = keys.sessions
    only = {k: v for k, v in keys.sessions[random_].items() if "HANDSHAKE" not in k}
    frames, errors, facts = decode(t.turns, KeyLog({random_: only}))
    # the encrypted handshake records cannot be opened (overhead); the traffic after them can
    assert facts["tls_status"] == "decrypted" and _comparable(frames) == _comparable(plain(client, server))


def test_key_log_lines_that_do_not_read_are_skipped():
    good = f"CLIENT_RANDOM {'ab' * 32} {'cd' * 48}"
    keys = KeyLog.parse(["# comment", "", good, "CLIENT_RANDOM zz 00", "CLIENT_RANDOM ab cd", "EXPORTER_SECRET a b",
                         f"CLIENT_RANDOM {'ab' * 31} {'cd' * 48}", "only two"])
    assert len(keys) == 1 and keys.skipped_lines == 5
    assert "cdcd" not in repr(keys) and "abab" not in repr(keys)


def test_a_tcp_gap_leaves_the_rest_undecrypted_and_accounted(pki, tmp_path):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, "1.2", CASES[0][1], client, server)
    last_server = max(i for i, (d, _) in enumerate(t.turns) if d == "to_server" and len(t.turns[i][1]) > 1000)
    offset = sum(len(b) for d, b in t.turns[:last_server] if d == "to_server")
    frames, errors, facts = decode(t.turns, keys, cut=("to_server", offset))
    assert facts["tls_status"] == "decrypted" and facts["gap_bytes_to_server"] == len(t.turns[last_server][1])
    assert any(e["reason"] == "tls_after_gap" for e in errors) or facts["tls_undecrypted_bytes_to_server"] == 0
    assert any(f["direction"] == "to_client" for f in frames)


def test_a_record_cut_at_close_is_tls_truncated(pki, tmp_path):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, "1.3", None, client, server)
    turns = list(t.turns)
    i = max(k for k, (d, b) in enumerate(turns) if d == "to_client" and len(b) > 100)
    turns = turns[:i] + [(turns[i][0], turns[i][1][:-40])]
    _, errors, facts = decode(turns, keys)
    assert [(e["reason"], e["direction"]) for e in errors if e["reason"].startswith("tls")] == [("tls_truncated", "to_client")]


def test_flipped_and_cut_bytes_raise_nothing(pki, tmp_path):
    client, server = conv.conversation()
    t, keys = session(pki, tmp_path, "1.3", None, client, server)
    rnd = random.Random(7)
    for _ in range(60):
        turns = [(d, bytearray(b)) for d, b in t.turns]
        for _ in range(rnd.randrange(1, 4)):
            d, b = turns[rnd.randrange(len(turns))]
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        if rnd.random() < 0.3:
            k = rnd.randrange(len(turns))
            turns[k] = (turns[k][0], turns[k][1][: rnd.randrange(len(turns[k][1]) + 1)])
        decode([(d, bytes(b)) for d, b in turns], keys)
