"""Shared fixtures. One SparkSession for the whole run (local[2], UI off)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# Every JVM the tests start (the shared session, the CLI and spark-submit runs, the standalone cluster,
# Airflow's tasks) lives for seconds on small captures: the C1 compiler alone starts them about 30%
# sooner on two cores (38 s -> 27 s for one `amqplens run`). Results do not depend on the JIT. The code
# cache keeps its tiered size (see jobs/session.py QUICK_JIT).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")


@pytest.fixture(scope="session")
def conf():
    from jobs.config import load_config

    return load_config(sets=["spark.master=local[2]", "spark.shuffle_partitions=2", "spark.ui_enabled=false", "spark.progress_bar=off"])


@pytest.fixture(scope="session")
def spark(conf):
    from jobs.session import get_spark

    session = get_spark(conf)
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path):
    return tmp_path / "lake"


@pytest.fixture(scope="session")
def built_dist(tmp_path_factory):
    """`make dist` into a temporary folder (the venv as it is: -o keeps make from reinstalling it)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(["make", "-s", "-o", ".venv/.installed", "dist", f"DIST={out}", f"PY={sys.executable}"],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out
