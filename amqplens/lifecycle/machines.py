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
from collections.abc import Iterable, Mapping
from typing import Any, Generic, Literal, TypeVar

from amqplens.contracts.values import OUTCOMES, Outcome

EFFECTS = ("open", "fire", "settle", "settle_held", "settle_marked", "mark", "hold", "revert", "close", "end", "noop")
TERMINAL_EFFECTS = frozenset({"fire", "settle", "settle_held", "settle_marked", "close", "end"})


# Type parameters (for the type checker only): a machine's states, its events, and where its transitions go
# (``next_state``: a state or an outcome; outcomes are plain ``str``, so a machine with outcomes has ``str`` there,
# the endpoint machine, which has none, its states)
_S = TypeVar("_S", bound=str)
_E = TypeVar("_E", bound=str)
_N = TypeVar("_N", bound=str)
_N_co = TypeVar("_N_co", bound=str, covariant=True)


class Transition(typing.NamedTuple, Generic[_N_co]):
    effect: str
    next_state: _N_co
    flag: str | None = None


class Machine(Generic[_S, _E, _N]):
    """One lifecycle: its states, events, outcomes and the full transition table."""

    __slots__ = ("name", "states", "events", "outcomes", "table")

    def __init__(self, name: str, states: Iterable[_S], events: Iterable[_E], outcomes: Iterable[str], table: dict[tuple[_S, _E], Transition[_N]]):
        self.name = name
        self.states = tuple(states)
        self.events = tuple(events)
        self.outcomes = frozenset(outcomes)
        self.table: dict[tuple[_S, _E], Transition[_N]] = table

    def step(self, state: _S, event: _E) -> Transition[_N | _S]:
        """The transition; a pair outside the table (a state or event the machine does not know) is a flagged no-op."""
        t = self.table.get((state, event))
        return t if t is not None else Transition("noop", state, f"unexpected_{event}")


def _complete(name: str, states: tuple[_S, ...], events: tuple[_E, ...], outcomes: Iterable[str], rules: Mapping[tuple[str, str], Transition[str]],
              default_flag: str = "unexpected") -> Machine[_S, _E, Any]:
    """A machine whose unlisted pairs are flagged no-ops named ``<default_flag>_<event>``."""
    table: dict[tuple[_S, _E], Transition[Any]] = {}
    for s in states:
        for e in events:
            table[(s, e)] = rules.get((s, e)) or Transition("noop", s, f"{default_flag}_{e}")
    unknown = set(rules) - set(table)
    if unknown:
        raise ValueError(f"{name}: rules for unknown pairs {sorted(unknown)}")
    nowhere = {t.next_state for t in table.values()} - set(states) - set(outcomes)
    if nowhere:
        raise ValueError(f"{name}: transitions to {sorted(nowhere)}, neither a state nor an outcome")
    return Machine(name, states, events, outcomes, table)


def _delivery_machine(name: str, states: tuple[_S, ...], events: tuple[_E, ...], outcomes: Iterable[str],
                      rules: Mapping[tuple[str, str], Transition[str]]) -> Machine[_S, _E, Any]:
    """A machine of a message's delivery: its outcomes are values of deliveries.outcome, whose contract
    (``amqplens.contracts.values.OUTCOMES``) lists them for the docs and the expectation suites."""
    foreign = set(outcomes) - set(OUTCOMES)
    if foreign:
        raise ValueError(f"{name}: outcomes {sorted(foreign)} are not in the contracts' deliveries.outcome list")
    return _complete(name, states, events, outcomes, rules)


T = Transition
Close = Literal["channel_close", "connection_close"]
CLOSES: tuple[Close, ...] = typing.get_args(Close)

