"""The rows the lifecycle stage emits, and the record a delivery lives in until then.

Output rows are plain dicts with exactly the keys below: the columns of the
``deliveries``, ``flow_events`` and ``request_responses`` contracts, with
timestamps as int64 microseconds (``*_ts_us``) and without ``capture_id`` /
``capture_date``, which the job adds.

Keys. ``delivery_id`` is ``<connection_id>-<to_broker|from_broker>-<channel>-<n>``
(0-9-1 and 0-10) or ``...-<channel>-<handle>-<n>`` (1.0), where n is the codec's
``message_seq`` of the message (per channel or link and direction, so unique
in the connection where delivery tags and ids are not: channels reopen and
restart their tags, ids wrap) or ``f<stream_offset>`` of its first frame when
the codec gave it none or one not above the highest already taken there (so
two rows never share an id: numbers rise, and a frame starts at most one row). ``event_id`` is ``<frame_id>-<entity>[-<key>]`` with
key the channel, ``<channel>-<consumer tag>``, the session channel,
``<session channel>-<c|s><handle>`` (whose handle numbering: client's or
server's) or, 0-10, ``<channel>-<c|s><destination>`` (credit for the client's
or the server's transfers); each frame makes at most one row per entity.

Settle modes: 0-9-1 publishes ``confirm`` | ``tx`` | ``no_confirm``,
deliveries ``auto_ack`` | ``manual_ack`` | ``tx``; 1.0 ``<snd>/<rcv>`` from the
attaches (``mixed/first``, ``unsettled/second``, ...); 0-10
``<accept-mode>/<acquire-mode>`` of the transfer (``explicit/pre-acquired``,
``none/not-acquired``, ...).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from amqplens.lifecycle.machines import DeliveryState, Machine, RequestState

_E = TypeVar("_E", bound=str)

DELIVERY_KEYS = (
    "delivery_id", "connection_id", "dialect", "direction", "channel", "consumer_tag", "link_handle", "link_name",
    "delivery_tag", "transfer_id", "delivery_tag_bin", "method", "exchange", "routing_key", "queue",
    "message_id", "correlation_id", "content_type", "delivery_mode", "priority", "properties_json",
    "body_size", "body_sha256", "redelivered", "settle_mode", "sent_ts_us", "settled_ts_us", "settle_latency_us",
    "outcome", "settled_by_frame_id", "frame_ids", "flags",
)
FLOW_EVENT_KEYS = (
    "event_id", "connection_id", "ts_us", "frame_id", "entity", "channel", "consumer_tag", "link_handle", "event",
    "prefetch_count", "in_flight", "at_limit", "flow_active", "blocked", "reason", "link_credit", "delivery_count",
    "drain", "incoming_window", "outgoing_window", "remote_incoming_window",
)
REQUEST_RESPONSE_KEYS = (
    "request_frame_id", "response_frame_id", "connection_id", "dialect", "channel", "request", "response",
    "request_ts_us", "response_ts_us", "latency_us", "reply_code", "error_condition", "status",
)
TO_BROKER, FROM_BROKER = "to_broker", "from_broker"
_FLOW_TEMPLATE = dict.fromkeys(FLOW_EVENT_KEYS)
_RR_TEMPLATE = dict.fromkeys(REQUEST_RESPONSE_KEYS)


def frame_arg(f: dict, name: str):
    """One decoded argument of a frame row, from its arguments_json (None if absent or unreadable)."""
    try:
        args = json.loads(f.get("arguments_json") or "{}")
    except (ValueError, TypeError, RecursionError):
        return None
    return args.get(name) if isinstance(args, dict) else None


def frame_id_of(row: dict) -> str:
    """The frames table's key, when a row does not carry it (as amqplens/jobs/ingest_captures.py builds it)."""
    fid = row.get("frame_id")
    if fid is None:
        fid = f"{row['connection_id']}-{'s' if row['direction'] == 'to_server' else 'c'}-{row['stream_offset']}"
    return fid


def _text(v):
    return v if v is None or isinstance(v, str) else str(v)


def _int(v):
    """delivery-mode, priority, delivery-count: unsigned in every dialect's spec, into int32 columns. A 1.0 peer may
    encode them in any type (a byte -1, a ulong 2^40): out of that range the column stays null, not a negative
    value that deliveries.non_negative (our invariant) judges nor one the column cannot hold."""
    return v if type(v) is int and 0 <= v < 1 << 31 else None


