"""Job: broker logs -> broker_events, deliveries (trace), frames (trace_log), connections (log), decode_errors (log), captures.

spark-submit jobs/ingest_logs.py --logs PATH [PATH ...] --lake DIR [--config F] [--set k=v]

Each log file is identified by the sha256 of its bytes (``log_id``, also its
``capture_id`` in every table it feeds) and its format sniffed from its first
64 KiB. Logs are read in Spark tasks by byte range (``logs.split_size``; a
Proton trace whole, one task): a first pass counts the newlines of each range
so every row carries its file line number, the second parses
(``amqplens.logs.batches``). The driver only sees counts and per-log
summaries, never lines.

RabbitMQ server-log events and trace deliveries are joined to the captured
connection with the same endpoints (``logs.join_tolerance_s`` around its life);
connection events that match no capture make a connection of their own
(source log), as does every connection of a Proton trace. The join depends on
the captures in the lake, so the transaction id of a log carries a hash of
them: ingesting more captures re-joins the logs, re-running alone changes
nothing. Run it after ingest-captures and before lifecycle, so Proton-trace
frames go through the lifecycle stage like captured ones.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import glob
import hashlib
import json
import logging
import os
import pathlib
import uuid
from collections.abc import Sequence

import pyarrow as pa

from amqplens.decode import __version__
from amqplens.decode import clock
from amqplens.decode.capture import sniff_head
from amqplens.logs import FORMATS, LOG_FORMATS, SNIFF_BYTES, UNKNOWN, sniff
from amqplens.logs.batches import SPLITS_SCHEMA, Options, read_log_splits
from amqplens.logs.lines import count_newlines, plan_splits
from amqplens.logs.records import EVENT_KEYS
from amqplens.logs.tracing import DELIVERY_KEYS
from amqplens.lake import isolation
from amqplens.config import Config
from amqplens.contracts.arrow import facts_struct, frame_struct
from amqplens.lake.store import conform
from amqplens.inputs import InputError, check_roots, sha256_file
from amqplens.lake.store import TableStore
from amqplens.contracts import CAPTURES, CONNECTIONS, DECODE_ERRORS, DELIVERIES, FRAMES
from amqplens.contracts.tables import BROKER_EVENTS, PROTOCOL_COLUMNS, PROTOCOL_FACT_KEYS

log = logging.getLogger(__name__)
JOB = "ingest_logs"
# connection fields an event learns from the other events of the same connection (same Erlang pid)
CONNECTION_FIELDS = ("connection_name", "client_provided_name", "client_ip", "client_port", "server_ip", "server_port", "user", "vhost")


@dataclasses.dataclass(frozen=True)
class LogFile:
    path: str
    size: int
    log_id: str
    log_format: str  # a FORMATS name, or UNKNOWN
    capture_format: str | None = None  # "pcap" or "pcapng" when the file is a packet capture, not a log


@dataclasses.dataclass
class LogIngestResult:
    run_id: str
    logs: list[dict]  # the captures rows written for the logs
    skipped: list[str]
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # log id -> error, of logs that raised
    # path -> why, of files left alone because they are packet captures, not logs: their rows are the capture
    # ingest's (the same bytes are the same capture_id there), which a failed log row here would replace
    not_logs: dict[str, str] = dataclasses.field(default_factory=dict)


# --------------------------------------------------------------------- inputs
def log_files(specs: list[str], roots: Sequence[str] = ()) -> list[LogFile]:
    """Files as given, every file of a folder (recursively), globs; each inside ``roots``; each distinct content once."""
    paths: list[str] = []
    for spec in specs:
        if any(ch in spec for ch in "*?["):
            found = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
        elif os.path.isdir(spec):
            found = sorted(str(p) for p in pathlib.Path(spec).rglob("*") if p.is_file() and not p.name.startswith("."))
        elif os.path.isfile(spec):
            found = [spec]
        else:
            raise InputError(f"logs {spec!r}: no such file or folder")
        if not found:
            raise InputError(f"logs {spec!r}: no file found")
        paths += [os.path.abspath(p) for p in found]
    check_roots(paths, roots)
    by_id: dict[str, LogFile] = {}
    for path in dict.fromkeys(paths):
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
        lid = sha256_file(path)
        log_format = sniff(head)
        by_id.setdefault(lid, LogFile(path, os.path.getsize(path), lid, log_format or UNKNOWN,
                                      None if log_format else sniff_head(head)))
    return list(by_id.values())


# -------------------------------------------------------------------- structs
def _fields(table, names, overrides: dict) -> list:
    have = {c.name: c.arrow_type for c in table.columns}
    return [pa.field(n, overrides.get(n) or have[n]) for n in names]


def structs() -> dict[str, pa.StructType]:
    """What the parsers fill, typed by the table contracts (times as *_us microseconds)."""
    i64, i32, s = pa.int64(), pa.int32(), pa.string()
    ends = {"connection_name": s, "client_ip": s, "client_port": i32, "server_ip": s, "server_port": i32}
    return {
        "event": pa.struct(_fields(BROKER_EVENTS, EVENT_KEYS, {"ts_us": i64}) + [pa.field("row_id", s)]),
        "delivery": pa.struct(_fields(DELIVERIES, DELIVERY_KEYS, {"line_number": i64, "ts_us": i64, **ends}) + [pa.field("row_id", s)]),
        "frame": frame_struct(),
        "connection": pa.struct([pa.field("connection_id", s), pa.field("start_ts_us", i64), pa.field("end_ts_us", i64),
                                 *facts_struct()]),
        "error": pa.struct([pa.field("line_number", i64), pa.field("offset", i64), pa.field("length", i64),
                            pa.field("reason", s), pa.field("detail", s), pa.field("raw", pa.binary()), pa.field("row_id", s),
                            pa.field("stage", s)]),  # null: "log"; "frame" for a traced frame that did not decode
    }


def fingerprint(conf: Config, captures_hash: str) -> str:
    """Decoder version, the options the rows depend on, and the captures the logs are joined with."""
    text = json.dumps({"version": __version__, "tolerance": conf["logs.join_tolerance_s"],
                       "max_error_bytes": conf["decode.max_error_bytes"], "captures": captures_hash}, sort_keys=True)
    return f"{__version__}+{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"


def app_id(log_id: str, fp: str) -> str:
    return f"amqplens/{JOB}/{log_id}/{fp}"


def _captures_hash(store: TableStore) -> str:
    from pyspark.sql import functions as F

    rows = (store.read("captures").where(~F.col("format").isin(sorted(LOG_FORMATS)))
            .select("capture_id", "decoder_version").orderBy("capture_id").collect())
    return hashlib.blake2b(json.dumps([list(r) for r in rows]).encode(), digest_size=8).hexdigest()


# ------------------------------------------------------------------------ run
def run(spark, conf: Config, inputs: list[str], run_id: str | None = None) -> LogIngestResult:
    """Ingest the logs of ``inputs`` not done yet (or failed before); a log that makes the job raise fails alone."""
    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"],
                       pack=conf["lake.pack_small_units"])
    files, not_logs = [], {}
    for f in log_files(inputs, conf["inputs.roots"]):
        if f.capture_format is None:
            files.append(f)
        else:
            not_logs[f.path] = f"a packet capture ({f.capture_format}), not a log: give it with --input"
            log.warning("%s: %s; left alone", f.path, not_logs[f.path])
    fp = fingerprint(conf, _captures_hash(store))
    apps = {f.log_id: app_id(f.log_id, fp) for f in files}
    units, skipped = isolation.plan(store, apps, run_id)
    if not units:
        return LogIngestResult(run_id, [], skipped, not_logs=not_logs)
    by_id = {f.log_id: f for f in files if f.log_id in units}

    def ingest(ids):
        return _ingest(spark, conf, store, [by_id[lid] for lid in ids], units, run_id, fp)

    done = isolation.isolated(JOB, list(by_id), ingest, lambda lid: ingest([lid]))
    isolation.mark_failed(spark, store, done.failed, apps, run_id,
                          rows={lid: _capture_row(by_id[lid], {}, clock.EPOCH_DAY, 0, 0, run_id, fp) for lid in done.failed})
    return LogIngestResult(run_id, done.results, skipped, done.failed, not_logs)


def _ingest(spark, conf: Config, store: TableStore, todo: list[LogFile], units: dict[str, str], run_id: str, fp: str) -> list[dict]:
    """The logs ``todo`` into every table, written under ``units``; returns their captures rows."""
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import from_arrow_schema

    split_rows = _split_rows(spark, todo, conf["logs.split_size"])
    options = Options(structs(), conf["capture.batch_rows"])
    splits = spark.sparkContext.parallelize(split_rows, max(1, len(split_rows))).toDF(from_arrow_schema(SPLITS_SCHEMA))
    out = (splits.mapInArrow(functools.partial(read_log_splits, options=options), from_arrow_schema(options.out_schema))
           .persist(StorageLevel.DISK_ONLY))
    try:
        summary = _summaries(out)
        dates = {f.log_id: _day(summary.get(f.log_id, {}).get("first_us")) for f in todo}
        logs = spark.createDataFrame([(f.log_id, dates[f.log_id], f.path) for f in todo], "log_id string, log_date date, log_path string")
        units = {f.log_id: units[f.log_id] for f in todo}
        captured = _captured_connections(store)
        tolerance_us = conf["logs.join_tolerance_s"] * 1_000_000
        events = _events_df(out, logs, captured, tolerance_us).persist(StorageLevel.DISK_ONLY)
        trace = _trace_df(out, logs, captured, tolerance_us).persist(StorageLevel.DISK_ONLY)
        try:
            connections = (_event_connections_df(events).unionByName(_trace_connections_df(out, logs))
                           .unionByName(_traced_connections_df(trace)))
            store.write("connections", connections, units=units, run_id=run_id)
            store.write("frames", _frames_df(out, logs), units=units, run_id=run_id)
            store.write("decode_errors", _errors_df(out, logs, conf["decode.max_error_bytes"]), units=units, run_id=run_id)
            store.write("broker_events", _conform_filled(events, BROKER_EVENTS), units=units, run_id=run_id)
            store.write("deliveries", _conform_filled(trace, DELIVERIES), units=units, run_id=run_id)
            # rows: one per log
            n_connections = {r["capture_id"]: r["n"] for r in connections.groupBy("capture_id").count().withColumnRenamed("count", "n").collect()}
        finally:
            events.unpersist()
            trace.unpersist()
        n_splits = {f.log_id: sum(1 for r in split_rows if r[0] == f.log_id) for f in todo}
        rows = [_capture_row(f, summary.get(f.log_id, {}), dates[f.log_id], n_splits[f.log_id], n_connections.get(f.log_id, 0), run_id, fp)
                for f in todo]
        store.write("captures", spark.createDataFrame(rows, CAPTURES.spark_schema()), units=units, run_id=run_id)
    finally:
        out.unpersist()
    return rows


def _split_rows(spark, files: list[LogFile], split_size: int) -> list[tuple]:
    """(log_id, path, format, start, end, first_line) per split; the newline counts come from a first Spark pass."""
    ranges = []
    for f in files:
        splittable = f.log_format in FORMATS and FORMATS[f.log_format].splittable
        for start, end in plan_splits(f.path, split_size) if splittable else [(0, f.size)]:
            ranges.append((f.log_id, f.path, f.log_format, start, end))
    counted = [r for r in ranges if r[3] > 0 or r[4] < os.path.getsize(r[1])]  # a file in one split needs no count
    got = spark.sparkContext.parallelize(counted, max(1, len(counted))).map(lambda r: count_newlines(r[1], r[3], r[4])).collect() if counted else []
    by_range = dict(zip(counted, got))
    counts = [by_range.get(r, 0) for r in ranges]
    rows: list[tuple] = []
    before: dict[str, int] = {}
    for r, n in zip(ranges, counts):
        rows.append((*r, before.get(r[0], 0) + 1))
        before[r[0]] = before.get(r[0], 0) + n
    return rows


def _summaries(out) -> dict[str, dict]:
    from pyspark.sql import functions as F

    ts = F.coalesce(F.col("event.ts_us"), F.col("delivery.ts_us"))
    # rows: one per log
    rows = out.groupBy("log_id").agg(
        F.min(ts).alias("first_us"), F.max(ts).alias("last_us"),
        F.sum(F.when(F.col("kind") == "error", 1).otherwise(0)).alias("errors"),
        F.sum(F.when(F.col("kind") != "error", 1).otherwise(0)).alias("records"),
        F.min_by(F.col("error.detail"), F.col("error.offset")).alias("first_error"),
    ).collect()
    return {r["log_id"]: r.asDict() for r in rows}


def _day(us) -> dt.date:
    return clock.utc_date(us)


# ---------------------------------------------------------------- the tables
def _captured_connections(store: TableStore):
    from pyspark.sql import functions as F

    return (store.read("connections").where(F.col("source") == "capture")
            .select(F.col("connection_id").alias("cap_connection_id"), F.col("client_ip").alias("cap_client_ip"),
                    F.col("client_port").alias("cap_client_port"), F.col("server_ip").alias("cap_server_ip"),
                    F.col("server_port").alias("cap_server_port"), F.col("start_ts").alias("cap_start"),
                    F.col("end_ts").alias("cap_end")))


def _join_capture(df, captured, tolerance_us: int, key: str):
    """``cap_connection_id``: the captured connection with the row's endpoints alive at its ts (the nearest start).

    Rows: a row with a time meets the connections of its four endpoints alive within the tolerance of it (a
    4-tuple is reused only after its connection ended, so one or two); a row without one (a firehose message
    saved without a time) meets only the first connection of its endpoints, which the nearest-start rule
    picked for it anyway. So at most rows x 2 (plus 4-tuple reuses within 2 x tolerance), never rows x reuses.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ends = ["cap_client_ip", "cap_client_port", "cap_server_ip", "cap_server_port"]
    # rows: one per 4-tuple of the captured connections
    first = captured.withColumn("_f", F.row_number().over(Window.partitionBy(*ends).orderBy("cap_start", "cap_connection_id")))
    first = first.where(F.col("_f") == 1).drop("_f")

    def same_ends(c):
        return ((df.client_ip == c.cap_client_ip) & (df.client_port == c.cap_client_port)
                & (df.server_ip == c.cap_server_ip) & (df.server_port == c.cap_server_port))

    at = df.ts_us
    alive = at.between(F.unix_micros(captured.cap_start) - tolerance_us, F.unix_micros(captured.cap_end) + tolerance_us)
    timed = df.where(at.isNotNull()).join(F.broadcast(captured), same_ends(captured) & alive, "left")
    untimed = df.where(at.isNull()).join(F.broadcast(first), same_ends(first), "left")
    # rows: as the joins above; one kept per row
    nearest = Window.partitionBy(key).orderBy(F.abs(F.coalesce("ts_us", F.lit(0)) - F.unix_micros("cap_start")).asc_nulls_last())
    joined = timed.unionByName(untimed).withColumn("_n", F.row_number().over(nearest))
    return joined.where(F.col("_n") == 1).drop("_n", *ends, "cap_end")


