"""What the log parsers emit: plain dicts with fixed keys, like the codecs' rows.

Every parser is an iterator over entries (``lines.read_entries``) that yields
``("event" | "delivery" | "frame" | "connection" | "error", row)`` pairs. An
error row is one bad line (or entry): its line number, byte offset and
length, a reason code, a sentence and the raw bytes, so nothing a log holds is
dropped without a trace.
"""

from __future__ import annotations

import datetime as dt
import re

from amqplens.decode import clock

from amqplens.logs.lines import Line

EVENT_KEYS = (
    "line_number", "line_count", "offset", "ts_us", "level", "log_format", "event", "erlang_pid", "connection_name",
    "client_provided_name", "client_ip", "client_port", "server_ip", "server_port", "user", "vhost", "channel",
    "method", "reply_code", "reply_text", "alarm_resource", "node", "message",
)  # fmt: skip
ERROR_KEYS = ("line_number", "offset", "length", "reason", "detail", "raw")
MAX_MESSAGE_CHARS = 16_384  # an event keeps this much of its entry's text (crash reports run to megabytes)

# "a.b.c.d:p -> e.f.g.h:q" as RabbitMQ names a connection; IPv6 in brackets
ENDPOINTS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[0-9A-Za-z.\-:]+?):(\d+) -> (\[[0-9A-Fa-f:.]+\]|[0-9A-Za-z.\-:]+?):(\d+)")


def endpoints(text: str) -> dict:
    """client/server address and port of the first "a:p -> b:q" in ``text`` (brackets dropped)."""
    m = ENDPOINTS.search(text)
    if m is None:
        return {}
    return {
        "connection_name": m.group(0),
        "client_ip": m.group(1).strip("[]"),
        "client_port": int(m.group(2)),
        "server_ip": m.group(3).strip("[]"),
        "server_port": int(m.group(4)),
    }


def error_row(line: Line, reason: str, detail: str, length: int | None = None) -> dict:
    return {
        "line_number": line.number,
        "offset": line.offset,
        "length": len(line.raw) if length is None else length,
        "reason": reason,
        "detail": f"line {line.number}: {detail}",
        "raw": line.raw,
    }


def decode_line(line: Line) -> tuple[str, dict | None]:
    """The line as text, and an error row when it is not UTF-8 (the text then has U+FFFD for the bad bytes)."""
    try:
        text = line.raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return line.raw.decode("utf-8", "replace"), error_row(line, "bad_encoding", f"not UTF-8 at byte {exc.start} ({exc.reason})")
    if line.truncated:
        return text, error_row(line, "line_too_long", "longer than 1 MiB; the rest of the line was skipped")
    return text, None


def entry_text(entry: list[Line]) -> tuple[list[str], list[dict]]:
    texts, errors = [], []
    for line in entry:
        text, err = decode_line(line)
        texts.append(text)
        if err is not None:
            errors.append(err)
    return texts, errors


def entry_length(entry: list[Line]) -> int:
    return entry[-1].offset + len(entry[-1].raw) - entry[0].offset


def iso_us(text: str) -> int:
    """Microseconds since the epoch of an ISO-8601 time; no zone means UTC. A ValueError when it does not
    parse, ``clock.TimeOutOfRange`` (a ValueError too) when it is outside 1990..2100."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return datetime_us(t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc))


def datetime_us(t: dt.datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact), checked against ``clock``'s range."""
    return clock.checked((t - clock.EPOCH) // dt.timedelta(microseconds=1), "log time")


def new_event(entry: list[Line], log_format: str, ts_us: int | None, level: str | None, message: str) -> dict:
    row = dict.fromkeys(EVENT_KEYS)
    row.update(line_number=entry[0].number, line_count=len(entry), offset=entry[0].offset, ts_us=ts_us,
               level=level, log_format=log_format, message=message[:MAX_MESSAGE_CHARS])
    return row
