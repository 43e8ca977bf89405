"""A whole AMQP 1.0 connection, both directions, built with the test encoder.

SASL PLAIN, open, begin, a sender link with three messages (one split over
three transfers, one aborted after its first transfer), a receiver link with
credit and a delivered message, dispositions, detach with an error, end, close.
"""

from __future__ import annotations

import random

from . import encoder as E

USER = "guest"
PASSWORD = "s3cret-Passw0rd"
BIG_BODY = bytes(range(256)) * 12  # 3072 bytes, sent in three transfers
SMALL_BODY = b"hello, world"


def message(body: bytes, message_id: str = "m1") -> bytes:
    return (
        E.section("header", E.lst(E.boolean(True), (0x50, 4)))
        + E.section("message-annotations", E.mp([(E.symbol("x-opt-jms-dest"), (0x51, 0))]))
        + E.section("properties", E.lst(E.string(message_id), (0x40, None), E.string("/queue/q")))
        + E.section("application-properties", E.mp([(E.string("n"), (0x71, -5))]))
        + E.section("data", E.binary(body))
        + E.section("footer", E.mp([(E.symbol("x-sum"), E.uint(7))]))
    )


def conversation(password: str = PASSWORD) -> tuple[bytes, bytes]:
    big = message(BIG_BODY, "big")
    cut1, cut2 = 1000, 2100
    c = [
        E.SASL_HEADER,
        E.performative("sasl-init", mechanism=E.symbol("PLAIN"), initial_response=f"\0{USER}\0{password}".encode(), hostname="localhost"),
        E.AMQP_HEADER,
        E.performative("open", container_id="client-1", hostname="localhost", max_frame_size=1200, channel_max=9,
                       desired_capabilities=["ANONYMOUS-RELAY"]),
        E.performative("begin", channel=1, next_outgoing_id=0, incoming_window=100, outgoing_window=100),
        E.performative("attach", channel=1, name="sender-link", handle=0, role=False, snd_settle_mode=2, rcv_settle_mode=0,
                       source=E.composite("source", address="client-src"), target=E.composite("target", address="/queue/q"),
                       initial_delivery_count=0),
        E.performative("attach", channel=1, name="receiver-link", handle=1, role=True, rcv_settle_mode=1,
                       source=E.composite("source", address="/queue/q"), target=E.composite("target")),
        E.performative("flow", channel=1, next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100,
                       handle=1, delivery_count=0, link_credit=10, drain=False),
        E.performative("transfer", channel=1, payload=message(SMALL_BODY), handle=0, delivery_id=0, delivery_tag=b"t0",
                       message_format=0, settled=False),
        E.performative("transfer", channel=1, payload=big[:cut1], handle=0, delivery_id=1, delivery_tag=b"t1", message_format=0, more=True),
        E.EMPTY_FRAME,
        E.performative("transfer", channel=1, payload=big[cut1:cut2], handle=0, more=True),
        E.performative("transfer", channel=1, payload=big[cut2:], handle=0, more=False),
        E.performative("transfer", channel=1, payload=message(b"never")[:20], handle=0, delivery_id=2, delivery_tag=b"t2", more=True),
        E.performative("transfer", channel=1, handle=0, aborted=True),
        E.performative("disposition", channel=1, role=True, first=0, settled=True, state=E.composite("accepted")),
        E.performative("detach", channel=1, handle=0, closed=True),
        E.performative("end", channel=1),
        E.performative("close"),
    ]
    s = [
        E.SASL_HEADER,
        E.performative("sasl-mechanisms", sasl_server_mechanisms=["PLAIN", "ANONYMOUS"]),
        E.performative("sasl-outcome", code=0),
        E.AMQP_HEADER,
        E.performative("open", container_id="broker", max_frame_size=4096, channel_max=99, idle_time_out=30000,
                       offered_capabilities=["ANONYMOUS-RELAY"], properties=E.mp([(E.symbol("product"), E.string("test-broker"))])),
        E.performative("begin", channel=3, remote_channel=1, next_outgoing_id=0, incoming_window=50, outgoing_window=50),
        E.performative("attach", channel=3, name="sender-link", handle=7, role=True, snd_settle_mode=2, rcv_settle_mode=0,
                       source=E.composite("source", address="client-src"), target=E.composite("target", address="/queue/q")),
        E.performative("attach", channel=3, name="receiver-link", handle=8, role=False, snd_settle_mode=0, rcv_settle_mode=1,
                       source=E.composite("source", address="/queue/q"), target=E.composite("target"), initial_delivery_count=0),
        E.performative("flow", channel=3, next_incoming_id=0, incoming_window=50, next_outgoing_id=0, outgoing_window=50,
                       handle=7, delivery_count=0, link_credit=100, echo=True),
        E.performative("transfer", channel=3, payload=message(b"to the client", "d1"), handle=8, delivery_id=0, delivery_tag=b"\x00\x01",
                       message_format=0),
        E.performative("disposition", channel=3, role=True, first=0, last=1, settled=True, state=E.composite("accepted")),
        E.performative("disposition", channel=3, role=True, first=2, settled=True,
                       state=E.composite("rejected", error=E.composite("error", condition=E.symbol("amqp:invalid-field"), description="bad"))),
        E.EMPTY_FRAME,
        E.performative("detach", channel=3, handle=7, closed=True,
                       error=E.composite("error", condition=E.symbol("amqp:link:detach-forced"), description="bye")),
        E.performative("end", channel=3),
        E.performative("close", error=E.composite("error", condition=E.symbol("amqp:connection:forced"), description="shutdown")),
    ]
    return b"".join(c), b"".join(s)


