"""The AMQP 0-10 lifecycle of one connection: frames in, rows out.

Sessions: one per channel (both sides use the session's channel). Command
ids: each side numbers its commands from its session.command-point, +1 per
command segment (at its first frame); the codec's ``command_id`` is taken when
it has one, else the tracker counts itself (the count restarts at the side's
session.attach/attached and waits for its command-point).

Deliveries: a message.transfer command with its header and body segments is
one delivery; ``frame_ids`` lists every frame of the assembly (a segment may
span frames), ``transfer_id`` is the command id, ``settle_mode``
``<accept-mode>/<acquire-mode>`` (``explicit/pre-acquired``, ...). Toward the
broker the destination is the exchange (``exchange``); from it, the
subscription (``consumer_tag``, with ``queue`` from the message.subscribe that
named it). Properties, redelivered, size and hash come from the header and
body segments. accept-mode none: settled on send (``sent`` / ``auto_ack``);
explicit: settled by the peer's message.accept (``accepted``), reject
(``rejected``, flag ``reject_<code>``: unspecified, unroutable, immediate) or
release (``released``) whose transfers set (RFC 1982 ranges) covers it; the
peer's session.completed covering it is recorded by the machine
(``machines.TRANSFER_0_10``: state completed, flag completed_unsettled if it
is never settled) but neither settles nor times it. Still unsettled at
session.detach / detached (either side) or connection.close:
``unsettled_at_close``; at the capture's end: ``open_at_capture_end``.
Header/body frames with no transfer seen (a capture starting mid-message)
make a delivery flagged orphan_continuation; an assembly cut by the next one,
a detach or the end is flagged content_incomplete. An accept/reject/release
covering no live transfer is a session ``settle`` flow row with reason
``<accept|reject|release>_of_unknown_id``.

Flow events: ``amqp010_flow``. Request/response pairs: ``amqp010_requests``.
Transactions (tx.*, dtx.*) do not hold settlements as 0-9-1's do: an accept
inside a transaction settles at once.
"""

from __future__ import annotations


from amqplens.lifecycle.amqp010_flow import FlowTracker
from amqplens.lifecycle.amqp010_requests import Requests010
from amqplens.lifecycle.amqp10 import M32
from amqplens.lifecycle.machines import SETTLES_0_10, TRANSFER_0_10, Settle010, Transfer010Event
from amqplens.lifecycle.records import FROM_BROKER, TO_BROKER, frame_arg as _arg, Delivery, Output, flow_row
from amqplens.lifecycle.seqsets import members, parse_ranges
from amqplens.decode.v0_10 import spec

OTHER = {"to_server": "to_client", "to_client": "to_server"}
WORD = {"to_server": TO_BROKER, "to_client": FROM_BROKER}
REJECT_CODES = spec.ENUMS.get("message.reject-code", {})
_FLOW_COMMANDS = frozenset({"set-flow-mode", "flow", "stop", "flush", "cancel"})


class Lane:
    """One direction of one session: its command ids and the assembly in progress."""

    __slots__ = ("next_id", "command", "open")

    def __init__(self) -> None:
        self.next_id: int | None = None
        self.command: tuple | None = None  # (command id, first frame id, first ts) of the open command segment
        self.open: Delivery | None = None


