"""Every metric against an expectation derived without our metric code: the broker's and client's counts saved with
each fixture (tests/data/broker/*.oracle.json), or a plain-Python computation over the frames the test lists."""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest

from tests.conftest import DATA
from tests.metrics.conftest import capture_id

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def oracle(name: str) -> dict:
    return json.loads((DATA / "broker" / f"{name}.oracle.json").read_text())


def frames(store, name: str, where: str):
    """The frames of one fixture matching an explicit SQL filter, in stream order, as plain Rows."""
    return (store.read("frames").where(f"capture_id = '{capture_id(name)}'").where(where)
            .orderBy("ts", "direction", "stream_offset").collect())


def whole(store, table: str, name: str, **eq):
    """Rows of a metric table for the whole capture (bucket_seconds = 0)."""
    df = store.read(table).where(f"capture_id = '{capture_id(name)}' and bucket_seconds = 0")
    for k, v in eq.items():
        df = df.where(df[k].isNull() if v is None else df[k] == v)
    return df.collect()


def us(ts) -> int:
    return round(ts.timestamp() * 1_000_000)


def test_every_capture_done_once_and_rerun_is_a_no_op(spark, metrics_lake):
    from amqplens.jobs import metrics

    conf, store, done = metrics_lake
    assert len(done) == len(store.read("captures").collect())
    before = {t: store.version(t) for t in ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")}
    assert metrics.run(spark, conf) == []
    assert {t: store.version(t) for t in before} == before


# --------------------------------------------------------------------- errors
def test_channel_exceptions_match_the_client(metrics_lake):
    _, store, _ = metrics_lake
    want = collections.Counter((code, text.split(" - ")[0]) for code, text in oracle("channel_error")["facts"]["channel_close"])
    rows = whole(store, "metrics_errors", "channel_error", entity_kind="capture", kind="channel_exception")
    assert {(r.code, r.condition): r["count"] for r in rows} == dict(want)
    assert {r.raised_by for r in rows} == {"broker"}


def test_connection_forced_is_a_connection_exception(metrics_lake):
    _, store, _ = metrics_lake
    closes = frames(store, "connection_forced", "class_name = 'connection' and method_name = 'close' and reply_code != 200")
    assert [(f.reply_code, f.direction) for f in closes] == [(320, "to_client")]  # the scenario: rabbitmqctl close_connection
    rows = whole(store, "metrics_errors", "connection_forced", entity_kind="capture", kind="connection_exception")
    assert [(r.code, r.condition, r.raised_by, r["count"]) for r in rows] == [(320, "CONNECTION_FORCED", "broker", 1)]


# ----------------------------------------------------------------- settlement
def test_settlement_of_nacks_and_rejects_matches_the_client(metrics_lake):
    _, store, _ = metrics_lake
    o = oracle("nack_reject")["client"]
    rows = {(r.measure, r.value): r for r in whole(store, "metrics_settlement", "nack_reject", entity_kind="capture",
                                                    direction="from_broker")}
    assert rows[("redelivered", "true")].messages == o["delivered"]
    assert rows[("redelivered", "true")]["count"] == o["redelivered"]
    assert rows[("redelivered", "true")].rate == pytest.approx(o["redelivered"] / o["delivered"])
    assert rows[("outcome", "acked")]["count"] == o["acked"]
    nacked = sum(r["count"] for (m, v), r in rows.items() if m == "outcome" and v.startswith("nacked"))
    rejected = sum(r["count"] for (m, v), r in rows.items() if m == "outcome" and v.startswith("rejected"))
    assert (nacked, rejected) == (o["nacked"], o["rejected"])
    assert rows[("settle_mode", "manual_ack")]["count"] == o["delivered"]
    assert rows[("unsettled_at_close", "true")]["count"] == 0  # every delivery was settled before the close


def test_settlement_per_queue_of_the_broker_queue(metrics_lake):
    _, store, _ = metrics_lake
    o = oracle("consume_prefetch_ack")
    queue = o["broker"]["after_cancel"]["queues"][0]["name"]
    rows = {(r.measure, r.value): r["count"] for r in whole(store, "metrics_settlement", "consume_prefetch_ack",
                                                             entity_kind="queue", entity=queue, direction="from_broker")}
    assert rows[("outcome", "acked")] == o["client"]["acked"]


def test_amqp10_outcomes_match_the_client(metrics_lake):
    _, store, _ = metrics_lake
    o = oracle("amqp10_proton")["client"]
    rows = {r.value: r["count"] for r in whole(store, "metrics_settlement", "amqp10_proton", entity_kind="capture",
                                                direction="from_broker", measure="outcome")}
    assert rows == {"accepted": o["accepted"], "released": o["released"], "rejected": o["rejected"]}


# -------------------------------------------------------------------- latency
def _confirm_latencies(store) -> list[int]:
    """publish -> ack by hand: publishes after confirm.select are numbered 1, 2, ...; an ack covers its tag (and below, if multiple)."""
    fs = frames(store, "publish_confirms", "class_name in ('basic', 'confirm') and method_name in ('publish', 'ack', 'nack', 'select')")
    sent, out, n, confirming = {}, [], 0, False
    for f in fs:
        if f.method_name == "select":
            confirming = True
        elif f.method_name == "publish" and confirming:
            n += 1
            sent[n] = us(f.ts)
        elif f.method_name in ("ack", "nack") and f.direction == "to_client":
            tags = [t for t in sent if t <= f.delivery_tag] if f.multiple else [f.delivery_tag]
            out += [us(f.ts) - sent.pop(t) for t in tags]
    return out


def test_publish_confirm_latency_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    want = _confirm_latencies(store)
    assert len(want) == oracle("publish_confirms")["client"]["confirmed"]
    (r,) = whole(store, "metrics_latency", "publish_confirms", entity_kind="capture", metric="publish_confirm")
    assert (r["count"], r.missing, r.max_us, r.exact) == (len(want), 0, max(want), True)
    assert r.mean_us == pytest.approx(np.mean(want))
    for q, col in ((50, "p50_us"), (90, "p90_us"), (99, "p99_us")):
        assert r[col] == pytest.approx(np.percentile(want, q))  # Spark's exact percentile interpolates linearly too


def test_exact_percentiles_when_a_group_spans_arrow_batches(spark, metrics_lake):
    """Percentiles are read from sorted values in Python (amqplens.jobs.metrics.group_stats); with 7-row Arrow batches every
    group of more than 7 values spans batches, and the capture's confirm latencies must still come out exact."""
    from amqplens.jobs import metrics

    conf, store, _ = metrics_lake
    cid = capture_id("publish_confirms")
    caps = store.read("captures").where(f"capture_id = '{cid}'").select("capture_id", "capture_date", "first_ts")
    read = lambda t: store.read(t).where(f"capture_id = '{cid}'")  # noqa: E731
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "7")
    try:
        out = metrics.latency(read("deliveries"), read("request_responses"), read("connections"), read("frames"), caps, 60,
                              partitions=1)
        (r,) = out.where("bucket_seconds = 0 and entity_kind = 'capture' and metric = 'publish_confirm'").collect()
    finally:
        spark.conf.set(key, before)
    want = _confirm_latencies(store)
    assert len(want) > 7 and r.exact and (r["count"], r.missing, r.max_us) == (len(want), 0, max(want))
    assert r.mean_us == pytest.approx(np.mean(want))
    for q, col in ((50, "p50_us"), (90, "p90_us"), (99, "p99_us")):
        assert r[col] == pytest.approx(np.percentile(want, q))


