"""The findings rules on the driver (amqplens/jobs/findings/driver.py) against the Spark rules, their reference.

The oracle is the Spark path: both run on the same lake and must write the same rows, every column (text, numbers,
ids, labels, partial). Lakes tried: the findings fixtures (18 real-broker scenarios, an undecrypted TLS capture, a
copy with a packet cut out), the same with ``findings.driver_max_rows`` 1 (the cap: Spark runs), and bad input: a
lake whose rule inputs hold nulls in every column the rules read (and rows that pass each rule's filter with the rest
null), a lake with a capture and no other table (a capture that decoded to nothing: connections, frames, metrics
absent).
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil

import pytest

from amqplens.contracts.findings import FINDINGS
from amqplens.jobs import findings
from amqplens.jobs.findings.driver_rules import findings_rows
from amqplens.jobs.findings.job import JOB, app_id
from amqplens.lake.store import TableStore

pytestmark = pytest.mark.spark


def rows_of(store, ids=None) -> list[dict]:
    return sorted(store.read_arrow("findings", FINDINGS.column_names, ids).to_pylist(), key=lambda r: r["finding_id"])


def differences(a: list[dict], b: list[dict]) -> list:
    """(finding_id, column, driver's, Spark's) of rows that differ; a row only one side has, with None on the other."""
    da, db = {r["finding_id"]: r for r in a}, {r["finding_id"]: r for r in b}
    out = []
    for k in sorted(set(da) | set(db)):
        if k not in da or k not in db:
            out.append((k, "row", da.get(k), db.get(k)))
        else:
            out += [(k, col, da[k][col], db[k][col]) for col in da[k] if da[k][col] != db[k][col]]
    return out


def lake_copy(findings_lake, tmp_path, name: str):
    """The fixtures' lake without its findings table."""
    c, store, _, _ = findings_lake
    dst = tmp_path / name
    shutil.copytree(store.root.removeprefix("file://"), dst, ignore=shutil.ignore_patterns("findings"))
    return c.with_overrides(lake__root=str(dst))


def capture_ids(store) -> list[str]:
    return sorted(r["capture_id"] for r in store.read_arrow("captures", ["capture_id"]).to_pylist())


def spark_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("findings:")]


def test_the_default_path_is_the_driver_and_past_the_cap_spark_writes_the_same_rows(spark, findings_lake, tmp_path, caplog):
    """One Spark run serves both sides (``findings.engine=spark`` takes the same branch with no cap to look at)."""
    c, store, _, _ = findings_lake
    # the fixtures' lake was written by the default engine (auto): its inputs fit, so by the driver
    assert c["findings.engine"] == "auto"
    assert findings_rows(store, c, capture_ids(store), c["findings.driver_max_rows"]) is not None
    expected = rows_of(store)
    assert len(expected) >= 30 and {r["kind"] for r in expected} >= {"publisher_blocked", "slow_consumer", "slow_settle",
                                                                      "heartbeat_timeout", "connection_churn", "link_error"}
    conf = lake_copy(findings_lake, tmp_path, "capped").with_overrides(findings__driver_max_rows=1)
    assert findings_rows(TableStore(spark, conf["lake.root"]), conf, capture_ids(store), 1) is None
    with caplog.at_level(logging.INFO, logger="amqplens.jobs.findings.job"):
        assert sorted(findings.run(spark, conf, run_id="c")) == capture_ids(store)
    assert any("through Spark (findings.engine=auto)" in m for m in spark_messages(caplog)), spark_messages(caplog)
    assert not any("on the driver" in m for m in spark_messages(caplog))
    out = TableStore(spark, conf["lake.root"])
    got = rows_of(out)
    assert got == expected, differences(expected, got)
    # every capture's unit is committed, those without findings too (empty)
    decoders = {r["capture_id"]: r["decoder_version"] for r in out.read_arrow("captures", ["capture_id", "decoder_version"]).to_pylist()}
    assert all(out.committed(JOB, app_id(cid, decoders[cid], conf)) for cid in capture_ids(store))


# ------------------------------------------------------------------ bad input
CAPTURE = "cap-nulls"
DAY = dt.date(2026, 11, 27)
T0 = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.timezone.utc)


