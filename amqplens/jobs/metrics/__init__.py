"""The metrics stage: lifecycle tables (+ connections, frames, decode_errors) -> metrics_latency, metrics_settlement,
metrics_flow, metrics_errors.

The job (``run``) is in job.py; each table's pure DataFrame -> DataFrame function in its module: ``latency`` in
percentiles.py (its groups summarised in grouped.py), ``settlement`` in settlement.py, ``flow`` in flow.py, ``errors`` in faults.py; what they read in
inputs.py; buckets and entities in frame.py; the end-to-end matching in e2e.py. The definitions of every metric are
in amqplens/contracts/metrics.py and docs/metrics.md.
"""

from amqplens.jobs.metrics.faults import errors, peer_anomalies
from amqplens.jobs.metrics.flow import flow
from amqplens.jobs.metrics.inputs import CONTROL_COLUMNS, DELIVERY_COLUMNS, control_frames, deliveries_with_queue
from amqplens.jobs.metrics.job import JOB, app_id, run
from amqplens.jobs.metrics.percentiles import STATS_SCHEMA, group_stats, latency
from amqplens.jobs.metrics.settlement import UNSETTLED_AT_CLOSE, settlement

__all__ = ["CONTROL_COLUMNS", "DELIVERY_COLUMNS", "JOB", "STATS_SCHEMA", "UNSETTLED_AT_CLOSE", "app_id", "control_frames",
           "deliveries_with_queue", "errors", "flow", "group_stats", "latency", "peer_anomalies", "run", "settlement"]
