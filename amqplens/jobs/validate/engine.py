"""great-expectations, the engine of record: an ephemeral context whose only files are under ``<lake>/_quality``,
and per table its suite, validation definition and checkpoint (``Suites``).

A pandas batch (a small run, amqplens/jobs/validate/small.py) is validated by GX's pandas engine: every check's
counts, then the failed ones again with samples. A Spark batch is first counted in one pass
(amqplens/jobs/validate/tally.py) and GX validates that tally; only the checks it does not pass are validated by
GX's Spark engine on the batch, with samples of the offending rows.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib

from amqplens.contracts import Table
from amqplens.jobs.validate.results import Outcome, outcome, outcomes

SITE = "lake"
# Counts only on the first pass: a table that fails is validated again with samples of the offending rows.
COUNTS_ONLY = {"result_format": "BASIC", "partial_unexpected_count": 0}
SPARK, PANDAS, TALLY = "spark", "pandas", "tally"  # the GX engine a batch is validated by (a tally: pandas)


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


class Suites:
    """A data source per engine; per table an asset, its suite, a validation definition and a checkpoint; the docs site."""

    def __init__(self, context, settings, sample_keys: int):
        import great_expectations as gx

        self.gx, self.context, self.settings, self.sample_keys = gx, context, settings, sample_keys
        self.sources: dict = {}  # engine -> data source, added when first used (the Spark one tests its session)
        self.checkpoints: dict = {}
        self.stored: list = []  # the validation results of this run, for the data docs
        self.rows: dict[str, int] = {}  # table -> the rows of its batch that were validated

    def source(self, engine: str):
        if engine not in self.sources:
            add = self.context.data_sources
            self.sources[engine] = (add.add_spark(name="lake", persist=False) if engine == SPARK  # batches come cached
                                    else add.add_pandas(name=f"lake_{engine}"))
        return self.sources[engine]

    def build_docs(self) -> None:
        """Render this run's results and the index once: each build compiles GX's page templates anew."""
        self.context.build_data_docs(site_names=[SITE], resource_identifiers=self.stored)

    def _checkpoint(self, s, engine: str, result_format: dict):
        if (s.name, engine) in self.checkpoints:
            return self.checkpoints[s.name, engine]
        gx = self.gx
        s = self.context.suites.add(s)
        asset = self.source(engine).add_dataframe_asset(name=s.name)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=s.name, data=asset.add_batch_definition_whole_dataframe("run"), suite=s))
        self.checkpoints[s.name, engine] = self.context.checkpoints.add(gx.Checkpoint(
            name=f"amqplens_{s.name}_{engine}", validation_definitions=[definition], result_format=result_format))
        return self.checkpoints[s.name, engine]

    def checkpoint(self, t: Table, engine: str, only: set[str] | None = None):
        """The table's checkpoint, or (``only``) one of just those checks that also returns samples of offending rows."""
        from amqplens.contracts.expectations import suite

        result_format = COUNTS_ONLY if only is None else {
            "result_format": "SUMMARY", "partial_unexpected_count": self.sample_keys, "unexpected_index_column_names": list(t.key)}
        return self._checkpoint(suite(t, self.settings, only), engine, result_format)

    def _run(self, checkpoint, df, run_id) -> list:
        ((key, validation),) = checkpoint.run(batch_parameters={"dataframe": df}, run_id=run_id).run_results.items()
        self.stored.append(key)
        return validation.results

    def validate(self, t: Table, df, run_id, counted=None) -> list[Outcome]:
        """Validate ``df`` (a pandas frame, a Spark DataFrame or a quality.SparkBatch) as table ``t``: every check's
        outcome, with samples of the failed ones. ``counted``: a Spark batch's tally (tally.py) when it was counted
        already."""
        import pandas as pd

        if not isinstance(df, pd.DataFrame):
            return self._validate_tallied(t, df, run_id, counted)
        self.rows[t.name] = len(df)
        first = self._run(self.checkpoint(t, PANDAS), df, run_id)
        failed = {r.expectation_config.meta["name"] for r in first if not r.success}
        if not failed:
            return outcomes(t, first)
        detail = {r.expectation_config.meta["name"]: r for r in self._run(self.checkpoint(t, PANDAS, failed), df, run_id)}
        return outcomes(t, [detail.get(r.expectation_config.meta["name"], r) for r in first])

    def _validate_tallied(self, t: Table, df, run_id, counted=None) -> list[Outcome]:
        """A Spark batch: counted in one pass (unless ``counted`` is its tally already), the tally validated by GX,
        the checks it does not pass by GX on ``df`` (cached for them only)."""
        from amqplens.contracts.expectations import checks, tally_suite
        from amqplens.jobs.validate import tally
        from amqplens.jobs.validate.quality import SparkBatch

        if counted is None:
            counted = tally.count(t, df.full() if isinstance(df, SparkBatch) else df, self.settings)
        self.rows[t.name] = counted.rows
        settled = {name for name in counted.values if counted.settles(name)}
        passed: set[str] = set()
        if settled:
            s = tally_suite(t, self.settings, settled, set(counted.means))
            passed = {r.expectation_config.meta["name"] for r in self._run(self._checkpoint(s, TALLY, COUNTS_ONLY),
                                                                            counted.frame(), run_id) if r.success}
        names = [c.name for c in checks(t, self.settings)]
        rest = {name for name in names if name not in passed}
        detail = {}
        if rest:
            # a SparkBatch's plan is built only here: building each table's (a few hundred py4j calls) cost 0.6-1.5 s
            df = (df.full() if isinstance(df, SparkBatch) else df).persist()
            try:
                detail = {r.expectation_config.meta["name"]: r for r in self._run(self.checkpoint(t, SPARK, rest), df, run_id)}
            finally:
                df.unpersist()
        out = []
        for name in names:
            if name not in detail:
                out.append(Outcome(t.name, name, self.settings.severity(name), True, counted.observed(name), []))
                continue
            o = outcome(t, detail[name])
            out.append(dataclasses.replace(o, samples=[]) if o.success else o)  # samples of failures only, as on pandas
        return out
