"""AMQP 0-10 conversations built from the spec with the test encoder: the fixtures' byte streams.

Each function returns the ``turns`` of one connection, ``[(direction, bytes), ...]``,
in the order a client and a broker would send them (a Qpid-like handshake, then
sessions on channel 1). ``fixtures.py`` writes them as pcaps for tshark.
"""

from __future__ import annotations

from tests.v0_10.encoder import HEADER, assembly, cmd, command, ctl

S, C = "to_server", "to_client"
SERVER_PROPS = {"product": "test-broker", "version": "0.1", "platform": "python"}
CLIENT_PROPS = {"product": "test-client", "qpid.client_pid": 42}


def handshake(user: bytes = b"guest", password: bytes = b"s3cret") -> list:
    return [
        (S, HEADER),
        (C, HEADER + ctl(0, "connection", "start", server_properties=SERVER_PROPS,
                         mechanisms=("str16", ["PLAIN", "ANONYMOUS"]), locales=("str16", ["en_US"]))),
        (S, ctl(0, "connection", "start-ok", client_properties=CLIENT_PROPS, mechanism="PLAIN",
                response=b"\0" + user + b"\0" + password, locale="en_US")),
        (C, ctl(0, "connection", "tune", channel_max=32767, max_frame_size=65535, heartbeat_min=0, heartbeat_max=120)),
        (S, ctl(0, "connection", "tune-ok", channel_max=32767, max_frame_size=65535, heartbeat=60)
            + ctl(0, "connection", "open", virtual_host="/", capabilities=("str16", []))),
        (C, ctl(0, "connection", "open-ok", known_hosts=("str16", ["localhost:5672"]))),
    ]  # fmt: skip


def attach(channel: int = 1, name: bytes = b"session-1", first_id: int = 0) -> list:
    return [
        (S, ctl(channel, "session", "attach", name=name) + ctl(channel, "session", "request-timeout", timeout=0)
            + ctl(channel, "session", "command-point", command_id=first_id, command_offset=0)),
        (C, ctl(channel, "session", "attached", name=name) + ctl(channel, "session", "timeout", timeout=0)
            + ctl(channel, "session", "command-point", command_id=0, command_offset=0)),
    ]  # fmt: skip


def close() -> list:
    return [
        (S, ctl(1, "session", "detach", name=b"session-1")),
        (C, ctl(1, "session", "detached", name=b"session-1", code=0)),
        (S, ctl(0, "connection", "close", reply_code=200, reply_text="OK")),
        (C, ctl(0, "connection", "close-ok")),
    ]


def transfer(channel: int, destination: str, routing_key: str, body: bytes, max_payload: int = 65523, **props) -> bytes:
    delivery = {"routing_key": routing_key, "delivery_mode": 2, "priority": 4, **props.pop("delivery", {})}
    message = {"content_length": len(body), "content_type": "text/plain", "message_id": "12345678-1234-5678-1234-567812345678",
               "application_headers": {"k": "v", "n": 7}, **props}  # fmt: skip
    return assembly(channel, command("message", "transfer", destination=destination, accept_mode=0, acquire_mode=0),
                    [("message.delivery-properties", delivery), ("message.message-properties", message)], body, max_payload)  # fmt: skip


def publish_consume() -> list:
    """Declare, bind, publish, subscribe with credit, receive, accept, complete, close."""
    return handshake() + attach() + [
        (S, cmd(1, "queue", "declare", queue="q1", durable=True, arguments={"x-max": 10})      # id 0
            + cmd(1, "exchange", "bind", queue="q1", exchange="amq.direct", binding_key="k1")  # id 1
            + cmd(1, "execution", "sync", sync=True)                                            # id 2
            + transfer(1, "amq.direct", "k1", b"hello 0-10")                                    # id 3
            + cmd(1, "message", "subscribe", queue="q1", destination="d1", accept_mode=0, acquire_mode=0)  # id 4
            + cmd(1, "message", "set-flow-mode", destination="d1", flow_mode=0)                # id 5
            + cmd(1, "message", "flow", destination="d1", unit=0, value=10)                    # id 6
            + cmd(1, "message", "flow", destination="d1", unit=1, value=0xFFFFFFFF)),          # id 7
        (C, ctl(1, "session", "completed", commands=[[0, 7]], timely_reply=True)
            + transfer(1, "d1", "k1", b"hello 0-10", delivery={"exchange": "amq.direct", "redelivered": True})),  # id 0
        (S, cmd(1, "message", "accept", transfers=[[0, 0]])                                    # id 8
            + ctl(1, "session", "completed", commands=[[0, 0]])
            + ctl(1, "session", "flush", completed=True)),
        (C, ctl(1, "session", "known-completed", commands=[[0, 7]]) + ctl(1, "session", "completed", commands=[[8, 8]])),
        (S, cmd(1, "message", "cancel", destination="d1")                                      # id 9
            + ctl(1, "session", "known-completed", commands=[[0, 0]])),
    ] + close()  # fmt: skip


