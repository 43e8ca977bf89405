"""The live progress line of a stage over several Spark jobs (issue 36.6: the total jumped 15 -> 8 -> 29 and the count
never moved, as the line showed only the stages running at that instant)."""

from __future__ import annotations

import io
import re
import time

import pytest

from amqplens.progress import Stage

pytestmark = pytest.mark.spark


def _slow(rows):
    time.sleep(0.8)
    yield from rows


def test_the_task_count_only_grows_over_the_jobs_of_a_stage(spark):
    out = io.StringIO()
    with Stage("metrics", spark, out=out, tty=False, plain_every_s=0.2) as stage:
        for _ in range(3):  # three jobs of 2 tasks each, one after another, as a stage of several queries runs them
            spark.sparkContext.parallelize(range(4), 2).mapPartitions(_slow).count()
        time.sleep(0.5)
        stage.done("1 capture(s) written")
    seen = [tuple(map(int, m.groups())) for m in re.finditer(r"tasks (\d+)/(\d+)", out.getvalue())]
    assert seen, out.getvalue()
    done = [d for d, _ in seen]
    assert done == sorted(done), out.getvalue()  # never goes back
    assert all(d <= t for d, t in seen)
    assert seen[-1] == (6, 6) and "(3 jobs)" in out.getvalue().splitlines()[-2], out.getvalue()
