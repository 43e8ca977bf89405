"""The tests' session evaluates Spark SQL interpreted (tests/conftest.py); the pipeline runs compiled. Here the metrics
stage both ways on a real capture writes the same rows, and ``session.sql_settings`` (a stage's SQL settings for
its duration) restores what it changed, a failing stage too."""

from __future__ import annotations

import shutil

import pytest

from amqplens.contracts import table
from amqplens.jobs import ingest_captures, metrics
from amqplens.lake.store import TableStore
from amqplens.session import sql_settings
from tests.conftest import COMPILED, DATA, INTERPRETED

pytestmark = pytest.mark.spark

METRIC_TABLES = ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")


def test_the_tests_session_is_interpreted(spark):
    assert {k: spark.conf.get(k) for k in INTERPRETED} == INTERPRETED


def test_sql_settings_restore_a_set_value_and_unset_an_unset_one(spark):
    key, unset = "spark.sql.execution.arrow.maxBytesPerBatch", "spark.sql.codegen.factoryMode"
    before = spark.conf.get(unset)
    spark.conf.set(key, "1000")
    spark.conf.unset(unset)
    try:
        with pytest.raises(RuntimeError):
            with sql_settings(spark, {key: "2000", unset: "CODEGEN_ONLY"}):
                assert (spark.conf.get(key), spark.conf.get(unset)) == ("2000", "CODEGEN_ONLY")
                raise RuntimeError("a failing stage")
        assert spark.conf.get(key) == "1000"
        assert spark.conf.get(unset) == "FALLBACK"  # unset: Spark's own default again
    finally:
        spark.conf.unset(key)
        spark.conf.set(unset, before)


def _rows(store, name):
    cols = [c for c in table(name).column_names if c != "run_id"]
    return sorted(store.read_arrow(name, cols).to_pylist(), key=lambda r: r["metric_row_id"])


def test_interpreted_and_compiled_metrics_are_the_same_rows(spark, conf, tmp_path):
    """A real-broker capture (a consumer's deliveries and acks, channel errors: every metric table has rows): its
    metrics stage interpreted and compiled writes the same rows in all four tables."""
    lake = tmp_path / "base"
    ingest_captures.run(spark, conf.with_overrides(lake__root=str(lake)), [str(DATA / "broker" / "channel_error.pcap")],
                        run_id="c")
    (cid,) = [r["capture_id"] for r in TableStore(spark, str(lake)).read_arrow("captures", ["capture_id"]).to_pylist()]
    out = {}
    for mode, settings in (("interpreted", INTERPRETED), ("compiled", COMPILED)):
        shutil.copytree(lake, tmp_path / mode)
        with sql_settings(spark, settings):
            assert metrics.run(spark, conf.with_overrides(lake__root=str(tmp_path / mode), metrics__engine="spark"),
                               run_id="m") == [cid]
        s = TableStore(spark, str(tmp_path / mode))
        out[mode] = {name: _rows(s, name) for name in METRIC_TABLES}
    assert all(out["compiled"][name] for name in METRIC_TABLES), {n: len(r) for n, r in out["compiled"].items()}
    assert out["interpreted"] == out["compiled"]
