"""Job: the expectation suites of amqplens/contracts/expectations.py over what a run wrote -> <lake>/_quality.

spark-submit jobs/validate.py --lake DIR [--capture-id ID ...] [--run-id R] [--config F] [--set k=v]

Each table is read once, filtered to the run's captures (default: every capture
in the lake), given the extra columns the cross-row checks need (quality.py),
and handed to its GX checkpoint as the batch parameter ``dataframe``. When no
table of the run has more than ``validate.pandas_max_rows`` rows (the Delta
log's statistics tell, without a Spark job), the rows are read with delta-rs,
the extra columns computed in pandas (small.py) and GX's pandas engine
validates them: no Spark job at all. Otherwise each batch is a cached Spark
DataFrame validated by GX's Spark engine, a few Spark jobs per table. Both
paths evaluate the same suites into the same results and data docs (a test
runs both on the same lake and compares every outcome).
GX runs in an ephemeral context whose only files are under ``<lake>/_quality``:
the validation results (``validations/``) and the data docs (``data_docs/``),
next to one JSON summary per run (``runs/<run_id>.json``). A failed critical
expectation raises ``ValidationFailed`` naming the table, the expectation, what
was observed and a few keys of offending rows; warnings are only reported.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import pathlib
import time
import uuid
from typing import Any

from amqplens.config import Config
from amqplens.contracts import ALL_TABLES, Table
from amqplens.jobs.validate import results_page

# GX and the lake are imported when a validation runs: amqplens.cli imports this module for ValidationFailed.

log = logging.getLogger(__name__)
JOB = "validate"
QUALITY = "_quality"
SITE = "lake"
# Counts only on the first pass: GX then needs a few Spark jobs per table instead of one per
# expectation; a table that fails is validated again with samples of the offending rows.
COUNTS_ONLY = {"result_format": "BASIC", "partial_unexpected_count": 0}


class ValidationFailed(RuntimeError):
    """A critical expectation failed; ``summary`` is what was written to <lake>/_quality/runs/."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


@dataclasses.dataclass
class Outcome:
    table: str
    name: str
    severity: str
    success: bool
    observed: str
    samples: list[str]

    def line(self) -> str:
        text = f"{self.name} ({self.severity}): {self.observed}"
        return text + (f"; e.g. {'; '.join(self.samples)}" if self.samples else "")


# ------------------------------------------------------------------ results
def _observed(result: dict, exception: dict | None) -> str:
    if exception and exception.get("raised_exception"):
        return f"could not be evaluated: {exception.get('exception_message')}"
    value: Any = result.get("observed_value")
    value = value.item() if hasattr(value, "item") else value  # GX's pandas engine observes numpy scalars
    if "unexpected_count" in result:
        text = f"{result['unexpected_count']} of {result.get('element_count')} rows unexpected"
        if "observed_value" in result:
            text += f" ({value})"
        return text
    return f"observed {value!r}"


def _samples(result: dict, key: tuple[str, ...]) -> list[str]:
    """``key=value (column=value ...)`` of the offending rows GX returned."""
    out = []
    for row in result.get("partial_unexpected_index_list") or []:
        ident = ", ".join(f"{k}={row.get(k)}" for k in key)
        rest = ", ".join(f"{k}={v}" for k, v in row.items() if k not in key)
        out.append(f"{ident} ({rest})" if rest else ident)
    if not out:
        out = [repr(v) for v in result.get("partial_unexpected_list") or []]
    return out


def outcomes(t: Table, results) -> list[Outcome]:
    out = []
    for r in results:
        meta = r.expectation_config.meta or {}
        result = r.result or {}
        out.append(Outcome(t.name, meta["name"], meta["severity"], bool(r.success), _observed(result, r.exception_info),
                           _samples(result, t.key)))
    return out


# ---------------------------------------------------------------------- GX
def _filesystem(path: str) -> dict:
    return {"class_name": "TupleFilesystemStoreBackend", "base_directory": path}


