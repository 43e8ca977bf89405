"""End-to-end latency when every message has the same body and no message-id (issue 19).

A capture of one connection: a consumer on queue q (channel 2) and a publisher (channel 1) sending N identical
bodies to exchange ex, routing key rk, with no message-id. The queue is modelled here in plain Python (FIFO, a nack
with requeue puts the message back at the head and it comes again with redelivered set); the publish and delivery
times are read back from the pcap's packets with dpkt, not from our tables. Bad input tried: three deliveries before
any publish (messages published before the capture started: they must count in missing, not take a publish), and
requeued messages (a redelivery must take its first delivery's publish).

The old matching (a range join p_ts <= sent_ts on the body hash) made N^2/2 candidate rows here; the largest row
count of any operator of the end-to-end plan, read from Spark's SQL metrics, must grow like N.
"""

from __future__ import annotations

import collections
import io
import random
import statistics

import dpkt
import numpy as np
import pytest

from amqplens.jobs import ingest_captures
from amqplens.jobs import lifecycle
from amqplens.jobs import metrics
from amqplens.lake.store import TableStore
from amqplens.jobs.metrics import deliveries_with_queue
from amqplens.jobs.metrics.e2e import end_to_end, end_to_end_windows
from tests.v0_9_1.encoder import Encoder
from tests.v1_0.pcap_writer import connection_pcap

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

BODY = b'{"event":"tick","v":1}'
EARLY = 3  # deliveries of messages published before the capture
SIZES = (1000, 2000)


def _turns(n: int, seed: int) -> list:
    e = Encoder()
    c, s = "to_server", "to_client"
    t = [(c, e.protocol_header()),
         (s, e.method(0, "connection", "start", version_major=0, version_minor=9, server_properties={"product": "RabbitMQ"},
                      mechanisms="PLAIN", locales="en_US")),
         (c, e.method(0, "connection", "start-ok", client_properties={}, mechanism="PLAIN", response="\0u\0p", locale="en_US")),
         (s, e.method(0, "connection", "tune", channel_max=0, frame_max=131072, heartbeat=0)),
         (c, e.method(0, "connection", "tune-ok", channel_max=0, frame_max=131072, heartbeat=0)),
         (c, e.method(0, "connection", "open", virtual_host="/", reserved_1="", reserved_2=False)),
         (s, e.method(0, "connection", "open-ok", reserved_1=""))]
    for ch in (1, 2):
        t += [(c, e.method(ch, "channel", "open", reserved_1="")), (s, e.method(ch, "channel", "open-ok", reserved_1=""))]
    t += [(c, e.method(2, "basic", "consume", reserved_1=0, queue="q", consumer_tag="ct", no_local=False, no_ack=False,
                       exclusive=False, no_wait=False, arguments={})),
          (s, e.method(2, "basic", "consume-ok", consumer_tag="ct"))]

    def message(direction, ch, method):
        return direction, method + e.header(ch, 60, len(BODY), {"content_type": "application/json"}) + e.body(ch, BODY)

    rng = random.Random(seed)
    queue = collections.deque(["early"] * EARLY)  # what the broker holds: redelivered flags
    tag, published = 0, 0
    while published < n or queue:
        # the early ones go first: a delivery of a message published before the capture can only be told
        # apart from one published in it while no publish of its key has been seen (the rule's limit)
        if queue and (published == n or tag < EARLY or rng.random() < 0.45):
            what = queue.popleft()
            redelivered = what == "again"
            tag += 1
            t.append(message(s, 2, e.method(2, "basic", "deliver", consumer_tag="ct", delivery_tag=tag,
                                             redelivered=redelivered, exchange="ex", routing_key="rk")))
            if what != "early" and rng.random() < 0.03:  # requeued: back to the head, delivered again next
                t.append((c, e.method(2, "basic", "nack", delivery_tag=tag, multiple=False, requeue=True)))
                queue.appendleft("again")
            else:
                t.append((c, e.method(2, "basic", "ack", delivery_tag=tag, multiple=False)))
        else:
            t.append(message(c, 1, e.method(1, "basic", "publish", reserved_1=0, exchange="ex", routing_key="rk",
                                             mandatory=False, immediate=False)))
            published += 1
            queue.append("new")
    return t


