"""Capture real-broker AMQP fixtures: one small pcap per scenario, and a demo.

Starts a private RabbitMQ node on 127.0.0.1:5672 (tools/broker.py), runs each
scenario below with a real client (pika for 0-9-1, python-qpid-proton for
1.0) while ``tcpdump -i lo -s 0 -U -w FILE 'tcp port 5672'`` records it, and
writes next to each pcap an ``.oracle.json``: what the client itself counted
(published, confirmed, delivered, acked, ...) and what the broker reported
(``rabbitmqctl list_queues/list_channels/list_connections``) at named points.
Then the demo: every scenario at once, one connection each, in one capture.

    .venv/bin/python tools/make_fixtures.py     # as root, for tcpdump

Writes tests/data/broker/*.pcap|*.oracle.json|README.md|rabbitmq.log|
amqp10_proton.trace.txt|amqp10_rich.trace.txt|amqp10_rich.rabbitmq.log and
tests/data/demo/demo.pcap|demo.oracle.json. A partial run (``--only``) leaves
rabbitmq.log (the whole run's log) alone and rewrites no README section but
amqp10_rich's, pipelined_publish's and the faults' (tools/fault_fixtures.py);
those never join the demo.

    .venv/bin/python tools/make_fixtures.py --only amqp10_rich --no-demo
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika
import pika.exceptions
import pika.spec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tools.broker import RabbitNode  # noqa: E402

BROKER_DIR = ROOT / "tests" / "data" / "broker"
DEMO_DIR = ROOT / "tests" / "data" / "demo"
AMQP_PORT = 5672  # tshark decodes AMQP by this port
GUEST = pika.PlainCredentials("guest", "guest")
TIMEOUT_S = 30

# -- capture and oracle -------------------------------------------------------


class Capture:
    """tcpdump on loopback for the AMQP port, stopped with SIGINT so it flushes."""

    def __init__(self, path: Path, port: int = AMQP_PORT) -> None:
        self.path, self.port, self.stats = path, port, {}

    def __enter__(self) -> "Capture":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-n", "-s", "0", "-U", "-w", str(self.path),
             f"tcp port {self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = self.proc.stderr.readline()
        if "listening on" not in first:
            self.proc.kill()
            raise RuntimeError(f"tcpdump did not start: {first}{self.proc.stderr.read()}")
        return self

    def __exit__(self, *exc) -> None:
        # libpcap's TPACKET_V3 ring hands packets over in blocks, a block at the
        # latest 1 s after its first packet; SIGINT loses the block not yet
        # handed over. (--immediate-mode instead drops packets: with -s 0 its
        # ring holds only a handful of 256 KiB slots.)
        time.sleep(1.5)
        self.proc.send_signal(signal.SIGINT)
        rest = self.proc.communicate(timeout=20)[1]
        folder = self.path.parent.stat()  # tcpdump wrote it as user tcpdump
        os.chown(self.path, folder.st_uid, folder.st_gid)
        for key in ("captured", "received by filter", "dropped by kernel"):
            m = re.search(rf"(\d+) packets? {key}", rest)
            if m:
                self.stats["packets_" + key.replace(" ", "_")] = int(m.group(1))
        if exc[0] is None and self.stats.get("packets_dropped_by_kernel"):
            raise RuntimeError(f"{self.path.name}: tcpdump lost packets: {self.stats}")


class Run:
    """One scenario's client connections and its oracle (client counts, broker snapshots)."""

    QUEUE_COLS = ("name", "messages", "messages_ready", "messages_unacknowledged", "consumers")
    CHANNEL_COLS = ("name", "number", "messages_unacknowledged", "messages_unconfirmed",
                    "messages_uncommitted", "acks_uncommitted", "prefetch_count",
                    "consumer_count", "confirm", "transactional")
    CONNECTION_COLS = ("name", "peer_host", "peer_port", "state", "channels", "frame_max",
                       "timeout", "protocol", "user", "recv_oct", "send_oct")

    def __init__(self, node: RabbitNode, name: str, host: str = "127.0.0.1",
                 snapshots: bool = True) -> None:
        self.node, self.name, self.host, self.snapshots = node, name, host, snapshots
        self.client: collections.Counter = collections.Counter()
        self.facts: dict = {}
        self.broker: dict = {}
        self._lock = threading.Lock()

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.client[key] += n

    def connect(self, **params) -> pika.BlockingConnection:
        params.setdefault("client_properties", {"connection_name": f"fixture-{self.name}"})
        return pika.BlockingConnection(pika.ConnectionParameters(
            host=self.host, port=self.node.port, credentials=GUEST, **params))

    def snapshot(self, label: str) -> None:
        """Broker-side state now; the three rabbitmqctl calls run in parallel."""
        if not self.snapshots:
            return
        calls = {"queues": ("list_queues", self.QUEUE_COLS),
                 "channels": ("list_channels", self.CHANNEL_COLS),
                 "connections": ("list_connections", self.CONNECTION_COLS)}
        with ThreadPoolExecutor(3) as pool:
            futures = {k: pool.submit(self.node.ctl, cmd, *cols, "--formatter", "json")
                       for k, (cmd, cols) in calls.items()}
            snap = {k: json.loads(f.result()) for k, f in futures.items()}
        snap["t"] = time.time()
        with self._lock:
            self.broker[label] = snap

    def oracle(self) -> dict:
        return {"scenario": self.name, "client": dict(sorted(self.client.items())),
                "facts": self.facts, "broker": self.broker}


def pump(conn: pika.BlockingConnection, until, timeout: float = TIMEOUT_S, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what or until}")
        conn.process_data_events(time_limit=0.05)


