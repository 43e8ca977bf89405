"""AMQP 1.0 connections from arrays (amqplens/lifecycle/array10.py) give the rows ``Connection10`` gives.

The fused lifecycle with the array path on and off (``arrays``), every deliveries, flow_events and
request_responses row compared (the order rows leave in may differ), on: every capture fixture with 1.0
connections; generated 1.0 loads (``tools.gen_load10``: thousands of short connections, long ones with messages
over several transfers, releases, rejections); every hand-made conversation of ``test_amqp10.py`` (windows and
credit past 2^31, drains, stated-then-settled deliveries, aborted and unknown dispositions, sessions and links
adopted without their begin or attach, deliveries unsettled at detach, end, close and the capture's end); and
1.0 frame tables mutated at random: delivery-ids, handles, channels, dispositions' ranges, roles, states and
settled flags changed; transfers' ``more`` set or cleared, aborts set; performatives swapped; begins' remote
channel changed or made unreadable; link names and addresses emptied; frames repeated, removed, moved back in
time or given one time over long runs; directions flipped; a close put in the middle. Not vacuous: the
connections the pass takes are counted.
"""

from __future__ import annotations

import inspect
import random

import pyarrow.compute as pc
import pytest

from amqplens.lifecycle import array10
from amqplens.lifecycle.fused import _SORT
from amqplens.lifecycle.runner import LifecycleOptions
from tests.lifecycle import test_amqp10
from tests.lifecycle.captures import DATA, frames_of
from tests.lifecycle.test_fold import CAPTURES, _rows, _table

FIXTURES_10 = [p for p in CAPTURES if any(r.get("dialect") == "1.0" for r in frames_of(p))]


def _taken(table) -> tuple[int, int]:
    """(1.0 connections the pass takes, 1.0 connections) of a frame table."""
    table = table.take(pc.sort_indices(table, options=_SORT))
    done = array10.lifecycle(table, 64)
    conns = table.column("connection_id").to_numpy(zero_copy_only=False)
    ours = pc.equal(table.column("dialect"), "1.0").to_numpy(zero_copy_only=False)
    return len(set(conns[done.taken])), len(set(conns[ours.astype(bool)]))


def _same(rows: list[dict], options: LifecycleOptions = LifecycleOptions()) -> tuple[int, int]:
    table = _table(rows)
    assert _rows(table, False, options=options) == _rows(table, False, arrays=False, options=options)
    return _taken(table)


def test_the_fixtures_have_1_0_connections():
    assert {p.name for p in FIXTURES_10} >= {"amqp10_credit_starved.pcap", "amqp10_modified.pcap", "amqp10_proton.pcap",
                                             "amqp10_rich.pcap", "amqpanalyze_amqp10_boolean_types.pcapng"}


@pytest.mark.parametrize("path", FIXTURES_10, ids=lambda p: str(p.relative_to(DATA)))
def test_every_1_0_fixture_gives_the_machines_rows(path):
    taken, total = _same(frames_of(path))
    # every 1.0 connection of the real-broker and public fixtures is one the pass models
    assert taken == total, (taken, total)


def test_generated_loads_give_the_machines_rows(tmp_path):
    from tools.gen_load10 import generate_load10

    for seed in (0, 1):
        path = tmp_path / f"load10-{seed}.pcap"
        truth = generate_load10(path, 1.5, seed=seed, sidecar=False)
        rows = frames_of(path)
        assert any(r.get("more") for r in rows)  # messages over several transfers
        taken, total = _same(rows)
        assert taken == total and total >= 20, (taken, total, truth)


def _conversation_tests():
    for name, fn in inspect.getmembers(test_amqp10, inspect.isfunction):
        if not name.startswith("test_") or name == "test_serial_numbers_wrap":
            continue
        marks = getattr(fn, "pytestmark", [])
        params = [m for m in marks if m.name == "parametrize"]
        if params:
            argname, values = params[0].args
            for v in values:
                yield pytest.param(fn, {argname: v}, id=f"{name}[{v}]")
        else:
            yield pytest.param(fn, {}, id=name)


@pytest.mark.parametrize("fn,kwargs", list(_conversation_tests()))
def test_every_hand_made_conversation_gives_the_machines_rows(fn, kwargs, monkeypatch):
    """Each conversation of test_amqp10.py, where it runs the machine, runs the array path too and must agree."""
    seen = []
    machine_run = test_amqp10.run

    def both(*conversations, **options):
        rows = [r for c in conversations for r in c.rows]
        seen.append(_same(rows, LifecycleOptions(**options)))
        return machine_run(*conversations, **options)

    monkeypatch.setattr(test_amqp10, "run", both)
    fn(**kwargs)
    assert seen


