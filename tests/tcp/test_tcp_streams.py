"""Sequence numbers to stream offsets: order, duplicates, holes, snaplen."""

from __future__ import annotations

from .tcp_packets import CLIENT, SERVER, handshake, run

DATA = bytes(range(256)) * 4


def segments(data: bytes, seq: int, size: int, t0: int = 1000, src: str = CLIENT, dst: str = SERVER):
    """``data`` cut into ``size``-byte segments starting at ``seq``, 10 us apart."""
    return [
        (t0 + 10 * i, src, dst, "PA", seq + off, data[off : off + size])
        for i, off in enumerate(range(0, len(data), size))
    ]


def test_offsets_start_after_the_syn():
    rows = handshake() + [(300, CLIENT, SERVER, "PA", 1001, b"AMQP\x00\x00\x09\x01")]
    rec, consumer = run(rows).only()
    assert consumer.events == [("data", "to_server", 0, 300, b"AMQP\x00\x00\x09\x01")]
    assert rec.bytes_to_server == 8 and rec.bytes_to_client == 0


def test_first_byte_lost_after_the_syn_is_a_gap():
    rows = handshake() + [(300, CLIENT, SERVER, "PA", 1005, b"rest")]
    rec, consumer = run(rows).only()
    assert consumer.gaps("to_server") == [(0, 4)]
    assert consumer.assembled("to_server") == b"____rest"
    assert rec.missing_bytes_to_server == 4


def test_mid_stream_starts_at_zero_without_a_capture_start_gap():
    rows = [
        (10, CLIENT, SERVER, "PA", 123456, b"first"),
        (20, CLIENT, SERVER, "PA", 123461, b"second"),
    ]
    result = run(rows)
    rec, consumer = result.only()
    assert result.gaps == []
    assert consumer.events[0][:3] == ("data", "to_server", 0)
    assert consumer.assembled("to_server") == b"firstsecond"
    assert rec.bytes_to_server == 11


def test_sequence_wrap_after_a_syn():
    isn = 2**32 - 10  # the stream crosses 2**32 after 9 bytes
    rows = handshake(c_isn=isn) + segments(DATA[:100], (isn + 1) & 0xFFFFFFFF, 7)
    rec, consumer = run(rows).only()
    assert consumer.assembled("to_server") == DATA[:100]
    assert rec.retransmitted_bytes_to_server == 0 and rec.missing_bytes_to_server == 0


def test_sequence_wrap_mid_stream_with_reordering():
    seq = 2**32 - 20
    rows = segments(DATA[:60], seq, 10)
    rows[1], rows[3] = rows[3], rows[1]  # the segment that crosses 2**32 comes late
    rec, consumer = run(rows).only()
    assert consumer.assembled("to_server") == DATA[:60]
    assert rec.out_of_order_bytes_to_server == 20  # segments 3 and 2 waited for 1
    assert rec.missing_bytes_to_server == 0


def test_retransmission_counted_not_delivered_twice():
    rows = handshake() + segments(DATA[:30], 1001, 10)
    rows.append((5000, CLIENT, SERVER, "PA", 1011, DATA[10:20]))
    rec, consumer = run(rows).only()
    assert consumer.assembled("to_server") == DATA[:30]
    assert rec.retransmitted_bytes_to_server == 10
    assert rec.overlap_conflicts == 0


def test_overlap_first_copy_wins_and_conflicts_are_counted():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"abcdefgh"),
        # Overlaps "efgh" with two different bytes, then brings "ijkl".
        (400, CLIENT, SERVER, "PA", 1005, b"eXgYijkl"),
    ]
    rec, consumer = run(rows).only()
    assert consumer.assembled("to_server") == b"abcdefghijkl"
    assert rec.retransmitted_bytes_to_server == 4
    assert rec.overlap_conflicts == 2


def test_overlap_in_the_out_of_order_buffer_first_copy_wins():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1011, b"KLMNO"),  # offsets 10..14, ahead of a hole
        (310, CLIENT, SERVER, "PA", 1009, b"ijklmnopq"),  # 8..16: covers the buffered copy
        (320, CLIENT, SERVER, "PA", 1001, b"abcdefgh"),  # fills the hole
    ]
    rec, consumer = run(rows).only()
    assert consumer.assembled("to_server") == b"abcdefghijKLMNOpq"
    assert rec.retransmitted_bytes_to_server == 5
    assert rec.overlap_conflicts == 5
    assert rec.out_of_order_bytes_to_server == 9  # "KLMNO" and then "ij" + "pq"