def test_deliver_ack_latency_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    fs = frames(store, "consume_prefetch_ack", "class_name = 'basic' and method_name in ('deliver', 'ack')")
    sent, lat = {}, []
    for f in fs:
        if f.method_name == "deliver":
            sent[f.delivery_tag] = us(f.ts)
        elif f.direction == "to_server":
            tags = [t for t in sent if t <= f.delivery_tag] if f.multiple else [f.delivery_tag]
            lat += [us(f.ts) - sent.pop(t) for t in tags]
    assert len(lat) == oracle("consume_prefetch_ack")["client"]["acked"]
    (r,) = whole(store, "metrics_latency", "consume_prefetch_ack", entity_kind="capture", metric="deliver_settle")
    assert (r["count"], r.max_us) == (len(lat), max(lat))
    assert r.p50_us == pytest.approx(np.percentile(lat, 50))


def test_request_response_latency_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    fs = frames(store, "topology", "class_name = 'queue' and method_name in ('declare', 'declare-ok')")
    pending, lat = {}, []
    for f in fs:  # one request in flight per channel: synchronous methods
        if f.method_name == "declare":
            pending[f.channel] = us(f.ts)
        else:
            lat.append(us(f.ts) - pending.pop(f.channel))
    (r,) = whole(store, "metrics_latency", "topology", entity_kind="capture", metric="request_response", method="queue.declare")
    assert (r["count"], r.max_us) == (len(lat), max(lat))
    assert r.mean_us == pytest.approx(np.mean(lat))


