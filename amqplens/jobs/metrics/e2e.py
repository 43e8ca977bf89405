"""End-to-end latency: each delivery from the broker matched to its publish, in linear time.

The rule (docs: amqplens/contracts/metrics.py, metric ``end_to_end``):

- A message's match key is its message-id where it has one, else its body
  hash with where it was sent: (exchange, routing key) for 0-8/0-9/0-9-1 and
  0-10, the link address for 1.0.
- Queues are FIFO: in each queue, the first deliveries (``redelivered`` not
  set) of a key take the publishes of that key in time order. The n-th first
  delivery takes the n-th publish, unless fewer publishes of the key had been
  sent by the time of the delivery; then it is unmatched (published before the
  capture started, or by a client not captured) and takes none.
- A redelivery takes the message of a requeued delivery of its key and queue
  (nack/reject with requeue, basic.recover, unacked at close, 1.0/0-10
  released or modified), in the same way and order, and so the publish of
  that delivery's message.
- Unmatched deliveries have no value and count in ``missing``; nothing is
  guessed.

How it runs: the publishes, the deliveries from the broker and one "requeued"
event per requeued delivery go through one shuffle by (capture, key), sorted by
time within each key, and one pass over each partition's events in arrays
(``fifo_columns``: the n-th first delivery's rank by a prefix minimum per key
and queue, no Python per event) applies the rule; the rare keys with a requeue
or a redelivery, and the reference the tests compare with, go event by event
(``fifo_pass``). A delivery's own columns ride along, so nothing is joined back.
Rows: the publishes + the deliveries + the requeues, once each; the pass holds
its partition's events (the metrics job sizes the partitions by rows). The same rule as
Spark windows and equi-joins on (key, rank) (``end_to_end_windows``, six
shuffles) stays as the reference a test compares the pass with.
"""

from __future__ import annotations

import functools

import numpy as np

from amqplens.jobs.metrics.fifo_events import AGAIN, FIRST, HOPS, NULL_US, PUBLISH, REQUEUE, key_starts

REQUEUED = ("nacked_requeue", "rejected_requeue", "recovered", "requeued_on_close", "released", "modified")


def match_key(F):
    """The message's identity as far as the wire shows it (null: cannot be matched)."""
    ten = F.col("dialect") == "1.0"
    where = F.when(ten, F.concat_ws("\x1f", F.lit("1.0"), F.coalesce("queue", F.lit("")))).otherwise(
        F.concat_ws("\x1f", F.lit("x"), F.coalesce("exchange", F.lit("")), F.coalesce("routing_key", F.lit(""))))
    by_body = F.when(F.col("body_sha256").isNotNull(), F.concat_ws("\x1f", F.lit("b"), where, "body_sha256"))
    return F.when(F.col("message_id").isNotNull(), F.concat(F.lit("m\x1f"), F.col("message_id"))).otherwise(by_body)


def fifo_take(supply, demand, key, sub):
    """Each demand row's rank among the supply of its key in FIFO order, or null when none was left.

    supply: (key..., ts, id); demand: (key..., sub..., ts, id, more). Within each (key, sub) the j-th
    demand row takes the next supply row not yet taken, provided it was there at the demand's ts.
    With P_k the supply of the key at the time of the k-th demand, the number taken after j demands
    is m_j = j + min(0, min_{k<=j}(P_k - k)), so the j-th takes rank m_j when m_j > m_{j-1}.
    Rows: supply + demand (one window each, no join).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    both = supply.select(*key, "ts", "id", F.lit(1).alias("_s")).unionByName(
        demand.select(*key, "ts", "id", F.lit(0).alias("_s")))
    # supply before demand at the same instant: a publish and its delivery can share a microsecond
    upto = Window.partitionBy(*key).orderBy("ts", F.desc("_s"), "id").rowsBetween(Window.unboundedPreceding, 0)
    avail = both.withColumn("_p", F.sum("_s").over(upto)).where(F.col("_s") == 0).select("id", "_p")
    # rows: demand (the join is on the demand's own unique id)
    d = demand.join(avail, "id")
    w = Window.partitionBy(*key, *sub).orderBy("ts", "id")
    d = d.withColumn("_j", F.row_number().over(w))
    d = d.withColumn("_lo", F.min(F.col("_p") - F.col("_j")).over(w.rowsBetween(Window.unboundedPreceding, 0)))
    d = d.withColumn("_m", F.col("_j") + F.least(F.lit(0), F.col("_lo")))
    took = F.col("_m") > F.coalesce(F.lag("_m").over(w), F.lit(0))
    return d.withColumn("rank", F.when(took, F.col("_m"))).drop("_p", "_j", "_lo", "_m")


def ranked(rows, key):
    """rows with ``rank``: their place among the rows of their key in time order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return rows.withColumn("rank", F.row_number().over(Window.partitionBy(*key).orderBy("ts", "id")))


