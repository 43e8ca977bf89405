"""Shared fixtures. One SparkSession for the whole run (local[2], UI off)."""

from __future__ import annotations

import pathlib

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
