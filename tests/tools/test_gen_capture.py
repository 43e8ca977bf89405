"""The capture generator (tools/gen_capture.py) against pika, dpkt and tshark.

The benchmark and the differential tests trust the generator's sidecar
(``<stem>.truth.json``); these tests make sure it tells the truth about a
small capture: pika's marshalling byte for byte, the packets as an
independent reader sees them, and what tshark finds in the file.
"""

from __future__ import annotations

import collections
import json
import random
import re
import shutil
import struct
import subprocess

import pytest

pika = pytest.importorskip("pika")
import pika.frame  # noqa: E402, F811  (rebinds pika: the module importorskip returned)
import pika.spec as spec  # noqa: E402

from tools import gen_capture  # noqa: E402
from tools.gen_capture import FrameFactory, generate, sidecar_path  # noqa: E402

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")

SIZE_MB = 1.0
CONNECTIONS = 12


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "bench.pcap"
    truth = generate(path, SIZE_MB, seed=11, connections=CONNECTIONS, large_fraction=0.01,
                     heartbeat_fraction=0.03)
    return path, truth


def _conn_key(ip_a, port_a, ip_b, port_b):
    return tuple(sorted([(ip_a, int(port_a)), (ip_b, int(port_b))]))


def _truth_by_key(truth):
    return {_conn_key(c["client_ip"], c["client_port"], c["server_ip"], c["server_port"]): c
            for c in truth["connections"]}


# -- frames: the cache is pika's marshalling ------------------------------------


def test_frame_factory_is_pika_marshalling():
    ff = FrameFactory()
    rng = random.Random(5)
    for _ in range(300):
        ch = rng.randrange(1, 9)
        tag = rng.getrandbits(rng.choice((8, 32, 64)))
        multiple, requeue, redelivered = (rng.random() < 0.5 for _ in range(3))
        ctag = "ctag%d.%032x" % (ch, rng.getrandbits(128))
        ex, rk = rng.choice(("", "bench.events")), rng.choice(("a.b", "orders.created.eu"))
        assert ff.ack(ch, tag, multiple) == pika.frame.Method(
            ch, spec.Basic.Ack(delivery_tag=tag, multiple=multiple)).marshal()
        assert ff.nack(ch, tag, multiple, requeue) == pika.frame.Method(
            ch, spec.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue)).marshal()
        assert ff.reject(ch, tag, requeue) == pika.frame.Method(
            ch, spec.Basic.Reject(delivery_tag=tag, requeue=requeue)).marshal()
        assert ff.deliver(ch, ctag, tag, redelivered, ex, rk) == pika.frame.Method(ch, spec.Basic.Deliver(
            consumer_tag=ctag, delivery_tag=tag, redelivered=redelivered, exchange=ex,
            routing_key=rk)).marshal()
        assert ff.publish(ch, ex, rk) == pika.frame.Method(
            ch, spec.Basic.Publish(exchange=ex, routing_key=rk)).marshal()
        variant = rng.randrange(len(gen_capture._PROPS_VARIANTS))
        size = rng.randrange(0, 300_000)
        mid = "%08x-%04x-%04x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 16, 16, 48))
        ts = rng.randrange(1_600_000_000, 1_800_000_000)
        assert ff.header(ch, variant, size, mid, ts) == pika.frame.Header(
            ch, size, FrameFactory.properties(variant, mid, ts)).marshal()
        frag = rng.randbytes(rng.randrange(0, 2000))
        assert ff.body(ch, memoryview(frag)) == pika.frame.Body(ch, frag).marshal()
    assert ff.heartbeat == pika.frame.Heartbeat().marshal()


# -- the file -------------------------------------------------------------------


def test_deterministic_for_a_seed(tmp_path):
    a, b, c = tmp_path / "a.pcap", tmp_path / "b.pcap", tmp_path / "c.pcap"
    ta = generate(a, 0.3, seed=3, connections=6)
    tb = generate(b, 0.3, seed=3, connections=6)
    generate(c, 0.3, seed=4, connections=6)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert ta["methods"] == tb["methods"]
    assert json.loads(sidecar_path(a).read_text())["connections"] == ta["connections"]


