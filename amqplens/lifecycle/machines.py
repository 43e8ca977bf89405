"""The lifecycle state machines, as tables of ``(state, event) -> (effect, next_state)``.

Like h2's connection machine, each machine is data: a ``Machine`` holds its
states, events, outcomes and one ``Transition`` per ``(state, event)`` pair.
Every pair is present: a pair that cannot happen in a correct conversation is
a *flagged no-op* (effect ``noop``, same state, a flag naming the anomaly), so
bad orders in a capture become flags on a row, never an exception. A
``next_state`` that is one of the machine's outcomes ends the delivery.

Effects (what the tracker does besides moving to ``next_state``):

- ``open``: the delivery becomes live (waits for its settlement);
- ``fire``: settled on send: settled_ts/by = the delivery's own first frame
  (auto-ack deliveries, publishes nobody confirms);
- ``settle``: settled by this frame;
- ``settle_held``: settled now, by this frame (tx.commit-ok) applying an
  earlier settlement held in the transaction;
- ``settle_marked``: ends with the frame marked earlier (a basic.return
  in confirm mode, then the confirm);
- ``mark``: remember this frame as the settling one, stay live;
- ``hold``: a settlement inside a transaction, applied at commit;
- ``revert``: a held settlement was rolled back;
- ``close``: ended by a channel/link/session/connection close (this frame);
- ``end``: the capture ended first (no settling frame);
- ``noop``: nothing (with or without a flag).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

EFFECTS = ("open", "fire", "settle", "settle_held", "settle_marked", "mark", "hold", "revert", "close", "end", "noop")
TERMINAL_EFFECTS = frozenset({"fire", "settle", "settle_held", "settle_marked", "close", "end"})


class Transition(typing.NamedTuple):
    effect: str
    next_state: str
    flag: str | None = None


class Machine:
    """One lifecycle: its states, events, outcomes and the full transition table."""

    __slots__ = ("name", "states", "events", "outcomes", "table")

    def __init__(self, name: str, states: Iterable[str], events: Iterable[str], outcomes: Iterable[str], table: dict):
        self.name = name
        self.states = tuple(states)
        self.events = tuple(events)
        self.outcomes = frozenset(outcomes)
        self.table: dict[tuple[str, str], Transition] = table

    def step(self, state: str, event: str) -> Transition:
        """The transition; a pair outside the table (a state or event the machine does not know) is a flagged no-op."""
        t = self.table.get((state, event))
        return t if t is not None else Transition("noop", state, f"unexpected_{event}")


def _complete(name: str, states, events, outcomes, rules: dict, default_flag: str = "unexpected") -> Machine:
    """A machine whose unlisted pairs are flagged no-ops named ``<default_flag>_<event>``."""
    table = {}
    for s in states:
        for e in events:
            table[(s, e)] = rules.get((s, e)) or Transition("noop", s, f"{default_flag}_{e}")
    unknown = set(rules) - set(table)
    if unknown:
        raise ValueError(f"{name}: rules for unknown pairs {sorted(unknown)}")
    return Machine(name, states, events, outcomes, table)


T = Transition
CLOSES = ("channel_close", "connection_close")

# ---------------------------------------------------------------------------- 0-9-1: publishes
# One machine per basic.publish. The tracker picks the creating event from the
# channel's mode: confirm (after confirm.select), tx (after tx.select), or
# neither; a mandatory/immediate publish without confirms waits for a possible
# basic.return ("await_return") until a later return proves it routed
# ("expire": returns come in publish order) or the channel closes.
PUBLISH_STATES = ("new", "await_confirm", "returned_await_confirm", "await_return", "in_tx")
PUBLISH_EVENTS = (
    "publish_plain", "publish_mandatory", "publish_confirm", "publish_tx",
    "broker_ack", "broker_nack", "basic_return", "expire", "tx_commit", "tx_rollback",
    *CLOSES, "capture_end",
)
PUBLISH_OUTCOMES = ("sent", "confirmed", "nacked_by_broker", "returned", "unconfirmed_at_close", "committed", "rolled_back", "open_at_capture_end")
_publish = {
    ("new", "publish_plain"): T("fire", "sent"),
    ("new", "publish_mandatory"): T("open", "await_return"),
    ("new", "publish_confirm"): T("open", "await_confirm"),
    ("new", "publish_tx"): T("open", "in_tx"),
    ("await_confirm", "broker_ack"): T("settle", "confirmed"),
    ("await_confirm", "broker_nack"): T("settle", "nacked_by_broker"),
    ("await_confirm", "basic_return"): T("mark", "returned_await_confirm"),
    ("await_confirm", "expire"): T("noop", "await_confirm"),  # still waits for its confirm
    ("await_confirm", "capture_end"): T("end", "open_at_capture_end"),
    ("returned_await_confirm", "broker_ack"): T("settle_marked", "returned"),
    ("returned_await_confirm", "broker_nack"): T("settle_marked", "returned", "nacked_after_return"),
    ("returned_await_confirm", "expire"): T("noop", "returned_await_confirm"),
    ("returned_await_confirm", "capture_end"): T("settle_marked", "returned"),
    ("await_return", "basic_return"): T("settle", "returned"),
    ("await_return", "expire"): T("fire", "sent"),
    ("await_return", "capture_end"): T("fire", "sent"),
    ("in_tx", "tx_commit"): T("settle", "committed"),
    ("in_tx", "tx_rollback"): T("settle", "rolled_back"),
    ("in_tx", "basic_return"): T("settle", "returned"),
    ("in_tx", "expire"): T("noop", "in_tx"),
    ("in_tx", "capture_end"): T("end", "open_at_capture_end"),
    **{("await_confirm", c): T("close", "unconfirmed_at_close") for c in CLOSES},
    **{("returned_await_confirm", c): T("settle_marked", "returned") for c in CLOSES},
    **{("await_return", c): T("fire", "sent") for c in CLOSES},
    **{("in_tx", c): T("close", "rolled_back") for c in CLOSES},  # an open transaction dies with its channel
}
PUBLISH = _complete("publish_0_9_1", PUBLISH_STATES, PUBLISH_EVENTS, PUBLISH_OUTCOMES, _publish)

# ---------------------------------------------------------------------------- 0-9-1: deliveries
# One machine per basic.deliver / basic.get-ok. In a transaction (tx.select on
# the channel) a client ack/nack/reject is held until tx.commit-ok applies it
# or tx.rollback-ok discards it.
SETTLES = ("ack", "nack_requeue", "nack_drop", "reject_requeue", "reject_drop")
SETTLE_OUTCOME = {
    "ack": "acked", "nack_requeue": "nacked_requeue", "nack_drop": "nacked_drop",
    "reject_requeue": "rejected_requeue", "reject_drop": "rejected_drop",
}
DELIVER_STATES = ("new", "unacked", *(f"tx_{s}" for s in SETTLES))
DELIVER_EVENTS = (
    "deliver_auto_ack", "deliver_manual", *SETTLES, *(f"tx_{s}" for s in SETTLES),
    "recover", "tx_commit", "tx_rollback", *CLOSES, "capture_end",
)
DELIVER_OUTCOMES = (*SETTLE_OUTCOME.values(), "auto_ack", "recovered", "requeued_on_close", "open_at_capture_end")
_deliver = {
    ("new", "deliver_auto_ack"): T("fire", "auto_ack"),
    ("new", "deliver_manual"): T("open", "unacked"),
    **{("unacked", s): T("settle", SETTLE_OUTCOME[s]) for s in SETTLES},
    **{("unacked", f"tx_{s}"): T("hold", f"tx_{s}") for s in SETTLES},
    ("unacked", "recover"): T("settle", "recovered"),
    ("unacked", "tx_commit"): T("noop", "unacked"),  # nothing of this delivery in the transaction
    ("unacked", "tx_rollback"): T("noop", "unacked"),
    ("unacked", "capture_end"): T("end", "open_at_capture_end"),
    **{("unacked", c): T("close", "requeued_on_close") for c in CLOSES},
    **{(f"tx_{s}", "tx_commit"): T("settle_held", SETTLE_OUTCOME[s]) for s in SETTLES},
    **{(f"tx_{s}", "tx_rollback"): T("revert", "unacked", "settle_rolled_back") for s in SETTLES},
    **{(f"tx_{s}", c): T("close", "requeued_on_close", "uncommitted_settle") for s in SETTLES for c in CLOSES},
    **{(f"tx_{s}", "capture_end"): T("end", "open_at_capture_end", "uncommitted_settle") for s in SETTLES},
    **{(f"tx_{s}", "recover"): T("settle", "recovered", "uncommitted_settle") for s in SETTLES},
    **{(f"tx_{s}", e): T("noop", f"tx_{s}", "settled_twice") for s in SETTLES for e in (*SETTLES, *(f"tx_{x}" for x in SETTLES))},
}
DELIVER = _complete("deliver_0_9_1", DELIVER_STATES, DELIVER_EVENTS, DELIVER_OUTCOMES, _deliver)

# ---------------------------------------------------------------------------- 1.0: transfers
# One machine per delivery (all frames of a multi-frame transfer are one
# delivery). A disposition may set a state without settling ("state_*",
# e.g. rcv-settle-mode second) and settle later ("settle_*"; "settle_none":
# settled without a state, keeping one set before). "received" is not an
# outcome (§3.4.1), so an unsettled disposition with it changes nothing.
STATES_1_0 = ("accepted", "rejected", "released", "modified", "received", "declared", "transactional")
TERMINAL_STATES_1_0 = tuple(s for s in STATES_1_0 if s != "received")
TRANSFER_STATES = ("new", "unsettled", *(f"stated_{s}" for s in TERMINAL_STATES_1_0))
TRANSFER_EVENTS = (
    "transfer", "transfer_settled", "abort",
    *(f"state_{s}" for s in (*STATES_1_0, "none")), *(f"settle_{s}" for s in (*STATES_1_0, "none")),
    "detach", "end", "close", "capture_end",
)
TRANSFER_OUTCOMES = (*STATES_1_0, "presettled", "settled", "aborted", "unsettled_at_close", "open_at_capture_end")
_LIVE_1_0 = ("unsettled", *(f"stated_{s}" for s in TERMINAL_STATES_1_0))
_transfer = {
    ("new", "transfer"): T("open", "unsettled"),
    ("new", "transfer_settled"): T("fire", "presettled"),
    # a new transfer reusing a live delivery-id: the old delivery is abandoned as if its link closed
    ("unsettled", "transfer"): T("close", "unsettled_at_close", "delivery_id_reused"),
    ("unsettled", "transfer_settled"): T("settle", "presettled"),
    ("unsettled", "state_received"): T("noop", "unsettled"),
    ("unsettled", "state_none"): T("noop", "unsettled"),
    ("unsettled", "settle_none"): T("settle", "settled"),
    **{("unsettled", f"state_{s}"): T("noop", f"stated_{s}") for s in TERMINAL_STATES_1_0},
    **{(st, f"settle_{s}"): T("settle", s) for st in _LIVE_1_0 for s in STATES_1_0},
    **{(f"stated_{s}", "settle_none"): T("settle", s) for s in TERMINAL_STATES_1_0},
    **{(f"stated_{s}", "transfer_settled"): T("settle", s) for s in TERMINAL_STATES_1_0},
    **{(f"stated_{s}", f"state_{x}"): T("noop", f"stated_{x}") for s in TERMINAL_STATES_1_0 for x in TERMINAL_STATES_1_0},
    **{(f"stated_{s}", "state_received"): T("noop", f"stated_{s}", "state_regressed") for s in TERMINAL_STATES_1_0},
    **{(f"stated_{s}", "state_none"): T("noop", f"stated_{s}") for s in TERMINAL_STATES_1_0},
    **{(f"stated_{s}", "transfer"): T("close", "unsettled_at_close", "delivery_id_reused") for s in TERMINAL_STATES_1_0},
    **{(st, "abort"): T("settle", "aborted") for st in _LIVE_1_0},  # §2.7.5: an aborted delivery is settled
    **{("unsettled", c): T("close", "unsettled_at_close") for c in ("detach", "end", "close")},
    **{(f"stated_{s}", c): T("close", "unsettled_at_close", f"state_{s}") for s in TERMINAL_STATES_1_0 for c in ("detach", "end", "close")},
    **{(st, "capture_end"): T("end", "open_at_capture_end") for st in _LIVE_1_0},
}
TRANSFER = _complete("transfer_1_0", TRANSFER_STATES, TRANSFER_EVENTS, TRANSFER_OUTCOMES, _transfer)

# ---------------------------------------------------------------------------- 0-10: message.transfer
# One machine per transfer (command + header + body segments are one
# delivery), identified by its command-id in its session. accept-mode none is
# settled on send (``sent`` toward the broker, ``auto_ack`` from it); explicit
# waits for the peer's message.accept / reject / release naming its id. The
# peer's session.completed naming it ("completed") moves it to ``completed``:
# still unsettled, no latency (completion is not settlement); closed there, the
# row says so with the flag completed_unsettled.
SETTLES_0_10 = {"accept": "accepted", "reject": "rejected", "release": "released"}
TRANSFER_0_10_STATES = ("new", "unsettled", "completed")
TRANSFER_0_10_EVENTS = (
    "transfer_explicit", "transfer_none_to_broker", "transfer_none_from_broker", "completed", *SETTLES_0_10,
    "session_detach", "connection_close", "capture_end",
)
TRANSFER_0_10_OUTCOMES = (*SETTLES_0_10.values(), "sent", "auto_ack", "unsettled_at_close", "open_at_capture_end")
_CLOSES_0_10 = ("session_detach", "connection_close")
_transfer_0_10 = {
    ("new", "transfer_explicit"): T("open", "unsettled"),
    ("new", "transfer_none_to_broker"): T("fire", "sent"),
    ("new", "transfer_none_from_broker"): T("fire", "auto_ack"),
    ("unsettled", "completed"): T("noop", "completed"),
    ("completed", "completed"): T("noop", "completed"),  # completions repeat (session.completed is cumulative)
    **{(st, e): T("settle", o) for st in ("unsettled", "completed") for e, o in SETTLES_0_10.items()},
    **{("unsettled", c): T("close", "unsettled_at_close") for c in _CLOSES_0_10},
    **{("completed", c): T("close", "unsettled_at_close", "completed_unsettled") for c in _CLOSES_0_10},
    ("unsettled", "capture_end"): T("end", "open_at_capture_end"),
    ("completed", "capture_end"): T("end", "open_at_capture_end", "completed_unsettled"),
    # a new transfer reusing a live command-id (a session re-attached without its detach seen): the old one is abandoned
    **{(st, e): T("close", "unsettled_at_close", "command_id_reused") for st in ("unsettled", "completed")
       for e in ("transfer_explicit", "transfer_none_to_broker", "transfer_none_from_broker")},
}
TRANSFER_0_10 = _complete("transfer_0_10", TRANSFER_0_10_STATES, TRANSFER_0_10_EVENTS, TRANSFER_0_10_OUTCOMES, _transfer_0_10)

# ---------------------------------------------------------------------------- endpoints
# A 0-9-1 channel, a 1.0 session or a 1.0 link: opened by one side, answered
# by the other, closed the same way. "use" is any other frame on it. Frames on
# an endpoint whose opening the capture did not show adopt it (a capture that
# starts mid-connection); frames on a closed one are flagged.
ENDPOINT_STATES = ("unseen", "opening", "open", "closing", "closed")
ENDPOINT_EVENTS = ("open", "open_reply", "close", "close_reply", "use")
_endpoint = {
    ("unseen", "open"): T("open", "opening"),
    ("unseen", "open_reply"): T("open", "open", "open_not_seen"),
    ("unseen", "use"): T("open", "open"),
    ("unseen", "close"): T("open", "closing"),
    ("unseen", "close_reply"): T("close", "closed", "open_not_seen"),
    ("opening", "open_reply"): T("noop", "open"),
    ("opening", "use"): T("noop", "opening"),
    ("opening", "close"): T("noop", "closing"),
    ("opening", "close_reply"): T("close", "closed", "close_not_seen"),
    ("open", "use"): T("noop", "open"),
    ("open", "close"): T("noop", "closing"),
    ("open", "open"): T("close", "opening", "reopened_without_close"),
    ("open", "close_reply"): T("close", "closed", "close_not_seen"),
    ("closing", "close_reply"): T("close", "closed"),
    ("closing", "use"): T("noop", "closing"),  # frames in flight when the close was sent
    ("closing", "close"): T("noop", "closing"),  # both sides closed at once
    ("closed", "open"): T("open", "opening"),
    ("closed", "use"): T("noop", "closed", "frame_on_closed_channel"),
}
# No outcomes: endpoints are reused (a channel number is reopened), and the
# tracker reads the effects as instructions ("open": fresh state, "close": end
# everything on it).
ENDPOINT = _complete("endpoint", ENDPOINT_STATES, ENDPOINT_EVENTS, (), _endpoint)

# ---------------------------------------------------------------------------- request / response
REQUEST_STATES = ("awaiting",)
REQUEST_EVENTS = ("response", "error_close", "abandoned", "capture_end")
REQUEST = _complete(
    "request",
    REQUEST_STATES,
    REQUEST_EVENTS,
    ("ok", "error", "unanswered"),
    {
        ("awaiting", "response"): T("settle", "ok"),
        ("awaiting", "error_close"): T("settle", "error"),
        ("awaiting", "abandoned"): T("end", "unanswered"),  # its channel/connection closed without an answer
        ("awaiting", "capture_end"): T("end", "unanswered"),
    },
)

MACHINES = (PUBLISH, DELIVER, TRANSFER, TRANSFER_0_10, ENDPOINT, REQUEST)