def test_out_of_order_delivered_in_order_once_the_hole_fills():
    rows = handshake() + segments(DATA[:50], 1001, 10)
    rows[3], rows[5] = rows[5], rows[3]  # [10..20) arrives after [20..40)
    rec, consumer = run(rows).only()
    offsets = [e[2] for e in consumer.events]
    assert offsets == [0, 10, 20, 30, 40]
    assert consumer.assembled("to_server") == DATA[:50]
    assert rec.out_of_order_bytes_to_server == 20
    assert rec.missing_bytes_to_server == 0
    # Buffered bytes keep the time they were captured.
    assert [e[3] for e in consumer.events] == [1000, 1010, 1020, 1030, 1040]


def test_bytes_that_waited_for_a_hole_take_the_time_of_the_packet_that_filled_it():
    # captured (and fed) in time order: [20..30) and [30..40) at 1010 and 1020, ahead of [10..20) at 1030, as a
    # loopback capture under load holds them; the old reassembler emitted 1000, 1030, 1010, 1020, 1040, so the
    # frames of [20..40) sorted before those of [10..20) and the lifecycle saw a channel's content out of order
    seg = dict(zip(range(0, 50, 10), segments(DATA[:50], 1001, 10)))
    order = [(0, 1000), (20, 1010), (30, 1020), (10, 1030), (40, 1040)]
    rows = handshake() + [(ts, *seg[off][1:]) for off, ts in order]
    rec, consumer = run(rows).only()
    assert [(e[2], e[3]) for e in consumer.events] == [(0, 1000), (10, 1030), (20, 1030), (30, 1030), (40, 1040)]
    assert consumer.assembled("to_server") == DATA[:50]
    assert rec.out_of_order_bytes_to_server == 20


def test_unfilled_hole_becomes_a_gap_at_fin():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        (310, CLIENT, SERVER, "PA", 1021, b"klmnopqrst"),  # 10..20 never comes
        (320, CLIENT, SERVER, "FA", 1031, b""),
        (330, SERVER, CLIENT, "FA", 5001, b""),
        (340, CLIENT, SERVER, "A", 1032, b""),
    ]
    result = run(rows)
    rec, consumer = result.only()
    assert consumer.assembled("to_server") == b"0123456789" + b"_" * 10 + b"klmnopqrst"
    assert [(g.offset, g.length, g.reason, g.direction) for g in result.gaps] == [
        (10, 10, "missing_segment", "to_server")
    ]
    assert rec.missing_bytes_to_server == 10
    assert rec.bytes_to_server == 30
    assert rec.end_reason == "fin"


def test_unfilled_hole_becomes_a_gap_at_rst():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        (310, CLIENT, SERVER, "PA", 1021, b"klmnopqrst"),
        (320, SERVER, CLIENT, "R", 5001, b""),
    ]
    result = run(rows)
    rec, consumer = result.only()
    assert consumer.gaps("to_server") == [(10, 10)]
    assert rec.end_reason == "rst"


def test_unfilled_hole_becomes_a_gap_at_flow_end():
    rows = [
        (300, CLIENT, SERVER, "PA", 1, b"0123456789"),
        (310, CLIENT, SERVER, "PA", 21, b"klmnopqrst"),
        # Next flow: the first one must be finished when the flow key changes.
        (400, "10.0.0.9:40000", SERVER, "PA", 1, b"other"),
    ]
    result = run(rows)
    first = next(c for c in result.connections if c.client_ip == "10.0.0.1")
    assert first.end_reason == "capture_end"
    assert [(g.connection_id, g.offset, g.length) for g in result.gaps] == [(first.connection_id, 10, 10)]
    consumer = result.consumers[first.connection_id]
    assert consumer.assembled("to_server") == b"0123456789" + b"_" * 10 + b"klmnopqrst"


def test_buffer_overflow_gives_up_on_the_hole():
    # 100-byte buffer: the hole at 10..20 is abandoned when buffered bytes pass it.
    rows = handshake() + segments(DATA[:300], 1001, 10)
    del rows[3 + 1]  # [10..20) is lost
    result = run(rows, max_ooo_bytes=100)
    rec, consumer = result.only()
    assert [(g.offset, g.length, g.reason) for g in result.gaps] == [(10, 10, "buffer_overflow")]
    assert consumer.assembled("to_server") == DATA[:10] + b"_" * 10 + DATA[20:300]
    # Delivery resumed once the buffer overflowed, not at the end.
    gap_index = next(i for i, e in enumerate(consumer.events) if e[0] == "gap")
    assert consumer.events[gap_index][4] == 1000 + 10 * 12  # the packet that overflowed it
    assert rec.out_of_order_bytes_to_server == 110


