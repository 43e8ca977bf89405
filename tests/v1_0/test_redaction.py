"""Credentials never leave the decoder: search every output row and fact for the password.

The sasl-init initial-response (PLAIN: authzid NUL authcid NUL password) is written as
``<redacted len=N>``; error rows whose bytes could hold it keep no raw bytes; bodies are never
stored (size and hash; a prefix only when configured).
"""

from __future__ import annotations

import json
import pathlib

import pytest

from amqplens.decode.v1_0 import Amqp10StreamDecoder

from . import encoder as E
from .captures import decode_capture
from .conversation import PASSWORD, USER, conversation
from .helpers import run

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTON = ROOT / "tests" / "data" / "broker" / "amqp10_proton.pcap"


def secret_forms(password: str) -> list[bytes]:
    raw = password.encode()
    return [raw, raw.hex().encode(), raw[1:-1], raw.hex()[2:-2].encode()]


def texts(frames, errors, facts, skip_facts=()):
    for value in [*(v for r in frames for v in r.values()), *(v for r in errors for v in r.values()),
                  *(v for k, v in facts.items() if k not in skip_facts)]:
        yield value if isinstance(value, (bytes, bytearray)) else str(value).encode()


def assert_no_secret(frames, errors, facts, password=PASSWORD, skip_facts=()):
    for text in texts(frames, errors, facts, skip_facts):
        for form in secret_forms(password):
            assert form not in text, (form, text[:200])


def test_password_never_in_any_row():
    c2s, s2c = conversation()
    frames, errors, facts = run(c2s, s2c)
    assert_no_secret(frames, errors, facts)
    assert facts["user"] == USER and facts["sasl_mechanism"] == "PLAIN"
    init = next(r for r in frames if r["performative"] == "sasl-init")
    assert json.loads(init["arguments_json"])["initial_response"] == f"<redacted len={len(USER) + len(PASSWORD) + 2}>"


def test_sasl_response_is_redacted_too():
    data = E.SASL_HEADER + E.performative("sasl-response", response=PASSWORD.encode())
    frames, errors, facts = run(data)
    assert_no_secret(frames, errors, facts)
    assert '"response":"<redacted len=' in frames[1]["arguments_json"]


def test_redaction_can_be_turned_off():
    frames, _, _ = run(*conversation(), redact=False)
    init = next(r for r in frames if r["performative"] == "sasl-init")
    assert PASSWORD.encode().hex() in init["arguments_json"]


def test_a_redaction_key_gives_matchable_redactions():
    frames, _, _ = run(*conversation(), redaction_key=b"k")
    init = next(r for r in frames if r["performative"] == "sasl-init")
    assert "<redacted hmac-sha256:" in init["arguments_json"]


def _init_frame(symbolic=False) -> bytes:
    body = E.composite("sasl-init", mechanism=E.symbol("PLAIN"), initial_response=f"\0{USER}\0{PASSWORD}".encode())
    if symbolic:
        body = (0x00, (E.symbol("amqp:sasl-init:list"), body[1][1]))
    return E.frame(E.encode(body), ftype=1)


@pytest.mark.parametrize(
    "data",
    [
        E.SASL_HEADER + _init_frame()[:-3],  # truncated at close
        E.SASL_HEADER + _init_frame()[:4] + b"\x01" + _init_frame()[5:],  # doff 1: a bad header
        E.SASL_HEADER + b"\x7f" + _init_frame()[1:],  # a size over the limit
        E.SASL_HEADER + b"\x00" + _init_frame(symbolic=True)[1:5] + b"\x09" + _init_frame(symbolic=True)[6:],  # frame type 9
        b"garbage!" + _init_frame(),  # no header: the search skips nothing it can trust
    ],
)
def test_error_rows_that_could_hold_the_response_keep_no_raw_bytes(data):
    frames, errors, facts = run(data)
    assert errors and all(e["raw"] is None for e in errors if PASSWORD.encode() in data[e["stream_offset"] :])
    assert_no_secret(frames, errors, facts)


def test_a_gap_inside_the_sasl_init():
    c2s, s2c = conversation()
    at = c2s.index(PASSWORD.encode())
    frames, errors, facts = run(c2s, s2c, gaps=[(at - 10, at - 2)])
    assert errors and all(e["raw"] is None for e in errors if e["direction"] == "to_server")
    assert_no_secret(frames, errors, facts)


def test_mid_stream_start_inside_the_sasl_init():
    c2s, _ = conversation()
    at = c2s.index(PASSWORD.encode()) - 3
    dec = Amqp10StreamDecoder("c")
    dec.data("to_server", at, 1, c2s[at:])
    dec.close()
    frames, errors, facts = dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
    assert errors[0]["reason"] == "resync_skipped" and errors[0]["raw"] is None
    assert_no_secret(frames, errors, facts)


def test_error_rows_after_the_amqp_header_keep_their_bytes():
    c2s, _ = conversation()
    junk = b"\x00\x00\x00\x05\x02\x00\x00\x00junk"
    frames, errors, _ = run(c2s + junk)
    assert [e["reason"] for e in errors] == ["bad_frame_header"] and errors[0]["raw"] == junk


def test_bodies_are_never_stored_unless_a_prefix_is_asked_for():
    secret_body = b"body-secret-" + b"z" * 40
    c = E.AMQP_HEADER + E.performative("transfer", payload=E.section("data", E.binary(secret_body)), handle=0, delivery_id=0)
    frames, errors, facts = run(c)
    for text in texts(frames, errors, facts):
        assert b"body-secret" not in text and secret_body.hex()[:20].encode() not in text
    frames, _, _ = run(c, body_prefix_bytes=11)
    assert frames[-1]["body_prefix"] == b"body-secret"


def test_the_proton_fixture_password_never_appears():
    """tests/data/broker/amqp10_proton.trace.txt shows the client's initial-response \\0guest\\0guest:
    the user and the password are both "guest", so the user fact is the one place it may appear."""
    trace = (ROOT / "tests" / "data" / "broker" / "amqp10_proton.trace.txt").read_text()
    assert 'initial-response=b"\\x00guest\\x00guest"' in trace
    (conn,) = decode_capture(PROTON)
    assert conn.facts["user"] == "guest" and conn.facts["sasl_mechanism"] == "PLAIN"
    assert_no_secret(conn.frames, conn.errors, conn.facts, password="guest", skip_facts=("user",))
    for text in texts(conn.frames, conn.errors, conn.facts):
        assert b"\x00guest\x00guest" not in text and b"006775657374006775657374" not in text