def body(n: int, seed: int = 0) -> bytes:
    pattern = bytes((seed + i) % 256 for i in range(256))
    return (pattern * (n // 256 + 1))[:n]


class Confirms:
    """Publisher confirms on pika's async channel beneath a BlockingChannel.

    BlockingChannel.confirm_delivery waits for each publish alone, so the
    broker never acks with multiple=true; publishing in bursts here does.
    """

    def __init__(self, run: Run, conn: pika.BlockingConnection, ch) -> None:
        self.run, self.conn, self.impl = run, conn, ch._impl
        self.next_tag, self.pending = 1, set()
        selected = []
        self.impl.confirm_delivery(self._on_confirm, callback=selected.append)
        pump(conn, lambda: selected, what="confirm.select-ok")

    def _on_confirm(self, frame) -> None:
        m = frame.method
        tags = {t for t in self.pending if t <= m.delivery_tag} if m.multiple else {m.delivery_tag}
        self.pending -= tags
        kind = "confirmed" if isinstance(m, pika.spec.Basic.Ack) else "broker_nacked"
        self.run.count(kind, len(tags))
        self.run.count(f"{kind}_frames")
        if m.multiple:
            self.run.count(f"{kind}_multiple_frames")

    def publish(self, exchange: str, key: str, payload: bytes, **kw) -> None:
        self.impl.basic_publish(exchange, key, payload, **kw)
        self.pending.add(self.next_tag)
        self.next_tag += 1
        self.run.count("published")

    def wait(self) -> None:
        pump(self.conn, lambda: not self.pending, what="publisher confirms")


def publish_plain(run: Run, ch, queue: str, n: int, size: int = 64) -> None:
    for _ in range(n):
        i = run.client["published"]
        ch.basic_publish("", queue, body(size, i),
                         pika.BasicProperties(message_id=f"{run.name}-{i}", delivery_mode=1))
        run.count("published")


# -- 0-9-1 scenarios ---------------------------------------------------------

SCENARIOS: dict = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


@scenario
def publish_confirms(run: Run) -> None:
    """confirm.select, then bursts of publishes the broker acks, mostly with
    multiple=true; one mandatory publish to an unroutable key (basic.return,
    then its basic.ack)."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    ch._impl.add_on_return_callback(lambda *a: run.count("returned"))
    confirms = Confirms(run, conn, ch)
    for burst in range(3):
        for i in range(50):
            confirms.publish("", q, body(100, i), properties=pika.BasicProperties(
                message_id=f"{burst}-{i}", content_type="application/octet-stream"))
        confirms.wait()
    confirms.publish("amq.direct", "no-such-binding", b"unroutable", mandatory=True)
    confirms.wait()
    pump(conn, lambda: run.client["returned"], what="basic.return")
    run.snapshot("after_confirms")
    ch.queue_delete(q)
    conn.close()


@scenario
def consume_prefetch_ack(run: Run) -> None:
    """basic.qos prefetch 10, basic.consume, 40 deliveries; acks of every
    fifth tag with multiple=true and of tags 2, 7, ... alone; basic.cancel."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    confirms = Confirms(run, conn, ch)
    for i in range(40):
        confirms.publish("", q, body(200, i))
    confirms.wait()
    ch.basic_qos(prefetch_count=10)
    received = []
    tag = ch.basic_consume(q, lambda c, m, p, b: received.append(m.delivery_tag))
    pump(conn, lambda: len(received) >= 10, what="first 10 deliveries")
    conn.process_data_events(time_limit=0.3)  # prefetch must hold the 11th back
    run.facts["delivered_before_first_ack"] = len(received)
    run.snapshot("prefetch_full")
    outstanding, done = set(), 0
    while done < 40:
        pump(conn, lambda: done < len(received), what="deliveries")
        t = received[done]
        done += 1
        run.count("delivered")
        outstanding.add(t)
        if t % 5 == 0:
            ch.basic_ack(t, multiple=True)
            run.count("acked", len(outstanding))
            run.count("ack_multiple_frames")
            outstanding.clear()
        elif t % 5 == 2:
            ch.basic_ack(t)
            run.count("acked")
            outstanding.discard(t)
        run.count("ack_frames", t % 5 in (0, 2))
    ch.basic_cancel(tag)
    run.snapshot("after_cancel")
    ch.queue_delete(q)
    conn.close()


@scenario
def nack_reject(run: Run) -> None:
    """10 deliveries settled every way: nack requeue (redelivered), nack drop,
    reject requeue, reject drop, nack multiple drop, ack multiple; dropped
    messages dead-letter into a second queue."""
    conn = run.connect()
    ch = conn.channel()
    dlq = ch.queue_declare(f"{run.name}.dead").method.queue
    q = ch.queue_declare(run.name, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}).method.queue
    publish_plain(run, ch, q, 10)
    deliveries = []
    tag = ch.basic_consume(q, lambda c, m, p, b: deliveries.append(m))
    pump(conn, lambda: len(deliveries) >= 10, what="10 deliveries")
    run.count("delivered", 10)
    ch.basic_nack(1, requeue=True)
    ch.basic_nack(2, requeue=False)
    ch.basic_reject(3, requeue=True)
    ch.basic_reject(4, requeue=False)
    ch.basic_nack(7, multiple=True, requeue=False)  # 5, 6, 7
    ch.basic_ack(10, multiple=True)  # 8, 9, 10
    run.client.update(nacked=5, nack_frames=3, rejected=2, reject_frames=2, requeued=2,
                      dead_lettered=5, acked=3, ack_frames=1)
    pump(conn, lambda: len(deliveries) >= 12, what="2 redeliveries")
    redelivered = deliveries[10:]
    run.count("delivered", len(redelivered))
    run.count("redelivered", sum(m.redelivered for m in redelivered))
    ch.basic_ack(redelivered[-1].delivery_tag, multiple=True)
    run.count("acked", 2)
    run.count("ack_frames")
    ch.basic_cancel(tag)
    conn.process_data_events(time_limit=0.2)
    run.snapshot("settled")
    for name in (q, dlq):
        ch.queue_delete(name)
    conn.close()


@scenario
def basic_get(run: Run) -> None:
    """basic.get: two get-ok acked, one with auto-ack, then two get-empty."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    publish_plain(run, ch, q, 3)
    for auto_ack in (False, False, True, True, True):
        method, _props, _body = ch.basic_get(q, auto_ack=auto_ack)
        if method is None:
            run.count("get_empty")
            continue
        run.count("get_ok")
        run.facts.setdefault("get_ok_message_counts", []).append(method.message_count)
        if not auto_ack:
            ch.basic_ack(method.delivery_tag)
            run.count("acked")
    run.snapshot("drained")
    ch.queue_delete(q)
    conn.close()


@scenario
def mandatory_return(run: Run) -> None:
    """mandatory publishes without confirms: two unroutable (basic.return
    312 NO_ROUTE), one routable."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    ch.queue_bind(q, "amq.direct", routing_key="routable")
    ch.add_on_return_callback(lambda c, m, p, b: run.facts.setdefault(
        "returns", []).append([m.reply_code, m.reply_text, m.exchange, m.routing_key]))
    for key in ("nowhere-1", "routable", "nowhere-2"):
        ch.basic_publish("amq.direct", key, key.encode(), mandatory=True)
        run.count("published")
    pump(conn, lambda: len(run.facts.get("returns", [])) >= 2, what="2 basic.return")
    run.count("returned", len(run.facts["returns"]))
    run.snapshot("after_publish")
    ch.queue_delete(q)
    conn.close()


@scenario
def tx(run: Run) -> None:
    """tx.select; 3 publishes committed, 2 rolled back, 1 committed; a
    basic.get acked inside a transaction and committed."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    ch.tx_select()
    for n, end in ((3, ch.tx_commit), (2, ch.tx_rollback), (1, ch.tx_commit)):
        publish_plain(run, ch, q, n)
        end()
        run.count("committed" if end == ch.tx_commit else "rolled_back", n)
    method, _props, _body = ch.basic_get(q)
    ch.basic_ack(method.delivery_tag)
    run.snapshot("ack_uncommitted")
    ch.tx_commit()
    run.client.update(get_ok=1, acked=1)
    run.snapshot("committed")
    ch.queue_delete(q)
    conn.close()


@scenario
def topology(run: Run) -> None:
    """exchange.declare (direct, topic, fanout, headers), exchange.bind and
    unbind, queue.declare (named with TTL, server-named exclusive),
    queue.bind/unbind, queue.purge, queue.delete, exchange.delete."""
    conn = run.connect()
    ch = conn.channel()
    ex = {kind: f"{run.name}.{kind}" for kind in ("direct", "topic", "fanout", "headers")}
    for kind, name in ex.items():
        ch.exchange_declare(name, exchange_type=kind)
    ch.exchange_declare("amq.topic", exchange_type="topic", passive=True)
    ch.exchange_bind(destination=ex["topic"], source=ex["direct"], routing_key="to-topic")
    q = ch.queue_declare(f"{run.name}.q", arguments={"x-message-ttl": 60000}).method.queue
    anon = ch.queue_declare("", exclusive=True).method.queue
    run.facts["server_named_queue"] = anon
    ch.queue_bind(q, ex["topic"], routing_key="a.*")
    ch.queue_bind(q, ex["fanout"])
    ch.queue_bind(anon, ex["headers"], arguments={"x-match": "all", "kind": "demo"})
    for exchange, key, headers in ((ex["direct"], "to-topic", None), (ex["topic"], "a.b", None),
                                   (ex["fanout"], "", None), (ex["headers"], "", {"kind": "demo"})):
        ch.basic_publish(exchange, key, b"routed", pika.BasicProperties(headers=headers))
        run.count("published")
    run.snapshot("bound")
    run.facts["purged"] = ch.queue_purge(q).method.message_count
    ch.queue_unbind(q, ex["topic"], routing_key="a.*")
    ch.exchange_unbind(destination=ex["topic"], source=ex["direct"], routing_key="to-topic")
    ch.queue_delete(q, if_unused=True)
    ch.queue_delete(anon)
    for name in ex.values():
        ch.exchange_delete(name)
    conn.close()


@scenario
def channel_error(run: Run) -> None:
    """channel.close from the broker: 406 on a queue redeclared with other
    arguments, 404 on a passive declare of a missing queue, 404 on a publish
    to a missing exchange, 406 on an ack of an unknown delivery tag."""
    conn = run.connect()
    q = f"{run.name}.q"
    conn.channel().queue_declare(q, arguments={"x-max-length": 10})
    errors = [
        lambda ch: ch.queue_declare(q, arguments={"x-max-length": 20}),
        lambda ch: ch.queue_declare(f"{run.name}.absent", passive=True),
        lambda ch: (ch.basic_publish("no.such.exchange", "k", b"lost"),
                    pump(conn, lambda: ch.is_closed, what="channel.close 404")),
        lambda ch: (ch.basic_ack(99), pump(conn, lambda: ch.is_closed, what="channel.close 406")),
    ]
    codes = []
    for provoke in errors:
        ch = conn.channel()
        try:
            provoke(ch)
        except pika.exceptions.ChannelClosedByBroker as e:
            codes.append([e.reply_code, e.reply_text])
        else:
            codes.append([ch._closing_reason.reply_code, ch._closing_reason.reply_text])
    run.facts["channel_close"] = codes
    run.count("channel_errors", len(codes))
    run.count("published")
    ch = conn.channel()
    ch.queue_delete(q)
    conn.close()


@scenario
def large_body(run: Run) -> None:
    """frame_max 4096: bodies of 20000 (5 body frames), 4088 (exactly one
    full body frame), 4089 (one byte over) and 0 (no body frame) octets,
    fetched back with basic.get."""
    conn = run.connect(frame_max=4096)
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    sizes = [20000, 4088, 4089, 0]
    for i, size in enumerate(sizes):
        ch.basic_publish("", q, body(size, i), pika.BasicProperties(message_id=str(size)))
        run.count("published")
    got = []
    for i, size in enumerate(sizes):
        method, props, payload = ch.basic_get(q, auto_ack=True)
        assert payload == body(size, i), f"body {size} came back different"
        got.append(len(payload))
    run.facts.update(frame_max=4096, body_sizes=got)
    run.count("get_ok", len(got))
    run.snapshot("drained")
    ch.queue_delete(q)
    conn.close()


@scenario
def heartbeat(run: Run) -> None:
    """heartbeat 2 s negotiated; 5 s idle, one publish and get, 3 s more idle
    (both sides send a heartbeat frame every second)."""
    conn = run.connect(heartbeat=2)  # 1 s: the broker saw missed heartbeats under load
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    snap = threading.Thread(target=run.snapshot, args=("idle",))  # pika keeps beating meanwhile
    snap.start()
    conn.sleep(5)
    snap.join()
    publish_plain(run, ch, q, 1)
    ch.basic_get(q, auto_ack=True)
    run.count("get_ok")
    conn.sleep(3)
    ch.queue_delete(q)
    conn.close()


@scenario
def connection_blocked(run: Run) -> None:
    """A publisher sends every 20 ms while the memory watermark is set very
    low and back to 0.4: connection.blocked, then connection.unblocked."""
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    events = {"blocked": threading.Event(), "unblocked": threading.Event()}
    conn.add_on_connection_blocked_callback(lambda c, f: events["blocked"].set())
    conn.add_on_connection_unblocked_callback(lambda c, f: events["unblocked"].set())

    def alarm() -> None:
        time.sleep(1)
        run.node.ctl("set_vm_memory_high_watermark", "0.0000001")
        events["blocked"].wait(TIMEOUT_S)
        run.snapshot("blocked")
        time.sleep(1)
        run.node.ctl("set_vm_memory_high_watermark", "0.4")

    alarm_thread = threading.Thread(target=alarm)
    alarm_thread.start()
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while not events["unblocked"].is_set() and time.monotonic() < deadline:
        publish_plain(run, ch, q, 1)
        conn.process_data_events(time_limit=0.02)
    alarm_thread.join()
    conn.sleep(0.5)
    run.facts.update({k: e.is_set() for k, e in events.items()})
    run.facts["queue_messages_after"] = ch.queue_declare(q, passive=True).method.message_count
    ch.queue_delete(q)
    conn.close()


@scenario
def connection_forced(run: Run) -> None:
    """rabbitmqctl close_connection: connection.close 320 CONNECTION_FORCED
    from the broker; pika answers with a FIN and no close-ok, the broker
    with a RST."""
    conn = run.connect()
    conn.channel().queue_declare(run.name, exclusive=True)
    run.snapshot("before_close")
    name = f"fixture-{run.name}"
    for line in run.node.ctl("list_connections", "pid", "client_properties",
                             "--no-table-headers").splitlines():
        if f'"{name}"' in line:
            run.node.ctl("close_connection", line.split("\t")[0], "amqplens fixture: forced close")
    try:
        pump(conn, lambda: False, timeout=10, what="connection.close")
    except pika.exceptions.ConnectionClosedByBroker as e:
        run.facts["connection_close"] = [e.reply_code, e.reply_text]


# -- AMQP 1.0 (python-qpid-proton, in a subprocess for PN_TRACE_FRM) --------

class StepScript:
    """The plumbing of a proton handler that runs a script of steps: ``start_steps`` schedules a timer that polls
    the generator (it yields (what, ready) waits) every 10 ms, a wait longer than TIMEOUT_S raises. A mixin before
    proton's MessagingHandler (this module imports proton only where a client runs)."""

    label = "proton script"
    steps = None
    waiting = None
    deadline = 0.0

    def start_steps(self, container, steps) -> None:
        self.container, self.steps = container, steps
        container.schedule(0.01, self)

    def steps_done(self) -> None:
        """Called when the script has run to its end."""

    def on_timer_task(self, event) -> None:
        while self.steps is not None:
            if self.waiting is not None:
                what, ready = self.waiting
                if not ready():
                    if time.monotonic() > self.deadline:
                        raise TimeoutError(f"{self.label}: gave up waiting for {what}")
                    break
            try:
                self.waiting = next(self.steps)
            except StopIteration:
                self.steps = None
                self.steps_done()
                return
            self.deadline = time.monotonic() + TIMEOUT_S
        self.container.schedule(0.01, self)

    @staticmethod
    def pause(seconds: float):
        until = time.monotonic() + seconds
        return f"{seconds} s", lambda: time.monotonic() >= until

    @staticmethod
    def link(ssn, kind: str, name: str, addr: str, snd_settle_mode: int | None = None):
        """An attached sender or receiver (snd-settle-mode unsettled unless given, rcv-settle-mode first)."""
        from proton import Link
        lnk = ssn.sender(name) if kind == "sender" else ssn.receiver(name)
        (lnk.target if kind == "sender" else lnk.source).address = addr
        lnk.snd_settle_mode = Link.SND_UNSETTLED if snd_settle_mode is None else snd_settle_mode
        lnk.rcv_settle_mode = Link.RCV_FIRST
        lnk.open()
        return lnk


def proton_client(url: str, address: str, n: int) -> dict:
    from proton import Delivery, Message
    from proton.utils import BlockingConnection
    counts = collections.Counter()
    conn = BlockingConnection(url, timeout=TIMEOUT_S, user="guest", password="guest",
                              allowed_mechs="PLAIN", allow_insecure_mechs=True,
                              container_id=f"fixture-{address.rsplit('/', 1)[-1]}")
    sender = conn.create_sender(address)
    for i in range(n):
        d = sender.send(Message(id=f"m{i}", body=f"amqp 1.0 message {i}",
                                properties={"seq": i}, durable=False))
        counts["published"] += 1
        counts["accepted_by_broker"] += d.remote_state == Delivery.ACCEPTED
    receiver = conn.create_receiver(address, credit=n)
    for i in range(n + 1):  # the released one comes back
        msg = receiver.receive(timeout=TIMEOUT_S)
        counts["delivered"] += 1
        counts["redelivered"] += not msg.first_acquirer  # RabbitMQ keeps delivery-count 0
        if i == 1:
            receiver.release(delivered=False)
            counts["released"] += 1
        elif i == 2:
            receiver.reject()
            counts["rejected"] += 1
        else:
            receiver.accept()
            counts["accepted"] += 1
    # detach closed=true without waiting: RabbitMQ 3.10 answers with a detach
    # lacking closed=true, which BlockingLink.close() waits on until timeout
    receiver.link.close()
    sender.link.close()
    conn.close()
    return dict(counts)


def amqp10_proton(run: Run, trace: Path | None = None) -> None:
    """AMQP 1.0 from python-qpid-proton, SASL PLAIN guest/guest: 5 transfers
    to /queue/<name> (accepted), then a receiver with credit 5 that accepts
    four, releases one (redelivered, first-acquirer false) and rejects one;
    the links detach, the connection closes."""
    cmd = [sys.executable, __file__, "--proton-client",
           f"amqp://{run.host}:{run.node.port}", f"/queue/{run.name}", "5"]
    env = dict(os.environ, PN_TRACE_FRM="1")
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if res.returncode:
        raise RuntimeError(f"proton client failed:\n{res.stderr[-3000:]}")
    if trace is not None:
        trace.write_text(res.stderr)
    run.client.update(json.loads(res.stdout.splitlines()[-1]))
    run.snapshot("after_close")
    run.node.ctl("delete_queue", run.name)


SCENARIOS["amqp10_proton"] = amqp10_proton


# -- AMQP 1.0, what amqp10_proton lacks (proton's reactor API) ---------------

RICH_FRAME_MAX = 4096  # the client's max-frame-size; RabbitMQ answers with the same
RICH_LARGE = 20000  # body octets: five transfers (more=true on four) each way
RICH_NOPERM_PASSWORD = "noperm"  # of the user QUEUE-noperm, added without permissions


def proton_rich_client(url: str, queue: str) -> dict:
    """The amqp10_rich client: a script of steps on proton's reactor, each
    waiting for what the broker's frames make true (a timer polls every
    10 ms). Returns the client's counts and facts."""
    from proton import Condition, Endpoint, Link, Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    counts: collections.Counter = collections.Counter()
    facts: dict = {"deliveries": [], "remote_errors": [], "local_errors": []}
    address = f"/queue/{queue}"
    remote_closed = Endpoint.REMOTE_CLOSED

    def condition(name: str, text: str) -> Condition:
        return Condition(name, f"amqplens fixture: {text}")

    def err(kind: str, name: str, cond) -> dict:
        return {"on": kind, "name": name, "condition": cond.name, "description": cond.description}

    class Script(StepScript, MessagingHandler):
        label = "amqp10_rich"

        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
            self.received: dict = collections.defaultdict(list)  # link name -> [(delivery, message)]
            self.detached: set = set()  # links the broker detached, closed or not

        # -- plumbing: the step generator, polled by a timer

        def on_start(self, event) -> None:
            self.conn = event.container.connect(
                url, handler=self, reconnect=False, max_frame_size=RICH_FRAME_MAX,
                user="guest", password="guest", allowed_mechs="PLAIN",
                allow_insecure_mechs=True, container_id="fixture-amqp10_rich")
            self.start_steps(event.container, self.script())

        def gone(self, lnk) -> bool:
            return bool(lnk.state & remote_closed) or lnk.name in self.detached

        # -- what the broker does

        def on_message(self, event) -> None:
            d, m = event.delivery, event.message
            self.received[event.link.name].append((d, m))
            counts["delivered"] += 1
            counts["delivered_settled"] += d.settled
            counts["redelivered"] += not m.first_acquirer
            size = len(m.body)
            if size == RICH_LARGE:
                counts["large_intact"] += bytes(m.body) == body(RICH_LARGE, 3)
            facts["deliveries"].append({"link": event.link.name, "message_id": m.id,
                                        "settled": d.settled, "first_acquirer": m.first_acquirer,
                                        "body_octets": size})
            if d.settled:
                d.settle()  # pre-settled by the broker: no disposition goes back

        def on_accepted(self, event) -> None:
            counts["accepted_by_broker"] += 1

        def on_rejected(self, event) -> None:
            counts["rejected_by_broker"] += 1

        def on_released(self, event) -> None:
            counts["released_by_broker"] += 1

        def on_link_remote_detach(self, event) -> None:
            self.detached.add(event.link.name)
            event.link.detach()

        def on_link_error(self, event) -> None:
            facts["remote_errors"].append(err("detach", event.link.name, event.link.remote_condition))

        def on_session_error(self, event) -> None:
            facts["remote_errors"].append(err("end", "", event.session.remote_condition))

        def on_connection_error(self, event) -> None:
            facts["remote_errors"].append(err("close", "", event.connection.remote_condition))

        def on_transport_error(self, event) -> None:
            cond = event.transport.condition
            if cond is not None:
                facts["remote_errors"].append(err("transport", "", cond))

        # -- the script

        def settle_as(self, d, outcome: str) -> None:
            if outcome == "release":
                self.release(d, delivered=False)  # released; delivered=True would send modified
            else:
                getattr(self, outcome)(d)
            counts[{"accept": "accepted", "reject": "rejected", "release": "released"}[outcome]] += 1

        def script(self):
            c = self.conn
            yield "open", lambda: c.state & Endpoint.REMOTE_ACTIVE
            facts["max_frame_size"] = {"client": c.transport.max_frame_size,
                                       "broker": c.transport.remote_max_frame_size}
            s1 = c.session()
            s1.open()
            # unsettled sends (the broker settles them with accepted), one larger than a frame
            u = self.link(s1, "sender", "rich-unsettled", address, Link.SND_UNSETTLED)
            yield "credit for rich-unsettled", lambda: u.credit > 0
            for i, payload in enumerate(["unsettled 0", "unsettled 1", "unsettled 2",
                                         body(RICH_LARGE, 3)]):
                u.send(Message(id=f"u{i}", body=payload, durable=False))
                counts["published_unsettled"] += 1
            yield "4 accepted", lambda: counts["accepted_by_broker"] == 4
            # pre-settled sends
            p = self.link(s1, "sender", "rich-presettled", address, Link.SND_SETTLED)
            yield "credit for rich-presettled", lambda: p.credit > 0
            for i in range(3):
                p.send(Message(id=f"p{i}", body=f"presettled {i}", durable=False))
                counts["published_presettled"] += 1
            # a receiver with credit 1, then 2, then 2: it runs dry between grants
            r = self.link(s1, "receiver", "rich-credit", address, Link.SND_UNSETTLED)
            yield "rich-credit attached", lambda: r.state & Endpoint.REMOTE_ACTIVE
            got = self.received["rich-credit"]
            for grant, outcomes in ((1, ["accept"]), (2, ["reject", "release"]),
                                    (2, ["accept", "accept"])):
                if got:
                    yield self.pause(0.3)  # no credit: the broker holds the next message
                r.flow(grant)
                counts["credit_granted"] += grant
                counts["flow_grants"] += 1
                want = len(got) + grant
                yield f"{grant} on rich-credit", lambda want=want: len(got) >= want
                for (d, _m), outcome in zip(got[-grant:], outcomes):
                    self.settle_as(d, outcome)
            r.close()
            yield "rich-credit detached", lambda: self.gone(r)
            # a receiver asking the broker to pre-settle (snd-settle-mode settled)
            ps = self.link(s1, "receiver", "rich-settled", address, Link.SND_SETTLED)
            ps.flow(3)
            counts["credit_granted"] += 3
            counts["flow_grants"] += 1
            yield "3 on rich-settled", lambda: len(self.received["rich-settled"]) == 3
            ps.condition = condition("amqp:link:detach-forced", "the client detaches with an error")
            facts["local_errors"].append(err("detach", ps.name, ps.condition))
            ps.close()
            u.close()
            p.close()
            yield "links detached", lambda: all(map(self.gone, (ps, u, p)))
            s1.close()
            yield "session 1 ended", lambda: s1.state & remote_closed
            # the client ends a session with an error
            s2 = c.session()
            s2.open()
            yield "session 2 begun", lambda: s2.state & Endpoint.REMOTE_ACTIVE
            s2.condition = condition("amqp:internal-error", "the client ends a session with an error")
            facts["local_errors"].append(err("end", "session 2", s2.condition))
            s2.close()
            yield "session 2 ended", lambda: s2.state & remote_closed
            # a link the broker refuses: it ends the session with amqp:not-found
            s3 = c.session()
            s3.open()
            self.link(s3, "sender", "rich-missing", f"/exchange/{queue}.missing/key",
                      Link.SND_UNSETTLED)
            yield "session 3 ended by the broker", lambda: s3.state & remote_closed
            # drain on a session of its own
            s4 = c.session()
            s4.open()
            dr = self.link(s4, "receiver", "rich-drain", address, Link.SND_UNSETTLED)
            yield "rich-drain attached", lambda: dr.state & Endpoint.REMOTE_ACTIVE
            dr.drain(5)
            counts["drain_requests"] += 1
            yield "drain answered", lambda: (s4.state & remote_closed or self.gone(dr)
                                             or (dr.credit == 0 and not dr.draining()))
            facts["drain"] = {"session_ended": bool(s4.state & remote_closed),
                              "link_detached": self.gone(dr), "credit": dr.credit}
            yield self.pause(0.2)
            c.close()
            yield "connection closed", lambda: c.state & remote_closed
            # a second connection, as a user without permissions: the broker lets SASL and
            # open through, then closes the connection with an error on the first begin/attach
            c2 = self.container.connect(
                url, handler=self, reconnect=False, user=f"{queue}-noperm",
                password=RICH_NOPERM_PASSWORD, allowed_mechs="PLAIN", allow_insecure_mechs=True,
                container_id="fixture-amqp10_rich-noperm")
            yield "connection 2 open", lambda: c2.state & Endpoint.REMOTE_ACTIVE
            s5 = c2.session()
            s5.open()
            self.link(s5, "sender", "rich-noperm", address, Link.SND_UNSETTLED)
            yield "connection 2 closed by the broker", lambda: c2.state & remote_closed

    Container(Script()).run()
    return dict(counts) | {"facts": facts}


def amqp10_rich(run: Run, trace: Path | None = None) -> None:
    """AMQP 1.0 from python-qpid-proton's reactor, max-frame-size 4096 (the
    broker answers 4096): unsettled sends the broker accepts (one of 20000
    octets: five transfers, more=true on four), three pre-settled sends; a
    receiver with credit 1, 2, 2 that runs dry between grants (accepts,
    rejects, releases; the released message comes back) and receives the
    large message in five transfers; a receiver asking for pre-settled
    transfers, detached by the client with an error; a session ended by the
    client with an error; an attach to a missing exchange (the broker ends
    the session, amqp:not-found); drain on a classic queue (the broker ends
    the session, amqp:internal-error); the connection closes without error.
    A second connection, as a user without permissions (SASL and open pass),
    is closed by the broker at its first begin/attach (close
    amqp:unauthorized-access)."""
    cmd = [sys.executable, __file__, "--proton-rich-client",
           f"amqp://{run.host}:{run.node.port}", run.name]
    env = dict(os.environ, PN_TRACE_FRM="1")
    log_start = run.node.log_path.stat().st_size
    noperm = f"{run.name}-noperm"
    run.node.ctl("add_user", noperm, RICH_NOPERM_PASSWORD)  # no set_permissions
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        run.node.ctl("delete_user", noperm)
    if res.returncode:
        raise RuntimeError(f"proton client failed:\n{res.stderr[-3000:]}")
    if trace is not None:
        trace.write_text(res.stderr)
    lines = res.stdout.splitlines()
    out = json.loads(lines[-1])
    run.facts.update(out.pop("facts"))
    run.client.update(out)
    run.snapshot("after_close")
    run.node.ctl("delete_queue", run.name)
    with open(run.node.log_path, "rb") as log:  # the broker's side of it: the drain crash
        log.seek(log_start)
        (BROKER_DIR / f"{run.name}.rabbitmq.log").write_bytes(log.read())


PIPELINED_CHANNELS = 3
PIPELINED_ROUNDS = 200  # publishes per channel: about 220 KB client -> broker, in 64 KB loopback segments
PIPELINED_BODY = 256


def pipelined_publish(run: Run) -> None:
    """One pika publisher with three confirm-mode channels that publishes 256-octet
    bodies round robin, 600 in one burst without waiting (pika writes them as
    fast as the socket takes them, so loopback carries them in segments of tens
    of kilobytes, at most 65,483 (its MSS), frames of the three channels
    interleaved), then waits for the confirms and closes."""
    conn = run.connect()
    channels = [conn.channel() for _ in range(PIPELINED_CHANNELS)]
    q = channels[0].queue_declare(run.name).method.queue
    confirms = [Confirms(run, conn, ch) for ch in channels]
    for i in range(PIPELINED_ROUNDS):
        for n, c in enumerate(confirms):
            c.publish("", q, body(PIPELINED_BODY, i + n), properties=pika.BasicProperties(
                message_id=f"{n + 1}-{i}", delivery_mode=1))
    for c in confirms:
        c.wait()
    run.snapshot("after_confirms")
    channels[0].queue_delete(q)
    conn.close()


# Run alone, never in the demo: amqp10_rich needs max-frame-size 4096 answered by a quiet broker,
# adds a user, and crashes sessions on purpose; pipelined_publish wants the segments of one burst.
SOLO_SCENARIOS = {"amqp10_rich": amqp10_rich, "pipelined_publish": pipelined_publish}
TRACED = ("amqp10_proton", "amqp10_rich")  # PN_TRACE_FRM output kept as NAME.trace.txt

# -- driver -----------------------------------------------------------------


def tshark_methods(pcap: Path) -> collections.Counter:
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "amqp",
         "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
         "-e", "amqp.method.class", "-e", "amqp.method.method", "-e", "amqp.performative"],
        capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in out.splitlines():
        classes, methods, performatives = (line.split("\t") + ["", ""])[:3]
        for c, m in zip(classes.split(";"), methods.split(";")):
            if c:
                counts[f"{c}.{m}"] += 1
        for p in filter(None, performatives.split(";")):
            counts[p] += 1
    return counts


