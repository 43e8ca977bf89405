"""The ``amqplens`` command: one subcommand per job, plus ``run`` and ``demo``.

Exit status: 0 all good; 2 usage (arguments, config, inputs); 3 completed, but some captures failed
(each marked ``failed`` in ``captures`` with its error; a rerun retries only them); 4 an invariant
broke (a critical expectation failed); 5 the lake is damaged (``amqplens check`` names each problem; a command
that writes refuses a damaged table); 130 interrupted (Ctrl-C); 141 the output's reader closed the pipe early
(``| head``); 1 anything else (no Java, an internal error).

The stages and their order come from amqplens/stages.py, which also names the
spark-submit entry scripts (``jobs/<stage>.py``, outside the package: they call
``job_main``) and the DAG's chain; so ``spark-submit jobs/<stage>.py`` takes the
same arguments and the same layered config.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys

from amqplens import preflight, stages
from amqplens.config import ConfigError, add_config_arguments, config_from_args
from amqplens.inputs import InputError
from amqplens.progress import Stage, log_file_for, quiet_jvm, writable_log_file
from amqplens.jobs.validate import ValidationFailed
from amqplens.lake import check as lake_check

DEMO_CAPTURE = pathlib.Path(__file__).resolve().parent / "data" / "demo.pcap"

log = logging.getLogger("amqplens")


def _common(p: argparse.ArgumentParser, *, inputs: bool, logs: bool = False) -> None:
    if inputs:
        p.add_argument("--input", nargs="+", required=not logs, default=[], metavar="PATH",
                       help="capture files, folders or globs" + (" (--input, --logs or both)" if logs else ""))
        p.add_argument("--keylog", nargs="+", default=[], metavar="PATH",
                       help="NSS key log files (SSLKEYLOGFILE) to decrypt TLS connections with (config capture.keylog)")
    if logs:
        p.add_argument("--logs", nargs="+", required=not inputs, default=[], metavar="PATH",
                       help="broker logs: RabbitMQ server logs, rabbitmq_tracing/firehose traces, Proton PN_TRACE_FRM traces")
    p.add_argument("--lake", metavar="DIR", help="lake root (config lake.root)")
    p.add_argument("--run-id", help="name this run (default: random)")
    add_config_arguments(p)


def _out_argument(p) -> None:
    p.add_argument("--out", metavar="DIR", help="report folder (config report.out; default <lake>/_report)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amqplens", description="AMQP captures and broker logs into a Delta lakehouse")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help=f"every stage in order: {', '.join(stages.CHAIN)}")
    _common(run, inputs=True, logs=True)
    _out_argument(run)
    for s in stages.STAGES:
        p = sub.add_parser(s.name, help=s.help)
        _common(p, inputs=s.reads == "captures", logs=s.reads == "logs")
        if s.name == "report":
            _out_argument(p)
        elif s.reads == "lake":
            p.add_argument("--capture-id", action="append", help="only these captures (default: every capture in the lake)")
    demo = sub.add_parser("demo", help="run the pipeline on the bundled demo capture and print a summary")
    _common(demo, inputs=False)
    _out_argument(demo)
    summary = sub.add_parser("summary", help="print what the lake holds")
    _common(summary, inputs=False)
    vac = sub.add_parser("vacuum", help="delete files no table snapshot references and that were removed from the "
                         "tables more than --retention-hours ago")
    _common(vac, inputs=False)
    vac.add_argument("--retention-hours", type=int, default=168, metavar="H",
                     help="keep the files a table stopped referencing less than H hours ago (replaced captures' files: "
                          "a reader of an older snapshot may still read them); 0 deletes them now (default 168, a week)")
    check = sub.add_parser("check", help="verify every table: its log, every file it references, its rows against "
                           f"captures; one line per problem, exit {lake_check.EXIT_DAMAGED} when there is one (no Spark)")
    _common(check, inputs=False)
    rep = sub.add_parser("repair", help="restore damaged tables to their last good version and derive the affected "
                         "captures again from their input files, then check again")
    _common(rep, inputs=False)
    rep.add_argument("--input", nargs="+", default=[], metavar="PATH",
                     help="input files of captures that are no longer at the path their captures row records")
    return parser


_imports = None  # the thread of _import_in_background, joined by _await_imports
_stage_modules = None  # set by that thread once it imported the stages' modules (``first``), awaited by _run_stages
# the stages' own modules (1.5-2 s of imports on the small machine): imported while the JVM starts, not after it
STAGE_MODULES = ("amqplens.jobs.ingest_captures", "amqplens.jobs.ingest_logs", "amqplens.jobs.lifecycle",
                 "amqplens.jobs.findings", "amqplens.jobs.metrics", "amqplens.report")
_program = False  # set by console(): this process is the amqplens command and ends with the run


def _import_in_background(*modules: str, first: tuple[str, ...] = ()) -> None:
    """Import what a later stage needs in a daemon thread while Spark works on the earlier ones: great-expectations
    takes 2-3 s of Python, which a small capture's run would otherwise wait for at its validate stage. ``first``:
    modules imported before the others, which ``_await_stage_modules`` waits for (the stages' own, while the JVM
    starts).

    The stage that needs them first calls ``_await_imports``: two threads importing the same package at once can
    each meet the other's partially initialised module (seen when validate imported great-expectations while a
    thread still did). A module that fails to import here fails again, with its message, in the stage's own import.
    """
    import gc
    import importlib
    import threading

    global _imports, _stage_modules

    done = threading.Event()

    def load():
        for name in first:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the stage that imports it reports it
                pass
        done.set()
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the stage that imports it reports it
                pass
        # The imported modules' objects live as long as the run: out of the collector's reach, its full collections
        # stop walking them (0.66 s of collections in a small capture's run, most of them over these objects). Only
        # in the amqplens command: a process that calls main() (the tests) keeps its objects collectable.
        if _program:
            gc.freeze()

    _imports = threading.Thread(target=load, name="amqplens-imports", daemon=True)
    _stage_modules = done
    _imports.start()


def _await_stage_modules() -> None:
    """Wait for the ``first`` modules of ``_import_in_background`` (if it was given any)."""
    global _stage_modules

    if _stage_modules is not None:
        _stage_modules.wait()
        _stage_modules = None


def _await_imports() -> None:
    global _imports

    if _imports is not None:
        _imports.join()
        _imports = None


def later_imports(conf) -> list[str]:
    """What the validate and report stages import, which a run imports in the background from its start."""
    # matplotlib only where the driver draws the report's PNGs itself (``report.png_processes`` 0)
    drawing = [] if conf["report.png_processes"] > 0 else ["matplotlib.figure", "matplotlib.backends.backend_agg"]
    return [*(["great_expectations"] if conf["validate.enabled"] else []), *drawing]


def _run_stages(spark, conf, inputs, run_id, *, only_ingest: bool = False, logs=(), out: str | None = None,
                report_too: bool = True):
    """Every stage in order; returns the report page (None with only_ingest or without ``report_too``)."""
    _await_stage_modules()
    from amqplens.jobs import ingest_captures
    from amqplens.jobs import ingest_logs
    from amqplens.jobs import lifecycle
    from amqplens.jobs import findings, metrics
    from amqplens import report

    if not only_ingest and _imports is None:
        _import_in_background(*later_imports(conf))
    ids = []
    fused: set[str] = set()  # captures whose lifecycle tables the ingest wrote (lifecycle.fused)
    left: dict[str, str] = {}  # files of the other kind given to a single ingest command: path -> why
    logs = list(logs)
    unmarked: dict[str, tuple[str, str]] = {}  # failed in the ingest after some commits: no captures row, not going on
    if inputs:
        with Stage("ingest-captures", spark) as stage:
            result = ingest_captures.run(spark, conf, inputs, run_id=run_id)
            written = [c for c in result.captures if c["capture_id"] not in result.by_other]
            # `run` hands a broker log given with --input to the logs stage; `ingest-captures` leaves it (exit 2)
            routed = "broker log(s) left alone (give them with --logs)" if only_ingest else "broker log(s) passed on to ingest-logs"
            stage.done(_ingest_line("capture", written, result.skipped, result.failed, result.not_captures, routed,
                                    by_other=result.by_other))
        ids += [c["capture_id"] for c in result.captures] + result.skipped + list(result.failed)
        fused = set(result.lifecycle)
        unmarked = dict(result.unmarked)
        if only_ingest:
            left.update(result.not_captures)
        else:
            logs += [p for p in result.not_captures if p not in logs]
    if logs:  # after the captures (its events join their connections), before lifecycle (trace frames feed it)
        with Stage("ingest-logs", spark) as stage:
            done = ingest_logs.run(spark, conf, logs, run_id=run_id)
            routed = ("packet capture(s) left alone (give them with --input)" if only_ingest
                      else "packet capture(s) passed on to ingest-captures")
            stage.done(_ingest_line("log", done.logs, done.skipped, done.failed, done.not_logs, routed))
        ids += [r["capture_id"] for r in done.logs] + done.skipped + list(done.failed)
        if only_ingest:
            left.update(done.not_logs)
        elif done.not_logs:  # captures given with --logs: ingested as captures, after the logs
            with Stage("ingest-captures", spark) as stage:
                result = ingest_captures.run(spark, conf, list(done.not_logs), run_id=run_id)
                stage.done(_ingest_line("capture", result.captures, result.skipped, result.failed, {}, ""))
            ids += [c["capture_id"] for c in result.captures] + result.skipped + list(result.failed)
            fused |= set(result.lifecycle)
            unmarked.update(result.unmarked)
    all_ids = list(ids)
    if only_ingest:
        _raise_if_captures_failed(spark, conf, ids, unmarked)
        if left:
            raise InputError("; ".join(f"{path}: {why}" for path, why in sorted(left.items()))
                             + " (left alone; every other file was ingested)")
        return None
    ids = _without_failed(spark, conf, ids)
    if report_too:  # the report's PNG process imports matplotlib while the stages before the report run
        from amqplens.report import painter

        painter.prestart(conf["report.png_processes"])
    with Stage("lifecycle", spark) as stage:
        # the job only for what the ingest did not do (logs, captures ingested before, lifecycle.fused off)
        todo = [cid for cid in ids if cid not in fused]
        done, going_on = _isolated_stage(spark, conf, "lifecycle", lifecycle.run, todo, run_id) if todo else ([], [])
        ids = [cid for cid in ids if cid in fused or cid in going_on]
        in_ingest = len([cid for cid in ids if cid in fused])
        stage.done(f"{len(done)} capture(s) written" + (f", {in_ingest} done in ingest-captures" if in_ingest else ""))
    with Stage("metrics", spark) as stage:
        done, ids = _isolated_stage(spark, conf, "metrics", metrics.run, ids, run_id)
        stage.done(f"{len(done)} capture(s) written")
    with Stage("findings", spark) as stage:
        done, ids = _isolated_stage(spark, conf, "findings", findings.run, ids, run_id)
        stage.done(f"{len(done)} capture(s) written")
    if conf["validate.enabled"]:
        _validate(spark, conf, ids, run_id)
    _await_imports()
    page = None
    if report_too:
        with Stage("report", spark) as stage:
            page = report.run(spark, conf, out)
            stage.done(str(page))
    _raise_if_captures_failed(spark, conf, all_ids, unmarked)
    return page


def _ingest_line(what: str, written: list, skipped: list, failed: dict, left: dict, left_what: str, by_other=()) -> str:
    """An ingest stage's line: files written, already done (some, perhaps, by another run at the same time), failed,
    and left alone as files of the other kind. A file whose row says failed (nothing readable in it, or a stage raised
    on it) counts as failed, not written."""
    other = f" ({len(by_other)} by another run at the same time)" if by_other else ""
    bad = set(failed) | {r["capture_id"] for r in written if r.get("status") == "failed"}
    ok = [r for r in written if r["capture_id"] not in bad]
    return (f"{len(ok)} {what}(s) written, {len(skipped) + len(by_other)} already done{other}"
            + (f", {len(bad)} failed" if bad else "") + (f", {len(left)} {left_what}" if left else ""))


class CapturesFailed(Exception):
    """The run completed, and these captures failed (exit 3): capture id -> (path, error)."""

    def __init__(self, failed: dict[str, tuple[str, str]]):
        self.failed = failed
        lines = [f"  {cid[:12]}  {path}: {error}" for cid, (path, error) in sorted(failed.items(), key=lambda kv: kv[1])]
        super().__init__(f"completed, {len(failed)} capture(s) failed:\n" + "\n".join(lines))


def _failed_rows(spark, conf, ids) -> dict[str, tuple[str, str]]:
    """capture id -> (path, error) of the captures among ``ids`` whose row says failed (delta-rs: no Spark job)."""
    from amqplens.lake.store import TableStore

    if not ids:
        return {}
    rows = TableStore(spark, conf["lake.root"]).read_arrow("captures", ["capture_id", "path", "error", "status"], ids)
    return {r["capture_id"]: (r["path"], r["error"] or "failed") for r in rows.to_pylist() if r["status"] == "failed"}


def _without_failed(spark, conf, ids) -> list[str]:
    """The captures the later stages run on: not those whose ingest failed (they have no tables to read)."""
    failed = _failed_rows(spark, conf, ids)
    return [cid for cid in ids if cid not in failed]


def _raise_if_captures_failed(spark, conf, ids, unmarked=None) -> None:
    """CapturesFailed for the captures of ``ids`` whose row says failed, and ``unmarked`` (capture id -> (path, error):
    failed with some tables committed, no row written; the next run finishes them)."""
    failed = _failed_rows(spark, conf, ids) | {cid: (path, f"{error} (its committed tables are kept; no captures row "
                                                            "is written, the next run finishes it)")
                                               for cid, (path, error) in (unmarked or {}).items()}
    if failed:
        raise CapturesFailed(failed)


def _isolated_stage(spark, conf, stage: str, run, ids, run_id):
    """``run(spark, conf, ids, run_id=...)`` where a capture that makes it raise fails alone: it is marked failed in
    captures and left out of the stages after. Returns (the captures written, the captures that go on)."""
    from amqplens.lake import isolation
    from amqplens.lake.store import TableStore

    done = isolation.isolated(stage, list(ids), lambda xs: run(spark, conf, xs, run_id=run_id),
                              lambda cid: run(spark, conf, [cid], run_id=run_id))
    store = TableStore(spark, conf["lake.root"])
    isolation.mark_failed(spark, store, done.failed, {cid: f"amqplens/{stage}/{cid}" for cid in done.failed}, run_id or stage)
    return done.results, [cid for cid in ids if cid not in done.failed]


def _validate(spark, conf, ids, run_id) -> None:
    """The validate stage: prints its warnings; a critical failure raises ValidationFailed (the run stops)."""
    _await_imports()
    from amqplens.jobs import validate

    with Stage("validate", spark) as stage:
        summary = validate.run(spark, conf, ids, run_id=run_id)
        stage.done(f"{len(summary['expectations'])} expectations on {len(summary['capture_ids'])} capture(s), "
                   f"{len(summary['warnings'])} warning(s); results: {summary['results_page']}")
    for w in summary["warnings"]:
        print("\n".join(validate.results_page.warning_lines(w)))


def _stage_command(spark, conf, stage: str, capture_ids, run_id) -> None:
    """``amqplens lifecycle|metrics|findings``: the stage on the given captures (default every capture in the lake that did not
    fail), each capture failing alone; raises CapturesFailed (exit 3) when some did."""
    from amqplens.lake.store import TableStore

    if capture_ids is None:
        store = TableStore(spark, conf["lake.root"])
        capture_ids = [r.capture_id for r in store.read("captures").select("capture_id").collect()]
    ids = [cid for cid in _without_failed(spark, conf, capture_ids) if cid not in _damaged]
    done, _ = _isolated_stage(spark, conf, stage, stages.stage(stage).load().run, ids, run_id)
    print(f"{stage}: {len(done)} capture(s) written")
    _raise_if_captures_failed(spark, conf, ids)


def table_sizes(store) -> dict[str, tuple[int | None, int | None]]:
    """Every table of the lake: (rows, version) from its Delta log's file statistics (no Spark job); (None, None) for
    a table not written yet."""
    from amqplens.contracts import ALL_TABLES

    sizes: dict[str, tuple[int | None, int | None]] = {}
    for name in ALL_TABLES:
        try:
            dt = store.delta(name)
            records = [] if dt is None else dt.get_add_actions(flatten=True).column("num_records").to_pylist()
        except Exception:  # noqa: BLE001 - a damaged log: `amqplens check` names it; the summary shows the rest
            dt = None
        sizes[name] = (None, None) if dt is None else (sum(r or 0 for r in records), dt.version())
    return sizes


def print_summary(spark, conf, out=sys.stdout) -> None:
    from pyspark.sql import functions as F

    from amqplens.contracts import ALL_TABLES
    from amqplens.lake.store import TableStore

    store = TableStore(spark, conf["lake.root"])
    print(f"lake: {store.root}", file=out)
    print(f"\ntables ({len(ALL_TABLES)}):", file=out)
    for name, (rows, version) in table_sizes(store).items():
        print(f"  {name:<20} " + ("not written yet" if rows is None else f"{rows:>12,} rows  (version {version})"), file=out)
    _print_findings(store, conf, out)
    caps = store.read("captures").orderBy("path").collect()
    print(f"\ncaptures ({len(caps)}):", file=out)
    for c in caps:
        print(f"  {c.capture_id[:12]}  {pathlib.Path(c.path).name:<32} {c.format:<7} {c.status:<8} "
              f"packets={c.packets_total} tcp={c.packets_tcp} selected={c.packets_selected} "
              f"connections={c.connections}" + (f"  error: {c.error}" if c.error else ""), file=out)
    conns = (
        store.read("connections")
        .orderBy("start_ts")
        .select("connection_id", "client_ip", "client_port", "server_ip", "server_port", "start_ts", "duration_us",
                "bytes_to_server", "bytes_to_client", "missing_bytes_to_server", "missing_bytes_to_client", "end_reason")
        .collect()
    )
    print(f"\nconnections ({len(conns)}):", file=out)
    print(f"  {'client':<24} {'server':<22} {'start (UTC)':<26} {'duration s':>10} {'to server B':>12} {'to client B':>12} "
          f"{'missing B':>9}  end", file=out)
    for r in conns:
        missing = r.missing_bytes_to_server + r.missing_bytes_to_client
        print(f"  {r.client_ip + ':' + str(r.client_port):<24} {r.server_ip + ':' + str(r.server_port):<22} "
              f"{r.start_ts.isoformat():<26} {r.duration_us / 1e6:>10.3f} {r.bytes_to_server:>12} {r.bytes_to_client:>12} "
              f"{missing:>9}  {r.end_reason}", file=out)
    frames = (
        store.read("frames")
        .withColumn("what", F.when(F.col("frame_type").isin("method", "command", "control", "oob_method"),
                                   F.concat_ws(".", "class_name", "method_name"))
                    .otherwise(F.coalesce(F.col("performative"), F.col("frame_type"))))
        .groupBy("dialect", "what").agg(F.count("*").alias("n"), F.sum("size").alias("bytes"))
        .orderBy(F.desc("n"), "dialect", "what")
        .collect()
    )
    print(f"\nframes per method ({sum(r.n for r in frames)} frames):", file=out)
    for r in frames:
        print(f"  {r.dialect:<6} {r.what:<28} {r.n:>8} frames {r.bytes:>10} bytes", file=out)
    outcomes = (
        store.read("deliveries").groupBy("dialect", "direction", "outcome")
        .agg(F.count("*").alias("n"), F.expr("percentile_approx(settle_latency_us, 0.5)").alias("p50"),
             F.max("settle_latency_us").alias("max"))
        .orderBy("dialect", "direction", F.desc("n")).collect()
    )
    if outcomes:
        print("\ndeliveries by outcome (settle latency p50 / max, ms):", file=out)
        for r in outcomes:
            lat = f"{r.p50 / 1000:>8.2f} / {r.max / 1000:.2f}" if r.p50 is not None else "       -"
            print(f"  {r.dialect:<6} {r.direction:<12} {r.outcome:<22} {r.n:>7}   {lat}", file=out)
    errs = store.read("decode_errors").groupBy("stage", "reason").agg(F.count("*").alias("n"), F.sum("length").alias("bytes"))
    rows = errs.orderBy("stage", "reason").collect()
    if rows:
        print("\ndecode_errors:", file=out)
        for r in rows:
            print(f"  {r.stage:<8} {r.reason:<32} rows={r.n} bytes={r.bytes}", file=out)


def start_spark(conf, *, verbose: bool):
    """The session, with Spark's console progress bar off (the stages draw their own) and, unless ``verbose``,
    the JVM's output in ``<lake>/_logs/spark-<time>-<pid>.log`` (amqplens/progress.py)."""
    from amqplens.session import check_java, get_spark, starts_jvm

    check_java()
    if conf["spark.progress_bar"] == "auto":
        conf = conf.with_overrides(spark__progress_bar="off")
    log_file = None if verbose or not starts_jvm() else writable_log_file(log_file_for(conf["lake.root"]))
    with quiet_jvm(log_file):
        spark = get_spark(conf)
    if _program:  # pyspark's SparkContext installs its own SIGINT handler (cancel the jobs, raise KeyboardInterrupt)
        import signal

        signal.signal(signal.SIGINT, _interrupted)
    return spark


