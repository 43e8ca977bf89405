"""Hostile capture files for the e2e test, and the unmutated reference decode to compare them with.

Mutations of the fixtures (truncation, payload bit flips, duplicated and
reordered records) and synthetic captures (a 4 GiB frame claim, field tables
nested 10,000 deep, a 1.0 list claiming 2^32 elements, HTTP and TLS on 5672),
each synthetic file with a clean 0-9-1 control connection beside the hostile one.
"""

from __future__ import annotations

import hashlib
import pathlib
import random
import struct

import pyarrow as pa

from amqplens.decode import pipeline
from tests.capture.capture_builders import pcap_bytes
from tests.conftest import DATA
from tests.v0_9_1 import conversation as conv091
from tests.v0_9_1.encoder import Encoder
from tests.v1_0 import conversation as conv10
from tests.v1_0 import encoder as E10
from tests.v1_0.pcap_writer import connection_pcap

E091 = Encoder()
PAYLOAD_FROM = 66  # Ethernet + IPv4 + TCP headers with no options are 54 bytes; flips past this never change a flow
FRAME_KEY = ("connection_id", "direction", "stream_offset")  # connection_id becomes the connection's endpoints
FRAME_VALUES = ("size", "frame_type", "channel", "method_name", "performative", "arguments_json", "properties_json",
                "decode_error", "body_sha256")  # fmt: skip


FLIPPED = ("broker/consume_prefetch_ack.pcap", "broker/amqp10_rich.pcap", "v0_10/large_body.pcap", "demo/demo.pcap")
REORDERED = ("broker/publish_confirms.pcap", "broker/amqp10_rich.pcap")


