"""RabbitMQ server logs into events: the real 3.10 logs of the fixture runs, every generation's format, bad lines.

Oracles: what the pika client saw (the oracle JSON next to each fixture: the
reply code and text the broker sent on the wire, the port of the connection it
dropped), and for the hand-made 3.6 / 3.7 samples the values read off their
lines by hand (tests/data/logs/README.md says where their format comes from).
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from amqplens.logs import rabbitmq
from tests.conftest import DATA
from tests.logs.helpers import of_kind, records

LOGS = DATA / "logs"
BROKER = DATA / "broker"


def _events(path, **kw):
    return of_kind(records(path, **kw), "event")


def _by(events, name):
    return [e for e in events if e["event"] == name]


def _us(text: str) -> int:
    t = dt.datetime.fromisoformat(text)
    return int(t.replace(tzinfo=t.tzinfo or dt.timezone.utc).timestamp() * 1_000_000)


def test_real_3_10_log_has_the_client_s_channel_error_abrupt_close_and_both_alarms():
    oracle = json.loads((LOGS / "broker_logs.oracle.json").read_text())
    recs = records(LOGS / "rabbitmq_3_10.log")
    assert of_kind(recs, "error") == []
    events = of_kind(recs, "event")
    (err,) = _by(events, "channel_error")
    code, text = oracle["facts"]["channel_close"]
    assert (err["reply_code"], err["reply_text"]) == (code, text)  # what the client received on the wire
    assert err["method"] == "queue.declare" and err["user"] == "guest" and err["vhost"] == "/"
    (abrupt,) = _by(events, "connection_closed_abruptly")
    assert abrupt["client_port"] == oracle["facts"]["abrupt_client_port"]
    assert abrupt["client_provided_name"] == "fixture-broker_logs-abrupt" and abrupt["line_count"] == 2
    for resource in ("memory", "disk"):
        (on,) = [e for e in _by(events, "alarm_set") if e["alarm_resource"] == resource]
        (off,) = [e for e in _by(events, "alarm_cleared") if e["alarm_resource"] == resource]
        assert on["ts_us"] < off["ts_us"] and on["node"] == off["node"] == "fixtures@localhost"
        assert on["line_count"] == 6 and "Publishers will be blocked until this alarm clears" in on["message"]
    assert oracle["client"]["memory_alarms"] == oracle["client"]["disk_alarms"] == 1


def test_fixture_run_log_names_the_four_channel_errors_pika_received_in_order():
    oracle = json.loads((BROKER / "channel_error.oracle.json").read_text())
    events = _events(BROKER / "rabbitmq.log")
    named = {e["erlang_pid"]: e["client_provided_name"] for e in _by(events, "connection_named")}
    pid = next(p for p, n in named.items() if n == "fixture-channel_error")  # the scenario's own run (the demo repeats it)
    errors = [e for e in _by(events, "channel_error") if e["erlang_pid"] == pid]
    assert [[e["reply_code"], e["reply_text"]] for e in errors] == oracle["facts"]["channel_close"]
    forced = json.loads((BROKER / "connection_forced.oracle.json").read_text())["facts"]["connection_close"]
    assert [forced[0], forced[1]] in [[e["reply_code"], e["reply_text"]] for e in _by(events, "connection_error")]
    assert len(_by(events, "node_start")) == len(_by(events, "node_stop")) == 1


@pytest.mark.parametrize("name", ["rabbitmq_3_10_json.log", "rabbitmq_3_10_lc4.log"])
def test_json_and_four_letter_level_formats_from_a_real_3_10_node(name):
    oracle = json.loads((LOGS / "broker_logs.oracle.json").read_text())["formatted_logs"][name]
    recs = records(LOGS / name)
    assert of_kind(recs, "error") == []
    events = of_kind(recs, "event")
    assert {e["log_format"] for e in events} == {"rabbitmq-json" if "json" in name else "rabbitmq-3.9"}
    (err,) = _by(events, "channel_error")
    assert [err["reply_code"], err["reply_text"]] == oracle["channel_close"]
    assert err["level"] == "error"
    (abrupt,) = _by(events, "connection_closed_abruptly")
    assert abrupt["client_port"] == oracle["abrupt_client_port"] and abrupt["level"] == "warning"


def test_pre_3_7_report_blocks_hand_made_sample():
    events = _events(LOGS / "rabbitmq_3_6.log")
    assert [e["event"] for e in events] == [
        "node_start", "connection_accepted", "connection_authenticated", "channel_error", "alarm_set",
        "alarm_cleared", "connection_closed_abruptly", "connection_accepted", "connection_closed", "node_stop"]
    err = events[3]
    assert (err["reply_code"], err["reply_text"], err["method"], err["channel"], err["level"]) == (
        404, "NOT_FOUND - no queue 'missing' in vhost '/'", "queue.declare", 1, "error")
    assert err["ts_us"] == _us("2017-03-12T10:00:06") and err["line_number"] == 13 and err["line_count"] == 4  # with its blank line
    assert (events[4]["alarm_resource"], events[4]["node"], events[4]["line_number"]) == ("memory", "rabbit@host", 20)
    assert events[6]["client_port"] == 50320 and events[6]["level"] == "warning"


def test_3_7_lager_lines_with_unprefixed_continuations_hand_made_sample():
    events = _events(LOGS / "rabbitmq_3_7.log")
    assert [e["event"] for e in events] == [
        "node_start", "connection_accepted", "connection_authenticated", "channel_error", "alarm_set", "alarm_cleared",
        "connection_closed_abruptly", "node_stop"]
    assert events[0]["line_count"] == 4 and "rabbitmq_management_agent" in events[0]["message"]
    err = events[3]
    assert (err["reply_code"], err["erlang_pid"], err["ts_us"]) == (404, "<0.612.0>", _us("2019-01-01T10:00:06.002"))
    assert events[4]["line_count"] == 5 and events[6]["user"] == "guest"


def test_multi_line_entries_are_whole_across_any_split_boundary():
    whole = _events(BROKER / "rabbitmq.log")
    for size in (97, 1000, 4096):
        assert _events(BROKER / "rabbitmq.log", split_size=size) == whole
    for name in ("rabbitmq_3_6.log", "rabbitmq_3_7.log"):
        assert _events(LOGS / name, split_size=53) == _events(LOGS / name)


def test_bad_lines_become_error_rows_with_their_line_numbers_and_lose_nothing_else(tmp_path):
    good = (LOGS / "rabbitmq_3_10.log").read_bytes().splitlines(keepends=True)
    bad = [
        b"this line is no log line at all\n",  # unknown format
        b"2026-11-22 02:44:5\n",  # a time stamp cut short
        b"2026-11-22 02:44:53.600000+00:00 [error] <0.1.0> caf\xe9 is not UTF-8\n",  # wrong encoding
    ]
    lines = good[:5] + bad + good[5:]
    path = tmp_path / "broken.log"
    path.write_bytes(b"".join(lines))
    recs = records(path, split_size=300)
    errors = of_kind(recs, "error")
    assert [(e["line_number"], e["reason"]) for e in errors] == [
        (6, "unknown_format"), (7, "truncated_line"), (8, "bad_encoding")]
    assert errors[0]["raw"] == bad[0].rstrip(b"\n") and "line 6" in errors[0]["detail"]
    assert errors[2]["offset"] == sum(len(x) for x in lines[:7])
    events = of_kind(recs, "event")
    (latin1,) = [e for e in events if e["line_number"] == 8]  # the bad bytes are replaced, the entry is kept
    assert latin1["event"] == "other" and "\ufffd is not UTF-8" in latin1["message"]
    shifted = [(e["event"], e["line_number"] - 3 * (e["line_number"] > 5)) for e in events if e is not latin1]
    assert shifted == [(e["event"], e["line_number"]) for e in _events(LOGS / "rabbitmq_3_10.log")]


def test_levels_in_four_letters_are_spelled_out():
    assert [rabbitmq._level(w) for w in ("warn", "erro", "noti", "crit", "info", "warning")] == [
        "warning", "error", "notice", "critical", "info", "warning"]


def test_log_times_outside_1990_2100_are_ts_out_of_range_rows_and_lose_nothing_else(tmp_path):
    """Tried: four 3.10 lines' years rewritten to 0001, 1970, 2150 and 9999 (each still a valid ISO time), and a
    3.6 report header dated 1969 before the 3.6 sample: each is one row, every other entry is read as before."""
    good = (LOGS / "rabbitmq_3_10.log").read_bytes().splitlines(keepends=True)
    years = (b"0001", b"1970", b"2150", b"9999")
    bad = [years[i] + good[5 + i][4:] for i in range(len(years))]
    lines = good[:5] + bad + good[5 + len(years):]
    path = tmp_path / "far.log"
    path.write_bytes(b"".join(lines))
    errors = of_kind(records(path, split_size=300), "error")
    assert [(e["line_number"], e["reason"]) for e in errors] == [(6 + i, "ts_out_of_range") for i in range(len(years))]
    assert "outside 1990-01-01 .. 2100-01-01" in errors[0]["detail"]
    events = of_kind(records(path), "event")
    assert [e["line_number"] for e in events] == [e["line_number"] for e in _events(LOGS / "rabbitmq_3_10.log")
                                                  if not 6 <= e["line_number"] < 6 + len(years)]

    old = tmp_path / "old36.log"
    old.write_bytes(b"=INFO REPORT==== 31-Dec-1969::23:59:59 ===\naccepting AMQP connection <0.1.0> (a -> b)\n\n"
                    + (LOGS / "rabbitmq_3_6.log").read_bytes())
    first = of_kind(records(old), "error")
    assert [(e["line_number"], e["reason"]) for e in first] == [(1, "ts_out_of_range")]
    assert len(_events(old)) == len(_events(LOGS / "rabbitmq_3_6.log"))