def _print_findings(store, conf, out) -> None:
    """The findings, most severe first (``findings.top_n`` of them), before the tables' details."""
    from amqplens.jobs.findings.listing import line, most_severe

    rows, counts = most_severe(store, conf["findings.top_n"])
    total = sum(counts.values())
    print(f"\nfindings ({total}: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
          + (f", the first {len(rows)}:" if len(rows) < total else ":"), file=out)
    for r in rows:
        print(f"  {line(r)}", file=out)


def dispatch(args) -> int:
    from amqplens.session import JavaMissing

    if args.command == "run" and not (args.input or args.logs):
        print("amqplens: run needs --input, --logs or both", file=sys.stderr)
        return 2
    try:
        conf = config_from_args(args)
    except ConfigError as exc:
        print(f"amqplens: bad configuration: {exc}", file=sys.stderr)
        return 2
    try:
        preflight.check(args, conf)
    except InputError as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return 2
    root = conf["lake.root"]
    if args.command == "check":
        return _check(root)
    if args.command == "repair":
        return _repair(args, conf)
    # the cheap part of check: a damaged log stops every command before it starts; a capture's damaged files are
    # named, and left out (a run of that capture's input derives it again)
    problems = lake_check.check(root)
    blocking = [p for p in problems if p.whole_table]
    if blocking:
        print(f"amqplens: {lake_check.LakeDamaged(root, blocking, 'nothing was done')}", file=sys.stderr)
        return lake_check.EXIT_DAMAGED
    _warn_damaged(problems)
    if args.command == "vacuum":  # delta-rs only: no Spark
        _vacuum(conf, args.retention_hours)
        return _after(root, args.command, problems)
    if args.command in ("run", "demo"):  # while the JVM starts (its own process), Python imports what comes later
        # pyspark.sql first, in this thread, which goes on to start the session with it: the stages' modules import
        # it too, and two threads importing one package's circular modules at once can meet partial modules
        import pyspark.sql  # noqa: F401

        _import_in_background(*later_imports(conf), first=STAGE_MODULES)
    try:
        spark = start_spark(conf, verbose=args.verbose)
    except JavaMissing as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return 1
    try:
        if args.command in ("ingest-captures", "ingest-logs", "run"):
            _run_stages(spark, conf, getattr(args, "input", []), args.run_id, only_ingest=args.command != "run",
                        logs=getattr(args, "logs", []), out=getattr(args, "out", None))
        elif args.command in ("lifecycle", "metrics", "findings"):
            _stage_command(spark, conf, args.command, args.capture_id, args.run_id)
        elif args.command == "validate":
            _validate(spark, conf, args.capture_id, args.run_id)
        elif args.command == "report":
            from amqplens import report

            print(f"report: {report.run(spark, conf, args.out)}")
        elif args.command == "demo":
            if not DEMO_CAPTURE.exists():
                print(f"amqplens: the demo capture {DEMO_CAPTURE} is missing", file=sys.stderr)
                return 1
            page = _run_stages(spark, conf, [str(DEMO_CAPTURE)], args.run_id, out=args.out)
            print_summary(spark, conf)
            print(f"\nreport: {page}")
        elif args.command == "summary":
            print_summary(spark, conf)
    except lake_check.LakeDamaged as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return lake_check.EXIT_DAMAGED
    except ValidationFailed as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return 4
    except CapturesFailed as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return 3
    except InputError as exc:
        print(f"amqplens: {exc}", file=sys.stderr)
        return 2
    return _after(root, args.command, problems)


