"""Wild captures never stop a run: field-class mutants beside their clean originals in ONE ``amqplens run``.

Tried (tests/e2e/mutations.py builds each from a clean original that is in the same run): the pcap
global header (magic zeroed, version 9, link type 0xBEEF, snaplen 16, cut inside it); record header
times (2106 = 0xFFFFFFFF s, 1970, a pcapng block in the year 49195, 2^64 - 1 units); record header
lengths (caplen > origlen, origlen 2^31 - 1, caplen 16 MiB); one packet's Ethernet type, IP version,
IHL, IP total length, TCP data offset 15 and 0; AMQP frame headers (a 0-9-1 size of 2^32 - 1, a 0-9-1
frame type 0x77, a 1.0 doff of 0, a 0-10 frame size of 0); RabbitMQ log lines dated 0001, 2150, 9999.

The run must exit 0 or 3 (never 4: an invariant, never crash); every clean capture's rows equal those
of the clean-only ingest and lifecycle the e2e tests share (``ingested``, ``lifecycled``); every mutant
has rows, or a ``failed`` captures row that says why. Then a second, small run: a 1.0 sender beyond its
credit and a capture with a time past 9999 exit 0, the credit overrun kept as observed and counted.
"""

from __future__ import annotations

import collections
import json
import pathlib

import pytest

from amqplens import cli
from amqplens.lake.store import TableStore
from tests.conftest import DATA
from tests.e2e import hostile_captures as H
from tests.e2e import mutations as M

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

ORIGINALS = M.ORIGINALS
LOG = "logs/rabbitmq_3_10.log"
COMPARED = ("captures", "connections", "frames", "decode_errors", "deliveries", "flow_events", "request_responses")
PER_RUN = ("run_id", "decoder_version", "path")  # what names the run and where its copy lay, not the capture
BUG_REASONS = {"internal_error", "reader_error", "byte_accounting_mismatch"}
TIME_MUTANTS = ("time_2106", "time_1970", "time_49195_pcapng", "time_2_64_pcapng")


@pytest.fixture(scope="module")
def wild(spark, conf, tmp_path_factory):
    d = tmp_path_factory.mktemp("wild")
    (d / "in").mkdir()
    (d / "logs").mkdir()
    originals = {}
    for rel in ORIGINALS:
        data = (DATA / rel).read_bytes()
        (d / "in" / pathlib.Path(rel).name).write_bytes(data)
        originals[H.capture_id(data)] = rel
    mutants = {}
    for name, (field_class, data) in M.capture_mutants().items():
        ext = ".pcapng" if name.endswith("pcapng") else ".pcap"
        (d / "in" / f"mutant_{name}{ext}").write_bytes(data)
        mutants[H.capture_id(data)] = (name, field_class)
    log = (DATA / LOG).read_bytes()
    (d / "logs" / "clean.log").write_bytes(log)
    far = M.log_years(log, {0: b"0001", 2: b"2150", 4: b"9999"})
    (d / "logs" / "mutant_log_years.log").write_bytes(far)
    mutants[H.capture_id(far)] = ("log_years", "log line times")
    args = ["run", "--input", str(d / "in"), "--logs", str(d / "logs"), "--lake", str(d / "lake"), "--run-id", "wild",
            "--set", f"report.out={d / 'report'}", "--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2"]
    code = cli.main(args)
    store = TableStore(spark, str(d / "lake"))
    return code, originals, mutants, store


def _rows(store, name: str, ids, key: str = "capture_id") -> dict[str, list]:
    from pyspark.sql import functions as F

    df = store.read(name).where(F.col(key).isin(list(ids)))
    out = collections.defaultdict(list)
    for r in df.drop(*[c for c in PER_RUN if c in df.columns]).collect():
        out[r[key]].append(r)
    return {cid: sorted(rows, key=lambda r: tuple(map(str, r))) for cid, rows in out.items()}


def test_the_run_completes_with_exit_0_or_3_never_4(wild):
    code, *_ = wild
    assert code in (0, 3)


def test_every_clean_capture_equals_its_clean_only_run(wild, lifecycled):
    _, originals, _, store = wild
    _, clean, _ = lifecycled
    for name in COMPARED:
        mine, theirs = _rows(store, name, originals), _rows(clean, name, originals)
        assert set(mine) == set(theirs), name
        for cid in originals:
            assert mine.get(cid) == theirs.get(cid), (name, originals[cid])


def test_every_mutant_has_rows_or_a_failed_row_with_its_reason(wild):
    _, _, mutants, store = wild
    caps = {r.capture_id: r for r in store.read("captures").collect()}
    errors = _rows(store, "decode_errors", mutants)
    events = _rows(store, "broker_events", mutants, key="log_id")
    conns = _rows(store, "connections", mutants)
    for cid, (name, field_class) in mutants.items():
        assert cid in caps, name
        row = caps[cid]
        if row.status == "failed":
            assert row.error, name
        else:
            assert conns.get(cid) or errors.get(cid) or events.get(cid), (name, field_class)
        bugs = [(e.reason, e.detail) for e in errors.get(cid, []) if e.reason in BUG_REASONS]
        assert bugs == [], name