def all_scenarios() -> dict:
    from tools.fault_fixtures import FAULTS  # solo too: faults caused on purpose (issue 34)
    return SCENARIOS | SOLO_SCENARIOS | FAULTS


def fault_names() -> set:
    from tools.fault_fixtures import FAULTS
    return set(FAULTS)


def run_scenario(node: RabbitNode, name: str) -> dict:
    pcap = BROKER_DIR / f"{name}.pcap"
    run = Run(node, name)
    t0 = time.monotonic()
    log_start = node.log_path.stat().st_size
    with Capture(pcap) as cap:
        if name in TRACED:
            after = all_scenarios()[name](run, trace=BROKER_DIR / f"{name}.trace.txt")
        else:
            after = all_scenarios()[name](run)
    if callable(after):  # what must stay out of the capture (closing what a fault left open)
        after()
    if name in fault_names():  # the broker's side of it
        time.sleep(0.5)
        with open(node.log_path, "rb") as log:
            log.seek(log_start)
            (BROKER_DIR / f"{name}.rabbitmq.log").write_bytes(log.read())
    oracle = run.oracle() | {"pcap": pcap.name, "capture": cap.stats,
                             "seconds": round(time.monotonic() - t0, 2)}
    write_json(BROKER_DIR / f"{name}.oracle.json", oracle)
    return oracle


