"""Packets per second through TcpReassembler on one synthetic in-order flow.

Run: ``python -m tests.tcp.bench_reassembly [packets]`` from the project root.
Not a test: timings depend on the machine. The flow is a handshake, then
client data (200 B), server data (120 B) and pure ACKs in a 2:1:1 mix.
"""

from __future__ import annotations

import sys
import time

import pyarrow as pa

from amqplens.decode.capture.records import ACK, PACKET_COLUMNS, PACKET_SCHEMA, PSH, SYN, flow_key
from amqplens.decode.tcp import TcpReassembler

M32 = 0xFFFFFFFF


def synthetic_flow(packets: int, cols: dict[str, list] | None = None, cport: int = 40000) -> dict[str, list]:
    cip, sip, sport = "10.0.0.1", "10.0.0.2", 5672
    fk = flow_key(cip, cport, sip, sport)
    if cols is None:
        cols = {name: [] for name in PACKET_COLUMNS}
    cseq, sseq = 4_000_000_000, 17  # the client's sequence numbers wrap on the way

    def add(i, from_client, flags, seq, payload, ack):
        cols["capture_id"].append("bench")
        cols["record_offset"].append(24 + i * 300)
        cols["ts_us"].append(1_700_000_000_000_000 + i * 20)
        cols["ip_version"].append(4)
        cols["src_ip"].append(cip if from_client else sip)
        cols["src_port"].append(cport if from_client else sport)
        cols["dst_ip"].append(sip if from_client else cip)
        cols["dst_port"].append(sport if from_client else cport)
        cols["flow_key"].append(fk)
        cols["seq"].append(seq & M32)
        cols["ack"].append(ack & M32)
        cols["tcp_flags"].append(flags)
        cols["window"].append(65535)
        cols["wire_len"].append(66 + len(payload))
        cols["payload"].append(payload)
        cols["payload_truncated"].append(False)

    add(0, True, SYN, cseq, b"", 0)
    add(1, False, SYN | ACK, sseq, b"", cseq + 1)
    add(2, True, ACK, cseq + 1, b"", sseq + 1)
    cseq, sseq = cseq + 1, sseq + 1
    cdata, sdata = bytes(range(200)), bytes(120)
    for i in range(3, packets):
        kind = i % 4
        if kind in (0, 1):
            add(i, True, PSH | ACK, cseq, cdata, sseq)
            cseq += len(cdata)
        elif kind == 2:
            add(i, False, PSH | ACK, sseq, sdata, cseq)
            sseq += len(sdata)
        else:
            add(i, False, ACK, sseq, b"", cseq)
    return cols


class CountingConsumer:
    def __init__(self, info) -> None:
        self.bytes = 0

    def data(self, direction, offset, ts_us, data) -> None:
        self.bytes += len(data)

    def gap(self, direction, offset, length, ts_us) -> None:
        pass

    def close(self, connection) -> None:
        pass


def short_flows(flows: int, packets_each: int) -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in PACKET_COLUMNS}
    for i in range(flows):
        synthetic_flow(packets_each, cols, cport=10000 + i)
    return cols


def measure(label: str, batch, packets: int, factory=None, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        reassembler = TcpReassembler("bench", consumer_factory=factory)
        start = time.perf_counter()
        reassembler.feed_columns(batch)
        reassembler.finish()
        best = min(best, time.perf_counter() - start)
        for record in reassembler.drain_connections():
            assert record.missing_bytes_to_server == 0 and record.retransmitted_bytes_to_server == 0
    rate = packets / best
    print(f"{label:<44} {rate:>12,.0f} packets/s  ({best * 1e3:.0f} ms)")
    return rate


def main(packets: int = 200_000) -> None:
    cols = synthetic_flow(packets)
    batch = pa.RecordBatch.from_pydict(cols, schema=PACKET_SCHEMA)
    print(f"{packets:,} packets, one connection, in order")
    measure("dict of lists, no consumer", cols, packets)
    measure("dict of lists, counting consumer", cols, packets, CountingConsumer)
    measure("Arrow RecordBatch (with conversion), consumer", batch, packets, CountingConsumer)
    measure("pandas DataFrame (with conversion), consumer", batch.to_pandas(), packets, CountingConsumer)
    flows = packets // 20
    print(f"{flows:,} connections of 20 packets each")
    measure("dict of lists, counting consumer", short_flows(flows, 20), flows * 20, CountingConsumer)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
