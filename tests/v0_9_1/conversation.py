"""A whole 0-9-1 connection, built with the test encoder: handshake, traffic, close."""

from __future__ import annotations

import hashlib

from .encoder import Encoder

PASSWORD = "s3cr3t-Pa55w0rd"
USER = "alice"
BODIES = [b"hello", b"x" * 10_000, b""]  # one small, one over frame_max (split), one empty
FRAME_MAX = 4096


def amqplain_response(e: Encoder, user: str = USER, password: str = PASSWORD) -> bytes:
    return e.table_entries({"LOGIN": user, "PASSWORD": password})


def conversation(mechanism: str = "PLAIN", dialect: str = "0-9-1") -> tuple[bytes, bytes]:
    e = Encoder(dialect)
    c, s = [e.protocol_header()], []
    s.append(e.method(0, "connection", "start", version_major=0, version_minor=9,
                      server_properties={"product": "RabbitMQ", "version": "3.12.1", "platform": "Erlang/OTP 25",
                                         "capabilities": {"publisher_confirms": True, "basic.nack": True}},
                      mechanisms="AMQPLAIN PLAIN", locales="en_US"))
    response = f"\0{USER}\0{PASSWORD}" if mechanism == "PLAIN" else amqplain_response(e)
    c.append(e.method(0, "connection", "start-ok", client_properties={"product": "pika", "version": "1.3.2", "platform": "Python 3.11"},
                      mechanism=mechanism, response=response, locale="en_US"))
    s.append(e.method(0, "connection", "tune", channel_max=2047, frame_max=131072, heartbeat=60))
    c.append(e.method(0, "connection", "tune-ok", channel_max=2047, frame_max=FRAME_MAX, heartbeat=60))
    c.append(e.method(0, "connection", "open", virtual_host="/vh", reserved_1="", reserved_2=False))
    s.append(e.method(0, "connection", "open-ok", reserved_1=""))
    for ch in (1, 2):
        c.append(e.method(ch, "channel", "open", reserved_1=""))
        s.append(e.method(ch, "channel", "open-ok", reserved_1=""))
    c.append(e.method(1, "confirm", "select", nowait=False))
    s.append(e.method(1, "confirm", "select-ok"))
    c.append(e.method(2, "basic", "qos", prefetch_size=0, prefetch_count=10, **{"global": False}))
    s.append(e.method(2, "basic", "qos-ok"))
    c.append(e.method(2, "basic", "consume", reserved_1=0, queue="q", consumer_tag="ctag", no_local=False, no_ack=False,
                      exclusive=False, no_wait=False, arguments={}))
    s.append(e.method(2, "basic", "consume-ok", consumer_tag="ctag"))
    for i, body in enumerate(BODIES):
        c.append(e.method(1, "basic", "publish", reserved_1=0, exchange="ex", routing_key=f"rk{i}", mandatory=True, immediate=False))
        c.append(e.header(1, 60, len(body), {"content_type": "text/plain", "delivery_mode": 2, "headers": {"i": i}}))
        for start in range(0, len(body), FRAME_MAX - 8):
            c.append(e.body(1, body[start : start + FRAME_MAX - 8]))
        s.append(e.method(1, "basic", "ack", delivery_tag=i + 1, multiple=False))
        s.append(e.method(2, "basic", "deliver", consumer_tag="ctag", delivery_tag=i + 1, redelivered=False, exchange="ex", routing_key=f"rk{i}"))
        s.append(e.header(2, 60, len(body), {}))
        for start in range(0, len(body), FRAME_MAX - 8):
            s.append(e.body(2, body[start : start + FRAME_MAX - 8]))
        c.append(e.method(2, "basic", "ack", delivery_tag=i + 1, multiple=False))
    s.append(e.heartbeat())
    c.append(e.heartbeat())
    s.append(e.method(0, "connection", "blocked", reason="low on memory"))
    s.append(e.method(0, "connection", "unblocked"))
    c.append(e.method(0, "connection", "close", reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0))
    s.append(e.method(0, "connection", "close-ok"))
    return b"".join(c), b"".join(s)


def body_hashes() -> list[str]:
    return [hashlib.sha256(b).hexdigest() for b in BODIES]
