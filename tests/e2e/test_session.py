"""The embedded session gets the JVM options conf/defaults.yaml asks for (spark.quick_jit, the log4j2 config)."""

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
    from jobs.session import shuffle_partitions

    assert spark.sparkContext.defaultParallelism == 2  # the shared session is local[2]
    assert shuffle_partitions(spark, conf.with_overrides(spark__shuffle_partitions="auto")) == 4
    assert shuffle_partitions(spark, conf) == conf["spark.shuffle_partitions"] == 2  # a number is used as given