def run_demo(node: RabbitNode) -> dict:
    """Every scenario at once, one connection each (basic_get over ::1 when
    the host has IPv6); the memory alarm then blocks the other publishers too."""
    pcap = DEMO_DIR / "demo.pcap"
    runs = [Run(node, name, host="::1" if name == "basic_get" and node.ipv6 else "127.0.0.1",
                snapshots=False)  # dozens of concurrent rabbitmqctl VMs starve the clients
            for name in SCENARIOS]
    t0 = time.monotonic()
    with Capture(pcap) as cap, ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(SCENARIOS[r.name], r) for r in runs]
        for f in futures:
            f.result()
    oracle = {"pcap": pcap.name, "capture": cap.stats,
              "seconds": round(time.monotonic() - t0, 2),
              "scenarios": {r.name: r.oracle() for r in runs}}
    write_json(DEMO_DIR / "demo.oracle.json", oracle)
    return oracle


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def tool_version(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout or out.stderr).splitlines()[0].strip()


def tshark_count(pcap: Path, display_filter: str) -> int:
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", display_filter],
                         capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def write_readme(versions: dict, argv: list[str], results: dict, seconds: float) -> None:
    import proton
    pcaps = [BROKER_DIR / f"{name}.pcap" for name in results] + [DEMO_DIR / "demo.pcap"]
    retrans = {p.name: tshark_count(p, "tcp.analysis.retransmission") for p in pcaps}
    ooo = {p.name: tshark_count(p, "tcp.analysis.out_of_order") for p in pcaps}
    rows = []
    for name, oracle in results.items():
        size = (BROKER_DIR / f"{name}.pcap").stat().st_size
        doc = " ".join((all_scenarios()[name].__doc__ or "").split())
        rows.append(f"| `{name}.pcap` | {size} | {doc} |")
    demo_size = (DEMO_DIR / "demo.pcap").stat().st_size
    text = f"""# Real-broker fixtures

Generated by `tools/make_fixtures.py`; do not edit by hand, regenerate instead:

    tools/setup_system.sh            # tshark, tcpdump, rabbitmq-server
    {' '.join(argv)}

(both as root, tcpdump needs it; the script starts its own RabbitMQ node on
127.0.0.1:5672 and ::1:5672 from a temporary folder, see `tools/broker.py`,
and fails if something else already listens on 5672).

Made with:

- RabbitMQ {versions['rabbitmq']} on Erlang/OTP {versions['otp']} (Debian package), plugin rabbitmq_amqp1_0
- pika {pika.__version__}, python-qpid-proton {'.'.join(map(str, proton.VERSION))}, Python {platform.python_version()}
- {versions['tcpdump']}; checked with {versions['tshark']}

One run took {seconds:.0f} s.

Each pcap was captured with `tcpdump -i lo -n -s 0 -U -w FILE 'tcp port 5672'`
(stopped with SIGINT) around one scenario. Next to it, `NAME.oracle.json`
holds what the client counted itself (`client`: published, confirmed by the
broker, delivered, acked, nacked, rejected, returned, get-ok/empty, ...),
other facts the client saw (`facts`), and broker-side snapshots taken at named
points while the scenario ran (`broker`: `rabbitmqctl list_queues`,
`list_channels`, `list_connections` as JSON). Every connection ends with a
client connection.close unless the scenario says otherwise.

| file | bytes | scenario |
| --- | ---: | --- |
{chr(10).join(rows)}

Also here:

- `amqp10_proton.trace.txt`: stderr of the proton client run with
  `PN_TRACE_FRM=1`, every frame it sent and received, including the SASL
  PLAIN initial response with the password `guest` in clear (used by the
  redaction tests).
- `rabbitmq.log`: the broker's log file for the whole run, scenarios and demo
  (connections accepted and closed, channel errors, memory alarm).

`../demo/demo.pcap` ({demo_size} bytes) is every scenario above run at the
same time, one connection each (basic_get over ::1), so the memory alarm of
`connection_blocked` also blocks the other publishers for a moment;
`../demo/demo.oracle.json` holds each scenario's client counts (no broker
snapshots there: a few dozen concurrent rabbitmqctl runs starve the clients).

To see what a capture holds:

    tshark -r F -o tcp.reassemble_out_of_order:TRUE -Y amqp \\
        -T fields -e amqp.method.class -e amqp.method.method | sort | uniq -c

Loopback is not loss-free: under load the kernel's tail-loss probe resends
segments whose ACK is late (spurious retransmissions, answered with a D-SACK).
In this run tshark flagged retransmissions in
{", ".join(f"`{k}` ({v})" for k, v in retrans.items() if v) or "none"}, and
out-of-order segments in
{", ".join(f"`{k}` ({v})" for k, v in ooo.items() if v) or "none"}.
tcpdump reported no drops for any file (`capture` in each oracle).
"""
    if "amqp10_rich" in results:
        text += "\n" + rich_readme_section(results["amqp10_rich"], versions)
    (BROKER_DIR / "README.md").write_text(text)


