"""The one SparkSession builder.

Embedded (a plain ``python``/``amqplens`` process): ``local[*]`` unless
configured, Arrow on, UTC, few shuffle partitions, UI off unless configured.
Under spark-submit (or in a notebook whose session already exists) the
settings given to spark-submit win: we only fill in session settings that
nobody set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import sys
from typing import Any

from amqplens.config import CONF_DIR, Config

LOG4J = CONF_DIR / "log4j2.properties"  # used by the embedded session only: never inside the --py-files zip


class JavaMissing(RuntimeError):
    pass


def check_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise JavaMissing(
            "amqplens needs Java 17 for Spark and no `java` is on PATH. "
            "Install it with `apt-get install -y openjdk-17-jre-headless` (Debian/Ubuntu) "
            "or set JAVA_HOME to a JDK 17."
        )


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def starts_jvm() -> bool:
    """Whether ``get_spark`` would start a JVM (no session in this process, not under spark-submit)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is None and not _under_spark_submit()


@contextlib.contextmanager
def sql_settings(spark, settings: dict[str, str]):
    """``settings`` (runtime SQL settings) on the session for the block, each restored (or unset) after it."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def session_settings(conf: Config) -> dict[str, str]:
    """SQL/session settings every amqplens session needs (applied if not already set)."""
    s = conf.section("spark")
    progress = s["progress_bar"] == "on" or (s["progress_bar"] == "auto" and sys.stdout.isatty())
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # TableStore.read hands Spark a table's exact files (from the Delta log): above this many paths Spark lists
        # them with a Spark job of a task per file (300 captures: a 300-task job for every table read, 95 s against
        # 4 s read on the driver on a loaded 2-core machine); statting the files on the driver is what it does below
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        # PySpark 4 records the Python call site of every DataFrame and Column call in the JVM (four or five py4j
        # round trips each, and a first call that imports IPython when it is installed): 33,000 calls for one
        # small capture's metrics. Errors still name the failing expression; only the Python line is not attached.
        # A static setting: under spark-submit only `--conf` sets it (the Airflow DAG does), never the session.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    if s["shuffle_partitions"] != "auto":  # auto: set by get_spark once the session knows its cores
        settings["spark.sql.shuffle.partitions"] = str(s["shuffle_partitions"])
    settings.update(s["extra"])
    return settings


# C1 only. Without tiered compilation the JVM also shrinks its code cache from 240 MB to 48 MB, and a whole
# demo run (thousands of generated Spark classes) filled that: "Out of space in CodeCache for adapters"
# killed the executor. The cache keeps the tiered default.
QUICK_JIT = ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"]


def shuffle_partitions(spark, conf: Config) -> int:
    """``spark.shuffle_partitions``; ``auto`` is two per core Spark runs tasks on (its defaultParallelism):
    on a 2-core machine 4, which the benchmark measured 10% faster end to end than 8."""
    n = conf["spark.shuffle_partitions"]
    return 2 * spark.sparkContext.defaultParallelism if n == "auto" else n


def driver_java_options(conf: Config) -> str:
    """The embedded session's JVM options: our log4j2 config; with ``spark.quick_jit``, the C1 compiler only (a local
    run lives seconds to minutes: C2's compile time does not pay back); with ``spark.class_sharing``, the class-data
    sharing archive the install step built (amqplens/jvm_archive.py), if there is one."""
    options = [f"-Dlog4j2.configurationFile=file:{LOG4J}"]
    if conf["spark.quick_jit"]:
        options += QUICK_JIT
    archive = usable_archive() if conf["spark.class_sharing"] else None
    if archive is not None:
        options += [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"]
    return " ".join(options)


# The C++ allocator of the Python workers' Arrow buffers (a variable Arrow reads once, at the process's first buffer):
# jemalloc, not pyarrow's default mimalloc. A task's Parquet reads (the lifecycle job's row groups, whose other
# connections' rows the filter drops), sorts and the folding's copies come from this pool, which
# ``pa.set_memory_pool`` in the task does not reach; mimalloc kept what they freed as the worker's RSS. The
# lifecycle of the 2 GB load capture's 3.4M-frame connection in one process: peak 4,828 -> 3,711 MiB; the 300 MB
# lifecycle job's largest worker 1,098-1,327 -> 925-930 MiB and 3-6% faster (docs/performance.md).
WORKER_ARROW_POOL = "jemalloc"


# The embedded session's Python daemon: pyspark's, with the tasks' modules imported before it forks a worker.
DAEMON_MODULE = "amqplens.spark_daemon"


def worker_arrow_pool() -> str | None:
    """The ``ARROW_DEFAULT_MEMORY_POOL`` the embedded session gives its Python workers: the operator's own if this
    process has one, else ``WORKER_ARROW_POOL`` where this pyarrow has it, else None (Arrow's default)."""
    from amqplens.decode.common.arrow import has_jemalloc

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return None  # inherited by the JVM and its workers as it is
    return WORKER_ARROW_POOL if has_jemalloc() else None


def get_spark(conf: Config):
    """Return the active session, or build the embedded one from ``conf``."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None or _under_spark_submit():
        spark = active or SparkSession.builder.appName(conf["spark.app_name"]).getOrCreate()
        for key, value in session_settings(conf).items():
            if key.startswith("spark.sql.") and spark.conf.get(key, None) in (None, ""):
                spark.conf.set(key, value)
        return spark

    check_java()
    s = conf.section("spark")
    # Tests and the CLI run the driver in this Python: workers must use the same interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(s["master"])
        .appName(s["app_name"])
        .config("spark.ui.enabled", str(s["ui_enabled"]).lower())
        .config("spark.driver.memory", s["driver_memory"])
        .config("spark.driver.extraJavaOptions", driver_java_options(conf))
        .config("spark.python.worker.reuse", "true")
    )
    if str(s["master"]).startswith("local"):  # workers forked with the tasks' modules imported (spark_daemon)
        builder = builder.config("spark.python.daemon.module", DAEMON_MODULE)
    if direct_path_may(conf, str(s["master"])):
        _warm_header_scan()
    pool = worker_arrow_pool()
    if pool is not None:  # spark.extra may still set it
        builder = builder.config("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", pool)
    settings = session_settings(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if "spark.sql.shuffle.partitions" not in settings:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(spark, conf)))
    return spark


def direct_path_may(conf: Config, master: str) -> bool:
    """Whether the ingest may read captures directly (``capture.direct``: on; auto with a local master)."""
    choice = conf["capture.direct"]
    return choice != "off" and (choice != "auto" or master.startswith("local"))


def _warm_header_scan() -> None:
    """The driver's compiled header scan (``headscan.plan``, the direct ingest's first step) loaded from numba's cache
    in a thread while the JVM starts, not after it: 0.7 s of the 2 GB load capture's plan, the longer of the two
    passes the ingest makes over a file before its job (the other its SHA-256), and of a small capture's run. Every
    embedded session the direct path may take (the CLI's, the notebooks', ``tools.bench_pipeline``'s)."""
    import threading

    def warm() -> None:
        from amqplens.decode.capture import headscan

        with contextlib.suppress(Exception):  # a scan that cannot load is the ingest's to report, not the session's
            headscan.warm()

    global _warm_thread
    _warm_thread = threading.Thread(target=warm, name="amqplens-warm-scan", daemon=True)
    _warm_thread.start()


_warm_thread: Any = None  # the last _warm_header_scan's thread


# -- the class-data-sharing archive's place (amqplens/jvm_archive.py builds it) -------------------------------
FOLDER = "amqplens-jvm"


def _java() -> str | None:
    """The java pyspark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH (resolved)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def _jars() -> pathlib.Path:
    import pyspark

    return pathlib.Path(pyspark.__file__).resolve().parent / "jars"


def key() -> str | None:
    """What an archive is valid for: the java binary and the jars' names and sizes (None without java)."""
    java = _java()
    if java is None:
        return None
    jars = _jars()
    listing = sorted((p.name, p.stat().st_size) for p in jars.glob("*.jar")) if jars.is_dir() else []
    return hashlib.sha256(json.dumps([java, listing]).encode()).hexdigest()[:16]


def _folder() -> pathlib.Path:
    return pathlib.Path(sys.prefix) / "var" / "cache" / FOLDER


def archive_path() -> pathlib.Path | None:
    """This interpreter's archive for the current JDK and jars (whether or not it was built), or None without java."""
    k = key()
    return None if k is None else _folder() / f"spark-{k}.jsa"


def usable_archive() -> pathlib.Path | None:
    """The archive the embedded session maps, if built."""
    path = archive_path()
    return path if path is not None and path.is_file() else None
