"""`amqplens run --input CAPTURES --logs LOGS --lake DIR` through the CLI, on the shared Spark session.

The logs and captures come from the same broker runs (tools/make_fixtures.py),
so the broker's log and the wire must agree: the channel errors the log names
are the channel.close frames of the captured connection, the memory alarm's
interval holds the captured connection.blocked, the traced messages are the
captured publishes. Then the same logs again change no table.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from amqplens import cli
from amqplens.contracts import ALL_TABLES
from tests.conftest import DATA

BROKER, LOGS = DATA / "broker", DATA / "logs"
CAPTURES = [BROKER / "channel_error.pcap", BROKER / "connection_blocked.pcap", LOGS / "broker_logs.pcap"]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("logs_e2e")
    garbage = out / "notes.txt"
    garbage.write_text("these are not log lines\n")
    # the proton trace with one transfer's handle cut out: that frame cannot be put on a link
    cut = out / "cut_handle.trace.txt"
    cut.write_bytes((BROKER / "amqp10_proton.trace.txt").read_bytes().replace(b"@transfer(20) [handle=0x0, ", b"@transfer(20) [", 1))
    logs = [BROKER / "rabbitmq.log", LOGS / "rabbitmq_3_10.log", LOGS / "tracing_json.log", BROKER / "amqp10_proton.trace.txt", cut,
            garbage]
    # the quality gates have tests of their own; here they would only add minutes
    args = ["--lake", str(out / "lake"), "--run-id", "logs-e2e", "--set", f"report.out={out / 'report'}", "--set", "validate.enabled=false"]
    # notes.txt holds no log line: its captures row is failed, so the run completes with exit 3. A broker log given
    # as a capture too, and a capture given as a log too, are left alone by the wrong ingest (same bytes, same
    # capture_id: a failed row of the wrong kind would replace the right rows)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(["run", "--input", *map(str, CAPTURES), str(BROKER / "rabbitmq.log"),
                         "--logs", str(LOGS / "broker_logs.pcap"), *map(str, logs), *args])
    assert code == 3, printed.getvalue()
    return {"root": out, "logs": logs, "args": args, "printed": printed.getvalue()}


def _read(spark, lake, name):
    from amqplens.lake.store import TableStore

    return TableStore(spark, str(lake["root"] / "lake")).read(name)


def _capture_id(spark, lake, path):
    return _read(spark, lake, "captures").where(f"path = '{path}'").first().capture_id


def test_each_log_is_a_captures_row_and_the_unknown_one_an_error(spark, lake):
    rows = {r.path: r for r in _read(spark, lake, "captures").collect()}
    formats = [rows[str(p)].format for p in lake["logs"]]
    assert formats == ["rabbitmq-3.9", "rabbitmq-3.9", "rabbitmq-trace-json", "proton-trace", "proton-trace", "log-unknown"]
    bad = rows[str(lake["logs"][-1])]
    assert bad.status == "failed" and bad.capture_errors == 1
    (err,) = _read(spark, lake, "decode_errors").where(f"capture_id = '{bad.capture_id}'").collect()
    assert (err.stage, err.reason, err.offset, bytes(err.raw)) == ("log", "unknown_log_format", 0, b"these are not log lines")


def test_a_file_of_the_other_kind_is_left_alone_and_loses_nothing(spark, lake):
    """broker_logs.pcap was given with --logs too, rabbitmq.log with --input too: each keeps the rows of its own
    kind (the capture every frame its decoder finds, the log its events), and the stage lines say what was left."""
    from amqplens.decode import decode_capture

    pcap = LOGS / "broker_logs.pcap"
    row = _read(spark, lake, "captures").where(f"path = '{pcap}'").first()
    assert (row.format, row.status) == ("pcap", "ok")
    frames = _read(spark, lake, "frames").where(f"capture_id = '{row.capture_id}'").count()
    assert frames == len(decode_capture(pcap).frames()) > 0
    log_row = _read(spark, lake, "captures").where(f"path = '{BROKER / 'rabbitmq.log'}'").first()
    assert (log_row.format, log_row.status) == ("rabbitmq-3.9", "ok")
    assert _read(spark, lake, "broker_events").where(f"log_id = '{log_row.capture_id}'").count() > 0
    assert "1 broker log(s) passed on to ingest-logs" in lake["printed"]
    assert "1 packet capture(s) passed on to ingest-captures" in lake["printed"]


def test_run_ingests_a_log_given_with_input_and_ingest_captures_refuses_it(spark, tmp_path):
    """Issue 36.7: exit 0 means every capture and log was processed. `run --input LOG` (no --logs) ingests the log
    with the logs stage (its events are in broker_events); `ingest-captures --input LOG` cannot, says so, exit 2."""
    from amqplens.lake.store import TableStore

    log_file = LOGS / "rabbitmq_3_10.log"
    args = ["--lake", str(tmp_path / "lake"), "--set", f"report.out={tmp_path / 'report'}", "--set", "validate.enabled=false"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["run", "--input", str(log_file), *args]) == 0, printed.getvalue()
    assert "0 capture(s) written, 0 already done, 1 broker log(s) passed on to ingest-logs" in printed.getvalue()
    store = TableStore(spark, str(tmp_path / "lake"))
    (row,) = store.read("captures").collect()
    assert (row.path, row.status) == (str(log_file), "ok")
    assert store.read("broker_events").where(f"log_id = '{row.capture_id}'").count() > 0
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["ingest-captures", "--input", str(log_file), "--lake", str(tmp_path / "lake2")])
    assert code == 2
    assert errors.getvalue().strip() == (f"amqplens: {log_file}: a broker log (rabbitmq-3.9), not a capture: give it with --logs "
                                         "(left alone; every other file was ingested)")


def test_a_traced_frame_that_did_not_decode_is_one_stage_frame_error_counted_once(spark, lake):
    cut = lake["logs"][4]
    cid = _capture_id(spark, lake, cut)
    (err,) = _read(spark, lake, "decode_errors").where(f"capture_id = '{cid}'").collect()
    line = next(i for i, text in enumerate(cut.read_bytes().splitlines(), 1) if b"@transfer(20) [delivery-id" in text)
    assert (err.stage, err.reason) == ("frame", "bad_transfer") and err.detail.startswith(f"line {line}: transfer frame: ")
    (frame,) = _read(spark, lake, "frames").where(f"capture_id = '{cid}' and decode_error is not null").collect()
    assert frame.stream_offset == line and frame.decode_error.startswith("bad_transfer: ")
    # metrics_errors counts it once, from the frame (the decode_errors row of stage frame repeats it)
    counted = _read(spark, lake, "metrics_errors").where(f"capture_id = '{cid}' and kind = 'decode_error'").collect()
    assert {(m.entity_kind, m.bucket_seconds) for m in counted} >= {("capture", 0), ("connection", 0)}
    assert {(m.condition, m["count"]) for m in counted} == {("frame:bad_transfer", 1)}  # every entity and bucket width


def test_channel_errors_join_the_captured_connection_and_match_its_close_frames(spark, lake):
    cap = _capture_id(spark, lake, BROKER / "channel_error.pcap")
    (conn,) = _read(spark, lake, "connections").where(f"capture_id = '{cap}'").collect()
    events = _read(spark, lake, "broker_events").where(f"connection_id = '{conn.connection_id}'").orderBy("line_number").collect()
    assert {tuple(e.sources) for e in events} == {("log", "capture")}
    assert [e.event for e in events][:3] == ["connection_accepted", "connection_named", "connection_authenticated"]
    logged = [(e.reply_code, e.reply_text) for e in events if e.event == "channel_error"]
    closes = (_read(spark, lake, "frames").where(f"connection_id = '{conn.connection_id}' and class_name = 'channel' "
                                                   "and method_name = 'close' and direction = 'to_client'")
              .orderBy("ts").collect())
    assert logged == [(f.reply_code, f.reply_text) for f in closes] and len(logged) == 4


def test_abrupt_close_joins_the_captured_connection_the_client_dropped(spark, lake):
    oracle = json.loads((LOGS / "broker_logs.oracle.json").read_text())
    (e,) = _read(spark, lake, "broker_events").where("event = 'connection_closed_abruptly'").collect()
    (conn,) = _read(spark, lake, "connections").where(f"connection_id = '{e.connection_id}'").collect()
    assert conn.client_port == e.client_port == oracle["facts"]["abrupt_client_port"] and conn.source == "capture"


def test_the_memory_alarm_holds_the_captured_blocked_interval(spark, lake):
    cap = _capture_id(spark, lake, BROKER / "connection_blocked.pcap")
    flow = (_read(spark, lake, "flow_events").where(f"capture_id = '{cap}' and entity = 'connection'")
            .orderBy("ts").collect())
    blocked = next(f.ts for f in flow if f.event == "blocked")
    unblocked = next(f.ts for f in flow if f.event == "unblocked")
    alarms = (_read(spark, lake, "broker_events").where("alarm_resource = 'memory'").orderBy("ts").collect())
    pairs = list(zip([a.ts for a in alarms if a.event == "alarm_set"], [a.ts for a in alarms if a.event == "alarm_cleared"]))
    (on, off), = [(s, c) for s, c in pairs if s <= blocked <= c]
    assert off <= unblocked and (unblocked - off).total_seconds() < 1  # the broker unblocks as the alarm clears


def test_traced_messages_are_the_captured_publishes(spark, lake):
    trace = _read(spark, lake, "deliveries").where("source = 'trace'").collect()
    assert len(trace) == 30 and {d.outcome for d in trace} == {"traced"}
    (conn_id,) = {d.connection_id for d in trace}
    captured = _read(spark, lake, "deliveries").where(f"connection_id = '{conn_id}' and source = 'capture'").collect()
    for method in ("publish", "deliver"):
        assert sorted(d.message_id for d in trace if d.method == method) == sorted(
            d.message_id for d in captured if d.method == method)
    assert _read(spark, lake, "connections").where(f"connection_id = '{conn_id}'").first().source == "capture"


def test_proton_trace_frames_go_through_lifecycle_to_what_the_client_counted(spark, lake):
    client = json.loads((BROKER / "amqp10_proton.oracle.json").read_text())["client"]
    trace_id = _capture_id(spark, lake, BROKER / "amqp10_proton.trace.txt")
    rows = _read(spark, lake, "deliveries").where(f"capture_id = '{trace_id}'").collect()
    sent = [d.outcome for d in rows if d.direction == "to_broker"]
    got = sorted(d.outcome for d in rows if d.direction == "from_broker")
    assert sent == ["accepted"] * client["accepted_by_broker"] and len(sent) == client["published"]
    assert got == sorted(["accepted"] * client["accepted"] + ["rejected"] * client["rejected"] + ["released"] * client["released"])
    assert len(got) == client["delivered"]
    (conn,) = _read(spark, lake, "connections").where(f"capture_id = '{trace_id}'").collect()
    assert (conn.source, conn.user, conn.client_container_id) == ("log", "guest", "fixture-amqp10_proton")
    assert {f.source for f in _read(spark, lake, "frames").where(f"capture_id = '{trace_id}'").collect()} == {"trace_log"}


def test_report_shows_broker_events(spark, lake):
    page = (lake["root"] / "report" / "index.html").read_text()
    assert "Broker events (server logs)" in page and "<td>channel_error</td>" in page
    assert '<figure id="timeline" class="drawn">' in page and "broker_events" in page


def test_report_engines_agree_on_broker_events_alarms_and_findings(spark, lake, tmp_path):
    """The report's queries on the driver against Spark's on a lake with broker events (channel errors, an abrupt
    close, a memory alarm), Proton-trace connections (left out of the timeline) and findings."""
    from amqplens.config import load_config
    from amqplens.lake.store import TableStore
    from tests.metrics.engines import pages_agree, queries_agree

    conf = load_config(sets=[f"lake.root={lake['root'] / 'lake'}"])
    got = queries_agree(TableStore(spark, conf["lake.root"]), conf)
    assert len(got["broker_event_rows"]) and len(got["alarm_rows"])
    assert any(title.startswith("Broker events") and rows for title, _, _, _, rows in got["top_tables"])
    assert got["connections"].findings.sum() > 0  # warning and critical findings count towards a connection's page
    assert len(pages_agree(spark, conf, tmp_path)) > 1


def test_the_same_logs_again_change_no_table(spark, lake):
    from amqplens.lake.store import TableStore

    store = TableStore(spark, str(lake["root"] / "lake"))
    before = {name: store.version(name) for name in ALL_TABLES}
    # notes.txt is failed (no log line in it): its final result, not retried; the command says so with exit 3
    assert cli.main(["ingest-logs", "--logs", *map(str, lake["logs"]), *lake["args"]]) == 3
    assert {name: store.version(name) for name in ALL_TABLES} == before


def test_split_plan_numbers_each_split_s_first_line(spark):
    from amqplens.jobs.ingest_logs import _split_rows, log_files

    (f,) = log_files([str(BROKER / "rabbitmq.log")])
    rows = _split_rows(spark, [f], 4096)
    raw = (BROKER / "rabbitmq.log").read_bytes()
    assert len(rows) == -(-len(raw) // 4096)
    assert [r[5] for r in rows] == [raw[: r[3]].count(b"\n") + 1 for r in rows]


def test_run_needs_captures_or_logs(tmp_path, capsys):
    assert cli.main(["run", "--lake", str(tmp_path / "lake")]) == 2
    assert "run needs --input, --logs or both" in capsys.readouterr().err


def test_validate_on_spark_and_on_pandas_agree_on_logs_and_the_connections_they_name(spark, lake, tmp_path):
    """A log's rows may name any capture's connection (broker_events.connection_id, held to the whole connections
    table): the Spark path counts those references in a job of their own (amqplens/jobs/validate/quality.py:
    reference_jobs, one anti join per referenced table) and must observe what the pandas path observes, row counts
    and every expectation's outcome, on these captures, logs, traces and the failed capture beside them."""
    import shutil

    from amqplens.config import load_config
    from amqplens.jobs import validate

    copy = tmp_path / "lake"
    shutil.copytree(lake["root"] / "lake", copy, ignore=shutil.ignore_patterns("_quality"))
    conf = load_config().with_overrides(lake__root=str(copy))

    def summary(**overrides):
        try:
            return validate.run(spark, conf.with_overrides(**overrides), run_id="_".join(map(str, overrides.values())) or "p")
        except validate.ValidationFailed as failed:
            return failed.summary

    on_pandas, on_spark = summary(), summary(validate__pandas_max_rows=0)
    assert on_pandas["rows"]["broker_events"] > 0 and on_pandas["rows"] == on_spark["rows"]
    names = {e["name"] for e in on_spark["expectations"]}
    assert {"broker_events.ref.connection_id", "deliveries.ref.frame_ids", "flow_events.ref.frame_id"} <= names
    assert [(e["name"], e["success"], e["observed"]) for e in on_spark["expectations"]] == \
        [(e["name"], e["success"], e["observed"]) for e in on_pandas["expectations"]]