_damaged: frozenset[str] = frozenset()  # captures whose files the cheap check found damaged (left out of the stages)


def _warn_damaged(problems: list[lake_check.Problem]) -> None:
    """One line per damaged capture file; those captures are left out of the stages, except a run of their input,
    which derives them again (``TableStore.redo``)."""
    global _damaged
    from amqplens.lake.store import TableStore

    for p in problems:
        print(f"amqplens: warning: {p.line()}", file=sys.stderr)
    _damaged = frozenset(lake_check.damaged_captures(problems))
    TableStore.redo = _damaged


def _after(root: str, command: str, before: list[lake_check.Problem]) -> int:
    """The exit of a command that completed: a command that only reads (summary, report, vacuum) on a lake still
    damaged exits ``EXIT_DAMAGED``, after one line; a run that derived its damaged captures again leaves no problem."""
    if not before:
        return 0
    left = lake_check.check(root)
    if not left:
        print("amqplens: the damaged capture(s) were derived again; the lake is whole", file=sys.stderr)
        return 0
    print(f"amqplens: the lake is damaged ({len(left)} problem(s), named above); the rows of the captures they name "
          f"were left out. `amqplens repair --lake {root}` derives them again", file=sys.stderr)
    return lake_check.EXIT_DAMAGED if command in preflight.READS_LAKE else 0


