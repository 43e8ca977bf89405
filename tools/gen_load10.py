"""Captures of AMQP 1.0 under load: links with credit, transfers, dispositions, flows, short connections.

    python -m tools.gen_load10 OUT.pcap --size-mb 100 [--seed 0]

The TCP, pcap and pacing of ``tools.gen_capture`` (the same lanes of units, segments cut at the MSS, the peers'
ACKs), the frames those of a broker speaking AMQP 1.0 (RabbitMQ's plugin, Qpid, Artemis, Azure Service Bus) to
clients under load, each frame packed by hand from the spec's encodings:

- every connection opens with SASL PLAIN (its credentials redacted by the decoder), both protocol headers, open,
  begin (the broker's names the client's channel in remote-channel), attach of one link;
- ``LONG`` long-lived connections, half of them senders, half receivers, four queues between them (FIFO, one
  receiver each): a sender's link waits for the broker's credit (flow, ``CREDIT``) and sends transfers of
  unsettled messages with increasing delivery-ids and tags; the broker settles them with dispositions
  (role=receiver, first..last, settled, accepted), one for a run or one per message;
- a receiver grants credit (flow: delivery-count and link-credit) and the broker sends the queue's messages as
  transfers; the receiver settles them in ranges, now and then releasing one (it comes again) or rejecting
  one, and grants more credit when half is used;
- bodies repeat (``BODIES_PER_QUEUE`` per queue), each message with a header, properties (a message-id on some),
  application-properties and one data section; a few are large (over several transfers, ``more``);
- ``SHORT`` short-lived connections spread over the capture send a few messages each and close (detach, end,
  close), as request-scoped clients do; empty frames (heartbeats) now and then.

The ground truth (``<stem>.truth.json``, as ``tools.gen_capture``'s) counts frames by type and by performative,
the messages sent each way and the dispositions.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections import Counter, deque

from tools.gen_capture import _Conn, _Generator, generate, summary

LONG = 8
SHORT = 2_000
CREDIT = (100, 250, 500)  # link credit a receiver (or the broker, for a sender) grants
QUEUES = 4
BODIES_PER_QUEUE = 3
LARGE_SHARE = 0.003  # messages of 20-200 KB, sent over several transfers
MAX_FRAME = 65_536
PLAIN = b"\x00loadtest\x00s3cret-load-Passw0rd"


# -- encodings (Part 1 §1.6) ------------------------------------------------------------------------------------
def _uint(v: int) -> bytes:
    return b"\x43" if v == 0 else (b"\x52" + bytes([v]) if v < 256 else b"\x70" + struct.pack(">I", v))


def _bool(v: bool) -> bytes:
    return b"\x41" if v else b"\x42"


def _bin(v: bytes) -> bytes:
    return (b"\xa0" + bytes([len(v)]) if len(v) < 256 else b"\xb0" + struct.pack(">I", len(v))) + v


def _str(v: str) -> bytes:
    b = v.encode()
    return (b"\xa1" + bytes([len(b)]) if len(b) < 256 else b"\xb1" + struct.pack(">I", len(b))) + b


def _sym(v: str) -> bytes:
    return b"\xa3" + bytes([len(v)]) + v.encode("ascii")


def _list(*items: bytes) -> bytes:
    if not items:
        return b"\x45"
    body = b"".join(items)
    if len(body) < 255 and len(items) < 256:
        return b"\xc0" + bytes([len(body) + 1, len(items)]) + body
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body


def _map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(k + v for k, v in pairs)
    return b"\xc1" + bytes([len(body) + 1, 2 * len(pairs)]) + body


def _described(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes([code]) + value


def _frame(body: bytes, channel: int = 0, ftype: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, channel) + body


NULL = b"\x40"
SASL_HEADER, AMQP_HEADER = b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00"
ACCEPTED, RELEASED = _described(0x24, b"\x45"), _described(0x26, b"\x45")
REJECTED = _described(0x25, _list(_described(0x1D, _list(_sym("amqp:internal-error"), _str("poison message")))))
PERFORMATIVES = {0x10: "open", 0x11: "begin", 0x12: "attach", 0x13: "flow", 0x14: "transfer", 0x15: "disposition",
                 0x16: "detach", 0x17: "end", 0x18: "close", 0x40: "sasl-mechanisms", 0x41: "sasl-init",
                 0x44: "sasl-outcome"}


class _Link:
    """A connection's one link and session as the generator keeps them."""

    def __init__(self, role: str, queue: int, credit: int) -> None:
        self.role = role  # "send": the client's transfers go to the broker; "recv": the broker's to the client
        self.queue = queue
        self.credit_grant = credit
        self.credit = 0  # what the sending side may still send
        self.delivery_count = 0
        self.next_id = 0  # the sending side's next delivery-id
        self.unsettled: list[int] = []  # ids the receiving side has not settled yet (receiver links)
        self.held: dict[int, tuple] = {}  # id -> body, for a release to requeue