def _log_connection_id(*cols):
    from pyspark.sql import functions as F

    return F.substring(F.sha2(F.concat_ws("|", *cols), 256), 1, 32)


def _events_df(out, logs, captured, tolerance_us: int):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = out.where(F.col("kind") == "event").select("log_id", "event.*").join(F.broadcast(logs), "log_id")
    # rows: logs is one row per log (broadcast); the window keeps the events
    same_connection = Window.partitionBy("log_id", "erlang_pid")
    for c in CONNECTION_FIELDS:  # a channel error or a 1.0 login names less than the accepting line
        ev = ev.withColumn(c, F.when(F.col("erlang_pid").isNotNull(), F.coalesce(F.col(c), F.first(c, ignorenulls=True).over(same_connection)))
                           .otherwise(F.col(c)))
    ev = ev.withColumn("ts", F.timestamp_micros("ts_us")).withColumn("event_id", F.col("row_id"))
    ev = _join_capture(ev, captured, tolerance_us, "event_id")
    own = F.when(F.col("connection_name").isNotNull(), _log_connection_id("log_id", "erlang_pid", "connection_name"))
    return (ev.withColumn("connection_id", F.coalesce("cap_connection_id", own))
            .withColumn("sources", F.when(F.col("cap_connection_id").isNotNull(), F.array(F.lit("log"), F.lit("capture")))
                        .otherwise(F.array(F.lit("log"))))
            .withColumn("message", F.coalesce("message", F.lit(""))))


