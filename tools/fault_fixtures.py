"""Real-broker captures of faults caused on purpose (issue 34: the findings rules).

Each scenario here is a solo fixture of ``tools/make_fixtures.py`` (never in the
demo; a full run takes them too): run one alone, as root, with

    .venv/bin/python tools/make_fixtures.py --only slow_consumer --no-demo

It writes ``tests/data/broker/NAME.pcap``, ``NAME.oracle.json`` (what the client
counted and measured itself, epoch seconds, and ``rabbitmqctl`` snapshots),
``NAME.rabbitmq.log`` (the broker's log while the scenario ran) and the
README's section on NAME: its frames as tshark counts them, how each TCP
connection ended as tshark sees it, and the findings a diagnosing tool should
raise, written from what the script did and measured (``facts["expected_findings"]``),
never from amqplens' output.

A scenario may return a callable: it runs after tcpdump stopped, for what must
stay out of the capture (closing connections left open, resuming a queue).
"""

from __future__ import annotations

import collections
import datetime
import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pika.spec

from tools.make_fixtures import AMQP_PORT, BROKER_DIR, TIMEOUT_S, Confirms, Run, StepScript, body, pump, tshark_methods

FAULTS: dict = {}


def fault(fn):
    FAULTS[fn.__name__] = fn
    return fn


def now() -> float:
    return round(time.time(), 6)


def snap(run: Run, label: str, *kinds: str) -> None:
    """A broker snapshot; with ``kinds``, of those of queues/channels/connections only (a suspended
    queue process would stall list_queues)."""
    if not kinds:
        run.snapshot(label)
        return
    cols = {"queues": ("list_queues", Run.QUEUE_COLS), "channels": ("list_channels", Run.CHANNEL_COLS),
            "connections": ("list_connections", Run.CONNECTION_COLS)}
    state = {k: json.loads(run.node.ctl(cols[k][0], *cols[k][1], "--formatter", "json")) for k in kinds}
    run.broker[label] = state | {"t": time.time()}


def connect(run: Run, suffix: str, **params) -> pika.BlockingConnection:
    """A connection named ``fixture-NAME-suffix`` (the broker logs and lists it by that name)."""
    return run.connect(client_properties={"connection_name": f"fixture-{run.name}-{suffix}"}, **params)


def pct(part: float, whole: float) -> int:
    return round(100 * part / whole) if whole else 0


# -- 1. slow consumer --------------------------------------------------------

SLOW_MESSAGES, SLOW_PREFETCH, SLOW_WORK_S = 40, 5, 0.1
SLOW_LATE_TAGS, SLOW_LATE_S = (6, 14, 22), 1.5


@fault
def slow_consumer(run: Run) -> None:
    """basic.qos prefetch 5; 40 messages queued (confirmed) before basic.consume;
    the consumer works through its deliveries one at a time, 100 ms each, acking
    each (single acks) when done, so the broker keeps it at its prefetch limit;
    three deliveries (tags 6, 14, 22) are set aside and acked 1.5 s after the
    consumer took them up, while the others go on. basic.cancel after the last
    ack."""
    conn = connect(run, "consumer")
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    confirms = Confirms(run, conn, ch)
    for i in range(SLOW_MESSAGES):
        confirms.publish("", q, body(64, i), properties=pika.BasicProperties(message_id=f"slow-{i}"))
    confirms.wait()
    ch.basic_qos(prefetch_count=SLOW_PREFETCH)
    received: list = []  # (delivery_tag, epoch seconds the client got it)
    ctag = ch.basic_consume(q, lambda c, m, p, b: received.append((m.delivery_tag, time.time())))
    t_consume = time.time()
    acked: dict = {}  # tag -> epoch seconds of the ack
    parked: dict = {}  # tag -> when its ack is due
    current, busy_until, taken = None, 0.0, 0
    deadline = time.monotonic() + TIMEOUT_S

    def ack(tag: int) -> None:
        ch.basic_ack(tag)
        acked[tag] = time.time()
        run.count("acked")
        run.count("ack_frames")

    while len(acked) < SLOW_MESSAGES:
        if time.monotonic() > deadline:
            raise TimeoutError("slow_consumer: gave up")
        conn.process_data_events(time_limit=0.005)
        t = time.time()
        for tag, due in list(parked.items()):
            if t >= due:
                ack(tag)
                del parked[tag]
        if current is not None and t >= busy_until:
            ack(current)
            current = None
        while current is None and taken < len(received):
            tag, _ = received[taken]
            taken += 1
            if tag in SLOW_LATE_TAGS:
                parked[tag] = t + SLOW_LATE_S
            else:
                current, busy_until = tag, t + SLOW_WORK_S
    ch.basic_cancel(ctag)
    t_cancel = time.time()
    run.count("delivered", len(received))
    # the client's own view of its in-flight count: +1 at each delivery, -1 at each ack
    steps = sorted([(t, 1) for _, t in received] + [(t, -1) for t in acked.values()])
    at_limit, level, prev = 0.0, 0, t_consume
    for t, d in steps:
        if level >= SLOW_PREFETCH:
            at_limit += t - prev
        level, prev = level + d, t
    life = t_cancel - t_consume
    latency = {tag: round(acked[tag] - t, 3) for tag, t in received}
    normal = [v for tag, v in latency.items() if tag not in SLOW_LATE_TAGS]
    late = {tag: latency[tag] for tag in SLOW_LATE_TAGS}
    run.facts.update(
        queue=q, consumer_tag=ctag, prefetch_count=SLOW_PREFETCH, work_s=SLOW_WORK_S,
        late_tags=list(SLOW_LATE_TAGS), late_hold_s=SLOW_LATE_S, consume_ts=t_consume, cancel_ts=t_cancel,
        consumer_life_s=round(life, 3), at_prefetch_limit_s=round(at_limit, 3),
        at_prefetch_limit_share=round(at_limit / life, 3),
        deliver_to_ack_s=latency, max_in_flight=max(lvl for lvl in _levels(steps)),
        expected_findings=[
            f"slow consumer: consumer {ctag} on queue {q} (channel 1) held at its prefetch limit "
            f"{SLOW_PREFETCH} for about {pct(at_limit, life)}% of its life ({at_limit:.1f} s of {life:.1f} s "
            f"from basic.consume to basic.cancel, as the client measured; every delivery arrived while "
            f"{SLOW_PREFETCH - 1} others were unacked)",
            f"slow acks: 3 of {SLOW_MESSAGES} deliveries (delivery tags {', '.join(map(str, SLOW_LATE_TAGS))}) "
            f"acked {min(late.values()):.1f}..{max(late.values()):.1f} s after delivery, against "
            f"{min(normal):.2f}..{max(normal):.2f} s for the other {len(normal)} (client-measured deliver->ack)",
            "no other finding: every delivery acked, publishes all confirmed, clean close"])
    run.snapshot("after_cancel")  # not while it works: three rabbitmqctl VMs would starve client and broker
    ch.queue_delete(q)
    conn.close()


def _levels(steps):
    level = 0
    for _, d in steps:
        level += d
        yield level


