"""The quality gates: every suite passes on real captures, and fails, naming the expectation and the row, on broken tables.

Bad input tried (each on a copy of the demo capture's rows, never on the lake): a duplicated frame key, a frame whose
connection does not exist, a dialect outside the contract's set, a frame time a day after the capture ended, frames
whose content all failed to decode (a broken decoder), a negative settle latency, a delivery naming a frame that does
not exist, a connection missing one frame's bytes, and (through the CLI) a duplicated key written into the lake.
"""

from __future__ import annotations

import json
import shutil

import pytest

from amqplens import cli
from amqplens.jobs import validate
from amqplens.jobs.validate.quality import RunTables, batch, reference_jobs
from amqplens.jobs.validate.small import SmallRun, batch as small_batch
from amqplens.contracts import ALL_TABLES, table
from amqplens.contracts import expectations as ex
from amqplens.contracts.expectations import Settings
from tests.conftest import ROOT
from tests.validate.conftest import CAPTURES, capture_id

pytestmark = [pytest.mark.spark]

DEMO = capture_id(CAPTURES[0])


def test_every_table_has_a_suite_and_it_passes_on_the_fixtures(validated, quality_lake):
    _, store = quality_lake
    assert validated["success"]
    assert set(validated["rows"]) == set(ALL_TABLES)
    failed = [e for e in validated["expectations"] if not e["success"]]
    assert [e for e in failed if ex.kind(e["name"]) == "invariant"] == []
    # what the fixtures' peers did that the lifecycle flags (deliveries open when the capture ends mid-message, ...)
    # is an observation: a warning, the run succeeds
    assert {e["name"] for e in failed} <= {"deliveries.anomalies", "flow_events.anomalies"}, failed
    assert all(e["severity"] == "warning" for e in failed)
    for name in ("captures", "connections", "frames", "deliveries", "flow_events", "request_responses", "metrics_latency"):
        assert validated["rows"][name] == store.read(name).count() > 0, name
    names = {e["name"] for e in validated["expectations"]}
    # the checks the issue names, by table
    for expected in ("frames.key_unique", "frames.key_not_null.frame_id", "frames.enum.dialect", "frames.enum.frame_type",
                     "deliveries.enum.outcome", "frames.in_capture_window", "deliveries.non_negative", "frames.ref.connection_id",
                     "deliveries.ref.frame_ids", "connections.byte_accounting.to_server", "frames.decode_error_share"):
        assert expected in names


@pytest.mark.parametrize("counts", ["spark", "driver"])
def test_both_engines_give_the_same_outcomes(spark, validated, quality_lake, tmp_path, counts):
    """The fixtures' tables are small, so ``validated`` took the pandas path; the Spark path (a run with a table above
    validate.pandas_max_rows) must observe the same on every expectation, its checks counted by Spark or on the
    driver (validate.tally; the fixtures' anomalies are then validated by GX's Spark engine on the rows)."""
    conf, store = quality_lake
    lake = tmp_path / "lake"
    shutil.copytree(store.root, lake, ignore=shutil.ignore_patterns("_quality"))
    on_spark = validate.run(spark, conf.with_overrides(lake__root=str(lake), validate__pandas_max_rows=0,
                                                       validate__tally=counts), run_id="spark")
    assert validated["rows"] == on_spark["rows"]
    assert [(e["name"], e["success"], e["observed"]) for e in on_spark["expectations"]] == \
        [(e["name"], e["success"], e["observed"]) for e in validated["expectations"]]


def test_results_and_data_docs_are_under_the_lake_only(validated, quality_lake):
    _, store = quality_lake
    quality = validate.quality_dir(store)
    assert json.loads((quality / "runs" / "fixtures.json").read_text())["success"] is True
    index = (quality / "data_docs" / "index.html").read_text()
    for name, rows in validated["rows"].items():  # tables without rows of the run (broker_events here) are skipped
        assert bool(list((quality / "validations" / name).rglob("*.json"))) == (rows > 0), name
        assert (f"expectations/{name}.html" in index) == (rows > 0), name
    assert not (ROOT / "gx").exists() and not (ROOT / "great_expectations").exists()