def test_size_and_sidecar(capture):
    path, truth = capture
    size = path.stat().st_size
    assert size == truth["file_bytes"]
    assert SIZE_MB * 1e6 * 0.97 <= size <= SIZE_MB * 1e6 * 1.05
    assert sidecar_path(path).exists() and json.loads(sidecar_path(path).read_text()) == json.loads(
        json.dumps(truth))
    assert len(truth["connections"]) == CONNECTIONS
    assert all(c["ended"] == "fin" for c in truth["connections"])
    names = {m["name"] for m in truth["methods"]}
    for must in ("connection.start", "connection.start-ok", "connection.tune", "connection.tune-ok",
                 "connection.open", "connection.open-ok", "channel.open", "confirm.select", "basic.qos",
                 "basic.consume", "basic.publish", "basic.deliver", "basic.ack", "connection.close",
                 "connection.close-ok"):
        assert must in names, must
    fbt = truth["frames_by_type"]
    assert fbt["protocol_header"] == CONNECTIONS
    assert fbt["body"] > fbt["header"] > 0  # large bodies span several body frames
    assert fbt["heartbeat"] > 0


def _read_pcap(path):
    """Records of a classic little-endian Ethernet pcap, read without the generator's code."""
    data = path.read_bytes()
    magic, _, _, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", data, 0)
    assert magic == 0xA1B2C3D4 and linktype == 1
    off = 24
    while off < len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, off)
        assert incl == orig <= snaplen
        yield sec * 1_000_000 + usec, data[off + 16: off + 16 + incl]
        off += 16 + incl
    assert off == len(data)


def test_packets_as_an_independent_reader_sees_them(capture):
    dpkt = pytest.importorskip("dpkt")
    path, truth = capture
    stats = collections.defaultdict(lambda: [0, 0, 0])  # packets, payload, wire per (src, dst)
    last = -1
    n = 0
    mss_seen = 0
    for ts, raw in _read_pcap(path):
        assert ts > last  # strictly increasing timestamps
        last = ts
        n += 1
        eth = dpkt.ethernet.Ethernet(raw)
        ip = eth.data
        assert isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP)
        hdr = bytes(raw[14:34])
        words = struct.unpack(">10H", hdr)
        s = sum(words)
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        assert s == 0xFFFF  # IPv4 header checksum is valid
        tcp = ip.data
        assert len(tcp.data) <= gen_capture.MSS
        mss_seen = max(mss_seen, len(tcp.data))
        key = ((dpkt.utils.inet_to_str(ip.src), tcp.sport), (dpkt.utils.inet_to_str(ip.dst), tcp.dport))
        st = stats[key]
        st[0] += 1
        st[1] += len(tcp.data)
        st[2] += len(raw)
    assert n == truth["packets"]
    assert mss_seen == gen_capture.MSS  # large frames really are cut at the MSS
    for c in truth["connections"]:
        cli, srv = (c["client_ip"], c["client_port"]), (c["server_ip"], c["server_port"])
        for key, d in (((cli, srv), c["client_to_server"]), ((srv, cli), c["server_to_client"])):
            assert stats.pop(key) == [d["packets"], d["payload_bytes"], d["wire_bytes"]], key
    assert not stats


# -- tshark agrees with the sidecar ------------------------------------------------

_CONV = re.compile(
    r"^(\S+):(\d+)\s+<->\s+(\S+):(\d+)\s+(\d+)\s+([\d,]+) (bytes|kB|MB|GB)\s+(\d+)\s+([\d,]+) (bytes|kB|MB|GB)\s+"
)
_UNIT = {"bytes": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}


def _tshark(*args):
    return subprocess.run([TSHARK, *args], capture_output=True, text=True, check=True).stdout


