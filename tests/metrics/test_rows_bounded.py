"""Metric rows grow with events, never with the time span a capture claims (issues 37 and 38.5).

The bound: rows of the four metric tables over the capture's events (frames + deliveries + flow events) <= 2,
on every fixture of the metrics lake (the real-broker captures, the demo, the 0-10 captures) and on two
mutants of real broker captures made here:

- ``idle_30_days``: consume_prefetch_ack with its longest pause stretched to 30 days (every packet after it
  30 days later), so its connection is idle for 30 days between two frames while the consumer sits at its
  prefetch limit. Before, every 1-minute bucket of those 30 days had rows for the channel and the consumer
  (302,419 metrics_flow rows for 479 events).
- ``years_away``: publish_confirms with one record's seconds flipped at bit 27 (4.25 years on, still inside
  1990..2100). Before, the capture's window spanned those years and metrics_flow a bucket per minute of them.
"""

from __future__ import annotations

import pytest

from amqplens.jobs import ingest_captures
from tests.conftest import DATA
from tests.metrics.conftest import built_lake
from tests.e2e.hostile_captures import records, ts_of, with_records

pytestmark = pytest.mark.spark

METRIC_TABLES = ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")
EVENT_TABLES = ("frames", "deliveries", "flow_events")
DAY_US = 86_400 * 1_000_000


def _counts(store, tables) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tables:
        for r in store.read(t).groupBy("capture_id").count().collect():
            out[r["capture_id"]] = out.get(r["capture_id"], 0) + r["count"]
    return out


def _ratios(store) -> dict[str, tuple[int, int]]:
    rows, events = _counts(store, METRIC_TABLES), _counts(store, EVENT_TABLES)
    return {cid: (rows.get(cid, 0), n) for cid, n in events.items()}


def idle_30_days(dst):
    data = (DATA / "broker" / "consume_prefetch_ack.pcap").read_bytes()
    recs = records(data)
    # the fixture's longest pause (2.1 s: the consumer holds its 10 unacked deliveries, at its prefetch limit)
    pause = max(range(1, len(recs)), key=lambda i: ts_of(recs[i]) - ts_of(recs[i - 1]))
    moved = [[*divmod(ts_of(r) + (30 * DAY_US if i >= pause else 0), 1_000_000), r[2]] for i, r in enumerate(recs)]
    dst.write_bytes(with_records(data, moved))
    return dst


def years_away(dst):
    data = (DATA / "broker" / "publish_confirms.pcap").read_bytes()
    recs = records(data)
    recs[len(recs) // 2][0] ^= 1 << 27
    dst.write_bytes(with_records(data, recs))
    return dst


@pytest.fixture(scope="module")
def mutants_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("bounded_lake")
    c = conf.with_overrides(lake__root=str(lake))
    folder = tmp_path_factory.mktemp("bounded_captures")
    paths = {"idle": idle_30_days(folder / "idle_30_days.pcap"), "years": years_away(folder / "years_away.pcap")}
    store, _ = built_lake(spark, c, [str(p) for p in paths.values()], "b")
    return store, {k: ingest_captures.capture_files([str(p)])[0].capture_id for k, p in paths.items()}


def test_metric_rows_at_most_twice_the_events_on_every_fixture_of_100_events(metrics_lake):
    """Below 100 events the fixed fan-out of a capture's few entities dominates (each measure in each entity's row,
    once per bucket and once for the whole capture: a request or a delivery is up to 36 rows), whatever the time
    span: 5 rows per event on connection_forced's 12 frames, 4 on heartbeat's 41. Those stay under 6, as does a
    capture of many such small entities."""
    _, store, _ = metrics_lake
    ratios = _ratios(store)
    assert len(ratios) >= 15 and sum(events >= 100 for _, events in ratios.values()) >= 6
    # churn (tools/fault_fixtures.py): 31 connections and 71 channels of a few frames each, the same fan-out of
    # small entities, 687 events: it stays under 6 (2.6 when written)
    small_entities = {ingest_captures.capture_files([str(DATA / "broker" / "churn.pcap")])[0].capture_id}
    over = {cid: r for cid, r in ratios.items() if r[0] > (2 if r[1] >= 100 and cid not in small_entities else 6) * r[1]}
    assert not over, over


def test_metric_rows_at_most_twice_the_events_on_a_30_day_idle_and_a_damaged_time(mutants_lake):
    store, ids = mutants_lake
    ratios = _ratios(store)
    for name, cid in ids.items():
        rows, events = ratios[cid]
        assert events > 100 and rows <= 2 * events, (name, rows, events)


def test_the_30_day_idle_is_kept_and_the_damaged_time_is_not(mutants_lake, metrics_lake):
    store, ids = mutants_lake
    _, clean_store, _ = metrics_lake
    from pyspark.sql import functions as F

    window = {r["capture_id"]: (r["first_ts"], r["last_ts"]) for r in store.read("captures").collect()}
    idle_first, idle_last = window[ids["idle"]]
    assert (idle_last - idle_first).days == 30  # a real jump of the clock stays in the window
    clean_id = ingest_captures.capture_files([str(DATA / "broker" / "publish_confirms.pcap")])[0].capture_id
    clean = clean_store.read("captures").where(F.col("capture_id") == clean_id).first()
    assert window[ids["years"]] == (clean["first_ts"], clean["last_ts"])  # the damaged time is not
    errors = store.read("decode_errors").where(F.col("capture_id") == ids["years"]).collect()
    assert [e["reason"] for e in errors] == ["ts_out_of_line"]
    assert "more than a day" in errors[0]["detail"]
    conns = store.read("connections").where(F.col("capture_id") == ids["years"]).collect()
    assert conns and all(clean["first_ts"] <= c["start_ts"] <= c["end_ts"] <= clean["last_ts"] for c in conns)
    buckets = store.read("metrics_flow").where(F.col("capture_id") == ids["years"]).agg(
        F.min("bucket_start").alias("lo"), F.max("bucket_start").alias("hi")).first()
    assert (buckets["hi"] - buckets["lo"]).days == 0