def test_amqp_handshake_and_tcp_rtt(metrics_lake):
    _, store, _ = metrics_lake
    (conn,) = store.read("connections").where(f"capture_id = '{capture_id('basic_get')}'").collect()
    (open_ok,) = frames(store, "basic_get", "class_name = 'connection' and method_name = 'open-ok'")
    (r,) = whole(store, "metrics_latency", "basic_get", entity_kind="connection", metric="amqp_handshake")
    assert r.max_us == us(open_ok.ts) - us(conn.start_ts) and r["count"] == 1
    (t,) = whole(store, "metrics_latency", "basic_get", entity_kind="connection", metric="tcp_handshake")
    assert t.max_us == conn.handshake_rtt_us and 0 < t.max_us < r.max_us


def test_end_to_end_by_message_id(metrics_lake):
    _, store, _ = metrics_lake
    fs = frames(store, "nack_reject", "frame_type = 'header' or (class_name = 'basic' and method_name in ('publish', 'deliver'))")
    start, pub, lat = {}, {}, []
    for f in fs:  # a header follows its method on the same channel and direction
        if f.frame_type == "method":
            start[(f.direction, f.channel)] = (f.method_name, us(f.ts))
        else:
            method, ts = start[(f.direction, f.channel)]
            mid = json.loads(f.properties_json)["message_id"]
            if method == "publish":
                pub[mid] = ts
            else:
                lat.append(ts - pub[mid])
    (r,) = whole(store, "metrics_latency", "nack_reject", entity_kind="capture", metric="end_to_end")
    assert (r["count"], r.missing, r.max_us) == (len(lat), 0, max(lat))
    assert len(lat) == oracle("nack_reject")["client"]["delivered"]  # redeliveries match their one publish too


def test_buckets_add_up_to_the_whole_capture(metrics_lake):
    _, store, _ = metrics_lake
    cid = capture_id("demo")
    df = store.read("metrics_settlement").where(f"capture_id = '{cid}' and entity_kind = 'capture' and measure = 'outcome'")
    per_bucket = collections.Counter()
    for r in df.where("bucket_seconds = 60").collect():
        per_bucket[(r.direction, r.value)] += r["count"]
    assert per_bucket == {(r.direction, r.value): r["count"] for r in df.where("bucket_seconds = 0").collect()}