# -- 2. requeue loop ---------------------------------------------------------

REQUEUES = 16


@fault
def requeue_loop(run: Run) -> None:
    """basic.qos prefetch 1; a message (message-id requeue_loop-poison) is
    nacked with requeue=true 16 times in a row by its consumer (every
    redelivery has redelivered=true) and acked at its 17th delivery; then a
    normal message (message-id requeue_loop-normal), queued behind it the whole
    time, is delivered once and acked."""
    conn = connect(run, "consumer")
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    for kind in ("poison", "normal"):
        ch.basic_publish("", q, body(64, len(kind)), pika.BasicProperties(message_id=f"{run.name}-{kind}"))
        run.count("published")
    ch.basic_qos(prefetch_count=1)
    got: list = []
    ctag = ch.basic_consume(q, lambda c, m, p, b: got.append((m.delivery_tag, m.redelivered, p.message_id, time.time())))
    log, done, nacks = [], 0, 0
    while not (log and log[-1]["message_id"].endswith("normal")):
        pump(conn, lambda: len(got) > done, what="delivery")
        tag, redelivered, mid, t = got[done]
        done += 1
        run.count("delivered")
        run.count("redelivered", redelivered)
        if mid.endswith("poison") and nacks < REQUEUES:
            ch.basic_nack(tag, requeue=True)
            nacks += 1
            outcome = "nack requeue"
            run.count("nacked_requeue")
        else:
            ch.basic_ack(tag)
            outcome = "ack"
            run.count("acked")
        log.append({"delivery_tag": tag, "redelivered": redelivered, "message_id": mid, "ts": round(t, 6),
                    "settled": outcome, "settled_ts": now()})
    ch.basic_cancel(ctag)
    run.facts.update(queue=q, consumer_tag=ctag, deliveries=log, requeues_of_poison=nacks,
                     expected_findings=[
                         f"requeue loop: message {run.name}-poison on queue {q} delivered {nacks + 1} times to "
                         f"consumer {ctag} (delivery tags 1..{nacks + 1}), nacked with requeue=true {nacks} times "
                         f"in a row, redelivered=true on deliveries 2..{nacks + 1}, acked at the last; "
                         f"{log[nacks]['settled_ts'] - log[0]['ts']:.2f} s from first delivery to ack",
                         f"message {run.name}-normal waited behind it (delivered once, tag {nacks + 2}, acked); "
                         "no finding of its own",
                         "nothing else: no error, clean close"])
    run.snapshot("settled")
    ch.queue_delete(q)
    conn.close()


# -- 3. unsettled at the end -------------------------------------------------

UNSETTLED_OPEN = (10, 4)  # (delivered, acked) on the connection left open
UNSETTLED_CLOSED = (6, 2)  # (delivered, acked) on the connection closed with deliveries unacked
UNCONFIRMED = (5, 3)  # (confirmed, then published into a suspended queue: unconfirmed at capture end)


def queue_eval(run: Run, queue: str, call: str) -> str:
    """Run ``sys:<call>`` on the queue's process (suspend/resume)."""
    return run.node.ctl("eval", f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{queue}">>)), '
                                f"sys:{call}(amqqueue:get_pid(Q)), ok.")


def consume_some(run: Run, conn, ch, queue: str, n: int, n_ack: int, label: str) -> str:
    """Publish n, consume them (prefetch n), ack tags 1..n_ack one by one; the consumer tag."""
    for i in range(n):
        ch.basic_publish("", queue, body(64, i), pika.BasicProperties(message_id=f"{label}-{i}"))
        run.count(f"{label}_published")
    ch.basic_qos(prefetch_count=n)
    got: list = []
    ctag = ch.basic_consume(queue, lambda c, m, p, b: got.append(m.delivery_tag))
    pump(conn, lambda: len(got) == n, what=f"{n} deliveries on {label}")
    conn.process_data_events(time_limit=0.2)
    for tag in range(1, n_ack + 1):
        ch.basic_ack(tag)
    run.count(f"{label}_delivered", len(got))
    run.count(f"{label}_acked", n_ack)
    conn.process_data_events(time_limit=0.2)
    return ctag


@fault
def unsettled_at_end(run: Run):
    """Three connections. `closed`: a consumer (manual ack, prefetch 6) gets 6
    deliveries, acks tags 1 and 2, then the client closes the connection with 4
    unacked (the broker requeues them). `open`: a consumer (prefetch 10) gets
    10 deliveries and acks tags 1..4; 6 stay unacked. `publisher`: confirm
    mode, 5 publishes confirmed, then its queue's process is suspended
    (`sys:suspend` through rabbitmqctl eval) and 3 more publishes stay
    unconfirmed. tcpdump stops with `open` and `publisher` still open and
    unsettled; they are resumed and closed after the capture."""
    n_closed, ack_closed = UNSETTLED_CLOSED
    n_open, ack_open = UNSETTLED_OPEN
    confirmed_first, unconfirmed = UNCONFIRMED
    names = {k: f"{run.name}.{k}" for k in ("closed", "open", "publisher")}
    c_closed = connect(run, "closed")
    ch = c_closed.channel()
    for q in names.values():
        ch.queue_declare(q)
    ctag_closed = consume_some(run, c_closed, ch, names["closed"], n_closed, ack_closed, "closed")
    snap(run, "closed_before_close")
    c_closed.close()
    t_closed = time.time()
    c_open = connect(run, "open")
    ch_open = c_open.channel()
    ctag_open = consume_some(run, c_open, ch_open, names["open"], n_open, ack_open, "open")
    c_pub = connect(run, "publisher")
    ch_pub = c_pub.channel()
    confirms = Confirms(run, c_pub, ch_pub)
    for i in range(confirmed_first):
        confirms.publish("", names["publisher"], body(64, i), properties=pika.BasicProperties(message_id=f"pub-{i}"))
    confirms.wait()
    snap(run, "before_suspend")  # the `closed` queue holds its 4 requeued messages again
    queue_eval(run, names["publisher"], "suspend")
    t_suspend = time.time()
    for i in range(confirmed_first, confirmed_first + unconfirmed):
        confirms.publish("", names["publisher"], body(64, i), properties=pika.BasicProperties(message_id=f"pub-{i}"))
    t_last_publish = time.time()
    c_pub.sleep(1.0)
    c_open.process_data_events(time_limit=0.1)
    snap(run, "at_capture_end", "channels", "connections")
    pending_at_end = sorted(confirms.pending)
    run.facts.update(
        queues=names, closed_consumer_tag=ctag_closed, open_consumer_tag=ctag_open, closed_close_ts=t_closed,
        suspend_ts=t_suspend, last_publish_ts=t_last_publish, unconfirmed_tags_at_capture_end=pending_at_end,
        open_unacked_tags_at_capture_end=list(range(ack_open + 1, n_open + 1)),
        closed_unacked_tags_at_close=list(range(ack_closed + 1, n_closed + 1)),
        expected_findings=[
            f"deliveries never settled by the end of the capture: {n_open - ack_open} on connection "
            f"fixture-{run.name}-open, channel 1, consumer {ctag_open}, queue {names['open']} (delivery tags "
            f"{ack_open + 1}..{n_open}), still unacked when the capture ends with the connection open "
            "(no close, no FIN: the capture just stops)",
            f"publishes never confirmed by the end of the capture: {len(pending_at_end)} on connection "
            f"fixture-{run.name}-publisher, channel 1 (confirm mode, delivery tags "
            f"{', '.join(map(str, pending_at_end))}, routing key {names['publisher']}); the first "
            f"{confirmed_first} were confirmed within milliseconds",
            f"deliveries unacked at close: {n_closed - ack_closed} on connection fixture-{run.name}-closed, "
            f"consumer {ctag_closed}, queue {names['closed']} (tags {ack_closed + 1}..{n_closed}); the client "
            "closed the connection cleanly (connection.close 200, close-ok) with them unacked, so the broker "
            "requeued them (list_queues at `before_suspend`: 4 messages ready in that queue)",
            "nothing else: no error codes, no broker close"])

    def after_capture() -> None:
        queue_eval(run, names["publisher"], "resume")
        confirms.wait()
        run.facts["confirmed_after_resume"] = run.client["confirmed"] - confirmed_first
        for c in (c_open, c_pub):
            c.close()
        for q in names.values():
            run.node.ctl("delete_queue", q)

    return after_capture