def _validate(spark, quality_lake, tmp_path, name: str, engine: str, **broken):
    """Validate table ``name`` over the demo capture's rows, with some tables' slices replaced by broken copies,
    through the Spark path (amqplens/jobs/validate/quality.py) or the small runs' pandas path (amqplens/jobs/validate/small.py)."""
    conf, store = quality_lake
    tables = RunTables(store, [DEMO])
    for t, make in broken.items():
        tables.slices[t] = make(tables.slices[t])
    suites = validate.Suites(validate.gx_context(tmp_path / "_quality"), Settings(), sample_keys=5)
    from great_expectations.core.run_identifier import RunIdentifier

    try:
        if engine == validate.PANDAS:
            small = SmallRun(store, [DEMO], Settings())
            small._slices.update({t: tables.slices[t].toArrow().to_pandas() for t in broken})
            df = small_batch(table(name), small, conf)
        else:
            df = batch(table(name), tables, conf).persist()
        return {o.name: o for o in suites.validate(table(name), df, RunIdentifier(run_name="t"))}
    finally:
        tables.close()


def _broken_frames(store):
    """(demo's frame rows, (dup, orphan, enum, late) frame ids, a function breaking a frames slice): one key twice, a
    frame of no connection, a dialect outside the set, a frame a day after the capture, every frame undecoded."""
    from pyspark.sql import functions as F

    frames = store.read("frames").where(F.col("capture_id") == DEMO).orderBy("frame_id").collect()
    dup, orphan, enum, late = (r.frame_id for r in frames[10:14])

    def broken(df):
        fid = F.col("frame_id")
        return (df.union(df.where(fid == dup))
                .withColumn("connection_id", F.when(fid == orphan, F.lit("no-such-connection")).otherwise(F.col("connection_id")))
                .withColumn("dialect", F.when(fid == enum, F.lit("0-9-2")).otherwise(F.col("dialect")))
                .withColumn("ts", F.when(fid == late, F.col("ts") + F.expr("INTERVAL 1 DAY")).otherwise(F.col("ts")))
                .withColumn("decode_error", F.lit("field_table: broken decoder")))

    return frames, (dup, orphan, enum, late), broken


ENGINES = pytest.mark.parametrize("engine", [validate.SPARK, validate.PANDAS])


@ENGINES
def test_broken_frames_fail_their_checks_and_name_the_rows(spark, quality_lake, tmp_path, engine):
    frames, (dup, orphan, enum, late), broken = _broken_frames(quality_lake[1])

    out = _validate(spark, quality_lake, tmp_path, "frames", engine, frames=broken)
    failed = {n for n, o in out.items() if not o.success}
    assert failed == {"frames.key_unique", "frames.ref.connection_id", "frames.enum.dialect", "frames.in_capture_window",
                      "frames.decode_error_share"}
    assert out["frames.key_unique"].observed.startswith(f"2 of {len(frames) + 1} rows")
    assert out["frames.key_unique"].samples and all(dup in s for s in out["frames.key_unique"].samples)
    assert out["frames.ref.connection_id"].samples == [f"frame_id={orphan} (_missing_connection_id=no-such-connection)"]
    assert out["frames.enum.dialect"].samples == [f"frame_id={enum} (dialect=0-9-2)"]
    assert [s.split(" ")[0] for s in out["frames.in_capture_window"].samples] == [f"frame_id={late}"]
    assert out["frames.decode_error_share"].observed.startswith(f"{len(frames) + 1} of {len(frames) + 1} rows")


@ENGINES
def test_negative_latency_and_a_missing_frame_fail_deliveries_and_connections(spark, quality_lake, tmp_path, engine):
    from pyspark.sql import functions as F

    store = quality_lake[1]
    d = store.read("deliveries").where((F.col("capture_id") == DEMO) & F.col("settle_latency_us").isNotNull()).orderBy("delivery_id")
    slow, lost = d.limit(2).collect()
    gone = lost.frame_ids[0]
    gone_size = store.read("frames").where(F.col("frame_id") == gone).first()["size"]

    def negative(df):
        return df.withColumn("settle_latency_us", F.when(F.col("delivery_id") == slow.delivery_id, F.lit(-5))
                             .otherwise(F.col("settle_latency_us")))

    def without_frame(df):
        return df.where(F.col("frame_id") != gone)

    out = _validate(spark, quality_lake, tmp_path, "deliveries", engine, deliveries=negative, frames=without_frame)
    assert {n for n, o in out.items() if not o.success} == {"deliveries.non_negative", "deliveries.ref.frame_ids"}
    assert out["deliveries.non_negative"].samples == [f"delivery_id={slow.delivery_id} (_negative=settle_latency_us=-5)"]
    assert out["deliveries.ref.frame_ids"].samples == [f"delivery_id={lost.delivery_id} (_missing_frame_ids={gone})"]

    out = _validate(spark, quality_lake, tmp_path, "connections", engine, frames=without_frame)
    direction = "to_server" if "-s-" in gone else "to_client"
    assert {n for n, o in out.items() if not o.success} == {f"connections.byte_accounting.{direction}"}
    (sample,) = out[f"connections.byte_accounting.{direction}"].samples
    assert sample.startswith(f"connection_id={lost.connection_id} ")
    stream = store.read("connections").where(F.col("connection_id") == lost.connection_id).first()[f"bytes_{direction}"]
    assert f"bytes_{direction}={stream}" in sample and f"_accounted_bytes_{direction}={stream - gone_size}" in sample


