"""The report's two engines compared: every query's frame and every page's text (used on the metrics lake and on the
logs lake, which has broker events, alarms and findings)."""

from __future__ import annotations

import pathlib
import re

import pandas as pd

GENERATED = re.compile(r"generated \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")


def queries_agree(store, conf) -> dict[str, object]:
    """Each query of the report through Spark and on the driver: equal frames (dtypes included) and dicts; returns
    the Spark results by name."""
    from amqplens import report

    spark_q, driver_q = report.queries("spark", store), report.queries("driver", store)
    n, points = conf["report.busiest"], conf["report.max_points"]
    got: dict[str, object] = {}

    def both(name: str, call) -> object:
        a, b = call(spark_q), call(driver_q)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            if isinstance(x, pd.DataFrame):
                pd.testing.assert_frame_equal(x, y, obj=name)
            else:
                assert x == y, name
        got[name] = a
        return a

    both("latency_stats", lambda q: q.latency_stats())
    inflight = both("inflight", lambda q: q.busiest_series("channel", "deliver", ["in_flight", "prefetch_count"], n, points))
    credit = both("credit", lambda q: q.busiest_series("link", "transfer", ["link_credit"], n, points))
    # fewer points than events: the slots' maxima
    both("inflight_3", lambda q: q.busiest_series("channel", "deliver", ["in_flight"], 2, 3))
    both("outcomes", lambda q: q.outcomes())
    ids = sorted(set(inflight.connection_id) | set(credit.connection_id))
    both("entity_labels", lambda q: q.entity_labels(("channel", "link"), ids))
    both("top_tables", lambda q: q.top_tables(conf["report.top_n"]))
    conns = both("connections", lambda q: q.connections(conf["report.connection_pages"]))
    every = list(conns.connection_id)
    both("broker_event_rows", lambda q: q.broker_event_rows(every))
    both("alarm_rows", lambda q: q.alarm_rows())
    both("blocked_and_errors", lambda q: q.blocked_and_errors(every, 2000))
    both("blocked_and_errors_1", lambda q: q.blocked_and_errors(every, 1))  # the per-connection cap
    paged = list(conns[conns.page].connection_id)
    both("lifecycle_frames", lambda q: q.lifecycle_frames(paged, 2000))
    both("lifecycle_frames_2", lambda q: q.lifecycle_frames(paged, 2))
    both("connection_metrics", lambda q: q.connection_metrics(paged))
    return got


def pages_agree(spark, conf, out: pathlib.Path, spark_side: dict | None = None) -> dict[pathlib.Path, str]:
    """The report written by each engine: the same files, each page the same text less its generation time.
    ``spark_side``: the overrides that send the reference to Spark (default ``report.engine=spark``)."""
    from amqplens import report

    pages = {}
    for engine, overrides in (("spark", spark_side or {"report__engine": "spark"}), ("driver", {"report__engine": "driver"})):
        folder = out / engine
        report.run(spark, conf.with_overrides(**overrides), str(folder))
        pages[engine] = {p.relative_to(folder): GENERATED.sub("", p.read_text()) for p in folder.rglob("*.html")}
    assert pages["spark"].keys() == pages["driver"].keys()
    for name, text in pages["spark"].items():
        assert pages["driver"][name] == text, name
    return pages["spark"]
