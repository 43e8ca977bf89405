"""AMQP 1.0 under load (tools/gen_load10.py) through a whole ``amqplens run``: every stage, counts from the generator.

The capture: SASL and both protocol headers on every connection, 2 senders and 2 receivers with credit, 40 short
connections, dispositions for runs of deliveries, released and rejected messages, messages over several
transfers. The run must exit 0 (no failed capture, no broken invariant) and its tables must hold what the generator
wrote: one frame row per frame and performative, one delivery per message with the outcome it was settled with,
link credit rows for the receivers' flows, whole-capture metrics that count the same (settle latencies, a
request/response pair per connection and performative, the receivers' outcomes), and the report.
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


def _whole(metrics):
    """The capture's whole-capture rows of a metrics table."""
    return metrics.filter(pc.and_(pc.equal(metrics.column("entity_kind"), "capture"), pc.equal(metrics.column("bucket_seconds"), 0)))


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


def test_whole_capture_metrics_count_what_the_generator_sent(run):
    """The capture's whole-capture rows (bucket_seconds 0): settle latencies for every transfer both ways, none
    missing; a request/response pair per connection for open, begin, attach, detach, end and close; the
    settlement outcomes the receivers chose."""
    _, truth, store, _ = run
    latency = _whole(_table(store, "metrics_latency")).to_pylist()
    settle = {r["direction"]: (r["count"], r["missing"]) for r in latency if r["metric"] == "transfer_settle"}
    assert settle == {"to_broker": (truth["messages_published"], 0), "from_broker": (truth["messages_delivered"], 0)}
    pairs = {r["method"]: r["count"] for r in latency if r["metric"] == "request_response"}
    n = len(truth["connections"])
    assert pairs == dict.fromkeys(("open", "begin", "attach", "detach", "end", "close"), n)
    outcome = {(r["direction"], r["value"]): r["count"] for r in _whole(_table(store, "metrics_settlement")).to_pylist()
               if r["measure"] == "outcome"}
    assert outcome[("to_broker", "accepted")] == truth["messages_published"]
    assert outcome.get(("from_broker", "released"), 0) == truth["messages_released"] > 0
    assert outcome.get(("from_broker", "rejected"), 0) == truth["messages_rejected"]