def test_the_conversations_the_pass_takes(monkeypatch):
    """Not vacuous: most hand-made conversations are taken; adopted sessions and aborts are the machine's."""
    machine_run = test_amqp10.run
    taken = {}
    for param in _conversation_tests():
        fn, kwargs = param.values
        seen = []

        def count(*conversations, **options):
            seen.append(_taken(_table([r for c in conversations for r in c.rows])))
            return machine_run(*conversations, **options)

        monkeypatch.setattr(test_amqp10, "run", count)
        fn(**kwargs)
        taken[param.id] = all(t == n for t, n in seen)
    assert not taken["test_frames_without_begin_or_attach_adopt_a_session_and_link"]
    assert not taken["test_aborted_and_unknown_dispositions"]
    assert taken["test_dispositions_settle_ranges_and_presettled_transfers_settle_on_send"]
    assert taken["test_a_multi_frame_transfer_is_one_delivery_listing_all_its_frames"]
    assert sum(taken.values()) >= len(taken) - 6, taken


def _mutate(rows: list[dict], rng: random.Random) -> list[dict]:
    rows = [dict(r) for r in rows]
    for _ in range(rng.randint(1, 5)):
        n = len(rows)
        if not n:
            break
        i = rng.randrange(n)
        kind = rng.randrange(14)
        some = rng.sample(range(n), min(n, rng.choice((1, 3, 8))))
        if kind == 0:  # delivery-ids, handles, channels changed
            for k in some:
                field = rng.choice(("delivery_id", "handle", "channel"))
                if rows[k].get(field) is not None:
                    top = 70_000 if field == "channel" else (1 << 32) - 1  # (channels past a ushort too)
                    rows[k][field] = rng.choice((rows[k][field] + 1, rows[k][field] - 1, 0, top, None))
        elif kind == 1:  # dispositions' ranges, roles, states, settled flags
            for k in some:
                r = rows[k]
                if r.get("performative") == "disposition":
                    field = rng.choice(("first", "last", "role", "state", "settled"))
                    r[field] = rng.choice({"first": (None, 0, 1, 5, (1 << 32) - 1), "last": (None, 0, 2, 1 << 31),
                                           "role": (None, "sender", "receiver"), "settled": (None, True, False),
                                           "state": (None, "accepted", "received", "released", "modified")}[field])
        elif kind == 2:  # more set or cleared, aborted set
            for k in some:
                if rows[k].get("performative") == "transfer":
                    rows[k][rng.choice(("more", "more", "aborted"))] = rng.random() < 0.5
        elif kind == 3:  # performatives swapped
            for k in some:
                rows[k]["performative"] = rng.choice(("begin", "attach", "flow", "transfer", "disposition", "detach",
                                                      "end", "close", "open", None, "sasl-init"))
        elif kind == 4:  # a begin's remote channel changed or unreadable
            for k in some:
                if rows[k].get("performative") == "begin":
                    rows[k]["arguments_json"] = rng.choice(('{"remote_channel": 9}', '{"remote_channel": "x"}', "{bad",
                                                            '{"remote_channel": -1}', "{}"))
        elif kind == 5:  # link names and addresses emptied or changed
            for k in some:
                if rows[k].get("performative") == "attach":
                    rows[k][rng.choice(("link_name", "source_address", "target_address"))] = rng.choice(("", None, "other"))
        elif kind == 6:  # a frame repeated
            rows.insert(i, dict(rows[i]))
        elif kind == 7:  # frames removed
            rows = [r for r in rows if rng.random() > 0.05]
        elif kind == 8:  # times moved back
            for k in some:
                rows[k]["ts_us"] = (rows[k]["ts_us"] or 0) - rng.choice((1, 10, 10_000))
        elif kind == 9:  # one time over a long run
            for r in rows[i:i + rng.choice((5, 70, 200))]:
                r["ts_us"] = rows[i]["ts_us"]
        elif kind == 10:  # directions flipped
            for k in some[:2]:
                rows[k]["direction"] = "to_client" if rows[k]["direction"] == "to_server" else "to_server"
        elif kind == 11:  # a close in the middle
            r = dict(rows[i], performative="close", error_condition=rng.choice((None, "amqp:internal-error")))
            r["stream_offset"] = (r["stream_offset"] or 0) + 500_000
            rows.append(r)
        elif kind == 12:  # credit, delivery counts and windows changed
            for k in some:
                field = rng.choice(("link_credit", "delivery_count", "incoming_window", "next_incoming_id",
                                    "next_outgoing_id", "outgoing_window", "drain"))
                rows[k][field] = rng.choice((None, True, False) if field == "drain" else (None, 0, 1, 7, 1 << 31, (1 << 32) - 1))
        else:  # message numbers changed
            for k in some:
                if rows[k].get("message_seq") is not None:
                    rows[k]["message_seq"] = rng.choice((rows[k]["message_seq"] - 1, 0, None))
    return rows