_END_REASON = {"connection_closed": "closed", "connection_closed_abruptly": "closed_abruptly",
               "connection_closed_error": "closed_error", "connection_error": "closed_error"}


def _conform_filled(df, table):
    """``conform`` after adding the contract's columns the rows lack: null, or 0 / false where null is not allowed."""
    from pyspark.sql import functions as F

    for c in table.columns:
        if c.name not in df.columns:
            default = None if c.nullable else {"bool": False}.get(c.type, 0)
            df = df.withColumn(c.name, F.lit(default).cast(c.spark_type()))
    return conform(df, table)


def _log_connection(df):
    """A connection row of a log: no packets or bytes counted, no handshake, no TLS, source log."""
    from pyspark.sql import functions as F

    df = (df.withColumn("selected_by", F.lit("log")).withColumn("source", F.lit("log"))
          .withColumn("duration_us", F.unix_micros("end_ts") - F.unix_micros("start_ts")))
    return _conform_filled(df, CONNECTIONS)


def _event_connections_df(events):
    """A connection (source log) for each connection of the RabbitMQ log that no capture holds."""
    from pyspark.sql import functions as F

    ends = F.create_map(*[x for k, v in _END_REASON.items() for x in (F.lit(k), F.lit(v))])
    # rows: one per log connection, fewer than the events
    c = (events.where(F.col("cap_connection_id").isNull() & F.col("connection_id").isNotNull())
         .groupBy("connection_id", "log_id", "log_date")
         .agg(F.min("ts").alias("start_ts"), F.max("ts").alias("end_ts"),
              *[F.first(k, ignorenulls=True).alias(k) for k in ("client_ip", "client_port", "server_ip", "server_port", "user", "vhost")],
              F.max_by(ends[F.col("event")], F.when(ends[F.col("event")].isNotNull(), F.col("line_number"))).alias("end_reason"),
              F.first(F.when(F.col("event") == "connection_error", F.col("reply_code")), ignorenulls=True).alias("close_code"),
              F.first(F.when(F.col("event") == "connection_error", F.col("reply_text")), ignorenulls=True).alias("close_text")))
    c = (c.withColumnRenamed("log_id", "capture_id").withColumnRenamed("log_date", "capture_date")
         .withColumn("end_reason", F.coalesce("end_reason", F.lit("log_end")))
         .withColumn("ip_version", F.when(F.col("client_ip").contains(":"), 6).otherwise(4))
         .withColumn("dialect", F.lit(None).cast("string")))
    return _log_connection(c)


