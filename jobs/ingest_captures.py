"""Job: capture files -> captures, connections, frames, decode_errors.

spark-submit jobs/ingest_captures.py --input PATH [PATH ...] --lake DIR [--config F] [--set k=v]

Reads each file in byte-range splits (one task per split), shuffles the
packets by flow, reassembles TCP per flow and writes the tables through the
TableStore. A capture whose rows were already committed with the same decoder
version and config is skipped; the captures table is written last, so its
row marks a capture as done.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import sys
import uuid

from amqp_decode import __version__
from amqp_decode import pipeline
from amqp_decode.capture import plan_splits, sniff_format
from amqp_decode.codecs import DecodeOptions
from jobs.config import Config
from jobs.inputs import CaptureFile, capture_files
from jobs.lake import TableStore
from jobs.session import shuffle_partitions
from jobs.staging import StagedTable, contract_batch, current_task
from schemas import CAPTURES, CONNECTIONS, DECODE_ERRORS, FRAMES, Table
from schemas.tables import PROTOCOL_COLUMNS, PROTOCOL_FACT_KEYS

log = logging.getLogger(__name__)
JOB = "ingest_captures"
EPOCH_DAY = dt.date(1970, 1, 1)


@dataclasses.dataclass
class IngestResult:
    run_id: str
    captures: list[dict]  # the captures rows written (or found done)
    skipped: list[str]  # capture ids already ingested with this decoder version/config


# Columns of frames that the job adds itself (the codec rows carry ts_us instead of ts).
_FRAME_JOB_COLUMNS = ("frame_id", "capture_id", "capture_date", "ts", "source")


def frame_struct():
    import pyarrow as pa

    fields = [pa.field(c.name, c.arrow_type) for c in FRAMES.columns if c.name not in _FRAME_JOB_COLUMNS]
    return pa.struct(fields + [pa.field("ts_us", pa.int64())])


def facts_struct():
    import pyarrow as pa

    return pa.struct([pa.field(PROTOCOL_FACT_KEYS.get(c.name, c.name), c.arrow_type) for c in PROTOCOL_COLUMNS])


def options_from(conf: Config) -> pipeline.Options:
    return pipeline.Options(
        decode_options=DecodeOptions(
            field_table_letters=conf["decode.field_table_letters"],
            max_error_bytes=conf["decode.max_error_bytes"],
            body_prefix_bytes=conf["decode.body_prefix_bytes"],
            redact_headers=tuple(conf["decode.redact_headers"]),
            compiled=conf["decode.compiled"],
        ),
        frame_struct=frame_struct(),
        facts_struct=facts_struct(),
        batch_rows=conf["capture.batch_rows"],
        amqp_ports=tuple(conf["capture.amqp_ports"]),
        tls_ports=tuple(conf["capture.tls_ports"]),
        sniff=conf["capture.sniff"],
        max_ooo_bytes=conf["capture.max_ooo_buffer"],
        history_bytes=conf["capture.retransmit_history"],
        port_reuse_idle_s=conf["capture.port_reuse_idle_s"],
        max_error_bytes=conf["decode.max_error_bytes"],
    )


def fingerprint(options: pipeline.Options) -> str:
    """What the rows depend on besides the input bytes: decoder version and decode options."""
    settings = {k: v for k, v in dataclasses.asdict(options).items() if not k.endswith("_struct")}
    settings["decode_options"].pop("compiled")  # the compiled path changes speed, not rows
    text = json.dumps({"version": __version__, **settings}, sort_keys=True, default=str)
    return f"{__version__}+{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"


def app_id(capture_id: str, fp: str) -> str:
    return f"amqplens/{JOB}/{capture_id}/{fp}"


def conform(df, table: Table):
    """Cast the job's columns to the contract's types (the TableStore then checks them strictly)."""
    from pyspark.sql import functions as F

    return df.select(*[F.col(c.name).cast(c.spark_type()).alias(c.name) for c in table.columns])


def split_size_for(size: int, split_size: int, min_split_size: int, parallelism: int) -> int:
    """The split size of one file: ``split_size``, or smaller so a small file still feeds every core.

    A file under ``split_size`` would be one split and one busy core; cut it into
    ``parallelism`` splits instead, but none under ``min_split_size`` (a split
    costs a task and a resynchronisation).
    """
    per_core = -(-size // max(1, parallelism))
    return max(1, min(split_size, max(per_core, min_split_size)))


def _split_rows(files: list[CaptureFile], split_size: int, min_split_size: int = 0, parallelism: int = 1) -> list[tuple]:
    rows = []
    for f in files:
        size = split_size_for(f.size, split_size, min_split_size, parallelism)
        for i, (start, end) in enumerate(plan_splits(f.path, size)):
            rows.append((f.capture_id, f.path, start, end, i))
    return rows


STAGED_FILE = "staged_file"  # kind of the flows rows that report a frames file a task wrote


def frame_rows(out):
    """A stage-2 batch of frames as rows of the frames table (its data columns; capture_date is the partition's).

    The job columns, as Spark would compute them: ``frame_id`` = connection,
    ``s``/``c`` (to_server or not), stream offset joined by ``-``; ``ts`` from
    ``ts_us``; ``source`` = capture.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    frame = out.column("frame")
    to_server = pc.fill_null(pc.equal(frame.field("direction"), "to_server"), False)
    letter = pc.if_else(to_server, pa.scalar("s"), pa.scalar("c"))
    frame_id = pc.binary_join_element_wise(
        frame.field("connection_id"), letter, pc.cast(frame.field("stream_offset"), pa.string()), "-", null_handling="skip"
    )
    source = pa.array(["capture"] * out.num_rows, pa.string())
    return contract_batch(FRAMES, frame, {"frame_id": frame_id, "capture_id": out.column("capture_id"), "source": source})


def decode_and_stage_frames(batches, options: pipeline.Options, staged: StagedTable, task: int | None = None):
    """``pipeline.decode_flows``, with its frame batches written to the frames table's staging folder by this task.

    Frames are most of stage 2's rows, and the wide frames table is the costliest
    thing Spark's row-by-row Parquet writer writes: here they go from Arrow to
    Parquet in the worker and never cross into the JVM. The other rows pass
    through, plus one ``staged_file`` row (meta: unit, path, rows) per file.
    """
    import pyarrow as pa

    writer = staged.writer(current_task() if task is None else task)
    schema = options.flows_schema
    for out in pipeline.decode_flows(batches, options):
        if out.num_rows and out.column(0)[0].as_py() == "frame":
            writer.write(out.column(1)[0].as_py(), frame_rows(out))
        else:
            yield out
    for f in writer.close():
        yield pipeline.out_batch(schema, STAGED_FILE, f["unit"], 1, meta=pa.array([json.dumps(f)], pa.string()))


def run(spark, conf: Config, inputs: list[str], run_id: str | None = None) -> IngestResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"])
    options = options_from(conf)
    fp = fingerprint(options)
    files = capture_files(inputs, conf["inputs.roots"])
    todo = [f for f in files if not store.committed("captures", app_id(f.capture_id, fp))]
    skipped = [f.capture_id for f in files if f not in todo]
    for cid in skipped:
        log.info("capture %s already ingested with %s; skipped", cid[:12], fp)
    if not todo:
        return IngestResult(run_id, [], skipped)

    split_rows = _split_rows(todo, conf["capture.split_size"], conf["capture.min_split_size"],
                             spark.sparkContext.defaultParallelism)
    splits = spark.sparkContext.parallelize(split_rows, max(1, len(split_rows))).toDF(
        from_arrow_schema(pipeline.SPLITS_SCHEMA)
    )
    packets = splits.mapInArrow(
        functools.partial(pipeline.read_splits, options=options), from_arrow_schema(pipeline.PACKETS_OUT_SCHEMA)
    )
    staged = store.stage("frames", run_id)
    flows = (
        packets.repartition(shuffle_partitions(spark, conf), "flow_key")
        .sortWithinPartitions("capture_id", "flow_key", "ts_us", "record_offset")
        .mapInArrow(functools.partial(decode_and_stage_frames, options=options, staged=staged),
                    from_arrow_schema(options.flows_schema))
        .persist(StorageLevel.DISK_ONLY)
    )
    try:
        meta_rows = flows.where(F.col("kind").isin("split_stats", STAGED_FILE)).select("kind", "capture_id", "meta").collect()
        stats_rows = [r for r in meta_rows if r["kind"] == "split_stats"]
        frame_files = [json.loads(r["meta"]) for r in meta_rows if r["kind"] == STAGED_FILE]
        per_capture = _merge_stats(stats_rows)
        dates = {f.capture_id: _capture_date(per_capture.get(f.capture_id)) for f in todo}
        date_df = spark.createDataFrame(list(dates.items()), "capture_id string, capture_date date")
        units = {f.capture_id: app_id(f.capture_id, fp) for f in todo}

        connections = _connections_df(flows, date_df)
        store.write("connections", connections, units=units, run_id=run_id)
        store.commit_staged(staged, frame_files, units=units, run_id=run_id,
                            partitions={cid: {"capture_date": d.isoformat()} for cid, d in dates.items()})
        errors = _errors_df(flows, date_df)
        store.write("decode_errors", errors, units=units, run_id=run_id)

        counts = _counts(flows)
        n_splits = collections.Counter(row[0] for row in split_rows)
        capture_rows = [_capture_row(f, per_capture.get(f.capture_id), dates[f.capture_id], counts.get(f.capture_id, {}),
                                     n_splits[f.capture_id], run_id, fp) for f in todo]
        captures_df = spark.createDataFrame(capture_rows, CAPTURES.spark_schema())
        store.write("captures", captures_df, units=units, run_id=run_id)
    finally:
        flows.unpersist()
        store.discard_staged(staged)
    return IngestResult(run_id, capture_rows, skipped)


def _merge_stats(rows) -> dict[str, pipeline.SplitStats]:
    merged: dict[str, pipeline.SplitStats] = {}
    for row in rows:
        s = pipeline.stats_from_json(row["meta"])
        merged[row["capture_id"]] = merged[row["capture_id"]].merge(s) if row["capture_id"] in merged else s
    return merged


def _capture_date(stats) -> dt.date:
    if stats is None or stats.first_ts_us is None:
        return EPOCH_DAY
    return dt.datetime.fromtimestamp(stats.first_ts_us / 1e6, dt.timezone.utc).date()


def _connections_df(flows, date_df):
    from pyspark.sql import functions as F

    facts = [F.col(f"facts.{PROTOCOL_FACT_KEYS.get(c.name, c.name)}").alias(c.name) for c in PROTOCOL_COLUMNS]
    c = flows.where(F.col("kind") == "connection").select("connection.*", *facts)
    c = (
        c.join(F.broadcast(date_df), "capture_id")
        .withColumn("start_ts", F.timestamp_micros("start_ts_us"))
        .withColumn("end_ts", F.timestamp_micros("end_ts_us"))
        .withColumn("duration_us", F.col("end_ts_us") - F.col("start_ts_us"))
        .withColumn("source", F.lit("capture"))
    )
    return conform(c, CONNECTIONS)


def _errors_df(flows, date_df):
    from pyspark.sql import functions as F

    e = flows.where(F.col("kind") == "error").select("capture_id", "error.*")
    e = e.join(F.broadcast(date_df), "capture_id").withColumn("ts", F.timestamp_micros("ts_us"))
    return conform(e, DECODE_ERRORS)


def _counts(flows) -> dict[str, dict]:
    from pyspark.sql import functions as F

    rows = (
        flows.where(F.col("kind").isin("connection", "error"))
        .groupBy("capture_id")
        .agg(
            F.sum(F.when(F.col("kind") == "connection", 1).otherwise(0)).alias("connections"),
            F.sum(F.col("connection.packets_to_server") + F.col("connection.packets_to_client")).alias("packets_selected"),
            F.sum(F.when(F.col("error.stage") == "capture", 1).otherwise(0)).alias("capture_errors"),
            F.first(F.when(F.col("error.stage") == "capture", F.col("error.detail")), ignorenulls=True).alias("first_error"),
        )
        .collect()
    )
    return {r["capture_id"]: r.asDict() for r in rows}


def _capture_row(f: CaptureFile, stats, date: dt.date, counts: dict, splits: int, run_id: str, fp: str) -> dict:
    def ts(us):
        return None if us is None else dt.datetime.fromtimestamp(us / 1e6, dt.timezone.utc)

    fmt = stats.format if stats and stats.format else (sniff_format(f.path) or "unknown")
    records = stats.records if stats else 0
    n_errors = counts.get("capture_errors") or 0
    if records == 0 and (n_errors or f.size > 0):
        status = "failed"
    elif n_errors:
        status = "partial"
    else:
        status = "ok"
    error = counts.get("first_error") if status != "ok" else None
    if status == "failed" and not error:
        error = "no packet records could be read"
    if f.size == 0:
        status, error = "failed", "the file is empty"
    return {
        "capture_id": f.capture_id,
        "capture_date": date,
        "path": f.path,
        "size_bytes": f.size,
        "format": fmt,
        "link_types": sorted(stats.link_types) if stats else [],
        "splits": splits,
        "packets_total": records,
        "packets_tcp": stats.tcp_packets if stats else 0,
        "packets_selected": counts.get("packets_selected") or 0,
        "ip_fragments": stats.ip_fragments if stats else 0,
        "connections": counts.get("connections") or 0,
        "capture_errors": n_errors,
        "first_ts": ts(stats.first_ts_us) if stats else None,
        "last_ts": ts(stats.last_ts_us) if stats else None,
        "status": status,
        "error": error,
        "run_id": run_id,
        "decoder_version": fp,
    }


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import job_main

    return job_main(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
