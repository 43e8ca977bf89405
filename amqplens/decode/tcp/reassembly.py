"""TCP reassembly: packets sorted by flow in; connections, gaps and stream bytes out.

The reassembler is fed column batches (see ``amqplens.decode.capture.records``)
sorted by ``(flow_key, ts_us, record_offset)``, so the packets of one 4-tuple
are contiguous and in capture order. It keeps the state of one flow at a time:
when the flow key changes, the previous flow's connections are finished and
forgotten, so memory is bounded by the out-of-order buffers of one flow.

Each flow holds one connection at a time; a new SYN after a close (or a long
idle) starts the next one (port reuse). A connection is kept when its server
port is configured (``selected_by="port"``) or, with ``sniff``, when its client
opens with ``b"AMQP"`` (``"sniff"``); until that is known its output is held.
Kept connections get a ``StreamConsumer`` from ``consumer_factory`` and end up
as ``ConnectionRecord``s and ``GapRecord``s in the lists ``drain_*`` returns.

Who is the client: the sender of the SYN (the receiver of the SYN/ACK);
without a handshake, the peer of the one configured port; otherwise the side
whose bytes start with ``b"AMQP"``; otherwise the higher port.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import partial
from typing import Any, Callable, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.capture.records import ACK, FIN, RST, SYN
from amqplens.decode.tcp.columns import column_lists
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionInfo, ConnectionRecord, GapRecord, Run, StreamConsumer
from amqplens.decode.tcp.stream import M32, MAX_AHEAD, EmitGap, HalfStream

AMQP_MAGIC = b"AMQP"
TLS_HANDSHAKE = b"\x16\x03"  # a TLS record header: content type handshake, version 3.x
MiB = 1 << 20
# While it is not yet known whether a flow is AMQP, its output is held. Every AMQP
# dialect has the client speak first, so this much held without a verdict means "no".
SNIFF_HOLD_BYTES = 64 * 1024
DEFAULT_REUSE_IDLE_US = 60_000_000
# A duplicate segment arrives within about one window of the original; 256 KiB covers the
# windows seen in practice and keeps 200 connections under 100 MiB.
DEFAULT_HISTORY_BYTES = 256 * 1024
_CONTROL = SYN | FIN | RST
# the record's per-direction counts: column (before _to_server/_to_client) and the HalfStream attribute it reads
_COUNTS = (("packets", "packets"), ("wire_bytes", "wire_bytes"), ("bytes", "next"), ("retransmitted_bytes", "retransmitted"),
           ("out_of_order_bytes", "out_of_order"), ("missing_bytes", "missing"))
# output held until selection: (half stream, offset, ts_us, data bytes or gap length, gap reason or None)
_Held = tuple[HalfStream, int, int, Any, "str | None"]


def connection_id(
    capture_id: str, client_ip: str, client_port: int, server_ip: str, server_port: int, start_ts_us: int, reuse: int = 0
) -> str:
    """32 hex digits: blake2b, 16-byte digest, of the UTF-8 text
    ``capture_id|client_ip|client_port|server_ip|server_port|start_ts_us``, and ``|reuse`` when ``reuse`` > 0: the
    n-th earlier connection of the same flow that started at the same time (port reuse under a clock that did not
    move, as a capture with frozen or damaged times has), which would otherwise share its id."""
    key = f"{capture_id}|{client_ip}|{client_port}|{server_ip}|{server_port}|{start_ts_us}" + (f"|{reuse}" if reuse else "")
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


@dataclasses.dataclass
class ReassemblyStats:
    packets: int = 0  # rows fed
    flows: int = 0  # flow keys seen
    connections: int = 0  # TCP connections seen, kept or not
    connections_selected: int = 0
    connections_dropped: int = 0  # not on a configured port and not sniffed as AMQP
    packets_dropped: int = 0  # packets of dropped connections
    foreign_packets: int = 0  # a flow-key collision: endpoints that are not the flow's
    implausible_segments: int = 0  # sequence number further from the stream than any window


# The compiled runs (``_feed_runs``): at least this many packets, or the packets go through the reference (a run's
# array operations cost about as much as this many packets one by one).
MIN_RUN = 32
_RUN_COLUMNS = ("flow_key", "ts_us", "src_port", "seq", "ack", "tcp_flags", "wire_len", "payload_truncated", "src_ip")
_DIRECTION_CODE = {TO_SERVER: 0, TO_CLIENT: 1}  # ``ahead.Run``'s codes


def _ints(batch, name: str) -> np.ndarray:
    column = batch.column(name)
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _runs_ok(conn: "_Connection") -> bool:
    """Whether the connection's packets may be taken as runs: selected, decoding, past the handshake."""
    return not conn.slow and conn.decided and not conn.dropped and getattr(conn.consumer, "data_run", None) is not None


