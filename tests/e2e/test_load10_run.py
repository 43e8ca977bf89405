"""AMQP 1.0 under load (tools/gen_load10.py) through a whole ``amqplens run``: every stage, counts from the generator.

The capture: SASL and both protocol headers on every connection, 2 senders and 2 receivers with credit, 40 short
connections, dispositions for runs of deliveries, released and rejected messages, messages over several
transfers. The run must exit 0 (no failed capture, no broken invariant) and its tables must hold what the generator
wrote: one frame row per frame and performative, one delivery per message with the outcome it was settled with,
link credit rows for the receivers' flows, and the report.
"""

from __future__ import annotations

import collections

import pyarrow.compute as pc
import pytest

from amqplens import cli
from amqplens.lake.store import TableStore
from tools.gen_load10 import generate_load10

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("load10")
    (d / "in").mkdir()
    truth = generate_load10(d / "in" / "load10.pcap", 2, seed=11, short=40, sidecar=False)
    code = cli.main(["run", "--input", str(d / "in"), "--lake", str(d / "lake"), "--run-id", "load10",
                     "--set", f"report.out={d / 'report'}", "--set", "spark.master=local[2]",
                     "--set", "spark.shuffle_partitions=2"])
    return code, truth, TableStore(None, str(d / "lake")), d


def _table(store, name):
    return store.delta(name).to_pyarrow_table()


def test_the_run_exits_0_and_writes_its_report(run):
    code, _, _, d = run
    assert code == 0
    assert (d / "report" / "index.html").exists()


def test_every_frame_and_performative(run):
    _, truth, store, _ = run
    frames = _table(store, "frames")
    by_type = collections.Counter(frames.column("frame_type").to_pylist())
    assert dict(by_type) == {k: v for k, v in truth["frames_by_type"].items() if v}
    performatives = collections.Counter(p for p in frames.column("performative").to_pylist() if p)
    assert dict(performatives) == truth["performatives"]
    assert pc.sum(pc.is_valid(frames.column("decode_error"))).as_py() in (0, None)


def test_one_delivery_per_message_settled_as_generated(run):
    _, truth, store, _ = run
    deliveries = _table(store, "deliveries")
    assert deliveries.num_rows == truth["messages_published"] + truth["messages_delivered"]
    outcomes = collections.Counter(deliveries.column("outcome").to_pylist())
    assert outcomes["released"] == truth["messages_released"] and outcomes["rejected"] == truth["messages_rejected"]
    assert outcomes["accepted"] == deliveries.num_rows - outcomes["released"] - outcomes["rejected"]
    latency = deliveries.column("settle_latency_us").to_pylist()
    assert all(v is not None and v >= 0 for v in latency)


def test_link_credit_rows_for_every_flow_of_a_link(run):
    _, truth, store, _ = run
    flow = _table(store, "flow_events")
    links = flow.filter(pc.equal(flow.column("entity"), "link"))
    # a flow with a handle is a credit row (the receiver's) or a flow row (the sender's); every link flow has one
    granted = collections.Counter(links.column("event").to_pylist())
    assert granted["credit"] + granted["flow"] == truth["performatives"]["flow"]
    assert granted["transfer"] == truth["messages_published"] + truth["messages_delivered"]
