"""The ingest job end to end on real captures, on the shared SparkSession.

Independent oracle: tshark's `-z conv,tcp` (tests/oracles/tshark.py) for the
connections found, their endpoints, start, packets and bytes per direction.
"""

from __future__ import annotations

import collections
import pathlib
import re
from decimal import Decimal

import pytest
from deltalake import DeltaTable

from amqplens.jobs import ingest_captures
from amqplens.lake.store import TableStore
from tests.conftest import DATA
from tests.e2e.conftest import FIXTURES, TABLES
from tests.oracles.tshark import _tshark, tshark_conversations

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def _rows(store, table: str, cid: str, columns: tuple[str, ...]) -> list:
    """One capture's rows of ``table`` read on the driver (delta-rs; the Delta snapshot Spark reads too), as objects
    with the columns as attributes: a per-fixture comparison with tshark needs no Spark job (about 1 s each)."""
    import types

    return [types.SimpleNamespace(**r) for r in store.read_arrow(table, columns, [cid]).to_pylist()]


def test_every_fixture_is_one_ok_capture(ingested):
    _, store, result = ingested
    caps = {r.path: r for r in store.read("captures").collect()}
    distinct = {ingest_captures.capture_files([p])[0].capture_id for p in FIXTURES}
    assert len(caps) == len(distinct)
    for row in caps.values():
        assert row.status == "ok", (row.path, row.error)
        assert row.packets_total >= row.packets_tcp >= row.packets_selected


