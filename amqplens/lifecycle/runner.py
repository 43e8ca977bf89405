"""The streaming driver: frame rows of many connections in, lifecycle rows out, bounded state.

Input order: the frames of one connection contiguous (the job repartitions by
connection_id and sorts within partitions by ``(connection_id, ts_us,
stream_offset)``); connections may come in any order, but each only once.
When the connection_id changes, the previous connection is finished: what is
still open becomes open_at_capture_end (or unsettled/unconfirmed/requeued at
close, when its close was seen but not its answer), pending requests
unanswered, and its state is dropped. So memory holds one connection's live
deliveries, pending requests and a small reorder buffer.

Frame order within a connection: each direction is a byte stream, so its
frames must be handled in stream_offset order; the two directions are merged
by time. The decoder makes the two orders agree: a direction's frame times
never go back in stream order (TCP reassembly releases a segment that
arrived ahead of a hole at the time of the packet that filled it, see
``amqplens.decode.tcp.stream``), so the sort by ``(ts_us, stream_offset)``
gives each direction in stream order, however large the out-of-order
stretch (a 64 KB loopback segment holds hundreds of frames). Should rows
come otherwise anyway, the runner holds up to ``reorder_window`` frames per
connection in one heap per direction keyed by stream_offset, and always
handles the direction head with the smaller ts. Equal ts across directions
(logs with coarse clocks, or one packet timestamp on loopback): a frame that
refers back (ack, nack, reject, a synchronous ``*-ok`` / get-empty answer, a
1.0 disposition) goes after one that does not, then to_server first. A frame
arriving after a later frame of its direction was already handled (beyond the
window) is handled anyway and counted in ``stats["late_frames"]``; a row
without direction, stream_offset or ts_us is skipped and counted in
``stats["bad_frames"]``.
"""

from __future__ import annotations

import dataclasses
from heapq import heappop, heappush
from collections.abc import Iterable

from amqplens.decode.detect import FAMILY_0_9_1
from amqplens.lifecycle.amqp010 import Connection010
from amqplens.lifecycle.amqp091 import Connection091
from amqplens.lifecycle.amqp10 import Connection10
from amqplens.lifecycle.records import Output, frame_id_of

REFERS_BACK = frozenset({"ack", "nack", "reject", "get-empty", "redirect",
                          # 0-10: settlements, completions, results and the answering controls
                          "accept", "release", "completed", "known-completed", "result", "exception", "attached", "detached"})


@dataclasses.dataclass(frozen=True)
class LifecycleOptions:
    reorder_window: int = 64  # frames held per connection to restore each direction's stream order
    max_pending_returns: int = 10_000  # per channel: no-confirm mandatory publishes a basic.return may still name


def _rank(row: dict) -> int:
    m = row.get("method_name")
    if m is not None:
        return 1 if m in REFERS_BACK or m.endswith("-ok") else 0
    return 1 if row.get("performative") == "disposition" else 0


class LifecycleRunner:
    """Feed frame rows (dicts with the frames columns and ``ts_us``); drain deliveries, flow events, request/responses."""

    def __init__(self, options: LifecycleOptions = LifecycleOptions()) -> None:
        self.options = options
        self.out = Output()
        self.stats = {"frames": 0, "connections": 0, "late_frames": 0, "unsupported_frames": 0, "bad_frames": 0}
        self._cid: str | None = None
        self._tracker: Connection091 | Connection10 | Connection010 | None = None
        self._heaps: dict[str, list] = {"to_server": [], "to_client": []}
        self._hs, self._hc = self._heaps["to_server"], self._heaps["to_client"]  # the same lists, for _handle_next
        self._held = 0
        self._seq = 0
        self._done_offset: dict[str, int] = {}
        self._captures: dict[str, str | None] = {}

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, rows: Iterable[dict]) -> None:
        window = self.options.reorder_window
        heaps = self._heaps
        push = heappush
        handle_next = self._handle_next
        for row in rows:
            cid = row["connection_id"]
            if cid != self._cid:
                self._finish_connection()
                self._start(cid, row)
            heap = heaps.get(row["direction"])
            offset, ts = row.get("stream_offset"), row.get("ts_us")
            if heap is None or offset is None or ts is None:  # outside the contract: counted, not a crash
                self.stats["bad_frames"] += 1
                continue
            seq = self._seq = self._seq + 1
            push(heap, (offset, seq, row))
            held = self._held = self._held + 1
            if held > window:
                handle_next()

    def finish(self) -> None:
        self._finish_connection()
        self._cid = None

    def _start(self, cid: str, row: dict) -> None:
        self._cid = cid
        self._captures[cid] = row.get("capture_id")
        self.stats["connections"] += 1
        dialect = row.get("dialect")
        if dialect in FAMILY_0_9_1:
            self._tracker = Connection091(cid, dialect, self.out, self.options.max_pending_returns)
        elif dialect == "1.0":
            self._tracker = Connection10(cid, self.out)
        elif dialect == "0-10":
            self._tracker = Connection010(cid, self.out)
        else:  # the drafts have no machine
            self._tracker = None

    def _finish_connection(self) -> None:
        while self._held:
            self._handle_next()
        if self._tracker is not None:
            self._tracker.finish()
        self._tracker = None
        self._done_offset.clear()

    def _handle_next(self) -> None:
        hs, hc = self._hs, self._hc
        if hs and hc:
            a, b = hs[0][2], hc[0][2]
            ta, tb = a["ts_us"], b["ts_us"]
            heap = hs if ta < tb or (ta == tb and _rank(a) <= _rank(b)) else hc
        else:
            heap = hs or hc
        offset, _, row = heappop(heap)
        self._held -= 1
        d = row["direction"]
        done = self._done_offset
        stats = self.stats
        if offset < done.get(d, -1):
            stats["late_frames"] += 1
        else:
            done[d] = offset
        stats["frames"] += 1
        tracker = self._tracker
        if tracker is None:
            stats["unsupported_frames"] += 1
            return
        tracker.on_frame(row, frame_id_of(row), row["ts_us"])

    # -- output ----------------------------------------------------------------------------------
    def drain_deliveries(self) -> list[dict]:
        rows, self.out.deliveries = self.out.deliveries, []
        return rows

    def drain_flow_events(self) -> list[dict]:
        rows, self.out.flow_events = self.out.flow_events, []
        return rows

    def drain_request_responses(self) -> list[dict]:
        rows, self.out.request_responses = self.out.request_responses, []
        return rows

    def capture_id_of(self, connection_id: str) -> str | None:
        """The capture_id the connection's first row carried (kept until ``forget_finished``)."""
        return self._captures.get(connection_id)

    def forget_finished(self) -> None:
        """Drop the capture ids of finished connections (call after draining their rows)."""
        current = self._captures.get(self._cid) if self._cid is not None else None
        self._captures = {self._cid: current} if self._cid is not None else {}