def gx_context(quality: pathlib.Path):
    """An ephemeral context: suites, checkpoints and data sources in memory, results and docs under ``quality``."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import DataContextConfig, InMemoryStoreBackendDefaults, ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    defaults = InMemoryStoreBackendDefaults()
    stores = dict(defaults.stores)
    stores[defaults.validation_results_store_name] = {
        "class_name": "ValidationResultsStore", "store_backend": _filesystem(str(quality / "validations"))}
    sites = {SITE: {"class_name": "SiteBuilder", "show_how_to_buttons": False, "store_backend": _filesystem(str(quality / "data_docs")),
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}}
    config = DataContextConfig(store_backend_defaults=defaults, stores=stores, data_docs_sites=sites, analytics_enabled=False,
                               progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(mode="ephemeral", project_config=config)


SPARK, PANDAS = "spark", "pandas"  # the GX engine a table's batch is validated by (by the batch's type)


class Suites:
    """A data source per engine; per table an asset, its suite, a validation definition and a checkpoint; the docs site."""

    def __init__(self, context, settings, sample_keys: int):
        import great_expectations as gx

        self.gx, self.context, self.settings, self.sample_keys = gx, context, settings, sample_keys
        self.sources: dict = {}  # engine -> data source, added when first used (the Spark one tests its session)
        self.checkpoints: dict = {}
        self.stored: list = []  # the validation results of this run, for the data docs

    def source(self, engine: str):
        if engine not in self.sources:
            add = self.context.data_sources
            self.sources[engine] = (add.add_spark(name="lake", persist=False) if engine == SPARK  # batches come cached
                                    else add.add_pandas(name="lake_small"))
        return self.sources[engine]

    def build_docs(self) -> None:
        """Render this run's results and the index once: each build compiles GX's page templates anew."""
        self.context.build_data_docs(site_names=[SITE], resource_identifiers=self.stored)

    def checkpoint(self, t: Table, engine: str, only: set[str] | None = None):
        """The table's checkpoint, or (``only``) one of just those checks that also returns samples of offending rows."""
        from amqplens.contracts.expectations import suite

        gx = self.gx
        s = suite(t, self.settings, only)
        if (s.name, engine) in self.checkpoints:
            return self.checkpoints[s.name, engine]
        s = self.context.suites.add(s)
        asset = self.source(engine).add_dataframe_asset(name=s.name)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=s.name, data=asset.add_batch_definition_whole_dataframe("run"), suite=s))
        result_format = COUNTS_ONLY if only is None else {
            "result_format": "SUMMARY", "partial_unexpected_count": self.sample_keys, "unexpected_index_column_names": list(t.key)}
        self.checkpoints[s.name, engine] = self.context.checkpoints.add(gx.Checkpoint(
            name=f"amqplens_{s.name}_{engine}", validation_definitions=[definition], result_format=result_format))
        return self.checkpoints[s.name, engine]

    def validate(self, t: Table, df, run_id) -> list:
        """Validate ``df`` (Spark or pandas) as table ``t``: every check's counts, then the failed ones again with samples."""
        import pandas as pd

        engine = PANDAS if isinstance(df, pd.DataFrame) else SPARK
        def results(cp):
            ((key, validation),) = cp.run(batch_parameters={"dataframe": df}, run_id=run_id).run_results.items()
            self.stored.append(key)
            return validation.results

        first = results(self.checkpoint(t, engine))
        failed = {r.expectation_config.meta["name"] for r in first if not r.success}
        if not failed:
            return first
        detail = {r.expectation_config.meta["name"]: r for r in results(self.checkpoint(t, engine, failed))}
        return [detail.get(r.expectation_config.meta["name"], r) for r in first]


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


def _summary(run_id: str, ids: list[str], rows: dict[str, int], results: list[Outcome], quality: pathlib.Path) -> dict:
    failed = [o for o in results if not o.success]
    return {
        "run_id": run_id, "time": dt.datetime.now(dt.timezone.utc).isoformat(), "capture_ids": ids, "rows": rows,
        "success": not any(o.severity == "critical" for o in failed),
        "critical_failures": [dataclasses.asdict(o) for o in failed if o.severity == "critical"],
        "warnings": [dataclasses.asdict(o) for o in failed if o.severity == "warning"],
        "expectations": [dataclasses.asdict(o) for o in results],
        "data_docs": str(quality / "data_docs" / "index.html"),
        "results_page": str(quality / "index.html"),  # results_page.py: readable offline, unlike GX's data docs
    }


def message(summary: dict) -> str:
    """The readable summary of a failed validation: one line per critical failure."""
    crit = summary["critical_failures"]
    lines = [f"validate: {len(crit)} critical expectation(s) failed on run {summary['run_id']} "
             f"({len(summary['capture_ids'])} capture(s))"]
    lines += [f"  {o['table']}: " + Outcome(**o).line() for o in crit]
    lines += [line for o in summary["warnings"] for line in results_page.warning_lines(o)]
    lines.append(f"  results: {summary['results_page']}")
    return "\n".join(lines)


def batches(store, ids: list[str], conf: Config):
    """``(table, rows, batch)`` for every table with rows of the run: the batch a pandas frame when the run is small
    (each table at most ``validate.pandas_max_rows`` rows: amqplens/jobs/validate/small.py, no Spark job), else a cached Spark
    DataFrame (amqplens/jobs/validate/quality.py), uncached once the caller moves on to the next table."""
    from amqplens.jobs.validate import quality
    from amqplens.jobs.validate import small as quality_small
    from amqplens.contracts.expectations import Settings

    rows = {name: store.rows(name, ids) for name in ALL_TABLES}
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
                df = quality.batch(t, source, conf).persist()
                try:
                    yield t, rows[name], df
                finally:
                    df.unpersist()
    finally:
        if not small:
            assert isinstance(source, quality.RunTables)
            source.close()


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> dict:
    """Validate every table's rows of the given captures; returns the summary or raises ValidationFailed."""
    from amqplens.lake.store import TableStore
    from amqplens.contracts.expectations import Settings

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"])
    quality = quality_dir(store)
    ids = _capture_ids(store, capture_ids)
    suites = Suites(gx_context(quality), Settings.from_config(conf), conf["validate.sample_keys"])
    from great_expectations.core.run_identifier import RunIdentifier

    gx_run = RunIdentifier(run_name=run_id, run_time=dt.datetime.now(dt.timezone.utc))
    results: list[Outcome] = []
    rows: dict[str, int] = {}
    for t, n, df in batches(store, ids, conf):
        t0 = time.monotonic()
        rows[t.name] = n
        if df is None:
            continue
        table_results = suites.validate(t, df, gx_run)
        rows[t.name] = next((r.result["element_count"] for r in table_results if "element_count" in (r.result or {})), n)
        results += outcomes(t, table_results)
        log.info("%s: %s rows validated in %.1fs", t.name, rows[t.name], time.monotonic() - t0)
    suites.build_docs()
    summary = _summary(run_id, ids, rows, results, quality)
    (quality / "runs").mkdir(parents=True, exist_ok=True)
    (quality / "runs" / f"{run_id}.json").write_text(json.dumps(summary, indent=1, default=str))
    results_page.write(quality, summary)
    if not summary["success"]:
        raise ValidationFailed(message(summary), summary)
    return summary
