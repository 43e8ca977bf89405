"""decode.redact_headers: values of credential-named headers and properties never reach a row.

Tried: a 0-9-1 publish whose headers hold ``Authorization`` (mixed case), a nested
table with ``password``, and an innocent ``x-trace``; a queue.declare whose
arguments hold ``token``; a 1.0 transfer whose application-properties hold
``password`` and ``api_key``; a 0-10 transfer whose application-headers hold ``password``; client
properties with ``secret``; the list emptied.
"""

from __future__ import annotations

import json

from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.redaction import REDACTED, HeaderRedactor
from tests.v0_9_1.encoder import Encoder
from tests.v1_0 import encoder as E10

E = Encoder()
SECRETS = ("Bearer tok-81f2c", "nested-pw-77", "queue-token-5", "amqp10-pw-3", "key-0042", "client-secret-9")


def _publish_with(headers: dict) -> bytes:
    return (E.method(1, "basic", "publish", reserved_1=0, exchange="ex", routing_key="rk", mandatory=False, immediate=False)
            + E.header(1, 60, 2, {"content_type": "text/plain", "headers": headers}) + E.body(1, b"hi"))  # fmt: skip


def _amqp091_stream() -> bytes:
    return (E.protocol_header()
            + E.method(0, "connection", "start-ok", client_properties={"product": "app", "Secret": SECRETS[5]},
                       mechanism="PLAIN", response="\0u\0p", locale="en_US")
            + _publish_with({"Authorization": SECRETS[0], "x-trace": "t-1", "deep": {"password": SECRETS[1]}})
            + E.method(1, "queue", "declare", reserved_1=0, queue="q", passive=False, durable=False, exclusive=False,
                       auto_delete=False, nowait=False, arguments={"token": SECRETS[2], "x-max-length": 10}))  # fmt: skip


def _amqp10_stream() -> bytes:
    props = E10.mp([(E10.string("password"), E10.string(SECRETS[3])), (E10.string("API_KEY"), E10.string(SECRETS[4])),
                    (E10.string("n"), E10.uint(7))])  # fmt: skip
    message = E10.section("application-properties", props) + E10.section("data", E10.binary(b"body"))
    return (E10.AMQP_HEADER
            + E10.performative("open", container_id="c1")
            + E10.performative("begin", channel=1, next_outgoing_id=0, incoming_window=10, outgoing_window=10)
            + E10.performative("attach", channel=1, name="l", handle=0, role=False, initial_delivery_count=0)
            + E10.performative("transfer", channel=1, payload=message, handle=0, delivery_id=0, delivery_tag=b"t", settled=True))  # fmt: skip


def _decode(stream: bytes, **options) -> tuple[list, dict]:
    c = DecodingConsumer("c", DecodeOptions(**options), lambda *_: None)
    c.data("to_server", 0, 1, stream)
    c.close(None)
    return c.drain_frames(), c.connection_facts()


def _text(frames: list, facts: dict) -> str:
    return json.dumps([frames, facts], default=repr)


def test_credential_headers_and_arguments_of_0_9_1_are_redacted():
    frames, facts = _decode(_amqp091_stream())
    header = json.loads(next(f for f in frames if f["frame_type"] == "header")["properties_json"])
    assert header["headers"] == {"Authorization": REDACTED, "x-trace": "t-1", "deep": {"password": REDACTED}}
    declare = json.loads(next(f for f in frames if f["method_name"] == "declare")["arguments_json"])
    assert declare["arguments"] == {"token": REDACTED, "x-max-length": 10}
    start_ok = json.loads(next(f for f in frames if f["method_name"] == "start-ok")["arguments_json"])
    assert start_ok["client_properties"]["Secret"] == REDACTED and start_ok["client_properties"]["product"] == "app"
    assert not [s for s in SECRETS if s in _text(frames, facts)]


def test_credential_application_properties_of_1_0_are_redacted():
    frames, facts = _decode(_amqp10_stream())
    transfer = next(f for f in frames if f["performative"] == "transfer")
    app = json.loads(transfer["properties_json"])["application_properties"]
    assert app == {"password": REDACTED, "API_KEY": REDACTED, "n": 7}
    assert not [s for s in SECRETS if s in _text(frames, facts)]


def test_an_empty_list_keeps_every_value():
    frames, facts = _decode(_amqp091_stream(), redact_headers=())
    assert [s for s in SECRETS if s in _text(frames, facts)] == [SECRETS[0], SECRETS[1], SECRETS[2], SECRETS[5]]


def test_text_naming_no_listed_header_is_returned_untouched():
    r = HeaderRedactor()
    text = '{"headers":{"x-trace":"t","note":"the password is in the vault"}}'
    assert r.text(text) is text  # a value mentioning a name is not a member named so
    assert r.text('{"a":[{"Cookie":"c=1"}]}') == '{"a":[{"Cookie":"<redacted>"}]}'
    assert HeaderRedactor(["x-trace"]).text(text) == '{"headers":{"x-trace":"<redacted>","note":"the password is in the vault"}}'


def test_credential_application_headers_of_0_10_are_redacted():
    from tests.v0_10.conversation import C, S, attach, handshake, streams, transfer

    turns = handshake() + attach() + [(S, transfer(1, "amq.direct", "rk", b"hi", application_headers={"password": "pw-0-10", "k": 1}))]
    s = streams(turns)
    c = DecodingConsumer("c", DecodeOptions(), lambda *_: None)
    c.data("to_server", 0, 1, s[S])
    c.data("to_client", 0, 1, s[C])
    c.close(None)
    frames = c.drain_frames()
    props = [json.loads(f["properties_json"]) for f in frames if f["properties_json"] and "application_headers" in f["properties_json"]]
    assert [p["message.message-properties"]["application_headers"] for p in props] == [{"password": REDACTED, "k": 1}]
    assert "pw-0-10" not in _text(frames, c.connection_facts())


def test_candidates_find_every_value_text_would_change():
    """The compiled path's prefilter: every ASCII value whose redaction differs is a candidate (names in any case,
    nested, as a value rather than a name, absent, null, empty), and values naming nothing are not."""
    import pyarrow as pa

    from amqplens.decode.redaction import HeaderRedactor

    r = HeaderRedactor()
    values = ['{"headers":{"Authorization":"x"}}', '{"a":{"b":{"TOKEN":1}}}', '{"k":"password"}', '{"k":"v"}', None, "",
              '{"x-api-key":"s","y":2}', '{"Cookie":null}', 'not json but names "secret"']
    hit = r.candidates(pa.array(values, pa.string()))
    changed = [v is not None and r.text(v) is not v for v in values]
    assert all(h for h, c in zip(hit, changed) if c)
    assert not hit[3] and not hit[4] and not hit[5]
    assert hit[0] and hit[1] and hit[6]
    # each value searched alone when the column's bytes name one anywhere; a column naming none is all False at once
    # (read as one text: a slice of a larger array, and a name made only by two values put together)
    for column, expected in ((pa.array(values, pa.string()).slice(3, 3), [False] * 3),
                             (pa.array(['{"a":"tok', 'en"}', '{"k":"v"}'], pa.string()), [False] * 3),
                             (pa.array(['{"a":1}', None, '{"Set-Cookie":"c"}'], pa.string()).slice(1), [False, True]),
                             (pa.array(values, pa.string()).slice(0, 2), [True, True])):
        assert r.candidates(column).tolist() == expected[: len(column)]