@pytest.mark.parametrize("seed", range(16))
def test_mutated_1_0_frames_give_the_machines_rows(seed):
    rng = random.Random(seed)
    for path in rng.sample(FIXTURES_10, min(3, len(FIXTURES_10))):
        _same(_mutate([r for r in frames_of(path) if r.get("dialect") == "1.0"], rng))


def test_mutations_leave_some_connections_to_the_pass():
    """Not vacuous: mutated connections are still taken often (the comparison above is not only of untaken ones)."""
    rng = random.Random(99)
    taken = total = 0
    rows = [r for r in frames_of(DATA / "public" / "amqpanalyze_amqp10_boolean_types.pcapng")]
    for _ in range(10):
        t, n = _taken(_table(_mutate(rows, rng)))
        taken, total = taken + t, total + n
    assert total and 0.2 < taken / total < 1.0, (taken, total)


def test_a_disposition_past_every_id_outstanding_and_one_of_unknown_ids():
    """A range far larger than what is outstanding settles each delivery in it (the pass walks the links then), a
    range of ids never sent is a flagged session row: both as the machine has them."""
    c = test_amqp10.Conversation("1.0")
    test_amqp10._link(c, snd="unsettled")
    test_amqp10._grant(c, 100)
    for i in range(6):
        c.transfer(test_amqp10.CLIENT, test_amqp10.CLIENT_CH, 0, ((1 << 32) - 3 + i) % (1 << 32))  # ids wrap
    c.perf(test_amqp10.SERVER, test_amqp10.SERVER_CH, "disposition", role="receiver", first=(1 << 32) - 2, last=1_000_000,
           settled=True, state="accepted")
    c.perf(test_amqp10.SERVER, test_amqp10.SERVER_CH, "disposition", role="receiver", first=500, last=600, settled=True,
           state="rejected")
    c.perf(test_amqp10.SERVER, test_amqp10.SERVER_CH, "disposition", role="receiver", first=(1 << 32) - 3, settled=True,
           state="released")
    rows = c.rows
    assert _same(rows) == (1, 1)
    out = _rows(_table(rows), False)
    assert sorted(d["outcome"] for d in out["delivery"]) == ["accepted"] * 5 + ["released"]
    assert [f["reason"] for f in out["flow_event"] if f["reason"]] == ["disposition_of_unknown_id"]


def test_without_numba_every_connection_is_the_machines(monkeypatch):
    monkeypatch.setattr(array10, "kernels10", lambda: None)
    table = _table(frames_of(DATA / "broker" / "amqp10_proton.pcap"))
    assert not array10.lifecycle(table.take(pc.sort_indices(table, options=_SORT)), 64).taken.any()


def test_a_message_without_sections_json_has_null_properties():
    """A transfer whose message has no properties_json (the codec gave none): its row's properties are null, as the
    machine has them (found by the install step's sample: the first version's Arrow take of a null code raised)."""
    c = test_amqp10.Conversation("1.0")
    test_amqp10._link(c)
    test_amqp10._grant(c, 10)
    c.transfer(test_amqp10.CLIENT, test_amqp10.CLIENT_CH, 0, 0)["properties_json"] = None
    c.transfer(test_amqp10.CLIENT, test_amqp10.CLIENT_CH, 0, 1)
    assert _same(c.rows) == (1, 1)
    rows = sorted(_rows(_table(c.rows), False)["delivery"], key=lambda d: d["transfer_id"])
    assert [d["message_id"] for d in rows] == [None, "m1"]


def test_the_install_steps_sample_is_taken():
    assert array10.warm() >= 0
