"""Job: lifecycle and metric tables (+ connections, broker_events) -> findings.

spark-submit jobs/findings.py --lake DIR [--capture-id ID ...] [--config F] [--set k=v]

Each rule family (flow.py, settlement.py, connections.py, errors.py) returns a few rows per capture: aggregates of
the tables, never their rows. ``raw_findings`` runs the rules (a few at a time) and gathers their rows, ``findings`` names each entity as the metric tables do
(``amqplens.jobs.labels``), marks the findings of connections with gaps as partial and gives each a deterministic
id; ``run`` writes them through the TableStore, one unit per capture (a capture without findings is committed
empty: done).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid

from amqplens.config import Config
from amqplens.contracts.findings import FINDINGS
from amqplens.decode import __version__
from amqplens.jobs.findings import connections, errors, flow, settlement
from amqplens.jobs.findings.inputs import Inputs, inputs
from amqplens.jobs.findings.rows import RAW
from amqplens.jobs.labels import label_maps, with_labels
from amqplens.lake.store import TableStore, conform

JOB = "findings"
# findings.* keys that change no row: how many are listed, and where the rules run (the same rows either way)
NOT_THRESHOLDS = ("top_n", "engine", "driver_max_rows")
log = logging.getLogger(__name__)
RULE_FAMILIES = (flow, settlement, connections, errors)


def app_id(capture_id: str, decoder_version: str, conf: Config) -> str:
    """The unit's transaction id: changing a threshold derives the findings again (top_n only says how many are
    listed)."""
    knobs = {k: v for k, v in conf.section("findings").items() if k not in NOT_THRESHOLDS}
    text = json.dumps({**knobs, "join": conf["logs.join_tolerance_s"]}, sort_keys=True)
    return f"amqplens/{JOB}/{capture_id}/{decoder_version}/{__version__}+{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def raw_findings(spark, inp: Inputs, parallel: int = 1):
    """Every rule's rows (few: the findings), each rule's query run on its own and its rows collected, then one small
    DataFrame of them all: a union of the rules' plans, each rebuilt by every later union and withColumn, cost more
    planning than the queries themselves. ``parallel`` queries at a time, from driver threads."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rules = [rule for family in RULE_FAMILIES for rule in family.RULES]
    micros = lambda df: df.select(*[F.unix_micros(c).alias(c) if c.endswith("_ts") else F.col(c) for c in RAW])  # noqa: E731
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="amqplens-findings") as pool:
        # rows: the findings of one rule (a few per entity), collected
        parts = list(pool.map(lambda rule: micros(rule(inp)).collect(), rules))
    types = {"channel": T.IntegerType(), "count": T.LongType(), "start_ts": T.LongType(), "end_ts": T.LongType()}
    schema = T.StructType([T.StructField(c, types.get(c, T.StringType())) for c in RAW])
    df = spark.createDataFrame([tuple(r) for part in parts for r in part], schema)
    return df.select(*[F.timestamp_micros(c).alias(c) if c.endswith("_ts") else F.col(c) for c in RAW])


def findings(inp: Inputs, caps, labels, raw):
    """``raw`` (the rules' rows) labelled, with partial, finding_id and capture_date (the findings table's columns)."""
    from pyspark.sql import functions as F
    # partial: a finding on a connection with gaps; one not about a connection, when its capture has any
    gaps = inp.connections.where((F.col("missing_bytes_to_server") + F.col("missing_bytes_to_client")) > 0)
    gap_conns = gaps.select("connection_id", F.lit(True).alias("_gap_conn")).distinct()  # rows: one per connection
    gap_caps = gaps.select("capture_id", F.lit(True).alias("_gap_cap")).distinct()  # rows: one per capture
    rows = (raw.join(F.broadcast(gap_conns), "connection_id", "left").join(F.broadcast(gap_caps), "capture_id", "left")
            .withColumn("partial", F.when(F.col("connection_id").isNotNull(), F.coalesce("_gap_conn", F.lit(False)))
                        .otherwise(F.coalesce("_gap_cap", F.lit(False))))
            # rows: one caps row per capture
            .join(F.broadcast(caps.select("capture_id", "capture_date", "first_ts", "last_ts")), "capture_id")
            # a rule's time a row of its input left null (a connection a broker log gives, say): the capture's
            .withColumn("start_ts", F.coalesce("start_ts", "end_ts", "first_ts", F.timestamp_micros(F.lit(0))))
            .withColumn("end_ts", F.coalesce("end_ts", "last_ts", "start_ts"))
            .withColumn("entity", F.coalesce("entity", "connection_id", "capture_id"))
            .withColumn("count", F.coalesce("count", F.lit(0)))
            .withColumn("finding_id", F.sha2(F.concat_ws("|", "capture_id", "kind", "entity", "key"), 256)))
    return conform(with_labels(rows.withColumn("entity_label", F.lit(None).cast("string")), labels), FINDINGS)


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Write the findings of the given captures (default: every capture in the lake). Returns those done now."""
    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"],
                       pack=conf["lake.pack_small_units"])
    found = store.read_arrow("captures", ["capture_id", "decoder_version"], capture_ids).to_pylist()  # no Spark job
    units = {c["capture_id"]: app_id(c["capture_id"], c["decoder_version"], conf) for c in found}
    pending = {cid: a for cid, a in units.items() if not store.committed(JOB, a)}
    if not pending:
        return []
    ids = list(pending)
    engine = conf["findings.engine"]
    if engine != "spark":
        from amqplens.jobs.findings.driver_rules import findings_rows  # pandas: imported when the stage runs

        t0 = time.perf_counter()
        budget = None if engine == "driver" else conf["findings.driver_max_rows"]
        rows = findings_rows(store, conf, ids, budget)
        if rows is not None:
            done = store.write_rows(JOB, rows, units=pending, run_id=run_id)
            log.info("findings: %d captures, %d findings, on the driver (%.2f s)", len(ids), len(rows),
                     time.perf_counter() - t0)
            return ids if done else []
    caps = store.read("captures", ids).select("capture_id", "capture_date", "first_ts", "last_ts")
    inp = inputs(store, conf, ids)
    paths = {c["capture_id"]: c["path"] for c in store.read_arrow("captures", ["capture_id", "path"], ids).to_pylist()}
    labels = label_maps(paths, inp.connections, inp.control)
    try:
        raw = raw_findings(spark, inp, conf["metrics.concurrent_tables"])
        done = store.write(JOB, findings(inp, caps, labels, raw), units=pending, run_id=run_id)
        log.info("findings: %d captures, through Spark (findings.engine=%s)", len(ids), engine)
    finally:
        for df in (*inp.cached(), labels["connection"]):
            df.unpersist()
    return ids if done else []