def load(messages: int = 200, seed: int = 0) -> tuple[bytes, bytes]:
    """A sender and a receiver under load, in every encoding the walk reads (and some it leaves): transfers with
    settled / more / rcv-settle-mode / states, messages over several transfers, flows, dispositions of both roles."""
    rng = random.Random(seed)
    c = [E.AMQP_HEADER, E.performative("open", container_id="c"), E.performative("begin", channel=2, next_outgoing_id=0,
                                                                                     incoming_window=2**31, outgoing_window=9)]
    s = [E.AMQP_HEADER, E.performative("open", container_id="s")]
    for i in range(messages):
        body = rng.randbytes(rng.choice([0, 1, 63, 64, 65, 300, 5000]))
        payload = message(body, f"m{i}") if i % 3 else E.section("amqp-value", E.string("v" * (i % 50)))
        fields = dict(handle=i % 3, delivery_id=i, delivery_tag=(i % 256).to_bytes(1, "big") if i % 3 == 0 else i.to_bytes(rng.choice([4, 8]), "big"), message_format=0)
        if i % 4 == 0:
            fields["settled"] = bool(i % 8)
        if i % 5 == 0:
            fields["rcv_settle_mode"] = i % 2
        if i % 7 == 0:  # over two transfers
            cut = len(payload) // 2
            c.append(E.performative("transfer", channel=2, payload=payload[:cut], more=True, **fields))
            c.append(E.performative("transfer", channel=2, payload=payload[cut:], handle=i % 3))
        else:
            c.append(E.performative("transfer", channel=2, payload=payload, **fields))
        if i % 10 == 0:
            c.append(E.frame(E.encode(E.described(0x13, E.lst(E.uint(i), E.uint(100), (0x70, i), (0x80, 2**40), E.uint(1),
                                                            E.uint(i), (0x52, 5), (0x40, None), (0x56, 1), E.boolean(False)))),
                             channel=2))
        if i % 2:
            state = E.composite("accepted") if i % 3 else E.composite("released")
            s.append(E.performative("disposition", channel=2, role=True, first=i - 1, last=i, settled=True, state=state))
        if i % 11 == 0:
            s.append(E.performative("flow", channel=2, next_incoming_id=i, incoming_window=2**31 - 1, next_outgoing_id=0,
                                    outgoing_window=0, handle=i % 3, delivery_count=i, link_credit=1000, echo=True))
        if i % 13 == 0:  # left to the reference: a rejected state, a field past the spec's, a signed int (0x71)
            s.append(E.performative("disposition", channel=2, role=True, first=i, state=E.composite("rejected")))
            c.append(E.frame(E.encode(E.described(0x15, E.lst(E.boolean(False), E.uint(i), E.uint(i), E.boolean(True),
                                                            (0x40, None), E.boolean(False), E.uint(9)))), channel=2))
            c.append(E.frame(E.encode(E.described(0x13, E.lst((0x71, 5)))), channel=2))
    return b"".join(c), b"".join(s)
