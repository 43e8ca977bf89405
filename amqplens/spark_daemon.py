"""Spark's Python daemon (``pyspark.daemon``) with the modules of amqplens's tasks imported before it forks a worker.

The embedded session (``session.get_spark``, a ``local`` master) names this module as ``spark.python.daemon.module``:
each worker it forks starts with the decoder, the lifecycle and their libraries already imported (numpy, pyarrow,
numba), where each worker imported them itself at its first task, both workers at once on two cores: 1.2-1.4 s of
the 2 GB load capture's two ingest tasks each, against about 0.7 s here once, alone. Nothing else changes: the
daemon's loop and the worker are pyspark's own. An import that fails leaves the daemon as pyspark's (the task then
fails on the same import, with its message)."""

from __future__ import annotations

import contextlib

# the tasks' modules: what the ingest and lifecycle jobs' functions import when a worker unpickles them
with contextlib.suppress(Exception):
    import amqplens.jobs.ingest_captures  # noqa: F401
    import amqplens.jobs.lifecycle  # noqa: F401

from pyspark import daemon  # noqa: E402

if __name__ == "__main__":
    daemon.manager()