# -- 4. heartbeat timeout ----------------------------------------------------

HEARTBEAT_S = 2


@fault
def heartbeat_timeout(run: Run) -> None:
    """heartbeat 2 s negotiated; a publish and a basic.get, 3 s with heartbeats
    on time, then the client stops all I/O (time.sleep without
    process_data_events, so it sends nothing, heartbeats included) until the
    broker's log says it dropped the connection for missed heartbeats (RabbitMQ
    3.10 resets the socket: RST, without connection.close or FIN); then the
    client reads again and finds the connection reset."""
    log_start = run.node.log_path.stat().st_size
    conn = connect(run, "silent", heartbeat=HEARTBEAT_S)
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"before the silence")
    run.count("published")
    ch.basic_get(q, auto_ack=True)
    run.count("get_ok")
    snapper = threading.Thread(target=run.snapshot, args=("beating",))
    snapper.start()
    conn.sleep(3)
    snapper.join()
    t_silent = time.time()  # the client's last chance to send anything
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline and not line:
        time.sleep(0.1)
        with open(run.node.log_path, "rb") as f:
            f.seek(log_start)
            line = next((ln for ln in f.read().decode(errors="replace").splitlines() if "missed heartbeats" in ln), "")
    t_seen = time.time()
    time.sleep(1)
    error = None
    try:
        conn.process_data_events(time_limit=2)
        conn.process_data_events(time_limit=2)
    except pika.exceptions.AMQPError as e:
        error = [type(e).__name__, repr(e)]
    t_detected = time.time()
    m = re.match(r"(\S+ \S+)\+00:00", line)
    t_logged = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp() if m else None
    if t_logged is None or error is None:
        raise RuntimeError(f"heartbeat_timeout: the broker did not drop the connection ({line!r}, {error})")
    run.facts.update(
        negotiated_heartbeat_s=HEARTBEAT_S, silent_from_ts=t_silent, broker_log_seen_ts=t_seen,
        client_detected_ts=t_detected, client_error=error, broker_log_line=line,
        broker_logged_ts=round(t_logged, 6), silence_before_broker_dropped_s=round(t_logged - t_silent, 2),
        expected_findings=[
            f"connection fixture-{run.name}-silent closed by the broker for missed heartbeats: heartbeat "
            f"{HEARTBEAT_S} s negotiated (connection.tune-ok); the client sent nothing from about "
            f"{t_silent:.3f} (epoch s; its last heartbeat had gone out a second or so before: the silences "
            "below give the silence on the wire), the broker kept sending "
            f"heartbeats, then, by its log {t_logged - t_silent:.1f} s after the silence began, reset the TCP "
            "connection (RST: no connection.close, no FIN); the client found out only at its next read "
            f"({error[0]}: connection reset by peer); broker log: "
            f"\"{line.split('] ', 1)[-1].strip()}\"",
            "an abrupt end: the connection ends without connection.close/close-ok",
            "nothing before the silence: heartbeats on time, publish and get without error"])


# -- 5. refused login --------------------------------------------------------


@fault
def refused_login(run: Run) -> None:
    """Four connections in turn: user guest with a wrong password (refused at
    login), guest to a vhost that does not exist, a user without permissions
    to vhost / (both refused at connection.open), then a good connection that
    declares a queue, publishes, gets the message back and closes."""
    noperm = f"{run.name}-noperm"
    run.node.ctl("add_user", noperm, "noperm")  # no set_permissions
    attempts = [("bad_password", pika.PlainCredentials("guest", "not-the-password"), "/"),
                ("no_such_vhost", pika.PlainCredentials("guest", "guest"), f"{run.name}-no-such-vhost"),
                ("no_permission", pika.PlainCredentials(noperm, "noperm"), "/")]
    refused = []
    try:
        for label, creds, vhost in attempts:
            t0 = time.time()
            try:
                c = pika.BlockingConnection(pika.ConnectionParameters(
                    host=run.host, port=run.node.port, credentials=creds, virtual_host=vhost,
                    connection_attempts=1, client_properties={"connection_name": f"fixture-{run.name}-{label}"}))
            except pika.exceptions.AMQPConnectionError as e:
                # pika wraps the broker's close in a Probable*Error whose only argument is its text
                m = re.search(r"\((\d{3})\) (['\"])(.*)\2", str(e.args[0]) if e.args else "")
                refused.append({"attempt": label, "user": creds.username, "vhost": vhost, "ts": round(t0, 6),
                                "exception": type(e).__name__, "reply_code": int(m.group(1)) if m else None,
                                "reply_text": m.group(3) if m else None, "detail": str(e)[:300]})
                run.count("refused")
            else:
                c.close()
                raise RuntimeError(f"{label}: the broker let it in")
    finally:
        run.node.ctl("delete_user", noperm)
    conn = connect(run, "good")
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    ch.basic_publish("", q, b"the good one")
    run.count("published")
    ch.basic_get(q, auto_ack=True)
    run.count("get_ok")
    ch.queue_delete(q)
    conn.close()
    codes = {r["attempt"]: (r["reply_code"], r["reply_text"]) for r in refused}
    if any(r["reply_code"] is None for r in refused):
        raise RuntimeError(f"refused_login: no reply code in {refused}")
    run.facts.update(refused=refused, expected_findings=[
        f"authentication refused: user guest, wrong password: {codes['bad_password'][0]} "
        f"({codes['bad_password'][1]}) in the broker's connection.close after connection.start-ok, before tune",
        f"vhost refused: {run.name}-no-such-vhost does not exist: {codes['no_such_vhost'][0]} "
        f"({codes['no_such_vhost'][1]}) in the broker's connection.close answering connection.open",
        f"vhost refused: user {noperm} has no permissions on /: {codes['no_permission'][0]} "
        f"({codes['no_permission'][1]}) in the broker's connection.close answering connection.open",
        f"connection errors by code: {codes['bad_password'][0]} x1, 530 x2 (all raised by the broker; pika "
        "answers none of them with close-ok but closes its socket, and the broker resets it)",
        f"no finding on connection fixture-{run.name}-good (publish, get, clean close)"])


