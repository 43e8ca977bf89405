"""The findings stage: lifecycle and metric tables -> findings (what went wrong, with evidence).

The job (``run``) is in job.py; the rules, one module per family: flow.py (publisher_blocked, channel_flow_off,
slow_consumer, credit_starved), settlement.py (unsettled_at_end, returned_unroutable, publish_nacked,
rejected_by_consumer, redelivery_loop, slow_settle), connections.py (heartbeat_timeout, abrupt_end, access_refused,
tls_not_decrypted, capture_gaps, connection_churn), errors.py (connection_error, channel_error, link_error,
consumer_cancelled); what they read in inputs.py. Every rule is defined in amqplens/contracts/findings.py
(FINDING_RULES) and docs/tables.md.
"""

from amqplens.jobs.findings.job import JOB, app_id, findings, run

__all__ = ["JOB", "app_id", "findings", "run"]
