"""Golden wire cases: every method of every dialect in the generated tables, and pika's bytes.

The frames are built from the generated tables by the test encoder, then
decoded; for the 0-9-1 methods and properties pika knows, pika's own
marshalling must produce the same bytes and decode to the same values.
"""

from __future__ import annotations

import inspect
import json

import pika.frame
import pika.spec
import pytest

from amqplens.decode.v0_9_1 import decode_streams
from amqplens.decode.v0_9_1.frames import SPECS
from amqplens.decode.common.rows import to_json

from .encoder import Encoder

REDACTED = {("connection", "start-ok"): "response", ("connection", "secure-ok"): "response", ("connection", "update-secret"): "new_secret"}


def sample(fields: tuple) -> dict:
    """A distinct, recognisable value for every field of a method."""
    out = {}
    for i, (name, wire) in enumerate(fields):
        out[name] = {
            "bit": i % 3 != 1,
            "octet": (i * 7 + 1) % 256,
            "short": 0x100 + i,
            "long": 0x10000 + i,
            "longlong": 0x1_0000_0000 + i,
            "timestamp": 1_700_000_000 + i,
            "shortstr": f"{name}-{i}",
            "longstr": f"long {name}",
            "table": {"name": name, "n": i, "nested": {"ok": True}},
            "content": {"inline": b"body-bytes"},
        }[wire]
    return out


def expected_arguments(meta: tuple, args: dict) -> dict:
    out = dict(args)
    secret = REDACTED.get((meta[0], meta[1]))
    if secret:
        out[secret] = f"<redacted len={len(out[secret].encode())}>"
    return out


ALL_METHODS = [(d, key) for d, spec in SPECS.items() for key in sorted(spec.METHODS)]


@pytest.mark.parametrize("dialect, key", ALL_METHODS, ids=[f"{d}:{SPECS[d].METHODS[k][0]}.{SPECS[d].METHODS[k][1]}" for d, k in ALL_METHODS])
def test_every_method_of_every_dialect(dialect, key):
    meta = SPECS[dialect].METHODS[key]
    args = sample(meta[4])
    channel = 0 if key >> 16 == 10 else 1
    wire = Encoder(dialect).method(channel, meta[0], meta[1], **args)
    frames, errors, _ = decode_streams(wire, dialect=dialect)
    assert errors == []
    [row] = frames
    assert (row["frame_type"], row["channel"], row["size"]) == ("method", channel, len(wire))
    assert (row["class_id"], row["method_id"]) == (key >> 16, key & 0xFFFF)
    assert (row["class_name"], row["method_name"]) == (meta[0], meta[1])
    assert row["decode_error"] is None
    assert row["dialect"] == dialect
    assert row["arguments_json"] == to_json(expected_arguments(meta, args))
    for arg, column in (("delivery_tag", "delivery_tag"), ("routing_key", "routing_key"), ("global", "global_qos")):
        if arg in args:
            assert row[column] == args[arg]


def test_hand_written_vectors():
    ack = bytes.fromhex("01 0001 0000000d 003c 0050 0000000000000005 01 ce")
    heartbeat = bytes.fromhex("08 0000 00000000 ce")
    frames, errors, _ = decode_streams(ack + heartbeat)
    assert errors == []
    assert [(r["frame_type"], r["method_name"], r["delivery_tag"], r["multiple"]) for r in frames] == [
        ("method", "ack", 5, True),
        ("heartbeat", None, None, None),
    ]
    # five bits in one octet: queue.declare passive durable exclusive auto-delete no-wait = 1 0 1 0 1
    qd = Encoder().method(1, "queue", "declare", reserved_1=0, queue="q", passive=True, durable=False, exclusive=True, auto_delete=False, no_wait=True, arguments={})
    assert qd[7 + 4 + 2 + 2] == 0b10101
    [row], _, _ = decode_streams(qd)
    assert json.loads(row["arguments_json"])["exclusive"] is True


def test_more_than_eight_bits_take_two_octets():
    e = Encoder()
    fields = tuple((f"b{i}", "bit") for i in range(10))
    assert e.fields(fields, {f"b{i}": True for i in range(10)}) == b"\xff\x03"