def end_to_end_windows(deliveries):
    """The reference: ``end_to_end`` as Spark windows and equi-joins on (key, rank). Same rows, six shuffles."""
    from pyspark.sql import functions as F

    d = deliveries.withColumn("_key", match_key(F))
    key = ["capture_id", "_key"]
    pubs = d.where((F.col("direction") == "to_broker") & F.col("_key").isNotNull()).select(
        *key, F.col("sent_ts").alias("ts"), F.col("delivery_id").alias("id"))
    dels = d.where(F.col("direction") == "from_broker")
    # a delivery's queue; without one (its basic.consume not captured), its consumer stands for it
    dels = dels.withColumn("_q", F.coalesce("queue", F.concat_ws("/", "connection_id", "channel", "consumer_tag", "link_name")))
    sub = ["_q"]
    demand = dels.where(F.col("_key").isNotNull()).select(
        *key, *sub, F.col("sent_ts").alias("ts"), F.col("delivery_id").alias("id"),
        F.coalesce("redelivered", F.lit(False)).alias("_re"),
        F.when(F.col("outcome").isin(*REQUEUED), F.coalesce("settled_ts", "sent_ts")).alias("_rq_ts"))

    # first deliveries take publishes; rows: publishes + first deliveries, then a join on (key, rank)
    # whose output is at most one row per first delivery (rank is unique within a key)
    first = fifo_take(pubs, demand.where(~F.col("_re")), key, sub)
    first = first.join(ranked(pubs, key).select(*key, "rank", F.col("ts").alias("p_ts")), [*key, "rank"], "left")
    origin = first.select("id", "p_ts")

    # redeliveries take requeued deliveries of their key and queue: link = (redelivery id, requeued delivery id)
    qkey = [*key, *sub]
    requeues = demand.where(F.col("_rq_ts").isNotNull()).select(*qkey, F.col("_rq_ts").alias("ts"), "id")
    again = fifo_take(requeues, demand.where(F.col("_re")).select(*qkey, "ts", "id"), qkey, [])
    link = again.where(F.col("rank").isNotNull()).join(
        ranked(requeues, qkey).select(*qkey, "rank", F.col("id").alias("prev")), [*qkey, "rank"]).select("id", "prev")
    origin = origin.unionByName(_resolve(link, origin))
    # rows: deliveries (origin holds at most one row per delivery id)
    return dels.join(origin, F.col("delivery_id") == F.col("id"), "left").drop("id", "_key", "_q")


def _resolve(link, origin):
    """p_ts of each redelivery: follow prev back to a first delivery, at most HOPS requeues deep.

    Each hop is an equi-join on a delivery id, at most one row on the right: rows <= redeliveries.
    """
    from pyspark.sql import functions as F

    step = link.select(F.col("id").alias("_via"), F.col("prev").alias("_up"))
    for _ in range(HOPS - 1):
        link = (link.join(step, F.col("prev") == F.col("_via"), "left")
                .select("id", F.coalesce("_up", "prev").alias("prev")))
    return link.join(origin.withColumnRenamed("id", "prev"), "prev").select("id", "p_ts")


# ----------------------------------------------------------------- one pass
_EVENT_COLUMNS = ("_key", "_tsk", "_ev", "_id", "_q", "_rq")


class _Take:
    """One FIFO taker (a queue's first deliveries, or its redeliveries): the rank the next demand row takes.

    With P the supply there at the j-th demand, m_j = j + min(0, min_{k<=j}(P_k - k)); the j-th takes rank m_j
    when m_j > m_{j-1} (the ``fifo_take`` rule, row by row)."""

    __slots__ = ("j", "lo", "m")

    def __init__(self):
        self.j, self.lo, self.m = 0, None, 0

    def take(self, supply: int) -> int | None:
        self.j += 1
        d = supply - self.j
        self.lo = d if self.lo is None or d < self.lo else self.lo
        m = self.j + min(0, self.lo)
        took = m > self.m
        self.m = m
        return m if took else None


class _Key:
    """The state of one (capture, key) while its events pass."""

    def __init__(self) -> None:
        import array

        self.pubs = array.array("q")  # publish times in order (NULL_US: no time)
        self.firsts: dict = {}  # queue -> _Take over the publishes
        self.requeued: dict = {}  # queue -> ids of its requeued deliveries, in requeue order
        self.agains: dict = {}  # queue -> _Take over its requeued deliveries
        self.origin: dict = {}  # requeued first delivery id -> its publish time (None: unmatched)
        self.links: dict = {}  # redelivery id -> the requeued delivery it took
        self.waiting: list = []  # (1-row batch, id) of the redeliveries, answered when the key ends

    def resolve(self, rid: str):
        """A redelivery's publish time: its requeued delivery, followed back at most HOPS requeues."""
        prev = self.links.get(rid)
        if prev is None:
            return None
        for _ in range(HOPS - 1):
            prev = self.links.get(prev, prev)
        return self.origin.get(prev)


