"""The broker-log fixtures in tests/data/logs/: one RabbitMQ 3.10 run with its
own log, the rabbitmq_tracing plugin's text and JSON trace files, the firehose
messages saved as JSON lines, and a pcap of the same traffic.

Run through ``tools/make_fixtures.py --only broker_logs --no-demo`` (as root:
tcpdump). The scenario, on a node of its own:

- a publisher (confirms) sends ``PUBLISHED`` messages with properties and
  headers to a queue through the default exchange and ``TOPIC_PUBLISHED`` to a
  topic exchange; a consumer acks them all;
- a passive declare of a missing queue (channel error 404);
- a connection whose socket is closed without connection.close (the broker
  logs "client unexpectedly closed TCP connection");
- the memory alarm and the disk alarm, each raised and cleared;
- the connection closes normally.

Then two more nodes (port 5679) run a channel error and an abrupt close with
their log file under ``log.file.formatter = json`` and under four-letter
levels (``level_format = lc4``).

``broker_logs.oracle.json`` holds the client's counts (published, confirmed,
delivered, acked) and what it saw, for the tests to check the traces against.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import time
import urllib.request
from pathlib import Path

import pika
import pika.exceptions

from tools.broker import RabbitNode
from tools.make_fixtures import ROOT, Capture, Confirms, Run, pump, write_json

LOGS_DIR = ROOT / "tests" / "data" / "logs"
MANAGEMENT_PORT = 15672
PUBLISHED = 12
TOPIC_PUBLISHED = 3
FIREHOSE_QUEUE = "amqplens.firehose"


def _api(method: str, path: str, payload: dict | None = None):
    req = urllib.request.Request(
        f"http://127.0.0.1:{MANAGEMENT_PORT}/api/{path}", method=method,
        data=None if payload is None else json.dumps(payload).encode(),
        headers={"content-type": "application/json",
                 "authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=30) as res:
        body = res.read()
    return json.loads(body) if body else None


def _wait_api(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _api("GET", "overview")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _start_tracing(run: Run, trace_dir: Path) -> None:
    node = run.node
    trace_dir.mkdir(parents=True, exist_ok=True)
    node.ctl("eval", f'application:set_env(rabbitmq_tracing, directory, "{trace_dir}").')
    node.ctl("enable", "rabbitmq_tracing", tool="rabbitmq-plugins", timeout=120)
    node.ctl("eval", f'application:set_env(rabbitmq_tracing, directory, "{trace_dir}").')
    _wait_api()
    for fmt in ("text", "json"):
        _api("PUT", f"traces/%2F/amqplens_{fmt}", {"format": fmt, "pattern": "#"})
    conn = run.connect(client_properties={"connection_name": "fixture-firehose-saver"})
    ch = conn.channel()
    ch.queue_declare(FIREHOSE_QUEUE)
    ch.queue_bind(FIREHOSE_QUEUE, "amq.rabbitmq.trace", "#")
    conn.close()
    node.ctl("trace_on")


def _workload(run: Run) -> None:
    conn = run.connect()
    ch = conn.channel()
    q = ch.queue_declare(f"{run.name}.q").method.queue
    ch.exchange_declare(f"{run.name}.topic", "topic")
    ch.queue_bind(q, f"{run.name}.topic", "orders.#")
    confirms = Confirms(run, conn, ch)
    for i in range(PUBLISHED):
        props = pika.BasicProperties(message_id=f"m{i}", content_type="text/plain", delivery_mode=2,
                                     headers={"seq": i})
        confirms.publish("", q, f"message {i}".encode(), properties=props)
    for i in range(TOPIC_PUBLISHED):
        confirms.publish(f"{run.name}.topic", f"orders.eu.{i}", f"order {i}".encode(),
                         properties=pika.BasicProperties(message_id=f"o{i}", correlation_id=f"c{i}"))
    confirms.wait()
    consumer = conn.channel()
    got = []

    def on_message(c, method, props, payload):
        got.append(payload)
        run.count("delivered")
        c.basic_ack(method.delivery_tag)
        run.count("acked")

    consumer.basic_consume(q, on_message)
    pump(conn, lambda: len(got) == PUBLISHED + TOPIC_PUBLISHED, what="deliveries")
    bad = conn.channel()
    try:
        bad.queue_declare(f"{run.name}.absent", passive=True)
    except pika.exceptions.ChannelClosedByBroker as e:
        run.facts["channel_close"] = [e.reply_code, e.reply_text]
        run.count("channel_errors")
    _abrupt(run)
    _alarms(run)
    ch.queue_delete(q)
    ch.exchange_delete(f"{run.name}.topic")
    conn.close()


def _abrupt(run: Run) -> None:
    """A connection whose client vanishes: its socket closed without connection.close."""
    conn = run.connect(client_properties={"connection_name": f"fixture-{run.name}-abrupt"})
    conn.channel()
    sock = conn._impl._transport._sock  # pika keeps no public handle on the socket
    run.facts["abrupt_client_port"] = sock.getsockname()[1]
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    run.count("abrupt_closes")
    time.sleep(0.5)


def _alarms(run: Run) -> None:
    node = run.node
    node.ctl("set_vm_memory_high_watermark", "0.0000001")
    time.sleep(1)
    node.ctl("set_vm_memory_high_watermark", "0.4")
    node.ctl("set_disk_free_limit", "100000GB")
    time.sleep(1.5)  # the disk monitor checks every second at the most
    node.ctl("set_disk_free_limit", "1MB")
    time.sleep(1.5)
    run.count("memory_alarms")
    run.count("disk_alarms")


def _stop_tracing(run: Run, trace_dir: Path) -> list[dict]:
    run.node.ctl("trace_off")
    time.sleep(1)
    firehose = _api("POST", f"queues/%2F/{FIREHOSE_QUEUE}/get",
                    {"count": 10000, "ackmode": "ack_requeue_false", "encoding": "base64"})
    for fmt in ("text", "json"):
        _api("DELETE", f"traces/%2F/amqplens_{fmt}")
    time.sleep(1)
    return firehose


def broker_logs(node, name: str = "broker_logs") -> dict:
    """Run the scenario under tcpdump; write tests/data/logs/. Returns the oracle."""
    LOGS_DIR.mkdir(parents=True, exist_ok=True)
    run = Run(node, name, snapshots=False)
    trace_dir = node.workdir / "tracing"
    log_start = node.log_path.stat().st_size
    t0 = time.monotonic()
    _start_tracing(run, trace_dir)
    with Capture(LOGS_DIR / f"{name}.pcap") as cap:
        _workload(run)
    firehose = _stop_tracing(run, trace_dir)
    with open(node.log_path, "rb") as log:
        log.seek(log_start)
        (LOGS_DIR / "rabbitmq_3_10.log").write_bytes(log.read())
    for fmt in ("text", "json"):
        shutil.copyfile(trace_dir / f"amqplens_{fmt}.log", LOGS_DIR / f"tracing_{fmt}.log")
    with open(LOGS_DIR / "firehose.jsonl", "w") as out:
        for message in firehose:
            out.write(json.dumps(message, sort_keys=True) + "\n")
    versions = node.versions()
    formatted = formatted_logs(node.workdir / "formatted")
    oracle = run.oracle() | {"pcap": f"{name}.pcap", "capture": cap.stats, "firehose_messages": len(firehose),
                             "formatted_logs": formatted, "versions": versions, "seconds": round(time.monotonic() - t0, 2)}
    write_json(LOGS_DIR / f"{name}.oracle.json", oracle)
    return oracle


class FormattedNode(RabbitNode):
    """A RabbitNode whose log file uses another formatter: ``rabbitmq.conf`` lines appended, and the
    log file named there (RABBITMQ_LOGS would override the file's log.file.* settings)."""

    def __init__(self, workdir: Path, port: int, conf_lines: list[str]) -> None:
        super().__init__(workdir, port=port, name="logformat", ipv6=False)
        self.conf_lines = conf_lines

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        env.pop("RABBITMQ_LOGS")
        return env

    def _write_layout(self) -> None:
        super()._write_layout()
        with open(self.workdir / "rabbitmq.conf", "a") as conf:
            conf.write("\n".join([f"log.file = {self.log_path}", *self.conf_lines]) + "\n")


FORMATTED_LOGS = {  # file in tests/data/logs -> rabbitmq.conf lines (RabbitMQ 3.9+ logging settings)
    "rabbitmq_3_10_json.log": ["log.file.formatter = json"],
    "rabbitmq_3_10_lc4.log": ["log.file.formatter.level_format = lc4"],
}


def formatted_logs(workdir: Path, port: int = 5679) -> dict:
    """The same small workload under the JSON formatter and under four-letter levels; returns what the client saw."""
    seen = {}
    for name, lines in FORMATTED_LOGS.items():
        node = FormattedNode(workdir / name, port, lines)
        with node:
            run = Run(node, name.split(".")[0], snapshots=False)
            conn = run.connect()
            try:
                conn.channel().queue_declare("absent", passive=True)
            except pika.exceptions.ChannelClosedByBroker as e:
                seen[name] = {"channel_close": [e.reply_code, e.reply_text]}
            _abrupt(run)
            seen[name]["abrupt_client_port"] = run.facts["abrupt_client_port"]
            conn.close()
            time.sleep(0.5)
        shutil.copyfile(node.log_path, LOGS_DIR / name)
    return seen
