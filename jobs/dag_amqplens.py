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
import re
import shlex

from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, chain
from airflow.providers.standard.operators.python import PythonOperator

# The stages in the order they run (amqplens/stages.py CHAIN: this file imports only Airflow, so it keeps a copy,
# which tests/unit/test_layout.py holds to the registry); each is jobs/<name with _>.py and `amqplens <name>`.
JOB_CHAIN = ("ingest-captures", "ingest-logs", "lifecycle", "metrics", "findings", "validate", "report")

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


# amqplens's exit status "completed, but some captures failed" (amqplens/cli.py): the job wrote every other capture
CAPTURES_FAILED = 3
# the jobs whose exit 3 is a soft outcome: the later stages run for what they wrote, the last task fails the day
INGEST_JOBS = ("ingest-captures", "ingest-logs")
CHECK_TASK = "captures_failed"


class AmqplensSubmit(SparkSubmitOperator):
    """One amqplens job. With ``soft_exit_3``, exit 3 (some captures failed, the others written) ends the task as a
    success and hands the lines of the job's own summary (``amqplens: completed, N capture(s) failed:`` and one line
    per capture) to the last task by XCom, so that one bad capture does not hold back the day's other captures."""

    def __init__(self, *, soft_exit_3: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.soft_exit_3 = soft_exit_3

    def execute(self, context):
        try:
            super().execute(context)
        except AirflowException as exc:
            if not (self.soft_exit_3 and f"Error code is: {CAPTURES_FAILED}." in str(exc)):
                raise
            # the hook keeps the job's last output lines, stripped: the summary, then "<capture id[:12]>  <path>: <error>"
            said = [line.strip() for line in str(exc).split("Last spark-submit output:", 1)[-1].splitlines()]
            start = next((i for i, line in enumerate(said) if "capture(s) failed" in line), None)
            named = [] if start is None else [said[start]] + [
                line for line in said[start + 1:] if re.match(r"[0-9a-f]{12}  \S", line)]
            failed = named or [f"{self.task_id} exited {CAPTURES_FAILED} (some captures failed): see its log"]
            self.log.warning("some captures failed; the later stages run for the others:\n%s", "\n".join(failed))
            context["ti"].xcom_push(key="failed_captures", value=failed)


def fail_if_captures_failed(ti=None, **_) -> None:
    """The day's last task: after the report is written, fail visibly when an ingest task reported failed captures."""
    failed = [line for job in INGEST_JOBS
              for line in ti.xcom_pull(task_ids=job.replace("-", "_"), key="failed_captures") or []]
    if failed:
        raise AirflowFailException("captures failed (the other captures' tables and the report are written):\n"
                                   + "\n".join(failed))


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
        AmqplensSubmit(
            task_id=job.replace("-", "_"),
            soft_exit_3=job in INGEST_JOBS,
            name=f"amqplens-{job}-{{{{ ds }}}}",
            conn_id=os.environ.get("AMQPLENS_SPARK_CONN", "spark_default"),
            application=job_application(job),
            py_files=os.environ.get("AMQPLENS_PY_FILES", str(_HERE.parent / "dist" / "amqplens-py-files.zip")),
            application_args=job_arguments(job),
            # static settings, so given at submit time (amqplens/session.py says why: the debugging is off, the
            # Python workers' Arrow buffers come from jemalloc)
            conf={"spark.python.sql.dataFrameDebugging.enabled": "false",
                  "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "jemalloc"},
        )
        for job in JOB_CHAIN
    ], PythonOperator(task_id=CHECK_TASK, python_callable=fail_if_captures_failed, retries=0))
