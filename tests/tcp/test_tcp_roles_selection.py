"""Who is the client, which flows are kept, and which are TLS."""

from __future__ import annotations

from .tcp_packets import CLIENT, SERVER, handshake, run

AMQP091 = b"AMQP\x00\x00\x09\x01"


def test_syn_sender_is_client_even_from_the_amqp_port():
    # The SYN comes from port 5672: the handshake beats the port rule.
    a, b = "10.0.0.1:5672", "10.0.0.2:40000"
    rows = handshake(0, client=a, server=b) + [(300, a, b, "PA", 1001, AMQP091)]
    rec, consumer = run(rows).only()
    assert (rec.client_ip, rec.client_port, rec.server_port) == ("10.0.0.1", 5672, 40000)
    assert rec.syn_seen
    assert rec.selected_by == "sniff"  # the server port 40000 is not configured
    assert consumer.assembled("to_server") == AMQP091


def test_syn_ack_alone_makes_its_sender_the_server():
    rows = [
        (100, SERVER, CLIENT, "SA", 5000, b"", {"ack": 1001}),
        (250, CLIENT, SERVER, "A", 1001, b""),
        (300, CLIENT, SERVER, "PA", 1001, AMQP091),
    ]
    rec, consumer = run(rows).only()
    assert (rec.client_port, rec.server_port) == (40000, 5672)
    assert not rec.syn_seen  # the client's SYN was not captured
    assert rec.handshake_rtt_us is None
    assert consumer.events[0][:3] == ("data", "to_server", 0)


def test_without_syn_the_configured_port_is_the_server():
    # Mid-stream capture; the first packet comes from the server.
    rows = [
        (10, SERVER, CLIENT, "PA", 9000, b"\x01\x00\x00"),
        (20, CLIENT, SERVER, "PA", 7000, b"\x01\x00\x01"),
    ]
    rec, consumer = run(rows).only()
    assert (rec.client_ip, rec.client_port) == ("10.0.0.1", 40000)
    assert (rec.server_ip, rec.server_port) == ("10.0.0.2", 5672)
    assert rec.selected_by == "port"
    assert not rec.syn_seen
    assert consumer.info.client_port == 40000


def test_without_syn_or_port_the_amqp_sender_is_the_client():
    # Lower port sends the protocol header: it is the client despite the port order.
    lo, hi = "10.0.0.1:3000", "10.0.0.2:45000"
    rows = [
        (10, hi, lo, "A", 77, b""),
        (20, lo, hi, "PA", 500, AMQP091),
        (30, hi, lo, "PA", 77, b"\x01\x00\x00\x00\x00\x00\x04abcd\xce"),
    ]
    rec, consumer = run(rows).only()
    assert (rec.client_port, rec.server_port) == (3000, 45000)
    assert rec.selected_by == "sniff"
    assert consumer.assembled("to_server") == AMQP091
    assert consumer.assembled("to_client").startswith(b"\x01")


def test_amqp_header_from_the_second_speaker_still_decides():
    # The higher port speaks first (not AMQP), then the lower port opens with AMQP.
    lo, hi = "10.0.0.1:3000", "10.0.0.2:45000"
    rows = [
        (10, hi, lo, "PA", 77, b"hello there"),
        (20, lo, hi, "PA", 500, AMQP091),
    ]
    rec, consumer = run(rows).only()
    assert rec.client_port == 3000
    assert consumer.assembled("to_client") == b"hello there"  # held, then delivered


def test_otherwise_the_higher_port_is_the_client():
    # Both ports configured, no SYN, nobody sends b"AMQP".
    lo, hi = "10.0.0.1:5672", "10.0.0.2:6000"
    rows = [
        (10, lo, hi, "PA", 1, b"\x01\x00\x00\x00"),
        (20, hi, lo, "PA", 1, b"\x08\x00\x00\x00"),
    ]
    rec, _ = run(rows, amqp_ports=(5672, 6000)).only()
    assert (rec.client_port, rec.server_port) == (6000, 5672)
    assert rec.selected_by == "port"


