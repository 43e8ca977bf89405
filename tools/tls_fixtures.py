"""AMQPS fixtures: one 0-9-1 scenario captured in the clear, over TLS 1.2 (AES-GCM and ChaCha20-Poly1305)
and over TLS 1.3 with pika, and over TLS 1.3 with py-amqp, against the real broker's TLS listener, with
the client's key log next to each pcap.

Called by ``tools/make_fixtures.py`` (``--only tls``), whose node then also listens with TLS on
127.0.0.1:5671 with a server certificate of a test CA this module makes (``tests/data/tls/pki/``,
EC P-256 via ``cryptography``; test keys that protect nothing). pika connects with an
``ssl.SSLContext`` whose ``keylog_filename`` is ``NAME.keylog``, so each key log holds exactly that
capture's session; py-amqp makes its own context (``ssl.create_default_context``), which takes the key
log file from ``SSLKEYLOGFILE``, set while it connects. The pika scenario is deterministic frame for frame
(fixed queue name and consumer tag, each publish confirmed alone, deliveries settled as they arrive), so
its TLS captures must decode to the plaintext capture's frames, deliveries and outcomes; py-amqp runs the
same steps with its own client properties.

No AMQP 1.0 client over TLS: python-qpid-proton's SSL layer has no key log hook (no
``keylog_filename``, and its OpenSSL does not read SSLKEYLOGFILE), so its sessions cannot be decrypted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pika

from tools.tls_session import TlsPki

ROOT = Path(__file__).resolve().parent.parent
TLS_DIR = ROOT / "tests" / "data" / "tls"  # apart from tests/data/broker, whose pcaps the plaintext tests glob
PKI_DIR = TLS_DIR / "pki"
# fixture name -> (TLS version or None for the clear, OpenSSL cipher list for TLS 1.2, client)
VARIANTS = {
    "tls_plain": (None, None, "pika"),
    "tls12": ("1.2", "ECDHE-ECDSA-AES128-GCM-SHA256", "pika"),
    "tls12_chacha": ("1.2", "ECDHE-ECDSA-CHACHA20-POLY1305", "pika"),
    "tls13": ("1.3", None, "pika"),
    "tls13_pyamqp": ("1.3", None, "py-amqp"),
}
MESSAGES = 10
QUEUE = CONSUMER_TAG = "tls_traffic"


def pki() -> TlsPki:
    return TlsPki.create(PKI_DIR)


def tls_traffic(run, params: pika.ConnectionParameters) -> None:
    """confirm.select; 10 publishes, each confirmed alone; basic.qos prefetch 5; basic.consume with a fixed
    consumer tag; the first 9 deliveries acked one by one, the 10th rejected without requeue; basic.cancel,
    queue.delete, connection.close."""
    from tools.make_fixtures import body, pump

    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(QUEUE)
    ch.confirm_delivery()
    for i in range(MESSAGES):
        ch.basic_publish("", QUEUE, body(300, i), pika.BasicProperties(message_id=f"tls-{i}", delivery_mode=1))
        run.count("published")
        run.count("confirmed")
    ch.basic_qos(prefetch_count=5)

    def on_message(channel, method, properties, payload) -> None:
        _settle(run, method.delivery_tag, channel.basic_ack, channel.basic_reject)

    ch.basic_consume(QUEUE, on_message, consumer_tag=CONSUMER_TAG)
    pump(conn, lambda: run.client["delivered"] >= MESSAGES, what="deliveries")
    ch.basic_cancel(CONSUMER_TAG)
    ch.queue_delete(QUEUE)
    conn.close()


def _settle(run, tag: int, ack, reject) -> None:
    """A delivery of ``tls_traffic``: acked, but the last one rejected (not requeued); counted for the test."""
    run.count("delivered")
    if tag < MESSAGES:
        ack(tag)
        run.count("acked")
    else:
        reject(tag, requeue=False)
        run.count("rejected")


def tls_traffic_pyamqp(run, port: int, authority: TlsPki, keylog: Path) -> None:
    """``tls_traffic``'s steps with py-amqp (``confirm_publish``: each publish waits for its ack)."""
    import amqp

    from tools.make_fixtures import TIMEOUT_S, body

    os.environ["SSLKEYLOGFILE"] = str(keylog)  # read by the ssl.create_default_context py-amqp calls
    try:
        conn = amqp.Connection(f"127.0.0.1:{port}", userid="guest", password="guest", confirm_publish=True,
                               client_properties={"connection_name": "fixture-tls_traffic"},
                               ssl={"context": {"cafile": str(authority.ca_cert)}, "server_hostname": "localhost"})
        conn.connect()
    finally:
        del os.environ["SSLKEYLOGFILE"]
    ch = conn.channel()
    ch.queue_declare(QUEUE, auto_delete=False)
    for i in range(MESSAGES):
        ch.basic_publish(amqp.Message(body(300, i), message_id=f"tls-{i}", delivery_mode=1), exchange="", routing_key=QUEUE)
        run.count("published")
        run.count("confirmed")
    ch.basic_qos(0, 5, False)

    def on_message(message) -> None:
        _settle(run, message.delivery_tag, ch.basic_ack, ch.basic_reject)

    ch.basic_consume(QUEUE, consumer_tag=CONSUMER_TAG, callback=on_message)
    while run.client["delivered"] < MESSAGES:
        conn.drain_events(timeout=TIMEOUT_S)
    ch.basic_cancel(CONSUMER_TAG)
    ch.queue_delete(QUEUE)
    conn.close()