class Connection010:
    def __init__(self, connection_id: str, out: Output) -> None:
        self.cid, self.out = connection_id, out
        self.lanes: dict[tuple, Lane] = {}  # (direction, channel)
        self.outstanding: dict[tuple, dict] = {}  # (channel, sender direction) -> command id -> live delivery
        self.queues: dict[tuple, str | None] = {}  # (channel, destination) -> the queue message.subscribe named
        self.last_seq: dict[str, int] = {}
        self.flow = FlowTracker(connection_id, out)
        self.requests = Requests010(connection_id, out)

    # -- entry points ---------------------------------------------------------------------------
    def on_frame(self, f: dict, fid: str, ts: int) -> None:
        kind = f.get("frame_type")
        if kind == "control":
            if f.get("last_frame") is not False:
                self._control(f, fid, ts)
        elif kind == "command":
            self._command(f, fid, ts)
        elif kind in ("header", "body"):
            self._content(f, fid, ts)

    def finish(self) -> None:
        for (d, ch), lane in self.lanes.items():
            if lane.open is not None:
                self._cut(lane, ch, d)
        for (ch, sender), live in self.outstanding.items():
            for rec in list(live.values()):
                self._step(ch, sender, rec, "capture_end", None, None)
        self.outstanding.clear()
        self.requests.finish()

    def _lane(self, d: str, ch: int) -> Lane:
        lane = self.lanes.get((d, ch))
        if lane is None:
            lane = self.lanes[(d, ch)] = Lane()
        return lane

    # -- controls ---------------------------------------------------------------------------------
    def _control(self, f: dict, fid: str, ts: int) -> None:
        name = (f.get("class_name"), f.get("method_name"))
        d, ch = f["direction"], f.get("channel") or 0
        self.requests.on_control(f, name, fid, ts)
        if name[0] == "session":
            ctl = name[1]
            if ctl == "command-point":
                point = _arg(f, "command_id")
                self._lane(d, ch).next_id = point % M32 if type(point) is int else None
            elif ctl in ("attach", "attached"):
                self._lane(d, ch).next_id = None
            elif ctl in ("detach", "detached"):
                self._end_session(ch, "session_detach", fid, ts)
            elif ctl == "completed":
                self._completed(f, ch, OTHER[d], fid, ts)
        elif name == ("connection", "close"):
            for ch in sorted({k[1] for k in self.lanes} | {k[0] for k in self.outstanding}):
                self._end_session(ch, "connection_close", fid, ts)

    def _completed(self, f: dict, ch: int, sender: str, fid: str, ts: int) -> None:
        ranges = parse_ranges(f.get("commands_json"))
        live = self.outstanding.get((ch, sender))
        if live:
            for i in members(ranges, live):
                self._step(ch, sender, live[i], "completed", fid, ts)
        self.flow.on_completed(ch, sender, ranges, fid, ts)
        self.requests.on_completed(ch, sender, ranges, fid, ts)

    def _end_session(self, ch: int, event: Transfer010Event, fid: str, ts: int) -> None:
        for d in OTHER:
            lane = self.lanes.get((d, ch))
            if lane is not None and lane.open is not None:
                self._cut(lane, ch, d)
            for rec in list((self.outstanding.pop((ch, d), None) or {}).values()):
                self._step(ch, d, rec, event, fid, ts)
        self.flow.end_session(ch, fid, ts)
        self.requests.end_session(ch)
        for key in [k for k in self.queues if k[0] == ch]:
            del self.queues[key]

    # -- commands ---------------------------------------------------------------------------------
    def _command(self, f: dict, fid: str, ts: int) -> None:
        d, ch = f["direction"], f.get("channel") or 0
        lane = self._lane(d, ch)
        name = (f.get("class_name"), f.get("method_name"))
        is_transfer = name == ("message", "transfer")
        if f.get("first_frame") or lane.command is None:
            cid = f.get("command_id")
            if cid is None and f.get("first_frame"):
                cid = lane.next_id
            if f.get("first_frame") and cid is not None:
                lane.next_id = (cid + 1) % M32
            lane.command = (cid, fid, ts)
            if f.get("first_segment") or not f.get("first_frame"):
                if lane.open is not None:
                    self._cut(lane, ch, d)
                if is_transfer:
                    lane.open = self._new_delivery(f, fid, ts, orphan=not f.get("first_frame"))
        elif is_transfer and lane.open is not None:
            lane.open.frame_ids.append(fid)
        if not f.get("last_frame"):
            return
        cid, first_fid, first_ts = lane.command
        lane.command = None
        if is_transfer and lane.open is not None:
            self.requests.on_command(f, name, cid, fid, ts, first_fid, first_ts)
            self._transfer_fields(lane.open, f, ch, d, cid, fid, ts)
            if f.get("last_segment") is not False:  # a transfer with no header or body
                self._finish_assembly(lane, ch, d, f, fid, ts)
            return
        self.requests.on_command(f, name, cid, fid, ts, first_fid, first_ts)
        if name[0] != "message":
            return
        if name[1] in SETTLES_0_10:
            self._settle(f, name[1], ch, d, fid, ts)
        elif name[1] == "subscribe":
            self.queues[(ch, f.get("destination"))] = f.get("queue")
        elif name[1] in _FLOW_COMMANDS:
            self.flow.on_command(f, name[1], fid, ts)

    def _settle(self, f: dict, verb: Settle010, ch: int, d: str, fid: str, ts: int) -> None:
        sender = OTHER[d]
        live = self.outstanding.get((ch, sender)) or {}
        ids = members(parse_ranges(f.get("transfers_json")), live)
        flag = None
        if verb == "reject":
            code = f.get("reply_code")
            flag = f"reject_{REJECT_CODES.get(code, code)}" if code is not None else None
        for i in ids:
            rec = live[i]
            if flag:
                rec.flag(flag)
            self._step(ch, sender, rec, verb, fid, ts)
        if not ids:
            self.out.flow_events.append(flow_row(self.cid, fid, ts, "session", ch, "settle", channel=ch,
                                                 reason=f"{verb}_of_unknown_id"))

    # -- transfers --------------------------------------------------------------------------------
    def _new_delivery(self, f: dict, fid: str, ts: int, orphan: bool) -> Delivery:
        d, ch = f["direction"], f.get("channel") or 0
        key = f"{self.cid}-{WORD[d]}-{ch}-f{f['stream_offset']}"
        rec = Delivery(key, self.cid, "0-10", WORD[d], ch, "transfer", fid, ts)
        if orphan:
            rec.flag("orphan_continuation")
        return rec

    def _transfer_fields(self, rec: Delivery, f: dict, ch: int, d: str, cid, fid: str, ts: int) -> None:
        """The command segment is whole: its fields, and the machine's first step."""
        seq = f.get("message_seq")
        self._name(rec, seq, d, ch)
        dest, accept, acquire = f.get("destination"), f.get("accept_mode"), f.get("acquire_mode")
        rec.transfer_id = cid
        if d == "to_server":
            rec.exchange = dest
        else:
            rec.consumer_tag, rec.queue = dest, self.queues.get((ch, dest))
        rec.consumer = dest  # the destination, for its credit
        rec.settle_mode = f"{accept}/{acquire}" if accept or acquire else None
        if accept == "none":
            event: Transfer010Event = "transfer_none_to_broker" if d == "to_server" else "transfer_none_from_broker"
        else:
            event = "transfer_explicit"
        self._start(rec, ch, d, cid, event, fid, ts)

    def _name(self, rec: Delivery, seq, d: str, ch: int) -> None:
        if seq is None:
            return
        key = f"{self.cid}-{WORD[d]}-{ch}-"
        if seq > self.last_seq.get(key, -1):  # a number not taken yet (else its row keeps its offset key)
            self.last_seq[key] = seq
            rec.delivery_id = key + str(seq)

    def _start(self, rec: Delivery, ch: int, d: str, cid, event: Transfer010Event, fid: str, ts: int) -> None:
        rec.step(TRANSFER_0_10, event, fid, ts)
        if not rec.live:
            return
        live = self.outstanding.setdefault((ch, d), {})
        if cid is None:  # no id: nothing can settle it but the session's end
            live[("orphan", rec.delivery_id, rec.frame_ids[0])] = rec
            return
        old = live.get(cid)
        if old is not None:
            rec.flag("command_id_reused")
            self._step(ch, d, old, event, fid, ts)
        live[cid] = rec

    def _content(self, f: dict, fid: str, ts: int) -> None:
        d, ch = f["direction"], f.get("channel") or 0
        lane = self._lane(d, ch)
        rec = lane.open
        if rec is None:  # the capture missed the transfer's command
            rec = lane.open = self._new_delivery(f, fid, ts, orphan=True)
            rec.transfer_id = f.get("command_id")
            self._name(rec, f.get("message_seq"), d, ch)
            self._start(rec, ch, d, rec.transfer_id, "transfer_explicit", fid, ts)
        else:
            rec.frame_ids.append(fid)
        if f.get("last_frame"):
            if f.get("frame_type") == "header":
                rec.properties_json = f.get("properties_json")
                if isinstance(f.get("redelivered"), bool):
                    rec.redelivered = f["redelivered"]
                if d == "to_client" and f.get("exchange") is not None:
                    rec.exchange = f["exchange"]
                rec.routing_key = f.get("routing_key")
            if f.get("body_size") is not None:
                rec.body_size = f["body_size"]
            if f.get("body_sha256") is not None:
                rec.body_sha256 = f["body_sha256"]
            if f.get("last_segment"):
                self._finish_assembly(lane, ch, d, f, fid, ts)

    def _finish_assembly(self, lane: Lane, ch: int, d: str, f: dict, fid: str, ts: int) -> None:
        rec, lane.open = lane.open, None
        assert rec is not None  # called with an assembly open
        self.flow.on_transfer(ch, d, rec.consumer, rec.transfer_id, rec.body_size, fid, ts)
        self._complete(rec)

    def _cut(self, lane: Lane, ch: int, d: str) -> None:
        rec, lane.open = lane.open, None
        assert rec is not None  # called with an assembly open
        rec.flag("content_incomplete")
        if rec.state == "new" and rec.live:  # its command segment never ended: no accept-mode seen
            self._start(rec, ch, d, rec.transfer_id, "transfer_explicit", rec.frame_ids[0], rec.sent_ts_us)
        self._complete(rec)

    def _complete(self, rec: Delivery) -> None:
        rec.complete = True
        if not rec.live:
            self.out.deliveries.append(rec.row())

    def _step(self, ch: int, sender: str, rec: Delivery, event: Transfer010Event, fid, ts) -> None:
        if rec.step(TRANSFER_0_10, event, fid, ts):
            live = self.outstanding.get((ch, sender))
            if live is not None:
                key = rec.transfer_id if rec.transfer_id is not None else ("orphan", rec.delivery_id, rec.frame_ids[0])
                if live.get(key) is rec:
                    del live[key]
            if rec.complete:
                self.out.deliveries.append(rec.row())
