"""The lifecycle tables of the ingested fixtures (written by the fused ingest; the lifecycle job gives the same rows,
tests/e2e/test_fused_lifecycle.py): counts against what the client and the broker reported.

The oracle is each fixture's `<name>.oracle.json`, written by tools/make_fixtures.py while the
scenario ran: the client's own counts (pika's confirms, acks it sent) and rabbitmqctl snapshots.
"""

from __future__ import annotations

import json

import pytest

from amqplens.jobs import ingest_captures
from amqplens.jobs import lifecycle
from tests.conftest import DATA

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def oracle(name: str) -> dict:
    return json.loads((DATA / "broker" / f"{name}.oracle.json").read_text())["client"]


def outcomes(store, name: str, direction: str) -> dict[str, int]:
    from pyspark.sql import functions as F

    cid = ingest_captures.capture_files([str(DATA / "broker" / f"{name}.pcap")])[0].capture_id
    rows = (
        store.read("deliveries").where((F.col("capture_id") == cid) & (F.col("direction") == direction))
        .groupBy("outcome").count().collect()
    )
    return {r.outcome: r["count"] for r in rows}


def test_publisher_confirms(lifecycled):
    _, store, _ = lifecycled
    o, got = oracle("publish_confirms"), outcomes(store, "publish_confirms", "to_broker")
    assert sum(got.values()) == o["published"]
    assert got["returned"] == o["returned"]
    # pika counts the returned message as confirmed too: the broker acks it after basic.return.
    assert got["confirmed"] + got["returned"] == o["confirmed"]


def test_consumer_acks(lifecycled):
    _, store, _ = lifecycled
    o = oracle("consume_prefetch_ack")
    assert outcomes(store, "consume_prefetch_ack", "from_broker") == {"acked": o["acked"]} and o["acked"] == o["delivered"]
    assert outcomes(store, "consume_prefetch_ack", "to_broker") == {"confirmed": o["confirmed"]}


def test_nacks_and_rejects(lifecycled):
    _, store, _ = lifecycled
    o, got = oracle("nack_reject"), outcomes(store, "nack_reject", "from_broker")
    assert sum(got.values()) == o["delivered"]
    assert got["acked"] == o["acked"]
    assert got.get("nacked_requeue", 0) + got.get("nacked_drop", 0) == o["nacked"]
    assert got.get("rejected_requeue", 0) + got.get("rejected_drop", 0) == o["rejected"]
    assert got.get("nacked_requeue", 0) + got.get("rejected_requeue", 0) == o["requeued"]


def test_every_message_frame_is_in_exactly_one_delivery(lifecycled):
    from pyspark.sql import functions as F

    _, store, _ = lifecycled
    frames = store.read("frames")
    family = F.col("dialect").isin("0-8", "0-9", "0-9-1") & F.col("method_name").isin("publish", "deliver", "get-ok")
    amqp10 = (F.col("dialect") == "1.0") & (F.col("performative") == "transfer")
    amqp010 = (F.col("dialect") == "0-10") & (F.col("class_name") == "message") & (F.col("method_name") == "transfer")
    starts = frames.where(family | amqp10 | amqp010).select("frame_id")
    assert frames.where(amqp010).count() > 0  # the 0-10 fixtures carry transfers
    listed = store.read("deliveries").select(F.explode("frame_ids").alias("frame_id"))
    assert listed.groupBy("frame_id").count().where("count > 1").count() == 0
    assert starts.join(listed, "frame_id", "left_anti").count() == 0
    assert listed.join(frames.select("frame_id"), "frame_id", "left_anti").count() == 0


def test_request_response_latencies_are_sane(lifecycled):
    from pyspark.sql import functions as F

    _, store, _ = lifecycled
    rr = store.read("request_responses")
    assert rr.where(F.col("latency_us") < 0).count() == 0
    family = F.col("dialect").isin("0-8", "0-9", "0-9-1")
    opened = rr.where(family & (F.col("request") == "connection.open") & (F.col("status") == "ok")).count()
    open_oks = store.read("frames").where(family & (F.col("class_name") == "connection") & (F.col("method_name") == "open-ok"))
    assert opened == open_oks.count() > 0


def test_rerun_is_a_no_op(lifecycled, spark):
    c, store, _ = lifecycled  # the ingest already wrote the lifecycle tables (lifecycle.fused): test_fused_lifecycle.py
    assert all(store.rows(t, [r.capture_id for r in store.read("captures").collect()]) for t in
               ("deliveries", "flow_events", "request_responses"))
    before = {t: store.version(t) for t in ("deliveries", "flow_events", "request_responses")}
    assert lifecycle.run(spark, c) == []
    assert {t: store.version(t) for t in before} == before


def test_amqp10_rich_fixture_against_the_client_counts(lifecycled):
    """RabbitMQ 3.10 + proton (tools/make_fixtures.py amqp10_rich): what the client counted while it ran."""
    from pyspark.sql import functions as F

    _, store, _ = lifecycled
    full = json.loads((DATA / "broker" / "amqp10_rich.oracle.json").read_text())
    o = full["client"]
    sent, received = outcomes(store, "amqp10_rich", "to_broker"), outcomes(store, "amqp10_rich", "from_broker")
    assert sent == {"presettled": o["published_presettled"], "accepted": o["accepted_by_broker"]}
    assert sum(received.values()) == o["delivered"]
    assert received.get("presettled") == o["delivered_settled"]
    assert (received.get("accepted"), received.get("rejected"), received.get("released")) == (
        o["accepted"], o["rejected"], o["released"])
    cid = ingest_captures.capture_files([str(DATA / "broker" / "amqp10_rich.pcap")])[0].capture_id
    frames = store.read("frames").where(F.col("capture_id") == cid)
    big = [d["message_id"] for d in full["facts"]["deliveries"] if d["body_octets"] == 20000]
    large = store.read("deliveries").where((F.col("capture_id") == cid) & F.col("message_id").isin(big)).collect()
    # split by max-frame-size 4096, both ways; the amqp-value's own encoding (str32: 5 octets) counts in body_size
    assert len(large) == 2 and all(len(d.frame_ids) == 5 and d.body_size == 20000 + 5 for d in large)
    assert frames.where(F.col("drain")).count() >= o["drain_requests"]
    conditions = {r.error_condition for r in frames.where(F.col("error_condition").isNotNull()).collect()}
    expected = {e["condition"] for e in full["facts"]["local_errors"] + full["facts"]["remote_errors"]}
    assert expected <= conditions
