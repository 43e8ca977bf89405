"""Captures of real load: what a broker under a load test or a busy production system puts on the wire.

    python -m tools.gen_load OUT.pcap --size-mb 300 [--profile load|issue19] [--seed 0]

The same packets, frames and ground truth as ``tools.gen_capture`` (pika's
marshalling, TCP cut at the MSS, timestamps increasing), but the messages go
through a model of the broker, so a delivery is a message that was published:

- queues are FIFO: each publish is routed by its routing key to the queue
  bound to it and delivered later (not before ``ROUTING_US`` after it), in
  order, to the one consumer of that queue;
- bodies repeat: each routing key has a few distinct bodies (``BODIES_PER_KEY``)
  and most publishes carry no message-id, as in load tests and in many
  production systems;
- one hot queue takes ``HOT_SHARE`` of the publishes plus its share of the
  rest, about 60% (130,000 messages at 300 MB);
- consumers have a prefetch (basic.qos) and ack several deliveries at once
  (multiple), sometimes reject or nack, with requeue: the message goes back
  to the head of its queue and comes again with ``redelivered``;
- publishers use confirms;
- profile ``load``: 8 long-lived connections plus ``SHORT_LIVED`` short-lived
  ones spread over the capture (open, channel, confirm.select, a few
  publishes, close), as web workers that connect per request do;
- profile ``issue19``: the capture of issue 19, 8 connections (4 publishing,
  4 consuming), bodies of 60-110 bytes: at 300 MB 2.7M frames, 351k messages
  published and 354k delivered (redeliveries included).

Not in it (yet): AMQP 1.0 links with credit; the ground truth counts
messages (``messages_published`` / ``_delivered``) but lists no
publish/delivery pairs.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time

from tools.gen_capture import _Channel, _Conn, _Generator, generate, summary

HOT_KEY = "orders.created.eu"
HOT_SHARE = 0.45
BODIES_PER_KEY = 3
SHORT_LIVED = 10_000
MESSAGE_ID_SHARE = 0.1  # publishes that carry a message-id
ROUTING_US = 200  # a message can be delivered this long after its publish at the earliest
PROFILES = {
    # long-lived connections, short-lived ones, small body sizes (min, max)
    "load": {"long": 8, "short": SHORT_LIVED, "small_size": (60, 600)},
    "issue19": {"long": 8, "short": 0, "small_size": (60, 110)},
}


class LoadGenerator(_Generator):
    def __init__(self, *args, short: int, **kw) -> None:
        self.n_short = short
        super().__init__(*args, **kw)
        keys = _keys()
        # per routing key: a few distinct bodies (size, pool, offset, properties variant)
        self.bodies = {k: [self._random_body(False)[:4] for _ in range(BODIES_PER_KEY)] for k in keys}
        # per routing key (one queue each), a heap of (publish time, sequence, body, redelivered); a requeued
        # message goes back with time -1, ahead of every other
        self.queues: dict[str, list] = {k: [] for k in keys}
        self.seq = 0
        self.last_start = 0
        self.short_every = max(1, self.target // (self.n_short + 1)) if self.n_short else 0
        self.next_short = self.short_every
        self.shorts = [c for c in self.conns if c.index >= self.n_long]

    # -- set-up: long-lived connections publish or consume; short-lived ones publish ------------
    def _make_connections(self) -> list[_Conn]:
        self.n_long = self.n_conns
        self.n_conns = self.n_long + self.n_short
        conns = super()._make_connections()
        keys = _keys()
        consumed = []
        # every other long-lived connection consumes, each its own queue (the first the hot one): one consumer per
        # queue, so the queue's order is the order of its deliveries on the wire
        for conn in conns[1:self.n_long:2]:
            for ch in conn.channels:
                ch.role, ch.exchange = "con", "bench.events"
                rk = HOT_KEY if not consumed else keys[len(consumed)]
                ch.routing_keys, ch.queue = (rk,), _queue(rk)
                ch.consumer_tag = "ctag%d.%032x" % (ch.number, self.rng.getrandbits(128))
                ch.prefetch = self.rng.choice((50, 100, 250))
                consumed.append(rk)
        for conn in conns:
            for ch in conn.channels:
                if ch.role != "con" or conn.index >= self.n_long:  # publishers send only what someone consumes
                    ch.role, ch.exchange, ch.routing_keys = "pub", "bench.events", tuple(sorted(set(consumed)))
        return conns

    # -- short-lived connections ------------------------------------------------------------------
    def extra_unit(self, t: int):
        if not self.shorts or self.size_now() < self.next_short:
            return None
        self.next_short += self.short_every
        conn = self.shorts.pop()
        u, t = self.unit_open(t, conn)
        for _ in range(1 + int(self.rng.random() * 3)):
            more, t = self.unit_publish(t, conn, conn.channels[0])
            u += more
        more, _ = self.unit_close(t, conn)
        return u + more, conn

    def opened_in_turn(self) -> list[_Conn]:
        return [c for c in self.conns if c.index < self.n_long]

    # -- traffic ------------------------------------------------------------------------------------
    def _publish_key(self, ch: _Channel) -> str:
        if self.rng.random() < HOT_SHARE:
            return HOT_KEY
        return self.rng.choice(ch.routing_keys)

    def unit_start(self, t: int) -> int:
        # units start in the order they are made, so the queues see publishes and deliveries in time order
        self.last_start = max(t, self.last_start + 1)
        return self.last_start

    def publish_body(self, ch: _Channel, rk: str, t: int) -> tuple:
        size, pool, off, variant = self.rng.choice(self.bodies[rk])
        mid = None
        if self.rng.random() < MESSAGE_ID_SHARE:
            mid = "%032x" % self.rng.getrandbits(128)
            mid = f"{mid[:8]}-{mid[8:12]}-{mid[12:16]}-{mid[16:20]}-{mid[20:]}"
        body = (size, pool, off, variant, mid)
        self._push(rk, t, body, False)
        return body

    def _push(self, rk: str, t: int, body: tuple, redelivered: bool) -> None:
        self.seq += 1
        heapq.heappush(self.queues[rk], (t, self.seq, body, redelivered))

    def deliveries_ready(self, ch: _Channel, k: int, t: int) -> list:
        rk = ch.routing_keys[0]
        q = self.queues[rk]
        if len(q) > 20:  # a backlog: the broker sends up to the prefetch at once
            k = ch.prefetch - len(ch.unacked)
        out = []
        while q and len(out) < k and q[0][0] < t - ROUTING_US:  # routed and queued by then
            _, _, body, redelivered = heapq.heappop(q)
            out.append((body, redelivered, rk))
        return out

    def requeue(self, ch: _Channel, messages: list) -> None:
        for body, rk in messages:
            self._push(rk, -1, body, True)

    def unit_close(self, t: int, conn: _Conn):
        for ch in conn.channels:  # the broker requeues what was delivered and not acked
            self.requeue(ch, [ch.held[tag] for tag in ch.unacked])
        return super().unit_close(t, conn)


def _keys() -> tuple:
    from tools.gen_capture import _ROUTING_KEYS

    return _ROUTING_KEYS


def _queue(rk: str) -> str:
    return "bench.q.hot" if rk == HOT_KEY else "bench.q." + rk


def generate_load(path, size_mb: float, *, profile: str = "load", seed: int = 0, sidecar: bool = True,
                  short: int | None = None) -> dict:
    """Write a capture of ``profile`` of about ``size_mb`` MB; returns its ground truth (as ``generate``).

    ``short``: short-lived connections instead of the profile's (a small capture cannot hold 10,000).
    """
    p = dict(PROFILES[profile], **({} if short is None else {"short": short}))
    return generate(path, size_mb, seed=seed, connections=p["long"], channels=(1, 1), small_size=p["small_size"],
                    large_fraction=0.0, heartbeat_fraction=0.002, sidecar=sidecar,
                    generator=lambda *a, **kw: LoadGenerator(*a, short=p["short"], **kw), profile=profile)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gen_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size-mb", type=float, required=True)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="load")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    t = time.perf_counter()
    truth = generate_load(a.out, a.size_mb, profile=a.profile, seed=a.seed)
    print(summary(a.out, truth, time.perf_counter() - t), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