def _check(root: str) -> int:
    """``amqplens check``: one line per problem on stdout; exit 0 when the lake is whole."""
    problems = lake_check.check(root, deep=True)
    for p in problems:
        print(p.line())
    if problems:
        print(f"amqplens: {len(problems)} problem(s); `amqplens repair --lake {root}` restores the tables from their "
              "captures", file=sys.stderr)
        return lake_check.EXIT_DAMAGED
    print(f"check: {root}: every table is whole")
    return 0


def _repair(args, conf) -> int:
    """``amqplens repair``: restore damaged logs, derive the affected captures again, check again."""
    from amqplens.lake import repair
    from amqplens.lake.store import TableStore
    from amqplens.session import JavaMissing

    root = conf["lake.root"]
    problems = lake_check.check(root, deep=True)
    if not problems:
        print(f"repair: {root}: every table is whole; nothing to do")
        return 0
    for p in problems:
        print(f"repair: found: {p.line()}")
    plan = repair.plan(root, problems, args.input)
    for line in plan.lines:
        print(f"repair: {line}")
    for cid, path in plan.missing.items():
        print(f"amqplens: capture {cid[:12]}: its input {path} is gone; give the file with --input to derive it again",
              file=sys.stderr)
    if plan.inputs or plan.logs:
        print(f"repair: deriving {len(plan.affected) - len(plan.missing)} capture(s) again from their inputs")
        try:
            spark = start_spark(conf, verbose=args.verbose)
        except JavaMissing as exc:
            print(f"amqplens: {exc}", file=sys.stderr)
            return 1
        TableStore.redo = frozenset(plan.affected)
        try:
            _run_stages(spark, conf.with_overrides(validate__enabled=False), plan.inputs, args.run_id, logs=plan.logs,
                        report_too=False)
        except CapturesFailed as exc:
            print(f"amqplens: {exc}", file=sys.stderr)
        finally:
            TableStore.redo = frozenset()
    left = lake_check.check(root, deep=True)
    for p in left:
        print(f"amqplens: still: {p.line()}", file=sys.stderr)
    if left or plan.missing:
        return lake_check.EXIT_DAMAGED
    print(f"repair: {root}: every table is whole")
    return 0


