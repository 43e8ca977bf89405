"""The daily amqplens DAG: one spark-submit per job over the day's input folder.

Each run date ``ds`` reads the captures under ``<input_root>/<ds>/captures/``
and the broker logs under ``<input_root>/<ds>/logs/`` (both searched
recursively) and runs the jobs of ``JOB_CHAIN`` in order, each as
``spark-submit --py-files <zip> <jobs_dir>/<job>.py`` with the same arguments
``amqplens <job>`` takes. Re-running a date is safe: the jobs skip inputs
whose Delta transaction ids are already in the lake, and every task of a run
uses the run id ``airflow-<ds>``.

Only Airflow is imported here (Airflow's best practice for DAG files): the
jobs run in spark-submit's own processes, with the dependencies of the zip
and of ``PYSPARK_PYTHON``, never in the Airflow worker.

Deployment settings are environment variables read when the file is parsed:

| variable | default | meaning |
| --- | --- | --- |
| AMQPLENS_INPUT_ROOT | /data/amqplens/input | dated input folders live under it (DAG param ``input_root``) |
| AMQPLENS_LAKE | /data/amqplens/lake | lake root (DAG param ``lake``) |
| AMQPLENS_REPORT_ROOT | /data/amqplens/report | one report folder per date under it (DAG param ``report_root``) |
| AMQPLENS_PY_FILES | <repo>/dist/amqplens-py-files.zip | the zip ``make dist`` builds |
| AMQPLENS_JOBS_DIR | the folder of this file | where the stages' entry scripts (spark-submit's application, jobs/<stage>.py) are |
| AMQPLENS_CONFIG | (none) | config files, separated by ``os.pathsep``: one ``--config`` each |
| AMQPLENS_SET | (none) | ``key=value`` overrides, separated by spaces: one ``--set`` each |
| AMQPLENS_SPARK_CONN | spark_default | the Airflow Spark connection (its host is the master) |
"""

from __future__ import annotations

import datetime
import os
import pathlib
import shlex

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, chain

# The stages in the order they run (amqplens/stages.py CHAIN: this file imports only Airflow, so it keeps a copy,
# which tests/unit/test_layout.py holds to the registry); each is jobs/<name with _>.py and `amqplens <name>`.
JOB_CHAIN = ("ingest-captures", "ingest-logs", "lifecycle", "metrics", "validate", "report")

DAY_FOLDER = "{{ params.input_root }}/{{ ds }}"
RUN_ID = "airflow-{{ ds }}"

_HERE = pathlib.Path(__file__).resolve().parent


def _config_arguments() -> list[str]:
    files = [f for f in os.environ.get("AMQPLENS_CONFIG", "").split(os.pathsep) if f]
    sets = shlex.split(os.environ.get("AMQPLENS_SET", ""))
    return [arg for f in files for arg in ("--config", f)] + [arg for s in sets for arg in ("--set", s)]


def job_arguments(job: str) -> list[str]:
    """The templated arguments of one job: its inputs, then what every job shares."""
    own = {
        "ingest-captures": ["--input", f"{DAY_FOLDER}/captures"],
        "ingest-logs": ["--logs", f"{DAY_FOLDER}/logs"],
        "report": ["--out", "{{ params.report_root }}/{{ ds }}"],
    }
    return own.get(job, []) + ["--lake", "{{ params.lake }}", "--run-id", RUN_ID, *_config_arguments()]


def job_application(job: str) -> str:
    return str(pathlib.Path(os.environ.get("AMQPLENS_JOBS_DIR", _HERE)) / f"{job.replace('-', '_')}.py")


with DAG(
    dag_id="amqplens",
    description="AMQP captures and broker logs of one day into the Delta lake, validated, with a report",
    schedule="@daily",
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    # Two runs committing to the same tables would only conflict; dates run one after another.
    max_active_runs=1,
    default_args={
        "retries": 2,
        "retry_delay": datetime.timedelta(minutes=5),
        "execution_timeout": datetime.timedelta(hours=6),
    },
    params={
        "input_root": Param(os.environ.get("AMQPLENS_INPUT_ROOT", "/data/amqplens/input"), type="string"),
        "lake": Param(os.environ.get("AMQPLENS_LAKE", "/data/amqplens/lake"), type="string"),
        "report_root": Param(os.environ.get("AMQPLENS_REPORT_ROOT", "/data/amqplens/report"), type="string"),
    },
    tags=["amqplens"],
) as dag:
    chain(*[
        SparkSubmitOperator(
            task_id=job.replace("-", "_"),
            name=f"amqplens-{job}-{{{{ ds }}}}",
            conn_id=os.environ.get("AMQPLENS_SPARK_CONN", "spark_default"),
            application=job_application(job),
            py_files=os.environ.get("AMQPLENS_PY_FILES", str(_HERE.parent / "dist" / "amqplens-py-files.zip")),
            application_args=job_arguments(job),
            # a static setting, so given at submit time (amqplens/session.py says why it is off)
            conf={"spark.python.sql.dataFrameDebugging.enabled": "false"},
        )
        for job in JOB_CHAIN
    ])