# ----------------------------------------------------------------------- flow
def test_prefetch_limit_by_hand_and_broker(metrics_lake):
    _, store, _ = metrics_lake
    o = oracle("consume_prefetch_ack")["broker"]["prefetch_full"]["channels"][0]
    (conn,) = store.read("connections").where(f"capture_id = '{capture_id('consume_prefetch_ack')}'").collect()
    fs = frames(store, "consume_prefetch_ack", "class_name = 'basic' and method_name in ('qos', 'deliver', 'ack') and channel = 1")
    prefetch, unacked, t_prev, at_limit, weighted, limited = 0, set(), None, 0, 0.0, 0
    for f in fs + [None]:
        t = us(conn.end_ts) if f is None else us(f.ts)
        if t_prev is not None and prefetch:
            limited += t - t_prev
            weighted += (t - t_prev) * len(unacked) / prefetch
            at_limit += (t - t_prev) if len(unacked) >= prefetch else 0
        t_prev = t
        if f is None:
            break
        if f.method_name == "qos":
            prefetch = f.prefetch_count
        elif f.method_name == "deliver":
            unacked.add(f.delivery_tag)
        else:
            unacked -= {x for x in unacked if x <= f.delivery_tag} if f.multiple else {f.delivery_tag}
    assert prefetch == o["prefetch_count"]
    rows = {r.metric: r for r in whole(store, "metrics_flow", "consume_prefetch_ack", entity_kind="channel")}
    assert rows["prefetch_utilisation_max"].value == o["messages_unacknowledged"] / o["prefetch_count"]  # the broker saw it full
    assert rows["at_prefetch_limit_us"].value == at_limit > 0
    assert rows["prefetch_utilisation"].value == pytest.approx(weighted / limited)
    assert rows["flow_off_us"].value == 0


def test_time_blocked_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    assert oracle("connection_blocked")["facts"]["blocked"]
    fs = frames(store, "connection_blocked", "class_name = 'connection' and method_name in ('blocked', 'unblocked')")
    assert [f.method_name for f in fs] == ["blocked", "unblocked"]
    (r,) = whole(store, "metrics_flow", "connection_blocked", entity_kind="connection", metric="blocked_us")
    assert r.value == us(fs[1].ts) - us(fs[0].ts)


def test_zero_link_credit_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    fs = frames(store, "amqp10_proton", "handle = 1 and ((performative = 'flow' and direction = 'to_server') or "
                                        "(performative = 'transfer' and direction = 'to_client'))")
    credit, since, zero = 0, None, 0
    for f in fs:  # the receiver's flow sets the credit, each transfer to it uses one
        if f.performative == "flow":
            credit = f.link_credit
            if since is not None and credit > 0:
                zero, since = zero + us(f.ts) - since, None
        else:
            credit -= 1
            if credit == 0:
                since = us(f.ts)
    assert zero > 0
    rows = [r for r in whole(store, "metrics_flow", "amqp10_proton", entity_kind="link", metric="zero_credit_us") if r.value > 0]
    assert [r.value for r in rows] == [zero]


def test_heartbeats_by_hand(metrics_lake):
    _, store, _ = metrics_lake
    o = oracle("heartbeat")["broker"]["idle"]["connections"][0]
    fs = frames(store, "heartbeat", "true")
    rows = whole(store, "metrics_flow", "heartbeat", entity_kind="connection")
    got = {(r.metric, r.direction): r.value for r in rows}
    for d in ("to_server", "to_client"):
        mine = [us(f.ts) for f in fs if f.direction == d]
        sent = sum(1 for f in fs if f.direction == d and f.frame_type == "heartbeat")
        gaps = [(b - a) / 1e6 for a, b in zip(mine, mine[1:])]
        missed = sum(math.floor(g / o["timeout"]) for g in gaps if g > o["timeout"])
        assert sent >= 4  # five idle seconds with a heartbeat every second
        assert got[("heartbeats_sent", d)] == sent
        assert got[("heartbeat_interval_s", d)] == o["timeout"]
        assert got[("missed_heartbeats", d)] == missed  # the broker once waited 2.002 s: one interval without a frame


