"""amqplens/explore.py on the demo lake, against what tshark and the real clients of the demo capture report.

tests/data/demo/demo.oracle.json holds the counts each client of the demo scenarios
saw (published, confirmed, acked, ...) while RabbitMQ 3.10 was being captured.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from amqplens import explore
from tests.conftest import DATA
from tests.oracles.tshark import tshark_conversations
from tests.ops.conftest import DEMO

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

SCENARIOS = json.loads((DATA / "demo" / "demo.oracle.json").read_text())["scenarios"]
AMQP10 = "amqp10_proton"


def _client_total(key: str, dialect: str = "0-9-1") -> int:
    return sum(s["client"].get(key, 0) for name, s in SCENARIOS.items() if (name == AMQP10) == (dialect == "1.0"))


def _messages(settlement: pd.DataFrame, dialect: str, direction: str, *outcomes: str) -> int:
    s = settlement[(settlement.dialect == dialect) & (settlement.direction == direction) & settlement.outcome.isin(outcomes)]
    return int(s.messages.sum())


def test_connections_are_tsharks_conversations(demo_lake):
    summary = explore.connection_summary(str(demo_lake))
    convs = [c for c in tshark_conversations(DEMO) if 5672 in (c["port_a"], c["port_b"])]
    assert len(summary) == len(convs) > 0
    assert sorted(summary.client) == sorted(f"{c['address_a']}:{c['port_a']}" for c in convs)
    assert summary.start_ts.is_monotonic_increasing
    assert explore.end_reasons(str(demo_lake)).connections.sum() == len(convs)


def test_a_connections_life_follows_the_0_9_1_handshake(demo_lake):
    summary = explore.connection_summary(str(demo_lake))
    opens = []
    for cid in summary[summary.dialect == "0-9-1"].connection_id:
        events = explore.connection_events(str(demo_lake), cid)
        # The order the 0-9-1 spec's connection class prescribes.
        assert list(events.what[:7]) == ["protocol_header", "connection.start", "connection.start-ok", "connection.tune",
                                         "connection.tune-ok", "connection.open", "connection.open-ok"], cid
        ts = events.set_index("what").ts
        opens.append((ts["connection.open-ok"] - ts["connection.open"]).total_seconds() * 1000)
    latency = explore.latency_table(str(demo_lake))
    row = latency[(latency.metric == "request_response") & (latency.method == "connection.open")].iloc[0]
    assert row["count"] == len(opens)
    assert row["max_ms"] == pytest.approx(max(opens), abs=1e-3)


def test_latency_counts_are_the_clients_counts(demo_lake):
    latency = explore.latency_table(str(demo_lake))
    count = latency.groupby(["metric", "dialect", "method"])["count"].sum()
    assert count["publish_confirm", "0-9-1", "publish"] == _client_total("confirmed")
    assert count["deliver_settle", "0-9-1", "deliver"] == _client_total("delivered")
    assert count["transfer_settle", "1.0", "transfer"] == _client_total("delivered", "1.0") + _client_total("published", "1.0")
    assert (latency.p50_ms <= latency.p99_ms).all() and (latency.p99_ms <= latency.max_ms).all()
    samples = explore.latency_samples(str(demo_lake))
    assert (samples.ms >= 0).all()
    assert (samples.what == "0-9-1 publish to_broker").sum() >= _client_total("confirmed")


def test_settlement_outcomes_are_the_clients_counts(demo_lake):
    s = explore.settlement_table(str(demo_lake))
    assert _messages(s, "0-9-1", "from_broker", "acked") == _client_total("acked")
    assert _messages(s, "0-9-1", "from_broker", "nacked_requeue", "nacked_drop") == _client_total("nacked")
    assert _messages(s, "0-9-1", "from_broker", "rejected_requeue", "rejected_drop") == _client_total("rejected")
    assert _messages(s, "0-9-1", "to_broker", "committed") == _client_total("committed")
    assert _messages(s, "0-9-1", "to_broker", "rolled_back") == _client_total("rolled_back")
    for outcome in ("accepted", "rejected", "released"):  # what the Proton receiver settled with
        assert _messages(s, "1.0", "from_broker", outcome) == SCENARIOS[AMQP10]["client"][outcome], outcome
    assert _messages(s, "1.0", "to_broker", "accepted") == SCENARIOS[AMQP10]["client"]["accepted_by_broker"]
    assert s.groupby(["dialect", "direction"]).share.sum().round(9).eq(1).all()


def test_flow_control_matches_the_scenarios(demo_lake):
    flights = explore.in_flight(str(demo_lake))
    limited = flights[flights.prefetch_count > 0]
    assert limited.channel_key.nunique() == 1  # consume_prefetch_ack is the one consumer with basic.qos
    assert limited.in_flight.max() == SCENARIOS["consume_prefetch_ack"]["facts"]["delivered_before_first_ack"]
    assert (flights.in_flight >= 0).all()
    blocked = explore.blocked_intervals(str(demo_lake))
    facts = SCENARIOS["connection_blocked"]["facts"]
    assert facts["blocked"] and facts["unblocked"]
    assert len(blocked) >= 1 and blocked.unblocked.all() and (blocked.duration_s > 0).all()
    credit = explore.link_credit(str(demo_lake))
    assert len(credit) > 0 and (credit.link_credit >= 0).all()


def test_figures_have_data(demo_lake):
    lake = str(demo_lake)
    figures = [
        explore.connection_timeline(explore.connection_summary(lake)),
        explore.latency_cdf(explore.latency_samples(lake)),
        explore.step_figure(explore.in_flight(lake), "channel_key", "in_flight", "in flight", limit="prefetch_count"),
        explore.step_figure(explore.link_credit(lake), "link_key", "link_credit", "credit"),
    ]
    for fig in figures:
        assert len(fig.axes[0].lines) > 0
    assert len(explore.outcome_figure(explore.settlement_table(lake)).axes[0].patches) > 0


def test_an_absent_table_reads_as_empty_with_its_columns(tmp_path):
    """A lake a stage has not reached yet (here: nothing at all) gives empty frames, not errors."""
    assert explore.connection_summary(str(tmp_path)).empty
    assert explore.settlement_table(str(tmp_path)).empty
    assert explore.blocked_intervals(str(tmp_path)).empty
    assert list(explore.read(str(tmp_path), "frames").columns)[:2] == ["frame_id", "connection_id"]
