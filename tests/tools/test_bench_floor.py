"""``tools.bench_floor``: the figures it prints come from real writes and real decoder calls (no Spark)."""

from __future__ import annotations

import pathlib
import re

import pytest

from amqplens.decode.v0_9_1 import hotpath
from tools import bench_floor

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHURN = ROOT / "tests" / "data" / "broker" / "churn.pcap"  # many short connections of a real RabbitMQ: handshakes

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed: only the Python path exists")


def _figures(out: str) -> dict[str, tuple[float, int | None]]:
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s*(.+?): ([0-9.]+) CPU s = [0-9.]+ us/frame(?: \((\d+) calls\))?$", line)
        if m:
            got[m.group(1)] = (float(m.group(2)), int(m.group(3)) if m.group(3) else None)
    return got


def test_the_floor_of_a_capture_of_short_connections(capsys):
    assert bench_floor.main([str(CHURN), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    frames = int(re.search(r"^(\d+) frames$", out, re.M).group(1))
    got = _figures(out)
    assert frames > 100
    for name in ("frames write", "lifecycle write", "decode + batches (one run)"):
        assert got[name][0] > 0, name
    calls = got["reference decoder's frame calls"][1]
    hot = got["of them of a kind the walk takes (0-9-1)"][1]
    # every connection's protocol header and connection-class methods go through the reference: at least 8 a
    # connection (header, start, start-ok, tune, tune-ok, open, open-ok on one side or the other, ...)
    assert calls is not None and hot is not None and 8 <= calls <= frames and 0 <= hot < calls
    # the wrappers are gone afterwards: the decoder's methods are its own again
    from amqplens.decode.v0_9_1.stream import Amqp091StreamDecoder
    assert not hasattr(Amqp091StreamDecoder.on_frame, "__wrapped__") and Amqp091StreamDecoder.on_frame.__name__ == "on_frame"


def test_the_hot_kinds_are_the_walks():
    publish = bytes([0, 60, 0, 40]) + b"\0" * 8
    assert bench_floor._hot_kind((None, 0, 0, "method", 1, publish, 20))
    assert bench_floor._hot_kind((None, 0, 0, "body", 1, b"x", 9))
    assert not bench_floor._hot_kind((None, 0, 0, "method", 0, bytes([0, 10, 0, 10]), 20))  # connection.start
    assert not bench_floor._hot_kind((None, 0, 0, "method", 1, bytes([0, 60, 0, 10]), 20))  # basic.qos
    assert not bench_floor._hot_kind((None, 0, 0, 0x10, 0, b"", 8))  # a 1.0 frame type: not classified