def large_body(size: int = 20000, max_payload: int = 4084) -> list:
    """A body cut into frames of a 4096-octet max-frame-size (and a header segment after the command)."""
    body = bytes(i % 251 for i in range(size))
    return handshake() + attach() + [
        (S, transfer(1, "amq.direct", "big", body, max_payload=max_payload)
            + cmd(1, "tx", "select") + cmd(1, "tx", "commit", sync=True)),
        (C, ctl(1, "session", "completed", commands=[[0, 2]])),
    ] + close()  # fmt: skip


def results_and_errors() -> list:
    """acquire/acquired, release, reject, query results, an exception, dtx with an xid, session.gap/expected."""
    xid = {"format": 1, "global_id": b"g1", "branch_id": b"b1"}
    return handshake() + attach(first_id=100) + [
        (S, cmd(1, "message", "acquire", transfers=[[5, 9], [12, 12]])                          # id 100
            + cmd(1, "message", "release", transfers=[[5, 6]], set_redelivered=True)           # id 101
            + cmd(1, "message", "reject", transfers=[[7, 7]], code=1, text="unroutable")        # id 102
            + cmd(1, "queue", "query", queue="q1")                                             # id 103
            + cmd(1, "dtx", "select") + cmd(1, "dtx", "start", xid=xid, join=True)              # id 104, 105
            + cmd(1, "exchange", "declare", exchange="x1", type="topic", durable=True)),       # id 106
        (C, cmd(1, "execution", "result", command_id=100, value=("message.acquired", {"transfers": [[5, 9]]}))
            + cmd(1, "execution", "result", command_id=103,
                  value=("queue.queue-query-result", {"queue": "q1", "durable": True, "message_count": 3, "subscriber_count": 1}))
            + cmd(1, "execution", "exception", error_code=404, command_id=106, class_code=7, command_code=1,
                  description="not-found: x1", error_info={})),
        (S, ctl(1, "session", "gap", commands=[[107, 109]])
            + ctl(1, "session", "expected", commands=[[0, 4294967295]])
            + ctl(1, "session", "confirmed", commands=[[100, 101]])
            + ctl(0, "connection", "heartbeat")),
        (C, ctl(1, "session", "detached", name=b"session-1", code=4)),
        (C, ctl(0, "connection", "close", reply_code=320, reply_text="connection forced")),
        (S, ctl(0, "connection", "close-ok")),
    ]  # fmt: skip


def file_and_stream() -> list:
    """The legacy file and stream classes (commands only)."""
    return handshake() + attach() + [
        (S, cmd(1, "file", "qos", prefetch_size=0, prefetch_count=10, **{"global": True})
            + cmd(1, "file", "consume", queue="fq", consumer_tag="ct1", no_ack=True)
            + cmd(1, "stream", "qos", prefetch_count=5, consume_rate=100)
            + cmd(1, "file", "ack", delivery_tag=7, multiple=True)),
        (C, cmd(1, "file", "deliver", consumer_tag="ct1", delivery_tag=7, redelivered=True, exchange="x", routing_key="r", identifier="f1")),
    ] + close()  # fmt: skip


CONVERSATIONS = {
    "publish_consume": publish_consume,
    "large_body": large_body,
    "results_and_errors": results_and_errors,
    "file_and_stream": file_and_stream,
}


def streams(turns: list) -> dict:
    out = {S: b"", C: b""}
    for direction, data in turns:
        out[direction] += data
    return out
