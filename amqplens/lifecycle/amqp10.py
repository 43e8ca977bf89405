"""The AMQP 1.0 lifecycle of one connection: frames in, rows out.

Sessions: a begin without remote-channel starts one; the peer's begin naming
it in remote-channel maps the peer's channel to it (each side numbers its own
channels). A session's ``channel`` in the rows is the channel of the begin that
started it. Frames on a channel with no begin seen (a capture started
mid-connection) adopt a session on that channel in both directions.

Links: each side numbers its own handles; both attaches carry the link name,
and a link is (name, the direction its transfers go), since a sender and a
receiver link may share a name. Settle modes: the sender's attach gives
snd-settle-mode, the receiver's rcv-settle-mode; ``settle_mode`` is
``"<snd>/<rcv>"`` (e.g. ``mixed/first``).

Deliveries: a transfer with a new delivery-id starts one; transfers on the
same link while the previous had more=true continue it (their delivery-id is
absent or the same), and ``frame_ids`` lists them all; the last frame brings
the body size, hash and properties. settled=true on a transfer: presettled;
aborted: outcome aborted. A disposition from the receiver (role=receiver)
names deliveries the other side sent, from the sender its own, first..last
(last absent = first) in delivery-id serial numbers, with settled and a
state: accepted, rejected, released, modified, received, declared or
transactional (see machines.TRANSFER). Still unsettled at the first detach of
its link, at end or close: unsettled_at_close; at the capture's end:
open_at_capture_end. A disposition naming ids never sent is a flagged
session ``settle`` flow row (reason disposition_of_unknown_id).

Flow events: per link (entity link, link_handle in the receiver's
numbering), the credit in hand as the sender computes it (§2.6.7):
delivery-count(receiver's flow, or initial) + link-credit - the sender's
delivery-count; ``credit`` rows at the receiver's flow frames, ``flow`` rows at
the sender's (which state its own delivery-count and credit, e.g. after a
drain), ``transfer`` rows at each new delivery (credit - 1), ``close`` at
detach; at_limit = credit <= 0. Per session (entity session), windows of
§2.5.6 for the stream of transfers toward one endpoint X: X's
incoming-window as X last announced it, the sending peer's outgoing-window,
and the sender's remote-incoming-window (next-incoming-id(flow) +
incoming-window(flow) - next-outgoing-id(sender), decremented per transfer
frame); ``window`` rows at begin/flow frames (X = the frame's sender),
``transfer`` rows at transfer frames (X = the frame's receiver); at_limit =
remote-incoming-window <= 0.

Request/response pairs: open -> open, begin -> begin (remote-channel),
attach -> attach (name), detach -> detach (the link), end -> end, close ->
close; the first of a pair is the request; an answer with an error is status
``error`` with its error condition.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Literal, cast

from amqplens.lifecycle.machines import ENDPOINT, REQUEST, TRANSFER, EndpointState, TransferEvent
from amqplens.lifecycle.records import FROM_BROKER, TO_BROKER, frame_arg as _arg, Delivery, Output, Request, flow_row

OTHER = {"to_server": "to_client", "to_client": "to_server"}
WORD = {"to_server": TO_BROKER, "to_client": FROM_BROKER}
M32 = 1 << 32


def serial_diff(a: int, b: int) -> int:
    """a - b in RFC 1982 serial-number arithmetic (32 bits)."""
    return (a - b + (1 << 31)) % M32 - (1 << 31)


class Window:
    __slots__ = ("next_outgoing_id", "initial_outgoing_id", "outgoing_window", "incoming_window", "remote_incoming_window")
    next_outgoing_id: int | None
    initial_outgoing_id: int | None
    outgoing_window: int | None
    incoming_window: int | None
    remote_incoming_window: int | None

    def __init__(self) -> None:
        self.next_outgoing_id = self.initial_outgoing_id = self.outgoing_window = None
        self.incoming_window = self.remote_incoming_window = None


class Link:
    __slots__ = ("name", "sender", "handles", "state", "snd", "rcv", "source", "target", "initial", "delivery_count",
                 "credit", "drain", "open", "unsettled", "flag")
    name: str | None
    sender: str  # the direction its transfers travel in
    handles: dict[str, int | None]  # direction -> the handle that side numbers it with
    state: EndpointState
    snd: str | None
    rcv: str | None
    source: str | None
    target: str | None
    initial: int | None
    delivery_count: int | None
    credit: int
    drain: bool | None
    open: Delivery | None  # the delivery whose transfers are still coming (more=true)

    def __init__(self, name, sender: str) -> None:
        self.name, self.sender, self.handles, self.state = name, sender, {}, "unseen"
        self.snd = self.rcv = self.source = self.target = self.initial = self.delivery_count = None
        self.credit, self.drain, self.open = 0, None, None
        self.unsettled: dict[int | tuple[str, str], Delivery] = {}  # delivery-id (or ("orphan", delivery_id)) -> delivery
        self.flag: str | None = None


class Session:
    __slots__ = ("channel", "state", "handles", "links", "outstanding", "next_id", "win")
    state: EndpointState

    def __init__(self, channel: int) -> None:
        self.channel, self.state = channel, "unseen"
        self.handles: dict[tuple, Link] = {}  # (direction, handle) -> link
        self.links: dict[tuple, Link] = {}  # (name, sender direction) -> link
        self.outstanding: dict[str, OrderedDict[int, Delivery]] = {"to_server": OrderedDict(), "to_client": OrderedDict()}  # sender direction -> id -> delivery
        self.next_id: dict[str, int] = {}
        self.win = {"to_server": Window(), "to_client": Window()}


class Connection10:
    def __init__(self, connection_id: str, out: Output) -> None:
        self.cid, self.out = connection_id, out
        self.sessions: dict[tuple, Session] = {}  # (direction, channel) -> session
        self.pending: dict[tuple, Request] = {}  # keyed by the session/link objects themselves (held, never reused)
        self.closing: tuple | None = None
        self.last_seq: dict[str, int] = {}  # per direction, channel and handle: the highest message_seq a delivery took

    # -- entry points ---------------------------------------------------------------------------
    def on_frame(self, f: dict, fid: str, ts: int) -> None:
        handler = HANDLERS.get(f.get("performative"))
        if handler is not None:
            handler(self, f, fid, ts)

    def finish(self) -> None:
        event: Literal["close", "capture_end"]
        event, fid, ts = ("close", *self.closing) if self.closing else ("capture_end", None, None)
        for s in dict.fromkeys(self.sessions.values()):
            self._end_session(s, event, fid, ts, rows=False)  # the close frame's rows were written at the close
        self.sessions.clear()
        for req in self.pending.values():
            self._answer(req, REQUEST.step(req.state, "capture_end").next_state)
        self.pending.clear()

    # -- requests -----------------------------------------------------------------------------------
    def _pair(self, key: tuple, f: dict, fid: str, ts: int) -> None:
        d = f["direction"]
        req = self.pending.get(key)
        if req is not None and req.direction != d:
            del self.pending[key]
            error = f.get("error_condition")
            status = REQUEST.step(req.state, "error_close" if error else "response").next_state
            self._answer(req, status, response=f["performative"], frame_id=fid, ts_us=ts, error_condition=error)
        else:
            if req is not None:  # the same side asked again: the first stays unanswered
                self._answer(req, "unanswered")
            self.pending[key] = Request(fid, ts, f.get("channel") or 0, f["performative"], d)

    def _answer(self, req: Request, status: str, **answer) -> None:
        self.out.request_responses.append(req.row(self.cid, "1.0", status, **answer))

    # -- sessions -----------------------------------------------------------------------------------
    def _session(self, f: dict) -> Session:
        d, c = f["direction"], f.get("channel") or 0
        s = self.sessions.get((d, c))
        if s is None:  # no begin seen: adopt one, same channel number both ways
            s = Session(c)
            self.sessions[(d, c)] = s
            self.sessions.setdefault((OTHER[d], c), s)
        return s

    def _begin(self, f, fid, ts) -> None:
        d, c = f["direction"], f.get("channel") or 0
        remote = _arg(f, "remote_channel")
        s = self.sessions.get((OTHER[d], remote)) if remote is not None else None
        if s is None:
            s = Session(c)
        self._map((d, c), s, fid, ts)
        s.state = ENDPOINT.step(s.state, "open" if remote is None else "open_reply").next_state
        self._pair(("begin", s), f, fid, ts)
        w = s.win[d]
        w.next_outgoing_id = w.initial_outgoing_id = f.get("next_outgoing_id")
        self._windows(s, f, fid, ts)

    def _end(self, f, fid, ts) -> None:
        s = self._session(f)
        self._pair(("end", s), f, fid, ts)
        s.state = ENDPOINT.step(s.state, "close_reply" if s.state == "closing" else "close").next_state
        self._end_session(s, "end", fid, ts)
        if s.state == "closed":
            for key in [k for k, v in self.sessions.items() if v is s]:
                del self.sessions[key]

    def _end_session(self, s: Session, event: TransferEvent, fid, ts, rows: bool = True) -> None:
        for link in list(s.links.values()):
            self._end_link(s, link, event, fid, ts, rows)

    def _map(self, key: tuple, s: Session, fid: str, ts: int) -> None:
        """Map a direction's channel to a session; a session no channel maps to any more is over."""
        old = self.sessions.get(key)
        self.sessions[key] = s
        if old is not None and old is not s and all(v is not old for v in self.sessions.values()):
            self._end_session(old, "end", fid, ts)

    def _close(self, f, fid, ts) -> None:
        self._pair(("close",), f, fid, ts)
        if self.closing is None:
            self.closing = (fid, ts)
            first = len(self.out.flow_events)
            for s in dict.fromkeys(self.sessions.values()):  # each session once, in the order they were mapped
                self._end_session(s, "close", fid, ts)
            # two live sessions may share a channel number (one side's begin while the peer's channel of that number
            # is another session: an adopted one, or the peer's own): their links' close rows could share an
            # event_id; each frame makes at most one row per entity and key, the first session's
            rows, kept = self.out.flow_events, dict[str, dict]()
            for r in rows[first:]:
                kept.setdefault(r["event_id"], r)
            if len(kept) < len(rows) - first:
                rows[first:] = kept.values()

    # -- links --------------------------------------------------------------------------------------
    def _attach(self, f, fid, ts) -> None:
        s, d, h = self._session(f), f["direction"], f.get("handle")
        sender = d if f.get("role") == "sender" else OTHER[d]
        key = (f.get("link_name"), sender)
        link = s.links.get(key)
        if link is None or link.state == "closed":
            link = s.links[key] = Link(key[0], sender)
        link.handles[d] = h
        s.handles[(d, h)] = link
        link.state = ENDPOINT.step(link.state, "open" if link.state in ("unseen", "closed") else "open_reply").next_state
        if d == sender:
            link.snd, link.initial = f.get("snd_settle_mode"), f.get("delivery_count")
            if link.delivery_count is None:
                link.delivery_count = link.initial
        else:
            link.rcv = f.get("rcv_settle_mode")
        link.source, link.target = link.source or f.get("source_address"), link.target or f.get("target_address")
        self._pair(("attach", s, key), f, fid, ts)

    def _link(self, s: Session, f: dict, sender_if_new: str) -> Link:
        d, h = f["direction"], f.get("handle")
        link = s.handles.get((d, h))
        if link is None:  # no attach seen
            link = s.links[(None, sender_if_new, d, h)] = Link(None, sender_if_new)
            link.handles[d] = h
            link.flag = "attach_not_seen"
            s.handles[(d, h)] = link
        return link

    def _detach(self, f, fid, ts) -> None:
        s = self._session(f)
        link = self._link(s, f, f["direction"])
        self._pair(("detach", link), f, fid, ts)
        link.state = ENDPOINT.step(link.state, "close_reply" if link.state == "closing" else "close").next_state
        self._end_link(s, link, "detach", fid, ts)
        if link.state == "closed":
            for d, h in link.handles.items():
                if s.handles.get((d, h)) is link:
                    del s.handles[(d, h)]

    def _end_link(self, s: Session, link: Link, event: TransferEvent, fid, ts, rows: bool = True) -> None:
        had = rows and bool(link.unsettled)
        for rec in list(link.unsettled.values()):
            self._step(s, link, rec, event, fid, ts)
        if link.open is not None:
            rec, link.open = link.open, None
            rec.flag("content_incomplete")
            self._complete(rec)
        if had and fid is not None:
            self._link_row(s, link, fid, ts, "close")

    # -- transfers and dispositions -----------------------------------------------------------------------
    def _transfer(self, f, fid, ts) -> None:
        s, d = self._session(f), f["direction"]
        link = self._link(s, f, d)
        did = f.get("delivery_id")
        rec = link.open
        if rec is not None and did is not None and did != rec.transfer_id:  # a new delivery interleaved: the open one is cut short
            link.open = None
            rec.flag("content_incomplete")
            self._complete(rec)
            rec = None
        if rec is None:
            rec = self._new_delivery(s, link, f, fid, ts)
        else:
            rec.frame_ids.append(fid)
            if f.get("settled"):  # the sender may settle on any frame of the delivery
                self._step(s, link, rec, "transfer_settled", fid, ts)
        if f.get("aborted"):
            self._step(s, link, rec, "abort", fid, ts)
        if f.get("more") and not f.get("aborted"):
            link.open = rec
        else:
            link.open = None
            rec.properties_json, rec.body_size, rec.body_sha256 = f.get("properties_json"), f.get("body_size"), f.get("body_sha256")
            self._complete(rec)
        w = s.win[d]
        if w.next_outgoing_id is not None:
            w.next_outgoing_id = (w.next_outgoing_id + 1) % M32
        if w.remote_incoming_window is not None:
            w.remote_incoming_window -= 1
        self._session_row(s, OTHER[d], fid, ts, "transfer")

    def _new_delivery(self, s: Session, link: Link, f: dict, fid: str, ts: int) -> Delivery:
        d, did, seq = f["direction"], f.get("delivery_id"), f.get("message_seq")
        key = f"{self.cid}-{WORD[d]}-{f.get('channel')}-{f.get('handle')}-"
        # a continuation where we start anew, or a frame handled out of order: a number already taken
        if seq is None or seq <= self.last_seq.get(key, -1):
            key += "f%d" % f["stream_offset"]
        else:
            self.last_seq[key] = seq
            key += str(seq)
        rec = Delivery(key, self.cid, "1.0", WORD[d], s.channel, "transfer", fid, ts)
        rec.transfer_id, rec.delivery_tag_bin, rec.link_handle, rec.link_name = did, f.get("delivery_tag_bin"), f.get("handle"), link.name
        rec.queue = (link.target or link.source) if d == "to_server" else (link.source or link.target)
        rec.settle_mode = f"{link.snd}/{link.rcv}" if link.snd or link.rcv else None
        rec.consumer, rec.sender = link, d
        if link.flag:
            rec.flag(link.flag)
        if did is None:
            rec.flag("orphan_continuation")
        rec.step(TRANSFER, "transfer_settled" if f.get("settled") else "transfer", fid, ts)
        if did is not None:
            old = s.outstanding[d].get(did)
            if old is not None:
                rec.flag("delivery_id_reused")
                self._step(s, old.consumer, old, "transfer", fid, ts)
            s.next_id[d] = (did + 1) % M32
            if rec.live:
                s.outstanding[d][did] = rec
                link.unsettled[did] = rec
        elif rec.live:  # no id: no disposition can name it, its link's end will
            link.unsettled[("orphan", key)] = rec
        link.delivery_count = ((link.delivery_count or 0) + 1) % M32
        link.credit -= 1
        self._link_row(s, link, fid, ts, "transfer")
        return rec

    def _disposition(self, f, fid, ts) -> None:
        s, d = self._session(f), f["direction"]
        sender = OTHER[d] if f.get("role") == "receiver" else d
        first = f.get("first")
        if first is None:
            return
        last = f.get("last")
        last = first if last is None else last
        state = f.get("state") or "none"
        # (a state the machine does not know makes a pair outside its table: a flagged no-op)
        event = cast(TransferEvent, f"settle_{state}" if f.get("settled") else f"state_{state}")
        outstanding = s.outstanding[sender]
        span = serial_diff(last, first) + 1
        if 0 < span <= len(outstanding):
            ids = [i % M32 for i in range(first, first + span) if i % M32 in outstanding]
        else:
            ids = [i for i in outstanding if 0 <= serial_diff(i, first) < max(span, 1)]
        for i in ids:
            rec = outstanding[i]
            self._step(s, rec.consumer, rec, event, fid, ts)
        nxt = s.next_id.get(sender)
        if not ids and (nxt is None or serial_diff(last, nxt) >= 0):
            self.out.flow_events.append(flow_row(self.cid, fid, ts, "session", s.channel, "settle", channel=s.channel,
                                                 reason="disposition_of_unknown_id"))

    def _step(self, s: Session, link: Link, rec: Delivery, event: TransferEvent, fid, ts) -> None:
        if rec.step(TRANSFER, event, fid, ts):
            if rec.transfer_id is None and link is not None:
                link.unsettled.pop(("orphan", rec.delivery_id), None)
            elif rec.transfer_id is not None:
                assert rec.sender is not None  # set with the transfer_id (_new_delivery)
                if s.outstanding[rec.sender].get(rec.transfer_id) is rec:
                    del s.outstanding[rec.sender][rec.transfer_id]
                if link is not None and link.unsettled.get(rec.transfer_id) is rec:
                    del link.unsettled[rec.transfer_id]
            if rec.complete:
                self.out.deliveries.append(rec.row())

    def _complete(self, rec: Delivery) -> None:
        rec.complete = True
        if not rec.live:
            self.out.deliveries.append(rec.row())

    # -- flow ------------------------------------------------------------------------------------------------
    def _flow(self, f, fid, ts) -> None:
        s, d = self._session(f), f["direction"]
        self._windows(s, f, fid, ts)
        if f.get("handle") is None:
            return
        link = self._link(s, f, OTHER[d])
        if d == link.sender:  # the sender states its own delivery-count and credit
            if f.get("delivery_count") is not None:
                link.delivery_count = f["delivery_count"]
            link.credit, link.drain = f.get("link_credit") or 0, f.get("drain")
            self._link_row(s, link, fid, ts, "flow")
            return
        base = f.get("delivery_count")
        if base is None:
            base = link.initial if link.initial is not None else 0
        if link.delivery_count is None:
            link.delivery_count = base
        # §2.6.7 link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd): the credit less the
        # transfers the receiver had not seen (a serial difference); the credit itself is a uint, never wrapped
        link.credit = (f.get("link_credit") or 0) - serial_diff(link.delivery_count, base)
        link.drain = f.get("drain")
        self._link_row(s, link, fid, ts, "credit")

    def _windows(self, s: Session, f: dict, fid: str, ts: int) -> None:
        """A begin/flow from X: X's windows as announced, and the peer's remote-incoming-window (§2.5.6)."""
        d = f["direction"]
        w, peer = s.win[d], s.win[OTHER[d]]
        w.incoming_window, w.outgoing_window = f.get("incoming_window"), f.get("outgoing_window")
        if f.get("next_outgoing_id") is not None:
            w.next_outgoing_id = f["next_outgoing_id"]
        if w.incoming_window is not None:
            base = f.get("next_incoming_id")
            if base is None:
                base = peer.initial_outgoing_id
            if base is None or peer.next_outgoing_id is None:
                peer.remote_incoming_window = w.incoming_window
            else:
                # §2.5.6 next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id(endpoint): the window less the
                # transfers in flight (a serial difference); a window of 2^31 or more (e.g. 2^32-1 for "unlimited") is not
                # a serial number and must not wrap
                peer.remote_incoming_window = w.incoming_window - serial_diff(peer.next_outgoing_id, base)
        self._session_row(s, d, fid, ts, "window")

    def _session_row(self, s: Session, toward: str, fid: str, ts: int, event: str) -> None:
        x, y = s.win[toward], s.win[OTHER[toward]]
        rem = y.remote_incoming_window
        self.out.flow_events.append(flow_row(
            self.cid, fid, ts, "session", s.channel, event, channel=s.channel, incoming_window=x.incoming_window,
            outgoing_window=y.outgoing_window, remote_incoming_window=rem, at_limit=None if rem is None else rem <= 0))

    def _link_row(self, s: Session, link: Link, fid: str, ts: int, event: str) -> None:
        side = OTHER[link.sender] if OTHER[link.sender] in link.handles else link.sender
        h = link.handles.get(side)
        # each side numbers its own handles: the key says whose number it is (c: client's, s: server's)
        key = f"{s.channel}-{'c' if side == 'to_server' else 's'}{h}"
        self.out.flow_events.append(flow_row(
            self.cid, fid, ts, "link", key, event, channel=s.channel, link_handle=h, link_credit=link.credit,
            delivery_count=link.delivery_count, drain=link.drain, at_limit=link.credit <= 0,
            reason="credit_exceeded" if link.credit < 0 else None))


C = Connection10
HANDLERS: dict[str | None, Callable[[Connection10, dict, str, int], None]] = {
    "open": lambda self, f, fid, ts: self._pair(("open",), f, fid, ts),
    "begin": C._begin,
    "attach": C._attach,
    "flow": C._flow,
    "transfer": C._transfer,
    "disposition": C._disposition,
    "detach": C._detach,
    "end": C._end,
    "close": C._close,
}
del C
