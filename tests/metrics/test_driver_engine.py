"""The metric tables on the driver (``metrics.engine``) against Spark's queries, the reference: every column of every
row of the four tables the same, on the fixtures' lake (every real-broker capture, the demo, the 0-10 captures, a
capture of the same messages 1 us later) and on a lake of wild input.

(`tests/logs/test_ingest_logs_e2e.py` compares them on a lake of broker logs, traces and captures too.)

Bad input tried (the wild lake): every fixture cut at a random offset, bit flips in four, records duplicated and
reordered in two, the synthetic hostile files (a frame claiming 4 GiB, tables nested 10,000 deep, a 1.0 list claiming
2^32 - 1 elements, HTTP and TLS on the AMQP port), the fuzz corpus' captures (a timestamp near 2^64 units, an
original length over 2^31), a connection idle for 30 days and a record whose time is 4 years away.

Doubles are compared to 1e-12 of their value: a sum of doubles (prefetch utilisation's weighted sum) depends on the
order Spark adds them in, which is not fixed."""

from __future__ import annotations

import logging
import math

import pytest

from amqplens.contracts import table
from amqplens.jobs import ingest_captures, metrics
from amqplens.jobs.metrics import driver
from amqplens.jobs.metrics.grouped import group_table
from amqplens.jobs.metrics.job import spark_tables
from amqplens.lake.store import TableStore
from tests.conftest import DATA
from tests.e2e import hostile_captures as H
from tests.e2e.conftest import FIXTURES
from tests.metrics.test_rows_bounded import idle_30_days, years_away

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

METRIC_TABLES = ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")


def _ids(store) -> list[str]:
    return [r["capture_id"] for r in store.read_arrow("captures", ["capture_id", "path"]).to_pylist()]


def _spark_rows(spark, conf, store, ids) -> dict[str, list[dict]]:
    found = store.read_arrow("captures", ["capture_id", "decoder_version", "path"], ids).to_pylist()
    pending = {c: c for c in ids}
    rows = store.rows("frames", pending) + store.rows("deliveries", pending)
    built, cached = spark_tables(spark, conf, store, found, pending, rows)
    try:
        return {name: build().select(*table(name).column_names).toArrow().to_pylist() for name, build in built}
    finally:
        for df in cached:
            df.unpersist()


def _differences(want: list[dict], got: list[dict], name: str) -> list:
    """What differs between the two engines' rows of table ``name`` (by row id; doubles to 1e-12)."""
    w = {r["metric_row_id"]: r for r in want}
    g = {r["metric_row_id"]: r for r in got}
    out: list = [("rows", len(want), len(got))] if (len(w), len(g)) != (len(want), len(got)) else []
    out += [("only spark", w[k]) for k in w.keys() - g.keys()] + [("only driver", g[k]) for k in g.keys() - w.keys()]
    for k in w.keys() & g.keys():
        for c in table(name).column_names:
            a, b = w[k][c], g[k][c]
            if isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12):
                continue
            if a != b:
                out.append((c, a, b, w[k]))
    return out


def _same_rows(spark, conf, store, monkeypatch) -> dict[str, int]:
    """Every row of the four tables, driver against Spark; the driver twice: each route row of metrics_latency on its
    own (the lakes here are below driver.COUNT_ROUTE_ROWS), and equal route rows counted into one (as at 300 MB)."""
    ids = _ids(store)
    want = _spark_rows(spark, conf, store, ids)
    got = {name: t.to_pylist() for name, t in driver.tables(store, ids, conf["metrics.bucket"]).items()}
    for name in METRIC_TABLES:
        assert _differences(want[name], got[name], name)[:5] == [], name
    routes = []
    monkeypatch.setattr(driver, "COUNT_ROUTE_ROWS", 0)
    monkeypatch.setattr(driver, "group_table", lambda t, b: routes.append(t) or group_table(t, b))
    counted = driver.tables(store, ids, conf["metrics.bucket"])["metrics_latency"].to_pylist()
    assert _differences(want["metrics_latency"], counted, "metrics_latency")[:5] == []
    (t,) = routes
    assert max(t.column("_n").to_pylist()) > 1  # not vacuous: equal rows were counted into one
    return {name: len(got[name]) for name in METRIC_TABLES}


def test_fixtures_lake_the_same_rows_on_both_engines(spark, metrics_lake, monkeypatch):
    conf, store, _ = metrics_lake
    n = _same_rows(spark, conf, store, monkeypatch)
    # the comparison saw rows of every table (every kind of latency, outcome, flow state and error of the fixtures)
    assert n["metrics_latency"] > 1000 and n["metrics_settlement"] > 1000 and n["metrics_flow"] > 300
    assert n["metrics_errors"] > 50