@pytest.mark.tshark
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: pathlib.Path(p).name)
def test_connections_equal_tshark_conversations(ingested, path):
    _, store, _ = ingested
    cid = ingest_captures.capture_files([path])[0].capture_id
    ours = _rows(store, "connections", cid, ("client_ip", "client_port", "server_ip", "server_port", "start_ts",
                                             "packets_to_server", "packets_to_client", "wire_bytes_to_server",
                                             "wire_bytes_to_client"))
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
    rows_before = {t: sorted(map(tuple, store.read(t).drop("run_id").collect())) for t in ("connections", "frames", "decode_errors")}
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
        c = conf.with_overrides(lake__root=str(tmp_path / split), capture__split_size=split, capture__direct="off")
        r = ingest_captures.run(spark, c, [demo], run_id="x")
        size = pathlib.Path(demo).stat().st_size
        assert r.captures[0]["splits"] == (1 if split == "1g" else -(-size // 4096))  # one split per 4 KiB begun
        store = TableStore(spark, c["lake.root"])
        results[split] = (
            sorted(map(tuple, store.read("connections").collect())),
            {k: v for k, v in r.captures[0].items() if k not in ("splits", "run_id")},
        )
    assert results["4k"] == results["1g"]


AMQP091 = [p for p in FIXTURES if "amqp091" in p or ("/broker/" in p and "amqp10" not in p)]
TYPE_CODE = {"method": 1, "header": 2, "body": 3, "heartbeat": 8}


@pytest.mark.tshark
@pytest.mark.parametrize("path", AMQP091, ids=lambda p: pathlib.Path(p).name)
def test_frames_equal_tshark_frame_by_frame(ingested, path):
    """Per connection and direction: (channel, frame type, class, method, delivery-tag), as tshark dissects them.

    tshark 4.0 leaves the 0-9-1 protocol header undissected: that one is compared with the raw bytes.
    """
    from tests.v0_9_1 import tshark_oracle

    _, store, _ = ingested
    cid = ingest_captures.capture_files([path])[0].capture_id
    theirs = tshark_oracle.frames(path)
    client_port = {}
    out = _tshark(path, "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.dstport")
    for line in out.splitlines():
        stream, sport, dport = line.split("\t")
        if int(dport) == 5672:
            client_port[int(sport)] = int(stream)
    frames = sorted(_rows(store, "frames", cid, ("connection_id", "direction", "stream_offset", "frame_type", "size",
                                                "channel", "class_id", "method_id", "delivery_tag")),
                    key=lambda f: (f.connection_id, f.direction, f.stream_offset))
    conns = {r.connection_id: r for r in _rows(store, "connections", cid, ("connection_id", "client_port"))}
    ours: dict = {}
    for f in frames:
        if f.frame_type == "protocol_header":
            assert f.stream_offset == 0 and f.size == 8 and f.direction == "to_server"
            continue
        key = (client_port[conns[f.connection_id].client_port], f.direction)
        ours.setdefault(key, []).append(
            (f.channel, TYPE_CODE[f.frame_type], f.class_id if f.frame_type == "method" else None, f.method_id, f.delivery_tag)
        )
    assert ours == theirs
    assert sum(len(v) for v in ours.values()) > 0


def test_byte_accounting_from_the_tables(ingested):
    """Per decoded connection and direction: frame bytes + codec error bytes + gap bytes = TCP stream bytes."""
    from pyspark.sql import functions as F

    _, store, _ = ingested
    frames = store.read("frames").groupBy("connection_id", "direction").agg(F.sum("size").alias("frames"))
    errors = (
        store.read("decode_errors").where(F.col("connection_id").isNotNull() & (F.col("stage") != "frame"))  # frame: frame bytes
        .groupBy("connection_id", "direction").agg(F.sum("length").alias("errors"))
    )
    covered = frames.join(errors, ["connection_id", "direction"], "full").fillna(0)
    conns = store.read("connections").where(F.col("dialect").isNotNull() & ~F.col("tls"))
    streams = conns.select("connection_id", F.lit("to_server").alias("direction"), F.col("bytes_to_server").alias("stream")).union(
        conns.select("connection_id", F.lit("to_client").alias("direction"), F.col("bytes_to_client").alias("stream"))
    )
    rows = streams.join(covered, ["connection_id", "direction"], "left").fillna(0).collect()
    assert len(rows) > 50
    bad = [(r.connection_id, r.direction, r.stream, r.frames, r.errors) for r in rows if r.stream != r.frames + r.errors]
    assert not bad
    assert store.read("decode_errors").where(F.col("reason") == "byte_accounting_mismatch").count() == 0


def test_connection_protocol_columns_from_the_broker_fixtures(ingested):
    """Negotiated values and identities as the fixture tool configured them (tests/data/broker/README.md)."""
    from pyspark.sql import functions as F

    _, store, _ = ingested
    conns = store.read("connections")
    large = ingest_captures.capture_files([str(DATA / "broker" / "large_body.pcap")])[0].capture_id
    rows = conns.where((F.col("capture_id") == large) & (F.col("dialect") == "0-9-1")).collect()
    assert rows and all(r.frame_max == 4096 and r.user == "guest" and r.vhost == "/" for r in rows)
    assert all(r.client_product == "Pika Python Client Library" and r.server_product == "RabbitMQ" for r in rows)
    hb = ingest_captures.capture_files([str(DATA / "broker" / "heartbeat.pcap")])[0].capture_id
    assert {r.heartbeat for r in conns.where(F.col("capture_id") == hb).collect()} == {2}
    forced = ingest_captures.capture_files([str(DATA / "broker" / "connection_forced.pcap")])[0].capture_id
    r = conns.where(F.col("capture_id") == forced).collect()
    assert any(x.close_code == 320 and x.amqp_closed_by == "server" for x in r)
    # The password never reaches a table. pika's fixtures log in as guest/guest, but for refused_login
    # (tools/fault_fixtures.py): guest with a wrong password, and a user without permissions.
    logins = [("guest", "guest"), ("guest", "not-the-password"), ("refused_login-noperm", "noperm")]
    start_ok = store.read("frames").where(
        (F.col("method_name") == "start-ok") & F.col("dialect").isin("0-8", "0-9", "0-9-1")
    ).select("arguments_json").collect()
    assert start_ok
    lengths = collections.Counter()
    for r in start_ok:
        length = re.search(r'"response":"<redacted len=(\d+)>"', r.arguments_json)
        assert length, r.arguments_json
        lengths[int(length.group(1))] += 1
        for user, password in logins:
            assert f"\0{user}\0{password}".encode().hex() not in r.arguments_json
            assert f"\\u0000{password}" not in r.arguments_json and f'"{password}"' not in r.arguments_json
    assert set(lengths) == {len(f"\0{u}\0{p}") for u, p in logins} and lengths[12] > 20  # 12: "\0guest\0guest"


@pytest.mark.tshark
def test_amqp10_connection_through_the_pipeline(ingested):
    """RabbitMQ 3.10 + python-qpid-proton: identities from the open/sasl frames, performatives as tshark counts them."""
    from pyspark.sql import functions as F

    _, store, _ = ingested
    path = str(DATA / "broker" / "amqp10_proton.pcap")
    cid = ingest_captures.capture_files([path])[0].capture_id
    conns = store.read("connections").where(F.col("capture_id") == cid).collect()
    assert [c.dialect for c in conns] == ["1.0"]
    c = conns[0]
    assert (c.sasl_mechanism, c.user, c.sasl_outcome) == ("PLAIN", "guest", "ok")
    assert c.client_container_id and c.server_container_id and c.server_product == "RabbitMQ"
    ours = (
        store.read("frames").where((F.col("capture_id") == cid) & (F.col("frame_type") == "amqp"))
        .groupBy("descriptor").count().collect()
    )
    codes = _tshark(path, "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "amqp", "-T", "fields",
                    "-e", "amqp.performative", "-E", "occurrence=a")
    theirs: dict[int, int] = {}
    for line in codes.split():
        for code in line.split(","):
            theirs[int(code, 0)] = theirs.get(int(code, 0), 0) + 1
    assert {r.descriptor: r["count"] for r in ours} == theirs


def test_no_password_of_any_fixture_reaches_a_table(ingested):
    """pika and proton fixtures log in as guest/guest (PLAIN); the 0-10 fixtures use the password s3cret."""
    import pyarrow as pa

    c, _, _ = ingested
    needles = [b"\x00guest\x00guest", b"s3cret"]
    texts = [n.hex() for n in needles] + ["s3cret", "\\u0000guest\\u0000guest"]
    for t in ("connections", "frames", "decode_errors", "captures"):
        table = DeltaTable(f"{c['lake.root']}/{t}").to_pyarrow_table()
        for col in table.column_names:
            typ = table.schema.field(col).type
            if pa.types.is_string(typ):
                blob = "\n".join(v for v in table.column(col).to_pylist() if v)
                assert not any(x in blob for x in texts), (t, col)
            elif pa.types.is_binary(typ):
                blob = b"\n".join(v for v in table.column(col).to_pylist() if v)
                assert not any(n in blob for n in needles), (t, col)
