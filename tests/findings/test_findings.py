"""The findings stage on real-broker captures whose scenarios caused each condition on purpose.

Every expected finding is written from what the scenario did: its ``*.oracle.json`` (what the client counted and
measured), tests/data/broker/README.md (the script) and the broker's own log; never from our output. Bad input
tried: a capture with a packet cut out (gaps: its findings say partial), a TLS capture without its key log.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from amqplens.contracts.findings import FINDINGS, KINDS, SEVERITIES
from tests.findings.conftest import BROKER

pytestmark = pytest.mark.spark

# the negative control, and two scenarios that did nothing wrong (publish_confirms: but for the one unroutable
# publish its script made on purpose)
CLEAN = ("clean_traffic", "heartbeat", "publish_confirms")


def oracle(name: str) -> dict:
    return json.loads((BROKER / f"{name}.oracle.json").read_text())


def found(findings_lake, scenario: str, kind: str | None = None) -> list[dict]:
    _, store, ids, _ = findings_lake
    rows = store.read_arrow("findings", FINDINGS.column_names, [ids[scenario]]).to_pylist()
    return [r for r in rows if kind is None or r["kind"] == kind]


def above_info(rows) -> list[tuple]:
    return sorted((r["kind"], r["summary"]) for r in rows if r["severity"] != "info")


def connection_names(findings_lake, scenario: str) -> dict[str, str]:
    """connection_id -> the client's connection name (its connection_name property: the scenario's own words)."""
    _, store, ids, _ = findings_lake
    rows = store.read_arrow("connections", ["connection_id", "client_properties_json"], [ids[scenario]]).to_pylist()
    return {r["connection_id"]: json.loads(r["client_properties_json"] or "{}").get("connection_name") for r in rows}


# ------------------------------------------------------------------ the table's own promises
def test_rows_keep_the_contract(findings_lake):
    _, store, ids, _ = findings_lake
    rows = store.read_arrow("findings", FINDINGS.column_names).to_pylist()
    assert rows, "the scenarios raise findings"
    assert len({r["finding_id"] for r in rows}) == len(rows)
    assert {r["kind"] for r in rows} <= set(KINDS) and {r["severity"] for r in rows} <= set(SEVERITIES)
    for r in rows:
        assert r["start_ts"] <= r["end_ts"], r
        assert r["entity_label"] and r["summary"].endswith("."), r
        assert r["evidence"].split(" ")[0] in ("flow_events", "metrics_flow", "metrics_errors", "metrics_latency",
                                               "deliveries", "connections", "decode_errors", "request_responses",
                                               "frames"), r


def test_a_rerun_writes_the_same_rows(spark, findings_lake):
    from amqplens.jobs import findings

    c, store, ids, _ = findings_lake
    some = [ids["channel_error"]]
    before = sorted(store.read_arrow("findings", FINDINGS.column_names, some).to_pylist(), key=lambda r: r["finding_id"])
    assert findings.run(spark, c, some) == []  # done: nothing to do
    assert findings.run(spark, c.with_overrides(findings__top_n=7), some) == []  # how many are listed: not a threshold
    # another threshold that changes none of these rows: the units are derived again, the rows are the same
    assert sorted(findings.run(spark, c.with_overrides(findings__churn_min_channels=25), some)) == sorted(some)
    after = sorted(store.read_arrow("findings", FINDINGS.column_names, some).to_pylist(), key=lambda r: r["finding_id"])
    assert after == before


# ------------------------------------------------------------------ clean traffic
@pytest.mark.parametrize("scenario", CLEAN)
def test_clean_scenarios_raise_nothing_above_info(findings_lake, scenario):
    expected = []
    if scenario == "publish_confirms":  # README: "one mandatory publish to an unroutable key (basic.return ...)"
        expected = ["returned_unroutable"]
    assert [k for k, _ in above_info(found(findings_lake, scenario))] == expected


# ------------------------------------------------------------------ flow control
def test_publisher_blocked_with_the_memory_alarm_of_the_broker_log(findings_lake):
    assert oracle("connection_blocked")["facts"]["blocked"] and oracle("connection_blocked")["facts"]["unblocked"]
    # the broker's own log: the alarm set and cleared around the block
    log = (BROKER / "rabbitmq.log").read_text()
    times = [dt.datetime.fromisoformat(m.group(1)) for m in
             re.finditer(r"^(\S+ \S+) \[\w+\] <[^>]+> memory resource limit alarm (?:set|cleared)", log, re.M)][:2]
    (f,) = found(findings_lake, "connection_blocked", "publisher_blocked")
    assert f["severity"] == "critical" and "memory alarm" in f["summary"] and "broker_events" in f["evidence"]
    assert abs((f["end_ts"] - f["start_ts"]) - (times[1] - times[0])) < dt.timedelta(milliseconds=200)
    assert f["start_ts"] >= times[0] and not f["partial"]
    assert above_info(found(findings_lake, "connection_blocked")) == [("publisher_blocked", f["summary"])]


def test_slow_consumer_and_its_slow_acks(findings_lake):
    facts = oracle("slow_consumer")["facts"]
    (f,) = found(findings_lake, "slow_consumer", "slow_consumer")
    assert f["entity_kind"] == "consumer" and f["entity"].endswith(facts["consumer_tag"])
    assert f"queue {facts['queue']}" in f["entity_label"]
    share = int(re.search(r"(\d+)% of", f["summary"]).group(1)) / 100
    assert abs(share - facts["at_prefetch_limit_share"]) < 0.1, f["summary"]  # the client measured 90%
    (slow,) = found(findings_lake, "slow_consumer", "slow_settle")
    assert slow["count"] == len(facts["late_tags"])  # tags 6, 14, 22; the 37 others took 0.10..0.51 s
    assert {k for k, _ in above_info(found(findings_lake, "slow_consumer"))} == {"slow_consumer", "slow_settle"}


def test_consume_prefetch_ack_held_its_first_deliveries(findings_lake):
    # tools/make_fixtures.py: the script takes the first 10 deliveries (prefetch 10) and holds them unacked while a
    # broker snapshot runs ("prefetch must hold the 11th back"), then acks the 40 quickly
    held = oracle("consume_prefetch_ack")["facts"]["delivered_before_first_ack"]
    assert len(found(findings_lake, "consume_prefetch_ack", "slow_consumer")) == 1
    (slow,) = found(findings_lake, "consume_prefetch_ack", "slow_settle")
    assert slow["count"] == held == 10


def test_a_receiver_link_without_credit_is_not_a_starved_sender(findings_lake):
    # amqp10_rich's receiver runs dry between its own grants of 1, 2, 2: the client's choice, not the broker starving it
    assert not found(findings_lake, "amqp10_rich", "credit_starved")


# ------------------------------------------------------------------ what happened to messages
def test_requeue_loop(findings_lake):
    facts = oracle("requeue_loop")["facts"]
    (f,) = found(findings_lake, "requeue_loop", "redelivery_loop")
    assert f["count"] == facts["requeues_of_poison"] == oracle("requeue_loop")["client"]["redelivered"]
    assert "requeue_loop-poison" in f["summary"] and f["entity"] == facts["queue"]
    assert [k for k, _ in above_info(found(findings_lake, "requeue_loop"))] == ["redelivery_loop"]


def test_nack_reject_redelivers_too_few_times_for_a_loop(findings_lake):
    client = oracle("nack_reject")["client"]
    assert client["redelivered"] < 3 and not found(findings_lake, "nack_reject", "redelivery_loop")
    dropped = found(findings_lake, "nack_reject", "rejected_by_consumer")
    assert sum(r["count"] for r in dropped) == client["dead_lettered"]
    assert {r["severity"] for r in dropped} == {"info"}


def test_publishes_nacked_by_the_broker(findings_lake):
    (f,) = found(findings_lake, "publish_nacked", "publish_nacked")
    assert f["severity"] == "critical" and f["count"] == oracle("publish_nacked")["client"]["broker_nacked"]
    assert "publish_nacked" in f["summary"]  # the routing key
    assert [k for k, _ in above_info(found(findings_lake, "publish_nacked"))] == ["publish_nacked"]


def test_returned_unroutable(findings_lake):
    facts = oracle("mandatory_return")
    (f,) = found(findings_lake, "mandatory_return", "returned_unroutable")
    assert f["count"] == facts["client"]["returned"]
    assert facts["facts"]["returns"][0][3] in f["summary"]  # nowhere-1
    (g,) = found(findings_lake, "publish_confirms", "returned_unroutable")
    assert g["count"] == 1


def test_unsettled_at_end(findings_lake):
    facts = oracle("unsettled_at_end")["facts"]
    names = connection_names(findings_lake, "unsettled_at_end")
    got = {(names[r["connection_id"]], r["count"]) for r in found(findings_lake, "unsettled_at_end", "unsettled_at_end")}
    assert got == {("fixture-unsettled_at_end-open", len(facts["open_unacked_tags_at_capture_end"])),
                   ("fixture-unsettled_at_end-publisher", 3),  # README: tags 6, 7, 8 never confirmed
                   ("fixture-unsettled_at_end-closed", len(facts["closed_unacked_tags_at_close"]))}
    assert {k for k, _ in above_info(found(findings_lake, "unsettled_at_end"))} == {"unsettled_at_end"}


# ------------------------------------------------------------------ how connections ended
def test_heartbeat_timeout(findings_lake):
    facts = oracle("heartbeat_timeout")["facts"]
    (f,) = found(findings_lake, "heartbeat_timeout", "heartbeat_timeout")
    assert f["severity"] == "critical" and "missed heartbeats from client" in f["summary"]
    assert f"(heartbeat {facts['negotiated_heartbeat_s']} s)" in f["summary"] and "from the client" in f["summary"]
    assert f["end_ts"].timestamp() == pytest.approx(facts["broker_logged_ts"], abs=1.0)
    assert {k for k, _ in above_info(found(findings_lake, "heartbeat_timeout"))} == {"heartbeat_timeout", "abrupt_end"}


def test_heartbeats_on_time_are_no_timeout(findings_lake):
    assert not found(findings_lake, "heartbeat", "heartbeat_timeout")


def test_refused_logins_and_vhosts(findings_lake):
    refused = oracle("refused_login")["facts"]["refused"]
    got = sorted(int(re.search(r"connection\.close (\d+)", r["summary"]).group(1))
                 for r in found(findings_lake, "refused_login", "access_refused"))
    assert got == sorted(r["reply_code"] for r in refused)  # 403, 530, 530
    names = connection_names(findings_lake, "refused_login")
    good = [cid for cid, n in names.items() if n == "fixture-refused_login-good"]
    assert good and not [r for r in above_info(found(findings_lake, "refused_login")) if r[0] != "access_refused"]
    assert not [r for r in found(findings_lake, "refused_login") if r["connection_id"] in good and r["severity"] != "info"]


def test_amqp10_refused_user_detaches_and_ends(findings_lake):
    facts = oracle("amqp10_rich")["facts"]
    (refused,) = found(findings_lake, "amqp10_rich", "access_refused")
    assert "amqp:unauthorized-access" in refused["summary"]
    raised = {("client", e["condition"]) for e in facts["local_errors"]}
    raised |= {("broker", e["condition"]) for e in facts["remote_errors"] if e["condition"] != "amqp:unauthorized-access"}
    got = {(re.match(r"The (\w+) closed", r["summary"]).group(1), r["summary"].rstrip(".").split(" with ")[-1])
           for r in found(findings_lake, "amqp10_rich", "link_error")}
    assert got == raised
    # the 1.0 dispositions: 1 rejected by the client (released is not a finding)
    (rej,) = found(findings_lake, "amqp10_rich", "rejected_by_consumer")
    assert rej["count"] == oracle("amqp10_rich")["client"]["rejected"]


def test_channel_errors_by_code(findings_lake):
    closes = oracle("channel_error")["facts"]["channel_close"]
    expected = {}
    for code, text in closes:
        expected[(code, text.split(" - ")[0])] = expected.get((code, text.split(" - ")[0]), 0) + 1
    got = {(int(m.group(1)), m.group(2)): r["count"] for r in found(findings_lake, "channel_error", "channel_error")
           for m in [re.search(r"with (\d+) (\w+)", r["summary"])]}
    assert got == expected  # 404 NOT_FOUND x2, 406 PRECONDITION_FAILED x2
    assert {r["severity"] for r in found(findings_lake, "channel_error", "channel_error")} == {"warning"}
    assert not found(findings_lake, "channel_error", "connection_error")


def test_connection_forced(findings_lake):
    code, text = oracle("connection_forced")["facts"]["connection_close"]
    (f,) = found(findings_lake, "connection_forced", "connection_error")
    assert f["severity"] == "critical" and f"{code} {text.split(' - ')[0]}" in f["summary"] and "broker" in f["summary"]


def test_consumers_cancelled_by_the_broker(findings_lake):
    cancels = oracle("consumer_cancelled")["facts"]["cancels"]
    got = found(findings_lake, "consumer_cancelled", "consumer_cancelled")
    assert sorted((r["channel"], r["entity"].split("/")[-1]) for r in got) == sorted(
        (int(ch), c["consumer_tag"]) for ch, c in cancels.items())
    for r in got:
        assert r["start_ts"].timestamp() == pytest.approx(cancels[str(r["channel"])]["ts"], abs=0.5)
    assert {k for k, _ in above_info(found(findings_lake, "consumer_cancelled"))} == {"consumer_cancelled"}


# ------------------------------------------------------------------ what the capture could not show
def test_connection_and_channel_churn(findings_lake):
    client = oracle("churn")["client"]
    names = connection_names(findings_lake, "churn")
    rows = found(findings_lake, "churn", "connection_churn")
    (conns,) = [r for r in rows if r["entity_kind"] == "client"]
    assert conns["count"] == client["short_connections"] and conns["connection_id"] is None
    (chans,) = [r for r in rows if r["entity_kind"] == "connection"]
    assert names[chans["connection_id"]] == "fixture-churn-main"
    assert chans["count"] == client["short_channels"] + 1  # and the channel it declared the queue on
    # pika closes its short channels with reply-code 0 "Normal shutdown": a normal close, no channel error
    assert [k for k, _ in above_info(found(findings_lake, "churn"))] == ["connection_churn", "connection_churn"]


def test_tls_not_decrypted(findings_lake):
    (f,) = found(findings_lake, "tls12", "tls_not_decrypted")
    assert f["severity"] == "info" and "no_key" in f["summary"]


def test_gaps_make_findings_partial(findings_lake):
    _, _, _, cut = findings_lake
    rows = found(findings_lake, "gap")
    (gap,) = [r for r in rows if r["kind"] == "capture_gaps"]
    assert gap["count"] == cut and gap["partial"]
    assert all(r["partial"] for r in rows) and len(rows) > 1
    assert not [r for s in ("mandatory_return", "connection_blocked") for r in found(findings_lake, s) if r["partial"]]


# ------------------------------------------------------------------ where people read them
@pytest.fixture(scope="module")
def report_page(spark, findings_lake, tmp_path_factory):
    from amqplens import report

    c, _, _, _ = findings_lake
    return report.run(spark, c.with_overrides(report__connection_pages=30), str(tmp_path_factory.mktemp("freport")))


def test_the_report_opens_with_the_findings_most_severe_first(findings_lake, report_page):
    text = report_page.read_text()
    assert text.index('<h2 id="findings">') < text.index("<h2>Connections with a page</h2>") < text.index("<figure")
    rows = re.findall(r'<tr class="finding (\w+)">(.*?)</tr>', text.split('<h2 id="findings">')[1].split("<h2>")[0], re.S)
    _, store, _, _ = findings_lake
    assert len(rows) == store.rows("findings", [r["capture_id"] for r in store.read_arrow("captures", ["capture_id"]).to_pylist()])
    order = [SEVERITIES.index(sev) for sev, _ in rows]
    assert order == sorted(order) and order[0] == 0
    for sev, cells in rows:
        if sev != "info" and "connection_churn" not in cells:  # each links to its connection's page and its plot
            page = re.search(r'href="(connections/[0-9a-f]{16}\.html)#plot-\w+"', cells)
            assert page and (report_page.parent / page.group(1)).exists(), cells
            assert re.search(r'href="#(timeline|inflight|credit|settlement|latency)"', cells)


def test_summary_prints_the_findings_first(spark, findings_lake):
    import io

    from amqplens import cli

    c, _, _, _ = findings_lake
    out = io.StringIO()
    cli.print_summary(spark, c, out=out)
    text = out.getvalue()
    assert text.index("\nfindings (") < text.index("\ncaptures (")
    lines = [line.strip() for line in text.split("\nfindings (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]]
    assert lines[0].startswith("CRITICAL") and any(line.startswith("WARNING  slow_consumer") for line in lines)
    assert any("publisher_blocked" in line and "memory alarm" in line for line in lines)