# -- pika cross-checks ---------------------------------------------------------------------

def _pika_methods():
    out = []
    for cls_name in ("Connection", "Channel", "Access", "Exchange", "Queue", "Basic", "Tx", "Confirm"):
        cls = getattr(pika.spec, cls_name)
        for obj in vars(cls).values():
            if inspect.isclass(obj) and hasattr(obj, "INDEX"):
                out.append(obj)
    return sorted(out, key=lambda c: c.INDEX)


PIKA_METHODS = _pika_methods()
SPEC091 = SPECS["0-9-1"]


def test_pika_knows_no_0_9_1_method_we_do_not():
    known = {c.INDEX for c in PIKA_METHODS if c.INDEX >> 16 != 30}  # pika still carries 0-8's access class
    assert known <= set(SPEC091.METHODS)


@pytest.mark.parametrize("pika_cls", [c for c in PIKA_METHODS if c.INDEX in SPEC091.METHODS], ids=lambda c: c.NAME)
def test_same_bytes_as_pika(pika_cls):
    meta = SPEC091.METHODS[pika_cls.INDEX]
    args = sample(meta[4])
    params = [p for p in inspect.signature(pika_cls.__init__).parameters if p != "self"]
    assert len(params) == len(meta[4]), (params, meta[4])
    channel = 0 if pika_cls.INDEX >> 16 == 10 else 1
    theirs = pika.frame.Method(channel, pika_cls(*[args[name] for name, _ in meta[4]])).marshal()
    ours = Encoder().method(channel, meta[0], meta[1], **args)
    assert theirs == ours
    [row], errors, _ = decode_streams(theirs)
    assert errors == [] and row["decode_error"] is None
    assert row["arguments_json"] == to_json(expected_arguments(meta, args))


FULL_PROPERTIES = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "headers": {"x-int": 7, "x-str": "v", "x-list": [1, "two", {"three": 3}], "x-none": None, "x-bool": False},
    "delivery_mode": 2,
    "priority": 9,
    "correlation_id": "corr",
    "reply_to": "amq.rabbitmq.reply-to",
    "expiration": "60000",
    "message_id": "m-1",
    "timestamp": 1_700_000_000,
    "type": "t",
    "user_id": "guest",
    "app_id": "app",
    "cluster_id": "c",
}


@pytest.mark.parametrize("subset", [FULL_PROPERTIES, {}, {"delivery_mode": 1}, {"cluster_id": "only-last"}])
def test_content_header_same_bytes_as_pika(subset):
    theirs = pika.frame.Header(3, 1234, pika.spec.BasicProperties(**subset)).marshal()
    # the 0-9-1 XML names the 14th property "reserved" (0-8's cluster-id); pika keeps the old name
    ours_props = {("reserved" if k == "cluster_id" else k): v for k, v in subset.items()}
    ours = Encoder().header(3, 60, 1234, ours_props)
    assert theirs == ours
    decoder_input = Encoder().method(3, "basic", "publish", reserved_1=0, exchange="", routing_key="r", mandatory=False, immediate=False) + theirs
    frames, errors, _ = decode_streams(decoder_input)
    assert errors == []
    header = frames[1]
    assert header["frame_type"] == "header" and header["body_size"] == 1234 and header["decode_error"] is None
    assert json.loads(header["properties_json"]) == ours_props
    assert header["message_seq"] == 0 and header["body_sha256"] is None  # 1234 body bytes still to come


def test_body_and_heartbeat_same_bytes_as_pika():
    assert pika.frame.Body(2, b"xyz").marshal() == Encoder().body(2, b"xyz")
    assert pika.frame.Heartbeat().marshal() == Encoder().heartbeat()
    assert pika.frame.ProtocolHeader().marshal() == Encoder().protocol_header()


def test_property_flags_continuation_word():
    # 0-9's and 0-8's classes have at most 15 properties; a synthetic 17-property class needs two words
    e = Encoder()
    e.spec = type("S", (), {"PROPERTIES": {99: tuple((f"p{i}", "octet") for i in range(17))}, "METHODS": {}})
    payload = e.header_payload(99, 0, {"p0": 1, "p16": 2})
    assert payload[12:16] == bytes.fromhex("8001 4000")
