"""Spark processes started the way a cluster starts them: spark-submit and spark-class from pyspark's SPARK_HOME."""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pyspark
from deltalake import DeltaTable

SPARK_HOME = pathlib.Path(pyspark.__file__).parent
DRIVER = pathlib.Path(__file__).resolve().parent / "zip_driver.py"
ZIP_NAME = "amqplens-py-files.zip"


def spark_env(**extra: str) -> dict[str, str]:
    """Driver and executors run this venv's Python (the package's dependencies), on loopback."""
    return dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
                PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", **extra)


def copy_driver(folder: pathlib.Path) -> pathlib.Path:
    """The driver script outside the source tree, so only the zip can provide the packages' modules."""
    return pathlib.Path(shutil.copy(DRIVER, folder / "amqplens_driver.py"))


def spark_submit(master: str, dist: pathlib.Path, args: list[str], cwd: pathlib.Path, *conf: str,
                 timeout: int = 300) -> subprocess.CompletedProcess:
    """``spark-submit --py-files <zip> <driver outside the repo> <amqplens args>`` from ``cwd``."""
    confs = [a for c in ("spark.ui.enabled=false", *conf) for a in ("--conf", c)]
    return subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, *confs, "--py-files", str(dist / ZIP_NAME),
         str(copy_driver(cwd)), *args],
        cwd=cwd, env=spark_env(), capture_output=True, text=True, timeout=timeout)


def imported_from(stdout: str) -> tuple[list[str], list[str]]:
    """(driver, executor) module paths the driver script printed."""
    lines = {line.split(" ", 1)[0]: line.split()[1:] for line in stdout.splitlines() if line.endswith(".py") and "_IMPORTS " in line}
    return lines["DRIVER_IMPORTS"], lines["EXECUTOR_IMPORTS"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _canonical(value):
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 6)  # sums of floats may add up in another order on other executors
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def lake_tables(lake: pathlib.Path, ignore: tuple[str, ...] = ("run_id",)) -> dict[str, list]:
    """Every Delta table of a lake as sorted rows without the columns that name the run."""
    out = {}
    for path in sorted(p for p in lake.iterdir() if (p / "_delta_log").is_dir()):
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        rows = [{k: _canonical(v) for k, v in r.items() if k not in ignore} for r in rows]
        out[path.name] = sorted(rows, key=repr)
    return out