# -- 6. consumer cancelled ---------------------------------------------------


@fault
def consumer_cancelled(run: Run) -> None:
    """One consumer connection with two channels, each consuming its own queue
    (2 messages each, acked). A second connection deletes the first queue
    (queue.delete on the wire); the broker sends basic.cancel to channel 1's
    consumer. Then `rabbitmqctl delete_queue` deletes the second queue (nothing
    on the wire but the broker's basic.cancel to channel 2). Both connections
    close normally."""
    conn = connect(run, "consumer")
    queues = {1: f"{run.name}.by-queue-delete", 2: f"{run.name}.by-rabbitmqctl"}
    cancels: dict = {}
    chans, ctags = {}, {}
    for n, q in queues.items():
        ch = conn.channel()
        ch.queue_declare(q)
        ch.add_on_cancel_callback(lambda m, n=n: cancels.setdefault(n, (m.method.consumer_tag, time.time())))
        got: list = []
        ctags[n] = ch.basic_consume(q, lambda c, m, p, b, got=got: (c.basic_ack(m.delivery_tag), got.append(1)))
        for i in range(2):
            ch.basic_publish("", q, body(32, i))
            run.count("published")
        pump(conn, lambda got=got: len(got) == 2, what="2 deliveries")
        run.count("delivered", 2)
        run.count("acked", 2)
        chans[n] = ch
    snap(run, "consuming")
    other = connect(run, "deleter")
    t_delete = time.time()
    other.channel().queue_delete(queues[1])
    pump(conn, lambda: 1 in cancels, what="basic.cancel after queue.delete")
    t_ctl = time.time()
    run.node.ctl("delete_queue", queues[2])
    pump(conn, lambda: 2 in cancels, what="basic.cancel after rabbitmqctl delete_queue")
    conn.process_data_events(time_limit=0.2)
    other.close()
    conn.close()
    run.count("cancelled_by_broker", len(cancels))
    run.facts.update(
        queues=queues, consumer_tags=ctags, queue_delete_ts=t_delete, rabbitmqctl_delete_ts=t_ctl,
        cancels={n: {"consumer_tag": tag, "ts": round(t, 6)} for n, (tag, t) in cancels.items()},
        expected_findings=[
            f"consumer cancelled by the broker: {ctags[1]} on channel 1 (queue {queues[1]}), basic.cancel from the "
            f"broker {cancels[1][1] - t_delete:.3f} s after connection fixture-{run.name}-deleter sent queue.delete "
            "for its queue",
            f"consumer cancelled by the broker: {ctags[2]} on channel 2 (queue {queues[2]}), deleted with "
            "rabbitmqctl delete_queue: no cause on the wire",
            "nothing else: every delivery acked, both connections close cleanly"])


# -- 7. churn ----------------------------------------------------------------

CHURN_CONNECTIONS, CHURN_CHANNELS = 30, 40


@fault
def churn(run: Run) -> None:
    """A long connection declares a queue; then 30 short connections in a row,
    each: open, one channel, one publish, close; then the long connection opens
    and closes 40 channels one after the other (channel.open, channel.close);
    it deletes the queue and closes."""
    main = connect(run, "main")
    ch = main.channel()
    q = ch.queue_declare(run.name).method.queue
    lives = []
    t0 = time.time()
    for i in range(CHURN_CONNECTIONS):
        t = time.time()
        c = connect(run, f"short-{i}")
        c.channel().basic_publish("", q, body(32, i))
        c.close()
        lives.append(round(time.time() - t, 4))
        run.count("published")
        run.count("short_connections")
    t1 = time.time()
    ch_lives = []
    for _ in range(CHURN_CHANNELS):
        t = time.time()
        main.channel().close()
        ch_lives.append(round(time.time() - t, 4))
        run.count("short_channels")
    t2 = time.time()
    run.snapshot("after_churn")
    ch.queue_delete(q)
    main.close()
    run.facts.update(
        short_connection_s=lives, connections_span_s=round(t1 - t0, 3), short_channel_s=ch_lives,
        channels_span_s=round(t2 - t1, 3),
        expected_findings=[
            f"connection churn: {CHURN_CONNECTIONS} connections (fixture-{run.name}-short-0..{CHURN_CONNECTIONS - 1}) "
            f"opened and closed within {t1 - t0:.1f} s, each open for {min(lives) * 1000:.0f}..{max(lives) * 1000:.0f} "
            "ms (client-measured, connect to close-ok), one publish each",
            f"channel churn: {CHURN_CHANNELS} channels opened and closed on connection fixture-{run.name}-main "
            f"within {t2 - t1:.1f} s, each open for at most {max(ch_lives) * 1000:.0f} ms",
            f"nothing else: every connection closes with 200; pika closes each of the {CHURN_CHANNELS} short channels "
            "with channel.close reply-code 0 \"Normal shutdown\" (its BlockingChannel.close() default), not 200: "
            "a client's normal close, no channel error"])


# -- 8. publishes nacked -----------------------------------------------------


@fault
def publish_nacked(run: Run) -> None:
    """confirm.select; a queue with x-max-length 2 and x-overflow
    reject-publish, no consumer; 6 publishes one at a time, each waiting for
    its confirm: the broker acks the first 2 (basic.ack, multiple=false) and
    nacks the other 4, one basic.nack each, every one with multiple=true (RabbitMQ
    3.10's reject-publish path; it covers only that tag, nothing else being
    unconfirmed)."""
    conn = connect(run, "publisher")
    ch = conn.channel()
    q = ch.queue_declare(run.name, arguments={"x-max-length": 2, "x-overflow": "reject-publish"}).method.queue
    confirms = Confirms(run, conn, ch)
    outcomes = []
    for i in range(6):
        before = run.client["broker_nacked"]
        confirms.publish("", q, body(64, i), properties=pika.BasicProperties(message_id=f"{run.name}-{i}"))
        confirms.wait()
        outcomes.append("nack" if run.client["broker_nacked"] > before else "ack")
    run.snapshot("after_publishes")
    nacked = [i + 1 for i, o in enumerate(outcomes) if o == "nack"]
    run.facts.update(queue=q, outcomes_by_tag=dict(enumerate(outcomes, start=1)), expected_findings=[
        f"publishes nacked by the broker: {len(nacked)} of 6 on connection fixture-{run.name}-publisher, channel 1 "
        f"(delivery tags {', '.join(map(str, nacked))}, routing key {q}): the queue is full (x-max-length 2, "
        "x-overflow reject-publish)",
        "nothing else: no error, clean close"])
    ch.queue_delete(q)
    conn.close()


# -- 9. clean traffic (the negative control) ---------------------------------

CLEAN_RATE_S = 0.1  # one publish every 100 ms while publishing


