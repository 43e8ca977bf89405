"""Shared fixtures. One SparkSession for the whole run (local[2], UI off)."""

from __future__ import annotations

import json
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
# cache keeps its tiered size (see amqplens/session.py QUICK_JIT).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")

# An xdist worker's __main__ (execnet) has neither __spec__ nor __file__, which pyspark.sql.connect (imported
# by great-expectations) takes for a doctest run without grpc, and answers with sys.exit(0) during collection.
_main = sys.modules.get("__main__")
if _main is not None and getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"


@pytest.fixture(scope="session")
def conf():
    from amqplens.config import load_config

    return load_config(sets=["spark.master=local[2]", "spark.shuffle_partitions=2", "spark.ui_enabled=false", "spark.progress_bar=off",
                             f"spark.extra={json.dumps(INTERPRETED)}"])


# The tests' session evaluates Spark SQL interpreted: thousands of queries over a few rows each, where compiling a
# query (whole-stage code and a class per expression, by Janino) costs more than running it: make test 8:56 -> 8:20 of
# pytest (2026-11-29). `factoryMode` is a setting Spark keeps for its own tests and not for production, so the
# pipeline itself runs compiled: the metrics lake's stage here (tests/metrics/conftest.py), the CLI's and the slow
# tier's runs, the benchmark; tests/metrics/test_codegen.py compares the two on a real capture.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
COMPILED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


@pytest.fixture(scope="session")
def spark(conf):
    from amqplens.session import get_spark

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


# ------------------------------------------------------------------ parallel runs (make test: pytest -n 2 --dist loadgroup)
def _group(item) -> str:
    """The xdist group of a test: the folder whose conftest holds a session fixture it uses (that folder's tests
    share one lake per worker, built once), else its own module (free to run on either worker)."""
    homes = {d.baseid for name in item.fixturenames for d in item._fixtureinfo.name2fixturedefs.get(name, ())
             if d.scope == "session" and d.baseid not in ("", "tests")}
    return max(homes, key=len) if homes else item.nodeid.split("::")[0]


# ------------------------------------------------------------------ the two tiers: make test and make test-slow
# `make test` (the README's test command) runs every test but these; `make test-slow` runs only these, and .ci/run
# runs both. Most start JVMs of their own beside the shared session, as an operator's process would: the CLI and
# spark-submit as subprocesses, Airflow's tasks, a standalone cluster, a wheel in a new venv, kills at random moments.
# The code paths they drive are tested in-process in the first tier; these check the processes around them. The
# others recompute a reference on a whole lake that a first-tier test already compares its path with on another
# lake or against plain Python (make test under 8 minutes on a quiet two-core host: issue 36).
SLOW = {
    "tests/metrics/test_metrics.py::test_counted_repeats_and_the_route_pass_give_the_same_rows_on_every_fixture":
        "metrics_latency's and metrics_flow's Spark references seven times over the fixtures' lake (first tier: "
        "tests/unit/test_grouped.py, the route pass against plain Python; the end-to-end pass against its reference)",
    "tests/logs/test_ingest_logs_e2e.py::test_report_engines_agree_on_broker_events_alarms_and_findings":
        "the report's Spark engine on the logs lake (first tier: tests/metrics/test_report_engines.py)",
    "tests/logs/test_ingest_logs_e2e.py::test_validate_on_spark_and_on_pandas_agree_on_logs_and_the_connections_they_name":
        "validate's Spark path on the logs lake (first tier: tests/validate/test_validate.py, both engines)",
    "tests/ops/test_dag.py::test_dag_test_runs_every_job_on_the_days_folder_and_fails_last_for_a_bad_capture":
        "Airflow runs every job as a spark-submit",
    "tests/lake/test_damage.py": "the CLI as a user runs it on damaged lakes (about 13 JVMs, kills, two runs at once)",
    "tests/e2e/test_fuzz_jobs.py": "three `amqplens run` subprocesses over mutants (make fuzz runs the campaign)",
    "tests/ops/test_wheel.py": "the wheel installed into a new venv, then its demo",
    "tests/ops/test_cluster.py": "a standalone Spark cluster",
    "tests/e2e/test_crash_restart.py": "runs killed in each stage, then rerun",
    "tests/e2e/test_spark_submit.py": "spark-submit with the zip of the package",
    "tests/e2e/test_security_run.py": "an `amqplens run` subprocess whose every output is searched for secrets",
    "tests/ops/test_summary.py::test_a_reader_that_closes_the_pipe_early_gets_no_traceback":
        "`amqplens summary` as a subprocess whose output pipe is closed",
}


def _slow(nodeid: str) -> bool:
    return any(nodeid == key or nodeid.startswith(key + "::") or nodeid.startswith(key + "[") for key in SLOW)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group markers in the workers
def pytest_collection_modifyitems(config, items):
    """Each test joins its module's xdist group (new tests too: nothing is listed by hand). Under xdist the groups with
    JVM work (spark or e2e tests) go first, so the long ones start early and the pure ones fill in behind."""
    heavy = set()
    # A module goes whole to one group, its tests' folder group if any has one (the deepest), so that its module
    # fixtures are built once: test_wild_run's lake was built on both workers while one of its tests shared the
    # folder's session lake and the others did not.
    folders: dict[str, set[str]] = {}
    for item in items:
        module, group = item.nodeid.split("::")[0], _group(item)
        folders.setdefault(module, set()).update({group} - {module})
    by_module = {module: max(groups, key=len) if groups else module for module, groups in folders.items()}
    for item in items:
        if _slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
        group = by_module[item.nodeid.split("::")[0]]
        item.add_marker(pytest.mark.xdist_group(group))
        if item.get_closest_marker("spark") or item.get_closest_marker("e2e"):
            heavy.add(group)
    if getattr(config.option, "numprocesses", None):
        items.sort(key=lambda item: by_module[item.nodeid.split("::")[0]] not in heavy)  # stable: collection order within each part