def expected_latencies(pcap: bytes) -> tuple[list[int], int]:
    """From the packets alone: each delivery's latency (us) in FIFO order with requeues, and the unmatched count."""
    pubs, lat, unmatched, requeued = collections.deque(), [], 0, []
    delivered: dict[int, int | None] = {}  # delivery tag -> publish time (None: published before the capture)
    for ts, buf in dpkt.pcap.Reader(io.BytesIO(pcap)):
        p = dpkt.ethernet.Ethernet(buf).data.data.data
        if len(p) < 12 or p[0] != 1:
            continue
        us = round(ts * 1_000_000)
        cls, meth = int.from_bytes(p[7:9], "big"), int.from_bytes(p[9:11], "big")
        if (cls, meth) == (60, 40):  # basic.publish
            pubs.append(us)
        elif (cls, meth) == (60, 60):  # basic.deliver: consumer tag (shortstr), then delivery tag, redelivered
            k = 11 + 1 + p[11]
            tag, redelivered = int.from_bytes(p[k:k + 8], "big"), bool(p[k + 8] & 1)
            if redelivered:
                origin = requeued.pop()  # the requeued message comes next
            elif EARLY > len(delivered):
                origin = None
            else:
                origin = pubs.popleft()
            delivered[tag] = origin
            if origin is None:
                unmatched += 1
            else:
                lat.append(us - origin)
        elif (cls, meth) == (60, 120):  # basic.nack (requeue)
            requeued.append(delivered[int.from_bytes(p[11:19], "big")])
    return lat, unmatched


def max_operator_rows(df) -> int:
    """The largest 'number of output rows' of any operator of ``df``'s executed plan (after an action on it)."""
    best, stack = 0, [df._jdf.queryExecution().executedPlan()]
    while stack:
        node = stack.pop()
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            stack.append(node.executedPlan())
            continue
        if name.endswith("QueryStageExec"):
            stack.append(node.plan())
            continue
        m = node.metrics()
        if m.contains("numOutputRows"):
            best = max(best, int(m.apply("numOutputRows").value()))
        kids = node.children()
        stack += [kids.apply(i) for i in range(kids.size())]
    return best


@pytest.fixture(scope="module")
def identical_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("identical_lake")
    c = conf.with_overrides(lake__root=str(lake))
    paths, pcaps = [], {}
    for n in SIZES:
        pcap = connection_pcap(_turns(n, seed=n), mss=1400)
        path = lake.parent / f"identical_{n}.pcap"
        path.write_bytes(pcap)
        paths.append(str(path))
        pcaps[n] = (ingest_captures.capture_files([str(path)])[0].capture_id, pcap)
    ingest_captures.run(spark, c, paths, run_id="i")
    lifecycle.run(spark, c, run_id="i")
    metrics.run(spark, c, run_id="i")
    return TableStore(spark, str(lake)), pcaps


@pytest.mark.parametrize("n", SIZES)
def test_latencies_match_fifo_order_worked_out_from_the_packets(identical_lake, n):
    store, pcaps = identical_lake
    cid, pcap = pcaps[n]
    lat, unmatched = expected_latencies(pcap)
    assert len(lat) + unmatched > n + EARLY and unmatched == EARLY  # some requeues happened, and the early ones
    (r,) = store.read("metrics_latency").where(
        f"capture_id = '{cid}' and bucket_seconds = 0 and entity_kind = 'capture' and metric = 'end_to_end'").collect()
    assert (r["count"], r.missing, r.max_us) == (len(lat), unmatched, max(lat))
    assert r.mean_us == pytest.approx(statistics.fmean(lat))
    for q, col in ((50, "p50_us"), (90, "p90_us"), (99, "p99_us")):
        assert r[col] == pytest.approx(np.percentile(lat, q))
    assert r.exact


def test_largest_intermediate_grows_linearly(identical_lake, spark):
    store, pcaps = identical_lake
    frames = store.read("frames")
    rows, inputs = {}, {}
    for n in SIZES:
        where = f"capture_id = '{pcaps[n][0]}'"
        d = deliveries_with_queue(store.read("deliveries").where(where), frames.where(where))
        df = end_to_end(d)
        assert len(df.collect()) > n  # every delivery from the broker, once
        rows[n] = max_operator_rows(df)
        inputs[n] = store.read("deliveries").where(where).count() + frames.where(where).count()
    # input: n publishes, about n deliveries and their frames; a range join on the one body would make about n^2 / 2
    # candidate pairs (500,000 and 2,000,000 here)
    small, big = SIZES
    assert rows[small] <= inputs[small] and rows[big] <= inputs[big]
    assert rows[big] / rows[small] <= 1.1 * big / small


def test_one_pass_gives_the_rows_of_the_window_reference(identical_lake):
    """``end_to_end`` (one shuffle and a pass per key in Python) against ``end_to_end_windows`` (the rule as Spark
    windows and joins on a rank): the same publish time for every delivery, requeued ones included."""
    store, _ = identical_lake
    d = deliveries_with_queue(store.read("deliveries"), store.read("frames"))
    one = end_to_end(d, partitions=3).select("delivery_id", "p_ts")
    ref = end_to_end_windows(d).select("delivery_id", "p_ts")
    rows = sorted(one.collect())
    assert rows == sorted(ref.collect())
    assert len(rows) == d.where("direction = 'from_broker'").count()
    assert sum(r.p_ts is not None for r in rows) > sum(SIZES)