def us(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def null_lake_rows() -> dict[str, list[dict]]:
    """Rows that pass each rule's filter with the other columns null, and rows null in every column but the key."""
    base = {"capture_id": CAPTURE, "capture_date": DAY}
    conns = [
        dict(base, connection_id="c-null"),  # everything else null
        dict(base, connection_id="c-rst", source="capture", end_reason="rst"),  # undecoded, reset, no times
        dict(base, connection_id="c-fin", source="capture", dialect="0-9-1", end_reason="fin", closed_by=None),
        dict(base, connection_id="c-tls", source="capture", tls=True),
        dict(base, connection_id="c-403", source="capture", close_code=403, amqp_closed_by="server"),
        dict(base, connection_id="c-sasl", source="capture", sasl_outcome="auth"),
        dict(base, connection_id="c-cond", source="capture", close_condition="amqp:unauthorized-access"),
        dict(base, connection_id="c-gap", source="capture", missing_bytes_to_server=5, missing_bytes_to_client=0),
        dict(base, connection_id="c-hb", source="capture", end_reason="fin", heartbeat=None, dialect="0-9-1",
             start_ts=us(0), end_ts=us(9)),
        dict(base, connection_id=None, source="capture", end_reason="rst", tls=True, missing_bytes_to_server=1,
             missing_bytes_to_client=1, close_code=530, amqp_closed_by="server"),
        # a client address with short connections and nulls in their times and ids
        *[dict(base, connection_id=f"c-short-{i}", source="capture", duration_us=1000, client_ip=None,
               client_properties_json="not json" if i % 2 else '{"connection_name": 7}') for i in range(10)],
    ]
    frames = [
        dict(base, frame_id="f1", class_name="basic", method_name="cancel", direction="to_client"),
        dict(base, frame_id=None, connection_id="c-hb", class_name="basic", method_name="cancel", direction="to_client",
             consumer_tag="t1", channel=1, ts=us(1)),
        dict(base, frame_id="f3", connection_id="c-hb", class_name="basic", method_name="consume", consumer_tag="t1"),
        dict(base, frame_id="f4", connection_id="c-hb", performative="attach", direction="to_client", role="receiver",
             channel=0, handle=0),
        dict(base, frame_id="f5", connection_id="c-hb", performative="attach", channel=0, handle=None),
    ]
    flow = [
        dict(base, metric_row_id="m1", bucket_seconds=0, metric="flow_off_us", value=2e6, entity_kind="channel"),
        dict(base, metric_row_id="m2", bucket_seconds=0, metric="at_prefetch_limit_us", entity_kind="consumer",
             value=1e6, observed_us=None, connection_id="c-hb", channel=None, entity=None),
        dict(base, metric_row_id="m3", bucket_seconds=0, metric="at_prefetch_limit_us", entity_kind="consumer",
             value=1e6, observed_us=1_000_000, connection_id="c-hb", channel=1, entity="c-hb/1/t1"),
        dict(base, metric_row_id="m4", bucket_seconds=0, metric="zero_credit_us", entity_kind="link", value=1e6,
             observed_us=1_000_000, connection_id="c-hb", channel=0, entity="c-hb/0/handle 0"),
        dict(base, metric_row_id="m5", bucket_seconds=0, metric="missed_heartbeats", entity_kind="connection",
             value=3.0, connection_id="c-hb", direction=None),
        dict(base, metric_row_id="m6", bucket_seconds=0, metric="missed_heartbeats", entity_kind="connection",
             value=None, connection_id="c-hb", direction="to_server"),
        dict(base, metric_row_id=None, bucket_seconds=0),
    ]
    deliveries = [
        dict(base, delivery_id="d-null"),
        *[dict(base, delivery_id=f"d-{o}", outcome=o) for o in ("returned", "open_at_capture_end", "nacked_drop")],
        dict(base, delivery_id="d-out", outcome="nacked_by_broker", connection_id="c-hb", direction="to_broker",
             sent_ts=us(2), routing_key="k", exchange=None),
        *[dict(base, delivery_id=f"d-re-{i}", redelivered=True, direction="from_broker") for i in range(3)],
        *[dict(base, delivery_id=f"d-slow-{i}", dialect="1.0", settle_latency_us=900_000, direction="to_broker",
               method="transfer") for i in range(2)],
        dict(base, delivery_id="d-slow-null", dialect=None, settle_mode="confirm", settle_latency_us=900_000),
    ]
    events = [
        dict(base, event_id="e1", event="blocked", entity="connection"),
        dict(base, event_id="e2", event="blocked", entity="connection", connection_id="c-hb", ts=us(3), reason=None),
        dict(base, event_id="e3", event="flow", flow_active=False),
        dict(base, event_id="e4", event="unblocked", entity="connection", connection_id=None, ts=us(4)),
    ]
    errors = [
        dict(base, metric_row_id="x1", entity_kind="connection", bucket_seconds=1, kind="connection_exception"),
        dict(base, metric_row_id="x2", entity_kind="connection", bucket_seconds=1, kind="channel_exception", code=406,
             connection_id="c-hb", count=None, bucket_start=None),
        dict(base, metric_row_id="x3", entity_kind="connection", bucket_seconds=5, kind="link_error", code=None,
             condition="amqp:not-found", connection_id="c-hb", count=2, bucket_start=us(1), raised_by="broker"),
    ]
    latency = [
        dict(base, metric_row_id="l1", bucket_seconds=0, entity_kind="capture", metric="transfer_settle", count=50,
             direction="to_broker", method="transfer", p50_us=100.0),
        dict(base, metric_row_id="l3", bucket_seconds=0, entity_kind="capture", metric="deliver_settle", count=50,
             p50_us=None),
        dict(base, metric_row_id="l2", bucket_seconds=0, entity_kind="capture", metric="publish_confirm", count=50),
    ]
    requests = [dict(base, request_frame_id=f"r{i}", request="channel.open") for i in range(20)]
    logs = [
        {"log_id": "log1", "log_date": DAY, "event_id": "b1", "event": "alarm_set"},
        {"log_id": "log1", "log_date": DAY, "event_id": "b2", "event": "alarm_set", "ts": us(3), "alarm_resource": None},
        {"log_id": "log1", "log_date": DAY, "event_id": "b3", "connection_id": "c-hb", "ts": None,
         "message": "closing AMQP connection\nMissed heartbeats from client"},
        {"log_id": "log1", "log_date": DAY, "event_id": "b4", "connection_id": "c-403", "ts": us(5),
         "message": "  missed heartbeats\n"},
    ]
    return {"captures": [dict(base, path=None, decoder_version="v-test")], "connections": conns, "frames": frames,
            "metrics_flow": flow, "deliveries": deliveries, "flow_events": events, "metrics_errors": errors,
            "metrics_latency": latency, "request_responses": requests, "broker_events": logs}


def write_lake(store: TableStore, tables: dict[str, list[dict]]) -> None:
    from amqplens.contracts import table

    for name, rows in tables.items():
        (rkey,) = table(name).replace_by
        store.write_rows(name, rows, units={r[rkey]: f"test/{name}/{r[rkey]}" for r in rows}, run_id="t")


@pytest.mark.parametrize("tables", ["nulls", "a capture alone"])
def test_bad_input_raises_nothing_and_both_paths_agree(spark, conf, tmp_path, tables):
    data = null_lake_rows()
    if tables == "a capture alone":
        data = {"captures": data["captures"]}
    written = {}
    for engine in ("driver", "spark"):
        c = conf.with_overrides(lake__root=str(tmp_path / engine), findings__engine=engine)
        store = TableStore(spark, c["lake.root"])
        write_lake(store, data)
        assert findings.run(spark, c, run_id="b") == [CAPTURE]
        assert store.committed(JOB, app_id(CAPTURE, "v-test", c))  # committed, with or without findings
        written[engine] = rows_of(store)
    assert written["driver"] == written["spark"], differences(written["driver"], written["spark"])
    if tables == "nulls":  # every rule had rows to judge
        assert {r["kind"] for r in written["driver"]} == {
            "publisher_blocked", "channel_flow_off", "slow_consumer", "credit_starved", "returned_unroutable",
            "unsettled_at_end", "rejected_by_consumer", "publish_nacked", "redelivery_loop", "slow_settle",
            "heartbeat_timeout", "abrupt_end", "access_refused", "tls_not_decrypted", "capture_gaps", "connection_churn",
            "channel_error", "link_error", "consumer_cancelled"}
    else:
        assert written["driver"] == []


@pytest.mark.parametrize("small_file", [0, 1 << 40])
def test_large_and_small_files_give_the_same_rows(spark, findings_lake, monkeypatch, small_file):
    """The driver reads a file above ``SMALL_FILE`` row group by row group (counted first) and the small ones at once:
    every file on one side of the limit, then on the other, the same findings, and the cap holds either way."""
    from amqplens.jobs.findings import driver

    c, store, _, _ = findings_lake
    ids = capture_ids(store)
    expected = findings_rows(store, c, ids, None)
    monkeypatch.setattr(driver, "SMALL_FILE", small_file)
    got = findings_rows(store, c, ids, None)
    assert expected and got == expected
    assert findings_rows(store, c, ids, 1) is None