def test_metrics_of_logs_and_captures_are_the_same_rows_on_both_engines(spark, conf, lake, monkeypatch):
    """The run's metrics went through the driver (a small lake); Spark's queries over the same lake (rows from broker
    logs, a JSON message trace and Proton traces beside the captures', and a failed log) give every row the same."""
    from amqplens.lake.store import TableStore
    from tests.metrics.test_driver_engine import _same_rows

    root = str(lake["root"] / "lake")
    n = _same_rows(spark, conf.with_overrides(lake__root=root), TableStore(spark, root), monkeypatch)
    assert n["metrics_latency"] > 0 and n["metrics_errors"] > 0, n


def test_every_frame_id_follows_the_rule_the_lifecycle_job_names_frames_by(spark, lake):
    """The lifecycle job's direct tasks make frame ids (``arrow.frame_ids``) rather than read them: both ingest jobs
    wrote every frame's id by that rule, the traces' in Spark (``concat_ws``) and the captures' in Arrow."""
    from deltalake import DeltaTable

    from amqplens.decode.common.arrow import frame_ids

    t = DeltaTable(str(lake["root"] / "lake" / "frames")).to_pyarrow_table(
        columns=["frame_id", "connection_id", "direction", "stream_offset", "source"])
    assert {"trace_log", "capture"} <= set(t.column("source").to_pylist()) and t.num_rows > 100
    made = frame_ids(t.column("connection_id"), t.column("direction"), t.column("stream_offset"))
    assert made.to_pylist() == t.column("frame_id").to_pylist()
