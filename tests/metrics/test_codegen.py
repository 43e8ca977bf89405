"""``spark.codegen``: the metrics stage of a small capture runs interpreted under ``auto`` and writes the rows it
writes compiled; the session's settings come back after the stage; the rule's boundaries."""

from __future__ import annotations

import contextlib
import shutil

import pytest

from amqplens.contracts import table
from amqplens.jobs import ingest_captures, metrics
from amqplens.lake.store import TableStore
from amqplens.session import CODEGEN_FROM_ROWS, COMPILED, INTERPRETED, codegen_settings, sql_settings
from tests.conftest import DATA

pytestmark = pytest.mark.spark

METRIC_TABLES = ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")


def test_the_rule_by_rows_and_mode(conf):
    auto = conf.with_overrides(spark__codegen="auto")
    assert codegen_settings(auto, 0) == codegen_settings(auto, CODEGEN_FROM_ROWS - 1) == INTERPRETED
    assert codegen_settings(auto, CODEGEN_FROM_ROWS) == codegen_settings(conf.with_overrides(spark__codegen="on"), 0) == COMPILED
    assert codegen_settings(conf.with_overrides(spark__codegen="off"), 10**9) == INTERPRETED


def test_sql_settings_restore_a_set_value_and_unset_an_unset_one(spark):
    key, unset = "spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode"
    spark.conf.set(key, "true")
    spark.conf.unset(unset)
    with pytest.raises(RuntimeError):
        with sql_settings(spark, INTERPRETED):
            assert (spark.conf.get(key), spark.conf.get(unset)) == ("false", "NO_CODEGEN")
            raise RuntimeError("a failing stage")
    assert spark.conf.get(key) == "true"
    assert spark.conf.get(unset, None) in (None, "FALLBACK")  # unset: Spark's own default again


def _rows(store, name):
    cols = [c for c in table(name).column_names if c != "run_id"]
    return sorted(store.read_arrow(name, cols).to_pylist(), key=lambda r: r["metric_row_id"])


def test_interpreted_and_compiled_metrics_are_the_same_rows(spark, conf, tmp_path, monkeypatch):
    """Two real-broker captures (prefetch, acks, a consumer; channel errors: every metric table has rows) below the
    threshold: ``auto`` runs their metrics interpreted, ``on`` compiled; every row of the four tables is the same, and
    the session's settings are what they were before each stage."""
    lake = tmp_path / "base"
    base = conf.with_overrides(lake__root=str(lake))
    ingest_captures.run(spark, base, [str(DATA / "broker" / f"{n}.pcap") for n in ("consume_prefetch_ack", "channel_error")],
                        run_id="c")
    store = TableStore(spark, str(lake))
    ids = sorted(r["capture_id"] for r in store.read_arrow("captures", ["capture_id"]).to_pylist())
    assert len(ids) == 2 and store.rows("frames", ids) + store.rows("deliveries", ids) < CODEGEN_FROM_ROWS
    from amqplens.jobs.metrics import job

    seen = []  # what the stage set while it ran: the settings themselves, read from the session inside the block
    inner = job.sql_settings

    @contextlib.contextmanager
    def watched(session, settings):
        with inner(session, settings):
            seen.append({k: session.conf.get(k) for k in INTERPRETED})
            yield

    monkeypatch.setattr(job, "sql_settings", watched)
    out = {}
    for mode in ("auto", "on"):
        shutil.copytree(lake, tmp_path / mode)
        c = conf.with_overrides(lake__root=str(tmp_path / mode), spark__codegen=mode)
        before = {k: spark.conf.get(k, None) for k in INTERPRETED}
        assert sorted(metrics.run(spark, c, run_id="m")) == ids
        assert {k: spark.conf.get(k, None) for k in INTERPRETED} == before
        s = TableStore(spark, str(tmp_path / mode))
        out[mode] = {name: _rows(s, name) for name in METRIC_TABLES}
    assert seen == [INTERPRETED, COMPILED]
    assert all(out["auto"][name] for name in METRIC_TABLES), {n: len(r) for n, r in out["auto"].items()}
    assert out["auto"] == out["on"]