RICH_HEADING = "## `amqp10_rich.pcap`"


def rich_readme_section(oracle: dict, versions: dict) -> str:
    """The README's section on amqp10_rich (written by full runs and by --only runs that
    include it, replacing only this section)."""
    import proton
    pcap = BROKER_DIR / "amqp10_rich.pcap"
    names = dict(enumerate(("open", "begin", "attach", "flow", "transfer", "disposition",
                            "detach", "end", "close"), start=16))
    counts = tshark_methods(pcap)
    frames = ", ".join(f"{counts[str(code)]} {name}" for code, name in names.items())
    client = ", ".join(f"`{k}` {v}" for k, v in oracle["client"].items())
    doc = " ".join((amqp10_rich.__doc__ or "").split())
    return f"""{RICH_HEADING}: AMQP 1.0 beyond `amqp10_proton`

Regenerate this one alone (as root; other fixtures, the demo and `rabbitmq.log`
stay as they are, only this section of the README is rewritten):

    .venv/bin/python tools/make_fixtures.py --only amqp10_rich --no-demo

Made with RabbitMQ {versions['rabbitmq']} (Erlang/OTP {versions['otp']}, plugin
rabbitmq_amqp1_0) and python-qpid-proton {'.'.join(map(str, proton.VERSION))}, in
{oracle['seconds']} s; {pcap.stat().st_size} bytes, {oracle['capture'].get('packets_captured')} packets.

{doc}

Frames as tshark counts them (SASL frames aside): {frames}.

Client counts in `amqp10_rich.oracle.json` (`client`): {client}.

Its `facts` hold every delivery the client received (link, message-id, settled, first-acquirer,
body octets), the errors it sent (`local_errors`) and received
(`remote_errors`, with the broker's descriptions), the negotiated
`max_frame_size`, and what drain ended in (`drain`).

Also `amqp10_rich.trace.txt` (the client's stderr with `PN_TRACE_FRM=1`,
SASL PLAIN initial responses in clear: `guest`/`guest` and
`amqp10_rich-noperm`/`noperm`) and `amqp10_rich.rabbitmq.log` (the
broker's log while the scenario ran: the drain crash report, the refused user).

What RabbitMQ 3.10's plugin did here:

- It answers max-frame-size 4096 with 4096 and splits its own transfers at
  that size; proton and RabbitMQ both repeat delivery-id and delivery-tag on
  continuation transfers, so no transfer here omits them.
- It settles unsettled sends with `accepted` dispositions, in this run some
  covering a range (first..last), as does proton's accept of two deliveries
  at once; it answers every client detach with closed=true by a detach
  without closed.
- An attach to a missing exchange is refused by ending the whole session
  (end with `amqp:not-found`), not by detaching the link.
- Drain on a classic queue: it echoes the flow (link-credit 5, drain=true)
  without using or returning the credit, then ends the session with
  `amqp:internal-error`, the description an Erlang `function_clause` in
  `rabbit_classic_queue:handle_event({{send_drained, ...}})`.
- The user without permissions gets through SASL and open; the broker
  closes the connection (`amqp:unauthorized-access`) when the first session
  and link arrive, then answers the client's close with a second close of
  its own; proton, done reading after the first close, resets the socket.
"""


