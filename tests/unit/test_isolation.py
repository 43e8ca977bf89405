"""amqplens/lake/isolation.py without Spark: which captures fail, what their error says, what is retried."""

from __future__ import annotations

import pytest

from amqplens.lake import isolation
from amqplens.inputs import InputError

# A Spark task failure as py4j shows it: the JVM's text with the Python worker's traceback inside.
SPARK_TEXT = """An error occurred while calling o123.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 4.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/amqplens/decode/pipeline.py", line 200, in read_splits
    raise ValueError("year 49195 is out of range")
ValueError: year 49195 is out of range

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
"""


def test_error_text_names_the_stage_and_the_worker_s_exception():
    assert isolation.error_text("ingest_captures", RuntimeError(SPARK_TEXT)) == "failed in ingest_captures: ValueError: year 49195 is out of range"
    assert isolation.error_text("lifecycle", KeyError("x")) == "failed in lifecycle: KeyError: 'x'"
    assert len(isolation.error_text("metrics", RuntimeError("y" * 5000))) == isolation.MAX_ERROR_CHARS


def test_a_stage_that_raises_runs_again_one_capture_at_a_time_and_only_the_culprit_fails():
    calls = []

    def run(ids):
        calls.append(list(ids))
        if "bad" in ids:
            raise ValueError("one bad capture")
        return [f"row-{i}" for i in ids]

    out = isolation.isolated("stage", ["a", "bad", "c"], run, lambda cid: run([cid]))
    assert calls == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
    assert out.results == ["row-a", "row-c"] and out.failed == {"bad": "failed in stage: ValueError: one bad capture"}


def test_a_stage_that_succeeds_runs_once_and_usage_errors_are_the_caller_s():
    calls = []
    out = isolation.isolated("stage", ["a", "b"], lambda ids: calls.append(ids) or ["x"], lambda cid: pytest.fail("no retry"))
    assert out.results == ["x"] and out.failed == {} and calls == [["a", "b"]]

    def bad_input(ids):
        raise InputError("input 'nope': no such file or folder")

    with pytest.raises(InputError):
        isolation.isolated("stage", ["a", "b"], bad_input, bad_input)


def test_units_of_failed_and_retried_captures_are_never_the_job_s_own():
    app = "amqplens/ingest_captures/abc/0.1.0+ff"
    assert isolation.failed_unit(app, "r1") != app and isolation.retry_unit(app, "r1") != app
    assert isolation.failed_unit(app, "r1") != isolation.failed_unit(app, "r2")
