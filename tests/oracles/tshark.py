"""tshark's view of a capture's TCP connections, for differential tests.

``tshark_conversations(pcap)`` parses ``tshark -q -z conv,tcp``;
``tshark_streams(pcap)`` adds up per-packet fields by ``tcp.stream``. Both
give one dict per TCP connection:

    address_a, port_a, address_b, port_b   A sent the connection's first packet
    frames_ab, bytes_ab, frames_ba, bytes_ba, frames, bytes   (bytes = frame.len)
    rel_start     seconds from the capture's first packet
    duration      seconds from the connection's first to its last packet
    abs_start     epoch seconds (float); abs_start_us: exact integer microseconds

What tshark 4.0 (4.0.17, Debian) does, checked on synthetic captures in
``test_tshark.py``:

- Port reuse: conv,tcp keys its rows by ``tcp.stream``, so the same 4-tuple
  used again gives a row per connection, whether the first one ended with
  FIN, with RST, or not at all before a new SYN with another ISN.
- Byte counts from 10000 up are printed with SI prefixes and truncated
  ("20 kB" is 20000..20999). Here ``bytes_*`` is then the lower bound and
  ``bytes_*_max`` the upper one (equal when exact); ``tshark_streams`` has the
  exact numbers.
- ``->`` is A to B, ``<-`` B to A; rows come by total frames, descending;
  relative start has 9 decimals, duration only 4.
- ``abs_start`` is the first packet's ``frame.time_epoch`` plus the relative
  start, as tshark itself measures relative times from the first packet.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

TSHARK = shutil.which("tshark")

_SI = {"bytes": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_COUNT = r"(\d+)\s+(\d+) (bytes|kB|MB|GB|TB)"
_CONV_ROW = re.compile(
    rf"^(\S+):(\d+)\s+<->\s+(\S+):(\d+)\s+{_COUNT}\s+{_COUNT}\s+{_COUNT}\s+(-?[\d.]+)\s+([\d.]+)\s*$")


def _tshark(pcap: str | Path, *args: str) -> str:
    if TSHARK is None:
        raise RuntimeError("tshark is not installed")
    return subprocess.run([TSHARK, "-n", "-r", str(pcap), *args],
                          capture_output=True, text=True, check=True).stdout


def first_packet_epoch(pcap: str | Path) -> Decimal:
    return Decimal(_tshark(pcap, "-c", "1", "-T", "fields", "-e", "frame.time_epoch").strip())


def _byte_range(number: str, unit: str) -> tuple[int, int]:
    """``("20", "kB")`` -> (20000, 20999): tshark truncates to the prefix."""
    low, scale = int(number) * _SI[unit], _SI[unit]
    return low, low + scale - 1


def _us(epoch: Decimal) -> int:
    return int((epoch * 1_000_000).to_integral_value(rounding="ROUND_FLOOR"))


def tshark_conversations(pcap: str | Path) -> list[dict]:
    """Rows of ``tshark -q -z conv,tcp``, in tshark's order."""
    t0 = first_packet_epoch(pcap)
    rows = []
    for line in _tshark(pcap, "-q", "-z", "conv,tcp").splitlines():
        m = _CONV_ROW.match(line)
        if m is None:
            continue
        (addr_a, port_a, addr_b, port_b, f_ba, n_ba, u_ba, f_ab, n_ab, u_ab,
         f_all, n_all, u_all, rel_start, duration) = m.groups()
        row = {"address_a": addr_a, "port_a": int(port_a),
               "address_b": addr_b, "port_b": int(port_b),
               "frames_ab": int(f_ab), "frames_ba": int(f_ba), "frames": int(f_all)}
        for key, number, unit in (("bytes_ab", n_ab, u_ab), ("bytes_ba", n_ba, u_ba),
                                  ("bytes", n_all, u_all)):
            row[key], row[key + "_max"] = _byte_range(number, unit)
        start = t0 + Decimal(rel_start)
        row.update(rel_start=float(rel_start), duration=float(duration),
                   abs_start=float(start), abs_start_us=_us(start))
        rows.append(row)
    return rows


_STREAM_FIELDS = ("tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
                  "tcp.dstport", "frame.len", "frame.time_epoch", "tcp.len")


def tshark_streams(pcap: str | Path) -> list[dict]:
    """Per ``tcp.stream``, from per-packet fields: exact bytes, plus TCP payload
    bytes (``payload_ab``/``payload_ba``) and ``end_us``. Ordered by stream."""
    args = ["-Y", "tcp && !icmp && !icmpv6", "-T", "fields", "-E", "occurrence=l"]
    for field in _STREAM_FIELDS:
        args += ["-e", field]
    t0 = first_packet_epoch(pcap)
    streams: dict[int, dict] = {}
    totals: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in _tshark(pcap, *args).splitlines():
        (stream, ip_src, ip6_src, sport, ip_dst, ip6_dst, dport,
         frame_len, epoch, tcp_len) = line.split("\t")
        sid, ts = int(stream), Decimal(epoch)
        src, dst = (ip_src or ip6_src, int(sport)), (ip_dst or ip6_dst, int(dport))
        s = streams.setdefault(sid, {"stream": sid, "a": src, "b": dst, "first": ts})
        s["last"] = ts
        way = "ab" if src == s["a"] else "ba"
        totals[sid].update({f"frames_{way}": 1, f"bytes_{way}": int(frame_len),
                            f"payload_{way}": int(tcp_len or 0)})
    rows = []
    for sid, s in sorted(streams.items()):
        c = totals[sid]
        row = {"stream": sid, "address_a": s["a"][0], "port_a": s["a"][1],
               "address_b": s["b"][0], "port_b": s["b"][1]}
        for key in ("frames_ab", "frames_ba", "bytes_ab", "bytes_ba", "payload_ab", "payload_ba"):
            row[key] = c[key]
        row.update(frames=row["frames_ab"] + row["frames_ba"],
                   bytes=row["bytes_ab"] + row["bytes_ba"],
                   rel_start=float(s["first"] - t0), duration=float(s["last"] - s["first"]),
                   abs_start=float(s["first"]), abs_start_us=_us(s["first"]),
                   end_us=_us(s["last"]))
        rows.append(row)
    return rows