def _vacuum(conf, retention_hours: int) -> None:
    from amqplens.contracts import ALL_TABLES
    from amqplens.lake.store import TableStore

    store = TableStore(None, conf["lake.root"])
    kept = 0
    for name in ALL_TABLES:
        kept += store.vacuum_kept(name, retention_hours)
        print(f"{name}: {len(store.vacuum(name, retention_hours))} file(s) deleted")
    print(f"vacuum: {kept} file(s) of replaced rows kept: removed from their table less than {retention_hours} h ago, "
          "a reader of an older snapshot may still need them (--retention-hours 0 deletes them now)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return dispatch(args)
    finally:
        _await_imports()  # a run that stopped early leaves no thread importing behind it


def console(argv: list[str] | None = None) -> None:
    """The ``amqplens`` command (and every ``spark-submit jobs/*.py`` entry): ``main`` as a program, which ends with
    ``os._exit`` once its output is flushed.

    Everything the run does is written and committed by then; what the exit skips is the interpreter's teardown and
    the C++ static destructors after it. Those aborted the process now and then ("terminate called without an active
    exception", exit 134) when Arrow's thread pool had run in a process that also drove a Spark session: a run that
    had committed every table still failed (seen in the crash-restart test on a fresh clone; 3 of 8 runs of a
    session plus one threaded Arrow scan, 0 of 8 with this exit). The skipped full collection of the run's objects
    also made the exit slow (1.1 s -> 0.45 s from the last line to the prompt on a small capture's run). The
    spark-submit entries exited through ``sys.exit`` until the same abort failed a DAG task (ingest-logs, exit 134,
    after "1 log(s) written"): they end here too.
    """
    import signal
    import traceback

    global _program

    _program = True
    global _stderr_fd, _main_pid
    _main_pid = os.getpid()
    _stderr_fd = os.dup(2)  # while the JVM starts, fd 2 is its log file (quiet_jvm): the Ctrl-C line goes here
    signal.signal(signal.SIGINT, _interrupted)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help, usage errors (the message is printed already)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = _reader_gone()
    except BaseException:  # noqa: BLE001 - a bug: its traceback, then the exit
        traceback.print_exc()
        code = 1
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone()
    sys.stderr.flush()
    os._exit(code)


def _reader_gone() -> int:
    """The output's reader closed the pipe before the end (``amqplens summary | head``): no traceback, the rest of the
    output goes nowhere, exit 141 as a Unix command stopped by SIGPIPE does. What was committed before stays."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13  # SIGPIPE


def _interrupted(signum, frame) -> None:
    """Ctrl-C: one line, exit 130, at once. Every commit is whole or absent (a kill at any moment leaves the lake a
    rerun finishes, the crash-restart tests' promise), so nothing is waited for; the JVM, its stdin closed, exits
    too. No py4j traceback: the Python side is gone before the JVM's end can raise in it."""
    if os.getpid() != _main_pid:
        # a child forked by this process that has not exec'd yet (pyspark starts the JVM with a preexec_fn, Python
        # code in the child, which a Ctrl-C to the process group can reach before it ignores SIGINT): the line is
        # the main process's to write, once (seen: the line twice when Ctrl-C came as Spark started)
        os._exit(130)
    from amqplens import progress

    where = f"during {progress._current.name}" if progress._current is not None else "while Spark started"
    line = (f"\namqplens: interrupted {where}; what was committed before stays, nothing half-written counts; "
            "the same command again finishes the work\n")
    try:
        os.write(_stderr_fd, line.encode())
    finally:
        os._exit(130)


_stderr_fd = 2  # the terminal's stderr, kept by console()
_main_pid = os.getpid()  # the process whose Ctrl-C handler speaks (console() sets it)


def job_main(job: str, argv: list[str] | None = None) -> None:
    """Entry point of ``spark-submit jobs/<job>.py``: the same arguments as ``amqplens <job>``, and the same exit
    (``console``: flushed output, then ``os._exit`` with the run's code)."""
    console([stages.stage(job).name, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    console()
