"""The tshark oracle helper reads tshark right; checked against tshark's own
per-packet text and an independent dpkt count, and on synthetic port reuse."""

from __future__ import annotations

import collections
import socket
import subprocess
from pathlib import Path

import dpkt
import pytest

from tests.oracles.tshark import TSHARK, tshark_conversations, tshark_streams

pytestmark = [pytest.mark.tshark,
              pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")]

ROOT = Path(__file__).resolve().parents[2]
NAME = "deepflow_amqp091_consume_publish.pcap"
PUBLIC = next((p for p in (ROOT / "tests/data/public" / NAME,
                           ROOT.parent / "shared/captures/public" / NAME) if p.exists()), None)


def dpkt_connections(path) -> dict[tuple, dict]:
    """Per (A, B) endpoint pair, A the first sender: frames, bytes, first ts (us)."""
    conns: dict[tuple, dict] = {}
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            family = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
            src = (socket.inet_ntop(family, ip.src), tcp.sport)
            dst = (socket.inet_ntop(family, ip.dst), tcp.dport)
            key = (dst, src) if (dst, src) in conns else (src, dst)
            c = conns.setdefault(key, collections.Counter(first_us=round(ts * 1e6)))
            way = "ab" if src == key[0] else "ba"
            c.update({f"frames_{way}": 1, f"bytes_{way}": len(buf)})
    return conns


@pytest.mark.skipif(PUBLIC is None, reason=f"{NAME} not found")
@pytest.mark.parametrize("helper", [tshark_conversations, tshark_streams])
def test_public_capture(helper):
    rows = helper(PUBLIC)
    raw = subprocess.run([TSHARK, "-n", "-r", str(PUBLIC), "-T", "fields", "-e", "tcp.stream"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(rows) == len(set(raw)) == 4
    assert sum(r["frames"] for r in rows) == len(raw) == 62

    expected = dpkt_connections(PUBLIC)
    assert len(expected) == 4  # no port reuse here: a 4-tuple is a connection
    for r in rows:
        want = expected[((r["address_a"], r["port_a"]), (r["address_b"], r["port_b"]))]
        assert (r["frames_ab"], r["frames_ba"]) == (want["frames_ab"], want["frames_ba"])
        assert (r["bytes_ab"], r["bytes_ba"]) == (want["bytes_ab"], want["bytes_ba"])  # all < 10 kB
        assert r["abs_start_us"] == want["first_us"]


def _segment(src, dst, seq, ack, flags, payload=b"") -> bytes:
    tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=seq, ack=ack, flags=flags, win=65535,
                       data=payload)
    ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=6, data=tcp)
    ip.len = len(ip)
    return bytes(dpkt.ethernet.Ethernet(src=b"\0" * 6, dst=b"\0" * 6, data=ip))


def _connection(client, server, t, isn, ending, payload=b"AMQP\x00\x00\x09\x01"):
    A, S, F, R = dpkt.tcp.TH_ACK, dpkt.tcp.TH_SYN, dpkt.tcp.TH_FIN, dpkt.tcp.TH_RST
    c, s = isn, isn * 7
    pkts = [(client, server, c, 0, S), (server, client, s, c + 1, S | A),
            (client, server, c + 1, s + 1, A), (client, server, c + 1, s + 1, A, payload),
            (server, client, s + 1, c + 1 + len(payload), A)]
    c += 1 + len(payload)
    if ending == "fin":
        pkts += [(client, server, c, s + 1, F | A), (server, client, s + 1, c + 1, F | A),
                 (client, server, c + 1, s + 2, A)]
    elif ending == "rst":
        pkts += [(client, server, c, s + 1, R | A)]
    return [(t + i / 1000, _segment(*p)) for i, p in enumerate(pkts)]


@pytest.mark.parametrize("ending", ["fin", "rst", "none"])
def test_port_reuse_splits_conversations(tmp_path, ending):
    client, server = ("10.0.0.1", 40000), ("10.0.0.2", 5672)
    first = _connection(client, server, 1000.0, 1000, ending)
    # the client sends 20999 bytes in all: tshark prints "20 kB" (truncated, not rounded)
    headers = 54 * {"fin": 5, "rst": 4, "none": 3}[ending]
    second = _connection(client, server, 1010.0, 900000, ending, payload=b"x" * (20999 - headers))
    path = tmp_path / "reuse.pcap"
    with open(path, "wb") as f:
        writer = dpkt.pcap.Writer(f)
        for ts, frame in first + second:
            writer.writepkt(frame, ts=ts)

    convs = sorted(tshark_conversations(path), key=lambda r: r["rel_start"])
    streams = tshark_streams(path)
    assert [r["frames"] for r in convs] == [r["frames"] for r in streams] == [len(first), len(second)]
    assert [r["rel_start"] for r in convs] == [r["rel_start"] for r in streams] == [0.0, 10.0]
    assert all((r["address_a"], r["port_a"]) == client for r in convs + streams)

    assert streams[1]["bytes_ab"] == 20999
    assert (convs[1]["bytes_ab"], convs[1]["bytes_ab_max"]) == (20000, 20999)
