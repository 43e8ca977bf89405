"""A real Spark standalone cluster on loopback: a master and two one-core workers started with the
spark-class launcher pyspark ships. `amqplens run` submitted to it with the built zip writes the same
tables as the local[2] run of the same capture. Its executors are separate processes on the workers,
so Parquet files are written there and committed by the driver (the TableStore's write path)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ROOT
from tests.ops.conftest import DEMO
from tests.ops.sparkproc import SPARK_HOME, ZIP_NAME, free_port, imported_from, lake_tables, spark_env, spark_submit

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def _daemon(cls: str, *args: str, log) -> subprocess.Popen:
    return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), f"org.apache.spark.deploy.{cls}", *args],
                            env=spark_env(SPARK_DAEMON_MEMORY="256m"), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _master_state(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        return json.load(r)


@contextlib.contextmanager
def standalone_cluster(work, workers: int = 2):
    """Yields the master URL once every worker has registered; stops every daemon afterwards."""
    port, ui = free_port(), free_port()
    procs = []
    log = open(work / "daemons.log", "w")
    try:
        procs.append(_daemon("master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui), log=log))
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            (work / f"worker{i}").mkdir()
            procs.append(_daemon("worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                 "--webui-port", str(free_port()), "--work-dir", str(work / f"worker{i}"), url, log=log))
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(OSError, ValueError):
                if _master_state(ui).get("aliveworkers") == workers:
                    break
            assert time.monotonic() < deadline, (work / "daemons.log").read_text()[-3000:]
            assert all(p.poll() is None for p in procs), (work / "daemons.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url, ui
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def test_run_on_a_standalone_cluster_equals_the_local_run(tmp_path, built_dist, demo_lake):
    lake = tmp_path / "lake"
    with standalone_cluster(tmp_path) as (url, ui):
        proc = spark_submit(url, built_dist, ["run", "--input", str(DEMO), "--lake", str(lake), "--run-id", "cluster",
                                              "--set", f"report.out={tmp_path / 'report'}"],
                            tmp_path, "spark.executor.memory=512m", "spark.executor.cores=1", "spark.cores.max=2",
                            timeout=900)  # ~60 s on an idle 2-core machine; minutes when it is shared
        assert proc.returncode == 0, proc.stderr[-4000:]
        apps = _master_state(ui)["completedapps"] + _master_state(ui)["activeapps"]
    driver, executors = imported_from(proc.stdout)
    # The executors imported the package from the copies of the zip they fetched, not from the source tree.
    assert all(str(built_dist / ZIP_NAME) in p for p in driver), driver
    assert all(ZIP_NAME in p and str(built_dist) not in p and str(ROOT) not in p for p in executors), executors
    # One application with both cores, and each worker launched an executor process for it.
    assert len(apps) == 1 and apps[0]["cores"] == 2
    assert all(len(list((tmp_path / f"worker{i}").glob("app-*/*/stderr"))) == 1 for i in range(2))
    assert (tmp_path / "report" / "index.html").exists()

    # the local run reads the capture by the direct path (capture.direct auto), the cluster by splits and a shuffle:
    # captures.splits says which (0: direct), every other column of every table must be the same
    ignore = ("run_id", "splits")
    cluster, local = lake_tables(lake, ignore), lake_tables(demo_lake, ignore)
    assert all(r["splits"] == 0 for r in lake_tables(demo_lake)["captures"])
    assert sorted(cluster) == sorted(local)
    assert {"captures", "connections", "frames", "deliveries", "metrics_latency"} <= set(cluster)
    for name in local:
        assert len(cluster[name]) == len(local[name]), name
        assert cluster[name] == local[name], name
    assert len(cluster["connections"]) > 0
