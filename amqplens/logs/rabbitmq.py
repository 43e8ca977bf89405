"""RabbitMQ server logs, every generation, into broker events.

The formats (examples from RabbitMQ's own logs; the 3.10 ones are in
tests/data/broker/rabbitmq.log and tests/data/logs/rabbitmq_3_10.log):

- ``rabbitmq-3.6`` (before 3.7, Erlang's error_logger, see the 3.6 "Logging"
  docs page, rabbitmq.com/logging.html as of 2017): a header line
  ``=INFO REPORT==== 12-Mar-2017::10:00:00 ===`` then the message lines, a
  blank line between reports; local time without zone.
- ``rabbitmq-3.7`` (3.7-3.8, lager): ``2019-01-01 10:00:00.123 [info] <0.123.0> text``;
  the further lines of a multi-line message carry no prefix.
- ``rabbitmq-3.9`` (3.9+, Erlang's logger): ``2022-01-01 10:00:00.123456+00:00 [info] <0.123.0> text``;
  every line of a multi-line message repeats the prefix. Levels may be
  written in four letters (``[warn]``, ``[erro]``, ``[noti]``) or in full.
- ``rabbitmq-json`` (3.9+, ``log.file.formatter = json``): one JSON object per
  line with ``time``, ``level``, ``msg`` and ``pid``.

A time without a zone is taken as UTC. An entry (all lines of one message)
becomes one event; what it means comes from a table of the sentences
RabbitMQ writes (``EVENTS``), tried in order; unrecognised entries at
warning level or above become ``other`` events, the rest are skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Iterable, Iterator

from amqplens.decode import clock
from amqplens.logs.lines import Line
from amqplens.logs.records import datetime_us, endpoints, entry_length, entry_text, error_row, iso_us, new_event
from amqplens.decode.v0_9_1.spec_0_9_1 import REPLY_CODES

PID = r"<\d+\.\d+\.\d+>"
_PREFIX_39 = re.compile(rb"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\.\d{3,9}(?:Z|[+-]\d\d:?\d\d)) \[([a-z]+)\] (" + PID.encode() + rb"|\S+) ?")
_PREFIX_37 = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \[([a-z]+)\] (" + PID.encode() + rb"|\S+) ?")
_REPORT_36 = re.compile(rb"^=([A-Z ]+?) REPORT==== (\d{1,2}-[A-Z][a-z]{2}-\d{4}::\d\d:\d\d:\d\d(?:\.\d+)?) ===\s*$")
_LOOKS_DATED = re.compile(rb"^\d{4}-\d\d-\d\d")
_SEVERITY = {"debu": "debug", "noti": "notice", "warn": "warning", "erro": "error", "crit": "critical",
             "aler": "alert", "emer": "emergency", "info": "info"}  # fmt: skip
_REPORT_LEVEL = {"INFO": "info", "WARNING": "warning", "ERROR": "error", "CRASH": "error", "SUPERVISOR": "error",
                 "PROGRESS": "info", "INFO MSG": "info", "WARNING MSG": "warning", "ERROR MSG": "error"}  # fmt: skip
_WARNING_OR_WORSE = frozenset({"warning", "error", "critical", "alert", "emergency"})
REPLY_CODE_OF = {name.replace("-", "_"): code for code, (name, _) in REPLY_CODES.items()}


def _level(word: str) -> str:
    return _SEVERITY.get(word[:4], word)


# -------------------------------------------------------------------- formats
def sniff(head: bytes) -> str | None:
    """The generation of a RabbitMQ log from its first lines, or None."""
    for raw in head.splitlines()[:20]:
        if not raw.strip():
            continue
        if _PREFIX_37.match(raw) and not _PREFIX_39.match(raw):
            return "rabbitmq-3.7"
        if _PREFIX_39.match(raw):
            return "rabbitmq-3.9"
        if _REPORT_36.match(raw):
            return "rabbitmq-3.6"
        if raw.startswith(b"{"):
            try:
                obj = json.loads(raw)
            except ValueError:
                return None
            return "rabbitmq-json" if isinstance(obj, dict) and "time" in obj and ("msg" in obj or "message" in obj) else None
        return None
    return None


def continues(log_format: str):
    """``continues(prev, line)`` of a generation: does ``line`` belong to the entry ``prev`` is in?"""
    if log_format == "rabbitmq-3.9":
        def same_prefix(prev: bytes, line: bytes) -> bool:
            a, b = _PREFIX_39.match(prev), _PREFIX_39.match(line)
            return a is not None and b is not None and a.group(0).rstrip() == b.group(0).rstrip()
        return same_prefix
    if log_format == "rabbitmq-3.7":
        return lambda prev, line: _PREFIX_37.match(line) is None
    if log_format == "rabbitmq-3.6":
        return lambda prev, line: _REPORT_36.match(line) is None
    return lambda prev, line: False  # JSON: one object per line


# -------------------------------------------------------------------- entries
def parse(entries: Iterable[list[Line]], log_format: str) -> Iterator[tuple[str, dict]]:
    head = _HEADS[log_format]
    for entry in entries:
        texts, errors = entry_text(entry)
        for err in errors:
            yield "error", err
        if all(not t.strip() for t in texts):
            continue
        parsed = head(entry, texts)
        if isinstance(parsed, str):
            yield "error", error_row(entry[0], parsed, _BAD[parsed] + f": {texts[0][:200]!r}", entry_length(entry))
            continue
        ts_us, level, message = parsed
        event = classify(entry, log_format, ts_us, level, message)
        if event is not None:
            yield "event", event


_BAD = {
    "unknown_format": "not a line of this RabbitMQ log format",
    "truncated_line": "a log line cut short (its time stamp or prefix is incomplete)",
    "bad_json": "not a JSON object with time, level and msg",
    "bad_time": "the time stamp does not parse",
    clock.TS_OUT_OF_RANGE: "the time stamp is outside 1990-01-01 .. 2100-01-01",
}


def _prefixed_head(prefix: re.Pattern, every_line: bool):
    """The head of the 3.7 and 3.9 generations: time and level from the first line's prefix; the
    message is the text after the prefix, on every line (3.9 repeats it) or on the first (3.7)."""

    def head(entry: list[Line], texts: list[str]):
        m = prefix.match(entry[0].raw)
        if m is None:
            return "truncated_line" if _LOOKS_DATED.match(entry[0].raw) else "unknown_format"
        try:
            ts_us = iso_us(m.group(1).decode())
        except clock.TimeOutOfRange:
            return clock.TS_OUT_OF_RANGE
        except ValueError:
            return "bad_time"
        cut = len(m.group(0).decode("utf-8", "replace"))
        lines = [t[cut:] for t in texts] if every_line else [texts[0][cut:], *texts[1:]]
        return ts_us, _level(m.group(2).decode()), "\n".join(lines)

    return head


def _head_36(entry: list[Line], texts: list[str]):
    m = _REPORT_36.match(entry[0].raw)
    if m is None:
        return "unknown_format"
    try:
        t = dt.datetime.strptime(m.group(2).decode().split(".")[0], "%d-%b-%Y::%H:%M:%S").replace(tzinfo=dt.timezone.utc)
        ts_us = datetime_us(t)
    except clock.TimeOutOfRange:
        return clock.TS_OUT_OF_RANGE
    except ValueError:
        return "bad_time"
    return ts_us, _REPORT_LEVEL.get(m.group(1).decode(), "info"), "\n".join(texts[1:]).strip("\n")


def _head_json(entry: list[Line], texts: list[str]):
    try:
        obj = json.loads(texts[0])
        msg = obj.get("msg", obj.get("message"))
        ts_us = iso_us(obj["time"])
    except clock.TimeOutOfRange:
        return clock.TS_OUT_OF_RANGE
    except (ValueError, KeyError, AttributeError, TypeError):
        return "bad_json"
    if not isinstance(msg, str):
        return "bad_json"
    return ts_us, _level(str(obj.get("level", "info"))), msg


_HEADS = {"rabbitmq-3.9": _prefixed_head(_PREFIX_39, True), "rabbitmq-3.7": _prefixed_head(_PREFIX_37, False),
          "rabbitmq-3.6": _head_36, "rabbitmq-json": _head_json}


# --------------------------------------------------------------------- events
CONN = rf"(?:AMQP )?connection (?P<pid>{PID}) \((?P<conn>[^()]*(?:\([^()]*\)[^()]*)*)\)"
EVENTS = (
    ("connection_accepted", re.compile(rf"^accepting AMQP connection (?P<pid>{PID}) \((?P<conn>[^)]*)\)")),
    ("connection_named", re.compile(rf"^{CONN} has a client-provided name: (?P<name>.*)")),
    ("connection_authenticated", re.compile(
        rf"^(?:{CONN}|AMQP 1\.0 connection (?P<pid10>{PID})): user '(?P<user>[^']*)' authenticated and granted access to vhost '(?P<vhost>[^']*)'")),
    ("connection_closed_abruptly", re.compile(rf"^closing {CONN}:\s*\n?\s*(?P<text>client unexpectedly closed TCP connection)")),
    ("connection_closed_error", re.compile(rf"^closing {CONN}:\s*\n?\s*(?P<text>\S.*)", re.S)),
    ("connection_closed", re.compile(rf"^closing {CONN}\s*$")),
    ("connection_error", re.compile(
        rf"^Error on {CONN}, channel (?P<channel>\d+):\s*\n?\s*(?:operation (?P<method>\S+) caused a connection exception (?P<exc>\w+): (?P<text>.*)|(?P<other>.*))", re.S)),
    ("channel_error", re.compile(
        rf"^Channel error on {CONN}, channel (?P<channel>\d+):\s*\n?\s*(?:operation (?P<method>\S+) caused a channel exception (?P<exc>\w+): (?P<text>.*)"
        r"|\{amqp_error,(?P<exc36>\w+),\"(?P<text36>.*)\",'?(?P<method36>[\w.]+)'?\})", re.S)),
    ("alarm_set", re.compile(r"^(?P<resource>memory|disk) resource limit alarm set on node '?(?P<node>[^'\s]+?)'?\.?\s*(?:$|\n)")),
    ("alarm_cleared", re.compile(r"^(?P<resource>memory|disk) resource limit alarm cleared on node '?(?P<node>[^'\s]+?)'?\.?\s*$")),
    ("node_start", re.compile(r"^Server startup complete; (?P<plugins>\d+) plugins started")),
    ("node_stop", re.compile(r"^(?:RabbitMQ is asked to stop|Stopping RabbitMQ$)")),
)


def classify(entry: list[Line], log_format: str, ts_us: int, level: str, message: str) -> dict | None:
    text = message.strip()
    for name, pattern in EVENTS:
        m = pattern.match(text)
        if m is not None:
            return _event(entry, log_format, ts_us, level, message, name, m)
    if level in _WARNING_OR_WORSE:
        return new_event(entry, log_format, ts_us, level, message) | {"event": "other"}
    return None


def _event(entry, log_format, ts_us, level, message, name: str, m: re.Match) -> dict:
    row = new_event(entry, log_format, ts_us, level, message)
    row["event"] = name
    g = {k: v for k, v in m.groupdict().items() if v is not None}
    row["erlang_pid"] = g.get("pid") or g.get("pid10")
    conn = g.get("conn")
    if conn:
        row.update(endpoints(conn))
        head, _, rest = conn.partition(", vhost: ")
        if " - " in head:
            row["client_provided_name"] = head.split(" - ", 1)[1]
        v = re.match(r"'(?P<vhost>[^']*)', user: '(?P<user>[^']*)'", rest)
        if v:
            row["vhost"], row["user"] = v.group("vhost"), v.group("user")
    if "name" in g:
        row["client_provided_name"] = g["name"].strip()
    for key in ("user", "vhost"):
        if key in g:
            row[key] = g[key]
    if "channel" in g:
        row["channel"] = int(g["channel"])
    exc, text = g.get("exc") or g.get("exc36"), g.get("text") or g.get("text36")
    row["method"] = g.get("method") or g.get("method36")
    if exc is not None:
        row["reply_code"] = REPLY_CODE_OF.get(exc)
        text = (text or "").strip()
        if len(text) > 1 and text[0] == text[-1] == '"':  # a connection exception's text is logged with ~p: quoted
            text = text[1:-1]
        row["reply_text"] = f"{exc.upper()} - {text}"  # as the broker puts it on the wire
    elif "text" in g or "other" in g:
        row["reply_text"] = (g.get("text") or g.get("other") or "").strip()
    if "resource" in g:
        row["alarm_resource"], row["node"] = g["resource"], g["node"]
    return row
