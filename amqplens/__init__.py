"""amqplens: AMQP traffic from packet captures and broker logs into a Delta lakehouse, on Spark.

The sub-packages follow the data:

- ``amqplens.decode``: capture files -> TCP streams -> one codec per dialect (0-8 .. 0-9-1, 0-10, 1.0, the
  drafts) -> frame, connection and error rows; TLS with key logs. Plain Python (numpy, pyarrow, numba), no Spark.
- ``amqplens.lifecycle``: frame rows of a connection -> deliveries, flow events, request/responses (the state
  machines). ``amqplens.logs``: broker logs -> rows. Neither imports Spark either.
- ``amqplens.contracts``: the tables' contracts (columns, types, docs, expectation suites).
- ``amqplens.lake``: the Delta tables (delta-rs commits, staged files, one failing capture isolated).
- ``amqplens.jobs``: one module per Spark stage; ``amqplens.report``: the HTML report.
- ``amqplens.stages``: the stages in order, for ``amqplens.cli`` (the ``amqplens`` command), the spark-submit
  entry scripts (``jobs/`` at the top of the repository, outside the wheel) and the Airflow DAG.
"""

from amqplens.decode import __version__

__all__ = ["__version__"]
