"""spark-submit runs the jobs from the `make dist` zip alone, with the CLI's arguments and config, in its own JVM."""

from __future__ import annotations

import subprocess
import sys

import pytest
from deltalake import DeltaTable

from amqplens.config import load_config
from tests.conftest import DATA, ROOT
from tests.oracles.tshark import tshark_conversations
from tests.ops.sparkproc import ZIP_NAME, imported_from, spark_submit

pytestmark = [pytest.mark.e2e, pytest.mark.tshark]


def test_spark_submit_runs_the_job_from_the_zip(tmp_path, built_dist):
    capture = DATA / "broker" / "tx.pcap"
    proc = spark_submit("local[2]", built_dist, ["ingest-captures", "--input", str(capture), "--lake", str(tmp_path / "lake"),
                                                 "--set", "spark.shuffle_partitions=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    driver, executors = imported_from(proc.stdout)
    # The venv has the source tree installed in editable mode: the zip must come first, on both sides.
    assert all(str(built_dist / ZIP_NAME) in p for p in driver), driver
    assert len(executors) == 2 and all(ZIP_NAME in p and str(ROOT) not in p for p in executors), executors
    assert "ingest-captures: 1 capture(s) written" in proc.stdout
    conns = DeltaTable(str(tmp_path / "lake" / "connections")).to_pyarrow_table()
    expected = [c for c in tshark_conversations(capture) if 5672 in (c["port_a"], c["port_b"])]
    assert conns.num_rows == len(expected) > 0
    assert DeltaTable(str(tmp_path / "lake" / "frames")).to_pyarrow_table().num_rows > 0


def test_a_job_module_from_the_zip_reads_conf_defaults_from_the_zip(tmp_path, built_dist):
    """The defaults travel in the zip: conf/defaults.yaml is read from inside it, and a bad --set still names the key."""
    zipped = built_dist / ZIP_NAME
    probe = ("import sys; from amqplens.config import CONF_DIR, load_config; print(CONF_DIR); "
             "print(load_config()['capture.split_size']); load_config(sets=['capture.split_size=huge'])")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(zipped), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    conf_dir, split_size = proc.stdout.split()[:2]
    assert conf_dir == f"{zipped}/conf/"
    assert int(split_size) == load_config()["capture.split_size"]  # the source tree's conf/defaults.yaml
    assert "config key 'capture.split_size': got 'huge', expected a size in bytes" in proc.stderr


def test_bad_config_fails_before_spark_starts(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "amqplens.cli", "ingest-captures", "--input", str(DATA / "broker" / "tx.pcap"),
         "--lake", str(tmp_path), "--set", "capture.split_size=huge"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "config key 'capture.split_size': got 'huge', expected a size in bytes" in proc.stderr
    assert not (tmp_path / "captures").exists()