def test_missing_tail_known_from_the_peers_ack():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        # The client's next 10 bytes were not captured, but the server acked them.
        (400, SERVER, CLIENT, "A", 5001, b"", {"ack": 1021}),
    ]
    rec, consumer = run(rows).only()
    assert consumer.gaps("to_server") == [(10, 10)]
    assert rec.bytes_to_server == 20


def test_missing_tail_known_from_the_fin():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        (400, CLIENT, SERVER, "FA", 1021, b""),
    ]
    rec, consumer = run(rows).only()
    assert consumer.gaps("to_server") == [(10, 10)]
    assert rec.bytes_to_server == 20


def test_snaplen_cut_payload_leaves_a_snaplen_gap():
    # Each segment is 100 bytes on the wire; the capture kept 60 of each.
    wire = DATA[:300]
    cut = {"truncated": True, "wire_len": 154}
    rows = handshake() + [
        (300 + i, CLIENT, SERVER, "PA", 1001 + off, wire[off : off + 60], cut)
        for i, off in enumerate(range(0, 300, 100))
    ]
    rows.append((400, CLIENT, SERVER, "FA", 1301, b""))
    result = run(rows)
    rec, consumer = result.only()
    assert [(g.offset, g.length, g.reason) for g in result.gaps] == [
        (60, 40, "snaplen"),
        (160, 40, "snaplen"),
        (260, 40, "snaplen"),  # the last one is closed by the FIN
    ]
    expected = b"".join(wire[off : off + 60] + b"_" * 40 for off in range(0, 300, 100))
    assert consumer.assembled("to_server") == expected
    assert rec.missing_bytes_to_server == 120
    assert rec.out_of_order_bytes_to_server == 0  # nothing waited in the buffer


def test_snaplen_with_nothing_captured():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"", {"truncated": True}),
        (310, CLIENT, SERVER, "PA", 1011, b"abc"),
    ]
    result = run(rows)
    assert [(g.offset, g.length, g.reason) for g in result.gaps] == [(0, 10, "snaplen")]


def test_keepalive_is_not_a_retransmission():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        (400, CLIENT, SERVER, "A", 1010, b"\x00"),  # Windows-style keepalive
    ]
    rec, consumer = run(rows).only()
    assert rec.retransmitted_bytes_to_server == 0
    assert consumer.assembled("to_server") == b"0123456789"


def test_implausible_sequence_numbers_are_ignored():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1001, b"0123456789"),
        (310, CLIENT, SERVER, "PA", 1011 + 2**31 - 100, b"garbage"),
        (320, CLIENT, SERVER, "PA", 1011, b"abc"),
    ]
    result = run(rows)
    rec, consumer = result.only()
    assert consumer.assembled("to_server") == b"0123456789abc"
    assert result.stats.implausible_segments == 1
    assert rec.missing_bytes_to_server == 0


def test_snaplen_cut_segment_that_waited_in_the_buffer():
    rows = handshake() + [
        (300, CLIENT, SERVER, "PA", 1011, b"klmno", {"truncated": True}),  # 10..20, 5 bytes kept
        (310, CLIENT, SERVER, "PA", 1021, b"uvwxyz"),
        (320, CLIENT, SERVER, "PA", 1001, b"abcdefghij"),
    ]
    result = run(rows)
    _, consumer = result.only()
    assert [(g.offset, g.length, g.reason, g.ts_us) for g in result.gaps] == [(15, 5, "snaplen", 320)]
    assert consumer.assembled("to_server") == b"abcdefghijklmno_____uvwxyz"


def test_retransmission_older_than_the_history_is_counted_not_compared():
    """history_bytes bounds the delivered bytes kept per direction (trimmed to half when over).

    A late copy of the first 100 bytes with every byte changed, after 1000 bytes went by:
    with a 4 KiB history it is compared (100 conflicts), with a 200-byte one the first
    copy was forgotten (no conflict can be seen); either way it is counted and not delivered.
    """
    stream = DATA[:1000]
    late = (9000, CLIENT, SERVER, "PA", 1001, bytes(b ^ 0xFF for b in stream[:100]))
    rows = handshake() + segments(stream, 1001, 100) + [late]
    for history, conflicts in ((4096, 100), (200, 0)):
        rec, consumer = run(rows, history_bytes=history).only()
        assert consumer.assembled("to_server") == stream
        assert rec.retransmitted_bytes_to_server == 100
        assert rec.overlap_conflicts == conflicts, history


def test_history_never_exceeds_the_out_of_order_cap():
    from amqplens.decode.tcp import TcpReassembler

    assert TcpReassembler("c", max_ooo_bytes=1000, history_bytes=5000).history_bytes == 1000
    assert TcpReassembler("c").history_bytes == 256 * 1024
