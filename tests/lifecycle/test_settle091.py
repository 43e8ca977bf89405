"""The 0-9-1 settlement array pass (``lifecycle.settle091``, a prototype) against the machines, the reference.

Every capture fixture's frames go through the machines (``LifecycleRunner``) and through the pass; every
publish or delivery the pass settles on a channel it supports must have the machines' outcome, settled time
and settling frame, and every one the machines settle with an outcome the pass knows (acked, nacked, rejected,
confirmed, nacked by the broker) on such a channel must be settled by the pass. Bad input is the fixtures'
own: fuzz findings, captures cut mid-connection, acks of unknown tags, tags that restart, channels reopened.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from amqplens.decode.v0_9_1 import hotpath
from amqplens.lifecycle.batches import FRAME_COLUMNS
from amqplens.lifecycle.runner import LifecycleRunner
from tests.lifecycle.captures import DATA, frames_of

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed")

CAPTURES = sorted(p for p in DATA.rglob("*.pcap*") if "tls" not in p.parts)


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{c: r.get(c) for c in FRAME_COLUMNS} for r in rows])


def _compared(rows):
    """The settlement pass on ``rows`` against the machines' deliveries (the reference)."""
    from amqplens.lifecycle import settle091

    runner = LifecycleRunner()
    runner.feed(sorted(rows, key=lambda r: (r["connection_id"], r["ts_us"], r["stream_offset"], r["direction"])))
    runner.finish()
    table = _table(rows)
    return settle091.compare(table, settle091.settle(table), runner.drain_deliveries())


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(DATA)))
def test_the_pass_settles_as_the_machines_do(path):

    rows = [r for r in frames_of(path) if r.get("dialect") in ("0-8", "0-9", "0-9-1")]
    if not rows:
        pytest.skip("no 0-9-1 frames")
    got = _compared(rows)
    assert got["different"] == [] and got["missed"] == []


def test_the_pass_settles_some_of_the_demo_itself():
    """Not a pass that leaves everything to the machines: some of the demo capture's settlements are the pass's."""

    rows = frames_of(DATA / "demo" / "demo.pcap") if (DATA / "demo" / "demo.pcap").exists() else []
    if not rows:
        pytest.skip("no demo capture under tests/data/demo")
    got = _compared(rows)
    assert len(got["same"]) > 50 and got["different"] == [] and got["missed"] == []
