"""RabbitMQ message traces: the rabbitmq_tracing plugin's text and JSON logs,
and firehose messages saved as JSON lines.

- ``rabbitmq-trace-text``: blocks that start with a line of 80 ``=``, then
  ``2022-01-01T10:00:00.123+00:00: Message published`` (or ``received``), then
  ``Key: value`` lines (Node, Connection, Virtual host, User, Channel,
  Exchange, Routing keys, Routed queues or Queue, Properties as an Erlang
  term) and the payload after ``Payload:``. Older plugins wrote the time as
  ``2017-03-12 10:00:00:123``.
- ``rabbitmq-trace-json``: one object per line with timestamp, type
  (published | received), node, connection, vhost, user, channel, exchange,
  queue, routed_queues, routing_keys, properties and the payload in base64.
- ``rabbitmq-firehose``: one message taken from a queue bound to
  ``amq.rabbitmq.trace`` per line, as the management API's "get messages"
  returns it (routing_key ``publish.<exchange>`` or ``deliver.<queue>``, the
  trace facts in ``properties.headers``, ``payload`` with
  ``payload_encoding``). The firehose carries no time; a ``timestamp`` key
  added by whoever saved the message is used when present.

Each traced message becomes one delivery record; the tests check the counts
against what the client published and consumed (tests/data/logs/).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Iterable, Iterator

from amqplens.decode import clock
from amqplens.logs.erlang_terms import TermError, parse_term, proplist
from amqplens.logs.lines import Line
from amqplens.logs.records import endpoints, entry_length, entry_text, error_row, iso_us

SEPARATOR = b"=" * 80
_HEADING = re.compile(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)[:.](\d{1,6})(Z|[+-]\d\d:?\d\d)?: Message (published|received)\s*$")
_FIELD = re.compile(r"^([A-Z][A-Za-z ]*?):\s?(.*)$")
_KIND = {"published": ("to_broker", "publish"), "received": ("from_broker", "deliver")}
DELIVERY_KEYS = (
    "line_number", "ts_us", "direction", "method", "connection_name", "client_ip", "client_port", "server_ip",
    "server_port", "channel", "exchange", "routing_key", "queue", "message_id", "correlation_id", "content_type",
    "delivery_mode", "priority", "properties_json", "body_size", "body_sha256", "redelivered", "trace_json",
)  # fmt: skip


def sniff(head: bytes) -> str | None:
    first = next((raw for raw in head.splitlines() if raw.strip()), b"")
    if first.rstrip() == SEPARATOR:
        return "rabbitmq-trace-text"
    if not first.startswith(b"{"):
        return None
    try:
        obj = json.loads(first)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if obj.get("type") in _KIND and "routing_keys" in obj:
        return "rabbitmq-trace-json"
    if obj.get("exchange") == "amq.rabbitmq.trace" or str(obj.get("routing_key", "")).startswith(("publish.", "deliver.")):
        return "rabbitmq-firehose"
    return None


def continues(log_format: str):
    if log_format == "rabbitmq-trace-text":
        return lambda prev, line: line.rstrip() != SEPARATOR
    return lambda prev, line: False


def parse(entries: Iterable[list[Line]], log_format: str) -> Iterator[tuple[str, dict]]:
    one = _text_entry if log_format == "rabbitmq-trace-text" else _JSON[log_format]
    for entry in entries:
        if log_format != "rabbitmq-trace-text":
            texts, errors = entry_text(entry)
            yield from (("error", e) for e in errors)
            if not texts[0].strip():
                continue
        try:
            row = one(entry)
        except clock.TimeOutOfRange as exc:
            yield "error", error_row(entry[0], exc.reason, str(exc), entry_length(entry))
            continue
        except (ValueError, KeyError, TypeError, AttributeError, TermError) as exc:
            yield "error", error_row(entry[0], "bad_trace_entry", f"{type(exc).__name__}: {exc}"[:300], entry_length(entry))
            continue
        if row is not None:
            yield "delivery", row


def _delivery(entry: list[Line], ts_us, kind: str, connection: str | None, channel, exchange, routing_keys, queue,
              props: dict, payload: bytes, trace: dict) -> dict:
    direction, method = _KIND[kind]
    row = dict.fromkeys(DELIVERY_KEYS)
    row.update(endpoints(connection or ""))
    row.update(
        line_number=entry[0].number, ts_us=ts_us, direction=direction, method=method, channel=int(channel or 0),
        exchange=exchange, routing_key=routing_keys[0] if routing_keys else None, queue=queue,
        message_id=_str(props.get("message_id")), correlation_id=_str(props.get("correlation_id")),
        content_type=_str(props.get("content_type")), delivery_mode=_int(props.get("delivery_mode")),
        priority=_int(props.get("priority")), properties_json=json.dumps(props, sort_keys=True, default=str) if props else None,
        body_size=len(payload), body_sha256=hashlib.sha256(payload).hexdigest(),
        trace_json=json.dumps(dict(trace, routing_keys=routing_keys), sort_keys=True, default=str),
    )
    return row


def _str(v):
    return None if v is None else str(v)


def _int(v):
    return v if type(v) is int else None


# ----------------------------------------------------------------------- text
def _text_entry(entry: list[Line]) -> dict | None:
    lines = entry[1:] if entry[0].raw.rstrip() == SEPARATOR else entry
    if not lines or not any(line.raw.strip() for line in lines):
        return None
    heading = lines[0].raw.decode("utf-8", "replace")
    m = _HEADING.match(heading)
    if m is None:
        raise ValueError(f"no 'time: Message published|received' heading: {heading[:120]!r}")
    date, clock, frac, zone, kind = m.groups()
    ts_us = iso_us(f"{date}T{clock}.{frac.ljust(6, '0')}{zone or ''}")
    fields, payload = _text_fields(lines[1:])
    props = proplist(parse_term(fields["Properties"])) if fields.get("Properties") else {}
    routing_keys = parse_term(fields["Routing keys"]) if fields.get("Routing keys") else []
    routed = [_bin_text(q) for q in parse_term(fields["Routed queues"])] if fields.get("Routed queues") else None
    trace = {"node": fields.get("Node"), "user": fields.get("User"), "vhost": fields.get("Virtual host"),
             "connection": fields.get("Connection"), "routed_queues": routed}
    return _delivery(entry, ts_us, kind, fields.get("Connection"), fields.get("Channel"), fields.get("Exchange", ""),
                     [_bin_text(k) for k in routing_keys], fields.get("Queue"), props, payload, trace)


def _text_fields(lines: list[Line]) -> tuple[dict, bytes]:
    """``Key: value`` fields (a value continues on indented lines) and the payload bytes."""
    fields: dict[str, str] = {}
    key = None
    for i, line in enumerate(lines):
        text = line.raw.decode("utf-8", "replace")
        if text.startswith("Payload:"):
            body = [line.raw[len(b"Payload:"):].lstrip(b" ")] + [x.raw for x in lines[i + 1 :]]
            if body and body[0] == b"":
                body = body[1:]
            while body and body[-1] == b"":  # the blank line that ends the block
                body.pop()
            return fields, b"\n".join(body)
        m = _FIELD.match(text)
        if m and not text.startswith(" "):
            key = m.group(1)
            fields[key] = m.group(2).strip()
        elif key is not None and text.strip():
            fields[key] += " " + text.strip()
    raise ValueError("the entry has no Payload: line (truncated?)")


def _bin_text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


# ----------------------------------------------------------------------- JSON
def _json_trace(entry: list[Line]) -> dict:
    obj = json.loads(entry[0].raw)
    payload = base64.b64decode(obj.get("payload") or "", validate=True)
    routed = obj.get("routed_queues")
    queue = obj.get("queue")
    trace = {k: obj.get(k) for k in ("node", "user", "vhost", "connection")} | {"routed_queues": None if routed == "none" else routed}
    return _delivery(entry, iso_us(obj["timestamp"]), obj["type"], obj.get("connection"), obj.get("channel"),
                     obj.get("exchange"), list(obj.get("routing_keys") or []), None if queue == "none" else queue,
                     obj.get("properties") or {}, payload, trace)


def _firehose(entry: list[Line]) -> dict:
    obj = json.loads(entry[0].raw)
    key = obj["routing_key"]
    kind = "published" if key.startswith("publish.") else "received" if key.startswith("deliver.") else None
    if kind is None:
        raise ValueError(f"routing key {key!r} is neither publish.<exchange> nor deliver.<queue>")
    h = obj["properties"]["headers"]
    payload = obj.get("payload") or ""
    payload = base64.b64decode(payload, validate=True) if obj.get("payload_encoding") == "base64" else payload.encode()
    ts = obj.get("timestamp")
    trace = {k: h.get(k) for k in ("node", "user", "vhost", "connection", "routed_queues")}
    row = _delivery(entry, iso_us(ts) if isinstance(ts, str) else None, kind, h.get("connection"), h.get("channel"),
                    h.get("exchange_name"), list(h.get("routing_keys") or []),
                    key[len("deliver."):] if kind == "received" else None, h.get("properties") or {}, payload, trace)
    if "redelivered" in h:
        row["redelivered"] = bool(h["redelivered"])
    return row


_JSON = {"rabbitmq-trace-json": _json_trace, "rabbitmq-firehose": _firehose}