def test_a_time_out_of_range_is_an_error_row_and_the_capture_is_kept(wild):
    _, _, mutants, store = wild
    caps = {r.capture_id: r for r in store.read("captures").collect()}
    errors = _rows(store, "decode_errors", mutants)
    for cid, (name, _) in mutants.items():
        if name in TIME_MUTANTS or name == "log_years":
            reasons = [e.reason for e in errors.get(cid, [])]
            assert reasons.count("ts_out_of_range") == (3 if name == "log_years" else 1), (name, reasons)
            assert caps[cid].status == "partial", name
            assert caps[cid].first_ts.year >= 1990 and caps[cid].last_ts.year < 2100, name


@pytest.fixture(scope="module")
def credit_run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("credit")
    (d / "in").mkdir()
    pcap, over = M.amqp10_beyond_credit(credit=1)
    (d / "in" / "amqp10_beyond_credit.pcap").write_bytes(pcap)
    ng = (DATA / ORIGINALS[1]).read_bytes()
    (d / "in" / "year_49195.pcapng").write_bytes(M.epb_time(ng, len(M.epb_offsets(ng)) // 2, M.YEAR_49195_US))
    (d / "in" / "clean.pcap").write_bytes((DATA / ORIGINALS[2]).read_bytes())
    code = cli.main(["run", "--input", str(d / "in"), "--lake", str(d / "lake"), "--run-id", "credit",
                     "--set", f"report.out={d / 'report'}", "--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2"])
    return code, H.capture_id(pcap), over, TableStore(spark, str(d / "lake")), d


def test_a_1_0_sender_beyond_its_credit_and_a_time_past_9999_exit_0(credit_run):
    """The broker grants the sender link 1 credit; the client sends 3 deliveries. The credit goes to 1 - 3 = -2:
    kept as observed, flagged credit_exceeded, counted in metrics_errors, a warning of validate, exit 0."""
    from pyspark.sql import functions as F

    code, cid, over, store, d = credit_run
    assert code == 0
    link = store.read("flow_events").where((F.col("capture_id") == cid) & (F.col("entity") == "link")
                                           & F.col("link_credit").isNotNull()).collect()
    assert min(r.link_credit for r in link) == 1 - 3 == -over
    flagged = [r for r in link if r.reason == "credit_exceeded"]
    assert flagged and all(r.link_credit < 0 for r in flagged) and all(r.reason == "credit_exceeded" for r in link if r.link_credit < 0)
    counted = (store.read("metrics_errors").where((F.col("capture_id") == cid) & (F.col("entity_kind") == "capture")
                                                  & (F.col("bucket_seconds") == 0)
                                                  & (F.col("kind") == "peer_anomaly") & (F.col("condition") == "credit_exceeded"))
               .agg(F.sum("count")).first()[0])
    assert counted == len(flagged)
    quality = json.loads((d / "lake" / "_quality" / "runs" / "credit.json").read_text())
    (warned,) = [w for w in quality["warnings"] if w["name"] == "flow_events.non_negative.link_credit"]
    assert warned["severity"] == "warning"


def test_a_capture_that_raises_fails_alone_and_a_rerun_retries_only_it(spark, conf, tmp_path):
    """Tried: a capture file deleted after it was listed (the job raises FileNotFoundError on the driver while it plans
    the splits). The other capture is written; the gone one has a failed row with the error; once the file is back, the
    next run ingests it and skips the other."""
    from pyspark.sql import functions as F

    from amqplens.jobs import ingest_captures
    from amqplens.jobs import lifecycle
    from amqplens.inputs import capture_files

    for rel in ORIGINALS[:2]:
        (tmp_path / pathlib.Path(rel).name).write_bytes((DATA / rel).read_bytes())
    c = conf.with_overrides(lake__root=str(tmp_path / "lake"))
    files = capture_files([str(tmp_path)])
    gone = next(f for f in files if f.path.endswith(".pcapng"))
    kept = pathlib.Path(gone.path).read_bytes()
    pathlib.Path(gone.path).unlink()
    first = ingest_captures.run_files(spark, c, files, run_id="one")
    assert list(first.failed) == [gone.capture_id] and "FileNotFoundError" in first.failed[gone.capture_id]
    store = TableStore(spark, str(tmp_path / "lake"))
    caps = {r.capture_id: r for r in store.read("captures").collect()}
    assert caps[gone.capture_id].status == "failed" and "FileNotFoundError" in caps[gone.capture_id].error
    (other,) = [f for f in files if f is not gone]
    assert caps[other.capture_id].status == "ok" and store.read("frames").where(F.col("capture_id") == other.capture_id).count() > 0
    # the fused lifecycle: rows for the capture written, none (and no transaction) for the one that failed
    assert first.lifecycle == [other.capture_id]
    lifecycle_rows = {t: {r.capture_id for r in store.read(t).select("capture_id").distinct().collect()}
                      for t in ("deliveries", "flow_events", "request_responses")}
    assert lifecycle_rows["request_responses"] == {other.capture_id} and all(ids <= {other.capture_id} for ids in lifecycle_rows.values())
    assert not store.committed("request_responses", lifecycle.app_id(gone.capture_id, caps[gone.capture_id].decoder_version))

    pathlib.Path(gone.path).write_bytes(kept)
    second = ingest_captures.run(spark, c, [str(tmp_path)], run_id="two")
    assert second.skipped == [other.capture_id] and [r["capture_id"] for r in second.captures] == [gone.capture_id]
    assert second.failed == {} and second.lifecycle == [gone.capture_id]
    assert store.read("request_responses").where(F.col("capture_id") == gone.capture_id).count() > 0
    assert store.read("captures").where(F.col("capture_id") == gone.capture_id).first().status == "ok"
    assert store.read("captures").where(F.col("status") == "failed").count() == 0
