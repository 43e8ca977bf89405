"""Job: lifecycle tables (+ connections, frames, decode_errors) -> metrics_latency, metrics_settlement, metrics_flow, metrics_errors.

spark-submit jobs/metrics.py --lake DIR [--capture-id ID ...] [--config F] [--set k=v]

Pure DataFrame -> DataFrame functions (``latency``, ``settlement``, ``flow``,
``errors``) over the tables of the captures to do; ``run`` reads, calls them
and writes through the TableStore, one unit per capture. The definitions of
every metric are in amqplens/contracts/metrics.py and docs/metrics.md.
"""

from __future__ import annotations

import logging
import uuid

from amqplens.decode import __version__
from amqplens.config import Config
from amqplens.jobs.labels import label_maps, with_labels
from amqplens.lake.store import TableStore
from amqplens.session import sql_settings
from amqplens.jobs.metrics.faults import errors, peer_anomalies
from amqplens.jobs.metrics.flow import flow
from amqplens.jobs.metrics.inputs import DELIVERY_COLUMNS, control_frames, deliveries_with_queue
from amqplens.jobs.metrics.percentiles import latency
from amqplens.jobs.metrics.settlement import settlement

log = logging.getLogger(__name__)
JOB = "metrics"


def app_id(capture_id: str, decoder_version: str, conf: Config) -> str:
    return (f"amqplens/{JOB}/{capture_id}/{decoder_version}/{__version__}"
            f"+b{conf['metrics.bucket']}")