def _trace_connections_df(out, logs):
    """The connections of a Proton trace: the codec's connection facts, no endpoints (the trace names none)."""
    from pyspark.sql import functions as F

    # rows: logs is one row per log (broadcast): the records of this kind
    facts = [F.col(f"connection.{PROTOCOL_FACT_KEYS.get(c.name, c.name)}").alias(c.name) for c in PROTOCOL_COLUMNS]
    c = (out.where(F.col("kind") == "connection")
         .select("log_id", "connection.connection_id", "connection.start_ts_us", "connection.end_ts_us", *facts)
         .join(F.broadcast(logs), "log_id")
         .withColumnRenamed("log_id", "capture_id").withColumnRenamed("log_date", "capture_date")
         .withColumn("start_ts", F.timestamp_micros("start_ts_us")).withColumn("end_ts", F.timestamp_micros("end_ts_us"))
         .withColumn("client_ip", F.lit("")).withColumn("server_ip", F.lit("")).withColumn("end_reason", F.lit("log_end")))
    return _log_connection(c)


def _frames_df(out, logs):
    from pyspark.sql import functions as F

    # rows: logs is one row per log (broadcast): the records of this kind
    f = (out.where(F.col("kind") == "frame").select("log_id", "frame.*").join(F.broadcast(logs), "log_id")
         .withColumnRenamed("log_id", "capture_id").withColumnRenamed("log_date", "capture_date")
         .withColumn("ts", F.timestamp_micros("ts_us")).withColumn("source", F.lit("trace_log"))
         .withColumn("frame_id", F.concat_ws("-", "connection_id", F.when(F.col("direction") == "to_server", "s").otherwise("c"),
                                             "stream_offset")))
    return _conform_filled(f, FRAMES)