class Load10Generator(_Generator):
    def __init__(self, *args, short: int, **kw) -> None:
        self.n_short = short
        super().__init__(*args, **kw)
        self.frames_by_type = {"protocol_header": 0, "sasl": 0, "amqp": 0, "empty": 0}
        self.performatives: Counter = Counter()
        self.dispositions = 0
        self.messages_released = 0
        self.messages_rejected = 0
        self.links: dict[int, _Link] = {}
        self.queues = [deque() for _ in range(QUEUES)]
        self.bodies = [[self._random_body(False)[:4] for _ in range(BODIES_PER_QUEUE)] for _ in range(QUEUES)]
        self.short_every = max(1, self.target // (self.n_short + 1)) if self.n_short else 0
        self.next_short = self.short_every
        self.shorts = [c for c in self.conns if c.index >= self.n_long]
        self.last_start = 0

    def _make_connections(self) -> list[_Conn]:
        self.n_long = self.n_conns
        self.n_conns = self.n_long + self.n_short
        return super()._make_connections()

    # -- frames (counted) ---------------------------------------------------------------------------------------
    def perf(self, code: int, fields: list[bytes], channel: int = 0, payload: bytes = b"") -> bytes:
        while fields and fields[-1] == NULL:  # trailing nulls left out, as encoders do
            fields.pop()
        sasl = code >= 0x40
        self.frames_by_type["sasl" if sasl else "amqp"] += 1
        self.performatives[PERFORMATIVES[code]] += 1
        return _frame(_described(code, _list(*fields)) + payload, channel, 1 if sasl else 0)

    def header(self, h: bytes) -> bytes:
        self.frames_by_type["protocol_header"] += 1
        return h

    def message(self, body: tuple, seq: int) -> bytes:
        size, pool, off, variant = body
        props = [_str("m-%d" % seq) if variant % 3 == 0 else NULL, NULL, _str("/queues/load"), NULL, NULL, NULL,
                 _sym("application/json")]
        self.body_bytes += size
        return (_described(0x70, _list(_bool(True))) + _described(0x73, _list(*props))
                + _described(0x74, _map([(_str("tenant"), _str("t%d" % (variant % 7))), (_str("attempt"), _uint(1))]))
                + _described(0x75, _bin(bytes(pool[off:off + size]))))

    def transfers(self, link: _Link, body: tuple, settled: bool = False) -> list[bytes]:
        """The transfer frames of one message on ``link`` (more than one for a large one)."""
        did = link.next_id
        link.next_id += 1
        payload = self.message(body, did)
        room = MAX_FRAME - 64
        parts = [payload[i:i + room] for i in range(0, len(payload), room)] or [b""]
        out = []
        for k, part in enumerate(parts):
            more = k < len(parts) - 1
            if k == 0:
                fields = [_uint(0), _uint(did), _bin(struct.pack(">Q", did)[-4 if did < 1 << 32 else -8:]), b"\x43",
                          _bool(settled), _bool(True) if more else NULL]
            else:
                fields = [_uint(0), NULL, NULL, NULL, NULL, _bool(True) if more else NULL]
            out.append(self.perf(0x14, fields, 1, part))
        link.credit -= 1
        link.delivery_count += 1
        if not settled:
            link.unsettled.append(did)
            link.held[did] = body
        return out

    def disposition(self, first: int, last: int, state: bytes) -> bytes:
        self.dispositions += 1
        return self.perf(0x15, [_bool(True), _uint(first), _uint(last) if last != first else NULL, _bool(True), state], 1)

    def flow(self, link: _Link, credit: int, next_in: int) -> bytes:
        return self.perf(0x13, [_uint(next_in), _uint(2048), _uint(link.next_id), _uint(2048), _uint(0),
                                _uint(link.delivery_count), _uint(credit)], 1)

    # -- units of conversation ------------------------------------------------------------------------------------
    def unit_start(self, t: int) -> int:
        self.last_start = max(t, self.last_start + 1)
        return self.last_start

    def unit_open(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        conn.state = "open"
        t = self.handshake(u, t, conn)
        rng = self.rng
        role = "send" if conn.index >= self.n_long or conn.index % 2 == 0 else "recv"
        link = self.links[conn.index] = _Link(role, (conn.index // 2) % QUEUES, rng.choice(CREDIT))
        name = "%s-%d-%08x" % (role, conn.index, rng.getrandbits(32))
        client_role = role == "recv"  # the client's attach: role=receiver (true) on a receiving link
        t = self.send(u, t, conn, True, self.header(SASL_HEADER), reply=True)
        t = self.send(u, t, conn, False, self.header(SASL_HEADER) + self.perf(0x40, [_sym("PLAIN")]), reply=True)
        t = self.send(u, t, conn, True, self.perf(0x41, [_sym("PLAIN"), _bin(PLAIN), _str("broker")]), reply=True)
        t = self.send(u, t, conn, False, self.perf(0x44, [b"\x50\x00"]), reply=True)
        c = (self.header(AMQP_HEADER) + self.perf(0x10, [_str("client-%d" % conn.index), _str("broker"), _uint(MAX_FRAME)])
             + self.perf(0x11, [NULL, _uint(0), _uint(2048), _uint(2048)], 1)
             + self.perf(0x12, [_str(name), _uint(0), _bool(client_role), b"\x50\x00", b"\x50\x00",
                                _described(0x28, _list(_str("/queues/q%d" % link.queue))),
                                _described(0x29, _list(_str("/queues/q%d" % link.queue))), NULL, NULL, _uint(0)], 1))
        if role == "recv":
            link.credit = link.credit_grant
            c += self.flow(link, link.credit, 0)
        t = self.send(u, t, conn, True, c, reply=True)
        s = (self.header(AMQP_HEADER) + self.perf(0x10, [_str("broker"), NULL, _uint(MAX_FRAME)])
             + self.perf(0x11, [b"\x60\x00\x01", _uint(0), _uint(2048), _uint(2048)], 1)
             + self.perf(0x12, [_str(name), _uint(0), _bool(not client_role), b"\x50\x00", b"\x50\x00",
                                _described(0x28, _list(_str("/queues/q%d" % link.queue))),
                                _described(0x29, _list(_str("/queues/q%d" % link.queue))), NULL, NULL, _uint(0)], 1))
        if role == "send":
            link.credit = link.credit_grant
            s += self.flow(link, link.credit, 0)
        t = self.send(u, t, conn, False, s)
        return u, t

    def unit_heartbeat(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        self.frames_by_type["empty"] += 1
        t = self.send(u, t, conn, True, _frame(b""))
        return u, t

    def unit_traffic(self, t: int, conn: _Conn) -> tuple[list, int]:
        if self.rng.random() < self.heartbeat_fraction:
            return self.unit_heartbeat(t, conn)
        link = self.links[conn.index]
        return self.unit_send(t, conn, link) if link.role == "send" else self.unit_receive(t, conn, link)

    def unit_send(self, t: int, conn: _Conn, link: _Link, k: int | None = None) -> tuple[list, int]:
        u: list = []
        rng = self.rng
        if link.credit <= 0:  # the broker tops the credit up first
            link.credit = link.credit_grant
            t = self.send(u, t, conn, False, self.flow(link, link.credit, link.next_id))
        k = min(k or 1 + int(rng.expovariate(0.25)), 12, link.credit)
        frames = []
        ids = []
        for _ in range(k):
            body = self._random_body(True)[:4] if rng.random() < LARGE_SHARE else rng.choice(self.bodies[link.queue])
            ids.append(link.next_id)
            frames += self.transfers(link, body)
            self.messages_published += 1
            self.queues[link.queue].append(body)
        t = self.send(u, t, conn, True, b"".join(frames), reply=True)
        if rng.random() < 0.5:
            answer = self.disposition(ids[0], ids[-1], ACCEPTED)
        else:
            answer = b"".join(self.disposition(i, i, ACCEPTED) for i in ids)
        link.unsettled.clear()
        link.held.clear()
        t = self.send(u, t, conn, False, answer)
        return u, t

    def unit_receive(self, t: int, conn: _Conn, link: _Link) -> tuple[list, int]:
        u: list = []
        rng = self.rng
        q = self.queues[link.queue]
        k = min(len(q), link.credit, 1 + int(rng.expovariate(0.3)))
        if k <= 0:
            return self.unit_heartbeat(t, conn)
        frames = []
        for _ in range(k):
            frames += self.transfers(link, q.popleft())
            self.messages_delivered += 1
        t = self.send(u, t, conn, False, b"".join(frames), reply=True)
        answer = []
        ids = link.unsettled
        r = rng.random()
        if r < 0.03:  # one released: the broker sends it again later
            did = ids.pop()
            q.appendleft(link.held.pop(did))
            self.messages_released += 1
            answer.append(self.disposition(did, did, RELEASED))
        elif r < 0.04:
            did = ids.pop()
            link.held.pop(did)
            self.messages_rejected += 1
            answer.append(self.disposition(did, did, REJECTED))
        if ids:
            answer.append(self.disposition(ids[0], ids[-1], ACCEPTED))
        ids.clear()
        link.held.clear()
        if link.credit <= link.credit_grant // 2:
            link.credit = link.credit_grant
            answer.append(self.flow(link, link.credit, link.next_id))
        t = self.send(u, t, conn, True, b"".join(answer))
        return u, t

    def unit_close(self, t: int, conn: _Conn) -> tuple[list, int]:
        u: list = []
        link = self.links.get(conn.index)
        if link is not None and link.role == "recv":  # what it had not settled goes back to the queue
            self.queues[link.queue].extendleft(reversed(list(link.held.values())))
        c = self.perf(0x16, [_uint(0), _bool(True)], 1) + self.perf(0x17, [], 1) + self.perf(0x18, [])
        s = self.perf(0x16, [_uint(0), _bool(True)], 1) + self.perf(0x17, [], 1) + self.perf(0x18, [])
        t = self.send(u, t, conn, True, c, reply=True)
        t = self.send(u, t, conn, False, s)
        return u, self.fin(u, t, conn)

    def extra_unit(self, t: int):
        if not self.shorts or self.size_now() < self.next_short:
            return None
        self.next_short += self.short_every
        conn = self.shorts.pop()
        u, t = self.unit_open(t, conn)
        more, t = self.unit_send(t, conn, self.links[conn.index], 1 + int(self.rng.random() * 3))
        u += more
        more, _ = self.unit_close(t, conn)
        return u + more, conn

    def opened_in_turn(self) -> list[_Conn]:
        return [c for c in self.conns if c.index < self.n_long]

    def truth(self) -> dict:
        out = super().truth()
        out["dialect"] = "1.0"
        out["performatives"] = dict(sorted(self.performatives.items()))
        out["dispositions"] = self.dispositions
        out["messages_released"] = self.messages_released
        out["messages_rejected"] = self.messages_rejected
        return out


def generate_load10(path, size_mb: float, *, seed: int = 0, sidecar: bool = True, short: int | None = None) -> dict:
    """Write an AMQP 1.0 load capture of about ``size_mb`` MB; returns its ground truth."""
    n_short = SHORT if short is None else short
    return generate(path, size_mb, seed=seed, connections=LONG, channels=(1, 1), small_size=(60, 600),
                    large_fraction=0.0, heartbeat_fraction=0.002, sidecar=sidecar,
                    generator=lambda *a, **kw: Load10Generator(*a, short=n_short, **kw), profile="load10")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gen_load10", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size-mb", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--short", type=int, default=None, help=f"short-lived connections (default {SHORT})")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    truth = generate_load10(a.out, a.size_mb, seed=a.seed, short=a.short)
    print(summary(a.out, truth, time.perf_counter() - t), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