@fault
def clean_traffic(run: Run) -> None:
    """The negative control. heartbeat 2 s on two connections: a publisher in
    confirm mode and a consumer (basic.qos prefetch 20) that acks each delivery
    as it arrives. 3 s of publishing (one every 100 ms), 3 s idle (heartbeats
    only), 2 s of publishing; every publish confirmed and every delivery acked;
    basic.cancel, clean closes."""
    pub = connect(run, "publisher", heartbeat=2)
    con = connect(run, "consumer", heartbeat=2)
    pch, cch = pub.channel(), con.channel()
    q = pch.queue_declare(run.name).method.queue
    confirms = Confirms(run, pub, pch)
    cch.basic_qos(prefetch_count=20)
    ack_delays: list = []

    def on_message(c, m, p, b) -> None:
        t = time.time()
        c.basic_ack(m.delivery_tag)
        ack_delays.append(time.time() - t)
        run.count("delivered")
        run.count("acked")

    ctag = cch.basic_consume(q, on_message)

    def spin(seconds: float, publishing: bool) -> None:
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            if publishing:
                confirms.publish("", q, body(128, i), properties=pika.BasicProperties(message_id=f"clean-{i}"))
                i += 1
            for c in (pub, con):
                c.process_data_events(time_limit=CLEAN_RATE_S / 2)

    phases = []
    for seconds, publishing in ((3, True), (3, False), (2, True)):
        phases.append((now(), seconds, publishing))
        spin(seconds, publishing)
    confirms.wait()
    pump(con, lambda: run.client["delivered"] == run.client["published"], what="all delivered")
    snapper = threading.Thread(target=run.snapshot, args=("drained",))
    snapper.start()
    while snapper.is_alive():  # rabbitmqctl takes seconds: both connections keep their heartbeats meanwhile
        spin(0.1, False)
    snapper.join()
    cch.basic_cancel(ctag)
    pch.queue_delete(q)
    con.close()
    pub.close()
    run.facts.update(consumer_tag=ctag, phases=phases, max_ack_delay_s=round(max(ack_delays), 4), expected_findings=[
        "none above info: heartbeats on time on both connections (2 s negotiated; RabbitMQ beats only after "
        "a whole check of 1 s in which it sent nothing, so the broker's side may stay silent for almost 2 s: "
        "a missed-heartbeat rule must allow two intervals, as the broker does), every publish confirmed, "
        f"every delivery acked on arrival (client-side delay at most {max(ack_delays) * 1000:.1f} ms), the "
        "consumer never near its prefetch 20, no error, both connections closed with 200"])


# -- 10-11. AMQP 1.0 on proton's reactor -------------------------------------------