def capture_id(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Case:
    def __init__(self, kind: str, data: bytes, original: bytes, **extra) -> None:
        self.kind, self.data, self.original, self.extra = kind, data, original, extra
        self.capture_id = capture_id(data)


def cases(fixtures: list[str]) -> dict[str, Case]:
    """The hostile files (name -> case): each of ``fixtures`` cut at a random offset in its first half, bit flips in
    ``FLIPPED``, records duplicated and reordered in ``REORDERED``, and the synthetic ones (each with a clean
    0-9-1 control connection beside the hostile one). Seeded: the same files every time."""
    rnd = random.Random(11)
    out = {}
    for path in map(pathlib.Path, fixtures):
        data = path.read_bytes()
        cut = rnd.randrange(len(data) // 8, len(data) // 2)  # the first half: enough to cut every fixture mid-conversation
        out[f"cut_{path.parent.name}_{path.name}"] = Case("truncated", data[:cut], data, cut=cut)
    for rel in FLIPPED:
        data = (DATA / rel).read_bytes()
        flipped, t_first, t_last = flip_bits(data, rnd, 8)
        out[f"flip_{rel.replace('/', '_')}"] = Case("flipped", flipped, data, t_first=t_first, t_last=t_last)
    for rel in REORDERED:
        data = (DATA / rel).read_bytes()
        out[f"reorder_{rel.replace('/', '_')}"] = Case("reordered", duplicate_and_reorder(data, rnd, 12), data)
    control = control_turns()
    synthetic = {
        "frame_4gib.pcap": amqp091_with(FRAME_4GIB),
        "nested_10000.pcap": amqp091_with(nested_table_declare(10_000)),
        "amqp10_list_2_32.pcap": amqp10_with_list_claim(),
        "http_5672.pcap": (HTTP, []),
        "tls_5672.pcap": (TLS, []),
    }
    for name, (hostile, twin) in synthetic.items():
        out[name] = Case("synthetic", two_connections(hostile, control), two_connections(twin, control))
    return out


def write_cases(cases: dict[str, Case], folder: pathlib.Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, case in cases.items():
        (folder / (name if name.endswith((".pcap", ".pcapng")) else name + ".pcap")).write_bytes(case.data)


# ----------------------------------------------------------------- pcap records


def records(data: bytes) -> list[list]:
    """``[ts_sec, ts_us, packet]`` of a little-endian microsecond pcap (what connection_pcap and tcpdump write)."""
    assert data[:4] == b"\xd4\xc3\xb2\xa1"
    pos, out = 24, []
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, pos)
        out.append([sec, frac, data[pos + 16 : pos + 16 + caplen]])
        pos += 16 + caplen
    return out


def with_records(original: bytes, recs: list) -> bytes:
    """The pcap ``original`` (its header, link type) with ``recs`` as its records."""
    linktype = struct.unpack_from("<I", original, 20)[0]
    return pcap_bytes([tuple(r) for r in recs], linktype=linktype)


def ts_of(rec) -> int:
    return rec[0] * 1_000_000 + rec[1]


def flip_bits(data: bytes, rnd: random.Random, count: int) -> tuple[bytes, int, int]:
    """``count`` bit flips in the TCP payloads of records in the middle third; returns the pcap and the ts span flipped."""
    recs = records(data)
    third = len(recs) // 3
    candidates = [i for i in range(third, 2 * third) if len(recs[i][2]) > PAYLOAD_FROM]
    chosen = sorted(rnd.sample(candidates, min(count, len(candidates))))
    for i in chosen:
        packet = bytearray(recs[i][2])
        packet[rnd.randrange(PAYLOAD_FROM, len(packet))] ^= 1 << rnd.randrange(8)
        recs[i][2] = bytes(packet)
    return with_records(data, recs), ts_of(recs[chosen[0]]), ts_of(recs[chosen[-1]])


def duplicate_and_reorder(data: bytes, rnd: random.Random, count: int) -> bytes:
    """``count`` records sent twice, and ``count`` neighbour pairs whose packets swap places (their timestamps stay)."""
    recs = records(data)
    for _ in range(count):
        i = rnd.randrange(3, len(recs) - 2)
        recs[i][2], recs[i + 1][2] = recs[i + 1][2], recs[i][2]
    for _ in range(count):
        i = rnd.randrange(3, len(recs))
        recs.insert(i + 1, list(recs[i]))
    return with_records(data, recs)


# ----------------------------------------------------------------- synthetic connections


def two_connections(hostile_turns: list, control_turns: list) -> bytes:
    """The hostile connection (client port 40001) and a control connection (40002) interleaved in one pcap."""
    a = records(connection_pcap(hostile_turns, client=("10.1.0.1", 40001)))
    b = records(connection_pcap(control_turns, client=("10.1.0.1", 40002)))
    for r in b:
        r[1] += 500  # half a packet interval later: the two interleave
    return with_records(connection_pcap([]), sorted(a + b, key=ts_of))


def control_turns() -> list:
    c2s, s2c = conv091.conversation("PLAIN")
    return [("to_server", c2s), ("to_client", s2c)]


def amqp091_with(injected: bytes) -> tuple[list, list]:
    """The 0-9-1 conversation with ``injected`` after the protocol header, and without it (the twin)."""
    c2s, s2c = conv091.conversation("PLAIN")
    head = E091.protocol_header()
    assert c2s.startswith(head)
    return ([("to_server", head + injected + c2s[len(head):]), ("to_client", s2c)],
            [("to_server", c2s), ("to_client", s2c)])  # fmt: skip


def nested_table_declare(depth: int) -> bytes:
    body = b""
    for _ in range(depth):
        body = b"\x01nF" + struct.pack(">I", len(body)) + body
    table = struct.pack(">I", len(body)) + body
    return E091.frame(1, 1, struct.pack(">HH", 50, 10) + b"\0\0" + b"\x01q" + b"\x00" + table)


FRAME_4GIB = struct.pack(">BHI", 1, 1, 0xFFFFFFFF) + b"\0" * 64


LIST_CLAIM = E10.frame(b"\x00\x53\x13\xd0" + struct.pack(">II", 4, 0xFFFFFFFF))  # a flow whose list32 claims 2^32 - 1 fields


def amqp10_with_list_claim() -> tuple[list, list]:
    """The 1.0 conversation with ``LIST_CLAIM`` after the AMQP header."""
    c2s, s2c = conv10.conversation()
    at = c2s.index(E10.AMQP_HEADER) + len(E10.AMQP_HEADER)
    return ([("to_server", c2s[:at] + LIST_CLAIM + c2s[at:]), ("to_client", s2c)],
            [("to_server", c2s), ("to_client", s2c)])  # fmt: skip


HTTP = [("to_server", b"GET /api/overview HTTP/1.1\r\nHost: broker:5672\r\nAccept: */*\r\n\r\n"),
        ("to_client", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")]  # fmt: skip
# a TLS 1.2 ClientHello record header and the start of its body; the server answers with a ServerHello header
TLS = [("to_server", b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + bytes(range(32)) + b"\x00" * 160),
       ("to_client", b"\x16\x03\x03\x00\x4a\x02\x00\x00\x46\x03\x03" + bytes(32) + b"\x00" * 42)]  # fmt: skip


# ----------------------------------------------------------------- the reference decode


def reference(data: bytes, as_capture_id: str, options: pipeline.Options, tmp_path) -> dict:
    """Rows of ``data`` through the pipeline's batch functions without Spark, under ``as_capture_id``.

    Decoding the unmutated bytes under the mutated file's capture id gives the
    same connection ids wherever the first packet of a connection is intact.
    """
    path = tmp_path / f"ref-{as_capture_id[:12]}.pcap"
    path.write_bytes(data)
    split = pa.RecordBatch.from_pylist([{"capture_id": as_capture_id, "path": str(path), "start": 0, "end": len(data), "split_index": 0}],
                                       schema=pipeline.SPLITS_SCHEMA)  # fmt: skip
    table = pa.Table.from_batches(list(pipeline.read_splits([split], options)), schema=pipeline.PACKETS_OUT_SCHEMA)
    table = table.sort_by([("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")])
    out = {"frame": [], "connection": [], "error": [], "facts": []}
    for batch in pipeline.decode_flows(table.to_batches(), options):
        kind = batch.column("kind")[0].as_py() if batch.num_rows else None
        if kind in out:
            out[kind] += batch.column(kind).to_pylist()
        if kind == "connection":
            out["facts"] += batch.column("facts").to_pylist()
    return out


def frames_by_key(rows, connections) -> dict:
    """Frames keyed by (connection endpoints, direction, offset): a connection's id also hashes its first
    packet's ts, which a mutation elsewhere can change (a multi-interface capture cut before an earlier copy)."""
    ends = {c["connection_id"]: (c["client_ip"], c["client_port"], c["server_ip"], c["server_port"]) for c in connections}
    return {(ends[r["connection_id"]], r["direction"], r["stream_offset"]): {k: r.get(k) for k in FRAME_VALUES} | {"ts_us": r.get("ts_us")}
            for r in rows}  # fmt: skip