PIPELINED_HEADING = "## `pipelined_publish.pcap`"


def pipelined_readme_section(oracle: dict) -> str:
    """The README's section on pipelined_publish (written by runs that include it)."""
    pcap = BROKER_DIR / "pipelined_publish.pcap"
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-T", "fields", "-e", "tcp.dstport", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    sizes = [int(n) for port, n in (line.split("\t") for line in out.splitlines()) if port == str(AMQP_PORT) and n]
    large = sorted(n for n in sizes if n > 16384)
    doc = " ".join((pipelined_publish.__doc__ or "").split())
    return f"""{PIPELINED_HEADING}: one burst in large loopback segments

Regenerate this one alone (as root; only this section of the README is rewritten):

    .venv/bin/python tools/make_fixtures.py --only pipelined_publish --no-demo

{doc}

{pcap.stat().st_size} bytes, {oracle['capture'].get('packets_captured')} packets, in {oracle['seconds']} s;
client segments of more than 16 KiB: {len(large)} ({', '.join(map(str, large))} bytes). Client counts
(`client`): {', '.join(f"`{k}` {v}" for k, v in oracle['client'].items())}; the broker's channels at
`after_confirms` show nothing unconfirmed.

The capture itself came in order. `tests/lifecycle/test_out_of_order_capture.py`
reorders its first three consecutive large client segments (issue 38: on a 2 GB
capture of this load a segment came ahead of the one before it) and checks that
the rows stay those of this file.
"""