def proton_run(steps) -> tuple[collections.Counter, dict]:
    """Run ``steps(h)`` on python-qpid-proton's reactor, in this process: a generator yielding (what, ready) waits
    (make_fixtures.StepScript), that opens its own connections with ``h.container``. ``h.received[link name]`` holds the
    (delivery, message) pairs a receiver link got; ``h.on_peer`` (if set) is called with each link a peer opened
    toward a listener of the script's. Returns the counts and facts the steps kept."""
    from proton import Endpoint
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    counts: collections.Counter = collections.Counter()
    facts: dict = {"remote_errors": []}

    class Handler(StepScript, MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
            self.counts, self.facts = counts, facts
            self.received: dict = collections.defaultdict(list)
            self.accepted: dict = {}  # delivery tag -> when the peer settled it accepted
            self.sent: dict = {}  # delivery tag -> when it was sent
            self.on_peer = None
            self.on_sendable_link = None
            self.detached: list = []

        def on_start(self, event) -> None:
            self.start_steps(event.container, steps(self))

        def steps_done(self) -> None:
            self.container.stop()  # a listener of the script's would keep the reactor running

        def closed(self, endpoint) -> bool:
            """Closed by the peer; for a link, detached (RabbitMQ 3.10 answers detach closed=true without closed)."""
            return bool(endpoint.state & Endpoint.REMOTE_CLOSED) or endpoint in self.detached

        def on_link_remote_detach(self, event) -> None:
            self.detached.append(event.link)
            event.link.detach()

        @staticmethod
        def active(endpoint) -> bool:
            return bool(endpoint.state & Endpoint.REMOTE_ACTIVE)

        def send(self, lnk, message) -> None:
            d = lnk.send(message)
            self.sent[d.tag] = time.time()
            counts["published"] += 1

        def on_link_opening(self, event) -> None:  # a link a peer opened toward our listener
            lnk = event.link
            (lnk.target if lnk.is_receiver else lnk.source).address = (
                lnk.remote_target if lnk.is_receiver else lnk.remote_source).address
            if self.on_peer is not None:
                self.on_peer(lnk)

        def on_sendable(self, event) -> None:
            if self.on_sendable_link is not None:
                self.on_sendable_link(event.link)

        def on_message(self, event) -> None:
            self.received[event.link.name].append((event.delivery, event.message))
            counts["delivered"] += 1

        def on_accepted(self, event) -> None:
            self.accepted[event.delivery.tag] = time.time()
            counts["accepted_by_peer"] += 1

        def on_rejected(self, event) -> None:
            counts["rejected_by_peer"] += 1

        def on_session_error(self, event) -> None:
            cond = event.session.remote_condition
            facts["remote_errors"].append({"on": "end", "ts": now(), "condition": cond.name,
                                           "description": cond.description})

        def on_link_error(self, event) -> None:
            cond = event.link.remote_condition
            facts["remote_errors"].append({"on": "detach", "link": event.link.name, "ts": now(),
                                           "condition": cond.name, "description": cond.description})

        def on_connection_error(self, event) -> None:
            cond = event.connection.remote_condition
            facts["remote_errors"].append({"on": "close", "ts": now(), "condition": cond.name,
                                           "description": cond.description})

    Container(Handler()).run()
    return counts, facts


def rabbit_sender(h, run: Run, suffix: str, link: str):
    """Steps: a 1.0 connection to the fixture broker (SASL PLAIN guest, container-id ``fixture-NAME-suffix``), a
    session, a sender link ``link`` to /queue/NAME, up to its first credit. Returns (connection, session, link)."""
    c = h.container.connect(f"amqp://{run.host}:{run.node.port}", handler=h, reconnect=False, user="guest",
                            password="guest", allowed_mechs="PLAIN", allow_insecure_mechs=True,
                            container_id=f"fixture-{run.name}-{suffix}")
    yield f"open ({suffix})", lambda: h.active(c)
    ssn = c.session()
    ssn.open()
    snd = h.link(ssn, "sender", link, f"/queue/{run.name}")
    yield f"credit on {link}", lambda: snd.credit > 0
    return c, ssn, snd


# -- 10. dispositions modified -----------------------------------------------------


@fault
def amqp10_modified(run: Run):
    """AMQP 1.0 from python-qpid-proton: a sender link (session 0) sends 3
    messages to /queue/amqp10_modified, all accepted. A receiver on session 1
    with credit 3 settles its deliveries one disposition each: accepted,
    rejected, then modified with delivery-failed=true; a receiver on session 2
    with credit 1 takes the queue's next message (which one came back: the
    findings below) and settles it modified with undeliverable-here=true.
    RabbitMQ 3.10 does not implement the modified
    outcome: each modified disposition makes it end that session with
    amqp:invalid-field (the message goes back to the queue). The sender
    detaches and the connection closes; the queue is deleted after the
    capture."""
    from proton import Delivery, Message

    address, settled = f"/queue/{run.name}", []

    def settle(h, lnk, d, m, outcome: str) -> None:
        if outcome in ("delivery-failed", "undeliverable-here"):
            d.local.failed = outcome == "delivery-failed"
            d.local.undeliverable = outcome == "undeliverable-here"
            d.update(Delivery.MODIFIED)
            d.settle()
            h.counts["modified"] += 1
        else:
            getattr(h, {"accepted": "accept", "rejected": "reject"}[outcome])(d)
            h.counts[outcome] += 1
        settled.append({"link": lnk.name, "message_id": m.id, "outcome": outcome, "ts": now(),
                        "first_acquirer": m.first_acquirer})

    def steps(h):
        c, s0, snd = yield from rabbit_sender(h, run, "client", f"{run.name}-sender")
        for i in range(3):
            h.send(snd, Message(id=f"{run.name}-{i}", body=f"amqp 1.0 message {i}", durable=False))
        yield "3 accepted", lambda: h.counts["accepted_by_peer"] == 3
        ended = {}
        for n, outcomes in ((1, ("accepted", "rejected", "delivery-failed")), (2, ("undeliverable-here",))):
            ssn = c.session()
            ssn.open()
            r = h.link(ssn, "receiver", f"{run.name}-receiver-{n}", address)
            r.flow(len(outcomes))
            h.counts["credit_granted"] += len(outcomes)
            got = h.received[r.name]
            yield f"{len(outcomes)} deliveries on session {n}", lambda got=got, k=len(outcomes): len(got) == k
            for (d, m), outcome in zip(got, outcomes):
                settle(h, r, d, m, outcome)
            t, limit = time.time(), time.monotonic() + 3
            yield f"session {n} ended", lambda ssn=ssn, limit=limit: h.closed(ssn) or time.monotonic() > limit
            ended[n] = {"ended_by_broker": h.closed(ssn), "after_s": round(time.time() - t, 3)}
        snd.close()
        yield "sender detached", lambda: h.closed(snd)
        s0.close()
        yield "session 0 ended", lambda: h.closed(s0)
        c.close()
        yield "closed", lambda: h.closed(c)
        h.facts.update(settled=settled, sessions_after_modified=ended)
        snap(run, "after_close", "queues")  # what the queue kept

    counts, facts = proton_run(steps)
    run.client.update(counts)
    errors = facts["remote_errors"]
    again = [x for x in facts["settled"] if not x["first_acquirer"]]
    first = {x["message_id"]: x["outcome"] for x in facts["settled"] if x["first_acquirer"]}
    back = "; ".join(f"{x['message_id']}, settled {first.get(x['message_id'])} on session 1, came back on session 2 "
                     "with first-acquirer false" for x in again) + ": once, not a loop" if again else "no message came back"
    run.facts.update(facts, expected_findings=[
        f"dispositions modified: {counts['modified']} deliveries from the broker settled by the client with the "
        "modified outcome (one delivery-failed, one undeliverable-here), and 1 settled rejected, on connection "
        f"fixture-{run.name}-client (dispositions, role receiver, settled=true): info, as the rule says",
        f"sessions ended by the broker with an error: {len(errors)} (" + "; ".join(
            f"{e['condition']}: {e['description'].splitlines()[0]}" for e in errors) + "), each right after a "
        "modified disposition: RabbitMQ 3.10's plugin does not implement modified",
        "nothing else: the 3 sends accepted, the connection closed without error (" + back + ")"])

    def after_capture() -> None:
        run.node.ctl("delete_queue", run.name)

    return after_capture


# -- 11. a sender without link credit -------------------------------------------------

PEER_HOST = "127.0.0.2"  # the proton peer that withholds credit; the fixture broker listens on 127.0.0.1 only
CREDIT_GRANTS, CREDIT_HOLD_S = (2, 2, 2), 1.5
ALARM_SENDS = (4, 3)  # transfers to RabbitMQ before the memory alarm, while it is set
ALARM_SPACING_S = 0.3  # between the transfers sent while the alarm is set (the first 0.3 s after it is set)


@fault
def amqp10_credit_starved(run: Run):
    """Two AMQP 1.0 sender links from python-qpid-proton, one after the other.
    First to RabbitMQ: it grants link credit 65536 at attach; 4 transfers are
    accepted, then the memory alarm is set (rabbitmqctl
    set_vm_memory_high_watermark 0.0000001) and 3 more are sent, 0.3 s apart;
    1.5 s after the last the alarm is cleared. RabbitMQ 3.10 never withholds
    link credit (its incoming links get a constant 65536, topped up every
    32768 transfers); here it did not even hold back the transfers sent
    during the alarm. Then to a Qpid
    Proton peer (the script's own listener on 127.0.0.2:5672, playing the
    receiving side): it grants credit 2 three times and withholds credit for
    1.5 s after each of the first two grants is used up; the sender sends
    whenever it has credit (6 transfers, all accepted), then detaches at once."""
    from proton import Message

    peer_url = f"amqp://{PEER_HOST}:{AMQP_PORT}"
    log_start = run.node.log_path.stat().st_size
    rabbit: dict = {}
    peer: dict = {"grants": [], "zero_credit": [], "credit_back": []}

    def steps(h):
        # -- RabbitMQ: the memory alarm
        c, ssn, snd = yield from rabbit_sender(h, run, "rabbitmq", f"{run.name}-rabbitmq")
        rabbit["credit_at_attach"] = snd.credit
        before, during = ALARM_SENDS
        for i in range(before):
            h.send(snd, Message(id=f"rabbit-{i}", body=body(64, i), durable=False))
        yield f"{before} accepted", lambda: h.counts["accepted_by_peer"] == before
        run.node.ctl("set_vm_memory_high_watermark", "0.0000001")
        rabbit["alarm_set_ts"] = now()
        tags = []
        for i in range(before, before + during):
            yield h.pause(ALARM_SPACING_S)
            h.send(snd, Message(id=f"rabbit-{i}", body=body(64, i), durable=False))
            tags.append(list(h.sent)[-1])
        yield h.pause(CREDIT_HOLD_S)
        rabbit["credit_during_alarm"] = snd.credit
        rabbit["accepted_during_alarm"] = sum(t in h.accepted for t in tags)
        run.node.ctl("set_vm_memory_high_watermark", "0.4")
        rabbit["alarm_cleared_ts"] = now()
        yield "all accepted", lambda: h.counts["accepted_by_peer"] == before + during
        rabbit["send_to_accept_s"] = [round(h.accepted[t] - h.sent[t], 3) for t in h.sent]
        snd.close()
        yield "detached", lambda: h.closed(snd)
        ssn.close()
        c.close()
        yield "closed", lambda: h.closed(c)

        # -- the proton peer: credit withheld
        h.container.listen(f"{PEER_HOST}:{AMQP_PORT}")
        peer_links: list = []
        h.on_peer = peer_links.append
        c2 = h.container.connect(peer_url, handler=h, reconnect=False, allowed_mechs="ANONYMOUS",
                                 container_id=f"fixture-{run.name}-sender")
        s2 = c2.session()
        s2.open()
        total, left = sum(CREDIT_GRANTS), [sum(CREDIT_GRANTS)]

        def sendable(lnk) -> None:
            if lnk.name != f"{run.name}-sender" or not left[0]:
                return
            if peer["zero_credit"] and len(peer["credit_back"]) < len(peer["zero_credit"]):
                peer["credit_back"].append(now())
            while lnk.credit > 0 and left[0]:
                h.send(lnk, Message(id=f"peer-{total - left[0]}", body=body(64, left[0]), durable=False))
                left[0] -= 1
            if lnk.credit == 0:
                peer["zero_credit"].append(now())

        h.on_sendable_link = sendable
        peer["attach_ts"] = now()
        snd2 = h.link(s2, "sender", f"{run.name}-sender", "/queue/starved")
        yield "the peer's receiver", lambda: peer_links and h.active(snd2)
        got = h.received[peer_links[0].name]
        for n, grant in enumerate(CREDIT_GRANTS):
            if n:
                yield h.pause(CREDIT_HOLD_S)  # the sender has used its credit: none comes for a while
            peer["grants"].append(now())
            peer_links[0].flow(grant)
            want = sum(CREDIT_GRANTS[: n + 1])
            yield f"{want} at the peer", lambda want=want: len(got) >= want
            for d, _m in got[want - grant:]:
                h.accept(d)
        yield "all accepted by the peer", lambda: h.counts["accepted_by_peer"] == ALARM_SENDS[0] + ALARM_SENDS[1] + total
        snd2.close()
        peer["detach_ts"] = now()
        yield "sender detached", lambda: h.closed(snd2)
        s2.close()
        c2.close()
        yield "peer connection closed", lambda: h.closed(c2)

    counts, facts = proton_run(steps)
    run.client.update(counts)
    starved = sum(b - z for z, b in zip(peer["zero_credit"], peer["credit_back"]))
    tail = peer["detach_ts"] - peer["zero_credit"][-1] if len(peer["zero_credit"]) > len(peer["credit_back"]) else 0
    life = peer["detach_ts"] - peer["attach_ts"]
    waited = [s for s in rabbit["send_to_accept_s"][ALARM_SENDS[0]:]]
    run.facts.update(facts, rabbitmq=rabbit, peer=peer, peer_starved_s=round(starved + tail, 3),
                     peer_link_life_s=round(life, 3), expected_findings=[
        f"credit starved: the sender link {run.name}-sender on connection fixture-{run.name}-sender (to the proton "
        f"peer on {PEER_HOST}:{AMQP_PORT}) had no link credit for about {pct(starved + tail, life)}% of its life "
        f"({starved + tail:.1f} s of {life:.1f} s from attach to detach, as the client measured: the peer withheld "
        f"credit {CREDIT_HOLD_S} s after each of its first two grants was used up)",
        f"no credit starvation on the link to RabbitMQ (fixture-{run.name}-rabbitmq): the broker granted "
        f"{rabbit['credit_at_attach']} at attach and never less; during the memory alarm "
        f"({rabbit['alarm_cleared_ts'] - rabbit['alarm_set_ts']:.1f} s by the script's clock; the broker log shows it "
        "set and cleared) the "
        f"client still had {rabbit['credit_during_alarm']} credit, and the {ALARM_SENDS[1]} transfers sent then were "
        f"accepted {min(waited) * 1000:.0f}..{max(waited) * 1000:.0f} ms after they were sent (client-measured; "
        f"{rabbit['accepted_during_alarm']} of them while the alarm was still set): "
        + ("the alarm did not hold this 1.0 publisher back at all, so there is nothing to find on it"
           if max(waited) < 0.5 else "the alarm held them back without touching credit"),
        "nothing else: every transfer accepted, both connections closed without error"])
    with open(run.node.log_path, "rb") as log:  # the alarm set and cleared (run_scenario writes the same slice)
        log.seek(log_start)
        run.facts["broker_log_alarm_lines"] = [ln for ln in log.read().decode(errors="replace").splitlines()
                                               if "alarm" in ln]

    def after_capture() -> None:
        run.node.ctl("delete_queue", run.name)

    return after_capture


# -- 12. channel.flow active=false ------------------------------------------------------


@fault
def channel_flow(run: Run):
    """A pika client on channel 1: queue.declare, a publish, channel.flow
    active=true (RabbitMQ answers flow-ok active=true), then channel.flow
    active=false: RabbitMQ 3.10 does not implement it and closes the
    connection with 540 NOT_IMPLEMENTED "active=false"; pika sends no
    close-ok, it closes the socket (FIN) and the broker resets it. RabbitMQ
    never sends channel.flow itself (it blocks publishers with
    connection.blocked)."""
    conn = connect(run, "client")
    ch = conn.channel()
    q = ch.queue_declare(run.name).method.queue
    ch.basic_publish("", q, body(64), pika.BasicProperties(message_id=f"{run.name}-0"))
    run.count("published")
    run.facts["flow_on_answer"] = ch.flow(True)
    run.count("flow_requests")
    t_off = time.time()
    try:
        ch.flow(False)
        run.count("flow_requests")
    except pika.exceptions.ConnectionClosedByBroker as e:
        run.count("flow_requests")
        run.facts.update(connection_close=[e.reply_code, e.reply_text], close_after_s=round(time.time() - t_off, 3))
    code, text = run.facts.get("connection_close", [None, ""])
    run.facts["expected_findings"] = [
        f"connection error: the broker closed connection fixture-{run.name}-client with {code} "
        f"{text.split(' - ')[0]} (\"{text}\") {run.facts.get('close_after_s', 0) * 1000:.0f} ms after the client "
        "sent channel.flow active=false on channel 1 (client-measured)",
        "no channel.flow off: the broker refused to stop (it never answered flow-ok active=false), so no time "
        "with flow off; channel.flow active=true was answered flow-ok active=true",
        "nothing else: the publish went through; pika answered the broker's close with a FIN, no close-ok (the "
        "broker reset the socket): the end of that error close, not an abrupt end of its own"]

    def after_capture() -> None:
        run.node.ctl("delete_queue", run.name)

    return after_capture


# -- README sections -----------------------------------------------------------

METHOD_NAMES = {f"{m.INDEX >> 16}.{m.INDEX & 0xFFFF}": re.sub(r"(?<=[a-z])([A-Z])", r"-\1", m.NAME).lower()
                for m in pika.spec.methods.values()}  # Basic.GetOk -> basic.get-ok
METHOD_NAMES |= {str(code): name for code, name in enumerate(  # AMQP 1.0 performatives, as tshark_methods counts them
    ("open", "begin", "attach", "flow", "transfer", "disposition", "detach", "end", "close"), start=16)}


def heading(name: str) -> str:
    return f"## `{name}.pcap`"


def tshark_fields(pcap: Path, *fields: str, display: str = "tcp") -> list[list[str]]:
    args = ["tshark", "-n", "-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", display, "-T", "fields",
            "-E", "occurrence=a", "-E", "aggregator=;"]
    for f in fields:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def connection_ends(pcap: Path) -> list[str]:
    """How each TCP connection ended, as tshark sees it: connection.close / close-ok with codes (who sent
    them), then the first FIN and any RST (who sent them); `open at capture end` when neither."""
    rows = tshark_fields(pcap, "tcp.stream", "tcp.srcport", "tcp.dstport", "tcp.flags.fin", "tcp.flags.reset",
                         "amqp.method.class", "amqp.method.method", "amqp.method.arguments.reply_code")
    ends: dict = collections.OrderedDict()
    for stream, sport, dport, fin, rst, classes, methods, codes in rows:
        side = "broker" if int(sport) == AMQP_PORT else "client"
        e = ends.setdefault(int(stream), {"client_port": dport if side == "broker" else sport, "events": []})
        code_list = [c for c in codes.split(";") if c]
        for c, m in zip(classes.split(";"), methods.split(";")):
            if (c, m) in (("10", "50"), ("10", "51")):
                what = "connection.close" if m == "50" else "connection.close-ok"
                if m == "50" and code_list:
                    what += f" {code_list.pop(0)}"
                e["events"].append(f"{what} from {side}")
        if fin in ("1", "True") and not any(x.startswith("FIN") for x in e["events"]):
            e["events"].append(f"FIN from {side} first")
        if rst in ("1", "True"):
            e["events"].append(f"RST from {side}")
    grouped: dict = collections.OrderedDict()  # the same end, in the order first seen -> client ports
    for e in ends.values():
        grouped.setdefault(", ".join(e["events"]) or "open at capture end", []).append(e["client_port"])
    return [f"client port {ports[0]}: {how}" if len(ports) == 1 else
            f"{len(ports)} connections (client ports {', '.join(ports)}): {how}" for how, ports in grouped.items()]


def heartbeat_frames(pcap: Path) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for sport, types in tshark_fields(pcap, "tcp.srcport", "amqp.type", display="amqp"):
        counts["broker" if int(sport) == AMQP_PORT else "client"] += types.split(";").count("8")
    return counts


def longest_silences(pcap: Path) -> list[str]:
    """Per connection, the longest stretch in which each side sent no TCP payload (heartbeats count), up
    to the connection's last packet (a FIN or RST ends a silence too)."""
    last: dict = {}
    end: dict = {}
    gaps: dict = collections.OrderedDict()
    for sport, dport, rel, length in tshark_fields(pcap, "tcp.srcport", "tcp.dstport", "frame.time_relative", "tcp.len"):
        side = "broker" if int(sport) == AMQP_PORT else "client"
        port, t = (dport if side == "broker" else sport), float(rel)
        gaps.setdefault(port, {"client": 0.0, "broker": 0.0})
        end[port] = t
        if length and int(length) > 0:
            if (port, side) in last:
                gaps[port][side] = max(gaps[port][side], t - last[port, side])
            last[port, side] = t
    for (port, side), t in last.items():
        gaps[port][side] = max(gaps[port][side], end[port] - t)
    return [f"client port {port}: client {g['client']:.2f} s, broker {g['broker']:.2f} s" for port, g in gaps.items()]


def log_highlights(log: str, limit: int = 8) -> list[str]:
    keep = [ln for ln in log.splitlines() if "[warning]" in ln or "[error]" in ln]
    return keep[:limit]


def readme_section(name: str, oracle: dict, versions: dict) -> str:
    pcap = BROKER_DIR / f"{name}.pcap"
    counts = tshark_methods(pcap)
    methods = ", ".join(f"{counts[k]} {METHOD_NAMES.get(k, k)}" for k in sorted(counts, key=lambda k: tuple(map(int, k.split(".")))))
    beats = heartbeat_frames(pcap)
    doc = " ".join((FAULTS[name].__doc__ or "").split())
    if name in PROTON_FAULTS:
        import proton
        library = f"python-qpid-proton {'.'.join(map(str, proton.VERSION))}"
    else:
        library = f"pika {pika.__version__}"
    client = ", ".join(f"`{k}` {v}" for k, v in oracle["client"].items())
    log = (BROKER_DIR / f"{name}.rabbitmq.log").read_text(errors="replace")
    findings = "\n".join(f"- {f}" for f in oracle["facts"]["expected_findings"])
    ends = "\n".join(f"- {e}" for e in connection_ends(pcap))
    lines = "\n".join(f"    {ln}" for ln in log_highlights(log)) or "    (no warning or error lines)"
    silences = ""
    if beats["client"] or beats["broker"]:  # heartbeats negotiated
        silences = ("\nLongest time each side sent nothing (no TCP payload, heartbeats included), tshark:\n\n"
                    + "\n".join(f"- {x}" for x in longest_silences(pcap)) + "\n")
    return f"""{heading(name)}: {FAULT_TITLES[name]} (issue 34)

Regenerate this one alone (as root; only this section of the README is rewritten):

    .venv/bin/python tools/make_fixtures.py --only {name} --no-demo

Made with RabbitMQ {versions['rabbitmq']} (Erlang/OTP {versions['otp']}) and {library}, in
{oracle['seconds']} s; {pcap.stat().st_size} bytes, {oracle['capture'].get('packets_captured')} packets.

{doc}

Methods as tshark counts them: {methods}; heartbeat frames: {beats['client']} from the client,
{beats['broker']} from the broker.

Client counts (`client` in `{name}.oracle.json`): {client}. Its `facts` hold what the script measured
(epoch seconds).

How each connection ended (tshark):

{ends}
{silences}
Findings a diagnosing tool should raise (from the script and what the client measured):

{findings}

`{name}.rabbitmq.log` is the broker's log while the scenario ran; its warnings and errors:

{lines}
"""


PROTON_FAULTS = ("amqp10_modified", "amqp10_credit_starved")  # AMQP 1.0 from python-qpid-proton
FAULT_TITLES = {
    "slow_consumer": "a consumer held at its prefetch limit, three slow acks",
    "requeue_loop": "one message nacked with requeue 16 times",
    "unsettled_at_end": "deliveries and publishes unsettled when the capture ends",
    "heartbeat_timeout": "the broker drops a silent client for missed heartbeats",
    "refused_login": "a wrong password, a missing vhost, a user without permissions",
    "consumer_cancelled": "the broker cancels consumers whose queues are deleted",
    "churn": "30 short connections, 40 short channels",
    "publish_nacked": "publishes nacked by a full reject-publish queue",
    "clean_traffic": "the negative control: nothing wrong",
    "amqp10_modified": "AMQP 1.0 deliveries settled modified (and one rejected)",
    "amqp10_credit_starved": "AMQP 1.0 senders: RabbitMQ's alarm keeps credit, a proton peer withholds it",
    "channel_flow": "channel.flow active=false, refused by RabbitMQ (540)",
}