# ---------------------------------------------------------------------------- 0-9-1: publishes
# One machine per basic.publish. The tracker picks the creating event from the
# channel's mode: confirm (after confirm.select), tx (after tx.select), or
# neither; a mandatory/immediate publish without confirms waits for a possible
# basic.return ("await_return") until a later return proves it routed
# ("expire": returns come in publish order) or the channel closes.
PublishState = Literal["new", "await_confirm", "returned_await_confirm", "await_return", "in_tx"]
PublishEvent = Literal[
    "publish_plain", "publish_mandatory", "publish_confirm", "publish_tx",
    "broker_ack", "broker_nack", "basic_return", "expire", "tx_commit", "tx_rollback",
    Close, "capture_end",
]
PUBLISH_STATES: tuple[PublishState, ...] = typing.get_args(PublishState)
PUBLISH_EVENTS: tuple[PublishEvent, ...] = typing.get_args(PublishEvent)
PUBLISH_OUTCOMES: tuple[Outcome, ...] = ("sent", "confirmed", "nacked_by_broker", "returned", "unconfirmed_at_close", "committed", "rolled_back", "open_at_capture_end")
_publish: dict[tuple[str, str], Transition[str]] = {
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
PUBLISH: Machine[PublishState, PublishEvent, str] = _delivery_machine("publish_0_9_1", PUBLISH_STATES, PUBLISH_EVENTS, PUBLISH_OUTCOMES, _publish)

# ---------------------------------------------------------------------------- 0-9-1: deliveries
# One machine per basic.deliver / basic.get-ok. In a transaction (tx.select on
# the channel) a client ack/nack/reject is held until tx.commit-ok applies it
# or tx.rollback-ok discards it.
Settle = Literal["ack", "nack_requeue", "nack_drop", "reject_requeue", "reject_drop"]
TxSettle = Literal["tx_ack", "tx_nack_requeue", "tx_nack_drop", "tx_reject_requeue", "tx_reject_drop"]  # f"tx_{s}" of each
SETTLES: tuple[Settle, ...] = typing.get_args(Settle)
SETTLE_OUTCOME: dict[Settle, Outcome] = {
    "ack": "acked", "nack_requeue": "nacked_requeue", "nack_drop": "nacked_drop",
    "reject_requeue": "rejected_requeue", "reject_drop": "rejected_drop",
}
DeliverState = Literal["new", "unacked", TxSettle]
DeliverEvent = Literal[
    "deliver_auto_ack", "deliver_manual", Settle, TxSettle,
    "recover", "tx_commit", "tx_rollback", Close, "capture_end",
]
DELIVER_STATES: tuple[DeliverState, ...] = typing.get_args(DeliverState)
DELIVER_EVENTS: tuple[DeliverEvent, ...] = typing.get_args(DeliverEvent)
DELIVER_OUTCOMES: tuple[Outcome, ...] = (*SETTLE_OUTCOME.values(), "auto_ack", "recovered", "requeued_on_close", "open_at_capture_end")
_deliver: dict[tuple[str, str], Transition[str]] = {
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
DELIVER: Machine[DeliverState, DeliverEvent, str] = _delivery_machine("deliver_0_9_1", DELIVER_STATES, DELIVER_EVENTS, DELIVER_OUTCOMES, _deliver)

# ---------------------------------------------------------------------------- 1.0: transfers
# One machine per delivery (all frames of a multi-frame transfer are one
# delivery). A disposition may set a state without settling ("state_*",
# e.g. rcv-settle-mode second) and settle later ("settle_*"; "settle_none":
# settled without a state, keeping one set before). "received" is not an
# outcome (§3.4.1), so an unsettled disposition with it changes nothing.
STATES_1_0: tuple[Outcome, ...] = ("accepted", "rejected", "released", "modified", "received", "declared", "transactional")
TERMINAL_STATES_1_0 = tuple(s for s in STATES_1_0 if s != "received")
# (the stated_/state_/settle_ names spell out TERMINAL_STATES_1_0 / STATES_1_0 and none: a rule below naming one missing
# here fails _complete)
TransferState = Literal[
    "new", "unsettled",
    "stated_accepted", "stated_rejected", "stated_released", "stated_modified", "stated_declared", "stated_transactional",
]
TransferEvent = Literal[
    "transfer", "transfer_settled", "abort",
    "state_accepted", "state_rejected", "state_released", "state_modified", "state_received", "state_declared",
    "state_transactional", "state_none",
    "settle_accepted", "settle_rejected", "settle_released", "settle_modified", "settle_received", "settle_declared",
    "settle_transactional", "settle_none",
    "detach", "end", "close", "capture_end",
]
TRANSFER_STATES: tuple[TransferState, ...] = typing.get_args(TransferState)
TRANSFER_EVENTS: tuple[TransferEvent, ...] = typing.get_args(TransferEvent)
TRANSFER_OUTCOMES: tuple[Outcome, ...] = (*STATES_1_0, "presettled", "settled", "aborted", "unsettled_at_close", "open_at_capture_end")
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
TRANSFER: Machine[TransferState, TransferEvent, str] = _delivery_machine("transfer_1_0", TRANSFER_STATES, TRANSFER_EVENTS, TRANSFER_OUTCOMES, _transfer)

# ---------------------------------------------------------------------------- 0-10: message.transfer
# One machine per transfer (command + header + body segments are one
# delivery), identified by its command-id in its session. accept-mode none is
# settled on send (``sent`` toward the broker, ``auto_ack`` from it); explicit
# waits for the peer's message.accept / reject / release naming its id. The
# peer's session.completed naming it ("completed") moves it to ``completed``:
# still unsettled, no latency (completion is not settlement); closed there, the
# row says so with the flag completed_unsettled.
Settle010 = Literal["accept", "reject", "release"]
SETTLES_0_10: dict[Settle010, Outcome] = {"accept": "accepted", "reject": "rejected", "release": "released"}
Transfer010State = Literal["new", "unsettled", "completed"]
Transfer010Event = Literal[
    "transfer_explicit", "transfer_none_to_broker", "transfer_none_from_broker", "completed", Settle010,
    "session_detach", "connection_close", "capture_end",
]
TRANSFER_0_10_STATES: tuple[Transfer010State, ...] = typing.get_args(Transfer010State)
TRANSFER_0_10_EVENTS: tuple[Transfer010Event, ...] = typing.get_args(Transfer010Event)
TRANSFER_0_10_OUTCOMES: tuple[Outcome, ...] = (*SETTLES_0_10.values(), "sent", "auto_ack", "unsettled_at_close", "open_at_capture_end")
_CLOSES_0_10 = ("session_detach", "connection_close")
_transfer_0_10: dict[tuple[str, str], Transition[str]] = {
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
TRANSFER_0_10: Machine[Transfer010State, Transfer010Event, str] = _delivery_machine("transfer_0_10", TRANSFER_0_10_STATES, TRANSFER_0_10_EVENTS, TRANSFER_0_10_OUTCOMES, _transfer_0_10)

# ---------------------------------------------------------------------------- endpoints
# A 0-9-1 channel, a 1.0 session or a 1.0 link: opened by one side, answered
# by the other, closed the same way. "use" is any other frame on it. Frames on
# an endpoint whose opening the capture did not show adopt it (a capture that
# starts mid-connection); frames on a closed one are flagged.
EndpointState = Literal["unseen", "opening", "open", "closing", "closed"]
EndpointEvent = Literal["open", "open_reply", "close", "close_reply", "use"]
ENDPOINT_STATES: tuple[EndpointState, ...] = typing.get_args(EndpointState)
ENDPOINT_EVENTS: tuple[EndpointEvent, ...] = typing.get_args(EndpointEvent)
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
ENDPOINT: Machine[EndpointState, EndpointEvent, EndpointState] = _complete("endpoint", ENDPOINT_STATES, ENDPOINT_EVENTS, (), _endpoint)

# ---------------------------------------------------------------------------- request / response
RequestState = Literal["awaiting"]
RequestEvent = Literal["response", "error_close", "abandoned", "capture_end"]
REQUEST_STATES: tuple[RequestState, ...] = typing.get_args(RequestState)
REQUEST_EVENTS: tuple[RequestEvent, ...] = typing.get_args(RequestEvent)
REQUEST: Machine[RequestState, RequestEvent, str] = _complete(
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

# the state of a Delivery: one of the states of the machine it goes through (its outcome is kept apart)
DeliveryState = PublishState | DeliverState | TransferState | Transfer010State
