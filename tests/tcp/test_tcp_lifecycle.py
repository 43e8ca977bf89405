"""SYN/FIN/RST, port reuse, connection ids, counters and input shapes."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from amqplens.decode.capture.records import PACKET_SCHEMA
from amqplens.decode.tcp import TcpReassembler, connection_id

from .tcp_packets import CLIENT, SERVER, handshake, packet_columns, run, split_columns

HEADER = b"AMQP\x00\x00\x09\x01"


def conversation(t0: int = 0, client: str = CLIENT, c_isn: int = 1000, s_isn: int = 5000):
    """Handshake, a request and a response, then a FIN from the client."""
    c, s = c_isn + 1, s_isn + 1
    return handshake(t0, client, SERVER, c_isn, s_isn) + [
        (t0 + 300, client, SERVER, "PA", c, HEADER),
        (t0 + 400, SERVER, client, "PA", s, b"start!"),
        (t0 + 500, client, SERVER, "A", c + 8, b""),
        (t0 + 600, client, SERVER, "FA", c + 8, b""),
        (t0 + 700, SERVER, client, "FA", s + 6, b""),
        (t0 + 800, client, SERVER, "A", c + 9, b""),
    ]


def test_fin_close_by_the_first_fin_sender():
    rows = conversation()
    rows[-3], rows[-2] = rows[-2], rows[-3]  # the server's FIN comes first
    rows[-3], rows[-2] = (600, SERVER, CLIENT, "FA", 5007, b""), (700, CLIENT, SERVER, "FA", 1009, b"")
    rec, consumer = run(rows).only()
    assert rec.end_reason == "fin" and rec.closed_by == "server"
    assert (rec.start_ts_us, rec.end_ts_us) == (0, 800)
    assert consumer.assembled("to_server") == HEADER
    assert consumer.assembled("to_client") == b"start!"
    assert rec.bytes_to_server == 8 and rec.bytes_to_client == 6


def test_rst_close_by_its_sender():
    rows = conversation()[:5] + [(600, SERVER, CLIENT, "R", 5007, b"reset reason")]
    rec, consumer = run(rows).only()
    assert rec.end_reason == "rst" and rec.closed_by == "server"
    assert consumer.assembled("to_client") == b"start!"  # an RST's payload is not stream data
    assert rec.packets_to_client == 3


def test_open_connection_ends_at_capture_end():
    rec, _ = run(conversation()[:5]).only()
    assert rec.end_reason == "capture_end" and rec.closed_by is None


def test_handshake_rtt_from_syn_to_the_final_ack():
    rec, _ = run(conversation(t0=1_000)).only()
    assert rec.syn_seen
    assert rec.handshake_rtt_us == 250


def test_no_rtt_when_the_final_ack_is_missing():
    rows = conversation()
    del rows[2]  # the client's ACK of the SYN/ACK; its next packet carries data
    rows[2] = (300, CLIENT, SERVER, "PA", 1001, HEADER, {"ack": 5001})
    rec, _ = run(rows).only()
    assert rec.handshake_rtt_us == 300  # the data packet is the handshake's ACK
    rows[2] = (300, CLIENT, SERVER, "PA", 1001, HEADER, {"ack": 4242})
    rec, _ = run(rows).only()
    assert rec.handshake_rtt_us is None


def test_syn_retransmission_is_the_same_connection():
    rows = [(0, CLIENT, SERVER, "S", 1000, b"")] + conversation(t0=1_000_000)
    rec, _ = run(rows).only()
    assert rec.start_ts_us == 0
    assert rec.handshake_rtt_us == 1_000_250  # from the first SYN
    assert rec.packets_to_server == 7


def test_port_reuse_after_fin_starts_a_new_connection():
    rows = conversation(0) + conversation(10_000, c_isn=777_000, s_isn=888_000)
    result = run(rows)
    first, second = result.connections
    assert first.connection_id != second.connection_id
    assert (first.start_ts_us, first.end_ts_us, first.end_reason) == (0, 800, "fin")
    assert (second.start_ts_us, second.end_reason) == (10_000, "fin")
    for rec in (first, second):
        assert rec.bytes_to_server == 8 and rec.packets_to_server == 6 and rec.packets_to_client == 3
        assert result.consumers[rec.connection_id].assembled("to_server") == HEADER
    assert second.handshake_rtt_us == 250


def test_port_reuse_after_rst():
    rows = conversation(0)[:5] + [(550, CLIENT, SERVER, "R", 1009, b"")] + conversation(10_000, c_isn=9)
    first, second = run(rows).connections
    assert first.end_reason == "rst" and first.closed_by == "client"
    assert second.start_ts_us == 10_000


def test_port_reuse_after_a_long_idle():
    rows = conversation(0)[:5] + conversation(120_000_000, c_isn=424242)
    result = run(rows, reuse_idle_us=60_000_000)
    first, second = result.connections
    assert first.end_reason == "port_reuse" and first.closed_by is None
    assert second.end_reason == "fin"


def test_new_syn_on_a_busy_open_connection_is_not_reuse():
    rows = conversation(0)[:5] + [(600, CLIENT, SERVER, "S", 31337, b"")]
    result = run(rows)
    rec, _ = result.only()
    assert rec.packets_to_server == 4


def test_syn_in_the_middle_of_a_mid_stream_connection_changes_nothing():
    rows = [
        (10, CLIENT, SERVER, "PA", 70_000, b"abc"),
        (20, SERVER, CLIENT, "PA", 90_000, b"def"),
        (30, CLIENT, SERVER, "S", 12345, b""),
        (40, SERVER, CLIENT, "SA", 54321, b""),
        (50, CLIENT, SERVER, "PA", 70_003, b"ghi"),
    ]
    rec, consumer = run(rows).only()
    assert not rec.syn_seen and rec.handshake_rtt_us is None
    assert consumer.assembled("to_server") == b"abcghi"


def test_stray_packets_before_a_syn_do_not_swallow_the_connection():
    rows = [(0, SERVER, CLIENT, "A", 99, b"")] + conversation(100)
    result = run(rows)
    stray, real = result.connections
    assert stray.end_reason == "port_reuse" and stray.packets_to_client == 1
    assert real.syn_seen and real.bytes_to_server == 8


def test_connection_id_is_deterministic_across_processes():
    expected = connection_id("cap", "10.0.0.1", 40000, "10.0.0.2", 5672, 0)
    assert len(expected) == 32 and int(expected, 16) >= 0
    rec, _ = run(conversation(0)).only()
    assert rec.connection_id == expected
    code = (
        "from amqplens.decode.tcp import connection_id as f;"
        "print(f('cap', '10.0.0.1', 40000, '10.0.0.2', 5672, 0))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": "."},
        )  # fmt: skip
        assert out.stdout.strip() == expected
    assert connection_id("other", "10.0.0.1", 40000, "10.0.0.2", 5672, 0) != expected
    assert connection_id("cap", "10.0.0.1", 40000, "10.0.0.2", 5672, 1) != expected


def test_packets_and_wire_bytes_count_every_packet_per_direction():
    rows = conversation()
    rows.insert(5, (450, CLIENT, SERVER, "PA", 1001, HEADER))  # a retransmission counts too
    rec, _ = run(rows).only()
    assert (rec.packets_to_server, rec.packets_to_client) == (7, 3)  # pure ACKs included
    assert rec.wire_bytes_to_server == 7 * 54 + 2 * len(HEADER)
    assert rec.wire_bytes_to_client == 3 * 54 + 6
    assert rec.retransmitted_bytes_to_server == 8


def test_ipv6_endpoints():
    c, s = "[2001:db8::1]:40000", "[2001:db8::2]:5672"
    rows = handshake(0, c, s) + [(300, c, s, "PA", 1001, HEADER)]
    rec, _ = run(rows).only()
    assert rec.ip_version == 6 and rec.client_ip == "2001:db8::1" and rec.server_ip == "2001:db8::2"


def test_flows_finish_when_the_flow_key_changes():
    rows = conversation(0)
    rows += conversation(0, client="10.0.0.7:40000") + conversation(0, client="10.0.0.8:40000")
    reassembler = TcpReassembler("cap")
    cols = packet_columns(rows)
    first, rest = split_columns(cols, 9)[0], {k: v[9:] for k, v in cols.items()}
    reassembler.feed_columns(first)
    assert reassembler.drain_connections() == []  # the first flow may still continue
    reassembler.feed_columns(rest)
    done = reassembler.drain_connections()
    assert [r.client_ip for r in done] == ["10.0.0.1", "10.0.0.7"]
    reassembler.finish()
    assert [r.client_ip for r in reassembler.drain_connections()] == ["10.0.0.8"]
    assert reassembler.drain_connections() == []
    assert reassembler.stats.flows == 3 and reassembler.stats.packets == len(rows)


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_batch_boundaries_do_not_matter(batch_size):
    rows = conversation(0) + conversation(10_000, c_isn=31337)
    whole = run(rows)
    split = run(rows, batch_size=batch_size)
    assert split.connections == whole.connections
    assert split.gaps == whole.gaps
    for cid, consumer in whole.consumers.items():
        assert split.consumers[cid].events == consumer.events


def _records(batch) -> list:
    reassembler = TcpReassembler("cap")
    reassembler.feed_columns(batch)
    reassembler.finish()
    return reassembler.drain_connections()


def test_arrow_and_pandas_batches():
    cols = packet_columns(conversation(0))
    expected = _records(cols)
    batch = pa.RecordBatch.from_pydict(cols, schema=PACKET_SCHEMA)
    assert _records(batch) == expected
    assert _records(pa.Table.from_batches([batch])) == expected
    assert _records(batch.to_pandas()) == expected
    assert _records({k: tuple(v) for k, v in cols.items()}) == expected


def test_without_consumers_records_and_gaps_still_come_out():
    rows = conversation(0)[:3] + [(300, CLIENT, SERVER, "PA", 1011, b"late")]
    cols = packet_columns(rows)
    for factory in (None, lambda info: None):
        reassembler = TcpReassembler("cap", consumer_factory=factory)
        reassembler.feed_columns(cols)
        reassembler.finish()
        (rec,) = reassembler.drain_connections()
        (gap,) = reassembler.drain_gaps()
        assert (gap.connection_id, gap.offset, gap.length) == (rec.connection_id, 0, 10)
        assert rec.bytes_to_server == 14


def test_packets_of_a_colliding_flow_key_are_counted_not_mixed_in():
    rows = conversation(0)[:5]
    key = packet_columns(rows)["flow_key"][0]
    rows.insert(4, (350, "10.9.9.9:1", "10.9.9.8:2", "PA", 1, b"intruder", {"flow_key": key}))
    result = run(rows)
    rec, consumer = result.only()
    assert result.stats.foreign_packets == 1
    assert consumer.assembled("to_server") == HEADER
