"""The per-channel state of a 0-9-1 connection: modes, outstanding tags and consumers."""

from __future__ import annotations

from collections import OrderedDict, deque

from amqplens.lifecycle.machines import EndpointState, Settle
from amqplens.lifecycle.records import Delivery

# (method, requeue) -> the DELIVER event (basic.ack has no requeue)
SETTLE_EVENT: dict[tuple[str, bool], Settle] = {("ack", False): "ack", ("ack", True): "ack", ("nack", True): "nack_requeue", ("nack", False): "nack_drop",
                ("reject", True): "reject_requeue", ("reject", False): "reject_drop"}


class Consumer:
    __slots__ = ("tag", "no_ack", "queue", "prefetch", "in_flight")

    def __init__(self, tag: str, no_ack: bool, queue, prefetch: int) -> None:
        self.tag, self.no_ack, self.queue, self.prefetch, self.in_flight = tag, no_ack, queue, prefetch, 0


class Channel:
    __slots__ = (
        "number", "state", "confirm", "tx", "next_seq", "unconfirmed", "returnable", "tx_publishes", "unacked", "tx_held",
        "consumers", "pending_consumes", "pending_gets", "prefetch_count", "consumer_prefetch", "in_flight", "flow_active",
    )
    state: EndpointState
    flow_active: bool | None

    def __init__(self, number: int) -> None:
        self.number, self.state = number, "unseen"
        self.confirm = self.tx = False
        self.next_seq = 1
        self.unconfirmed: OrderedDict[int, Delivery] = OrderedDict()  # publish number -> publish
        self.returnable: deque[Delivery] = deque()  # mandatory/immediate publishes a return may still name
        self.tx_publishes: list[Delivery] = []
        self.unacked: OrderedDict[int, Delivery] = OrderedDict()  # delivery tag -> delivery, tags ascending
        self.tx_held: list[Delivery] = []
        self.consumers: dict[str, Consumer] = {}
        self.pending_consumes: deque = deque()
        self.pending_gets: deque = deque()
        self.prefetch_count = 0
        self.consumer_prefetch = 0
        self.in_flight = 0
        self.flow_active = None


def pop_upto(d: OrderedDict, tag: int) -> list:
    """Every entry with a key <= tag (keys ascending); tag 0 means all."""
    out = []
    while d:
        k = next(iter(d))
        if tag and k > tag:
            break
        out.append(d.popitem(last=False)[1])
    return out
