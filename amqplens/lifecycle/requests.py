"""Synchronous method pairs of the 0-9-1 family, matched per channel in order.

Which methods are requests, and which methods answer them, comes from the
generated spec tables (``amqplens.decode.v0_9_1.spec_*``: the synchronous flag and
the response list of each method). One rule is derived on top: a method the
tables list as asynchronous without responses, whose class has a synchronous
``<method>-ok`` (0-9-1's ``basic.recover`` -> ``recover-ok``: RabbitMQ's XML
marks recover asynchronous, yet answers it), is paired with that ``-ok``.

A request whose nowait / no-wait argument is true expects no answer and is
not recorded. Either side may ask (the broker sends connection.start, tune,
channel.close, ...); an answer matches the oldest pending request from the
other side on its channel that lists it. A ``channel.close`` (or
``connection.close``) answering a pending request is an error: status
``error`` with the close's reply code; the request the close names by
class-id/method-id (or the oldest) gets it, the other pending requests of the
channel (connection) become ``unanswered`` (all of them, for a close with
reply code 200). Requests still pending when
their channel or connection closes, or when the capture ends, are
``unanswered``.
"""

from __future__ import annotations

import functools
import json

from amqplens.lifecycle.machines import REQUEST, RequestEvent
from amqplens.lifecycle.records import Output, Request, frame_arg
from amqplens.decode.v0_9_1.frames import SPECS

_CLOSES = frozenset({("channel", "close"), ("connection", "close")})


class SyncTables:
    """One dialect's request -> responses map, by (class name, method name)."""

    def __init__(self, dialect: str) -> None:
        methods = SPECS[dialect].METHODS
        names = {key: (m.class_name, m.method_name) for key, m in methods.items()}
        by_name = {v: k for k, v in names.items()}
        self.responses: dict[tuple, frozenset] = {}
        self.nowait: dict[tuple, str] = {}
        for key, m in methods.items():
            name = names[key]
            answers = frozenset(names[r] for r in m.responses if r in names)
            ok = (m.class_name, f"{m.method_name}-ok")
            if not answers and not m.synchronous and ok in by_name and methods[by_name[ok]].synchronous:
                answers = frozenset({ok})
            if answers:
                self.responses[name] = answers
                wait = next((f for f, _ in m.fields if f in ("nowait", "no_wait")), None)
                if wait:
                    self.nowait[name] = wait
        self.answers = frozenset(a for r in self.responses.values() for a in r)


@functools.lru_cache(maxsize=None)
def sync_tables(dialect: str) -> SyncTables:
    return SyncTables(dialect if dialect in SPECS else "0-9-1")


def _close_target(arguments_json: str | None) -> tuple | None:
    """The (class_id, method_id) a channel/connection.close names as the failing method."""
    try:
        args = json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        return None
    key = (args.get("class_id"), args.get("method_id")) if isinstance(args, dict) else (None, None)
    return key if key[0] else None


class RequestMatcher:
    """Pending requests of one 0-9-1 connection, per channel."""

    def __init__(self, connection_id: str, dialect: str, out: Output) -> None:
        self.connection_id, self.dialect, self.out = connection_id, dialect, out
        self.tables = sync_tables(dialect)
        self.pending: dict[int, list[Request]] = {}

    def _end(self, req: Request, event: RequestEvent, **answer) -> None:
        t = REQUEST.step(req.state, event)
        self.out.request_responses.append(req.row(self.connection_id, self.dialect, t.next_state, **answer))

    def on_method(self, f: dict, name: tuple, channel: int, direction: str, fid: str, ts: int) -> None:
        tables = self.tables
        if name in tables.answers or name in _CLOSES:
            self._answer(f, name, channel, direction, fid, ts)
        if name in tables.responses:
            wait = tables.nowait.get(name)
            if wait is not None and frame_arg(f, wait) is True:  # a no-wait request: no answer will come
                return
            req = Request(fid, ts, channel, f"{name[0]}.{name[1]}", direction, (f.get("class_id"), f.get("method_id")))
            self.pending.setdefault(channel, []).append(req)

    def _answer(self, f: dict, name: tuple, channel: int, direction: str, fid: str, ts: int) -> None:
        queue = self.pending.get(channel)
        response = f"{name[0]}.{name[1]}"
        if queue:
            for i, req in enumerate(queue):
                if req.direction != direction and name in self.tables.responses.get(_key(req), ()):
                    del queue[i]
                    self._end(req, "response", response=response, frame_id=fid, ts_us=ts)
                    return
        if name not in _CLOSES:
            return
        # A close: the other side's pending requests fail (on its channel, or all, for connection.close).
        channels = [channel] if name[0] != "connection" else list(self.pending)
        victims = [r for c in channels for r in self.pending.get(c, ()) if r.direction != direction and not r.name.endswith(".close")]
        if not victims:
            return
        code = f.get("reply_code")
        target = _close_target(f.get("arguments_json"))
        # a normal close (200) names no failure: what it cuts off is unanswered
        culprit = None if code == 200 else next((r for r in victims if r.key == target), victims[0])
        for r in victims:
            self.pending[r.channel].remove(r)
            if r is culprit:
                self._end(r, "error_close", response=response, frame_id=fid, ts_us=ts, reply_code=code)
            else:
                self._end(r, "abandoned")

    def channel_closed(self, channel: int) -> None:
        for req in self.pending.pop(channel, ()):
            self._end(req, "abandoned")

    def finish(self, event: RequestEvent = "capture_end") -> None:
        for queue in self.pending.values():
            for req in queue:
                self._end(req, event)
        self.pending.clear()


def _key(req: Request) -> tuple:
    cls, _, meth = req.name.partition(".")
    return (cls, meth)
