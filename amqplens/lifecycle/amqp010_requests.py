"""0-10 request/response pairs: controls in order per channel, commands by command-id.

Controls (``CONTROL_PAIRS``): connection.start -> start-ok, secure ->
secure-ok, tune -> tune-ok, open -> open-ok | redirect, close -> close-ok,
session.attach -> attached | detached, session.detach -> detached. An answer
matches the oldest pending request from the other side on its channel that
lists it; a session.detached with a non-zero code is status ``error`` with
that code (attach refused, detach of an unknown session, ...). A
connection.close with a reply code other than 200 while the other side's
connection control waits (open refused) answers it as an error.

Commands: one with sync=true, or whose spec defines a result (queue.query,
exchange.query/bound, message.acquire/resume, dtx.*: ``spec.COMMANDS``), is a
request keyed by (channel, sender, command-id), answered by the peer's
execution.result naming it (response ``execution.result``), its
execution.exception (status ``error``, reply_code = error-code) or the
peer's session.completed covering it (``session.completed``). An
execution.exception naming an asynchronous command seen recently (the last
``RECENT`` per session and side) is an ``error`` row for that command too.

Still pending at the session's detach / detached, the connection's close or
the capture's end: ``unanswered``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, cast

from amqplens.lifecycle.machines import REQUEST, RequestEvent
from amqplens.lifecycle.records import Output, Request
from amqplens.lifecycle.seqsets import members
from amqplens.decode.v0_10 import spec

CONTROL_PAIRS = {
    ("connection", "start"): frozenset({("connection", "start-ok")}),
    ("connection", "secure"): frozenset({("connection", "secure-ok")}),
    ("connection", "tune"): frozenset({("connection", "tune-ok")}),
    ("connection", "open"): frozenset({("connection", "open-ok"), ("connection", "redirect")}),
    ("connection", "close"): frozenset({("connection", "close-ok")}),
    ("session", "attach"): frozenset({("session", "attached"), ("session", "detached")}),
    ("session", "detach"): frozenset({("session", "detached")}),
}
ANSWERS = frozenset(a for v in CONTROL_PAIRS.values() for a in v)
WITH_RESULT = frozenset((m.class_name, m.name) for m in spec.COMMANDS.values() if m.result)
RECENT = 256


class Requests010:
    def __init__(self, connection_id: str, out: Output) -> None:
        self.cid, self.out = connection_id, out
        self.controls: dict[int, list[Request]] = {}  # channel -> pending control requests, oldest first
        self.commands: dict[tuple, OrderedDict[int, Request]] = {}  # (channel, sender) -> command id -> Request
        self.recent: dict[tuple, OrderedDict[int, Request]] = {}  # (channel, sender) -> command id -> Request (async commands)

    # -- controls ---------------------------------------------------------------------------------
    def on_control(self, f: dict, name: tuple, fid: str, ts: int) -> None:
        ch, d = f.get("channel") or 0, f["direction"]
        if name in ANSWERS:
            self._answer_control(f, name, ch, d, fid, ts)
        elif name == ("connection", "close") and f.get("reply_code") not in (None, 200):
            queue = self.controls.get(ch)
            victim = next((r for r in queue or () if r.direction != d and r.name != "connection.close"), None)
            if victim is not None:
                assert queue is not None  # victim is one of its requests
                queue.remove(victim)
                self._end(victim, "error_close", response="connection.close", frame_id=fid, ts_us=ts, reply_code=f["reply_code"])
        if name in CONTROL_PAIRS:
            self.controls.setdefault(ch, []).append(Request(fid, ts, ch, f"{name[0]}.{name[1]}", d))

    def _answer_control(self, f: dict, name: tuple, ch: int, d: str, fid: str, ts: int) -> None:
        queue = self.controls.get(ch) or []
        for i, req in enumerate(queue):
            cls, _, ctl = req.name.partition(".")
            if req.direction != d and name in CONTROL_PAIRS[(cls, ctl)]:
                del queue[i]
                code = f.get("reply_code") if name == ("session", "detached") else None
                event: RequestEvent = "error_close" if code else "response"
                self._end(req, event, response=f"{name[0]}.{name[1]}", frame_id=fid, ts_us=ts, reply_code=code or None)
                return

    # -- commands ---------------------------------------------------------------------------------
    def on_command(self, f: dict, name: tuple, command_id, fid: str, ts: int, first_fid: str, first_ts: int) -> None:
        """A command's last frame (where sync and the fields are); the request starts at its first frame."""
        if command_id is None:
            return
        ch, d = f.get("channel") or 0, f["direction"]
        req = Request(first_fid, first_ts, ch, f"{name[0]}.{name[1]}", d, command_id)
        if name == ("execution", "result") or name == ("execution", "exception"):
            self._answer_command(f, name, ch, d, fid, ts)
            return
        if f.get("sync") or name in WITH_RESULT:
            pending = self.commands.setdefault((ch, d), OrderedDict())
            old = pending.pop(command_id, None)
            if old is not None:  # the id came round again without an answer
                self._end(old, "abandoned")
            pending[command_id] = req
        else:
            recent = self.recent.setdefault((ch, d), OrderedDict())
            recent[command_id] = req
            if len(recent) > RECENT:
                recent.popitem(last=False)

    def _answer_command(self, f: dict, name: tuple, ch: int, d: str, fid: str, ts: int) -> None:
        ref = f.get("referenced_command_id")
        peer = (ch, "to_client" if d == "to_server" else "to_server")
        req = cast("dict[Any, Request]", self.commands.get(peer) or {}).pop(ref, None)  # ref: an id, or None (no request)
        error = name[1] == "exception"
        if req is None and error:
            req = cast("dict[Any, Request]", self.recent.get(peer) or {}).pop(ref, None)
        if req is not None:
            self._end(req, "error_close" if error else "response", response=f"{name[0]}.{name[1]}", frame_id=fid, ts_us=ts,
                      reply_code=f.get("reply_code") if error else None)

    def on_completed(self, channel: int, sender: str, ranges: list, fid: str, ts: int) -> None:
        pending = self.commands.get((channel, sender))
        if pending:
            for i in members(ranges, pending):
                self._end(pending.pop(i), "response", response="session.completed", frame_id=fid, ts_us=ts)

    # -- ends -------------------------------------------------------------------------------------
    def end_session(self, channel: int) -> None:
        """The session on the channel is over: its pending commands are unanswered (its controls stay: detach waits)."""
        for key in [k for k in self.commands if k[0] == channel]:
            for req in self.commands.pop(key).values():
                self._end(req, "abandoned")
        for key in [k for k in self.recent if k[0] == channel]:
            del self.recent[key]

    def finish(self, event: RequestEvent = "capture_end") -> None:
        for queue in self.controls.values():
            for req in queue:
                self._end(req, event)
        for pending in self.commands.values():
            for req in pending.values():
                self._end(req, event)
        self.controls.clear()
        self.commands.clear()
        self.recent.clear()

    def _end(self, req: Request, event: RequestEvent, **answer) -> None:
        status = REQUEST.step(req.state, event).next_state
        self.out.request_responses.append(req.row(self.cid, "0-10", status, **answer))
