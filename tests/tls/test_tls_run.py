"""Every stage on the broker's TLS fixtures, on the shared SparkSession: ingest with two of the three key
logs, lifecycle, metrics, validate (byte accounting over TLS included) and the report.

Oracle: the same scenario captured in the clear (tests/data/tls/tls_plain.pcap): the TLS connections'
frames, deliveries and outcomes must equal its rows, ignoring ids, ports and times. Bad input tried:
tls12_chacha.pcap has no key in the run's key logs; the run must still go through with ``no_key`` on it.
"""

from __future__ import annotations

import json

import pytest

from amqplens import cli
from amqplens.lake.store import TableStore
from tests.conftest import DATA

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

TLS = DATA / "tls"
NAMES = ("tls_plain", "tls12", "tls12_chacha", "tls13")
KEYED = ("tls12", "tls13")
IGNORED = {"capture_id", "capture_date", "connection_id", "frame_id", "delivery_id", "settled_by_frame_id", "frame_ids",
           "request_frame_id", "response_frame_id", "ts", "sent_ts", "settled_ts", "request_ts", "response_ts",
           "settle_latency_us", "latency_us"}


@pytest.fixture(scope="module")
def tls_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("tls_lake")
    keylogs = json.dumps([str(TLS / f"{n}.keylog") for n in KEYED])
    c = conf.with_overrides(lake__root=str(lake), report__out=str(lake / "report"), capture__keylog=keylogs)
    cli._run_stages(spark, c, [str(TLS / f"{n}.pcap") for n in NAMES], "tls")  # raises if validate fails
    store = TableStore(spark, str(lake))
    names = {r.capture_id: r.path.rsplit("/", 1)[-1].removesuffix(".pcap") for r in store.read("captures").collect()}
    return store, {names[r.capture_id]: r for r in store.read("connections").collect()}


def _rows(store, table: str, connection_id: str) -> list:
    from pyspark.sql import functions as F

    rows = [r.asDict() for r in store.read(table).where(F.col("connection_id") == connection_id).collect()]
    rows = [{k: v for k, v in r.items() if k not in IGNORED} for r in rows]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_tls_status_version_and_suite(tls_lake):
    _, conns = tls_lake
    got = {n: (c.tls, c.tls_status, c.tls_version, c.dialect) for n, c in conns.items()}
    assert got == {"tls_plain": (False, None, None, "0-9-1"), "tls12": (True, "decrypted", "1.2", "0-9-1"),
                   "tls13": (True, "decrypted", "1.3", "0-9-1"), "tls12_chacha": (True, "no_key", "1.2", None)}
    assert conns["tls12"].tls_cipher_suite == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"


@pytest.mark.parametrize("name", KEYED)
def test_frames_deliveries_and_outcomes_equal_the_clear_capture(tls_lake, name):
    store, conns = tls_lake
    for table in ("frames", "deliveries", "request_responses"):
        theirs = _rows(store, table, conns["tls_plain"].connection_id)
        assert _rows(store, table, conns[name].connection_id) == theirs and theirs, table
    outcomes = sorted(r["outcome"] for r in _rows(store, "deliveries", conns[name].connection_id))
    oracle = json.loads((TLS / f"{name}.oracle.json").read_text())["client"]
    assert outcomes.count("acked") == oracle["acked"] and outcomes.count("rejected_drop") == oracle["rejected"]


@pytest.mark.parametrize("name", KEYED)
def test_record_bytes_are_plaintext_overhead_and_undecrypted(tls_lake, name):
    _, conns = tls_lake
    c = conns[name]
    for d in ("to_server", "to_client"):
        assert c[f"bytes_{d}"] == c[f"tls_plaintext_bytes_{d}"] + c[f"tls_overhead_bytes_{d}"] + c[f"tls_undecrypted_bytes_{d}"]
        assert c[f"tls_plaintext_bytes_{d}"] == c[f"frame_bytes_{d}"] == conns["tls_plain"][f"bytes_{d}"]


def test_a_capture_without_its_key_runs_through_as_no_key(tls_lake):
    store, conns = tls_lake
    from pyspark.sql import functions as F

    c = conns["tls12_chacha"]
    errors = store.read("decode_errors").where(F.col("connection_id") == c.connection_id).collect()
    assert sorted((e.direction, e.reason, e.offset, e.length) for e in errors) == [
        ("to_client", "tls", 0, c.bytes_to_client), ("to_server", "tls", 0, c.bytes_to_server)]
    assert store.read("frames").where(F.col("connection_id") == c.connection_id).count() == 0


def test_no_key_material_or_plain_response_in_any_table(tls_lake):
    """Every cell of every table (Spark's read of the lake), in clear or hex."""
    from amqplens.decode.tls import KeyLog
    from amqplens.contracts import ALL_TABLES

    store, _ = tls_lake
    secrets = [s for n in KEYED for session in KeyLog.read([TLS / f"{n}.keylog"]).sessions.values() for s in session.values()]
    text = repr([store.read(name).collect() for name in ALL_TABLES])
    for secret in secrets:
        assert secret.hex() not in text and repr(secret)[2:-1] not in text
    assert "\\x00guest\\x00guest" not in text and "\\u0000guest\\u0000guest" not in text
