"""The public ``amqplens.decode.decode_capture``: one capture decoded in this process, without Spark.

Oracles: tshark's TCP payload bytes per stream (the connection records), the byte accounting of every
direction (frame sizes plus error bytes cover the stream when nothing is missing), tshark's count of AMQP
0-9-1 frames. Bad input tried: an empty file, bytes that are no capture, a capture cut in the middle of a
record, a directory, a missing file (the last two are the caller's mistakes: OSError, as ``open`` gives).
"""

from __future__ import annotations

import collections

import pytest

from amqplens.decode import DecodedCapture, decode_capture
from tests.conftest import DATA
from tests.oracles.tshark import _tshark, tshark_streams

DEMO = DATA / "demo" / "demo.pcap"
BROKER = sorted((DATA / "broker").glob("*.pcap"))


@pytest.mark.tshark
@pytest.mark.parametrize("path", [DEMO, *BROKER[:4]], ids=lambda p: p.name)
def test_connections_carry_tsharks_payload_bytes(path):
    cap = decode_capture(path)
    assert isinstance(cap, DecodedCapture) and len(cap) > 0
    streams = {frozenset({(s["address_a"], s["port_a"]), (s["address_b"], s["port_b"])}): s for s in tshark_streams(path)}
    for conn in cap:
        r = conn.record
        s = streams[frozenset({(r.client_ip, r.client_port), (r.server_ip, r.server_port)})]
        to_server = s["payload_ab"] if (s["address_a"], s["port_a"]) == (r.client_ip, r.client_port) else s["payload_ba"]
        to_client = s["payload_ba"] if (s["address_a"], s["port_a"]) == (r.client_ip, r.client_port) else s["payload_ab"]
        # tshark counts retransmitted payload again; the reassembled stream holds each byte once
        assert r.bytes_to_server <= to_server and r.bytes_to_client <= to_client
        assert r.bytes_to_server + r.bytes_to_client > 0


@pytest.mark.parametrize("path", [DEMO, *BROKER], ids=lambda p: p.name)
def test_every_byte_of_a_clean_stream_is_a_frame_or_an_error(path):
    for conn in decode_capture(path):
        if conn.dialect is None or any(conn.gaps.values()):
            continue
        for direction, total in (("to_server", conn.record.bytes_to_server), ("to_client", conn.record.bytes_to_client)):
            framed = sum(f["size"] or 0 for f in conn.frames if f["direction"] == direction)
            errors = sum(e.get("length") or 0 for e in conn.errors if e.get("direction") == direction)
            # the protocol header is a frame row of 8 bytes, so frames and error bytes cover the stream exactly
            assert framed + errors == total, (path.name, conn.record.connection_id, direction)


@pytest.mark.tshark
def test_the_demo_has_tsharks_count_of_0_9_1_frames():
    ours = collections.Counter()
    for conn in decode_capture(DEMO):
        if conn.dialect == "0-9-1":
            # tshark's amqp.type is per frame; the protocol header is a row of ours but no frame of tshark's
            ours[(conn.record.client_ip, conn.record.client_port)] += sum(f["frame_type"] != "protocol_header" for f in conn.frames)
    theirs = collections.Counter()
    out = _tshark(DEMO, "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "amqp", "-T", "fields", "-E", "occurrence=a",
                  "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport", "-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport",
                  "-e", "amqp.type")
    for line in out.splitlines():
        src, src6, sport, dst, dst6, dport, types = line.split("\t")
        client = (src or src6, int(sport)) if int(dport) == 5672 else (dst or dst6, int(dport))
        if client in ours:
            theirs[client] += len([t for t in types.split(",") if t])
    assert ours and theirs == ours


def test_frames_come_sorted_as_the_lifecycle_job_sorts_them():
    frames = decode_capture(DEMO).frames()
    keys = [(f["connection_id"], f["ts_us"], f["stream_offset"]) for f in frames]
    assert keys == sorted(keys) and len(frames) > 100


@pytest.mark.parametrize("content", [b"", b"this is not a capture at all" * 100, None], ids=["empty", "garbage", "cut"])
def test_a_bad_file_gives_errors_not_an_exception(tmp_path, content):
    path = tmp_path / "bad.pcap"
    path.write_bytes(DEMO.read_bytes()[: DEMO.stat().st_size // 2 + 7] if content is None else content)
    cap = decode_capture(path)
    if content is None:  # the records before the cut decode; the cut one is a capture error
        assert len(cap) > 0 and cap.capture_errors
    else:
        assert len(cap) == 0 and cap.frames() == []
        assert cap.capture_errors or content == b""


def test_a_missing_file_or_a_folder_is_the_callers_oserror(tmp_path):
    with pytest.raises(OSError):
        decode_capture(tmp_path / "missing.pcap")
    with pytest.raises(OSError):
        decode_capture(tmp_path)
