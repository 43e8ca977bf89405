"""The overview's PNGs drawn in processes of their own (``report.png_processes``, amqplens/report/painter.py) against
the same PNGs drawn on the driver's thread (``report.png_processes=0``, the reference): the same bytes, the same pages.
Bad input tried: a PNG process killed before the report (every PNG drawn on the driver instead, with a warning); one
stopped (SIGSTOP: no answer; ended after the timeout, the driver draws every PNG); a figure the process cannot draw
(an unknown kind: the error comes back, and the process draws the next figure, an empty frame's "no deliveries")."""

from __future__ import annotations

import logging
import os
import re
import signal

import numpy as np
import pandas as pd
import pytest

from amqplens.report import painter as painters
from amqplens.report.plots import vals

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

FIGURES = ("latency", "inflight", "credit", "settlement", "timeline")


def _report(spark, conf, out, processes: int):
    from amqplens import report

    page = report.run(spark, conf.with_overrides(report__png_processes=processes), str(out))
    text = re.sub(r"generated [^.]+\.", "generated (time).", page.read_text())
    return text, {name: (out / f"{name}.png").read_bytes() for name in FIGURES}


def test_png_processes_draw_what_the_driver_draws(spark, metrics_lake, tmp_path):
    conf, _, _ = metrics_lake
    text0, pngs0 = _report(spark, conf, tmp_path / "driver", 0)
    text2, pngs2 = _report(spark, conf, tmp_path / "processes", 2)
    assert text2 == text0
    for name in FIGURES:
        assert pngs0[name][:8] == b"\x89PNG\r\n\x1a\n" and len(pngs0[name]) > 5000, name
        assert pngs2[name] == pngs0[name], name  # Agg is deterministic: a forked process draws the same pixels


def test_a_dead_png_process_leaves_the_pngs_to_the_driver(spark, metrics_lake, tmp_path, caplog):
    conf, _, _ = metrics_lake
    _, reference = _report(spark, conf, tmp_path / "driver", 0)
    painters.prestart(2)
    helper = painters._prestarted
    assert helper is not None
    os.kill(helper._proc.pid, signal.SIGKILL)
    helper._proc.wait()
    with caplog.at_level(logging.WARNING, logger="amqplens.report"):
        _, pngs = _report(spark, conf, tmp_path / "killed", 2)
    assert pngs == reference
    assert caplog.text.count("did not draw") == len(FIGURES) and "drawn on the driver" in caplog.text


def test_a_stuck_png_process_is_ended_and_the_driver_draws(spark, metrics_lake, tmp_path, caplog, monkeypatch):
    from amqplens import report

    conf, _, _ = metrics_lake
    _, reference = _report(spark, conf, tmp_path / "driver", 0)
    painters.prestart(2)
    helper = painters._prestarted
    assert helper is not None
    os.kill(helper._proc.pid, signal.SIGSTOP)  # alive, answering nothing
    monkeypatch.setattr(report, "PNG_TIMEOUT_S", 3)
    with caplog.at_level(logging.WARNING, logger="amqplens.report"):
        _, pngs = _report(spark, conf, tmp_path / "stuck", 2)
    assert pngs == reference
    assert "no answer within 3 s" in caplog.text and caplog.text.count("did not draw") == len(FIGURES)
    assert helper.wait(30) and helper._proc.returncode == -signal.SIGKILL  # ended, not left behind


def test_a_figure_the_process_fails_on_comes_back_as_an_error(tmp_path):
    painter = painters.Painter(1)
    try:
        bad = painter.submit("no_such_kind", (), "title", (4, 3), str(tmp_path / "x.png"))
        with pytest.raises(RuntimeError, match="KeyError"):
            bad.result(timeout=120)
        good = painter.submit("outcomes", (pd.DataFrame({"dialect": [], "direction": [], "value": [], "n": []}),),
                              "empty", (4, 3), str(tmp_path / "empty.png"))
        assert good.result(timeout=120) is None  # the process lives on after a failed figure
        assert (tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        painter.stop()
        assert painter.wait(60)


def test_columns_become_plotly_values_as_row_by_row():
    """``vals``' whole-column path (datetime64, float, int, bool Series) against its row-by-row path (a list)."""
    ts = pd.Series(pd.to_datetime(["2026-11-25 19:26:05.123456789", None, "1969-12-31 23:59:59.999999999",
                                   "2262-04-11 23:47:16.854775807", "1970-01-01 00:00:00.000000"]))
    for series in (ts, pd.Series([1.5, np.nan, -0.0, 1e300]), pd.Series([3, -1, 0], dtype="int64"),
                   pd.Series([True, False]), pd.Series([1, None], dtype="Int64"), pd.Series(["a", None], dtype=object),
                   ts.iloc[:0], pd.Series([], dtype="float64")):
        assert vals(series) == vals(list(series)), series.dtype
    assert vals(ts)[:2] == ["2026-11-25 19:26:05.123456", None]