def properties_0_9_1(props: dict) -> tuple:
    return (_text(props.get("message_id")), _text(props.get("correlation_id")), _text(props.get("content_type")),
            _int(props.get("delivery_mode")), _int(props.get("priority")), None)


def properties_1_0(sections: dict) -> tuple:
    """message-id, correlation-id, content-type from the properties section; durable as 2/1, priority and
    redelivered (first-acquirer false or a delivery-count) from the header section."""
    props = sections.get("properties") or {}
    header = sections.get("header")
    mode = prio = redelivered = None
    if isinstance(header, dict):
        durable = header.get("durable")
        mode = None if durable is None else 2 if durable else 1
        prio = _int(header.get("priority"))
        redelivered = header.get("first_acquirer") is False or (_int(header.get("delivery_count")) or 0) > 0
    if not isinstance(props, dict):
        props = {}
    return (_text(props.get("message_id")), _text(props.get("correlation_id")), _text(props.get("content_type")), mode, prio, redelivered)


def properties_0_10(structs: dict) -> tuple:
    """message-id, correlation-id, content-type from message-properties; delivery-mode (1 non-persistent,
    2 persistent), priority and redelivered from delivery-properties (the header segment's structs)."""
    props = structs.get("message.message-properties")
    delivery = structs.get("message.delivery-properties")
    props = props if isinstance(props, dict) else {}
    delivery = delivery if isinstance(delivery, dict) else {}
    redelivered = delivery.get("redelivered")
    return (_text(props.get("message_id")), _text(props.get("correlation_id")), _text(props.get("content_type")),
            _int(delivery.get("delivery_mode")), _int(delivery.get("priority")),
            redelivered if isinstance(redelivered, bool) else None)


_PROPERTIES = {"1.0": properties_1_0, "0-10": properties_0_10}


class Delivery:
    """One message transfer while it is live: its machine state and what its row will say."""

    __slots__ = (
        "delivery_id", "connection_id", "dialect", "direction", "channel", "consumer_tag", "link_handle", "link_name",
        "delivery_tag", "transfer_id", "delivery_tag_bin", "method", "exchange", "routing_key", "queue",
        "properties_json", "body_size", "body_sha256", "redelivered", "settle_mode", "sent_ts_us", "settled_ts_us",
        "outcome", "settled_by_frame_id", "frame_ids", "flags",
        "state", "complete", "consumer", "mandatory", "sender",
    )
    delivery_id: str
    connection_id: str
    dialect: str
    direction: str
    channel: int
    consumer_tag: str | None
    link_handle: int | None
    link_name: str | None
    delivery_tag: int | None
    transfer_id: int | None
    delivery_tag_bin: bytes | None
    method: str
    exchange: str | None
    routing_key: str | None
    queue: str | None
    properties_json: str | None
    body_size: int | None
    body_sha256: str | None
    redelivered: bool | None
    settle_mode: str | None
    sent_ts_us: int
    settled_ts_us: int | None
    outcome: str | None
    settled_by_frame_id: str | None
    frame_ids: list[str]
    state: DeliveryState
    complete: bool
    consumer: Any  # 0-9-1: the Consumer of a basic.deliver; 1.0: the Link; 0-10: the destination (a str)
    mandatory: bool
    sender: str | None

    def __init__(self, delivery_id: str, connection_id: str, dialect: str, direction: str, channel, method: str, frame_id: str, ts_us: int):
        self.delivery_id, self.connection_id, self.dialect, self.direction = delivery_id, connection_id, dialect, direction
        self.channel, self.method = channel, method
        self.consumer_tag = self.link_handle = self.link_name = self.delivery_tag = self.transfer_id = None
        self.delivery_tag_bin = self.exchange = self.routing_key = self.queue = None
        self.properties_json = self.body_size = self.body_sha256 = self.redelivered = self.settle_mode = None
        self.sent_ts_us, self.settled_ts_us, self.outcome, self.settled_by_frame_id = ts_us, None, None, None
        self.frame_ids = [frame_id]
        self.flags: list | None = None
        self.state = "new"
        self.complete = False  # all frames of the message seen (0-9-1: body_sha256; 1.0: the last transfer)
        self.consumer = None  # 0-9-1: the Consumer of a basic.deliver; 1.0: the Link
        self.mandatory = False
        self.sender = None  # 1.0: the direction transfers travel in

    @property
    def live(self) -> bool:
        return self.outcome is None

    def flag(self, name: str) -> None:
        if self.flags is None:
            self.flags = [name]
        elif name not in self.flags:
            self.flags.append(name)

    def step(self, machine: Machine[Any, _E, Any], event: _E, frame_id: str | None, ts_us: int | None) -> bool:
        """Apply one event through the machine's table; True when the delivery has just ended."""
        if self.outcome is not None:
            return False
        t = machine.step(self.state, event)
        if t.flag:
            self.flag(t.flag)
        effect = t.effect
        if effect in ("settle", "settle_held", "close"):
            self.settled_by_frame_id, self.settled_ts_us = frame_id, ts_us
        elif effect == "fire":
            self.settled_by_frame_id, self.settled_ts_us = self.frame_ids[0], self.sent_ts_us
        elif effect == "mark":
            self.settled_by_frame_id, self.settled_ts_us = frame_id, ts_us
        elif effect == "revert":
            self.settled_by_frame_id = self.settled_ts_us = None
        if t.next_state in machine.outcomes:
            self.outcome = t.next_state
            return True
        self.state = t.next_state
        return False

    def row(self) -> dict:
        info = (None,) * 6
        if self.properties_json:
            try:
                parsed = json.loads(self.properties_json)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                info = _PROPERTIES.get(self.dialect, properties_0_9_1)(parsed)
        redelivered = self.redelivered if self.redelivered is not None else info[5]
        latency = None if self.settled_ts_us is None else self.settled_ts_us - self.sent_ts_us
        return {
            "delivery_id": self.delivery_id, "connection_id": self.connection_id, "dialect": self.dialect,
            "direction": self.direction, "channel": self.channel, "consumer_tag": self.consumer_tag,
            "link_handle": self.link_handle, "link_name": self.link_name, "delivery_tag": self.delivery_tag,
            "transfer_id": self.transfer_id, "delivery_tag_bin": self.delivery_tag_bin, "method": self.method,
            "exchange": self.exchange, "routing_key": self.routing_key, "queue": self.queue,
            "message_id": info[0], "correlation_id": info[1], "content_type": info[2], "delivery_mode": info[3],
            "priority": info[4], "properties_json": self.properties_json, "body_size": self.body_size,
            "body_sha256": self.body_sha256, "redelivered": redelivered, "settle_mode": self.settle_mode,
            "sent_ts_us": self.sent_ts_us, "settled_ts_us": self.settled_ts_us, "settle_latency_us": latency,
            "outcome": self.outcome, "settled_by_frame_id": self.settled_by_frame_id,
            "frame_ids": list(self.frame_ids), "flags": list(self.flags) if self.flags else None,
        }