def test_missed_heartbeats_by_hand_with_sub_second_and_long_intervals(spark):
    """Heartbeats are counted per slot of at most the interval (amqplens/jobs/metrics/flow.py): frames built here, with a 1.0
    peer's 300 ms idle time-out (slots of 300 ms), a 0-9-1 connection's 2 s heartbeat (slots of 1 s), gaps inside
    a slot, across slots and across a bucket edge, a frame at the exact interval, and a connection with no
    heartbeat; expected: every gap longer than the interval misses floor(gap / interval), by hand."""
    import datetime as dt

    from amqplens.jobs.metrics.flow import _heartbeat_metrics

    t0 = dt.datetime(2024, 1, 1, 0, 0, 50, tzinfo=dt.timezone.utc)
    offsets = {  # seconds after t0 of each frame, per (connection, direction); the bucket edge is at 10 s
        ("c10", "to_server"): [0, 0.1, 0.2, 0.35, 0.5, 1.4, 1.45, 9.95, 10.1, 10.4, 12.0],
        ("c10", "to_client"): [0, 0.29, 0.58, 0.9, 1.2],
        ("c091", "to_server"): [0, 0.5, 2.0, 4.0, 6.5, 6.6, 9.9, 15.5],
        ("c091", "to_client"): [1.0, 3.0],
        ("cnone", "to_server"): [0, 30.0],
    }
    interval = {("c10", "to_server"): 0.3, ("c10", "to_client"): 0.4, ("c091", "to_server"): 2.0, ("c091", "to_client"): 2.0}
    dialect = {"c10": "1.0", "c091": "0-9-1", "cnone": "0-9-1"}
    rows = [("cap", c, d, dialect[c], t0 + dt.timedelta(seconds=x), "heartbeat" if i % 2 else "method")
            for (c, d), xs in offsets.items() for i, x in enumerate(xs)]
    frames = spark.createDataFrame(rows, "capture_id string, connection_id string, direction string, dialect string, "
                                         "ts timestamp, frame_type string")
    connections = spark.createDataFrame(
        [("c10", None, 300, 400), ("c091", 2, None, None), ("cnone", 0, None, None)],
        "connection_id string, heartbeat int, server_idle_timeout_ms long, client_idle_timeout_ms long")
    caps = spark.createDataFrame([("cap", t0.date(), t0)], "capture_id string, capture_date date, first_ts timestamp")
    got = {(r.connection_id, r.direction, r.metric): r.value for r in
           _heartbeat_metrics(connections, frames, caps, 60).where("bucket_seconds = 0").collect()}
    for (c, d), xs in offsets.items():
        sent = sum(i % 2 for i in range(len(xs)))
        assert got[c, d, "heartbeats_sent"] == sent
        if (c, d) not in interval:
            assert (c, d, "missed_heartbeats") not in got and (c, d, "heartbeat_interval_s") not in got
            continue
        gaps = [round(b - a, 6) for a, b in zip(xs, xs[1:])]
        missed = sum(math.floor(g / interval[c, d]) for g in gaps if g > interval[c, d])
        assert got[c, d, "missed_heartbeats"] == missed and got[c, d, "heartbeat_interval_s"] == interval[c, d], (c, d)
    # by hand: gaps 0.9, 8.5 and 1.6 s at 0.3 s miss 3 + 28 + 5; gaps 2.5, 3.3 and 5.6 s at 2 s miss 1 + 1 + 2 (2.0 s misses none)
    assert got["c10", "to_server", "missed_heartbeats"] == 36 and got["c091", "to_server", "missed_heartbeats"] == 4
    by_bucket = collections.Counter()
    for r in _heartbeat_metrics(connections, frames, caps, 10).where("bucket_seconds = 10 and metric = 'missed_heartbeats'").collect():
        by_bucket[r.connection_id, r.direction] += r.value
    assert by_bucket["c10", "to_server"] == 36 and by_bucket["c091", "to_server"] == 4


def test_no_blocked_time_without_a_block(metrics_lake):
    _, store, _ = metrics_lake
    assert not frames(store, "publish_confirms", "method_name = 'blocked'")
    assert all(r.value == 0 for r in whole(store, "metrics_flow", "publish_confirms", metric="blocked_us"))
    demo = {r.entity: r.value for r in whole(store, "metrics_flow", "demo", metric="blocked_us")}
    assert len([v for v in demo.values() if v > 0]) >= 2  # the memory alarm blocked every publisher of the demo for a moment