def _takes_data(s: HalfStream) -> bool:
    """Whether a run may deliver this side's bytes: it is placed, nothing is buffered out of order, its head is
    known and its bytes go out (``deliver``'s inline case with nothing else to do)."""
    return s.nseq is not None and not s.ooo_offs and not s.head_open and s.emit is not None


class _Connection:
    __slots__ = (
        "a", "b", "client", "server", "start_ts", "last_ts", "client_isn", "server_isn", "syn_ts",
        "hs_pending", "rtt", "end_reason", "closer", "fresh", "slow", "decided", "dropped",
        "selected_by", "pending", "pending_bytes", "consumer", "connection_id",
    )  # fmt: skip

    def __init__(self, a: HalfStream, b: HalfStream, ts_us: int) -> None:
        self.a, self.b = a, b  # a: the bytes the flow's first sender sends; b: its peer's
        self.client: HalfStream | None = None
        self.server: HalfStream | None = None
        self.start_ts = self.last_ts = ts_us
        self.client_isn: int | None = None
        self.server_isn: int | None = None
        self.syn_ts: int | None = None
        self.hs_pending = False  # SYN and SYN/ACK seen, waiting for the client's ACK
        self.rtt: int | None = None
        self.end_reason: str | None = None
        self.closer: HalfStream | None = None
        self.fresh = True  # its first packet has not been through _control yet
        self.slow = True  # route every packet through _control (fresh, dropped, handshake)
        self.decided = False
        self.dropped = False
        self.selected_by: str | None = None
        self.pending: list[_Held] | None = []  # output held until the connection is selected
        self.pending_bytes = 0
        self.consumer: StreamConsumer | None = None
        self.connection_id = ""


