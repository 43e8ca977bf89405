"""Qpid Proton frame traces (``PN_TRACE_FRM=1``) into frame rows of the 1.0 codec's shape.

Proton writes one line per frame it sends (``->``) or receives (``<-``), prefixed
with its transport's address (see ``pn_do_trace`` in proton-c's transport.c):

- before about 0.36: ``[0x1d3a6c0]:0 -> @open(16) [container-id="c", channel-max=32767]``,
  protocol headers as ``[0x1d3a6c0]:  -> AMQP``, a transfer's payload as
  `` (56) "\\x00Sp..."``;
- from about 0.36 (the logger): ``[0x55a786788150]: AMQP:FRAME:0 -> @open(16) [...max-frame-size=0x1000]``,
  headers ``[0x...]: AMQP:FRAME:  -> AMQP``, payload `` (56) \\x00Sp...``, unsigned integers in hex.

A payload longer than about 1 KiB is cut (``... (truncated)``): the message's
body size and hash then stay null. The trace prints no time: a row's ``ts``
is the line number in microseconds after 1970-01-01, which keeps the order
and nothing else; its ``stream_offset`` is the line number too, and ``size``
is 0 (the printed form does not give the encoded length).

The traced process is taken as the client unless it sends sasl-mechanisms
or receives sasl-init (a proton server). A transport address seen again
after its connection sent a second protocol header of the same layer starts
a new connection. Per connection, rows go through the codec's own pieces
(``ConnectionFacts`` with its redaction, ``promote``, ``MessageTracker``), so
a frame from a trace and the same frame from a capture fill the same columns.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable, Iterator, cast

from amqplens.decode.detect import describe, describe_json
from amqplens.logs.lines import Line
from amqplens.logs.proton_values import TraceValueError, parse_value, unquote
from amqplens.logs.records import decode_line, error_row
from amqplens.decode.common.rows import STAGE_FRAME
from amqplens.decode.streaming import decode_error_parts
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v1_0.composites import NAMES, PERFORMATIVES, SASL_FRAMES, code_of, fields, to_json
from amqplens.decode.v1_0.facts import ConnectionFacts
from amqplens.decode.v1_0.messages import MessageTracker
from amqplens.decode.v1_0.rows import FRAME_TEMPLATE, promote
from amqplens.decode.v1_0.types import Described

_NEW = re.compile(r"^\[(0x[0-9a-fA-F]+|\(nil\))\]:\s*(AMQP|SASL|IO):FRAME:\s?(\d*)\s*(->|<-) (.*)$")
_OLD = re.compile(r"^\[(0x[0-9a-fA-F]+|\(nil\))\]:(\d*)\s*(->|<-) (.*)$")
_OTHER_CATEGORY = re.compile(r"^\[(0x[0-9a-fA-F]+|\(nil\))\]:\s*[A-Z]+:[A-Z]+:")  # AMQP:RAW, IO:..., PN_TRACE_DRV lines
_PAYLOAD = re.compile(r'^\s*\((\d+)\)\s?(?:"(.*)"|(.*?))(\.\.\. \(truncated\)| \.\.\. \(truncated\))?$', re.S)
HEADERS = {"AMQP": b"AMQP\x00\x01\x00\x00", "SASL": b"AMQP\x03\x01\x00\x00", "TLS": b"AMQP\x02\x01\x00\x00"}
_LAYER_ORDER = {"TLS": 0, "SASL": 1, "AMQP": 2}


def sniff(head: bytes) -> str | None:
    for raw in head.splitlines()[:50]:
        text = raw.decode("utf-8", "replace")
        if _NEW.match(text):
            return "proton-trace"
        if _OLD.match(text):
            return "proton-trace-old"
    return None


def continues(log_format: str):
    return lambda prev, line: False


class _Connection:
    """One traced connection: its facts, message trackers, and rows held until we know who is client."""

    def __init__(self, log_id: str, pointer: str, line: Line) -> None:
        self.connection_id = hashlib.blake2b(f"{log_id}|{pointer}|{line.number}".encode(), digest_size=16).hexdigest()
        self.pointer, self.first_line, self.last_line = pointer, line.number, line.number
        self.facts = ConnectionFacts(self.connection_id)
        self.messages = {TO_SERVER: MessageTracker(), TO_CLIENT: MessageTracker()}
        self.cut: set[tuple] = set()  # (direction, channel, handle) of messages with a truncated payload
        self.headers: dict[str, int] = {}  # outgoing protocol header layers -> count
        self.outgoing: str | None = None  # TO_SERVER (we are the client) or TO_CLIENT; None until known
        self.pending: list[tuple] = []
        self.counts = {TO_SERVER: 0, TO_CLIENT: 0}

    def new_header_starts_next(self, layer: str) -> bool:
        """A second header of a layer this side already sent (or an earlier layer) is a new connection."""
        return any(_LAYER_ORDER[seen] >= _LAYER_ORDER[layer] for seen in self.headers)


def parse(entries: Iterable[list[Line]], log_format: str, log_id: str) -> Iterator[tuple[str, dict]]:
    live: dict[str, _Connection] = {}
    for (line,) in entries:
        text, err = decode_line(line)
        if err is not None:
            yield "error", err
        m = _NEW.match(text)
        if m is not None:
            pointer, channel, arrow, rest = m.group(1), m.group(3), m.group(4), m.group(5)
        elif (m := _OLD.match(text)) is not None:
            pointer, channel, arrow, rest = m.groups()
        else:
            if text.strip() and not _OTHER_CATEGORY.match(text):
                yield "error", error_row(line, "not_a_trace_line", f"not a Proton frame trace line: {text[:200]!r}")
            continue
        conn = live.get(pointer)
        rest = rest.strip()
        if rest in HEADERS and arrow == "->" and (conn is None or conn.new_header_starts_next(rest)):
            if conn is not None:
                yield from _finish(conn)
            conn = live[pointer] = _Connection(log_id, pointer, line)
        elif conn is None:
            conn = live[pointer] = _Connection(log_id, pointer, line)  # the trace starts mid-connection
        conn.last_line = line.number
        yield from _line(conn, line, channel, arrow, rest)
    for conn in live.values():
        yield from _finish(conn)


def _line(conn: _Connection, line: Line, channel: str, arrow: str, rest: str) -> Iterator[tuple[str, dict]]:
    if rest in HEADERS:
        if arrow == "->":
            conn.headers[rest] = conn.headers.get(rest, 0) + 1
        yield from _held(conn, (line, arrow, "protocol_header", None, rest))
        return
    if rest in ("EOS", "(EMPTY FRAME)") or rest.startswith("(EMPTY FRAME)"):
        if rest != "EOS":
            yield from _held(conn, (line, arrow, "empty", int(channel or 0), None))
        return
    try:
        value, end = parse_value(rest)
    except (TraceValueError, ValueError, IndexError) as exc:
        yield "error", error_row(line, "bad_trace_frame", f"the performative does not parse ({exc}): {rest[:200]!r}")
        return
    code = code_of(value.descriptor) if isinstance(value, Described) else None
    if code not in PERFORMATIVES and code not in SASL_FRAMES:
        yield "error", error_row(line, "bad_trace_frame", f"not a performative: {rest[:200]!r}")
        return
    if conn.outgoing is None:
        name = NAMES[code]
        server = (name == "sasl-mechanisms" and arrow == "->") or (name == "sasl-init" and arrow == "<-")
        conn.outgoing = TO_CLIENT if server else TO_SERVER
    yield from _held(conn, (line, arrow, "frame", int(channel or 0), (code, value, rest[end:])))


def _held(conn: _Connection, item: tuple) -> Iterator[tuple[str, dict]]:
    conn.pending.append(item)
    if conn.outgoing is None:
        return
    yield from _rows(conn)


def _rows(conn: _Connection) -> Iterator[tuple[str, dict]]:
    """The held lines' frame rows; a frame that did not decode is also an error row (stage frame), as from a capture."""
    for held in conn.pending:
        row = _row(conn, *held)
        yield "frame", row
        if row["decode_error"] is not None:
            reason, detail = decode_error_parts(row["decode_error"])
            yield "error", dict(error_row(held[0], reason, f"{row['performative']} frame: {detail}"), stage=STAGE_FRAME)
    conn.pending.clear()


