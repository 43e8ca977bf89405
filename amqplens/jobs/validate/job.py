"""Job: the expectation suites of amqplens/contracts/expectations.py over what a run wrote -> <lake>/_quality.

spark-submit jobs/validate.py --lake DIR [--capture-id ID ...] [--run-id R] [--config F] [--set k=v]

Each table is read once, filtered to the run's captures (default: every capture
in the lake), given the extra columns the cross-row checks need (quality.py),
and handed to its GX checkpoint as the batch parameter ``dataframe``. When no
table of the run has more than ``validate.pandas_max_rows`` rows (the Delta
log's statistics tell, without a Spark job), the rows are read with delta-rs,
the extra columns computed in pandas (small.py) and GX's pandas engine
validates them: no Spark job at all. Otherwise each table's checks are counted
first: on the driver while the largest table holds at most
``validate.tally_driver_max_rows`` rows (columnar.py: delta-rs scans in record
batches, Arrow compute, no Spark job), else in one Spark aggregate per table
(tally.py); GX validates those counts, and only the checks they do not pass are
validated by GX's Spark engine on the table's rows, with samples of the
offending rows (engine.py). Every path gives the same outcomes (tests run them on
the same lakes and compare every count and every outcome).
GX runs in an ephemeral context whose only files are under ``<lake>/_quality``:
the validation results (``validations/``) and the data docs (``data_docs/``),
next to one JSON summary per run (``runs/<run_id>.json``). A failed critical
expectation raises ``ValidationFailed`` naming the table, the expectation, what
was observed and a few keys of offending rows; warnings are only reported.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import pathlib
import time
import uuid

from amqplens.config import Config
from amqplens.contracts import ALL_TABLES
from amqplens.jobs.validate import results_page
from amqplens.jobs.validate.engine import Suites, gx_context
from amqplens.jobs.validate.results import Outcome, ValidationFailed, message, summary as _summary

# GX and the lake are imported when a validation runs: amqplens.cli imports the package for ValidationFailed.

log = logging.getLogger(__name__)
JOB = "validate"
QUALITY = "_quality"


# --------------------------------------------------------------------- job
def quality_dir(store) -> pathlib.Path:
    if "://" in store.root and not store.root.startswith("file://"):
        raise ValueError(f"validate writes its results with the local filesystem; the lake {store.root} is not local")
    return pathlib.Path(store.root.removeprefix("file://")) / QUALITY


def _capture_ids(store, capture_ids: list[str] | None) -> list[str]:
    from amqplens.jobs.validate.small import read_slice

    if capture_ids is not None:
        return sorted(set(capture_ids))
    return sorted(read_slice(store, "captures", None, ["capture_id"])["capture_id"])


def batches(store, ids: list[str], conf: Config, rows: dict[str, int]):
    """``(table, rows, batch)`` for every table (``rows``: each table's rows of the run, ``run_rows``): the batch a pandas frame when the run is small
    (each table at most ``validate.pandas_max_rows`` rows: amqplens/jobs/validate/small.py, no Spark job), else a Spark
    DataFrame (amqplens/jobs/validate/quality.py), counted in one pass (tally.py) and cached only for a second one.
    The Spark path's shared key caches are released when the generator closes."""
    from amqplens.jobs.validate import quality
    from amqplens.jobs.validate import small as quality_small
    from amqplens.contracts.expectations import Settings

    small = max(rows.values(), default=0) <= conf["validate.pandas_max_rows"]
    source = (quality_small.SmallRun(store, ids, Settings.from_config(conf)) if small
              else quality.RunTables(store, ids))
    try:
        for name, t in ALL_TABLES.items():
            if rows[name] == 0:  # nothing to hold to the suite (e.g. broker_events of a run without logs)
                yield t, 0, None
            elif small:
                assert isinstance(source, quality_small.SmallRun)
                yield t, rows[name], quality_small.batch(t, source, conf)
            else:
                assert isinstance(source, quality.RunTables)
                # not cached: the tally reads it once; engine.Suites caches it for the checks the tally does not pass
                yield t, rows[name], quality.SparkBatch(t, source, conf)
    finally:
        if not small:
            assert isinstance(source, quality.RunTables)
            source.close()


def tallied(items, settings, parallel: int, on_driver=None):
    """``items`` (``batches``) as ``(table, rows, batch, tally or None)``: the Spark batches (quality.SparkBatch) are counted first
    (tally.py; their references by one job per target table, quality.reference_jobs), these Spark jobs ``parallel``
    at a time from driver threads (each is one aggregate of a few stages of one or two tasks, so one table's scan
    overlaps another's planning and small stages; GX then validates one table at a time, its context not shared
    between threads). ``on_driver``: a callable counting the named tables on the driver instead (columnar.py: no Spark
    job), ``{table: tally}``. A pandas batch (a small run) is passed on as it comes, so the driver holds one at a time;
    tables without rows keep their place."""
    from concurrent.futures import ThreadPoolExecutor

    import pandas as pd

    from amqplens.contracts import expectations as ex
    from amqplens.jobs.validate import quality, tally

    held: list = []  # Spark batches (lazy plans) and empty tables, in order
    for t, n, df in items:
        if isinstance(df, pd.DataFrame):
            yield from ((*item, None) for item in held)
            held = []
            yield t, n, df, None
        else:
            held.append((t, n, df))
    spark_batches = [(t, b) for t, _, b in held if b is not None]
    counts: dict = {}
    if spark_batches and on_driver is not None:
        counts = on_driver([t.name for t, _ in spark_batches])
    elif spark_batches:
        t0 = time.monotonic()
        refs = quality.reference_jobs(spark_batches[0][1].tables, [t.name for t, _ in spark_batches])
        elsewhere = {t.name: frozenset(ex.reference_check(t, c) for c in ex.references(t)) for t, _ in spark_batches}
        with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="amqplens-tally") as pool:
            found = [pool.submit(job) for job in refs]  # the larger jobs first: they set the stage's length
            counted = {t.name: pool.submit(lambda t, b: tally.count(t, b.light(), settings, elsewhere[t.name]), t, b)
                       for t, b in spark_batches}
            counts = {name: f.result() for name, f in counted.items()}
            for f in found:
                for one in counts.values():
                    one.add(f.result())
        log.info("tallies of %d table(s) in %.1fs", len(spark_batches), time.monotonic() - t0)
    yield from ((t, n, b, counts.get(t.name)) for t, n, b in held)  # b.full(), GX's batch, built only if GX needs it