def put_readme_section(text: str, heading: str = RICH_HEADING) -> None:
    """Replace the README's section under ``heading`` (up to the next ``## ``), or append it."""
    readme = BROKER_DIR / "README.md"
    old = readme.read_text() if readme.exists() else ""
    start = old.find("\n" + heading) + 1
    if start <= 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + text + ("\n" + old[end + 1:] if end >= 0 else "")
    readme.write_text(new)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=sorted(all_scenarios()) + ["broker_logs", "tls"],
                    help="scenarios to run (broker_logs: tests/data/logs/, see tools/log_fixtures.py; "
                         "tls: tests/data/tls/, see tools/tls_fixtures.py)")
    ap.add_argument("--no-demo", action="store_true")
    ap.add_argument("--workdir", help="broker folder (default: a temporary one)")
    ap.add_argument("--proton-client", nargs=3, metavar=("URL", "ADDRESS", "N"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--proton-rich-client", nargs=2, metavar=("URL", "QUEUE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.proton_client:
        url, address, n = args.proton_client
        print(json.dumps(proton_client(url, address, int(n))))
        return
    if args.proton_rich_client:
        print(json.dumps(proton_rich_client(*args.proton_rich_client)))
        return

    t0 = time.monotonic()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="amqplens-rabbit-"))
    BROKER_DIR.mkdir(parents=True, exist_ok=True)
    results = {}
    from tools.tls_fixtures import pki, run_tls_fixtures, write_tls_readme

    tls_results: dict = {}

    node = RabbitNode(workdir, port=AMQP_PORT, name="fixtures", tls=pki())
    with node:
        versions = node.versions()
        for name in args.only or [*all_scenarios(), "tls"]:
            if name == "broker_logs":  # its own folder and README; enables plugins, so only alone or last
                from tools.log_fixtures import broker_logs
                print(f"broker_logs {broker_logs(node)['seconds']}s", flush=True)
                continue
            if name == "tls":
                tls_results = run_tls_fixtures(node)
                for fixture, res in tls_results.items():
                    print(f"{fixture:22s} {res['seconds']:5.1f}s {dict(res['client'])}", flush=True)
                continue
            results[name] = run_scenario(node, name)
            print(f"{name:22s} {results[name]['seconds']:5.1f}s "
                  f"{(BROKER_DIR / f'{name}.pcap').stat().st_size:8d} B  "
                  f"{dict(results[name]['client'])}", flush=True)
        if not args.no_demo:
            demo = run_demo(node)
            print(f"{'demo':22s} {demo['seconds']:5.1f}s "
                  f"{(DEMO_DIR / 'demo.pcap').stat().st_size:8d} B", flush=True)
    if not args.only:  # the log of a whole run; a partial run leaves it as it is
        shutil.copyfile(node.log_path, BROKER_DIR / "rabbitmq.log")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - t0
    if not args.only and not args.no_demo:
        versions |= {"tcpdump": tool_version(["tcpdump", "--version"]),
                     "tshark": tool_version(["tshark", "--version"])}
        write_readme(versions, [".venv/bin/python", "tools/make_fixtures.py"],
                     results, seconds)
    elif "amqp10_rich" in results:
        put_readme_section(rich_readme_section(results["amqp10_rich"], versions))
    if "pipelined_publish" in results:
        put_readme_section(pipelined_readme_section(results["pipelined_publish"]), PIPELINED_HEADING)
    for name in fault_names() & set(results):
        from tools.fault_fixtures import heading, readme_section
        put_readme_section(readme_section(name, results[name], versions), heading(name))
    if tls_results:
        write_tls_readme(tls_results, versions)
    for pcap in sorted(BROKER_DIR.glob("*.pcap")) + sorted(DEMO_DIR.glob("*.pcap")):
        methods = tshark_methods(pcap)
        print(f"{pcap.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(methods.items())))
    print(f"total {seconds:.1f}s")


if __name__ == "__main__":
    main()
