"""entity_label against RabbitMQ's own names: the broker snapshots saved with each real-broker fixture name every
connection "client ip:port -> server ip:port" and every channel "... (N)"; tools/make_fixtures.py set the connection_name
client property to "fixture-<scenario>" (0-9-1) and the container-id (1.0)."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import DATA
from tests.metrics.conftest import capture_id

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

TABLES = ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors")


def labels(store, name: str) -> dict:
    """{(entity_kind, entity_label)} of one fixture's rows over the four metric tables."""
    out = set()
    for t in TABLES:
        out |= {(r.entity_kind, r.entity_label) for r in store.read(t).where(f"capture_id = '{capture_id(name)}'")
                .select("entity_kind", "entity_label").distinct().collect()}
    return out


def broker_names(name: str) -> tuple[set, set, set]:
    """(connection names, (connection name, channel number), queue names) from every broker snapshot of the fixture."""
    snaps = json.loads((DATA / "broker" / f"{name}.oracle.json").read_text())["broker"].values()
    conns = {c["name"] for s in snaps for c in s.get("connections", [])}
    chans = set()
    for s in snaps:
        for ch in s.get("channels", []):
            m = re.fullmatch(r"(.*) \((\d+)\)", ch["name"])
            chans.add((m[1], int(m[2])))
    queues = {q["name"] for s in snaps for q in s.get("queues", [])}
    return conns, chans, queues


@pytest.mark.parametrize("name", ["consume_prefetch_ack", "nack_reject", "publish_confirms", "connection_forced", "basic_get"])
def test_connections_channels_and_queues_are_named_as_rabbitmq_names_them(metrics_lake, name):
    _, store, _ = metrics_lake
    got = labels(store, name)
    conns, chans, queues = broker_names(name)
    assert conns
    for c in conns:
        assert ("connection", f'{c} "fixture-{name}"') in got
    for c, n in chans:
        assert ("channel", f'{c} "fixture-{name}" ch {n}') in got
    # queues that messages went through are named as the broker names them (a declared, unused queue has no rows)
    assert {lab for kind, lab in got if kind == "queue"} <= {f"queue {q}" for q in queues}
    assert ("capture", f"{name}.pcap") in got


def test_a_consumer_names_its_tag_and_queue(metrics_lake):
    _, store, _ = metrics_lake
    (conn,), _, (queue,) = broker_names("consume_prefetch_ack")
    # the consumer tag as the broker sent it in basic.consume-ok, read from the frames by plain SQL
    tags = {r.consumer_tag for r in store.read("frames").where(
        f"capture_id = '{capture_id('consume_prefetch_ack')}' and method_name = 'consume-ok'").collect()}
    got = {lab for kind, lab in labels(store, "consume_prefetch_ack") if kind == "consumer"}
    assert got == {f'{conn} "fixture-consume_prefetch_ack" ch 1 consumer {t} queue {queue}' for t in tags}


def test_a_1_0_link_names_its_connection_container_and_attach_name(metrics_lake):
    _, store, _ = metrics_lake
    got = labels(store, "amqp10_rich")
    conns = {lab for kind, lab in got if kind == "connection"}
    assert conns and all(re.fullmatch(r'127\.0\.0\.1:\d+ -> 127\.0\.0\.1:5672 "fixture-amqp10_rich(-noperm)?"', c) for c in conns)
    links = {lab for kind, lab in got if kind == "link"}
    assert any(lab.endswith(" link rich-credit") for lab in links)  # the link name the fixture's client attached
    assert any(re.search(r" link rich-credit \(handle \d+\)$", lab) for lab in links)  # metrics_flow names links by handle


def test_every_metric_row_has_a_label(metrics_lake):
    _, store, _ = metrics_lake
    for t in TABLES:
        assert store.read(t).where("entity_label is null or entity_label = ''").count() == 0, t


def test_ipv6_endpoints_are_bracketed_as_rabbitmq_prints_them(metrics_lake):
    """RabbitMQ names an IPv6 connection "[::1]:50528 -> [::1]:5672" (rabbit_misc:ntoab); the demo has one."""
    _, store, _ = metrics_lake
    six = store.read("connections").where("ip_version = 6").collect()
    assert six
    got = {r.entity: r.entity_label for r in store.read("metrics_latency").where("entity_kind = 'connection'").collect()}
    for c in six:
        assert got[c.connection_id].startswith(f"[{c.client_ip}]:{c.client_port} -> [{c.server_ip}]:{c.server_port}")