def test_severity_is_config():
    s = Settings(critical=("frames", "deliveries.ref.*"), warning=("frames.decode_error_share",))
    assert s.severity("frames.key_unique") == "critical"
    assert s.severity("frames.decode_error_share") == "warning"
    assert s.severity("deliveries.ref.frame_ids") == "critical"
    assert s.severity("deliveries.non_negative") == "warning"
    assert Settings().severity("connections.key_unique") == "critical"


def test_observations_of_what_peers_do_are_never_critical():
    """A sender beyond its credit (negative link_credit), a flagged delivery, undecodable content: warnings even
    when config names them critical; the same table's own promises stay critical."""
    for s in (Settings(), Settings(critical=("flow_events", "frames.decode_error_share"))):
        for name in ("flow_events.non_negative.link_credit", "flow_events.non_negative.remote_incoming_window",
                     "flow_events.anomalies", "deliveries.anomalies", "frames.decode_error_share", "connections.codec_error_share"):
            assert ex.kind(name) == "observation" and s.severity(name) == "warning", name
        for name in ("flow_events.non_negative", "flow_events.key_unique", "flow_events.in_capture_window", "flow_events.ref.frame_id"):
            assert ex.kind(name) == "invariant" and s.severity(name) == "critical", name
    assert "link_credit" not in ex.non_negative_columns(ALL_TABLES["flow_events"])


def test_cli_validate_fails_with_a_readable_summary_on_a_broken_lake(spark, quality_lake, tmp_path, capsys):
    """A duplicated frame key written into (a copy of) the lake: exit 4, the expectation and the key on stderr."""
    lake, dup, n = _broken_lake(spark, quality_lake, tmp_path)
    code = cli.main(["validate", "--lake", str(lake), "--capture-id", DEMO, "--run-id", "broken"])
    err = capsys.readouterr().err
    assert code == 4
    # the frame counted twice also breaks its connection's byte accounting
    direction = "to_server" if "-s-" in dup else "to_client"
    assert "2 critical expectation(s) failed on run broken (1 capture(s))" in err
    assert f"frames: frames.key_unique (critical): 2 of {n + 1} rows unexpected" in err and dup in err
    assert f"connections: connections.byte_accounting.{direction} (critical): 1 of " in err
    summary = json.loads((lake / "_quality" / "runs" / "broken.json").read_text())
    assert {f["name"] for f in summary["critical_failures"]} == {"frames.key_unique", f"connections.byte_accounting.{direction}"}
    assert (lake / "_quality" / "data_docs" / "index.html").exists()


def _broken_lake(spark, quality_lake, tmp_path):
    """A copy of the lake whose frames of the demo capture hold one key twice: (the copy, the key, demo's frame rows)."""
    from pyspark.sql import functions as F

    from amqplens.lake.store import TableStore

    _, store = quality_lake
    lake = tmp_path / "lake"
    shutil.copytree(store.root, lake, ignore=shutil.ignore_patterns("_quality"))
    copy = TableStore(spark, str(lake))
    frames = copy.read("frames").where(F.col("capture_id") == DEMO)
    dup = frames.orderBy("frame_id").first().frame_id
    copy.write("frames", frames.union(frames.where(F.col("frame_id") == dup)).localCheckpoint(), units={DEMO: "test/duplicate"})
    return lake, dup, frames.count()


def test_a_broken_invariant_exits_4_with_the_same_message_on_both_paths(spark, quality_lake, tmp_path, capsys):
    """The lake with a duplicated frame key, validated by the small runs' pandas path and by the Spark path (each
    check counted in one pass, the failed ones validated by GX on the rows): exit 4 both times, the same lines."""
    lake, dup, n = _broken_lake(spark, quality_lake, tmp_path)
    errs = {}
    for path, sets in (("pandas", []), ("spark", ["--set", "validate.pandas_max_rows=0"])):
        code = cli.main(["validate", "--lake", str(lake), "--capture-id", DEMO, "--run-id", "broken", *sets])
        errs[path] = capsys.readouterr().err
        assert code == 4, path
    assert f"frames: frames.key_unique (critical): 2 of {n + 1} rows unexpected" in errs["spark"] and dup in errs["spark"]
    # the lines alike but for how a sample's value is written (pandas writes the accounted bytes as 1590.0, Spark 1590,
    # as before the one-pass count): the failures, what was observed and the keys of the offending rows
    def shown(err):
        out = []
        for line in err.splitlines():
            if line.startswith(("validate:", "  ")):
                head, _, samples = line.partition("; e.g. ")
                out.append((head, [s.split(" (")[0] for s in samples.split("; ")] if samples else []))
        return out

    assert shown(errs["spark"]) == shown(errs["pandas"]) and len(shown(errs["spark"])) >= 4


