"""The Airflow DAG (jobs/dag_amqplens.py), loaded and run by Airflow itself.

Airflow lives in its own venv (.venv-airflow, `make airflow`; the Makefile says why), so
these tests run tests/ops/airflow_check.py there and read the JSON it prints.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from tests.conftest import DATA, ROOT
from tests.oracles.tshark import tshark_conversations
from tests.ops.sparkproc import ZIP_NAME, spark_env

DAG_FILE = ROOT / "jobs" / "dag_amqplens.py"
AIRFLOW_PYTHON = ROOT / ".venv-airflow" / "bin" / "python"
CHECK = ROOT / "tests" / "ops" / "airflow_check.py"
# The order the issue asks for; the DAG's JOB_CHAIN must be exactly this.
INTENDED = ["ingest-captures", "ingest-logs", "lifecycle", "metrics", "findings", "validate", "report"]
DAY = "2026-11-21"
CAPTURE = DATA / "logs" / "broker_logs.pcap"  # the log below was written by the broker of this capture
LOG = DATA / "logs" / "rabbitmq_3_10.log"
LAST_TASK = "captures_failed"  # the last task: fails the day, after the report, when a capture failed


def _dag_constant(name: str):
    tree = ast.parse(DAG_FILE.read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == name)


def _airflow(command: str, tmp_path, env: dict[str, str], *args: str, timeout: int = 120) -> dict:
    if not AIRFLOW_PYTHON.exists():
        pytest.fail("the Airflow venv is missing: run `make airflow` (make test builds it)")
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True, exist_ok=True)
    link = home / "dags" / DAG_FILE.name  # deployed as a symlink; the DAG finds the job modules next to its real path
    if not link.exists():
        link.symlink_to(DAG_FILE)
    env = dict(env, AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db")
    proc = subprocess.run([str(AIRFLOW_PYTHON), str(CHECK), command, str(link), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    (tmp_path / f"airflow_{command}.log").write_text(proc.stdout + proc.stderr)
    out = [line for line in proc.stdout.splitlines() if line.startswith("AIRFLOW_CHECK ")]
    assert proc.returncode == 0 and out, (proc.stdout + proc.stderr)[-6000:]
    # What the jobs said, without Spark's own INFO/WARN lines: enough to see why a task failed.
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if " INFO " not in line and " WARN " not in line]
    return dict(json.loads(out[-1].split(" ", 1)[1]), log="\n".join(said)[-8000:])


def test_dag_file_imports_only_airflow_and_the_standard_library():
    """Airflow parses DAG files often: pyspark, pandas or our jobs at the top would slow every parse."""
    tops = {(a.name if isinstance(n, ast.Import) else n.module).split(".")[0]
            for n in ast.parse(DAG_FILE.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert "airflow" in tops
    assert tops - {"airflow", "__future__"} <= sys.stdlib_module_names, tops


def test_dagbag_loads_the_chain_of_jobs(tmp_path):
    env = dict(os.environ, AMQPLENS_LAKE=str(tmp_path / "lake"), AMQPLENS_CONFIG=f"/etc/a.yaml{os.pathsep}/etc/b.yaml",
               AMQPLENS_SET="spark.shuffle_partitions=64 metrics.bucket=5m")
    got = _airflow("graph", tmp_path, env)
    assert got["import_errors"] == {}
    assert got["dag_ids"] == ["amqplens"]  # no example DAGs
    assert _dag_constant("JOB_CHAIN") == tuple(INTENDED)
    ids = [j.replace("-", "_") for j in INTENDED]
    tasks = got["tasks"]
    assert sorted(tasks) == sorted([*ids, LAST_TASK])
    assert tasks[LAST_TASK]["upstream"] == [ids[-1]] and tasks[LAST_TASK]["downstream"] == []
    for before, task, after in zip([None, *ids], ids, [*ids[1:], LAST_TASK]):
        assert tasks[task]["upstream"] == ([before] if before else []), task
        assert tasks[task]["downstream"] == ([after] if after else []), task
        app = ROOT / "jobs" / f"{task}.py"
        assert tasks[task]["application"] == str(app)
        assert tasks[task]["retries"] == 2
        assert tasks[task]["py_files"] == str(ROOT / "dist" / ZIP_NAME)
        args = tasks[task]["application_args"]
        assert args[-8:] == ["--config", "/etc/a.yaml", "--config", "/etc/b.yaml", "--set", "spark.shuffle_partitions=64",
                             "--set", "metrics.bucket=5m"]
        assert args[args.index("--lake") + 1] == "{{ params.lake }}" and args[args.index("--run-id") + 1] == "airflow-{{ ds }}"
    assert tasks["ingest_captures"]["application_args"][:2] == ["--input", "{{ params.input_root }}/{{ ds }}/captures"]
    assert tasks["ingest_logs"]["application_args"][:2] == ["--logs", "{{ params.input_root }}/{{ ds }}/logs"]
    assert got["params"]["lake"] == str(tmp_path / "lake")
    assert got["schedule"] == ["@daily", "CronTriggerTimetable"] and got["max_active_runs"] == 1


def _dag_test_day(tmp_path, built_dist) -> tuple[dict, object, object]:
    """``dag.test()`` of DAY over ``tmp_path/input`` with spark-submit --master local[2]: (result, lake, report root)."""
    lake, reports = tmp_path / "lake", tmp_path / "report"
    env = spark_env(
        PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",  # spark-submit, as on an Airflow worker
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        AMQPLENS_INPUT_ROOT=str(tmp_path / "input"), AMQPLENS_LAKE=str(lake), AMQPLENS_REPORT_ROOT=str(reports),
        AMQPLENS_PY_FILES=str(built_dist / ZIP_NAME), AMQPLENS_SET="spark.shuffle_partitions=2 spark.ui_enabled=false")
    # seven tasks, six of them a spark-submit each: minutes on a loaded machine
    return _airflow("test", tmp_path, env, DAY, timeout=1800), lake, reports


def test_the_last_task_passes_a_clean_day_and_fails_one_with_failed_captures(tmp_path):
    """The day's last task on its own (the DAG run below takes the failing path end to end): no ingest task pushed
    failed captures, it passes; one did, it fails with their lines."""
    env = dict(os.environ, AMQPLENS_LAKE=str(tmp_path / "lake"))
    assert _airflow("last", tmp_path, env, json.dumps({}))["raised"] is None
    lines = ["amqplens: completed, 1 capture(s) failed:", "0123456789ab  /in/x.pcap: not a capture"]
    got = _airflow("last", tmp_path, env, json.dumps({"ingest_captures": lines}))
    assert got["raised"] == "AirflowFailException"
    assert got["message"].endswith("\n".join(lines)) and "captures failed" in got["message"]


@pytest.mark.e2e
@pytest.mark.tshark
def test_dag_test_runs_every_job_on_the_days_folder_and_fails_last_for_a_bad_capture(tmp_path, built_dist):
    """One ``dag.test()`` of a day (it used to be two: a clean day and one with a bad capture; each is seven
    spark-submits). Bad input tried: a text file among the day's captures. Its ingest exits 3 (amqplens/cli.py); the
    later stages run for the good capture and the log, the report is written, and only then the last task fails,
    naming the bad file. Another day's folder is not read."""
    day = tmp_path / "input" / DAY
    (day / "captures").mkdir(parents=True)
    (day / "logs").mkdir()
    shutil.copy(CAPTURE, day / "captures")
    (day / "captures" / "not_a_capture.pcap").write_text("this is a text file, not a capture\n" * 8)
    shutil.copy(LOG, day / "logs")  # a day folder with no log at all is a usage error of ingest-logs (exit 2)
    other_day = tmp_path / "input" / "2026-11-20" / "captures"  # must not be read by the run of DAY
    other_day.mkdir(parents=True)
    shutil.copy(DATA / "broker" / "tx.pcap", other_day)
    got, lake, reports = _dag_test_day(tmp_path, built_dist)
    assert got["tasks"] == {**{j.replace("-", "_"): "success" for j in INTENDED}, LAST_TASK: "failed"}, got["log"]
    assert got["state"] == "failed"
    failure = got["log"].split("captures failed (the other captures", 1)
    assert len(failure) == 2 and "not_a_capture.pcap" in failure[1]

    captures = DeltaTable(str(lake / "captures")).to_pyarrow_table().to_pylist()
    status = {c["path"].rsplit("/", 1)[1]: c["status"] for c in captures}
    assert set(status) == {CAPTURE.name, LOG.name, "not_a_capture.pcap"}  # not tx.pcap
    assert (status[CAPTURE.name], status["not_a_capture.pcap"]) == ("ok", "failed")
    assert {c["run_id"] for c in captures} == {f"airflow-{DAY}"}
    conns = DeltaTable(str(lake / "connections")).to_pyarrow_table().to_pylist()
    expected = [c for c in tshark_conversations(CAPTURE) if 5672 in (c["port_a"], c["port_b"])]
    # the good capture went through every stage
    assert len([c for c in conns if c["source"] == "capture"]) == len(expected) > 0
    for table in ("frames", "broker_events", "deliveries", "flow_events", "request_responses",
                  "metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors", "findings"):
        assert DeltaTable(str(lake / table)).to_pyarrow_table().num_rows > 0, table
    assert (reports / DAY / "index.html").exists()  # written before the day failed
    assert json.loads((lake / "_quality" / "runs" / f"airflow-{DAY}.json").read_text())["run_id"] == f"airflow-{DAY}"