def run_rows(store, ids: list[str]) -> dict[str, int]:
    """Each table's rows of the captures ``ids``, from the Delta log's statistics (no Spark job; read once a run)."""
    return {name: store.rows(name, ids) for name in ALL_TABLES}


def _tally_on_driver(store, ids: list[str], conf: Config, settings, rows: dict[str, int]):
    """The Spark path's tallies counted on the driver (columnar.py), when ``validate.tally`` says so (``driver``, or
    ``auto`` while the run's largest table holds at most ``validate.tally_driver_max_rows`` rows) and the run is past
    ``validate.pandas_max_rows``: started at once in a driver thread (Arrow's scans and kernels leave the GIL, so
    they overlap GX's context and checkpoints), a callable ``names -> {table: tally}`` waiting for them; else None."""
    from concurrent.futures import ThreadPoolExecutor

    from amqplens.jobs.validate import columnar

    largest = max(rows.values(), default=0)
    engine = conf["validate.tally"]
    if largest <= conf["validate.pandas_max_rows"] or engine == "spark" or (
            engine == "auto" and largest > conf["validate.tally_driver_max_rows"]):
        return None
    names = [name for name, n in rows.items() if n]
    import great_expectations  # noqa: F401  here, not in both threads at once (GX's modules import each other)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amqplens-tally")
    counting = pool.submit(columnar.count_tables, store, ids, names, settings, conf["validate.window_slack_s"])
    pool.shutdown(wait=False)  # the thread ends with its one task

    def counted(wanted: list[str]) -> dict:
        counts = counting.result()
        return {name: counts[name] for name in wanted}

    return counted


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> dict:
    """Validate every table's rows of the given captures; returns the summary or raises ValidationFailed."""
    from amqplens.lake.store import TableStore
    from amqplens.contracts.expectations import Settings

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"])
    quality = quality_dir(store)
    ids = _capture_ids(store, capture_ids)
    table_rows = run_rows(store, ids)
    on_driver = _tally_on_driver(store, ids, conf, Settings.from_config(conf), table_rows)
    suites = Suites(gx_context(quality), Settings.from_config(conf), conf["validate.sample_keys"])
    from great_expectations.core.run_identifier import RunIdentifier

    gx_run = RunIdentifier(run_name=run_id, run_time=dt.datetime.now(dt.timezone.utc))
    results: list[Outcome] = []
    rows: dict[str, int] = {}
    items = batches(store, ids, conf, table_rows)
    try:
        for t, n, df, counted in tallied(items, suites.settings, conf["validate.concurrent_tables"], on_driver):
            t0 = time.monotonic()
            rows[t.name] = n
            if df is None:
                continue
            results += suites.validate(t, df, gx_run, counted)
            rows[t.name] = suites.rows[t.name]
            log.info("%s: %s rows validated in %.1fs", t.name, rows[t.name], time.monotonic() - t0)
    finally:
        items.close()  # the Spark path's key caches
    suites.build_docs()
    summary = _summary(run_id, ids, rows, results, quality)
    (quality / "runs").mkdir(parents=True, exist_ok=True)
    (quality / "runs" / f"{run_id}.json").write_text(json.dumps(summary, indent=1, default=str))
    results_page.write(quality, summary)
    if not summary["success"]:
        raise ValidationFailed(message(summary), summary)
    return summary