def fifo_pass(batches, payload: list[str]):
    """Events of each (capture, key) sorted by (time, supply first, id) -> each delivery's payload and ``p_us``.

    Publishes and requeues are supply; first deliveries take publishes, redeliveries requeued deliveries,
    per queue. First deliveries are answered at once, redeliveries when their key ends.
    """
    import pyarrow as pa

    def out(rows: pa.RecordBatch, p: list) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([*rows.columns, pa.array(p, pa.int64())], names=[*payload, "p_us"])

    def finish(k: _Key):
        if k.waiting:
            rows = pa.Table.from_batches([b for b, _ in k.waiting]).combine_chunks().to_batches()
            p = [k.resolve(rid) for _, rid in k.waiting]
            at = 0
            for r in rows:
                yield out(r, p[at:at + r.num_rows])
                at += r.num_rows

    current, k = None, None
    for batch in batches:
        if not batch.num_rows:
            continue
        ev = batch.select(["capture_id", *_EVENT_COLUMNS]).to_pydict()
        rows = batch.select(payload)
        idx, p = [], []
        for i, (cid, key, ts, kind, rid, q, rq) in enumerate(zip(ev["capture_id"], *(ev[c] for c in _EVENT_COLUMNS))):
            if (cid, key) != current:
                if k is not None:
                    yield from finish(k)
                current, k = (cid, key), _Key()
            assert k is not None  # set on the first event
            if kind == PUBLISH:
                k.pubs.append(ts)
            elif kind == REQUEUE:
                k.requeued.setdefault(q, []).append(rid)
            elif kind == FIRST:
                t = k.firsts.get(q) or k.firsts.setdefault(q, _Take())
                rank = t.take(len(k.pubs))
                pt = None if rank is None or k.pubs[rank - 1] == NULL_US else k.pubs[rank - 1]
                if rq:
                    k.origin[rid] = pt
                idx.append(i)
                p.append(pt)
            else:
                t = k.agains.get(q) or k.agains.setdefault(q, _Take())
                supply = k.requeued.get(q, ())
                rank = t.take(len(supply))
                if rank is not None:
                    k.links[rid] = supply[rank - 1]
                k.waiting.append((rows.slice(i, 1), rid))
        if idx:
            yield out(rows.take(pa.array(idx, pa.int32())), p)
    if k is not None:
        yield from finish(k)


