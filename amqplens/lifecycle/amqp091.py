"""The 0-9-1 family (0-8, 0-9, 0-9-1) lifecycle of one connection: frames in, rows out.

Publishes (client -> broker), per channel:

- after ``confirm.select`` the channel is in confirm mode and its publishes are
  numbered from 1 (``delivery_tag``); the broker's basic.ack / basic.nack
  settle them by that number, ``multiple`` meaning every outstanding number up
  to it (0: all); settle_mode ``confirm``, outcome confirmed / nacked_by_broker,
  or unconfirmed_at_close when the channel or connection closes first;
- after ``tx.select``: settle_mode ``tx``, outcome committed / rolled_back at
  tx.commit-ok / tx.rollback-ok (rolled_back too when the channel closes with
  the transaction open);
- otherwise settle_mode ``no_confirm`` and outcome ``sent``, settled on send
  (settled_ts = sent_ts); nobody confirms such a publish.
- A basic.return ties to the oldest pending mandatory/immediate publish of its
  channel with the same exchange and routing key: outcome ``returned``,
  settled by the return (in confirm mode the return comes before the ack of
  the same message; the ack then ends it). Returns come in publish order, so
  the pending mandatory publishes before the returned one were routed: a
  no-confirm one of them becomes ``sent``.

Deliveries (broker -> client): basic.deliver and basic.get-ok, by delivery tag
per channel. A no-ack consumer (basic.consume no-ack) or basic.get no-ack is
settled on send (``auto_ack``); otherwise ``manual_ack`` (``tx`` on a
transactional channel) until the client's basic.ack (multiple) -> acked,
basic.nack (multiple) -> nacked_requeue / nacked_drop, basic.reject ->
rejected_requeue / rejected_drop, basic.recover / recover-async -> recovered
(every unacked message of the channel goes back to the queue). In a
transaction those take effect at tx.commit-ok (settled_by is the commit-ok)
and are undone by tx.rollback-ok. Still unacked when the channel closes
(its close-ok) or the connection closes (connection.close-ok, or the
connection.close itself when the capture ends without its answer):
requeued_on_close; when the capture ends first: open_at_capture_end.

Flow events: ``qos`` at basic.qos; ``deliver`` / ``settle`` / ``close`` when
the in-flight (delivered, unsettled, manual-ack) count of a channel or
consumer changes; ``flow`` at channel.flow-ok (the state the peer confirms it
processed, spec: "1 means the peer will start sending or continue to send
content frames; 0 means it will not"; a channel.flow the peer refuses, as
RabbitMQ answers active=false with connection.close 540, changes nothing);
``blocked`` / ``unblocked`` at
connection.blocked / unblocked. A channel row's prefetch is the last
basic.qos prefetch-count of the channel, whatever its global flag; a consumer
row's prefetch is the global=false prefetch in force when the consumer started
(RabbitMQ's meaning: global=false limits each new consumer, global=true the
channel). at_limit = in_flight >= prefetch > 0. A settlement naming nothing
outstanding (ack of a tag never delivered, a confirm of an unknown number, a
return without a matching publish, an ack on a closed channel) is a channel
``settle`` row with the anomaly in ``reason``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Literal, TypeVar, cast

from amqplens.lifecycle.amqp091_channel import SETTLE_EVENT, Channel, Consumer, pop_upto
from amqplens.lifecycle.machines import (
    DELIVER, ENDPOINT, PUBLISH, Close, DeliverEvent, EndpointEvent, Machine, PublishEvent, TxSettle,
)
from amqplens.lifecycle.records import FROM_BROKER, TO_BROKER, Delivery, Output, flow_row, frame_arg
from amqplens.lifecycle.requests import RequestMatcher

_E = TypeVar("_E", bound=str)

class Connection091:
    def __init__(self, connection_id: str, dialect: str, out: Output, max_pending_returns: int = 10_000) -> None:
        self.cid, self.dialect, self.out = connection_id, dialect, out
        self.max_pending_returns = max_pending_returns
        self.channels: dict[int, Channel] = {}
        self.content: dict[tuple, list] = {}  # (direction, channel) -> [message_seq, Delivery | None]
        self.requests = RequestMatcher(connection_id, dialect, out)
        self.closing: tuple | None = None  # (frame_id, ts) of connection.close
        self.flag: str | None = None  # anomaly of the frame being handled (a frame on a closed channel)
        self.last_seq: dict[str, int] = {}  # per direction and channel: the highest message_seq a delivery took

    # -- entry points ---------------------------------------------------------------------
    def on_frame(self, f: dict, fid: str, ts: int) -> None:
        kind = f["frame_type"]
        if kind == "method":
            self._method(f, fid, ts)
        elif kind == "header" or kind == "body":
            self._content_frame(f, fid, kind == "header")

    def finish(self) -> None:
        event: Literal["connection_close", "capture_end"]
        event, fid, ts = ("connection_close", *self.closing) if self.closing else ("capture_end", None, None)
        self._close_all(event, fid, ts)
        self.requests.finish()

    # -- methods ----------------------------------------------------------------------------
    def _method(self, f: dict, fid: str, ts: int) -> None:
        name = (f["class_name"], f["method_name"])
        n = f["channel"] or 0
        direction = f["direction"]
        if (direction, n) in self.content:  # any other method ends an unfinished content on its channel
            self._abandon(direction, n)
        self.flag = None
        ch = None
        event: EndpointEvent | None = None
        if n:
            ch = self.channels.get(n)
            if ch is None:
                ch = self.channels[n] = Channel(n)
            event = ENDPOINT_EVENT.get(name, "use")
            t = ENDPOINT.step(ch.state, event)
            self.flag = t.flag
            if event == "open" and t.effect in ("open", "close") and ch.state != "unseen":
                # a fresh channel; what the old one still held (opened without a close seen, or frames
                # that came on it while closed) ends with it
                self._close_channel(ch, "channel_close", fid, ts)
                ch = self.channels[n] = Channel(n)
            ch.state = t.next_state
        self.requests.on_method(f, name, n, direction, fid, ts)
        handler = HANDLERS.get(name)
        if handler is not None and (ch is not None or name[0] == "connection"):
            handler(self, f, ch, fid, ts)
        if event == "close_reply" and ch is not None and ch.state == "closed":
            self._close_channel(ch, "channel_close", fid, ts)
            self.requests.channel_closed(n)
            self.channels[n] = Channel(n)
            self.channels[n].state = "closed"  # kept (bounded by channel-max) to flag frames that follow

    def _publish(self, f, ch: Channel, fid, ts) -> None:
        rec = self._delivery(f, TO_BROKER, "publish", fid, ts)
        rec.exchange, rec.routing_key = f.get("exchange"), f.get("routing_key")
        rec.mandatory = bool(f.get("mandatory") or f.get("immediate"))
        event: PublishEvent
        if ch.confirm:
            rec.delivery_tag, rec.settle_mode, event = ch.next_seq, "confirm", "publish_confirm"
            ch.unconfirmed[ch.next_seq] = rec
            ch.next_seq += 1
        elif ch.tx:
            rec.settle_mode, event = "tx", "publish_tx"
            ch.tx_publishes.append(rec)
        else:
            rec.settle_mode, event = "no_confirm", "publish_mandatory" if rec.mandatory else "publish_plain"
        if rec.mandatory:
            self._returnable(ch, rec)
        rec.step(PUBLISH, event, fid, ts)
        self._open_content(f, rec)

    def _returnable(self, ch: Channel, rec: Delivery) -> None:
        q = ch.returnable
        while q and not q[0].live:
            q.popleft()
        q.append(rec)
        if len(q) > self.max_pending_returns:  # bounded: the oldest is assumed routed
            old = q.popleft()
            old.flag("return_window_exceeded")
            self._step(old, PUBLISH, "expire", None, None)

    def _deliver(self, f, ch: Channel, fid, ts, method: str) -> None:
        rec = self._delivery(f, FROM_BROKER, method, fid, ts)
        tag = rec.delivery_tag = f.get("delivery_tag")
        rec.redelivered, rec.exchange, rec.routing_key = f.get("redelivered"), f.get("exchange"), f.get("routing_key")
        consumer = None
        if method == "deliver":
            ctag = rec.consumer_tag = f.get("consumer_tag")
            consumer = ch.consumers.get(ctag)
            if consumer is None:
                consumer = ch.consumers[ctag] = Consumer(ctag, False, None, ch.consumer_prefetch)
                rec.flag("consumer_not_seen")
            no_ack, rec.queue = consumer.no_ack, consumer.queue
        elif ch.pending_gets:
            no_ack, rec.queue = ch.pending_gets.popleft()
        else:
            no_ack = False
            rec.flag("get_not_seen")
        rec.consumer = consumer
        old = ch.unacked.pop(tag, None) if tag is not None else None
        if old is not None:  # the channel's tags restarted unseen (a gap hid a close and open)
            rec.flag("duplicate_tag")
            old.flag("duplicate_tag")
            self._step(old, DELIVER, "channel_close", fid, ts)
        rec.settle_mode = "auto_ack" if no_ack else "tx" if ch.tx else "manual_ack"
        rec.step(DELIVER, "deliver_auto_ack" if no_ack else "deliver_manual", fid, ts)
        self._open_content(f, rec)
        if rec.live:
            if tag is not None:
                ch.unacked[tag] = rec
            ch.in_flight += 1
            if consumer is not None:
                consumer.in_flight += 1
            self._flow(ch, fid, ts, "deliver", {consumer} if consumer is not None else ())

    def _client_settle(self, f, ch: Channel, fid, ts, kind: str) -> None:
        tag = f.get("delivery_tag") or 0
        event: DeliverEvent = SETTLE_EVENT[(kind, bool(f.get("requeue")))]
        if ch.tx:
            event = cast(TxSettle, f"tx_{event}")
        recs = pop_upto(ch.unacked, tag) if f.get("multiple") else [r for r in (ch.unacked.pop(tag, None),) if r]
        if not recs:
            self._anomaly(ch, fid, ts, f"{kind}_of_unknown_tag")
            return
        touched = set()
        for rec in recs:
            if self._step(rec, DELIVER, event, fid, ts):
                if rec.consumer is not None:
                    touched.add(rec.consumer)
            elif rec.state.startswith("tx_"):
                ch.tx_held.append(rec)  # in flight until the commit
            else:  # settled twice: a flagged no-op, still unacked
                assert rec.delivery_tag is not None  # it was in unacked, by its tag
                ch.unacked[rec.delivery_tag] = rec
        if len(ch.tx_held) < len(recs) or touched:
            self._flow(ch, fid, ts, "settle", touched)

    def _broker_confirm(self, f, ch: Channel, fid, ts, kind: str) -> None:
        tag = f.get("delivery_tag") or 0
        recs = pop_upto(ch.unconfirmed, tag) if f.get("multiple") else [r for r in (ch.unconfirmed.pop(tag, None),) if r]
        if not recs:
            self._anomaly(ch, fid, ts, f"confirm_{kind}_of_unknown_tag")
        for rec in recs:
            self._step(rec, PUBLISH, "broker_ack" if kind == "ack" else "broker_nack", fid, ts)

    def _return(self, f, ch: Channel, fid, ts) -> None:
        self._open_content(f, None)  # the returned message's frames belong to its publish's row by reference only
        key = (f.get("exchange"), f.get("routing_key"))
        q = ch.returnable
        skipped = []
        match = None
        while q:
            rec = q.popleft()
            if not rec.live or rec.state == "returned_await_confirm":
                continue
            if (rec.exchange, rec.routing_key) == key:
                match = rec
                break
            skipped.append(rec)
        if match is None:
            q.extendleft(reversed(skipped))
            self._anomaly(ch, fid, ts, "return_of_unknown_publish")
            return
        for rec in skipped:  # published before the returned one and not returned: routed
            self._step(rec, PUBLISH, "expire", None, None)
        self._step(match, PUBLISH, "basic_return", fid, ts)

    def _tx_end(self, ch: Channel, fid, ts, event: Literal["tx_commit", "tx_rollback"]) -> None:
        touched = {r.consumer for r in ch.tx_held if r.consumer is not None}
        held, ch.tx_held = ch.tx_held, []
        reverted = False
        for rec in held:
            if not self._step(rec, DELIVER, event, fid, ts) and rec.state == "unacked" and rec.delivery_tag is not None:
                ch.unacked[rec.delivery_tag] = rec
                reverted = True
        if reverted:
            ch.unacked = OrderedDict(sorted(ch.unacked.items()))
        publishes, ch.tx_publishes = ch.tx_publishes, []
        for rec in publishes:
            self._step(rec, PUBLISH, event, fid, ts)
        if held and not reverted:
            self._flow(ch, fid, ts, "settle", touched)

    def _recover(self, f, ch: Channel, fid, ts) -> None:
        recs = list(ch.unacked.values()) + ch.tx_held
        ch.unacked.clear()
        ch.tx_held = []
        for rec in recs:
            self._step(rec, DELIVER, "recover", fid, ts)
        if recs:
            self._flow(ch, fid, ts, "settle", {r.consumer for r in recs if r.consumer is not None})

    # -- channel and connection ends ------------------------------------------------------------
    def _close_channel(self, ch: Channel, event: Close | Literal["capture_end"], fid, ts) -> None:
        consumers = {r.consumer for r in (*ch.unacked.values(), *ch.tx_held) if r.consumer is not None}
        had = ch.in_flight
        machine: Any  # DELIVER or PUBLISH, both of which have the event (_step cannot solve its event type from their union)
        for recs, machine in ((ch.unacked.values(), DELIVER), (ch.tx_held, DELIVER), (ch.unconfirmed.values(), PUBLISH),
                              (ch.tx_publishes, PUBLISH), (ch.returnable, PUBLISH)):
            for rec in list(recs):
                self._step(rec, machine, event, fid, ts)
        ch.unacked.clear()
        ch.unconfirmed.clear()
        ch.returnable.clear()
        ch.tx_held, ch.tx_publishes = [], []
        for d in ("to_server", "to_client"):
            if (d, ch.number) in self.content:
                self._abandon(d, ch.number)
        if had and fid is not None:
            self._flow(ch, fid, ts, "close", consumers)

    def _close_all(self, event: Close | Literal["capture_end"], fid, ts) -> None:
        for ch in list(self.channels.values()):
            self._close_channel(ch, event, fid, ts)
        self.channels.clear()
        for d, n in list(self.content):
            self._abandon(d, n)

    def _connection_close(self, f, ch, fid, ts) -> None:
        self.closing = (fid, ts)

    def _connection_close_ok(self, f, ch, fid, ts) -> None:
        self._close_all("connection_close", fid, ts)
        self.requests.finish("abandoned")
        self.closing = None

    # -- content ----------------------------------------------------------------------------------
    def _delivery(self, f: dict, direction: str, method: str, fid: str, ts: int) -> Delivery:
        seq = f.get("message_seq")
        key = f"{self.cid}-{direction}-{f['channel']}-"
        # the codec numbers a channel's messages in stream order; a number not above the last one taken (a frame
        # handled out of order, or the codec's numbering disagreeing with ours) would name a second row the same:
        # such a row is named by its first frame's offset, unique in its direction (a frame starts at most one row)
        if seq is None or seq <= self.last_seq.get(key, -1):
            key += "f%d" % f["stream_offset"]
        else:
            self.last_seq[key] = seq
            key += str(seq)
        rec = Delivery(key, self.cid, self.dialect, direction, f["channel"], method, fid, ts)
        if self.flag:
            rec.flag(self.flag)
        return rec

    def _open_content(self, f: dict, rec: Delivery | None) -> None:
        folded = f.get("fold_frame_ids")
        if folded is not None and rec is not None:  # its header and bodies came with it (fold.py): complete now
            rec.frame_ids += folded
            rec.properties_json, rec.body_size = f["fold_properties_json"], f["fold_body_size"]
            rec.body_sha256, rec.complete = f["fold_body_sha256"], True
            if not rec.live:
                self.out.deliveries.append(rec.row())
            return
        self.content[(f["direction"], f["channel"])] = [f.get("message_seq"), rec]

    def _content_frame(self, f: dict, fid: str, header: bool) -> None:
        key = (f["direction"], f["channel"])
        slot = self.content.get(key)
        seq = f.get("message_seq")
        if slot is None or slot[0] != seq:
            if not header or seq is None or f["direction"] != "to_server" or not f["channel"]:
                return
            slot = self._orphan_publish(f, fid)  # the capture starts after this message's basic.publish
        rec = slot[1]
        if rec is not None:
            rec.frame_ids.append(fid)
            if header:
                rec.properties_json, rec.body_size = f.get("properties_json"), f.get("body_size")
        sha = f.get("body_sha256")
        if sha is not None:
            del self.content[key]
            if rec is not None:
                rec.body_sha256, rec.complete = sha, True
                if not rec.live:
                    self.out.deliveries.append(rec.row())

    def _orphan_publish(self, f: dict, fid: str) -> list:
        ch = self.channels.get(f["channel"]) or self.channels.setdefault(f["channel"], Channel(f["channel"]))
        self._publish(f, ch, fid, f["ts_us"])
        slot = self.content[(f["direction"], f["channel"])]
        rec = slot[1]
        rec.flag("method_not_seen")
        rec.frame_ids.pop()  # _content_frame appends this frame again
        return slot

    def _abandon(self, direction: str, n: int) -> None:
        _seq, rec = self.content.pop((direction, n))
        if rec is not None:
            rec.flag("content_incomplete")
            rec.complete = True
            if not rec.live:
                self.out.deliveries.append(rec.row())

    # -- machine steps and flow rows ----------------------------------------------------------------
    def _step(self, rec: Delivery, machine: Machine[Any, _E, Any], event: _E, fid, ts) -> bool:
        if not rec.step(machine, event, fid, ts):
            return False
        if rec.method != "publish" and rec.settle_mode != "auto_ack":
            ch = self.channels.get(rec.channel)
            if ch is not None:
                ch.in_flight -= 1
            if rec.consumer is not None:
                rec.consumer.in_flight -= 1
        if rec.complete:
            self.out.deliveries.append(rec.row())
        return True

    def _flow(self, ch: Channel, fid, ts, event: str, consumers: Iterable[Consumer] = (), reason=None) -> None:
        rows = self.out.flow_events
        p, n = ch.prefetch_count, ch.in_flight
        rows.append(flow_row(self.cid, fid, ts, "channel", ch.number, event, channel=ch.number, prefetch_count=p,
                             in_flight=n, at_limit=n >= p > 0, flow_active=ch.flow_active, reason=reason))
        # one row per consumer tag: a tag re-used on the channel (a consume with the tag of a consumer the capture only
        # saw deliveries for) leaves records of both; the channel's current consumer of the tag speaks for it
        tags: dict[str, list[Consumer]] = {}
        for c in consumers:
            tags.setdefault(c.tag, []).append(c)
        for tag in sorted(tags):
            same = tags[tag]
            c = same[0] if len(same) == 1 else next((x for x in same if ch.consumers.get(tag) is x),
                                                     max(same, key=lambda x: (x.in_flight, x.prefetch)))
            rows.append(flow_row(self.cid, fid, ts, "consumer", f"{ch.number}-{c.tag}", event, channel=ch.number, consumer_tag=c.tag,
                                 prefetch_count=c.prefetch, in_flight=c.in_flight, at_limit=c.in_flight >= c.prefetch > 0))

    def _anomaly(self, ch: Channel, fid, ts, reason: str) -> None:
        if self.flag:
            reason = f"{reason},{self.flag}"
        self._flow(ch, fid, ts, "settle", reason=reason)

    # -- small handlers ---------------------------------------------------------------------------------
    def _qos(self, f, ch, fid, ts) -> None:
        ch.prefetch_count = f.get("prefetch_count") or 0
        if not f.get("global_qos"):
            ch.consumer_prefetch = ch.prefetch_count
        self._flow(ch, fid, ts, "qos")

    def _consume(self, f, ch, fid, ts) -> None:
        entry = (f.get("consumer_tag") or "", bool(f.get("no_ack")), f.get("queue"))
        if frame_arg(f, "no_wait") is True or frame_arg(f, "nowait") is True:  # 0-9-1 / 0-8 name the bit so
            ch.consumers[entry[0]] = Consumer(entry[0], entry[1], entry[2], ch.consumer_prefetch)
        else:
            ch.pending_consumes.append(entry)

    def _consume_ok(self, f, ch, fid, ts) -> None:
        tag = f.get("consumer_tag") or ""
        _asked, no_ack, queue = ch.pending_consumes.popleft() if ch.pending_consumes else (tag, False, None)
        if tag not in ch.consumers:
            ch.consumers[tag] = Consumer(tag, no_ack, queue, ch.consumer_prefetch)

    def _cancel_ok(self, f, ch, fid, ts) -> None:
        ch.consumers.pop(f.get("consumer_tag"), None)  # its unacked messages stay unacked on the channel

    def _get(self, f, ch, fid, ts) -> None:
        ch.pending_gets.append((bool(f.get("no_ack")), f.get("queue")))

    def _get_empty(self, f, ch, fid, ts) -> None:
        if ch.pending_gets:
            ch.pending_gets.popleft()

    def _ack(self, f, ch, fid, ts) -> None:
        if f["direction"] == "to_server":
            self._client_settle(f, ch, fid, ts, "ack")
        else:
            self._broker_confirm(f, ch, fid, ts, "ack")

    def _nack(self, f, ch, fid, ts) -> None:
        if f["direction"] == "to_server":
            self._client_settle(f, ch, fid, ts, "nack")
        else:
            self._broker_confirm(f, ch, fid, ts, "nack")

    def _confirm_select(self, f, ch, fid, ts) -> None:
        if not ch.confirm:
            ch.confirm, ch.next_seq = True, 1

    def _tx_select(self, f, ch, fid, ts) -> None:
        ch.tx = True

    def _channel_flow(self, f, ch, fid, ts) -> None:
        ch.flow_active = f.get("active")
        self._flow(ch, fid, ts, "flow")

    def _blocked(self, f, ch, fid, ts, blocked: bool) -> None:
        self.out.flow_events.append(flow_row(self.cid, fid, ts, "connection", None, "blocked" if blocked else "unblocked",
                                             channel=0, blocked=blocked, reason=f.get("reason")))


# (class, method) -> the endpoint event of a channel
ENDPOINT_EVENT: dict[tuple[str, str], EndpointEvent] = {
    ("channel", "open"): "open", ("channel", "open-ok"): "open_reply",
    ("channel", "close"): "close", ("channel", "close-ok"): "close_reply",
}
C = Connection091
HANDLERS = {
    ("basic", "publish"): C._publish,
    ("basic", "deliver"): lambda self, f, ch, fid, ts: self._deliver(f, ch, fid, ts, "deliver"),
    ("basic", "get-ok"): lambda self, f, ch, fid, ts: self._deliver(f, ch, fid, ts, "get-ok"),
    ("basic", "return"): C._return,
    ("basic", "ack"): C._ack,
    ("basic", "nack"): C._nack,
    ("basic", "reject"): lambda self, f, ch, fid, ts: self._client_settle(f, ch, fid, ts, "reject"),
    ("basic", "recover"): C._recover,
    ("basic", "recover-async"): C._recover,
    ("basic", "qos"): C._qos,
    ("basic", "consume"): C._consume,
    ("basic", "consume-ok"): C._consume_ok,
    ("basic", "cancel-ok"): C._cancel_ok,
    ("basic", "get"): C._get,
    ("basic", "get-empty"): C._get_empty,
    ("confirm", "select"): C._confirm_select,
    ("tx", "select"): C._tx_select,
    ("tx", "commit-ok"): lambda self, f, ch, fid, ts: self._tx_end(ch, fid, ts, "tx_commit"),
    ("tx", "rollback-ok"): lambda self, f, ch, fid, ts: self._tx_end(ch, fid, ts, "tx_rollback"),
    ("channel", "flow-ok"): C._channel_flow,
    ("connection", "close"): C._connection_close,
    ("connection", "close-ok"): C._connection_close_ok,
    ("connection", "blocked"): lambda self, f, ch, fid, ts: self._blocked(f, ch, fid, ts, True),
    ("connection", "unblocked"): lambda self, f, ch, fid, ts: self._blocked(f, ch, fid, ts, False),
}
del C
