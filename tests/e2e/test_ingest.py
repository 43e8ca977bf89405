"""The ingest job end to end on real captures, on the shared SparkSession.

Independent oracle: tshark's `-z conv,tcp` (tests/oracles/tshark.py) for the
connections found, their endpoints, start, packets and bytes per direction.
"""

from __future__ import annotations

import glob
import pathlib
from decimal import Decimal

import pytest
from deltalake import DeltaTable

from jobs import ingest_captures
from jobs.lake import TableStore
from tests.conftest import DATA, SHARED_CAPTURES
from tests.oracles.tshark import _tshark, tshark_conversations

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

FIXTURES = sorted(
    glob.glob(str(DATA / "public" / "*.pcap*"))
    + glob.glob(str(DATA / "broker" / "*.pcap"))
    + glob.glob(str(DATA / "demo" / "*.pcap"))
    + glob.glob(str(DATA / "capture" / "*.pcap*"))
    + glob.glob(str(SHARED_CAPTURES / "*.pcap*"))
)
TABLES = ("captures", "connections", "decode_errors")


@pytest.fixture(scope="module")
def ingested(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("lake")
    c = conf.with_overrides(lake__root=str(lake))
    result = ingest_captures.run(spark, c, FIXTURES, run_id="first")
    return c, TableStore(spark, str(lake)), result


def test_every_fixture_is_one_ok_capture(ingested):
    _, store, result = ingested
    caps = {r.path: r for r in store.read("captures").collect()}
    distinct = {ingest_captures.capture_files([p])[0].capture_id for p in FIXTURES}
    assert len(caps) == len(distinct)  # the shared copies of public captures are the same bytes
    for row in caps.values():
        assert row.status == "ok", (row.path, row.error)
        assert row.packets_total >= row.packets_tcp >= row.packets_selected


@pytest.mark.tshark
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: pathlib.Path(p).name)
def test_connections_equal_tshark_conversations(ingested, path):
    _, store, _ = ingested
    from pyspark.sql import functions as F

    cid = ingest_captures.capture_files([path])[0].capture_id
    ours = store.read("connections").where(F.col("capture_id") == cid).collect()
    sniffed = _amqp_opening_endpoints(path)
    theirs = [
        c for c in tshark_conversations(path)
        if 5672 in (c["port_a"], c["port_b"])
        or frozenset({(c["address_a"], c["port_a"]), (c["address_b"], c["port_b"])}) in sniffed
    ]
    assert len(ours) == len(theirs)
    by_key = {}
    for t in theirs:
        by_key[(frozenset({(t["address_a"], t["port_a"]), (t["address_b"], t["port_b"])}), t["abs_start_us"])] = t
    for r in ours:
        key = (frozenset({(r.client_ip, r.client_port), (r.server_ip, r.server_port)}), None)
        start_us = int(r.start_ts.timestamp() * 1_000_000 + 0.5)
        match = [t for (k, s), t in by_key.items() if k == key[0] and abs(s - start_us) <= 1]
        assert len(match) == 1, (r.client_ip, r.client_port, r.start_ts)
        t = match[0]
        a_is_client = (t["address_a"], t["port_a"]) == (r.client_ip, r.client_port)
        to_server = ("frames_ab", "bytes_ab", "bytes_ab_max") if a_is_client else ("frames_ba", "bytes_ba", "bytes_ba_max")
        to_client = ("frames_ba", "bytes_ba", "bytes_ba_max") if a_is_client else ("frames_ab", "bytes_ab", "bytes_ab_max")
        assert r.packets_to_server == t[to_server[0]]
        assert r.packets_to_client == t[to_client[0]]
        assert t[to_server[1]] <= r.wire_bytes_to_server <= t[to_server[2]]
        assert t[to_client[1]] <= r.wire_bytes_to_client <= t[to_client[2]]


def _amqp_opening_endpoints(path) -> set[frozenset]:
    """Endpoint pairs of TCP streams whose first payload (by tshark) starts with b"AMQP"."""
    out = _tshark(path, "-Y", "tcp.len > 0", "-T", "fields", "-e", "tcp.stream", "-e", "ip.src", "-e", "ipv6.src",
                  "-e", "tcp.srcport", "-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport", "-e", "tcp.payload",
                  "-e", "frame.time_epoch")
    first: dict[str, list[str]] = {}
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] not in first or Decimal(f[8]) < Decimal(first[f[0]][8]):  # file order is not time order
            first[f[0]] = f
    pairs = set()
    for f in first.values():
        if f[7].replace(":", "").lower().startswith("414d5150"):
            pairs.add(frozenset({(f[1] or f[2], int(f[3])), (f[4] or f[5], int(f[6]))}))
    return pairs


def test_missing_bytes_equal_gap_rows(ingested):
    _, store, _ = ingested
    from pyspark.sql import functions as F

    gaps = (
        store.read("decode_errors").where(F.col("stage") == "tcp")
        .groupBy("connection_id").pivot("direction", ["to_server", "to_client"]).agg(F.sum("length"))
        .fillna(0)
    )
    conns = store.read("connections").select("connection_id", "missing_bytes_to_server", "missing_bytes_to_client")
    joined = conns.join(gaps, "connection_id", "left").fillna(0).collect()
    assert joined
    for r in joined:
        assert (r.missing_bytes_to_server, r.missing_bytes_to_client) == (r.to_server, r.to_client), r.connection_id


def test_second_run_changes_no_table(ingested, spark):
    c, store, _ = ingested
    before = {t: store.version(t) for t in TABLES}
    rows_before = {t: sorted(map(tuple, store.read(t).drop("run_id").collect())) for t in ("connections", "decode_errors")}
    result = ingest_captures.run(spark, c, FIXTURES, run_id="second")
    assert result.captures == [] and len(result.skipped) > 0
    assert {t: store.version(t) for t in TABLES} == before
    assert {t: sorted(map(tuple, store.read(t).drop("run_id").collect())) for t in rows_before} == rows_before


def test_tables_open_with_plain_deltalake(ingested):
    c, _, _ = ingested
    for t in TABLES:
        table = DeltaTable(f"{c['lake.root']}/{t}")
        assert table.to_pyarrow_table().num_rows > 0 or t == "decode_errors"


def test_tiny_splits_give_the_same_connections(spark, conf, tmp_path):
    """One file cut into many 4 KiB splits must give exactly the single-split result."""
    demo = str(DATA / "demo" / "demo.pcap")
    results = {}
    for split in ("4k", "1g"):
        c = conf.with_overrides(lake__root=str(tmp_path / split), capture__split_size=split)
        r = ingest_captures.run(spark, c, [demo], run_id="x")
        assert r.captures[0]["splits"] == (1 if split == "1g" else -(-pathlib.Path(demo).stat().st_size // 4096)) or split == "4k"
        store = TableStore(spark, c["lake.root"])
        results[split] = (
            sorted(map(tuple, store.read("connections").collect())),
            {k: v for k, v in r.captures[0].items() if k not in ("splits", "run_id")},
        )
    assert results["4k"] == results["1g"]
