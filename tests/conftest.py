"""Shared fixtures. One SparkSession for the whole run (local[2], UI off)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


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