def _row(conn: _Connection, line: Line, arrow: str, kind: str, channel, detail) -> dict:
    # rows are held until the outgoing direction is known (_held), so it is set here
    direction = cast(str, conn.outgoing) if arrow == "->" else (TO_CLIENT if conn.outgoing == TO_SERVER else TO_SERVER)
    row = dict(FRAME_TEMPLATE)
    row.update(connection_id=conn.connection_id, direction=direction, stream_offset=line.number, ts_us=line.number,
               dialect="1.0", size=0, channel=channel)
    conn.counts[direction] += 1
    if kind == "protocol_header":
        head = HEADERS[detail]
        conn.facts.on_protocol_header(direction, head, describe(head)["dialect"])
        row.update(frame_type="protocol_header", arguments_json=describe_json(head, to_json))
        return row
    if kind == "empty":
        row["frame_type"] = "empty"
        return row
    code, value, tail = detail
    args = fields(code, value.value) or {}
    name = row["performative"] = NAMES[code]
    row["frame_type"] = "sasl" if code in SASL_FRAMES else "amqp"
    row["descriptor"] = code
    conn.facts.on_performative(direction, name, args)  # redacts sasl-init / sasl-response in place
    promote(row, args)
    if name == "transfer":
        row["decode_error"] = _transfer(conn, row, direction, args, tail)
    row["arguments_json"] = to_json(args)
    return row


def _transfer(conn: _Connection, row: dict, direction: str, args: dict, tail: str) -> str | None:
    if row["handle"] is None:
        return "bad_transfer: no handle, so no link to reassemble the message on"
    m = _PAYLOAD.match(tail) if tail.strip() else None
    payload, cut = (b"", False) if m is None else (unquote(m.group(2) if m.group(2) is not None else m.group(3)), m.group(4) is not None)
    link = (row["channel"], row["handle"])
    if cut:
        conn.cut.add((direction, *link))
        payload = b""
    seq, delivery_id, completion, error = conn.messages[direction].on_transfer(
        link, row["delivery_id"], row["delivery_tag_bin"], args.get("more"), args.get("aborted"), memoryview(payload))
    row["message_seq"] = seq
    if row["delivery_id"] is None:
        row["delivery_id"] = delivery_id
    if completion is not None:
        sections, body_size, body_sha256, _ = completion
        if (direction, *link) in conn.cut:  # part of the payload was not printed: size and hash unknown
            conn.cut.discard((direction, *link))
            return None
        row["body_size"], row["body_sha256"] = body_size, body_sha256
        row["properties_json"] = to_json(sections) if sections else None
    return error


def _finish(conn: _Connection) -> Iterator[tuple[str, dict]]:
    if conn.outgoing is None:  # no performative told: the traced process is the client
        conn.outgoing = TO_SERVER
    yield from _rows(conn)
    row = dict(conn.facts.facts)  # the codec's connection facts, keyed as its connection rows are
    row.update(start_ts_us=conn.first_line, end_ts_us=conn.last_line, trace_pointer=conn.pointer,
               frames_to_server=conn.counts[TO_SERVER], frames_to_client=conn.counts[TO_CLIENT])
    yield "connection", row
