"""`spark-submit jobs/ingest_captures.py` takes the CLI's arguments and config, in its own JVM."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pyspark
import pytest
from deltalake import DeltaTable

from tests.conftest import DATA, ROOT
from tests.oracles.tshark import tshark_conversations

pytestmark = [pytest.mark.e2e, pytest.mark.tshark]


def test_spark_submit_runs_the_job(tmp_path):
    spark_home = pathlib.Path(pyspark.__file__).parent
    capture = DATA / "broker" / "tx.pcap"
    env = dict(os.environ, SPARK_HOME=str(spark_home), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [str(spark_home / "bin" / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         str(ROOT / "jobs" / "ingest_captures.py"), "--input", str(capture), "--lake", str(tmp_path / "lake"),
         "--set", "spark.shuffle_partitions=2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ingest-captures: 1 capture(s) written" in proc.stdout
    conns = DeltaTable(str(tmp_path / "lake" / "connections")).to_pyarrow_table()
    expected = [c for c in tshark_conversations(capture) if 5672 in (c["port_a"], c["port_b"])]
    assert conns.num_rows == len(expected) > 0
    assert DeltaTable(str(tmp_path / "lake" / "frames")).to_pyarrow_table().num_rows > 0


def test_bad_config_fails_before_spark_starts(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest-captures", "--input", str(DATA / "broker" / "tx.pcap"),
         "--lake", str(tmp_path), "--set", "capture.split_size=huge"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "config key 'capture.split_size': got 'huge', expected a size in bytes" in proc.stderr
    assert not (tmp_path / "captures").exists()