@pytest.fixture(scope="module")
def wild_lake(spark, conf, tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics-wild")
    H.write_cases(H.cases(FIXTURES), d / "in")
    for f in (DATA / "fuzz" / "capture").iterdir():
        (d / "in" / f"{f.stem}.pcapng").write_bytes(f.read_bytes())
    idle_30_days(d / "in" / "idle_30_days.pcap")
    years_away(d / "in" / "years_away.pcap")
    c = conf.with_overrides(lake__root=str(d / "lake"))
    ingest_captures.run(spark, c, [str(d / "in")], run_id="wild")
    return c, TableStore(spark, str(d / "lake"))


def test_wild_input_the_same_rows_on_both_engines(spark, wild_lake, monkeypatch):
    conf, store = wild_lake
    n = _same_rows(spark, conf, store, monkeypatch)
    assert min(n.values()) > 0, n


def test_auto_runs_on_the_driver_and_goes_to_spark_past_the_cap(spark, wild_lake, tmp_path, caplog):
    """``auto`` under the cap writes the driver's rows, past it (``metrics.driver_max_rows=1``) Spark's: the same;
    under the cap but with no memory to spare for it (``metrics.driver_memory_share=0``) Spark's too, and says why."""
    import shutil

    conf, store = wild_lake
    out = {}
    for case, cap, share in (("driver", 10**9, 0.7), ("cap", 1, 0.7), ("memory", 10**9, 0.0)):
        lake = tmp_path / case
        shutil.copytree(conf["lake.root"], lake)
        c = conf.with_overrides(lake__root=str(lake), metrics__driver_max_rows=cap, metrics__driver_memory_share=share)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="amqplens.jobs.metrics"):
            assert sorted(metrics.run(spark, c, run_id="m")) == sorted(_ids(store))
        assert ("on the driver" in caplog.text) == (case == "driver"), caplog.text
        assert ("metrics.driver_memory_share" in caplog.text) == (case == "memory"), caplog.text
        s = TableStore(spark, str(lake))
        out[case] = {name: s.read_arrow(name, table(name).column_names).to_pylist() for name in METRIC_TABLES}
    for name in METRIC_TABLES:
        assert _differences(out["cap"][name], out["driver"][name], name)[:5] == [], name
        assert _differences(out["cap"][name], out["memory"][name], name)[:5] == [], name


def test_the_driver_takes_two_tables_at_a_time_one_or_none_by_the_memory_it_may_use():
    from amqplens.jobs.metrics.job import ONE_TABLE_SHARE, available_memory, driver_peak, driver_threads

    peak = driver_peak({"frames": 12_398_735, "deliveries": 3_209_759, "flow_events": 5_402_882, "connections": 10_008})
    assert driver_threads(peak, 0.7, None) == 2  # memory unknown: the row cap alone decides
    assert driver_threads(peak, 1.0, peak) == 2
    assert driver_threads(peak, 1.0, peak - 1) == 1
    assert driver_threads(peak, 0.5, int(2 * peak * ONE_TABLE_SHARE) + 1) == 1
    assert driver_threads(peak, 0.5, int(2 * peak * ONE_TABLE_SHARE) - 2) == 0
    assert driver_threads(peak, 0.0, 64 * 2**30) == 0
    assert available_memory() is None or 0 < available_memory() < 2**50  # type: ignore[operator]


# the driver path's peak above the process's size before it (ru_maxrss; two tables at a time, then one), measured by
# running ``driver.each_table`` alone in a fresh process on lakes the load generators' captures made (2026-12-03)
MEASURED_PEAKS_MIB = [
    ({"frames": 1_849_939, "deliveries": 449_747, "flow_events": 748_816, "connections": 10_006}, 2260, 1783),  # 0-9-1 300 MB
    ({"frames": 12_398_735, "deliveries": 3_209_759, "flow_events": 5_402_882, "connections": 10_008}, 8649, None),  # 2 GB
    ({"frames": 206_562, "deliveries": 113_225, "flow_events": 236_186, "connections": 2_007}, 866, 694),  # 1.0 100 MB
    ({"frames": 1_804_559, "deliveries": 1_208_102, "flow_events": 2_442_649, "connections": 2_008}, 4377, 3858),  # 1.0 1 GB
]


@pytest.mark.parametrize("counts, two, one", MEASURED_PEAKS_MIB)
def test_the_memory_estimate_covers_the_peaks_measured_on_both_dialects(counts, two, one):
    """An estimate under a peak lets a driver run out of memory; far over it sends lakes to Spark that fit. The
    former estimate (600 bytes a frame + delivery, fitted on the 0-9-1 load alone) put the 1 GB 1.0 lake at 1.7 GB."""
    from amqplens.jobs.metrics.job import ONE_TABLE_SHARE, driver_peak

    estimate = driver_peak(counts) / 2**20
    assert two <= estimate <= 1.35 * two
    if one is not None:
        assert one <= estimate * ONE_TABLE_SHARE <= 1.35 * one


def test_a_time_the_driver_cannot_write_as_spark_sends_the_stage_to_spark():
    """Spark writes any year; Python's calendar only 1-9999 (the capture readers clamp into 1970..9999, so only a
    lake written by something else could hold one)."""
    assert driver._ts_text(0) == "1970-01-01 00:00:00"
    assert driver._ts_text(1_500_000) == "1970-01-01 00:00:01.5"
    assert driver._ts_text(-1) == "1969-12-31 23:59:59.999999"
    with pytest.raises(driver.Unsupported):
        driver._ts_text(2**62)