def _errors_df(out, logs, max_error_bytes: int):
    from pyspark.sql import functions as F

    # rows: logs is one row per log (broadcast): the records of this kind
    e = (out.where(F.col("kind") == "error").select("log_id", "error.*").join(F.broadcast(logs), "log_id")
         .withColumnRenamed("log_id", "capture_id").withColumnRenamed("log_date", "capture_date")
         .withColumn("error_id", F.col("row_id")).withColumn("stage", F.coalesce("stage", F.lit("log")))
         .withColumn("connection_id", F.lit(None).cast("string")).withColumn("direction", F.lit(None).cast("string"))
         .withColumn("ts", F.lit(None).cast("timestamp"))
         .withColumn("raw_length", F.length("raw").cast("long")).withColumn("raw_sha256", F.sha2("raw", 256))
         .withColumn("raw", F.expr(f"substring(raw, 1, {max_error_bytes})")))
    return _conform_filled(e, DECODE_ERRORS)


def _trace_df(out, logs, captured, tolerance_us: int):
    """Trace deliveries with their join (``cap_connection_id``), before they are conformed to the contract."""
    from pyspark.sql import functions as F

    # rows: logs is one row per log (broadcast): the records of this kind
    d = (out.where(F.col("kind") == "delivery").select("log_id", "delivery.*").join(F.broadcast(logs), "log_id")
         .withColumn("ts", F.timestamp_micros(F.coalesce("ts_us", "line_number"))))
    d = _join_capture(d.withColumn("delivery_id", F.concat_ws("-", "log_id", "line_number")), captured, tolerance_us, "delivery_id")
    d = (d.withColumn("connection_id", F.coalesce("cap_connection_id", _log_connection_id("log_id", "connection_name")))
         .withColumnRenamed("log_id", "capture_id").withColumnRenamed("log_date", "capture_date")
         .withColumn("dialect", F.lit("0-9-1")).withColumn("sent_ts", F.col("ts"))
         .withColumn("outcome", F.lit("traced")).withColumn("frame_ids", F.array().cast("array<string>"))
         .withColumn("source", F.lit("trace")))
    return d


