"""Captured frames in, PACKET_SCHEMA column lists out.

``PacketDecoder.add`` takes one captured frame (link type, bytes in a buffer)
and appends a row when it holds a TCP segment; everything else is counted in
the split's ``SplitStats``. IP text forms and flow keys are cached, since a
capture holds few endpoints and many packets.
"""

from __future__ import annotations

import ipaddress
import struct

from amqplens.decode.capture.ip import IPPROTO_TCP, FragmentBuffer, ipv4_header, ipv6_header, walk_extension_headers
from amqplens.decode.capture.linklayer import LINK_DECODERS
from amqplens.decode.capture.records import PACKET_COLUMNS, SplitStats, flow_key

_TCP = struct.Struct(">HHIIHH")  # ports, seq, ack, data offset + flags, window
# Caches are cleared when they grow past this: a scan of many addresses must not grow memory.
MAX_CACHE = 1 << 16


class PacketDecoder:
    """Appends TCP rows for one split; ``take()`` hands over what has accumulated."""

    def __init__(self, capture_id: str, stats: SplitStats, fragments: FragmentBuffer | None = None) -> None:
        self.capture_id = capture_id
        self.stats = stats
        self.fragments = fragments if fragments is not None else FragmentBuffer()
        self.rows = 0
        self._ip_text: dict[bytes, str] = {}
        self._flow_keys: dict[tuple, int] = {}
        self._new_columns()

    def _new_columns(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in PACKET_COLUMNS}
        c = self.columns
        self._append = (
            c["record_offset"].append, c["ts_us"].append, c["ip_version"].append,
            c["src_ip"].append, c["src_port"].append, c["dst_ip"].append, c["dst_port"].append,
            c["flow_key"].append, c["seq"].append, c["ack"].append, c["tcp_flags"].append,
            c["window"].append, c["wire_len"].append, c["payload"].append, c["payload_truncated"].append,
        )  # fmt: skip

    def take(self) -> dict[str, list]:
        """The rows so far as a PACKET_SCHEMA column dict; starts a new batch."""
        columns = self.columns
        columns["capture_id"] = [self.capture_id] * self.rows
        self.rows = 0
        self._new_columns()
        return columns

    def add(self, record_offset: int, linktype: int, ts_us: int, buf, off: int, caplen: int, origlen: int) -> None:
        """Decode one captured frame of ``caplen`` bytes at ``buf[off:]``."""
        end = off + caplen
        decoder = LINK_DECODERS.get(linktype)
        if decoder is None:  # the container reader reports the link type once
            self.stats.unknown_link_packets += 1
            return
        link = decoder(buf, off, end)
        if link is None:
            self.stats.malformed_packets += 1
            return
        version, l3 = link
        if version == 4:
            ip = ipv4_header(buf, l3, end)
        elif version == 6:
            ip = ipv6_header(buf, l3, end)
        else:
            self.stats.non_tcp_packets += 1
            return
        if ip is None:
            self.stats.malformed_packets += 1
            return
        if ip.fragment is not None:
            self._add_fragment(record_offset, ts_us, ip, buf, end, origlen)
        elif ip.proto == IPPROTO_TCP:
            captured_end = min(ip.ip_end, end)
            truncated = ip.ip_end > end
            self._add_tcp(record_offset, ts_us, ip.version, ip.src, ip.dst, buf, ip.l4_off, captured_end, truncated, origlen)
        else:
            self.stats.non_tcp_packets += 1

    def _add_fragment(self, record_offset: int, ts_us: int, ip, buf, end: int, origlen: int) -> None:
        self.stats.ip_fragments += 1
        captured_end = min(ip.ip_end, end)
        data = buf[ip.l4_off : captured_end] if captured_end > ip.l4_off else b""
        done = self.fragments.add(ip.fragment, data, max(0, ip.ip_end - ip.l4_off))
        if done is None:
            return
        self.stats.ip_datagrams_reassembled += 1
        proto, payload, truncated = done
        off = 0
        if ip.version == 6:  # extension headers may follow the fragment header
            walked = walk_extension_headers(payload, proto, 0, len(payload))
            if walked is None or walked[2] is not None:
                self.stats.malformed_packets += 1
                return
            proto, off, _ = walked
        if proto != IPPROTO_TCP:
            self.stats.non_tcp_packets += 1
            return
        self._add_tcp(record_offset, ts_us, ip.version, ip.src, ip.dst, payload, off, len(payload), truncated, origlen)

    def _add_tcp(self, record_offset, ts_us, version, src, dst, buf, off, captured_end, truncated, origlen):
        """Append one row; ``truncated`` says the capture holds less than the IP length."""
        if off + 20 > captured_end:
            self.stats.malformed_packets += 1
            return
        sport, dport, seq, ack, off_flags, window = _TCP.unpack_from(buf, off)
        header_len = (off_flags >> 12) * 4
        if header_len < 20:
            self.stats.malformed_packets += 1
            return
        start = off + header_len
        if start > captured_end and not truncated:  # options run past the datagram
            self.stats.malformed_packets += 1
            return
        payload = buf[start:captured_end] if start < captured_end else b""
        ip_text = self._ip_text
        src_ip = ip_text.get(src)
        if src_ip is None:
            src_ip = self._remember_ip(src)
        dst_ip = ip_text.get(dst)
        if dst_ip is None:
            dst_ip = self._remember_ip(dst)
        key = (src, sport, dst, dport)
        fkey = self._flow_keys.get(key)
        if fkey is None:
            if len(self._flow_keys) >= MAX_CACHE:
                self._flow_keys.clear()
            fkey = self._flow_keys[key] = flow_key(src_ip, sport, dst_ip, dport)
        a = self._append
        a[0](record_offset)
        a[1](ts_us)
        a[2](version)
        a[3](src_ip)
        a[4](sport)
        a[5](dst_ip)
        a[6](dport)
        a[7](fkey)
        a[8](seq)
        a[9](ack)
        a[10](off_flags & 0xFF)
        a[11](window)
        a[12](origlen)
        a[13](payload)
        a[14](truncated)
        self.rows += 1
        self.stats.tcp_packets += 1

    def _remember_ip(self, packed: bytes) -> str:
        if len(self._ip_text) >= MAX_CACHE:
            self._ip_text.clear()
        text = self._ip_text[packed] = ipaddress.ip_address(packed).compressed
        return text