@needs_tshark
@pytest.mark.tshark
def test_tshark_conversations(capture):
    path, truth = capture
    want = _truth_by_key(truth)
    seen = set()
    for line in _tshark("-r", str(path), "-q", "-z", "conv,tcp").splitlines():
        m = _CONV.match(line)
        if not m:
            continue
        a_ip, a_port, b_ip, b_port = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        key = _conn_key(a_ip, a_port, b_ip, b_port)
        c = want[key]
        seen.add(key)
        a_is_client = (a_ip, a_port) == (c["client_ip"], c["client_port"])
        a_to_b, b_to_a = ((c["client_to_server"], c["server_to_client"]) if a_is_client
                          else (c["server_to_client"], c["client_to_server"]))
        # tshark: "<-" is B -> A, "->" is A -> B; bytes are whole frames, truncated to kB above 10 kB.
        for frames, value, unit, d in ((m.group(5), m.group(6), m.group(7), b_to_a),
                                       (m.group(8), m.group(9), m.group(10), a_to_b)):
            assert int(frames) == d["packets"], (key, line)
            scale = _UNIT[unit]
            shown = int(value.replace(",", "")) * scale
            if scale == 1:
                assert shown == d["wire_bytes"], (key, line)
            else:
                assert 0 <= d["wire_bytes"] - shown < scale, (key, line)
    assert seen == set(want)


@needs_tshark
@pytest.mark.tshark
def test_tshark_bytes_per_direction(capture):
    """Exact payload and wire bytes per direction (conv,tcp rounds its byte counts)."""
    path, truth = capture
    got = collections.defaultdict(lambda: [0, 0, 0])
    for line in _tshark("-r", str(path), "-T", "fields", "-e", "ip.src", "-e", "tcp.srcport",
                        "-e", "ip.dst", "-e", "tcp.dstport", "-e", "tcp.len", "-e", "frame.len").splitlines():
        s, sp, d, dp, tl, fl = line.split("\t")
        g = got[((s, int(sp)), (d, int(dp)))]
        g[0] += 1
        g[1] += int(tl)
        g[2] += int(fl)
    for c in truth["connections"]:
        cli, srv = (c["client_ip"], c["client_port"]), (c["server_ip"], c["server_port"])
        for key, d in (((cli, srv), c["client_to_server"]), ((srv, cli), c["server_to_client"])):
            assert got.pop(key) == [d["packets"], d["payload_bytes"], d["wire_bytes"]], key
    assert not got


@needs_tshark
@pytest.mark.tshark
def test_tshark_method_and_frame_counts(capture):
    path, truth = capture
    out = _tshark("-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "amqp", "-T", "fields",
                  "-e", "amqp.method.class", "-e", "amqp.method.method", "-e", "amqp.type",
                  "-E", "occurrence=a")
    methods = collections.Counter()
    types = collections.Counter()
    for line in out.splitlines():
        classes, meths, ftypes = line.split("\t")
        if classes:
            cs, ms = classes.split(","), meths.split(",")
            assert len(cs) == len(ms)
            methods.update((int(c), int(m)) for c, m in zip(cs, ms))
        if ftypes:
            types.update(int(t) for t in ftypes.split(","))
    want = {(m["class_id"], m["method_id"]): m["count"] for m in truth["methods"]}
    assert dict(methods) == want
    fbt = truth["frames_by_type"]
    want_types = {1: fbt["method"], 2: fbt["header"], 3: fbt["body"], 8: fbt["heartbeat"]}
    assert dict(types) == {k: v for k, v in want_types.items() if v}
    assert sum(types.values()) == truth["frames_total"]


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli.pcap"
    assert gen_capture.main([str(out), "--size-mb", "0.2", "--connections", "3", "--seed", "2"]) == 0
    truth = json.loads(sidecar_path(out).read_text())
    assert truth["file_bytes"] == out.stat().st_size
    assert truth["generator"]["seed"] == 2 and len(truth["connections"]) == 3