def run_tls_fixtures(node) -> dict:
    from tools.make_fixtures import GUEST, Capture, Run, write_json

    results = {}
    authority = pki()
    for name, (version, ciphers, client) in VARIANTS.items():
        pcap, keylog = TLS_DIR / f"{name}.pcap", TLS_DIR / f"{name}.keylog"
        keylog.unlink(missing_ok=True)
        run = Run(node, "tls_traffic", snapshots=False)  # the same name (connection_name) in every variant
        props = {"connection_name": "fixture-tls_traffic"}
        if version is None:
            params = pika.ConnectionParameters("127.0.0.1", node.port, credentials=GUEST, client_properties=props)
        else:
            ctx = authority.client_context(version, keylog, ciphers)
            params = pika.ConnectionParameters("127.0.0.1", node.tls_port, credentials=GUEST, client_properties=props,
                                               ssl_options=pika.SSLOptions(ctx, "localhost"))
        t0 = time.monotonic()
        with Capture(pcap, port=node.port if version is None else node.tls_port) as cap:
            if client == "py-amqp":
                tls_traffic_pyamqp(run, node.tls_port, authority, keylog)
            else:
                tls_traffic(run, params)
        results[name] = run.oracle() | {"pcap": pcap.name, "capture": cap.stats, "tls_version": version, "library": client,
                                        "keylog": keylog.name if version else None,
                                        "seconds": round(time.monotonic() - t0, 2)}
        write_json(TLS_DIR / f"{name}.oracle.json", results[name])
    return results


def write_tls_readme(results: dict, versions: dict) -> None:
    """tests/data/tls/README.md, rewritten by every run that makes the fixtures."""
    import amqp

    rows = "\n".join(
        f"| `{name}.pcap` | {(TLS_DIR / f'{name}.pcap').stat().st_size} | {VARIANTS[name][2]} | {VARIANTS[name][0] or 'clear'} | "
        f"{VARIANTS[name][1] or ('OpenSSL default' if VARIANTS[name][0] else '')} | {'`' + res['keylog'] + '`' if res['keylog'] else ''} |"
        for name, res in results.items())
    doc = " ".join((tls_traffic.__doc__ or "").split())
    (TLS_DIR / "README.md").write_text(f"""# AMQPS fixtures: `tls_*.pcap` and their key logs

Generated by `tools/make_fixtures.py` (`tools/tls_fixtures.py`); do not edit by hand. Regenerate them alone (as root; the broker then also listens with TLS on 127.0.0.1:5671):

    .venv/bin/python tools/make_fixtures.py --only tls --no-demo

Made with RabbitMQ {versions['rabbitmq']} (Erlang/OTP {versions['otp']}), pika {pika.__version__} and py-amqp {amqp.__version__}; the
server certificate is signed by a test CA the tool makes (`pki/`: EC P-256, test keys only). Each
capture is `tcpdump ... 'tcp port 5671'` (5672 for the clear one) around one connection; the client's
`SSLContext.keylog_filename` wrote `NAME.keylog` (NSS format), so each key log holds that capture's
session only. Decrypt with `tshark -o tls.keylog_file:tls13.keylog -r tls13.pcap`.

{doc} The same scenario in every pika file, so its TLS captures decode to the clear one's frames;
`tls13_pyamqp.pcap` runs the same steps with py-amqp (`SSLKEYLOGFILE` set while it connects: it makes
its own `ssl.create_default_context`, which reads it).

| file | bytes | client | TLS | cipher list | key log |
| --- | ---: | --- | --- | --- | --- |
{rows}

No AMQP 1.0 client over TLS: python-qpid-proton's SSL layer offers no key log hook.
""")
