"""Credentials never leave the decoder: search every output row for the password."""

from __future__ import annotations

import pytest

from amqplens.decode.common.facts import redact
from amqplens.decode.v0_9_1.facts import sasl_user

from .conversation import PASSWORD, USER, amqplain_response, conversation
from .encoder import Encoder
from .helpers import run

E = Encoder()
SECRET_FORMS = [PASSWORD.encode(), PASSWORD.encode().hex().encode(), PASSWORD[3:12].encode(), PASSWORD.encode().hex()[6:24].encode()]


def assert_no_password(frames, errors, facts):
    for value in [*(v for r in frames for v in r.values()), *(v for r in errors for v in r.values()), *facts.values()]:
        text = value if isinstance(value, (bytes, bytearray)) else str(value).encode()
        for form in SECRET_FORMS:
            assert form not in text, (form, value)


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_password_never_in_any_row(mechanism):
    c2s, s2c = conversation(mechanism)
    frames, errors, facts = run(c2s, s2c)
    assert_no_password(frames, errors, facts)
    assert facts["user"] == USER and facts["sasl_mechanism"] == mechanism
    start_ok = next(r for r in frames if r["method_name"] == "start-ok")
    assert '"response":"<redacted len=' in start_ok["arguments_json"]


def test_secure_ok_and_update_secret_are_redacted():
    data = (
        E.protocol_header()
        + E.method(0, "connection", "secure-ok", response=PASSWORD)
        + E.method(0, "connection", "update-secret", new_secret=PASSWORD, reason="token refresh")
    )
    frames, errors, facts = run(data)
    assert_no_password(frames, errors, facts)
    assert [r["decode_error"] for r in frames] == [None, None, None]
    assert "token refresh" in frames[2]["arguments_json"]


def test_start_ok_in_error_rows_keeps_no_raw_bytes():
    start_ok = E.method(0, "connection", "start-ok", client_properties={}, mechanism="PLAIN", response=f"\0{USER}\0{PASSWORD}", locale="en_US")
    cases = [
        E.protocol_header() + start_ok[:-5],  # truncated at close
        E.protocol_header() + start_ok[:-1] + b"\x00",  # bad frame-end
        E.protocol_header() + start_ok[:3] + b"\xff" + start_ok[4:],  # size too large
    ]
    for data in cases:
        frames, errors, facts = run(data)
        assert errors and all(e["raw"] is None for e in errors)
        assert_no_password(frames, errors, facts)


def test_gap_inside_start_ok():
    c2s, s2c = conversation()
    at = c2s.index(PASSWORD.encode())
    frames, errors, facts = run(c2s, s2c, gaps=[(at - 30, at - 2)])
    assert_no_password(frames, errors, facts)


def test_redaction_can_be_turned_off_and_keyed():
    c2s, _ = conversation()
    frames, _, _ = run(c2s, redact=False)
    assert PASSWORD in next(r for r in frames if r["method_name"] == "start-ok")["arguments_json"]
    keyed = redact(PASSWORD, b"k")
    assert keyed.startswith("<redacted hmac-sha256:") and keyed == redact(PASSWORD.encode(), b"k") != redact(PASSWORD, b"j")


def test_sasl_user():
    assert sasl_user("PLAIN", f"\0{USER}\0{PASSWORD}") == USER
    assert sasl_user("PLAIN", f"authz\0{USER}\0{PASSWORD}") == USER
    assert sasl_user("AMQPLAIN", amqplain_response(E)) == USER
    assert sasl_user("AMQPLAIN", b"\x05LOGINS\xff\xff\xff\xff") is None
    assert sasl_user("EXTERNAL", b"") is None
    assert sasl_user("RABBIT-CR-DEMO", USER) is None