def test_amqp010_transfer_to_accept_latency_by_hand(metrics_lake):
    """0-10 (tests/data/v0_10/publish_consume.pcap): the broker's message.transfer, settled by the client's
    message.accept whose id set covers its command id."""
    _, store, _ = metrics_lake
    name = "v0_10/publish_consume"
    fs = frames(store, name, "class_name = 'message' and method_name in ('transfer', 'accept')")
    sent, lat = {}, []
    for f in fs:
        if f.method_name == "transfer" and f.direction == "to_client":
            sent.setdefault(f.command_id, us(f.ts))  # the command's first frame
        elif f.method_name == "accept" and f.direction == "to_server" and f.transfers_json:
            for lo, hi in json.loads(f.transfers_json):
                lat += [us(f.ts) - sent.pop(i) for i in list(sent) if lo <= i <= hi]
    assert lat
    (r,) = whole(store, "metrics_latency", name, entity_kind="capture", metric="transfer_settle", dialect="0-10",
                 direction="from_broker")
    assert (r["count"], r.max_us) == (len(lat), max(lat))


def test_end_to_end_pass_matches_the_window_reference_on_every_fixture(metrics_lake):
    """The one-pass matching (jobs/metrics_e2e.fifo_pass) and the same rule as Spark windows give every delivery of
    every real-broker fixture (0-9-1, 1.0, 0-10; message ids, nacks and requeues, a twin capture) the same publish."""
    from amqplens.jobs.metrics import DELIVERY_COLUMNS, control_frames, deliveries_with_queue
    from amqplens.jobs.metrics.e2e import end_to_end, end_to_end_windows

    _, store, _ = metrics_lake
    d = deliveries_with_queue(store.read("deliveries").select(*DELIVERY_COLUMNS), control_frames(store.read("frames")))
    one = sorted(end_to_end(d).select("delivery_id", "p_ts").collect())
    assert one == sorted(end_to_end_windows(d).select("delivery_id", "p_ts").collect())
    assert any(r.p_ts is not None for r in one) and any(r.p_ts is None for r in one)


def test_counted_repeats_and_the_route_pass_give_the_same_rows_on_every_fixture(metrics_lake):
    """``metrics.count_repeats_from_rows``: above it latencies alike are counted before they are spread over entities
    and heartbeats per slot before the window (tests/metrics' lake is below it, so the tables hold the uncounted
    rows); both ways give every fixture the same metrics_latency and metrics_flow rows. metrics_latency's columnar
    pass (``latency``: one shuffle by route, groups in numpy) gives every row of its Spark reference
    (``latency_reference``), whatever the shuffle's partitions."""
    from amqplens.jobs import metrics
    from amqplens.jobs.metrics.flow import flow
    from amqplens.jobs.metrics.percentiles import latency_reference

    conf, store, _ = metrics_lake
    caps = store.read("captures").select("capture_id", "capture_date", "first_ts")
    control = metrics.control_frames(store.read("frames"))
    d = metrics.deliveries_with_queue(store.read("deliveries").select(*metrics.DELIVERY_COLUMNS), control)
    args = lambda name: {  # noqa: E731
        "latency": (d, store.read("request_responses"), store.read("connections"), control, caps, 60),
        "flow": (store.read("flow_events"), store.read("connections"), store.read("frames"), caps, 60)}[name]
    for name, fn in (("latency", latency_reference), ("flow", flow)):
        counted = sorted(fn(*args(name), counted=True).collect())
        assert counted == sorted(fn(*args(name), counted=False).collect()) and len(counted) > 100, name
        if name == "latency":
            kinds = {r.entity_kind for r in counted}
            assert {"capture", "connection", "channel", "consumer", "link", "queue", "address", "exchange"} <= kinds, kinds
            assert any(r.missing for r in counted) and any(r["count"] == 0 for r in counted)
            for parts, weighed in ((1, False), (5, False), (3, True)):  # uncounted and counted route rows
                assert sorted(metrics.latency(*args(name), partitions=parts, counted=weighed).collect()) == counted, parts
    missed = [r for r in store.read("metrics_flow").where("metric = 'missed_heartbeats' and value > 0").collect()]
    assert missed  # the heartbeat fixture's broker once waited 2 s: the slots' gaps are exercised
