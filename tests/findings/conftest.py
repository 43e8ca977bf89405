"""One lake for the findings tests: the real-broker captures whose scenarios caused each condition on purpose, their
broker logs, an undecrypted TLS capture and a copy of one capture with a packet cut out, through every stage up to
findings, once per session (in-process, on the shared Spark session)."""

from __future__ import annotations

import struct

import pytest

from amqplens.jobs import findings, ingest_captures, ingest_logs, lifecycle, metrics
from amqplens.lake.store import TableStore
from tests.conftest import DATA
from tests.e2e.hostile_captures import records, with_records
from tests.findings.spec_capture import channel_flow_pcap

BROKER = DATA / "broker"
# the scenarios: a condition caused on purpose (tests/data/broker/README.md), or clean traffic
SCENARIOS = ("connection_blocked", "channel_error", "connection_forced", "mandatory_return", "nack_reject", "amqp10_rich",
             "heartbeat", "publish_confirms", "consume_prefetch_ack", "slow_consumer", "requeue_loop", "publish_nacked",
             "refused_login", "heartbeat_timeout", "unsettled_at_end", "consumer_cancelled", "churn", "clean_traffic",
             "amqp10_modified", "amqp10_credit_starved", "channel_flow")
LOGS = ("rabbitmq.log", "heartbeat_timeout.rabbitmq.log")  # the memory alarm; the missed heartbeats
GAP_SOURCE = "mandatory_return"


def tcp_payload(packet: bytes) -> int:
    """TCP payload bytes of an Ethernet/IPv4 packet (what tcpdump -i lo writes)."""
    ip = packet[14:]
    ihl, total = (ip[0] & 0x0F) * 4, struct.unpack_from(">H", ip, 2)[0]
    return total - ihl - (ip[ihl + 12] >> 4) * 4


def cut_copy(src, dst):
    """``src`` without its largest packet from the broker (the basic.return and its content, in mandatory_return):
    a capture with a gap in one direction. Returns (the copy, the payload bytes cut out)."""
    recs = records(src.read_bytes())
    from_broker = [i for i, r in enumerate(recs) if struct.unpack_from(">H", r[2], 14 + 20)[0] == 5672 and tcp_payload(r[2]) > 0]
    cut = max(from_broker[len(from_broker) // 3:], key=lambda i: tcp_payload(recs[i][2]))
    dst.write_bytes(with_records(src.read_bytes(), recs[:cut] + recs[cut + 1:]))
    return dst, tcp_payload(recs[cut][2])


@pytest.fixture(scope="session")
def findings_lake(spark, conf, tmp_path_factory):
    """(conf, store, {scenario: capture_id}, bytes cut from the gap copy); the gap copy is scenario ``gap``, the
    undecrypted TLS capture ``tls12``, the capture built from the 0-9-1 spec (tests/findings/spec_capture.py)
    ``channel_flow_spec``."""
    lake = tmp_path_factory.mktemp("findings_lake")
    c = conf.with_overrides(lake__root=str(lake))
    gap, cut = cut_copy(BROKER / f"{GAP_SOURCE}.pcap", lake.parent / "gap.pcap")
    spec = lake.parent / "channel_flow_spec.pcap"
    spec.write_bytes(channel_flow_pcap())
    paths = {**{s: BROKER / f"{s}.pcap" for s in SCENARIOS}, "tls12": DATA / "tls" / "tls12.pcap", "gap": gap,
             "channel_flow_spec": spec}
    ingest_captures.run(spark, c, [str(p) for p in paths.values()], run_id="f")
    ingest_logs.run(spark, c, [str(BROKER / name) for name in LOGS], run_id="f")
    lifecycle.run(spark, c, run_id="f")
    metrics.run(spark, c, run_id="f")
    findings.run(spark, c, run_id="f")
    ids = {s: ingest_captures.capture_files([str(p)])[0].capture_id for s, p in paths.items()}
    return c, TableStore(spark, str(lake)), ids, cut