def flow_row(connection_id: str, frame_id: str, ts_us: int, entity: str, entity_key, event: str, **values) -> dict:
    """A flow_events row; event_id is the frame_id, the entity and its key (channel, channel-consumer tag, handle)."""
    row = _FLOW_TEMPLATE.copy()
    row["event_id"] = f"{frame_id}-{entity}" if entity_key is None else f"{frame_id}-{entity}-{entity_key}"
    row["connection_id"], row["ts_us"], row["frame_id"], row["entity"], row["event"] = connection_id, ts_us, frame_id, entity, event
    row.update(values)
    return row


class Request:
    """A synchronous request waiting for its answer."""

    __slots__ = ("frame_id", "ts_us", "channel", "name", "direction", "key", "state")
    state: RequestState

    def __init__(self, frame_id: str, ts_us: int, channel, name: str, direction: str, key=None):
        self.frame_id, self.ts_us, self.channel, self.name, self.direction, self.key = frame_id, ts_us, channel, name, direction, key
        self.state = "awaiting"

    def row(self, connection_id: str, dialect: str, status: str, response: str | None = None, frame_id: str | None = None,
            ts_us: int | None = None, reply_code: int | None = None, error_condition: str | None = None) -> dict:
        row = _RR_TEMPLATE.copy()
        row.update(
            request_frame_id=self.frame_id, response_frame_id=frame_id, connection_id=connection_id, dialect=dialect,
            channel=self.channel if self.channel is not None else 0, request=self.name, response=response,
            request_ts_us=self.ts_us, response_ts_us=ts_us, latency_us=None if ts_us is None else ts_us - self.ts_us,
            reply_code=reply_code, error_condition=error_condition, status=status,
        )
        return row


class Output:
    """Rows waiting to be drained, per kind."""

    __slots__ = ("deliveries", "flow_events", "request_responses")

    def __init__(self) -> None:
        self.deliveries: list[dict] = []
        self.flow_events: list[dict] = []
        self.request_responses: list[dict] = []
