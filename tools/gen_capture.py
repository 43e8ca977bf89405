"""Synthetic but realistic AMQP 0-9-1 packet captures of a given size, with ground truth.

    python -m tools.gen_capture OUT.pcap --size-mb 100 [--seed 0] [--connections 50]

Writes a classic pcap (little-endian, microsecond timestamps, Ethernet, IPv4)
and a sidecar ``OUT.truth.json`` with what the capture holds: every TCP
connection (endpoints, payload bytes, wire bytes and packets per direction,
first/last timestamp), and the number of AMQP frames per frame type and per
(class, method).

What is in the capture: ``connections`` TCP connections from a few client
addresses to one broker on port 5672. Each has a full three-way handshake
(MSS 1448, SACK, timestamps, window scaling), the 0-9-1 protocol header,
connection.start/start-ok (SASL PLAIN, password ``bench-secret``),
tune/tune-ok, open/open-ok, then several channels: channel.open, publishers
declare an exchange and select confirms, consumers declare and bind a queue,
set basic.qos and basic.consume. Then interleaved traffic: basic.publish
(method + content header + body frames; mostly small bodies, some large
ones split into several body frames under the negotiated frame_max) with
broker confirms (basic.ack, sometimes multiple, rarely basic.nack),
basic.deliver to the consumers with client basic.ack (sometimes multiple),
occasional basic.nack / basic.reject, heartbeats. Byte streams are cut into
segments at the MSS, several frames share a segment when they are written
together, large frames span many segments, the receiver sends pure ACKs
(every second segment of a bulk transfer and after a lone segment). At the end
some channels are closed, then connection.close/close-ok and a FIN exchange.
Packets of different connections interleave (``lanes`` conversations run
concurrently); timestamps strictly increase.

Every AMQP frame is pika's own marshalling (``pika.frame.Method/Header/Body/
Heartbeat(...).marshal()``), so the capture does not depend on amqplens'
decoder. For speed, frames whose only varying parts are numbers (delivery tag,
body size, message-id, timestamp) are marshalled once by pika with sentinel
values and patched in place; ``FrameFactory`` is that cache, and the tests
check it byte for byte against pika. IPv4 header checksums are computed; TCP
checksums are left 0 (tshark does not validate them by default).

Deterministic: the same arguments and seed give the same bytes.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika.frame
import pika.spec as spec

# Bump when the bytes a given (size, seed, options) produce change, so cached captures are remade.
GENERATOR_VERSION = 1
MSS = 1448
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
SERVER_IP = "10.20.0.10"
SERVER_PORT = 5672
CLIENT_IPS = ("10.20.1.11", "10.20.1.12", "10.20.1.13", "10.20.2.21", "10.20.2.22")
PASSWORD = "bench-secret"
USERNAME = "bench"
EPOCH_S = 1_705_309_200  # 2024-01-15 09:00:00 UTC
MB = 1_000_000

FRAME_TYPE_NAMES = {1: "method", 2: "header", 3: "body", 8: "heartbeat"}

# pcap record header (little-endian file) and the fixed IPv4 + TCP(+timestamps) headers.
_REC = struct.Struct("<IIII")
_IPTCP = struct.Struct(">BBHHHBBH4s4sHHIIBBHHHBBBBII")  # 20 + 32 bytes
_IPTCP_SYN = struct.Struct(">BBHHHBBH4s4sHHIIBBHHH" + "BBH" + "BB" + "BBII" + "B" + "BBB")  # 20 + 40
_IP_TCP_LEN = 20 + 32
_IP_TCP_SYN_LEN = 20 + 40
_ETH_LEN = 14
_Q = struct.Struct(">Q")
_BODY_HDR = struct.Struct(">BHI")
_FRAME_END = b"\xce"

# TCP flags
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

_SENT_TAG = 0x7A3B5C1D2E4F6081  # sentinels replaced in cached frames
_SENT_SIZE = 0x6B2A4C1E3D5F7092
_SENT_TS = 0x5C1D2E3F40516273
_SENT_ID = "Z" * 36


def sidecar_path(path: str | os.PathLike) -> Path:
    """Where ``generate`` writes the ground truth of ``path``: ``<stem>.truth.json``."""
    p = Path(path)
    return p.with_name(p.stem + ".truth.json")


# ---------------------------------------------------------------------------
# Frames: pika marshalling, cached with patchable numbers
# ---------------------------------------------------------------------------


def _method_bytes(channel: int, method: Any) -> bytes:
    return pika.frame.Method(channel, method).marshal()


def _split_at(raw: bytes, sentinel: bytes) -> tuple[bytes, bytes]:
    i = raw.find(sentinel)
    assert i >= 0 and raw.find(sentinel, i + 1) < 0, "sentinel not unique in marshalled frame"
    return raw[:i], raw[i + len(sentinel):]


# Content properties: a few realistic shapes. Every variant carries a message-id
# and a timestamp (patched per message); 'cid' variants also a correlation-id.
_PROPS_VARIANTS: tuple[dict, ...] = (
    dict(content_type="application/json", delivery_mode=2),
    dict(content_type="application/json", content_encoding="utf-8", delivery_mode=2,
         headers={"x-trace-id": "bench", "retry": 0, "tenant": "eu-west"}, app_id="bench-publisher"),
    dict(content_type="application/octet-stream", delivery_mode=1, priority=5,
         reply_to="amq.rabbitmq.reply-to", cid=True),
    dict(content_type="text/plain", delivery_mode=2, expiration="60000", user_id=USERNAME, type="order.created"),
)
LARGE_PROPS_VARIANT = 2


class FrameFactory:
    """Marshalled AMQP frames; pika marshals each distinct shape once, numbers are patched."""

    def __init__(self) -> None:
        self._methods: dict[tuple, bytes] = {}
        self._tagged: dict[tuple, tuple[bytes, bytes]] = {}
        self._headers: dict[tuple, tuple[bytearray, int, int, int, int]] = {}
        self.heartbeat = pika.frame.Heartbeat().marshal()

    # plain methods (no varying numbers) ------------------------------------
    def method(self, channel: int, method: Any) -> bytes:
        return _method_bytes(channel, method)

    def publish(self, channel: int, exchange: str, routing_key: str) -> bytes:
        key = ("publish", channel, exchange, routing_key)
        f = self._methods.get(key)
        if f is None:
            f = self._methods[key] = _method_bytes(
                channel, spec.Basic.Publish(exchange=exchange, routing_key=routing_key))
        return f

    # methods whose only varying number is a delivery tag ----------------------
    def _with_tag(self, channel: int, delivery_tag: int, method: type, **fields: Any) -> bytes:
        """``method(delivery_tag=..., **fields)`` on ``channel``: marshalled once per shape with a sentinel tag,
        whose 8 bytes are then replaced by the tag."""
        key = (method.NAME, channel, *sorted(fields.items()))
        t = self._tagged.get(key)
        if t is None:
            t = self._tagged[key] = _split_at(_method_bytes(channel, method(delivery_tag=_SENT_TAG, **fields)), _Q.pack(_SENT_TAG))
        pre, post = t
        return pre + _Q.pack(delivery_tag) + post

    def deliver(self, channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool,
                exchange: str, routing_key: str) -> bytes:
        return self._with_tag(channel, delivery_tag, spec.Basic.Deliver, consumer_tag=consumer_tag, redelivered=redelivered,
                              exchange=exchange, routing_key=routing_key)

    def ack(self, channel: int, delivery_tag: int, multiple: bool) -> bytes:
        return self._with_tag(channel, delivery_tag, spec.Basic.Ack, multiple=multiple)

    def nack(self, channel: int, delivery_tag: int, multiple: bool, requeue: bool) -> bytes:
        return self._with_tag(channel, delivery_tag, spec.Basic.Nack, multiple=multiple, requeue=requeue)

    def reject(self, channel: int, delivery_tag: int, requeue: bool) -> bytes:
        return self._with_tag(channel, delivery_tag, spec.Basic.Reject, requeue=requeue)

    # content ------------------------------------------------------------------
    @staticmethod
    def properties(variant: int, message_id: str, timestamp: int) -> spec.BasicProperties:
        kw = dict(_PROPS_VARIANTS[variant])
        cid = kw.pop("cid", False)
        if cid:
            kw["correlation_id"] = message_id
        return spec.BasicProperties(message_id=message_id, timestamp=timestamp, **kw)

    def header(self, channel: int, variant: int, body_size: int, message_id: str | None, timestamp: int) -> bytes:
        """Content header frame; ``message_id`` must be 36 ASCII characters (a UUID), or None for none."""
        key = (channel, variant, message_id is None)
        t = self._headers.get(key)
        if t is None:
            props = self.properties(variant, _SENT_ID, _SENT_TS)
            if message_id is None:
                props.message_id = props.correlation_id = None
            raw = pika.frame.Header(channel, _SENT_SIZE, props).marshal()
            size_off = raw.find(_Q.pack(_SENT_SIZE))
            ts_off = raw.find(_Q.pack(_SENT_TS))
            id_off = raw.find(_SENT_ID.encode())
            cid_off = raw.find(_SENT_ID.encode(), id_off + 36)
            assert min(size_off, ts_off) >= 0 and (id_off >= 0) == (message_id is not None)
            t = self._headers[key] = (bytearray(raw), size_off, ts_off, id_off, cid_off)
        raw, size_off, ts_off, id_off, cid_off = t
        b = bytearray(raw)
        _Q.pack_into(b, size_off, body_size)
        _Q.pack_into(b, ts_off, timestamp)
        if id_off >= 0:
            mid = message_id.encode()
            b[id_off:id_off + 36] = mid
            if cid_off >= 0:
                b[cid_off:cid_off + 36] = mid
        return bytes(b)

    @staticmethod
    def body(channel: int, fragment) -> bytes:
        return b"".join((_BODY_HDR.pack(3, channel, len(fragment)), fragment, _FRAME_END))


# ---------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------


def _ip4(s: str) -> bytes:
    return bytes(int(x) for x in s.split("."))


def _mac(ip: bytes) -> bytes:
    return b"\x02\x42" + ip


@dataclass
class _Dir:
    """One direction of a connection: header constants, sequence state, counters."""

    eth: bytes
    src: bytes
    dst: bytes
    sport: int
    dport: int
    csum_base: int  # IPv4 header checksum partial sum of the constant words
    seq: int
    ipid: int
    ts_off: int
    window: int
    packets: int = 0
    payload_bytes: int = 0
    wire_bytes: int = 0
    last_tsval: int = 0


@dataclass
class _Channel:
    number: int
    role: str  # "pub" or "con"
    exchange: str = ""
    routing_keys: tuple = ()
    queue: str = ""
    consumer_tag: str = ""
    prefetch: int = 0
    publish_seq: int = 0  # confirm-mode sequence numbers
    unconfirmed: list = field(default_factory=list)
    deliver_tag: int = 0
    unacked: list = field(default_factory=list)
    held: dict = field(default_factory=dict)  # unacked delivery tag -> (body, routing key)


@dataclass
class _Conn:
    index: int
    client_ip: str
    client_port: int
    c: _Dir  # client -> server
    s: _Dir  # server -> client
    frame_max: int
    channels: list = field(default_factory=list)
    state: str = "new"  # new, open, closed
    first_ts: int = -1
    last_ts: int = -1


def _ip_csum_base(src: bytes, dst: bytes) -> int:
    # version/ihl/tos, flags/frag (DF), ttl/proto, addresses; tot_len and id added per packet.
    words = (0x4500, 0x4000, (64 << 8) | 6) + struct.unpack(">HHHH", src + dst)
    return sum(words)


def _make_dir(rng: random.Random, src_ip: str, dst_ip: str, sport: int, dport: int, window: int) -> _Dir:
    src, dst = _ip4(src_ip), _ip4(dst_ip)
    return _Dir(
        eth=_mac(dst) + _mac(src) + b"\x08\x00",
        src=src, dst=dst, sport=sport, dport=dport,
        csum_base=_ip_csum_base(src, dst),
        seq=rng.getrandbits(32), ipid=rng.getrandbits(16),
        ts_off=rng.getrandbits(31), window=window,
    )


# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------


_ROUTING_KEYS = ("orders.created.eu", "orders.paid.us", "payments.settled", "inventory.reserved",
                 "shipping.label.printed", "audit.login", "metrics.cpu", "email.outbound")


class _Generator:
    def __init__(self, path: Path, size_mb: float, seed: int, connections: int, lanes: int,
                 channels: tuple[int, int], large_fraction: float, large_size: tuple[int, int],
                 small_size: tuple[int, int], heartbeat_fraction: float, frame_max_choices: tuple,
                 gap_us: int) -> None:
        self.path = path
        self.target = int(size_mb * MB)
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_conns = connections
        self.n_lanes = max(1, min(lanes, connections))
        self.channel_range = channels
        self.large_fraction = large_fraction
        self.large_size = large_size
        self.small_size = small_size
        self.heartbeat_fraction = heartbeat_fraction
        self.frame_max_choices = frame_max_choices
        self.gap_us = gap_us
        self.ff = FrameFactory()
        self.frames_by_type = {"protocol_header": 0, "method": 0, "header": 0, "body": 0, "heartbeat": 0}
        self.methods: dict[int, int] = {}
        self.messages_published = 0
        self.messages_delivered = 0
        self.body_bytes = 0
        # Body content: a JSON-ish text pool for small bodies, pseudo-random bytes for large ones.
        prng = random.Random(seed ^ 0x5EED)
        words = [b'{"id":%d,"sku":"SKU-%05d","qty":%d,"price":%d.%02d,"note":"%s"},' % (
            i, prng.randrange(100000), prng.randrange(1, 20), prng.randrange(1, 500), prng.randrange(100),
            prng.choice([b"express", b"gift wrap", b"", b"leave at door", b"fragile"]))
            for i in range(4000)]
        self.text_pool = memoryview(b"".join(words))
        self.bin_pool = memoryview(prng.randbytes(256 * 1024 + 64 * 1024))
        self.conns = self._make_connections()
        self.out = bytearray()
        self.written = 0
        self.packets = 0
        self.last_ts = EPOCH_S * 1_000_000
        self.fh = None

    # -- set-up -------------------------------------------------------------
    def _make_connections(self) -> list[_Conn]:
        rng = self.rng
        used = set()
        conns = []
        for i in range(self.n_conns):
            cip = CLIENT_IPS[i % len(CLIENT_IPS)]
            while True:
                port = rng.randrange(32768, 61000)
                if (cip, port) not in used:
                    used.add((cip, port))
                    break
            c = _make_dir(rng, cip, SERVER_IP, port, SERVER_PORT, 502)
            s = _make_dir(rng, SERVER_IP, cip, SERVER_PORT, port, 509)
            conn = _Conn(i, cip, port, c, s, frame_max=rng.choice(self.frame_max_choices))
            n_ch = rng.randint(*self.channel_range)
            for ch in range(1, n_ch + 1):
                role = "pub" if ch == 1 else ("con" if ch == 2 else rng.choice(("pub", "con")))
                chan = _Channel(ch, role)
                if role == "pub":
                    chan.exchange = rng.choice(("bench.events", "bench.events", "", "amq.topic"))
                    chan.routing_keys = tuple(rng.sample(_ROUTING_KEYS, 3))
                else:
                    chan.queue = "bench.q.%s" % rng.choice(_ROUTING_KEYS).split(".")[0]
                    chan.consumer_tag = "ctag%d.%032x" % (ch, rng.getrandbits(128))
                    chan.prefetch = rng.choice((10, 50, 100, 250))
                    chan.exchange = "bench.events"
                    chan.routing_keys = tuple(rng.sample(_ROUTING_KEYS, 2))
                conn.channels.append(chan)
            conns.append(conn)
        return conns

    # -- frame helpers --------------------------------------------------------
    def _acks(self, channel: int, tags: list[int], multiple: bool) -> list[bytes]:
        """basic.ack frames (counted) for ``tags``: one with multiple set for the last, or one per tag."""
        frames = [self.ff.ack(channel, tags[-1], True)] if multiple else [self.ff.ack(channel, tag, False) for tag in tags]
        for f in frames:
            self._count_method(f)
        return frames

    def _count_method(self, frame: bytes) -> None:
        """Count a marshalled method frame under its (class, method) index (payload octets 0-3)."""
        self.frames_by_type["method"] += 1
        idx = (frame[7] << 24) | (frame[8] << 16) | (frame[9] << 8) | frame[10]
        self.methods[idx] = self.methods.get(idx, 0) + 1

    def m(self, channel: int, method: Any) -> bytes:
        f = self.ff.method(channel, method)
        self._count_method(f)
        return f

    def _random_body(self, large: bool) -> tuple:
        """(size, pool, offset, properties variant, message-id) of a message with a body of its own."""
        rng = self.rng
        rand = rng.random
        if large:
            lo, hi = self.large_size
            size = lo + int(rand() * (hi - lo + 1))
            pool = self.bin_pool
            variant = LARGE_PROPS_VARIANT
        else:
            lo, hi = self.small_size
            size = int(lo * (hi / lo) ** rand())
            pool = self.text_pool
            variant = int(rand() * len(_PROPS_VARIANTS))
        mid = "%032x" % rng.getrandbits(128)
        mid = f"{mid[:8]}-{mid[8:12]}-{mid[12:16]}-{mid[16:20]}-{mid[20:]}"
        return size, pool, int(rand() * (len(pool) - size)), variant, mid

    def _message_frames(self, conn: _Conn, ch: int, method_frame: bytes, parts: list, body: tuple) -> None:
        """Append method + header + body frames of one message (``body`` as ``_random_body`` makes it) to ``parts``."""
        size, pool, off, variant, mid = body
        ts_s = self.last_ts // 1_000_000
        parts.append(method_frame)
        parts.append(self.ff.header(ch, variant, size, mid, ts_s))
        fbt = self.frames_by_type
        fbt["header"] += 1
        maxfrag = conn.frame_max - 8
        frame = self.ff.body
        for o in range(0, size, maxfrag):
            parts.append(frame(ch, pool[off + o: off + min(size, o + maxfrag)]))
            fbt["body"] += 1
        self.body_bytes += size

    def _large(self) -> bool:
        return self.rng.random() < self.large_fraction

    # -- TCP ------------------------------------------------------------------
    def send(self, unit: list, t: int, conn: _Conn, from_client: bool, data: bytes, *,
             reply: bool = False) -> int:
        """Queue ``data`` from one side, cut at the MSS, with the peer's pure ACKs.

        ``reply``: the peer answers with data right away, so its ACK rides on that.
        Returns the time after the last packet.
        """
        d, o = (conn.c, conn.s) if from_client else (conn.s, conn.c)
        n = len(data)
        mv = memoryview(data)
        nseg = (n + MSS - 1) // MSS
        for i in range(nseg):
            seg = mv[i * MSS:(i + 1) * MSS]
            last = i == nseg - 1
            unit.append((t, d, o, d.seq, o.seq, (PSH | ACK) if last else ACK, seg))
            d.seq = (d.seq + len(seg)) & 0xFFFFFFFF
            t += 12 if not last else 1
            if i & 1 and not last:  # quick ACK every second full segment of a bulk transfer
                unit.append((t + 5, o, d, o.seq, d.seq, ACK, b""))
        rand = self.rng.random
        if not reply:
            t += 20 + int(rand() * 180)
            unit.append((t, o, d, o.seq, d.seq, ACK, b""))
        t += 30 + int(rand() * 220)  # peer think time / wire latency
        return t

    def handshake(self, unit: list, t: int, conn: _Conn) -> int:
        c, s = conn.c, conn.s
        unit.append((t, c, s, c.seq, 0, SYN, None))
        c.seq = (c.seq + 1) & 0xFFFFFFFF
        t += self.rng.randint(40, 120)
        unit.append((t, s, c, s.seq, c.seq, SYN | ACK, None))
        s.seq = (s.seq + 1) & 0xFFFFFFFF
        t += self.rng.randint(40, 120)
        unit.append((t, c, s, c.seq, s.seq, ACK, b""))
        return t + 5

    # -- units of conversation -------------------------------------------------
    def unit_open(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        m = self.m
        rng = self.rng
        t = self.handshake(u, t, conn)
        self.frames_by_type["protocol_header"] += 1
        t = self.send(u, t, conn, True, PROTOCOL_HEADER, reply=True)
        start = spec.Connection.Start(
            version_major=0, version_minor=9,
            server_properties={
                "capabilities": {"publisher_confirms": True, "exchange_exchange_bindings": True,
                                 "basic.nack": True, "consumer_cancel_notify": True,
                                 "connection.blocked": True, "consumer_priorities": True,
                                 "authentication_failure_close": True, "per_consumer_qos": True,
                                 "direct_reply_to": True},
                "cluster_name": "rabbit@bench-broker", "copyright": "Copyright (c) 2007-2024 Broadcom Inc",
                "information": "Licensed under the MPL 2.0", "platform": "Erlang/OTP 25.3.2.8",
                "product": "RabbitMQ", "version": "3.12.1"},
            mechanisms="PLAIN AMQPLAIN", locales="en_US")
        t = self.send(u, t, conn, False, m(0, start), reply=True)
        start_ok = spec.Connection.StartOk(
            client_properties={
                "product": "Pika Python Client Library", "platform": "Python 3.11.2",
                "capabilities": {"authentication_failure_close": True, "basic.nack": True,
                                 "connection.blocked": True, "consumer_cancel_notify": True,
                                 "publisher_confirms": True},
                "information": "See http://pika.rtfd.org", "version": "1.3.2",
                "connection_name": "bench-%d" % conn.index},
            mechanism="PLAIN", response="\0%s\0%s" % (USERNAME, PASSWORD), locale="en_US")
        t = self.send(u, t, conn, True, m(0, start_ok), reply=True)
        t = self.send(u, t, conn, False, m(0, spec.Connection.Tune(
            channel_max=2047, frame_max=131072, heartbeat=60)), reply=True)
        # tune-ok and open are written back to back: two frames in one segment
        t = self.send(u, t, conn, True, m(0, spec.Connection.TuneOk(
            channel_max=2047, frame_max=conn.frame_max, heartbeat=60)) + m(0, spec.Connection.Open(
                virtual_host="/")), reply=True)
        t = self.send(u, t, conn, False, m(0, spec.Connection.OpenOk()), reply=True)
        chans = conn.channels
        for k, ch in enumerate(chans):
            n = ch.number
            rpc = [(spec.Channel.Open(), spec.Channel.OpenOk())]
            if ch.role == "pub":
                if ch.exchange and not ch.exchange.startswith("amq."):
                    rpc.append((spec.Exchange.Declare(exchange=ch.exchange, type="topic", durable=True),
                                spec.Exchange.DeclareOk()))
                rpc.append((spec.Confirm.Select(), spec.Confirm.SelectOk()))
            else:
                rpc.append((spec.Queue.Declare(queue=ch.queue, durable=True, arguments={"x-queue-type": "classic"}),
                            spec.Queue.DeclareOk(queue=ch.queue, message_count=rng.randrange(1000),
                                                 consumer_count=rng.randrange(4))))
                for rk in ch.routing_keys:
                    rpc.append((spec.Queue.Bind(queue=ch.queue, exchange=ch.exchange, routing_key=rk),
                                spec.Queue.BindOk()))
                rpc.append((spec.Basic.Qos(prefetch_count=ch.prefetch), spec.Basic.QosOk()))
                rpc.append((spec.Basic.Consume(queue=ch.queue, consumer_tag=ch.consumer_tag),
                            spec.Basic.ConsumeOk(consumer_tag=ch.consumer_tag)))
            for j, (req, resp) in enumerate(rpc):
                more = j + 1 < len(rpc) or k + 1 < len(chans)
                t = self.send(u, t, conn, True, m(n, req), reply=True)
                t = self.send(u, t, conn, False, m(n, resp), reply=more)
        conn.state = "open"
        return u, t

    def unit_publish(self, t: int, conn: _Conn, ch: _Channel) -> tuple[list, int]:
        u: list = []
        rng = self.rng
        k = min(1 + int(rng.expovariate(1.0)), 12)
        parts: list = []
        n = ch.number
        ff = self.ff
        for _ in range(k):
            rk = self._publish_key(ch)
            pf = ff.publish(n, ch.exchange, rk)
            self._count_method(pf)
            at = t + 12 * (sum(map(len, parts)) // MSS)  # the time of the segment its method frame starts in (send)
            self._message_frames(conn, n, pf, parts, self.publish_body(ch, rk, at))
            ch.publish_seq += 1
            ch.unconfirmed.append(ch.publish_seq)
        self.messages_published += k
        t = self.send(u, t, conn, True, b"".join(parts), reply=True)
        # broker confirms: one multiple ack, or one per message, rarely a nack
        conf: list = []
        tags = ch.unconfirmed
        r = rng.random()
        if r < 0.01:
            f = ff.nack(n, tags[-1], len(tags) > 1, True)
            self._count_method(f)
            conf.append(f)
        else:
            conf += self._acks(n, tags, multiple=len(tags) > 1 and r < 0.55)
        ch.unconfirmed = []
        t = self.send(u, t, conn, False, b"".join(conf))
        return u, t

    def unit_deliver(self, t: int, conn: _Conn, ch: _Channel) -> tuple[list, int]:
        u: list = []
        rng = self.rng
        room = ch.prefetch - len(ch.unacked)
        parts: list = []
        n = ch.number
        ff = self.ff
        ready = self.deliveries_ready(ch, min(room, 1 + int(rng.expovariate(0.8)), 12), t)
        for body, redelivered, rk in ready:
            ch.deliver_tag += 1
            df = ff.deliver(n, ch.consumer_tag, ch.deliver_tag, redelivered, ch.exchange, rk)
            self._count_method(df)
            self._message_frames(conn, n, df, parts, body)
            ch.unacked.append(ch.deliver_tag)
            ch.held[ch.deliver_tag] = (body, rk)
        k = len(ready)
        self.messages_delivered += k
        if parts:
            t = self.send(u, t, conn, False, b"".join(parts))
        full = len(ch.unacked) >= ch.prefetch
        if ch.unacked and (full or rng.random() < 0.7):
            acks: list = []
            tags = ch.unacked
            r = rng.random()
            if r < 0.04:
                requeue = rng.random() < 0.5
                f = ff.reject(n, tags[0], requeue) if r < 0.02 else ff.nack(n, tags[0], False, requeue)
                self._count_method(f)
                acks.append(f)
                if requeue:
                    self.requeue(ch, [ch.held[tags[0]]])
                tags = tags[1:]
            if tags:
                acks += self._acks(n, tags, multiple=len(tags) > 1 and rng.random() < 0.5)
            ch.unacked = []
            ch.held.clear()
            t = self.send(u, t, conn, True, b"".join(acks))
        if not u:  # nothing to deliver, nothing to ack
            return self.unit_heartbeat(t, conn)
        return u, t

    # -- what the messages are: here each its own body; tools/gen_load.py models a broker's queues ----
    def _publish_key(self, ch: _Channel) -> str:
        return self.rng.choice(ch.routing_keys)

    def publish_body(self, ch: _Channel, rk: str, t: int) -> tuple:
        """The body of a message published at ``t`` with routing key ``rk``."""
        return self._random_body(self._large())

    def deliveries_ready(self, ch: _Channel, k: int, t: int) -> list:
        """Up to ``k`` messages for the consumer of ``ch`` at ``t``: (body, redelivered, routing key)."""
        rng = self.rng
        out = []
        for _ in range(k):
            redelivered, rk = rng.random() < 0.02, rng.choice(ch.routing_keys)
            out.append((self._random_body(self._large()), redelivered, rk))
        return out

    def requeue(self, ch: _Channel, messages: list) -> None:
        """``messages`` ((body, routing key)) go back to their queue; here nothing models the queue."""

    def unit_heartbeat(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        self.frames_by_type["heartbeat"] += 1
        t = self.send(u, t, conn, self.rng.random() < 0.5, self.ff.heartbeat)
        return u, t

    def unit_close(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        rng = self.rng
        m = self.m
        for ch in conn.channels:
            if ch.number > 1 and rng.random() < 0.4:
                t = self.send(u, t, conn, True, m(ch.number, spec.Channel.Close(
                    reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0)), reply=True)
                t = self.send(u, t, conn, False, m(ch.number, spec.Channel.CloseOk()), reply=True)
        t = self.send(u, t, conn, True, m(0, spec.Connection.Close(
            reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0)), reply=True)
        t = self.send(u, t, conn, False, m(0, spec.Connection.CloseOk()), reply=True)
        return u, self.fin(u, t, conn)

    def fin(self, u: list, t: int, conn: _Conn) -> int:
        """The client's FIN, the broker's, the last ACK: the connection closed; returns the time after."""
        rng = self.rng
        c, s = conn.c, conn.s
        u.append((t, c, s, c.seq, s.seq, FIN | ACK, b""))
        c.seq = (c.seq + 1) & 0xFFFFFFFF
        t += rng.randint(30, 100)
        u.append((t, s, c, s.seq, c.seq, FIN | ACK, b""))
        s.seq = (s.seq + 1) & 0xFFFFFFFF
        t += rng.randint(30, 100)
        u.append((t, c, s, c.seq, s.seq, ACK, b""))
        conn.state = "closed"
        return t + 1

    def unit_traffic(self, t: int, conn: _Conn) -> tuple[list, int]:
        rng = self.rng
        if rng.random() < self.heartbeat_fraction:
            return self.unit_heartbeat(t, conn)
        ch = rng.choice(conn.channels)
        if ch.role == "pub":
            return self.unit_publish(t, conn, ch)
        return self.unit_deliver(t, conn, ch)

    def unit_start(self, t: int) -> int:
        """When the next unit starts (tools/gen_load.py keeps them in the order they are made)."""
        return t

    def opened_in_turn(self) -> list[_Conn]:
        """The connections the run opens in turn and keeps open until the end."""
        return list(self.conns)

    def extra_unit(self, t: int) -> tuple[list, _Conn] | None:
        """A unit that is not one of the open connections' (tools/gen_load.py: a short-lived connection)."""
        return None

    # -- output -----------------------------------------------------------------
    def emit(self, p: tuple) -> None:
        ts, d, o, seq, ack, flags, payload = p
        if ts <= self.last_ts:
            ts = self.last_ts + 1
        self.last_ts = ts
        d.ipid = ipid = (d.ipid + 1) & 0xFFFF
        tsval = ((ts // 1000) + d.ts_off) & 0xFFFFFFFF
        d.last_tsval = tsval
        if payload is None:  # SYN / SYN-ACK with options
            tot = _IP_TCP_SYN_LEN
            cs = d.csum_base + tot + ipid
            cs = (cs & 0xFFFF) + (cs >> 16)
            cs = (cs & 0xFFFF) + (cs >> 16)
            hdr = _IPTCP_SYN.pack(0x45, 0, tot, ipid, 0x4000, 64, 6, cs ^ 0xFFFF, d.src, d.dst,
                                  d.sport, d.dport, seq, ack, 0xA0, flags, 64240, 0, 0,
                                  2, 4, MSS,  # MSS
                                  4, 2,  # SACK permitted
                                  8, 10, tsval, o.last_tsval if flags & ACK else 0,  # timestamps
                                  1,  # NOP
                                  3, 3, 7)  # window scale 7
            n = 0
        else:
            n = len(payload)
            tot = _IP_TCP_LEN + n
            cs = d.csum_base + tot + ipid
            cs = (cs & 0xFFFF) + (cs >> 16)
            cs = (cs & 0xFFFF) + (cs >> 16)
            hdr = _IPTCP.pack(0x45, 0, tot, ipid, 0x4000, 64, 6, cs ^ 0xFFFF, d.src, d.dst,
                              d.sport, d.dport, seq, ack, 0x80, flags, d.window, 0, 0,
                              1, 1, 8, 10, tsval, o.last_tsval)
        wire = _ETH_LEN + tot
        out = self.out
        out += _REC.pack(ts // 1_000_000, ts % 1_000_000, wire, wire)
        out += d.eth
        out += hdr
        if n:
            out += payload
        d.packets += 1
        d.payload_bytes += n
        d.wire_bytes += wire
        self.packets += 1
        if len(out) >= 8 << 20:
            self.flush()

    def flush(self) -> None:
        self.fh.write(self.out)
        self.written += len(self.out)
        self.out = bytearray()

    def size_now(self) -> int:
        return self.written + len(self.out)

    def run(self) -> dict:
        rng = self.rng
        pending = self.opened_in_turn()  # not yet opened, in order
        close_reserve = 700 * len(pending) + 64 * 1024
        idle: list[_Conn] = []
        heap: list = []
        lanes: list = [None] * self.n_lanes  # per lane: (packets of its current unit, connection)
        t0 = self.last_ts + 1000

        def next_unit(lane: int, t: int) -> bool:
            stop = self.size_now() + close_reserve >= self.target
            t = self.unit_start(t)
            conn = None
            extra = None if stop else self.extra_unit(t)
            if extra is not None:
                u, conn = extra
            elif pending and not stop and (not idle or rng.random() < 0.35):
                conn = pending.pop(0)
                u, _ = self.unit_open(t, conn)
            elif idle:
                conn = idle.pop(rng.randrange(len(idle)))
                if stop:
                    u, _ = self.unit_close(t, conn)
                else:
                    u, _ = self.unit_traffic(t, conn)
            elif stop and pending:  # size reached before every connection opened: they stay unopened
                pending.clear()
                return False
            else:
                return False
            if conn.first_ts < 0:
                conn.first_ts = u[0][0]
            lanes[lane] = (u, conn)
            heapq.heappush(heap, (u[0][0], lane, 0))
            return True

        for lane in range(self.n_lanes):
            next_unit(lane, t0 + lane * 37)
        while heap:
            _, lane, pos = heapq.heappop(heap)
            u, conn = lanes[lane]
            self.emit(u[pos])
            pos += 1
            if pos < len(u):
                heapq.heappush(heap, (u[pos][0], lane, pos))
                continue
            conn.last_ts = self.last_ts
            if conn.state == "open":
                idle.append(conn)
            gap = int(rng.expovariate(1.0 / self.gap_us)) + 1
            if not next_unit(lane, self.last_ts + gap):
                # Nothing for this lane now (every open connection is busy in another lane, or
                # closing is under way): it parks. When all lanes have parked, restart them
                # while connections remain.
                lanes[lane] = None
                if not heap:
                    for ln in range(self.n_lanes):
                        if idle or pending:
                            next_unit(ln, self.last_ts + gap + ln)
        self.flush()
        return self.truth()

    def truth(self) -> dict:
        names = {}
        for cls in vars(spec).values():
            if isinstance(cls, type) and issubclass(cls, pika.amqp_object.Class):
                for meth in vars(cls).values():
                    if isinstance(meth, type) and issubclass(meth, pika.amqp_object.Method):
                        c_name, m_name = meth.NAME.split(".")
                        m_name = re.sub(r"(?<=[a-z])([A-Z])", r"-\1", m_name)
                        names[meth.INDEX] = f"{c_name}.{m_name}".lower()  # e.g. basic.get-empty
        methods = []
        for idx, n in sorted(self.methods.items()):
            methods.append({"class_id": idx >> 16, "method_id": idx & 0xFFFF,
                            "name": names.get(idx, "?"), "count": n})
        conns = []
        for c in self.conns:
            if c.first_ts < 0:
                continue
            conns.append({
                "client_ip": c.client_ip, "client_port": c.client_port,
                "server_ip": SERVER_IP, "server_port": SERVER_PORT,
                "client_to_server": {"packets": c.c.packets, "payload_bytes": c.c.payload_bytes,
                                     "wire_bytes": c.c.wire_bytes},
                "server_to_client": {"packets": c.s.packets, "payload_bytes": c.s.payload_bytes,
                                     "wire_bytes": c.s.wire_bytes},
                "first_ts_us": c.first_ts, "last_ts_us": c.last_ts,
                "ended": "fin" if c.state == "closed" else "capture_end",
                "frame_max": c.frame_max,
                "channels": [{"number": ch.number, "role": ch.role} for ch in c.channels],
            })
        return {
            "format": "pcap", "link_type": "ethernet", "mss": MSS,
            "file_bytes": self.written, "packets": self.packets,
            "first_ts_us": min(c["first_ts_us"] for c in conns) if conns else None,
            "last_ts_us": self.last_ts,
            "connections": conns,
            "frames_by_type": dict(self.frames_by_type),
            "frames_total": sum(v for k, v in self.frames_by_type.items() if k != "protocol_header"),
            "methods": methods,
            "messages_published": self.messages_published,
            "messages_delivered": self.messages_delivered,
            "body_bytes": self.body_bytes,
        }


def default_connections(size_mb: float) -> int:
    """50 connections up to 250 MB, then one more per 5 MB, at most 200."""
    return int(max(50, min(200, size_mb / 5)))


def generate(
    path: str | os.PathLike,
    size_mb: float,
    *,
    seed: int = 0,
    connections: int | None = None,
    lanes: int = 8,
    channels: tuple[int, int] = (2, 6),
    large_fraction: float = 0.003,
    large_size: tuple[int, int] = (20_000, 200_000),
    small_size: tuple[int, int] = (50, 500),
    heartbeat_fraction: float = 0.01,
    frame_max_choices: tuple[int, ...] = (131072,),
    gap_us: int = 150,
    sidecar: bool = True,
    generator=None,
    profile: str = "mixed",
) -> dict:
    """Write an AMQP 0-9-1 capture of about ``size_mb`` MB (10^6 bytes) to ``path``.

    Returns the ground truth (also written to ``sidecar_path(path)`` unless
    ``sidecar`` is false). The file ends a little over the target (the
    connections close after it is reached).
    """
    path = Path(path)
    if connections is None:
        connections = default_connections(size_mb)
    g = (generator or _Generator)(path, size_mb, seed, connections, lanes, channels, large_fraction, large_size,
                                  small_size, heartbeat_fraction, frame_max_choices, gap_us)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        g.fh = fh
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        g.written = 24
        truth = g.run()
    truth["generator"] = {
        "version": GENERATOR_VERSION, "profile": profile, "seed": seed, "size_mb": size_mb, "connections": connections, "lanes": lanes,
        "channels": list(channels), "large_fraction": large_fraction, "large_size": list(large_size),
        "small_size": list(small_size), "heartbeat_fraction": heartbeat_fraction,
        "frame_max_choices": list(frame_max_choices), "gap_us": gap_us,
        "pika": pika.__version__,
    }
    if sidecar:
        sc = sidecar_path(path)
        sc.write_text(json.dumps(truth, indent=1) + "\n")
    os.replace(tmp, path)
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gen_capture", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="pcap file to write (ground truth goes to <stem>.truth.json)")
    ap.add_argument("--size-mb", type=float, required=True, help="target size in MB (10^6 bytes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--connections", type=int, default=None,
                    help="TCP connections (default: 50, growing to 200 for 1 GB)")
    ap.add_argument("--lanes", type=int, default=8, help="conversations interleaved at once")
    ap.add_argument("--large-fraction", type=float, default=0.003, help="share of messages with 20-200 KB bodies")
    ap.add_argument("--frame-max", type=lambda s: tuple(int(x) for x in s.split(",")), default=(131072,),
                    help="frame_max values the clients negotiate (comma-separated, chosen per connection)")
    ap.add_argument("--no-sidecar", action="store_true")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    truth = generate(a.out, a.size_mb, seed=a.seed, connections=a.connections, lanes=a.lanes,
                     large_fraction=a.large_fraction, frame_max_choices=a.frame_max,
                     sidecar=not a.no_sidecar)
    print(summary(a.out, truth, time.perf_counter() - t), file=sys.stderr)
    return 0


def summary(out: str, truth: dict, seconds: float) -> str:
    """One line on a written capture, from its ground truth."""
    mb = truth["file_bytes"] / MB
    return (f"{out}: {mb:.1f} MB, {truth['packets']} packets, {len(truth['connections'])} connections, "
            f"{truth['frames_total']} frames, {truth['messages_published']} published / "
            f"{truth['messages_delivered']} delivered, in {seconds:.1f} s ({mb / max(seconds, 1e-9):.1f} MB/s)")


if __name__ == "__main__":
    sys.exit(main())
