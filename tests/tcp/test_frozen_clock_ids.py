"""Two connections of one flow that start at the same time get two connection ids (issue 38, item 3's audit of keys).

Bad input tried: the real broker fixture tx.pcap twice in a row, every record at one time (a capture whose clock did
not move), the second copy's client sequence numbers (and the server's acks of them) moved by 10^6 so that it is a
new connection on the same ports after the first one's FIN, as tshark says (two tcp.stream values). Before: both
were hashed from the same endpoints and start time, one connection_id for two rows (connections.key_unique, and
every frame_id of the second connection equal to one of the first's).
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from amqplens.decode.api import decode_capture
from amqplens.decode.tcp.reassembly import connection_id
from tests.conftest import DATA
from tests.e2e.hostile_captures import records, with_records

FIXTURE = DATA / "broker" / "tx.pcap"
FROZEN_S, SHIFT = 1_700_000_000, 1_000_000


def _new_isn(packet: bytes) -> bytes:
    """An Ethernet/IPv4/TCP packet with the client's sequence numbers (and the server's acks) moved by SHIFT."""
    p = bytearray(packet)
    if p[12:14] != b"\x08\x00":
        return packet
    tcp = 14 + (p[14] & 0x0F) * 4
    sport, dport = struct.unpack_from(">HH", p, tcp)
    if dport == 5672:
        struct.pack_into(">I", p, tcp + 4, (struct.unpack_from(">I", p, tcp + 4)[0] + SHIFT) % 2**32)
    elif sport == 5672 and p[tcp + 13] & 0x10:
        struct.pack_into(">I", p, tcp + 8, (struct.unpack_from(">I", p, tcp + 8)[0] + SHIFT) % 2**32)
    return bytes(p)


@pytest.fixture
def frozen(tmp_path):
    data = FIXTURE.read_bytes()
    recs = records(data)
    path = tmp_path / "frozen.pcap"
    path.write_bytes(with_records(data, [[FROZEN_S, 0, r[2]] for r in recs] + [[FROZEN_S, 0, _new_isn(r[2])] for r in recs]))
    return path


def test_two_connections_at_one_time_have_two_ids(frozen):
    conns = decode_capture(frozen, capture_id="frozen").connections
    if shutil.which("tshark"):
        streams = subprocess.run(["tshark", "-r", str(frozen), "-T", "fields", "-e", "tcp.stream"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert len(conns) == len(set(streams)) == 2
    assert len(conns) == 2
    ids = [c.record.connection_id for c in conns]
    assert len(set(ids)) == 2
    r = conns[0].record
    # the first keeps the id every other connection has (re-runs and older lakes agree)
    assert connection_id("frozen", r.client_ip, r.client_port, r.server_ip, r.server_port, FROZEN_S * 1_000_000) in ids
    frame_ids = [(c.record.connection_id, f["direction"], f["stream_offset"]) for c in conns for f in c.frames]
    assert len(frame_ids) == len(set(frame_ids))
