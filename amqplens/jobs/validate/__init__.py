"""The validate stage: the expectation suites of amqplens/contracts/expectations.py over what a run wrote -> <lake>/_quality.

The job (``run``) is in job.py; GX's context and suites in engine.py; the one-pass count of a table's checks in
tally.py; the extra columns of the cross-row checks in quality.py (Spark) and small.py (pandas); outcomes, the
summary and ``ValidationFailed`` in results.py.
"""

from amqplens.jobs.validate.engine import PANDAS, SPARK, Suites, gx_context
from amqplens.jobs.validate.job import JOB, QUALITY, batches, quality_dir, run
from amqplens.jobs.validate.results import Outcome, ValidationFailed, message, outcomes

__all__ = ["JOB", "PANDAS", "QUALITY", "SPARK", "Outcome", "Suites", "ValidationFailed", "batches", "gx_context", "message",
           "outcomes", "quality_dir", "run"]
