"""Job: the expectation suites of schemas/expectations.py over what a run wrote -> <lake>/_quality.

spark-submit jobs/validate.py --lake DIR [--capture-id ID ...] [--run-id R] [--config F] [--set k=v]

Each table is read once, filtered to the run's captures (default: every capture
in the lake), given the extra columns the cross-row checks need (quality.py),
and handed to its GX checkpoint as the batch parameter ``dataframe``: a table
slice of at most ``validate.pandas_max_rows`` rows (the Delta log's statistics
tell, without a Spark job) is collected once and validated by GX's pandas
engine, all its expectations in memory; a larger one is cached and validated by
GX's Spark engine, a few Spark jobs per table. Both engines evaluate the same
suites into the same results and data docs (a test runs both on the same lake).
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
import sys
import time
import uuid

from jobs.config import Config
from schemas import ALL_TABLES, Table

# GX and the lake are imported when a validation runs: jobs.cli imports this module for ValidationFailed.

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
    if "unexpected_count" in result:
        text = f"{result['unexpected_count']} of {result.get('element_count')} rows unexpected"
        if "observed_value" in result:
            text += f" ({result['observed_value']})"
        return text
    return f"observed {result.get('observed_value')!r}"


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


SPARK, PANDAS = "spark", "pandas"  # the GX engine a table's batch is validated by


class Suites:
    """A data source per engine; per table an asset, its suite, a validation definition and a checkpoint; the docs site."""

    def __init__(self, context, settings, sample_keys: int):
        import great_expectations as gx

        self.gx, self.context, self.settings, self.sample_keys = gx, context, settings, sample_keys
        self.sources = {SPARK: context.data_sources.add_spark(name="lake", persist=False),  # batches come cached
                        PANDAS: context.data_sources.add_pandas(name="lake_small")}
        self.checkpoints: dict = {}
        self.stored: list = []  # the validation results of this run, for the data docs

    def build_docs(self) -> None:
        """Render this run's results and the index once: each build compiles GX's page templates anew."""
        self.context.build_data_docs(site_names=[SITE], resource_identifiers=self.stored)

    def checkpoint(self, t: Table, engine: str, only: set[str] | None = None):
        """The table's checkpoint, or (``only``) one of just those checks that also returns samples of offending rows."""
        from schemas.expectations import suite

        gx = self.gx
        s = suite(t, self.settings, only)
        if (s.name, engine) in self.checkpoints:
            return self.checkpoints[s.name, engine]
        s = self.context.suites.add(s)
        asset = self.sources[engine].add_dataframe_asset(name=s.name)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=s.name, data=asset.add_batch_definition_whole_dataframe("run"), suite=s))
        result_format = COUNTS_ONLY if only is None else {
            "result_format": "SUMMARY", "partial_unexpected_count": self.sample_keys, "unexpected_index_column_names": list(t.key)}
        self.checkpoints[s.name, engine] = self.context.checkpoints.add(gx.Checkpoint(
            name=f"amqplens_{s.name}_{engine}", validation_definitions=[definition], result_format=result_format))
        return self.checkpoints[s.name, engine]

    def validate(self, t: Table, df, run_id) -> list:
        """Validate ``df`` (Spark or pandas) as table ``t``: every check's counts, then the failed ones again with samples."""
        engine = SPARK if hasattr(df, "sparkSession") else PANDAS
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
    if capture_ids is not None:
        return sorted(set(capture_ids))
    return sorted(r.capture_id for r in store.read("captures").select("capture_id").collect())


def _summary(run_id: str, ids: list[str], rows: dict[str, int], results: list[Outcome], quality: pathlib.Path) -> dict:
    failed = [o for o in results if not o.success]
    return {
        "run_id": run_id, "time": dt.datetime.now(dt.timezone.utc).isoformat(), "capture_ids": ids, "rows": rows,
        "success": not any(o.severity == "critical" for o in failed),
        "critical_failures": [dataclasses.asdict(o) for o in failed if o.severity == "critical"],
        "warnings": [dataclasses.asdict(o) for o in failed if o.severity == "warning"],
        "expectations": [dataclasses.asdict(o) for o in results],
        "data_docs": str(quality / "data_docs" / "index.html"),
    }


def message(summary: dict) -> str:
    """The readable summary of a failed validation: one line per critical failure."""
    crit = summary["critical_failures"]
    lines = [f"validate: {len(crit)} critical expectation(s) failed on run {summary['run_id']} "
             f"({len(summary['capture_ids'])} capture(s))"]
    lines += [f"  {o['table']}: " + Outcome(**o).line() for o in crit]
    lines += [f"  warning: {o['table']}: " + Outcome(**o).line() for o in summary["warnings"]]
    lines.append(f"  data docs: {summary['data_docs']}")
    return "\n".join(lines)


def _validate_table(suites: Suites, t: Table, df, gx_run, *, small: bool) -> list:
    """GX's results for one table's batch: collected and validated in pandas when ``small``, else cached in Spark."""
    if small:
        # Arrow keeps timestamps in microseconds: any year the table holds fits (nanoseconds stop in 2262)
        return suites.validate(t, df.toArrow().to_pandas(), gx_run)
    df = df.persist()
    try:
        return suites.validate(t, df, gx_run)
    finally:
        df.unpersist()


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> dict:
    """Validate every table's rows of the given captures; returns the summary or raises ValidationFailed."""
    from jobs.lake import TableStore
    from jobs.quality import RunTables, batch
    from schemas.expectations import Settings

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"])
    quality = quality_dir(store)
    ids = _capture_ids(store, capture_ids)
    suites = Suites(gx_context(quality), Settings.from_config(conf), conf["validate.sample_keys"])
    from great_expectations.core.run_identifier import RunIdentifier

    gx_run = RunIdentifier(run_name=run_id, run_time=dt.datetime.now(dt.timezone.utc))
    tables = RunTables(store, ids)
    results: list[Outcome] = []
    rows: dict[str, int] = {}
    try:
        for name, t in ALL_TABLES.items():
            t0 = time.monotonic()
            n = store.rows(name, ids)
            if n == 0:  # nothing to hold to the suite (e.g. broker_events of a run without logs)
                rows[name] = 0
                continue
            table_results = _validate_table(suites, t, batch(t, tables, conf), gx_run, small=n <= conf["validate.pandas_max_rows"])
            rows[name] = next((r.result["element_count"] for r in table_results if "element_count" in (r.result or {})), None)
            results += outcomes(t, table_results)
            log.info("%s: %s rows validated in %.1fs", name, rows[name], time.monotonic() - t0)
    finally:
        tables.close()
    suites.build_docs()
    summary = _summary(run_id, ids, rows, results, quality)
    (quality / "runs").mkdir(parents=True, exist_ok=True)
    (quality / "runs" / f"{run_id}.json").write_text(json.dumps(summary, indent=1, default=str))
    if not summary["success"]:
        raise ValidationFailed(message(summary), summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import job_main

    return job_main(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
