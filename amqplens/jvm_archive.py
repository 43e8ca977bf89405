"""A class-data-sharing archive of the classes a run loads, for the embedded session's JVM (an install step).

    python -m amqplens.jvm_archive            # make's install step: build it once per interpreter
    python -m amqplens.jvm_archive --check    # say where it is and whether this JVM can map it

A run on a small capture spends a good part of its JVM's CPU loading, parsing and
verifying classes: Spark, Catalyst, Parquet, Arrow, about 18,000 of them. The JDK
can map them from an archive instead (class-data sharing, ``-XX:SharedArchiveFile``),
parsed and verified once at install. The archive is built from the classes the
bundled demo run loads (``-XX:DumpLoadedClassList``, then ``java -Xshare:dump``).

An archive belongs to one JDK and one class path (the pyspark jars of this
interpreter), so its file name carries a key of both. The session maps it when
``spark.class_sharing`` is on and the file is there; a JVM that finds it does not
match (another JDK, jars changed) ignores it and loads the classes the usual way
(``-Xshare:auto``), so a stale archive costs speed, never a run. Under spark-submit
and on a cluster Spark's launcher starts the JVMs and no archive is used.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from amqplens.session import FOLDER, _jars, _java, archive_path, key, usable_archive  # noqa: F401  (the archive's place: session.py)

def _record_run(lake: pathlib.Path, classes: pathlib.Path) -> tuple[str, str, list[str]]:
    """The demo pipeline in an embedded session that lists every class it loads; returns (java, class path, the
    module options the JVM ran with), which the dump must repeat."""
    from amqplens.cli import DEMO_CAPTURE, _run_stages
    from amqplens.config import load_config
    from amqplens.session import driver_java_options, get_spark

    conf = load_config(sets=[f"lake.root={lake}", f"report.out={lake.parent / 'report'}", "spark.class_sharing=false",
                             "spark.progress_bar=off"])
    options = f"{driver_java_options(conf)} -XX:DumpLoadedClassList={classes}"
    conf = conf.with_overrides(spark__extra=json.dumps({"spark.driver.extraJavaOptions": options}))
    spark = get_spark(conf)
    try:
        jvm = spark._jvm
        java = os.path.join(jvm.System.getProperty("java.home"), "bin", "java")
        class_path = jvm.System.getProperty("java.class.path")
        args = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
        modules = [a for a in args if a.startswith("--add-modules")]
        with contextlib.redirect_stdout(io.StringIO()):  # the stage lines of a run nobody asked for
            _run_stages(spark, conf, [str(DEMO_CAPTURE)], None)
    finally:
        spark.stop()
    return java, class_path, modules


def build(out=sys.stdout) -> pathlib.Path | None:
    """Build this interpreter's archive; None (and a line saying why) when there is no java or nowhere to write."""
    target = archive_path()
    if target is None:
        print("jvm archive: no java found; skipped (the session loads classes the usual way)", file=out)
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"jvm archive: cannot write {target.parent} ({exc}); skipped", file=out)
        return None
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amqplens-jvm-") as tmp:
        classes = pathlib.Path(tmp) / "classes.lst"
        java, class_path, modules = _record_run(pathlib.Path(tmp) / "lake", classes)
        t1 = time.monotonic()
        partial = target.with_suffix(".jsa.part")
        dump = subprocess.run([java, "-Xshare:dump", f"-XX:SharedClassListFile={classes}", f"-XX:SharedArchiveFile={partial}",
                               *modules, "-cp", class_path], capture_output=True, text=True)
        if dump.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            tail = (dump.stderr or dump.stdout).strip().splitlines()[-3:]
            print(f"jvm archive: java -Xshare:dump failed (exit {dump.returncode}): {' | '.join(tail)}; skipped", file=out)
            return None
        os.replace(partial, target)
        n = sum(1 for line in classes.read_text().splitlines() if line and not line.startswith("#"))
    for old in target.parent.glob("spark-*.jsa"):  # archives of another JDK or jars
        if old != target:
            old.unlink(missing_ok=True)
    print(f"jvm archive: {n} classes in {target} ({target.stat().st_size / 1e6:.0f} MB; demo run {t1 - t0:.0f} s, "
          f"dump {time.monotonic() - t1:.0f} s)", file=out)
    return target


def check(class_path: str | None = None, out=sys.stdout) -> bool:
    """Whether a JVM maps the archive with ``class_path`` (default: the one pyspark's launcher gives the embedded
    session: its conf folder, slf4j-api, then every jar); ``-Xshare:on`` fails when it cannot."""
    path, java = usable_archive(), _java()
    if path is None or java is None:
        print("jvm archive: none built for this JDK and these jars (python -m amqplens.jvm_archive builds it)", file=out)
        return False
    jars = _jars()
    class_path = class_path or os.pathsep.join([str(jars.parent / "conf"), *sorted(str(p) for p in jars.glob("slf4j-api-*.jar")),
                                                str(jars / "*")])
    p = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={path}", "--add-modules=jdk.incubator.vector",
                        "-cp", class_path, "-version"], capture_output=True, text=True)
    print(f"jvm archive: {path}: " + ("maps" if p.returncode == 0 else f"does not map ({p.stderr.strip()[:200]})"), file=out)
    return p.returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amqplens.jvm_archive", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="say whether this JVM maps the archive")
    args = ap.parse_args(argv)
    if args.check:
        return 0 if check() else 1
    try:
        build()
    except Exception as exc:  # noqa: BLE001 - an install step: without an archive everything still runs
        print(f"jvm archive: not built ({type(exc).__name__}: {exc}); the session loads classes the usual way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
