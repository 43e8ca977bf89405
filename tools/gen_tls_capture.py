"""A TLS twin of a plaintext AMQP capture: every connection's bytes re-sent through real TLS sessions.

    python -m tools.gen_tls_capture IN.pcap OUT.pcap --keylog OUT.keylog

For the benchmark of TLS decryption (``python -m tools.bench --tls``): ``IN.pcap`` is a capture of
``tools.gen_capture`` (Ethernet, IPv4, TCP to port 5672, streams in order). Each of its connections
becomes a connection to port 5671 whose client and server are Python ``ssl`` objects (OpenSSL) joined
in memory (``tools.tls_session.MemoryTls``): after the TCP handshake comes the TLS handshake, then every
payload packet of the original is written by the same side into its TLS session at the same time, and
the TLS records it produces are cut into segments of at most 1448 bytes; a FIN is preceded by both
sides' close_notify. Connections alternate between TLS 1.3 (OpenSSL's default suite) and TLS 1.2
(ECDHE-ECDSA-AES128-GCM-SHA256). The client contexts write every session's secrets to ``--keylog``.
Pure ACKs are left out (nothing reads them). Without ``--keylog``: the clear twin, the same payload
cut into segments the same way, on port 5672, the baseline the TLS twin is compared with. Not deterministic: TLS randoms and keys are fresh each run.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from pathlib import Path

from tools.tls_session import MemoryTls, TlsPki

AMQP_PORT, AMQPS_PORT = 5672, 5671
MSS = 1448
SYN, FIN, RST, PSH, ACK = 0x02, 0x01, 0x04, 0x08, 0x10
SESSIONS = (("1.3", None), ("1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"))
_REC = struct.Struct("<IIII")
_IP = struct.Struct(">BBHHHBBH4s4s")
_TCP = struct.Struct(">HHIIBBHHH")


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class _Writer:
    """Classic pcap, Ethernet + IPv4 + TCP (no options), microsecond timestamps."""

    def __init__(self, fh) -> None:
        self.fh = fh
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.packets = 0

    def packet(self, ts_us: int, src: tuple[bytes, int], dst: tuple[bytes, int], seq: int, ack: int, flags: int, payload: bytes = b"") -> None:
        tcp = _TCP.pack(src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
        ip = _IP.pack(0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0, src[0], dst[0])
        ip = ip[:10] + struct.pack(">H", _checksum(ip)) + ip[12:]
        frame = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + tcp + payload
        self.fh.write(_REC.pack(ts_us // 1_000_000, ts_us % 1_000_000, len(frame), len(frame)) + frame)
        self.packets += 1


class _Conn:
    def __init__(self, client: tuple[bytes, int], server: tuple[bytes, int], tls: MemoryTls | None) -> None:
        self.ends = {"to_server": (client, server), "to_client": (server, client)}
        self.tls = tls  # None: the clear twin, the same bytes in the same segments
        self.turns = tls.turns if tls is not None else []
        self.seq = {"to_server": 1001, "to_client": 5001}
        self.closed = False

    def send(self, w: _Writer, ts_us: int, direction: str, flags: int, payload: bytes = b"") -> None:
        src, dst = self.ends[direction]
        other = "to_client" if direction == "to_server" else "to_server"
        w.packet(ts_us, src, dst, self.seq[direction], self.seq[other], flags, payload)
        self.seq[direction] += len(payload) + (1 if flags & (SYN | FIN) else 0)

    def write(self, direction: str, payload: bytes) -> None:
        if self.tls is not None:
            self.tls.write(direction, payload)
        else:
            self.turns.append((direction, payload))

    def close(self) -> None:
        if self.tls is not None:
            self.tls.close()

    def flush(self, w: _Writer, ts_us: int) -> None:
        for direction, data in self.turns:
            for off in range(0, len(data), MSS):
                self.send(w, ts_us, direction, PSH | ACK, data[off : off + MSS])
        self.turns.clear()


def _packets(path: Path):
    """(ts_us, src ip, sport, dst ip, dport, flags, payload) of each IPv4 TCP packet of an Ethernet pcap."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, caplen, _ = _REC.unpack_from(data, pos)
        pkt = memoryview(data)[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if len(pkt) < 54 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
            continue
        ihl = (pkt[14] & 0x0F) * 4
        total = struct.unpack_from(">H", pkt, 16)[0]
        t = 14 + ihl
        sport, dport = struct.unpack_from(">HH", pkt, t)
        doff = (pkt[t + 12] >> 4) * 4
        yield (sec * 1_000_000 + usec, bytes(pkt[26:30]), sport, bytes(pkt[30:34]), dport, pkt[t + 13],
               bytes(pkt[t + doff : 14 + total]))


def make_tls_twin(src: Path, out: Path, keylog: Path | None, pki_dir: Path | None = None) -> dict:
    """Write the TLS twin of ``src`` to ``out`` and its secrets to ``keylog``; returns counts. Without
    ``keylog``, the clear twin: the same connections, packets cut the same way, no TLS (port 5672)."""
    pki = TlsPki.create(pki_dir or tempfile.mkdtemp(prefix="amqplens-pki-")) if keylog else None
    port = AMQPS_PORT if keylog else AMQP_PORT
    if keylog:
        keylog.unlink(missing_ok=True)
    conns: dict[tuple, _Conn] = {}
    plaintext = 0
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb", buffering=1 << 20) as fh:
        w = _Writer(fh)
        for ts, sip, sport, dip, dport, flags, payload in _packets(src):
            to_server = dport == AMQP_PORT
            client, server = ((sip, sport), (dip, port)) if to_server else ((dip, dport), (sip, port))
            key = (client, server)
            direction = "to_server" if to_server else "to_client"
            conn = conns.get(key)
            if flags & SYN and not flags & ACK:
                version, ciphers = SESSIONS[len(conns) % len(SESSIONS)]
                tls = MemoryTls(pki, version, keylog, ciphers, keep_received=False) if keylog else None
                conn = conns[key] = _Conn(client, server, tls)
                conn.send(w, ts, "to_server", SYN)
                conn.send(w, ts, "to_client", SYN | ACK)
                conn.send(w, ts, "to_server", ACK)
                conn.flush(w, ts)
                continue
            if conn is None:
                continue  # a connection whose SYN the source does not have
            if payload:
                plaintext += len(payload)
                conn.write(direction, payload)
                conn.flush(w, ts)
            if flags & (FIN | RST):
                if not conn.closed:
                    conn.closed = True
                    conn.close()
                    conn.flush(w, ts)
                conn.send(w, ts, direction, flags & (FIN | RST) | ACK)
    tmp.replace(out)
    return {"connections": len(conns), "packets": w.packets, "plaintext_bytes": plaintext, "file_bytes": out.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gen_tls_capture", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a plaintext capture of tools.gen_capture")
    ap.add_argument("out", type=Path)
    ap.add_argument("--keylog", type=Path, help="NSS key log file to write (without: the clear twin, no TLS)")
    args = ap.parse_args(argv)
    print(make_tls_twin(args.src, args.out, args.keylog))
    return 0


if __name__ == "__main__":
    sys.exit(main())
