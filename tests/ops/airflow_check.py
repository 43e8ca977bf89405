"""Run inside the Airflow venv (.venv-airflow) by tests/ops/test_dag.py; prints one JSON object.

``graph DAG_FILE``: what DagBag makes of the file (import errors, tasks, edges,
the rendered spark-submit arguments of every task for one date).
``test DAG_FILE DATE``: ``dag.test()`` for that logical date; the state of every task.
``last DAG_FILE PUSHED_JSON``: the last task's callable with the XComs the ingest tasks pushed ({task_id: lines});
what it raised, if anything.
AIRFLOW_HOME and the amqplens settings come from the environment the test sets.
"""

from __future__ import annotations

import datetime
import json
import sys


def load(dag_file: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=dag_file)
    return bag, bag.dags.get("amqplens")


def graph(dag_file: str) -> dict:
    bag, dag = load(dag_file)
    out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dag_ids": sorted(bag.dag_ids)}
    if dag is None:
        return out
    out["tasks"] = {
        t.task_id: {
            "upstream": sorted(t.upstream_task_ids),
            "downstream": sorted(t.downstream_task_ids),
            "retries": t.retries,
            "application": getattr(t, "application", None),
            "py_files": getattr(t, "py_files", None),
            "application_args": getattr(t, "application_args", None),
        }
        for t in dag.tasks
    }
    out["schedule"] = [str(dag.schedule), type(dag.timetable).__name__]
    out["max_active_runs"] = dag.max_active_runs
    out["params"] = {k: dag.params[k] for k in dag.params}
    return out


def test(dag_file: str, date: str) -> dict:
    from airflow.utils.db import resetdb

    resetdb(skip_init=False)
    _, dag = load(dag_file)
    for task in dag.tasks:  # a failure should end the test at once, not wait for retry_delay
        task.retries = 0
    run = dag.test(logical_date=datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.timezone.utc))
    return {"state": str(run.state), "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()}}


def last(dag_file: str, pushed_json: str) -> dict:
    _, dag = load(dag_file)
    pushed = json.loads(pushed_json)

    class Pulled:  # the one thing the callable asks of its task instance: the ingest tasks' XComs
        def xcom_pull(self, task_ids, key):
            return pushed.get(task_ids) if key == "failed_captures" else None

    try:
        dag.get_task("captures_failed").python_callable(ti=Pulled())
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None}


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    result = {"graph": graph, "test": test, "last": last}[command](*args)
    print("AIRFLOW_CHECK " + json.dumps(result, default=str))
