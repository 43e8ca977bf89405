"""Job: frames -> deliveries, flow_events, request_responses.

spark-submit jobs/lifecycle.py --lake DIR [--capture-id ID ...] [--config F] [--set k=v]

Reads only the frames table (whatever its source), repartitions it by
connection and sorts each connection's frames by time, and runs the
per-dialect state machines of amqp_decode.lifecycle in mapInArrow. A capture
is redone when its frames were re-ingested (the transaction id carries the
captures row's decoder version) or the lifecycle code changed.
"""

from __future__ import annotations

import functools
import logging
import sys
import uuid

import pyarrow as pa

from amqp_decode import __version__
from amqp_decode.lifecycle.batches import FRAME_COLUMNS, lifecycle_batches, lifecycle_out_schema
from jobs.config import Config
from jobs.ingest_captures import conform
from jobs.lake import TableStore
from jobs.session import shuffle_partitions
from schemas import DELIVERIES, FLOW_EVENTS, REQUEST_RESPONSES, Table

log = logging.getLogger(__name__)
JOB = "lifecycle"
OUTPUTS = (("delivery", DELIVERIES), ("flow_event", FLOW_EVENTS), ("request_response", REQUEST_RESPONSES))
# columns the job fills, not the machines: the capture's, and the deliveries' source (trace rows come from ingest_logs)
JOB_COLUMNS = ("capture_id", "capture_date", "source", "trace_json")


def row_struct(table: Table) -> pa.StructType:
    """The struct the state machines fill: the table's columns, timestamps as *_us microseconds, no capture columns."""
    fields = []
    for c in table.columns:
        if c.name in JOB_COLUMNS:
            continue
        if c.type == "timestamp":
            fields.append(pa.field(f"{c.name}_us", pa.int64()))
        else:
            fields.append(pa.field(c.name, c.arrow_type))
    return pa.struct(fields)


def app_id(capture_id: str, decoder_version: str) -> str:
    return f"amqplens/{JOB}/{capture_id}/{decoder_version}/{__version__}"


def _table_df(out, kind: str, table: Table, dates):
    from pyspark.sql import functions as F

    df = out.where(F.col("kind") == kind).select("capture_id", f"{kind}.*").join(F.broadcast(dates), "capture_id")
    for c in table.columns:
        if c.type == "timestamp":
            df = df.withColumn(c.name, F.timestamp_micros(f"{c.name}_us"))
    if "source" in table.column_names:  # rows built from frames
        df = df.withColumn("source", F.lit("capture")).withColumn("trace_json", F.lit(None).cast("string"))
    return conform(df, table)


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Build the lifecycle tables for the given captures (default: every capture in the lake). Returns those done now."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"])
    from jobs.ingest_logs import FRAMELESS_FORMATS

    # logs without frames (RabbitMQ server logs and traces) have nothing to build, and their trace deliveries must stay
    caps = (store.read("captures").where(~F.col("format").isin(sorted(FRAMELESS_FORMATS)))
            .select("capture_id", "capture_date", "decoder_version").collect())
    if capture_ids is not None:
        caps = [c for c in caps if c.capture_id in set(capture_ids)]
    units = {c.capture_id: app_id(c.capture_id, c.decoder_version) for c in caps}
    pending = {cid: a for cid, a in units.items() if not store.committed("request_responses", a)}
    if not pending:
        return []
    dates = spark.createDataFrame([(c.capture_id, c.capture_date) for c in caps if c.capture_id in pending],
                                  "capture_id string, capture_date date")
    structs = [row_struct(t) for _, t in OUTPUTS]
    fn = functools.partial(lifecycle_batches, delivery_struct=structs[0], flow_event_struct=structs[1],
                           request_response_struct=structs[2], batch_rows=conf["capture.batch_rows"])
    frames = store.read("frames")
    # only the columns the machines read cross the shuffle and the Arrow hand-off (frames has ~90)
    read = [c for c in (*FRAME_COLUMNS, "ts") if c in frames.columns]
    out = (
        frames.select(*read)
        .where(F.col("capture_id").isin(list(pending)))
        .repartition(shuffle_partitions(spark, conf), "connection_id")
        .sortWithinPartitions("connection_id", "ts", "stream_offset")
        .mapInArrow(fn, from_arrow_schema(lifecycle_out_schema(*structs)))
        .persist(StorageLevel.DISK_ONLY)
    )
    try:
        for kind, table in OUTPUTS:  # request_responses last: its transaction marks the capture done
            store.write(table.name, _table_df(out, kind, table, dates), units=pending, run_id=run_id)
    finally:
        out.unpersist()
    return list(pending)


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import job_main

    return job_main(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
