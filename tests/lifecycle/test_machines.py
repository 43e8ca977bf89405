"""The transition tables: complete, consistent, and every (state, event) pair walked without an exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.lifecycle.machines import (
    DELIVER,
    EFFECTS,
    ENDPOINT,
    MACHINES,
    PUBLISH,
    REQUEST,
    TERMINAL_EFFECTS,
    TRANSFER,
    TRANSFER_0_10,
    Transition,
)
from amqplens.lifecycle.records import Delivery

DELIVERY_MACHINES = (PUBLISH, DELIVER, TRANSFER, TRANSFER_0_10, REQUEST)


def _pairs(machine):
    return [(s, e) for s in machine.states for e in machine.events]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_state_event_pair_is_in_the_table(machine):
    assert set(machine.table) == set(_pairs(machine))


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_transition_is_well_formed(machine):
    for (state, event), t in machine.table.items():
        assert isinstance(t, Transition)
        assert t.effect in EFFECTS, (state, event, t)
        assert t.next_state in machine.states or t.next_state in machine.outcomes, (state, event, t)
        if t.effect == "noop":
            # a no-op either stays put or moves to a state (never ends a delivery)
            assert t.next_state in machine.states, (state, event, t)
        if machine in DELIVERY_MACHINES:
            # a delivery ends exactly when its effect says so
            assert (t.effect in TERMINAL_EFFECTS) == (t.next_state in machine.outcomes), (state, event, t)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_flagged_no_ops_are_named_after_their_event_or_documented(machine):
    """Pairs that cannot happen in a correct conversation are flagged no-ops; their flag says why."""
    for (state, event), t in machine.table.items():
        if t.flag is not None:
            assert t.flag.replace("_", "").isalnum()


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_state_is_reachable_from_the_first(machine):
    seen, todo = {machine.states[0]}, [machine.states[0]]
    while todo:
        s = todo.pop()
        for e in machine.events:
            n = machine.step(s, e).next_state
            if n in machine.states and n not in seen:
                seen.add(n)
                todo.append(n)
    assert seen == set(machine.states)


@pytest.mark.parametrize("machine", DELIVERY_MACHINES, ids=lambda m: m.name)
def test_every_outcome_is_reachable(machine):
    reached = {t.next_state for t in machine.table.values()}
    assert machine.outcomes <= reached


def test_unknown_states_and_events_are_flagged_no_ops():
    for machine in MACHINES:
        t = machine.step("no-such-state", "no-such-event")
        assert t == Transition("noop", "no-such-state", "unexpected_no-such-event")


def _fresh(state: str) -> Delivery:
    rec = Delivery("d", "c", "0-9-1", "to_broker", 1, "publish", "f0", 100)
    rec.state = state
    return rec


@pytest.mark.parametrize("machine", DELIVERY_MACHINES, ids=lambda m: m.name)
def test_every_pair_applied_to_a_delivery_does_what_the_table_says(machine):
    """Exhaustive: a delivery in each state receives each event."""
    for state, event in _pairs(machine):
        rec = _fresh(state)
        ended = rec.step(machine, event, "f1", 200)
        t = machine.table[(state, event)]
        assert ended == (t.next_state in machine.outcomes) == (rec.outcome is not None)
        if ended:
            assert rec.row()["outcome"] == t.next_state
        else:
            assert rec.state == t.next_state
        if t.flag:
            assert t.flag in rec.flags


@pytest.mark.parametrize("machine", DELIVERY_MACHINES, ids=lambda m: m.name)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_walks_from_any_pair_never_raise_and_never_reopen(machine, data):
    state, event = data.draw(st.sampled_from(_pairs(machine)))
    rec = _fresh(state)
    rec.step(machine, event, "f1", 200)
    for e in data.draw(st.lists(st.sampled_from(machine.events), max_size=12)):
        before = rec.outcome
        rec.step(machine, e, "f2", 300)
        if before is not None:
            assert rec.outcome == before  # an ended delivery never changes
    row = rec.row()
    assert row["outcome"] is None or row["outcome"] in machine.outcomes
    assert row["flags"] is None or all(isinstance(f, str) for f in row["flags"])


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.sampled_from(ENDPOINT.events), max_size=30))
def test_endpoint_walks_never_leave_its_states(events):
    state = "unseen"
    for e in events:
        t = ENDPOINT.step(state, e)
        assert t.next_state in ENDPOINT.states
        state = t.next_state


def test_settlement_effects_record_the_right_frame():
    rec = Delivery("d", "c", "0-9-1", "from_broker", 1, "deliver", "deliver-frame", 100)
    rec.step(DELIVER, "deliver_auto_ack", "deliver-frame", 100)
    assert (rec.outcome, rec.settled_by_frame_id, rec.settled_ts_us) == ("auto_ack", "deliver-frame", 100)

    rec = Delivery("d", "c", "0-9-1", "from_broker", 1, "deliver", "deliver-frame", 100)
    rec.step(DELIVER, "deliver_manual", "deliver-frame", 100)
    rec.step(DELIVER, "tx_ack", "ack-frame", 150)
    assert rec.outcome is None and rec.state == "tx_ack"
    rec.step(DELIVER, "tx_rollback", "rollback-ok", 160)
    assert rec.state == "unacked" and rec.flags == ["settle_rolled_back"] and rec.settled_by_frame_id is None
    rec.step(DELIVER, "tx_ack", "ack-frame-2", 170)
    rec.step(DELIVER, "tx_commit", "commit-ok", 180)
    assert (rec.outcome, rec.settled_by_frame_id, rec.settled_ts_us) == ("acked", "commit-ok", 180)

    rec = Delivery("p", "c", "0-9-1", "to_broker", 1, "publish", "publish-frame", 100)
    rec.step(PUBLISH, "publish_confirm", "publish-frame", 100)
    rec.step(PUBLISH, "basic_return", "return-frame", 120)
    rec.step(PUBLISH, "broker_ack", "ack-frame", 130)
    assert (rec.outcome, rec.settled_by_frame_id, rec.settled_ts_us) == ("returned", "return-frame", 120)
    assert rec.row()["settle_latency_us"] == 20

    rec = Delivery("t", "c", "1.0", "to_broker", 0, "transfer", "t-frame", 100)
    rec.step(TRANSFER, "transfer", "t-frame", 100)
    rec.step(TRANSFER, "state_accepted", "disp-1", 110)  # rcv-settle-mode second: state first
    assert rec.outcome is None and rec.state == "stated_accepted"
    rec.step(TRANSFER, "settle_none", "disp-2", 120)
    assert (rec.outcome, rec.settled_by_frame_id) == ("accepted", "disp-2")


def test_a_machine_is_refused_an_outcome_the_contract_lacks_or_a_transition_to_nowhere():
    """Bad tables fail when the module is imported, before any capture: an outcome deliveries.outcome does not
    list (amqplens.contracts.values.OUTCOMES), a next_state that is neither a state nor an outcome."""
    from amqplens.lifecycle.machines import _delivery_machine

    with pytest.raises(ValueError, match="not in the contracts"):
        _delivery_machine("m", ("new",), ("go",), ("gone_fishing",), {("new", "go"): Transition("settle", "gone_fishing")})
    with pytest.raises(ValueError, match="neither a state nor an outcome"):
        _delivery_machine("m", ("new",), ("go",), ("acked",), {("new", "go"): Transition("settle", "ackd")})
    assert _delivery_machine("m", ("new",), ("go",), ("acked",), {("new", "go"): Transition("settle", "acked")}).outcomes == {"acked"}