def test_port_selection_and_sniffing():
    other_client, other_server = "10.0.0.3:40001", "10.0.0.4:8080"
    rows = (
        handshake(0)  # 5672: kept by port
        + [(300, CLIENT, SERVER, "PA", 1001, b"garbage, still kept")]
        + handshake(1000, other_client, other_server)  # 8080, AMQP header: sniffed
        + [(1300, other_client, other_server, "PA", 1001, AMQP091)]
        + handshake(2000, "10.0.0.5:40002", "10.0.0.6:80")  # HTTP: dropped
        + [(2300, "10.0.0.5:40002", "10.0.0.6:80", "PA", 1001, b"GET / HTTP/1.1\r\n\r\n")]
        + [(2400, "10.0.0.6:80", "10.0.0.5:40002", "PA", 5001, b"HTTP/1.1 200 OK\r\n\r\n")]
    )
    result = run(rows)
    by_port = {rec.server_port: rec for rec in result.connections}
    assert set(by_port) == {5672, 8080}
    assert by_port[5672].selected_by == "port"
    assert by_port[8080].selected_by == "sniff"
    assert result.stats.connections == 3
    assert result.stats.connections_selected == 2
    assert result.stats.connections_dropped == 1
    assert result.stats.packets_dropped == 5
    assert result.stats.flows == 3


def test_sniff_off_drops_amqp_on_other_ports():
    rows = handshake(0, "10.0.0.3:40001", "10.0.0.4:8080") + [
        (300, "10.0.0.3:40001", "10.0.0.4:8080", "PA", 1001, AMQP091)
    ]
    result = run(rows, sniff=False)
    assert result.connections == [] and result.gaps == []
    assert result.stats.connections_dropped == 1
    assert result.stats.packets_dropped == 4


def test_a_server_that_speaks_first_is_not_sniffed_as_amqp():
    a, b = "10.0.0.3:40001", "10.0.0.4:2525"
    rows = handshake(0, a, b) + [
        (300, b, a, "PA", 5001, b"220 smtp ready\r\n"),
        (400, a, b, "PA", 1001, b"EHLO x\r\n"),
    ]
    result = run(rows)
    assert result.connections == []
    assert result.stats.connections_dropped == 1


def test_a_silent_connection_on_another_port_is_dropped_at_the_end():
    rows = handshake(0, "10.0.0.3:40001", "10.0.0.4:8080")
    result = run(rows)
    assert result.connections == []
    assert result.stats.connections_dropped == 1


def test_held_output_is_bounded():
    # Server data piles up while the client says nothing: the verdict is forced.
    a, b = "10.0.0.3:40001", "10.0.0.4:8080"
    rows = handshake(0, a, b) + [(300 + i, b, a, "PA", 5001 + i * 1000, b"x" * 1000) for i in range(100)]
    result = run(rows)
    assert result.connections == []
    assert result.reassembler._conn is None


def test_tls_by_port_and_by_first_bytes():
    client_hello = b"\x16\x03\x01\x00\x05hello"
    tls_server = "10.0.0.2:5671"
    tls_port = handshake(0, CLIENT, tls_server) + [(300, CLIENT, tls_server, "PA", 1001, b"\x01\x02")]
    tls_bytes = handshake(1000, "10.0.0.1:40001", SERVER) + [
        (1300, "10.0.0.1:40001", SERVER, "PA", 1001, client_hello)
    ]
    plain_client = "10.0.0.1:40002"
    plain = handshake(2000, plain_client, SERVER) + [(2300, plain_client, SERVER, "PA", 1001, AMQP091)]
    result = run(tls_port + tls_bytes + plain)
    tls = {rec.client_port: rec.tls for rec in result.connections}
    assert tls == {40000: True, 40001: True, 40002: False}
    infos = {c.info.client_port: c.info for c in result.consumers.values()}
    assert infos[40000].tls  # known from the port when the consumer is made
    assert infos[40000].selected_by == "port"