# ----------------------------------------------------------------------- job
def _labelled(build, labels):
    return lambda: with_labels(build(), labels)


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Build the metric tables for the given captures (default: every capture in the lake). Returns those done now."""
    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"],
                       pack=conf["lake.pack_small_units"])
    found = store.read_arrow("captures", ["capture_id", "decoder_version", "path"], capture_ids).to_pylist()  # no Spark job
    units = {c["capture_id"]: app_id(c["capture_id"], c["decoder_version"], conf) for c in found}
    pending = {cid: a for cid, a in units.items() if not store.committed("metrics_errors", a)}
    if not pending:
        return []
    counts = {name: store.rows(name, pending) for name in PEAK_TABLES}
    rows = counts["frames"] + counts["deliveries"]
    engine = conf["metrics.engine"]
    available = available_memory()
    peak = driver_peak(counts)
    threads = driver_threads(peak, conf["metrics.driver_memory_share"], available)
    if engine == "auto" and rows <= conf["metrics.driver_max_rows"] and not threads:
        log.info("metrics: through Spark: %s would take about %d MB in the driver process one table at a time, more "
                 "than %.0f%% of the %d MB available (metrics.driver_memory_share)", counts,
                 peak * ONE_TABLE_SHARE // 2**20, 100 * conf["metrics.driver_memory_share"], (available or 0) // 2**20)
    if engine == "driver" or (engine == "auto" and rows <= conf["metrics.driver_max_rows"] and threads):
        on_driver = _driver(store, conf, pending, run_id, threads or 1)
        if on_driver is not None:
            return list(pending) if on_driver else []
    # Spark 4 measures each Arrow batch's bytes after every row it adds when a byte limit is set (the default 64 MB):
    # for the narrow rows metrics hands to Python (end-to-end events, latency route rows) that check cost as much as
    # the rest of the transfer (2.7M route rows at 300 MB: 18 s against 10 s without it). Batches stay bounded by
    # rows (maxRecordsPerBatch); the limit comes back when the stage ends. Only here: ingest's packet rows carry
    # payloads, where the byte limit is what bounds a batch.
    with sql_settings(spark, {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}):
        done = _write(spark, conf, store, found, pending, rows, run_id)
    # its last table marks the captures done: not committed here, another run at the same time committed them first
    return list(pending) if done["metrics_errors"] else []


# The driver path's peak in its Python process above its size when the stage starts (the system allocator, two tables
# at a time), by what it holds: the label maps and per-connection frames (a fixed part and one per connection), every
# frame's heartbeat columns as dictionary codes, and the flow events and deliveries as pandas frames with their
# intermediate copies. Fitted on four lakes of both dialects (peaks of 866-8,649 MiB; docs/performance.md, "The metrics
# stage's memory estimate"): the 0-9-1 load at 300 MB and 2 GB (10,006 connections, 0.35 flow events a frame), the
# AMQP 1.0 load at 100 MB and 1 GB (2,008 connections, two flow events a transfer); it is above each peak by 3-25% (one table at a time 6-34%).
# Frames + deliveries at 600 bytes (the former estimate, from the 0-9-1 load alone) put the 1 GB 1.0 lake at 1.7 GB
# where it took 4.4 GB.
PEAK_TABLES = ("frames", "deliveries", "flow_events", "connections")
PEAK_FIXED = 450 << 20
PEAK_BYTES = {"frames": 40, "deliveries": 1100, "flow_events": 1100, "connections": 90 << 10}
ONE_TABLE_SHARE = 0.9  # one table at a time: 0.79-0.88 of the two-table peak on the same lakes


def driver_peak(counts: dict[str, int]) -> int:
    """The driver path's estimated peak bytes (two tables at a time) for the captures' rows ``counts`` by table."""
    return PEAK_FIXED + sum(PEAK_BYTES[name] * counts.get(name, 0) for name in PEAK_BYTES)


def available_memory() -> int | None:
    """The memory the kernel can give without swapping (Linux's MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def driver_threads(peak: int, share: float, available: int | None) -> int:
    """Tables the driver path computes at once for an estimated two-table ``peak`` (``driver_peak``): 2 where it fits
    in ``share`` of the ``available`` memory, 1 where one table at a time fits, 0 where neither does (Spark); 2 where
    the memory is not known."""
    if available is None:
        return 2
    budget = share * available
    return 2 if peak <= budget else 1 if peak * ONE_TABLE_SHARE <= budget else 0


def _driver(store: TableStore, conf: Config, pending: dict[str, str], run_id: str, threads: int = 2) -> bool | None:
    """The four tables computed on the driver (``threads`` at a time) and written with pyarrow
    (``amqplens.jobs.metrics.driver``) as each is ready, ``metrics_errors`` last as in ``_write``. Whether that one
    was committed; None when the driver cannot compute them as Spark would (the stage then runs through Spark)."""
    from amqplens.jobs.metrics import driver

    done = False
    try:
        # each table written while the later ones are computed; a table the driver cannot write (Unsupported) sends
        # the stage to Spark, which replaces the captures' rows of every table (metrics_errors last, as here)
        for name, data in driver.each_table(store, list(pending), conf["metrics.bucket"], threads):
            done = store.write_arrow(name, data, units=pending, run_id=run_id)
    except driver.Unsupported as exc:
        log.info("metrics: through Spark (%s)", exc)
        return None
    log.info("metrics: %d captures on the driver (metrics.engine=%s, %d table(s) at a time)", len(pending),
             conf["metrics.engine"], threads)
    return done


def _write(spark, conf: Config, store: TableStore, found: list[dict], pending: dict[str, str], rows: int, run_id: str) -> dict:
    """The four metric tables of the ``pending`` captures (``rows``: their frames + deliveries), written together."""
    tables, cached = spark_tables(spark, conf, store, found, pending, rows)
    try:
        # the commits go in this order whatever the queries' order: metrics_errors last
        return store.write_many(tables, units=pending, run_id=run_id, parallel=conf["metrics.concurrent_tables"])
    finally:
        for df in cached:
            df.unpersist()


def spark_tables(spark, conf: Config, store: TableStore, found: list[dict], pending: dict[str, str], rows: int):
    """([(table, its DataFrame's builder)] in commit order, the DataFrames cached for them, to unpersist after)."""
    from pyspark.sql import functions as F

    caps = F.broadcast(store.read("captures", list(pending)).select("capture_id", "capture_date", "first_ts").cache())
    read = lambda name: store.read(name, list(pending))  # noqa: E731
    frames = read("frames")
    # rows: the frames that open, consume, close or failed to decode (a few per connection, channel and link,
    # plus the bad ones); the whole frames table is only scanned by flow (column-pruned), never held
    control = control_frames(frames).cache()
    # repeats counted before spreading (latencies, heartbeats) when there are enough rows for it to pay
    counted = rows >= conf["metrics.count_repeats_from_rows"]
    deliveries = deliveries_with_queue(read("deliveries").select(*DELIVERY_COLUMNS), control)
    # read by latency (twice) and settlement: on a small capture cached, as each read of it is a join's jobs more;
    # at 300 MB the cache cost 3.5 s more than reading it three times (column-pruned), so from the same rows on not
    deliveries = deliveries if counted else deliveries.cache()
    connections = read("connections")
    labels = label_maps({c["capture_id"]: c["path"] for c in found if c["capture_id"] in pending}, connections, control)
    bucket_s = conf["metrics.bucket"]
    # latency's route shuffle: about a million route rows a task (each measured thing in <= 4 routes)
    measured = 2 * store.rows("deliveries", pending) + store.rows("request_responses", pending) + 2 * store.rows("connections", pending)
    latency_parts = max(spark.sparkContext.defaultParallelism * 2, -(-4 * measured // 1_000_000))
    # each table's query is built in its writer's thread (write_many): latency's end-to-end checkpoint and every
    # query's analysis overlap the other queries
    tables = (
        ("metrics_latency", lambda: latency(deliveries, read("request_responses"), connections, control, caps, bucket_s,
                                            partitions=latency_parts, capture_ids=list(pending), counted=counted)),
        ("metrics_settlement", lambda: settlement(deliveries, caps, bucket_s)),
        ("metrics_flow", lambda: flow(read("flow_events"), connections, frames, caps, bucket_s, counted=counted)),
        ("metrics_errors", lambda: errors(control, read("decode_errors"), caps, bucket_s,  # last: its transaction marks the capture done
                                          peer_anomalies(read("deliveries"), read("flow_events")))),
    )
    return [(name, _labelled(build, labels)) for name, build in tables], (control, deliveries, labels["connection"])