def test_one_pass_counts_flag_exactly_the_checks_gx_fails(spark, quality_lake):
    """The tally of a table's checks (one Spark aggregate) against GX's Spark engine on the same batch, broken as in
    the tests above (a repeated key, a missing connection, a dialect outside the set, a late frame, every frame
    undecoded; a negative latency): a check's count is 0 exactly where GX finds no offending row, and otherwise GX's
    count of them (uniqueness: the repeats of a key, where GX counts every row of a repeated key)."""
    import great_expectations as gx
    from pyspark.sql import functions as F

    from amqplens.jobs.validate import tally

    conf, store = quality_lake
    frames, _, broken_frames = _broken_frames(store)

    def negative(df):
        """A negative latency; a frame that is not in frames among one delivery's frame_ids and a null element in
        another's; a settling frame that is not in frames; a row beside its capture's window."""
        ids = [r.delivery_id for r in df.where(F.col("settle_latency_us").isNotNull()).orderBy("delivery_id").limit(4).collect()]
        did = F.col("delivery_id")
        return (df.withColumn("settle_latency_us", F.when(did == ids[0], F.lit(-5)).otherwise(F.col("settle_latency_us")))
                .withColumn("frame_ids", F.when(did == ids[1], F.array_append("frame_ids", F.lit("no-such-frame")))
                            .when(did == ids[2], F.array_append("frame_ids", F.lit(None).cast("string")))
                            .otherwise(F.col("frame_ids")))
                .withColumn("settled_by_frame_id", F.when(did == ids[3], F.lit("no-such-frame")).otherwise(F.col("settled_by_frame_id")))
                .withColumn("sent_ts", F.when(did == ids[3], F.col("sent_ts") - F.expr("INTERVAL 2 DAYS")).otherwise(F.col("sent_ts"))))

    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_spark(name="t")
    seen = {}
    for name, broken in (("frames", {"frames": broken_frames}), ("deliveries", {"deliveries": negative}), ("connections", {})):
        tables = RunTables(store, [DEMO])
        for t, make in broken.items():
            tables.slices[t] = make(tables.slices[t])
        try:
            df = batch(table(name), tables, conf).persist()
            # as the validate job counts: the tally's batch (no reference joins, no offending text) and one job per
            # referenced table for the references
            elsewhere = frozenset(ex.reference_check(table(name), c) for c in ex.references(table(name)))
            counted = tally.count(table(name), batch(table(name), tables, conf, for_tally=True), Settings(), elsewhere)
            for job in reference_jobs(tables, [name]):
                counted.add(job())
            suite = context.suites.add(ex.suite(table(name), Settings()))
            data = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("b")
            results = gx.ValidationDefinition(name=name, data=data, suite=suite).run(
                batch_parameters={"dataframe": df}, result_format="BASIC").results
        finally:
            tables.close()
        assert counted.rows == df.count()
        for r in results:
            check = r.expectation_config.meta["name"]
            gx_bad = r.result.get("unexpected_count")
            if check in counted.means:
                assert r.result["observed_value"] == pytest.approx(counted.values[check]), check
            elif gx_bad is not None:
                assert (counted.values[check] == 0) == (gx_bad == 0), (check, gx_bad)
                if not check.endswith("key_unique"):
                    assert counted.values[check] == gx_bad, (check, gx_bad)
                assert r.success or counted.values[check] > 0, check  # the tally never passes what GX fails
            seen[check] = counted.values[check]
    assert seen["frames.key_unique"] == 1 and seen["frames.enum.dialect"] == 1 and seen["frames.ref.connection_id"] == 1
    assert seen["frames.decode_error_share"] == len(frames) + 1 and seen["deliveries.non_negative"] == 1
    assert seen["deliveries.ref.frame_ids"] == 2 and seen["deliveries.ref.settled_by_frame_id"] == 1
    assert seen["deliveries.in_capture_window"] == 1