def _traced_connections_df(trace):
    """A connection (source log) for each traced connection that no capture holds."""
    from pyspark.sql import functions as F

    # rows: one per traced connection, fewer than the trace rows
    c = (trace.where(F.col("cap_connection_id").isNull())
         .groupBy("connection_id", "capture_id", "capture_date")
         .agg(F.min("sent_ts").alias("start_ts"), F.max("sent_ts").alias("end_ts"),
              *[F.first(k, ignorenulls=True).alias(k) for k in ("client_ip", "client_port", "server_ip", "server_port")])
         .withColumn("ip_version", F.when(F.col("client_ip").contains(":"), 6).when(F.col("client_ip").isNotNull(), 4).otherwise(0))
         .withColumn("client_ip", F.coalesce("client_ip", F.lit(""))).withColumn("server_ip", F.coalesce("server_ip", F.lit("")))
         .withColumn("end_reason", F.lit("log_end")))
    return _log_connection(c)


def _capture_row(f: LogFile, summary: dict, date: dt.date, splits: int, connections: int, run_id: str, fp: str) -> dict:
    ts = clock.utc_datetime
    errors, records = summary.get("errors") or 0, summary.get("records") or 0
    status, error = ("partial", summary.get("first_error")) if errors else ("ok", None)
    if f.size == 0:
        status, error = "failed", "the file is empty"
    elif f.log_format == UNKNOWN or not records:
        status, error = "failed", summary.get("first_error") or "no line of the file is a log entry amqplens reads"
    return {
        "capture_id": f.log_id, "capture_date": date, "path": f.path, "size_bytes": f.size, "format": f.log_format,
        "link_types": [], "splits": splits, "packets_total": 0, "packets_tcp": 0, "packets_selected": 0, "ip_fragments": 0,
        "connections": connections, "capture_errors": errors,
        "first_ts": ts(summary.get("first_us")), "last_ts": ts(summary.get("last_us")),
        "status": status, "error": error, "run_id": run_id, "decoder_version": fp,
    }
