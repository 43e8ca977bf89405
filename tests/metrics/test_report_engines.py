"""The report's queries on the driver (``report.engine``) against Spark's, the reference: every query's frame and every
page the same on the fixtures' lake (real brokers' captures and the demo); ``auto`` goes to Spark past
``report.driver_max_rows``. Bad input tried: tables the lake does not have (findings, broker_events: no rows either
way), a per-connection cap of 1 and 2 rows, series of 3 points for channels with more events."""

from __future__ import annotations

import logging

import pytest

from tests.metrics.engines import pages_agree, queries_agree

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def test_every_query_gives_the_same_frame_on_both_engines(metrics_lake):
    conf, store, _ = metrics_lake
    got = queries_agree(store, conf)
    # the comparison saw data: latencies of several kinds, series, paged connections with their frames and metrics
    assert len(got["latency_stats"]) > 5 and len(got["inflight"]) > 10
    conns = got["connections"]
    assert conns.page.sum() > 5
    frames, _ = got["lifecycle_frames"]
    lat, out = got["connection_metrics"]
    assert len(frames) > 50 and len(lat) > 10 and len(out) > 10
    assert len(got["lifecycle_frames_2"][0]) <= 2 * conns.page.sum() < len(frames)


def test_both_engines_write_the_same_pages_and_auto_goes_to_spark_past_the_cap(spark, metrics_lake, tmp_path, caplog):
    """The Spark side is ``auto`` past its cap (``report.driver_max_rows=1``): the reference, and the cap's branch."""
    conf, _, _ = metrics_lake
    with caplog.at_level(logging.INFO, logger="amqplens.report"):
        pages = pages_agree(spark, conf, tmp_path, spark_side={"report__engine": "auto", "report__driver_max_rows": 1})
    assert "more than report.driver_max_rows=1 rows kept" in caplog.text and "through Spark" in caplog.text
    assert len(pages) > 10  # the overview and the connection pages
