"""The embedded session gets the JVM options conf/defaults.yaml asks for (spark.quick_jit, spark.class_sharing, the log4j2 config)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_the_shared_session_was_started_with_the_c1_compiler_and_our_logging(spark):
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions").split()
    assert "-XX:TieredStopAtLevel=1" in options
    assert any(o.startswith("-Dlog4j2.configurationFile=file:") and o.endswith("conf/log4j2.properties") for o in options)
    # the running JVM really has them (the launcher passed them on)
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args), args
    # C1 alone would shrink the code cache to 48 MB, which a demo run filled; the JVM reports the size it kept
    pools = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    code = [p.getUsage().getMax() for p in pools if "CodeCache" in p.getName() or "CodeHeap" in p.getName()]
    assert sum(code) >= 200 << 20, code


def test_auto_shuffle_partitions_are_two_per_core_of_the_session(spark, conf):
    from amqplens.session import shuffle_partitions

    assert spark.sparkContext.defaultParallelism == 2  # the shared session is local[2]
    assert shuffle_partitions(spark, conf.with_overrides(spark__shuffle_partitions="auto")) == 4
    assert shuffle_partitions(spark, conf) == conf["spark.shuffle_partitions"] == 2  # a number is used as given


def test_the_shared_session_maps_the_class_archive_the_install_step_built(spark):
    """make's install step builds the archive (python -m amqplens.jvm_archive); the session's JVM was started with it, and a
    JVM with the session's own class path maps it (-Xshare:on fails when the archive does not match)."""
    import io

    from amqplens import jvm_archive

    archive = jvm_archive.usable_archive()
    if archive is None:
        pytest.skip("no class archive built for this interpreter (make's install step builds it)")
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions").split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    jvm = spark._jvm
    running = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in running
    out = io.StringIO()
    assert jvm_archive.check(jvm.System.getProperty("java.class.path"), out=out), out.getvalue()


def test_a_jvm_given_an_archive_that_is_not_one_still_runs(tmp_path):
    """A stale or damaged archive costs speed, never a run: -Xshare:auto falls back to loading classes."""
    import subprocess

    from amqplens import jvm_archive

    bad = tmp_path / "spark-0.jsa"
    bad.write_bytes(b"not an archive" * 100)
    p = subprocess.run([jvm_archive._java(), f"-XX:SharedArchiveFile={bad}", "-Xshare:auto", "-version"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    strict = subprocess.run([jvm_archive._java(), f"-XX:SharedArchiveFile={bad}", "-Xshare:on", "-version"],
                            capture_output=True, text=True)
    assert strict.returncode != 0  # the same file does not map: the fallback above is what kept the JVM alive


def test_the_python_workers_arrow_buffers_come_from_jemalloc(spark):
    """The session hands its Python workers ``ARROW_DEFAULT_MEMORY_POOL`` (amqplens/session.py), which Arrow's C++
    default pool (the Parquet reads of the tasks) follows: the worker reports both."""
    from amqplens.session import worker_arrow_pool

    wanted = worker_arrow_pool()
    if wanted is None:
        pytest.skip("this pyarrow has no jemalloc, or the operator chose a pool (ARROW_DEFAULT_MEMORY_POOL)")

    def report(batches):
        import os

        import pyarrow as pa
        import pyarrow.parquet as pq

        for _ in batches:
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({"x": [1]}), sink)
            before = pa.jemalloc_memory_pool().bytes_allocated()
            read = pq.read_table(pa.BufferReader(sink.getvalue()), use_threads=False)  # C++'s default pool
            grew = pa.jemalloc_memory_pool().bytes_allocated() > before
            del read
            yield pa.record_batch([pa.array([os.environ.get("ARROW_DEFAULT_MEMORY_POOL")]), pa.array([grew])],
                                  names=["env", "grew"])

    rows = spark.range(1).mapInArrow(report, "env string, grew boolean").collect()
    assert [(r.env, r.grew) for r in rows] == [(wanted, True)]


def test_the_python_workers_are_forked_by_our_daemon_with_the_tasks_modules_imported(spark):
    """The embedded session names ``amqplens.spark_daemon`` as Spark's Python daemon: a worker's parent runs that
    module, and a function that imports nothing of amqplens finds the decoder and the lifecycle already loaded (a
    worker of pyspark's own daemon has none of them until a task's function brings them in)."""

    def report(batches):
        import os
        import sys

        import pyarrow as pa

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        loaded = all(m in sys.modules for m in ("amqplens.jobs.ingest_captures", "amqplens.jobs.lifecycle", "numba"))
        for _ in batches:
            yield pa.record_batch([pa.array([parent]), pa.array([loaded])], names=["parent", "loaded"])

    rows = spark.range(1).mapInArrow(report, "parent string, loaded boolean").collect()
    assert len(rows) == 1
    assert "-m amqplens.spark_daemon" in rows[0].parent
    assert rows[0].loaded


def test_the_session_loads_the_compiled_header_scan_while_the_jvm_starts(spark):
    """With a local master and the direct ingest possible, ``get_spark`` loads the header scan in a thread of its
    own (``session._warm_header_scan``): the driver's first plan of a capture does not wait for numba's cache."""
    from amqplens import session
    from amqplens.decode.capture import headscan

    thread = session._warm_thread
    assert thread is not None and thread.name == "amqplens-warm-scan"
    thread.join(timeout=120)
    assert not thread.is_alive()
    kernel = headscan.load_kernel()
    assert kernel is not None and kernel.walk.signatures  # loaded (or compiled) for the scan's argument types
