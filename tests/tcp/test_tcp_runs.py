"""The reassembler's compiled runs (``TcpReassembler(runs=True)``, ``run_kernel``) against its per-packet reference:
the same connection records, gaps, counters and stream calls (every segment's direction, offset, time and bytes, in
the same order) for the same Arrow batches.

The run length threshold is lowered to one packet here, so every packet a run may take is taken by one (the
pipeline's 32 would leave these small streams to the reference). Inputs: the property test's random streams (cut
into random segments, reordered, retransmitted and re-cut, dropped, cut by a snaplen, with and without a
handshake, both directions at once), a long two-way exchange with retransmissions of bytes long delivered (the
history the runs keep must be the reference's to the chunk: a trimmed one compares fewer bytes), every real
fixture and mutated capture through the whole decode (``tests/v0_9_1/test_compiled_task.py`` runs the same with
the pipeline's threshold).
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from amqplens.decode.capture.records import PACKET_SCHEMA
from amqplens.decode.tcp import TcpReassembler, reassembly
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, Run
from amqplens.decode.v0_9_1.hotpath import run_kernel

from .tcp_packets import CLIENT, SERVER, RecordingConsumer, handshake, packet_columns
from .test_tcp_properties import _rows, captures

pytestmark = pytest.mark.skipif(run_kernel() is None, reason="numba is not installed: only the reference exists")


class RunRecording(RecordingConsumer):
    """Records a run as the segments it holds, each through ``data`` (which checks the stream's tiling)."""

    def __init__(self, info) -> None:
        super().__init__(info)
        self.runs = 0

    def data_run(self, run: Run) -> None:
        self.runs += 1
        for segment in run.segments():
            self.data(*segment)


def _feed(rows, runs: bool, batch_size: int, **options):
    consumers: dict[str, RunRecording] = {}

    def factory(info):
        consumers[info.connection_id] = RunRecording(info)
        return consumers[info.connection_id]

    r = TcpReassembler("cap", consumer_factory=factory, runs=run_kernel() if runs else None, **options)
    table = pa.table(packet_columns(rows), schema=PACKET_SCHEMA)
    for batch in table.to_batches(max_chunksize=batch_size):
        r.feed_columns(batch)
    r.finish()
    conns, gaps = r.drain_connections(), r.drain_gaps()
    return conns, gaps, r.stats, {cid: c.events for cid, c in consumers.items()}, sum(c.runs for c in consumers.values())


def _same(rows, batch_size: int = 8192, **options) -> int:
    """Both ways alike; returns how many runs the compiled way handed on."""
    saved = reassembly.MIN_RUN
    reassembly.MIN_RUN = 1
    try:
        got = _feed(rows, True, batch_size, **options)
    finally:
        reassembly.MIN_RUN = saved
    want = _feed(rows, False, batch_size, **options)
    assert want[4] == 0
    assert got[:4] == want[:4]
    return got[4]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(captures())
def test_random_segments_give_the_reference_connections_gaps_and_stream_calls(capture):
    stream, isn, syn, order, fin, max_ooo = capture
    for batch_size in (8192, 3):
        _same(_rows(stream, isn, syn, order, fin), batch_size, max_ooo_bytes=max_ooo)


def _exchange(seed: int, turns: int = 3000, fin: bool = True) -> list[tuple]:
    """A two-way AMQP-port conversation after a handshake: each side's segments in order, mixed with pure ACKs,
    retransmissions of bytes delivered long ago (some with other bytes: overlap conflicts) and the client's lost
    segments; it ends with FINs, or (``fin`` False) with the client's last bytes lost and only the server's ACK telling of them
    (the stream's end as the peer's last acknowledgement has it)."""
    rnd = random.Random(seed)
    rows = handshake(0)
    t = 300
    sent = {CLIENT: 1001, SERVER: 5001}
    done = {CLIENT: [], SERVER: []}  # (seq, payload) sent
    rows.append((t, CLIENT, SERVER, "PA", 1001, b"AMQP\x00\x00\x09\x01"))
    sent[CLIENT] += 8
    for _ in range(turns):
        t += rnd.randint(0, 50)
        src = rnd.choice((CLIENT, SERVER))
        dst = SERVER if src == CLIENT else CLIENT
        kind = rnd.random()
        if kind < 0.15:
            rows.append((t, src, dst, "A", sent[src], b""))
        elif kind < 0.19 and done[src]:
            seq, payload = rnd.choice(done[src])
            if rnd.random() < 0.5:
                payload = bytes(b ^ 0xFF for b in payload)
            rows.append((t, src, dst, "PA", seq, payload))
        elif kind < 0.195 and src == CLIENT:
            sent[src] += rnd.randint(1, 300)  # lost: the client's later bytes wait behind the hole until the close
        else:
            payload = rnd.randbytes(rnd.randint(1, 400))
            rows.append((t, src, dst, "PA", sent[src], payload))
            done[src].append((sent[src], payload))
            sent[src] += len(payload)
    if fin:
        rows.append((t + 1, CLIENT, SERVER, "FA", sent[CLIENT], b""))
        rows.append((t + 2, SERVER, CLIENT, "FA", sent[SERVER], b""))
    else:
        sent[CLIENT] += 100
        rows.append((t + 1, SERVER, CLIENT, "A", sent[SERVER], b"", {"ack": sent[CLIENT]}))
        rows.append((t + 2, SERVER, CLIENT, "PA", sent[SERVER], b"after", {"ack": sent[CLIENT]}))
    return rows


@pytest.mark.parametrize("fin", [True, False])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("history", [512, 4096, 256 * 1024])
def test_a_long_exchange_with_late_retransmissions_keeps_the_reference_history(seed, history, fin):
    rows = _exchange(seed, fin=fin)
    assert _same(rows, 8192, history_bytes=history) > 10
    assert _same(rows, 97, history_bytes=history) > 10
    # not vacuous: the retransmissions are compared with the history, some differ
    conns = _feed(rows, False, 8192, history_bytes=history)[0]
    assert sum(c.retransmitted_bytes_to_server + c.retransmitted_bytes_to_client for c in conns) > 0
    assert sum(c.overlap_conflicts for c in conns) > 0


def test_the_history_kept_is_the_reference_trims():
    kernel = run_kernel()
    rnd = np.random.default_rng(3)
    for _ in range(500):
        cap = int(rnd.integers(1, 3000))
        old = rnd.integers(1, 400, int(rnd.integers(0, 20)))
        new = rnd.integers(1, 400, int(rnd.integers(1, 60)))
        # the reference: HalfStream's append and trim_history, chunk by chunk
        hist = list(old)
        total = int(sum(hist))
        for n in new.tolist():
            hist.append(n)
            total += n
            if total > cap:
                keep, cut = cap // 2, 0
                while total > keep and cut < len(hist):
                    total -= hist[cut]
                    cut += 1
                del hist[:cut]
        cut_old, first_new, kept = kernel.history_kept(old.astype(np.int64), new.astype(np.int64), cap, cap // 2)
        assert [*old[cut_old:].tolist(), *new[first_new:].tolist()][-len(hist):] == hist if hist else kept == 0
        assert kept == total
        assert len(old) - cut_old + len(new) - first_new == len(hist)


def test_a_run_hands_its_segments_as_they_came():
    codes = np.array([0, 1, 0, 0, 1], np.int8)
    lengths = np.array([2, 3, 1, 2, 1], np.int64)
    run = Run(codes, np.array([0, 0, 2, 3, 3], np.int64), np.arange(5, dtype=np.int64), lengths,
              {TO_SERVER: b"abcde", TO_CLIENT: b"XYZW"})
    assert run.segments() == [(TO_SERVER, 0, 0, b"ab"), (TO_CLIENT, 0, 1, b"XYZ"), (TO_SERVER, 2, 2, b"c"),
                              (TO_SERVER, 3, 3, b"de"), (TO_CLIENT, 3, 4, b"W")]