class TcpReassembler:
    """Reassembles every selected TCP connection of a flow-sorted packet stream."""

    def __init__(
        self,
        capture_id: str,
        *,
        amqp_ports: tuple[int, ...] = (5672,),
        tls_ports: tuple[int, ...] = (5671,),
        sniff: bool = True,
        max_ooo_bytes: int = 4 * MiB,
        history_bytes: int = DEFAULT_HISTORY_BYTES,
        reuse_idle_us: int = DEFAULT_REUSE_IDLE_US,
        consumer_factory: Callable[[ConnectionInfo], StreamConsumer | None] | None = None,
        runs: Any = None,
    ) -> None:
        self.capture_id = capture_id
        # ``run_kernel`` (``hotpath.run_kernel()``): Arrow batches' in-order runs compiled (``_feed_runs``), the same
        # connections, gaps and bytes; None: every packet through the reference
        self.runs = runs
        self.tls_ports = frozenset(tls_ports)
        self.ports = frozenset(amqp_ports) | self.tls_ports
        self.sniff = sniff
        self.max_ooo_bytes = max_ooo_bytes  # per direction
        # delivered bytes kept per direction to compare retransmissions with (overlap_conflicts); at most
        # the ooo cap. It is the per-connection memory of a healthy stream, so it bounds a worker's RSS.
        self.history_bytes = min(history_bytes, max_ooo_bytes)
        self.reuse_idle_us = reuse_idle_us
        self.consumer_factory = consumer_factory
        self.stats = ReassemblyStats()
        self._connections: list[ConnectionRecord] = []
        self._gaps: list[GapRecord] = []
        self._flow_key: int | None = None
        self._conn: _Connection | None = None
        self._a_ip = self._b_ip = ""
        self._a_port = self._b_port = -1
        self._ip_version = 0
        self._flow_skip = False  # no configured port and no sniffing: nothing to keep
        # connection ids given in this flow -> how many connections took it (<= the flow's connections)
        self._flow_ids: dict[str, int] = {}

    # -- the public surface -----------------------------------------------

    def feed_columns(self, batch: Any) -> None:
        """Feed one batch: ``dict[str, Sequence]``, Arrow RecordBatch/Table or pandas DataFrame."""
        kernel = self.runs
        if kernel is not None and isinstance(batch, (pa.RecordBatch, pa.Table)) and batch.num_rows >= MIN_RUN:
            if not any(batch.column(c).null_count for c in _RUN_COLUMNS):
                self.stats.packets += batch.num_rows
                self._feed_runs(kernel, batch)
                return
        cols = column_lists(batch)
        self.stats.packets += len(cols[0])
        self._feed_rows(cols, 0, len(cols[0]))

    def _feed_rows(self, cols: list[list], lo: int, hi: int) -> None:
        """The reference: packets ``[lo, hi)`` of the batch's columns (``column_lists``) one at a time."""
        if lo or hi < len(cols[0]):
            cols = [c[lo:hi] for c in cols]
        cur = self._flow_key
        # conn (and sa, sb) is None only while no flow is open; then cur is None too, so the first row starts a
        # flow (fk != cur) before any of them is read
        conn = cast(_Connection, self._conn)
        sa = sb = cast(HalfStream, None)
        if conn is not None:
            sa, sb = conn.a, conn.b
        a_ip, a_port, b_ip, b_port = self._a_ip, self._a_port, self._b_ip, self._b_port
        for fk, ts, ipv, sip, sp, dip, dp, seq, ack, fl, wl, pl, tr in zip(*cols):
            if fk != cur:
                self._start_flow(fk, ipv, sip, sp, dip, dp, ts, fl)
                cur, conn = fk, cast(_Connection, self._conn)  # _start_flow opened one
                sa, sb = conn.a, conn.b
                a_ip, a_port, b_ip, b_port = sip, sp, dip, dp
            if sp == a_port and sip == a_ip:
                s, o = sa, sb
            elif sp == b_port and sip == b_ip:
                s, o = sb, sa
            else:
                self.stats.foreign_packets += 1
                continue
            if fl & _CONTROL or conn.slow:
                from_a = s is sa
                now = self._control(conn, from_a, ts, seq, ack, fl, pl, tr, wl)
                if now is None:
                    continue
                if now is not conn:
                    conn, sa, sb = now, now.a, now.b
                    s, o = (sa, sb) if from_a else (sb, sa)
            s.packets += 1
            s.wire_bytes += wl
            conn.last_ts = ts
            if fl & ACK:
                o.peer_ack = ack
            if pl:
                if seq == s.nseq and not s.ooo_offs and not tr:
                    s.deliver(s.next, pl, ts, False)  # in order: straight on
                elif not s.segment(seq, pl, ts, bool(tr)):
                    self.stats.implausible_segments += 1
            elif tr:
                s.segment(seq, b"", ts, True)

    # -- the compiled runs ---------------------------------------------------

    def _feed_runs(self, kernel, batch) -> None:
        """A batch of Arrow packets: runs of in-order packets of a selected connection (``run_kernel.run_end``)
        taken at once (``_take_run``), the packets between them through the reference (``_feed_rows``)."""
        n = batch.num_rows
        fk, sport, flags, seq = (_ints(batch, c) for c in ("flow_key", "src_port", "tcp_flags", "seq"))
        trunc = batch.column("payload_truncated").to_numpy(zero_copy_only=False)
        payload = batch.column("payload")
        plen = _ints(pa.table({"n": pc.fill_null(pc.binary_length(payload), 0)}), "n")
        # the source addresses as codes: the flow's two ends are compared by code, not text
        src = pc.dictionary_encode(batch.column("src_ip"))
        src = src.combine_chunks() if isinstance(src, pa.ChunkedArray) else src
        scode = src.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        code_of = {v: i for i, v in enumerate(src.dictionary.to_pylist())}
        bounds = np.append(np.flatnonzero(fk[1:] != fk[:-1]) + 1, n)  # where each flow's packets end
        taken = None  # what a run reads beyond run_end's columns, made once a batch
        side = np.zeros(n, np.int8)
        cols: list[list] | None = None
        i = 0
        while i < n:
            stop = int(bounds[np.searchsorted(bounds, i, "right")])  # the end of packet i's flow in the batch
            conn = self._conn
            if conn is not None and self._flow_key == fk[i] and _runs_ok(conn):
                a, b = conn.a, conn.b
                j = int(kernel.run_end(i, stop, self._flow_key, fk, sport, scode, self._a_port, self._b_port,
                                       code_of.get(self._a_ip, -1), code_of.get(self._b_ip, -1), flags, _CONTROL, plen,
                                       seq, trunc, a.nseq or 0, b.nseq or 0, _takes_data(a), _takes_data(b), side))
                if j - i >= MIN_RUN:
                    if taken is None:
                        taken = (flags, *(_ints(batch, c) for c in ("wire_len", "ack", "ts_us")), plen, payload)
                    self._take_run(kernel, conn, i, j, side, *taken)
                    i = j
                    continue
                stop = min(j + 1, stop)  # a short run, and the packet that ended it, through the reference
            else:
                stop = min(stop, i + MIN_RUN)  # then look again: the handshake or the first bytes make it one
            if cols is None:
                cols = column_lists(batch)
            self._feed_rows(cols, i, stop)
            i = stop

    def _take_run(self, kernel, conn: _Connection, i: int, j: int, side: np.ndarray, flags: np.ndarray, wire: np.ndarray,
                  ack: np.ndarray, ts: np.ndarray, plen: np.ndarray, payload) -> None:
        """Packets ``[i, j)`` of the batch (``run_end``'s; its columns as arrays, ``payload`` as Arrow) as the
        reference takes them one by one: each side's counters, the peer's last acknowledgement, the bytes delivered
        (times never going back), the history kept for comparing retransmissions, and one ``data_run`` to the
        consumer."""
        cut = slice(i, j)
        sides, flags, wire, ack, ts, lengths = side[cut], flags[cut], wire[cut], ack[cut], ts[cut], plen[cut]
        streams = (conn.a, conn.b)
        codes = np.zeros(j - i, np.int8)
        times = np.zeros(j - i, np.int64)
        offsets = np.zeros(j - i, np.int64)
        bufs: dict[str, bytes] = {}
        for code in (0, 1):
            s, o = streams[code], streams[1 - code]
            mine = sides == code
            count = int(np.count_nonzero(mine))
            if not count:
                continue
            s.packets += count
            s.wire_bytes += int(wire[mine].sum())
            acked = np.flatnonzero(mine & ((flags & ACK) != 0))
            if len(acked):
                o.peer_ack = int(ack[acked[-1]])
            data = np.flatnonzero(mine & (lengths > 0))
            if not len(data):
                continue
            n = lengths[data]
            start, total = s.next, int(n.sum())
            at = np.maximum.accumulate(np.maximum(ts[data], s.last_ts))
            s.last_ts = int(at[-1])
            offsets[data] = start + np.cumsum(n) - n
            times[data] = at
            s.next = start + total
            s.nseq = (cast(int, s.nseq) + total) & M32
            taken = payload.take(pa.array(i + data))
            taken = taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken
            width = np.int64 if pa.types.is_large_binary(taken.type) else np.int32
            value_offsets = np.frombuffer(taken.buffers()[1], width, len(taken) + 1, taken.offset * np.dtype(width).itemsize)
            buf = taken.buffers()[2].to_pybytes()[value_offsets[0]:value_offsets[-1]]
            direction = cast(str, s.direction)
            codes[data] = _DIRECTION_CODE[direction]
            bufs[direction] = buf
            # the history: what the reference's appends and trims (``trim_history``) leave
            old = np.array([len(x) for x in s.hist_data], np.int64)
            cut_old, first_new, s.hist_bytes = kernel.history_kept(old, n, s.hist_cap, s.hist_cap // 2)
            del s.hist_offs[:cut_old], s.hist_data[:cut_old]
            rel = (offsets[data] - start)[first_new:].tolist()
            s.hist_offs.extend(offsets[data][first_new:].tolist())
            s.hist_data.extend([buf[p:p + m] for p, m in zip(rel, n[first_new:].tolist())])
        conn.last_ts = int(ts[-1])
        data = np.flatnonzero(lengths > 0)
        if len(data):
            run = Run(codes[data], offsets[data], times[data], lengths[data].astype(np.int64), bufs)
            cast(Any, conn.consumer).data_run(run)

    def finish(self) -> None:
        """End of input: finish the current flow (its open connections end as ``capture_end``)."""
        self._finish_flow()

    def drain_connections(self) -> list[ConnectionRecord]:
        out, self._connections = self._connections, []
        return out

    def drain_gaps(self) -> list[GapRecord]:
        out, self._gaps = self._gaps, []
        return out

    # -- flows and connections --------------------------------------------

    def _start_flow(self, fk: int, ipv: int, sip: str, sp: int, dip: str, dp: int, ts: int, fl: int) -> None:
        self._finish_flow()
        self._flow_key = fk
        self._flow_ids = {}
        self._a_ip, self._a_port, self._b_ip, self._b_port = sip, sp, dip, dp
        self._ip_version = ipv
        self._flow_skip = not self.sniff and sp not in self.ports and dp not in self.ports
        self.stats.flows += 1
        self._conn = self._new_connection(True, ts, fl)

    def _finish_flow(self) -> None:
        if self._conn is not None:
            self._finish_connection(self._conn, reused=False)
        self._conn = None
        self._flow_key = None

    def _new_connection(self, from_a: bool, ts: int, fl: int) -> _Connection:
        cap = self.max_ooo_bytes
        hist = self.history_bytes
        conn = _Connection(HalfStream(cap, hist), HalfStream(cap, hist), ts)
        self.stats.connections += 1
        if self._flow_skip:
            self._drop(conn)
            return conn
        for s in (conn.a, conn.b):
            s.emit = partial(self._hold_data, conn, s)
            s.emit_gap = partial(self._hold_gap, conn, s)
            s.on_head = partial(self._on_head, conn)
        sender, receiver = (conn.a, conn.b) if from_a else (conn.b, conn.a)
        if fl & SYN:
            self._set_roles(conn, receiver if fl & ACK else sender)
        else:
            sender_is_server = self._port(conn, sender) in self.ports
            receiver_is_server = self._port(conn, receiver) in self.ports
            if sender_is_server != receiver_is_server:
                self._set_roles(conn, receiver if sender_is_server else sender)
        return conn

    def _starts_new(self, conn: _Connection, ts: int, seq: int, ack: int, fl: int) -> bool:
        """Is this SYN (or SYN/ACK) the start of a new connection on the same 4-tuple?"""
        if fl & ACK:
            if conn.client_isn is not None and ack == (conn.client_isn + 1) & M32:
                return False  # answers the SYN we have
            if seq == conn.server_isn:
                return False
        elif seq == conn.client_isn:
            return False  # a retransmitted SYN
        return (
            conn.end_reason is not None
            or ts - conn.last_ts > self.reuse_idle_us
            # nothing placed in either direction: stray packets of an earlier connection
            or (conn.a.nseq is None and conn.b.nseq is None)
        )

    def _finish_connection(self, conn: _Connection, *, reused: bool) -> None:
        if conn.dropped:
            return
        for s in (conn.a, conn.b):
            s.flush(conn.last_ts)
        if not conn.decided:
            self._decide(conn, force=True)
        if conn.dropped:
            return
        record = self._record(conn, reused)
        self._connections.append(record)
        if conn.consumer is not None:
            conn.consumer.close(record)

    # -- the per-packet slow path -----------------------------------------

    def _control(
        self,
        conn: _Connection,
        from_a: bool,
        ts: int,
        seq: int,
        ack: int,
        fl: int,
        pl: bytes | None,
        tr: bool,
        wl: int,
    ) -> _Connection | None:
        """SYN/FIN/RST and connection state; None when the packet needs nothing more."""
        if self._flow_skip:
            self.stats.packets_dropped += 1
            return None
        if conn.fresh:
            conn.fresh = False
        elif fl & SYN and self._starts_new(conn, ts, seq, ack, fl):
            self._finish_connection(conn, reused=True)
            conn = self._conn = self._new_connection(from_a, ts, fl)
            conn.fresh = False
        s, o = (conn.a, conn.b) if from_a else (conn.b, conn.a)
        self._track_flags(conn, s, o, ts, seq, ack, fl)
        if not conn.decided:
            self._decide(conn, force=False)
        if conn.dropped:
            self.stats.packets_dropped += 1
            conn.last_ts = ts
            return None
        conn.slow = conn.hs_pending
        if fl & RST:  # an RST's payload is a diagnostic, not stream bytes
            s.packets += 1
            s.wire_bytes += wl
            conn.last_ts = ts
            return None
        if fl & FIN and not fl & SYN and s.fin_off is None and not tr:
            if s.nseq is None:
                s.nseq = seq
            fin = s.offset(seq) + len(pl or b"")
            if 0 <= fin - s.next <= MAX_AHEAD:
                s.fin_off = fin
        return conn

    def _track_flags(
        self, conn: _Connection, s: HalfStream, o: HalfStream, ts: int, seq: int, ack: int, fl: int
    ) -> None:
        if fl & SYN:
            if fl & ACK:
                if conn.server_isn is None and conn.client is not s and s.nseq is None:
                    conn.server_isn = seq
                    if conn.client is None:
                        self._set_roles(conn, o)
                    if not conn.dropped:
                        s.set_isn(seq)
                    conn.hs_pending = conn.syn_ts is not None
            elif conn.client_isn is None and conn.server is not s and s.nseq is None:
                conn.client_isn = seq
                conn.syn_ts = ts
                if conn.client is None:
                    self._set_roles(conn, s)
                if not conn.dropped:
                    s.set_isn(seq)
        elif conn.hs_pending and s is conn.client:
            conn.hs_pending = False
            # hs_pending: the SYN/ACK (server_isn) and the SYN (syn_ts) were both seen
            if fl & ACK and ack == (cast(int, conn.server_isn) + 1) & M32:
                conn.rtt = ts - cast(int, conn.syn_ts)
        if fl & (FIN | RST) and conn.end_reason is None:
            conn.end_reason = "rst" if fl & RST else "fin"
            conn.closer = s

    # -- selection --------------------------------------------------------

    def _port(self, conn: _Connection, s: HalfStream | None) -> int:
        return self._a_port if s is conn.a else self._b_port

    def _set_roles(self, conn: _Connection, client: HalfStream) -> None:
        server = conn.b if client is conn.a else conn.a
        conn.client, conn.server = client, server
        client.direction, server.direction = TO_SERVER, TO_CLIENT

    def _on_head(self, conn: _Connection, _side: HalfStream) -> None:
        self._decide(conn, force=False)

    def _decide(self, conn: _Connection, *, force: bool) -> None:
        """Settle roles and selection once the bytes allow it (or must: ``force``)."""
        if conn.decided:
            return
        a, b = conn.a, conn.b
        if conn.client is None:
            if a.head.startswith(AMQP_MAGIC):
                self._set_roles(conn, a)
            elif b.head.startswith(AMQP_MAGIC):
                self._set_roles(conn, b)
            elif force or not (a.head_open or b.head_open):
                self._set_roles(conn, a if self._a_port >= self._b_port else b)
            else:
                return
        client = cast(HalfStream, conn.client)  # the roles are set by now
        if self._port(conn, conn.server) in self.ports:
            self._select(conn, "port")
        elif self.sniff and client.head.startswith(AMQP_MAGIC):
            self._select(conn, "sniff")
        elif force or not self.sniff or not client.head_open:
            self._drop(conn)

    def _select(self, conn: _Connection, selected_by: str) -> None:
        conn.decided = True
        conn.selected_by = selected_by
        client_ip, client_port, server_ip, server_port = self._endpoints(conn)
        ends = (self.capture_id, client_ip, client_port, server_ip, server_port, conn.start_ts)
        first = connection_id(*ends)
        reuse = self._flow_ids.get(first, 0)  # packets come in flow, time, file order: the same n on every run
        self._flow_ids[first] = reuse + 1
        conn.connection_id = connection_id(*ends, reuse=reuse)
        consumer = None
        if self.consumer_factory is not None:
            info = ConnectionInfo(
                conn.connection_id, self.capture_id, client_ip, client_port, server_ip, server_port,
                self._ip_version, conn.start_ts, conn.client_isn is not None, self._tls(conn), selected_by,
            )  # fmt: skip
            consumer = self.consumer_factory(info)
        conn.consumer = consumer
        for s in (conn.a, conn.b):
            s.on_head = None
            s.emit = partial(consumer.data, cast(str, s.direction)) if consumer is not None else None  # roles set
            s.emit_gap = partial(self._emit_gap, conn, s)
        held, conn.pending = conn.pending or [], None
        for s, off, ts, item, reason in held:
            if reason is not None:
                cast(EmitGap, s.emit_gap)(off, item, ts, reason)  # set just above
            elif s.emit is not None:
                s.emit(off, ts, item)
        self.stats.connections_selected += 1

    def _drop(self, conn: _Connection) -> None:
        conn.decided = conn.dropped = conn.slow = True
        conn.pending = None
        conn.a.discard()
        conn.b.discard()
        self.stats.connections_dropped += 1
        self.stats.packets_dropped += conn.a.packets + conn.b.packets

    def _hold_data(self, conn: _Connection, s: HalfStream, off: int, ts: int, data: bytes) -> None:
        cast("list[_Held]", conn.pending).append((s, off, ts, data, None))  # a list until decided
        conn.pending_bytes += len(data)
        if conn.pending_bytes > SNIFF_HOLD_BYTES:
            self._decide(conn, force=True)

    def _hold_gap(
        self, conn: _Connection, s: HalfStream, off: int, length: int, ts: int, reason: str
    ) -> None:
        cast("list[_Held]", conn.pending).append((s, off, ts, length, reason))  # a list until decided

    def _emit_gap(
        self, conn: _Connection, s: HalfStream, off: int, length: int, ts: int, reason: str
    ) -> None:
        direction = cast(str, s.direction)  # set with the roles, before selection
        self._gaps.append(GapRecord(conn.connection_id, direction, off, length, ts, reason))
        if conn.consumer is not None:
            conn.consumer.gap(direction, off, length, ts)

    # -- the record ---------------------------------------------------------

    def _endpoints(self, conn: _Connection) -> tuple[str, int, str, int]:
        if conn.client is conn.a:
            return self._a_ip, self._a_port, self._b_ip, self._b_port
        return self._b_ip, self._b_port, self._a_ip, self._a_port

    def _tls(self, conn: _Connection) -> bool:
        return (
            self._port(conn, conn.server) in self.tls_ports
            or cast(HalfStream, conn.client).head.startswith(TLS_HANDSHAKE)  # the roles are set at selection
            or cast(HalfStream, conn.server).head.startswith(TLS_HANDSHAKE)
        )

    def _record(self, conn: _Connection, reused: bool) -> ConnectionRecord:
        c, s = cast(HalfStream, conn.client), cast(HalfStream, conn.server)  # a selected connection has roles
        client_ip, client_port, server_ip, server_port = self._endpoints(conn)
        closed_by = None
        if conn.closer is not None:
            closed_by = "client" if conn.closer is c else "server"
        return ConnectionRecord(
            connection_id=conn.connection_id,
            capture_id=self.capture_id,
            client_ip=client_ip,
            client_port=client_port,
            server_ip=server_ip,
            server_port=server_port,
            ip_version=self._ip_version,
            start_ts_us=conn.start_ts,
            end_ts_us=conn.last_ts,
            syn_seen=conn.client_isn is not None,
            handshake_rtt_us=conn.rtt,
            end_reason=conn.end_reason or ("port_reuse" if reused else "capture_end"),
            closed_by=closed_by,
            tls=self._tls(conn),
            selected_by=cast(str, conn.selected_by),  # set by _select
            overlap_conflicts=c.conflicts + s.conflicts,
            **{f"{column}_{d}": getattr(h, attr) for d, h in ((TO_SERVER, c), (TO_CLIENT, s)) for column, attr in _COUNTS},
        )