def _segment_starts(*cols) -> np.ndarray:
    """Whether each row starts a new run of equal values in every one of ``cols`` (numpy arrays, same length)."""
    n = len(cols[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for c in cols:
            new[1:] |= c[1:] != c[:-1]
    return new


def _segment_cummin(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running minimum of ``x`` restarting at each segment (``seg``: non-decreasing segment numbers)."""
    span = int(x.max(initial=0)) - int(x.min(initial=0)) + 1
    shift = seg.astype(np.int64) * span  # later segments lie wholly below earlier ones, so no minimum leaks forward
    return np.minimum.accumulate(x - shift) + shift


def fifo_columns(batches, payload: list[str], compiled: bool = True):
    """``fifo_pass`` in arrays for a partition held whole: the keys whose events are only publishes and first
    deliveries (the common case) take their ranks by the same formula in numpy; the keys with a requeue or a
    redelivery go through the same rule event by event: compiled (``fifo_rare``), or ``fifo_pass`` with ``compiled``
    False, which stays the reference a test compares both with. Yields the same rows (in another order). Memory: the
    partition's events."""
    import pyarrow as pa

    tables = [b for b in batches if b.num_rows]
    if not tables:
        return
    t = pa.Table.from_batches(tables).combine_chunks()
    ev = t.column("_ev").to_numpy(zero_copy_only=False)
    knew = key_starts(t)
    kseg = np.cumsum(knew) - 1  # the key's number, in row order (rows come sorted by key)
    rare_key = np.zeros(int(kseg[-1]) + 1, bool)
    np.logical_or.at(rare_key, kseg, (ev == REQUEUE) | (ev == AGAIN))
    rare = rare_key[kseg]
    if rare.any():
        if compiled:
            from amqplens.jobs.metrics.fifo_rare import fifo_rare

            yield from fifo_rare(t.filter(pa.array(rare)), payload)
        else:
            yield from fifo_pass(t.filter(pa.array(rare)).to_batches(), payload)
    common = ~rare
    pub = common & (ev == PUBLISH)
    # P: the key's publishes up to this row (supply sorts before demand at the same instant)
    pubs_seen = np.cumsum(pub)
    key_start = np.flatnonzero(knew)
    pubs_before_key = (pubs_seen - pub)[key_start][kseg]  # publishes of earlier keys
    supply = pubs_seen - pubs_before_key
    first = np.flatnonzero(common & (ev == FIRST))
    if not len(first):
        return
    # the queue as a number (null its own: 0)
    q = t.column("_q").chunk(0).take(pa.array(first)).dictionary_encode().indices.fill_null(-1).to_numpy(zero_copy_only=False) + 1
    # the first deliveries of each (key, queue) in row order: j = 1, 2, ...
    order = np.lexsort((first, q, kseg[first]))
    rows = first[order]
    seg_new = _segment_starts(kseg[rows], q[order])
    seg = np.cumsum(seg_new) - 1
    pos = np.arange(len(rows))
    j = pos - np.flatnonzero(seg_new)[seg] + 1
    lo = _segment_cummin(supply[rows] - j, seg)
    m = j + np.minimum(0, lo)
    prev = np.where(seg_new, 0, np.r_[0, m[:-1]])
    took = m > prev
    # the rank-th publish of the key: its global index among all publishes in row order
    pub_ts = t.column("_tsk").to_numpy(zero_copy_only=False)[pub]
    at = pubs_before_key[rows] + m - 1
    pt = np.where(took, pub_ts[np.where(took, at, 0)] if len(pub_ts) else NULL_US, NULL_US)
    p = pa.array(pt, pa.int64(), mask=pt == NULL_US)
    out = t.select(payload).take(pa.array(rows))
    yield from pa.Table.from_arrays([*out.columns, p], names=[*payload, "p_us"]).to_batches()


def end_to_end(deliveries, partitions: int | None = None, keep: list[str] | None = None):
    """The from_broker deliveries with ``p_ts``: the time of the publish they were matched to (null: unmatched).

    One shuffle of the publishes, the deliveries and their requeues by (capture, key), then ``fifo_columns``. ``keep``:
    the delivery columns to hand on (default all; every one rides through the pass, so fewer cost less).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    d = deliveries.withColumn("_key", match_key(F))
    payload = ["capture_id", *[c for c in (keep or deliveries.columns) if c != "capture_id"]]
    dels = d.where(F.col("direction") == "from_broker")
    keyless = dels.where(F.col("_key").isNull()).select(*payload, F.lit(None).cast("timestamp").alias("p_ts"))
    dels = dels.where(F.col("_key").isNotNull()).withColumn(
        "_q", F.coalesce("queue", F.concat_ws("/", "connection_id", "channel", "consumer_tag", "link_name")))
    tsk = lambda c: F.coalesce(F.unix_micros(c), F.lit(NULL_US))  # noqa: E731
    nulls = [F.lit(None).cast(deliveries.schema[c].dataType).alias(c) for c in payload if c != "capture_id"]
    ev = lambda df, ts, kind, q, rq, *rest: df.select(  # noqa: E731
        "capture_id", "_key", tsk(ts).alias("_tsk"), F.lit(kind).alias("_ev"), F.col("delivery_id").alias("_id"),
        q.alias("_q"), rq.alias("_rq"), *rest)
    requeued = F.col("outcome").isin(*REQUEUED)
    again = F.coalesce("redelivered", F.lit(False))
    pubs = ev(d.where((F.col("direction") == "to_broker") & F.col("_key").isNotNull()), "sent_ts", PUBLISH,
              F.lit(None).cast("string"), F.lit(False)).select("*", *nulls)
    requeues = ev(dels.where(requeued), F.coalesce("settled_ts", "sent_ts"), REQUEUE, F.col("_q"), F.lit(False)).select("*", *nulls)
    demand = ev(dels, "sent_ts", F.when(again, AGAIN).otherwise(FIRST), F.col("_q"), requeued,
                *[c for c in payload if c != "capture_id"])
    schema = T.StructType([*[deliveries.schema[c] for c in payload], T.StructField("p_us", T.LongType())])
    events = pubs.unionByName(requeues).unionByName(demand)
    # rows: publishes + requeues + first and redeliveries, one shuffle by key; the pass yields one row per delivery
    n = partitions or deliveries.sparkSession.sparkContext.defaultParallelism * 2
    matched = (events.repartition(n, "capture_id", "_key")
               .sortWithinPartitions("capture_id", "_key", "_tsk", F.col("_ev") >= FIRST, "_id")
               .mapInArrow(functools.partial(fifo_columns, payload=payload), schema)
               .withColumn("p_ts", F.timestamp_micros("p_us")).drop("p_us"))
    return matched.unionByName(keyless)
