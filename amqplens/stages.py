"""The stages of a run, in order: one registry for the ``amqplens`` command, the spark-submit entry scripts
(``jobs/<stage>.py``) and the Airflow DAG's task chain (``jobs/dag_amqplens.py``).

Standard library only: the CLI reads it before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class StageDef:
    name: str  # the subcommand, the DAG's task (with _), the entry script (jobs/<name with _>.py)
    module: str  # its module; ``run(spark, conf, ...)`` does the work
    help: str
    reads: str  # what the stage reads: "captures", "logs" or "lake" (the tables earlier stages wrote)

    @property
    def script(self) -> str:
        return self.name.replace("-", "_") + ".py"

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


STAGES = (
    StageDef("ingest-captures", "amqplens.jobs.ingest_captures",
             "captures -> captures, connections, frames, decode_errors (and, fused, the lifecycle tables)", "captures"),
    StageDef("ingest-logs", "amqplens.jobs.ingest_logs",
             "broker logs -> broker_events, deliveries (trace), frames (trace_log), connections (log)", "logs"),
    StageDef("lifecycle", "amqplens.jobs.lifecycle", "frames -> deliveries, flow_events, request_responses", "lake"),
    StageDef("metrics", "amqplens.jobs.metrics",
             "lifecycle tables -> metrics_latency, metrics_settlement, metrics_flow, metrics_errors", "lake"),
    StageDef("findings", "amqplens.jobs.findings",
             "lifecycle and metric tables -> findings (what went wrong, with evidence: blocked publishers, slow consumers, "
             "refused logins, error codes, ...)", "lake"),
    StageDef("validate", "amqplens.jobs.validate",
             "run the expectation suites on the tables; data docs and results in <lake>/_quality", "lake"),
    StageDef("report", "amqplens.report",
             "write the HTML report (interactive plots, PNG copies, top-N tables, a page per connection)", "lake"),
)
BY_NAME = {s.name: s for s in STAGES}
CHAIN = tuple(s.name for s in STAGES)


def stage(name: str) -> StageDef:
    """The stage called ``name`` (its subcommand, or its script's name with _)."""
    return BY_NAME[name.replace("_", "-")]
