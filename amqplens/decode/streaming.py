"""Scaffolding shared by the codecs' stream decoders and direction framers.

The four codecs (``v0_9_1``, ``v1_0``, ``v0_10``, ``drafts``) decode a connection
the same way: a ``StreamConsumer`` (``amqplens.decode.tcp.records``) owns one framer
per direction, the framers cut the in-order bytes into frames and error regions
and call their owner back, and the owner turns those into rows. What is the
same logic in every codec lives here:

- ``ErrorRegion``: a run of stream bytes that is not a frame;
- ``Marks``: a direction's time marks, the segments' (offset, time), as arrays;
- ``FramerCore``: a direction's offsets, time marks, byte counters and error
  regions, and ``abandon`` (after a decoder failure, the rest of the direction
  is kept raw);
- ``DirectionFramerBase``: the buffered framing loop of 0-9-1, 1.0 and 0-10
  (feed, gap, close, the mode loop, resynchronisation and the opaque mode);
  a codec gives its frame header checks (``_start``, ``_synced``,
  ``_plausible``, ``_cut_frame_end``) and its candidate search;
- ``StreamDecoderBase``: ``data``/``gap``/``close`` that never raise (a decoder
  bug becomes an ``internal_error`` row that keeps the byte accounting), the
  drains, ``on_error``, the common connection facts and frame rows;
- ``MessageTrackerBase``: the open messages of one direction, numbered per
  channel or link (0-9-1's content, 1.0's transfers);
- ``decode_both``: a whole connection in one call (for tests and tools).

Every byte fed ends up in exactly one frame or one error region, so per
direction: frame bytes + error bytes = bytes fed (gaps are counted apart).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, TypedDict, TypeVar, cast

import numpy as np

from amqplens.decode.errors import FrameError
from amqplens.decode.detect import AMQP, HEADER_SIZE, could_be_header
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER, ConnectionRecord, StreamConsumer

START, SYNCED, RESYNC, OPAQUE = "start", "synced", "resync", "opaque"
MAX_FRAME_SIZE = 128 << 20  # hard cap on any frame: no real peer negotiates more; a bigger claim is an error, never a buffer
RESYNC_MAX_FRAME = 1 << 20  # largest frame believed while searching, when the peers' frame limit is not known
MAX_ERROR_BYTES = 4096  # raw bytes one error row keeps (its sha256 covers them all)
YES, NO, WAIT = 1, 0, -1
K = TypeVar("K")  # a message tracker's key: a channel, a link
M = TypeVar("M")  # its open message
T = TypeVar("T")  # a codec's tracker
_REASON = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a decode_error's machine-readable part, before ": "


def decode_error_parts(text: str) -> tuple[str, str]:
    """A frame's ``decode_error`` as the (reason, detail) of its decode_errors row (stage frame): a ``FrameError``
    gives its parts; other text (the compiled path's, a log's) is read as ``reason: detail``."""
    if isinstance(text, FrameError):
        return text.reason, text.detail
    reason, sep, detail = text.partition(": ")
    if not sep or not _REASON.fullmatch(reason):
        return "frame_decode_error", text
    return reason, detail


INTERNAL_ERROR = ("internal_error", "the decoder failed; later bytes of this direction are kept raw")


class ErrorRegion:
    """A contiguous run of stream bytes that is not a frame."""

    __slots__ = ("offset", "length", "reason", "detail", "ts_us", "raw", "hasher", "cap")

    def __init__(self, offset: int, ts_us: int, reason: str, detail: str, cap: int) -> None:
        self.offset, self.ts_us, self.reason, self.detail, self.cap = offset, ts_us, reason, detail, cap
        self.length = 0
        self.raw = bytearray()
        self.hasher = hashlib.sha256()

    def add(self, chunk) -> None:
        if not len(chunk):
            return
        self.length += len(chunk)
        self.hasher.update(chunk)
        room = self.cap - len(self.raw)
        if room > 0:
            self.raw += chunk[:room]


class Marks:
    """The (stream offset, ts_us) of each segment fed to a direction since the ones a frame no longer needs, oldest
    first: a frame's time is its first byte's segment's, the last mark at or before its offset (``time_at``).

    Two int64 arrays and a head, not a deque of tuples: a compiled run's marks go in as its arrays (``extend``) and
    the hot paths read them as arrays (``live``, ``spend``), Python per run, not per packet (the deque's tuples
    made and taken apart were 4.7% of the 2 GB load capture's ingest tasks)."""

    __slots__ = ("at", "ts", "head", "end")

    def __init__(self) -> None:
        self.at = np.zeros(16, np.int64)
        self.ts = np.zeros(16, np.int64)
        self.head = self.end = 0

    def __len__(self) -> int:
        return self.end - self.head

    def _room(self, k: int) -> None:
        if self.end + k <= len(self.at):
            return
        live = self.end - self.head
        if live + k > len(self.at) // 2:  # more than half full once moved down: twice as large
            cap = max(2 * len(self.at), 2 * (live + k))
            at, ts = np.zeros(cap, np.int64), np.zeros(cap, np.int64)
        else:
            at, ts = self.at, self.ts
        at[:live], ts[:live] = self.at[self.head:self.end].copy(), self.ts[self.head:self.end].copy()
        self.at, self.ts, self.head, self.end = at, ts, 0, live

    def add(self, offset: int, ts_us: int) -> None:
        self._room(1)
        self.at[self.end], self.ts[self.end] = offset, ts_us
        self.end += 1

    def extend(self, at: np.ndarray, ts: np.ndarray) -> None:
        k = len(at)
        self._room(k)
        self.at[self.end:self.end + k], self.ts[self.end:self.end + k] = at, ts
        self.end += k

    def clear(self) -> None:
        self.head = self.end = 0

    def time_at(self, offset: int) -> int:
        """The time of the last mark at or before ``offset`` (the first mark's if none is; 0 without marks), the marks
        before that one dropped: a frame's time, its offset never below an earlier frame's."""
        h, e, at = self.head, self.end, self.at
        steps = 0
        while e - h > 1 and at[h + 1] <= offset:
            h += 1
            steps += 1
            if steps == 8:  # many marks spent at once (a large frame over many segments): the rest at once
                self.head = h
                self.spend(offset)
                h = self.head
                break
        self.head = h
        return int(self.ts[h]) if e > h else 0

    def spend(self, offset: int) -> None:
        """``time_at``'s dropping without its time: the head moves to the last mark at or before ``offset`` (it stops
        at the first later one, as the one-at-a-time loop does, whatever the marks after it)."""
        h, e = self.head, self.end
        if e - h > 1:
            later = np.flatnonzero(self.at[h + 1:e] > offset)
            self.head = h + int(later[0]) if len(later) else e - 1

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the marks' offsets and times, oldest first."""
        return self.at[self.head:self.end].copy(), self.ts[self.head:self.end].copy()


class FramerCore:
    """One direction's offsets, time marks, byte counters and error regions; ``owner.on_error`` gets the regions."""

    OPAQUE_MODE = OPAQUE  # the mode in which every byte is error bytes (the rest of the direction)

    def __init__(self, direction: str, owner, max_error_bytes: int) -> None:
        self.direction = direction
        self.owner = owner
        self.max_error_bytes = max_error_bytes
        self.mode = START
        self.pending = b""
        self.base = 0  # stream offset of pending[0]
        self.expected = 0  # stream offset of the next byte we expect
        self.started = False
        self.region: ErrorRegion | None = None
        self.marks = Marks()  # (stream offset, ts_us) per segment fed
        self.fed = self.frame_bytes = self.error_bytes = self.gap_bytes = 0

    def abandon(self) -> None:
        """After a decoder failure: drop what is buffered (an open region too) and keep the rest raw.

        The caller accounts the dropped bytes (``StreamDecoderBase._internal_error``)."""
        self.pending, self.region, self.base, self.mode = b"", None, self.expected, self.OPAQUE_MODE

    def raw_at(self, offset: int, size: int) -> bytes | None:
        """The bytes of the frame at stream ``offset`` while it is handed to the owner (inside ``_run``,
        ``pending`` is the buffer being framed and starts at ``base``); None when they are not there."""
        start = offset - self.base
        if start < 0 or start + size > len(self.pending):
            return None
        return bytes(self.pending[start : start + size])

    def _ts(self, stream_offset: int) -> int:
        return self.marks.time_at(stream_offset)

    def _open_region(self, pos: int, reason: str, detail: str) -> None:
        self._flush_region()
        off = self.base + pos
        self.region = ErrorRegion(off, self._ts(off), reason, detail, self.max_error_bytes)

    def _flush_region(self) -> None:
        region, self.region = self.region, None
        if region is not None and region.length:
            self.error_bytes += region.length
            self.owner.on_error(self, region)


class DirectionFramerBase(FramerCore):
    """The buffered framing loop: at most one partial frame is kept between calls.

    Modes: START, SYNCED, RESYNC and ``OPAQUE_MODE``; a subclass defines ``_start``
    and ``_synced`` (and ``_plausible``, used by ``_resync``), ``_cut_frame_end``,
    and either ``CANDIDATE`` (a compiled pattern where a frame may start) or
    ``_scanner()``. ``RESYNC_TAIL``: how many last bytes ``_resync`` keeps when
    no candidate is found, since a candidate may start there (0: none).
    ``GAP_LEAVES_OPAQUE``: whether a gap leaves the opaque mode as it is (else a
    gap always switches to RESYNC).
    """

    CANDIDATE: re.Pattern[bytes] | None = None
    RESYNC_TAIL = 0
    START_WAITS_AT_CLOSE = True  # a could-be protocol header cut short at close/gap: a truncation (else: searched)
    GAP_LEAVES_OPAQUE = True
    OPAQUE_REASON = ("unsupported_dialect", "")
    _steps: ClassVar[dict[str, Callable[..., int]]]  # mode -> its step, per subclass (``__init_subclass__``)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._steps = {START: cls._start, SYNCED: cls._synced, RESYNC: cls._resync, cls.OPAQUE_MODE: cls._opaque}

    def __init__(self, direction: str, owner, max_error_bytes: int) -> None:
        super().__init__(direction, owner, max_error_bytes)
        self.chunks: list[bytes] = []
        self.chunks_len = 0
        self.need = 0  # pending bytes needed before another attempt can progress
        self.resync_reason = ("not_amqp", "bytes at the start of the stream that are neither a protocol header nor frames")
        self.opaque_reason = self.OPAQUE_REASON
        self.skip_to: int | None = None  # stream offset where the frame cut by a gap ends
        self.stalled = False
        self._mv: memoryview | None = None  # the buffer of the running ``_run``

    # -- input ------------------------------------------------------------------------
    def feed(self, offset: int, ts_us: int, data: bytes) -> None:
        if offset > self.expected:  # a hole nobody reported: handle it like a gap
            self.gap(self.expected, offset - self.expected, ts_us, reported=False)
        elif offset < self.expected:  # already seen: keep only the new tail
            data = data[self.expected - offset :]
            offset = self.expected
        if not data:
            return
        if not self.started:
            self.started = True
            if offset != 0:
                self.mode = RESYNC
                self.resync_reason = ("resync_skipped", "bytes before the first plausible frame of a capture that starts mid-stream")
        self.marks.add(offset, ts_us)
        self._take(offset, bytes(data))

    def feed_run(self, offset: int, data: bytes, mark_at: np.ndarray, mark_ts: np.ndarray) -> None:
        """Contiguous segments at once: their bytes, from ``offset`` (= ``expected``, once started), and each
        segment's offset and time (``Marks``); the frames are the ones ``feed`` per segment gives."""
        self.marks.extend(mark_at, mark_ts)
        self._take(offset, data)

    def _take(self, offset: int, data: bytes) -> None:
        self.fed += len(data)
        self.expected = offset + len(data)
        self.chunks.append(data)
        self.chunks_len += len(data)
        if len(self.pending) + self.chunks_len >= self.need:
            self._run(final=False)

    def gap(self, offset: int, length: int, ts_us: int, reported: bool = True) -> None:
        frame_end = self._run(final=True, final_reason=("truncated_by_gap", "a frame cut short by missing bytes"))
        self._flush_region()
        if reported:
            self.gap_bytes += length
        self.started = True
        self.expected = max(self.expected, offset + length)
        if self.mode != self.OPAQUE_MODE or not self.GAP_LEAVES_OPAQUE:
            self.mode = RESYNC
            self.resync_reason = ("resync_skipped", "bytes skipped after missing bytes, up to the next plausible frame")
        self.skip_to = frame_end if frame_end is not None and frame_end > self.expected else None
        self.base = self.expected
        self.marks.clear()
        self.marks.add(self.expected, ts_us)

    def close(self) -> None:
        self._run(final=True, final_reason=("truncated_at_close", "a partial frame at the end of the stream"))
        self._flush_region()

    def abandon(self) -> None:
        super().abandon()
        self.chunks, self.chunks_len = [], 0
        self._keep_raw(*INTERNAL_ERROR)

    def _keep_raw(self, reason: str, detail: str) -> None:
        """``abandon``'s last step: the reason of the region that will hold the rest of the direction."""
        self.opaque_reason = (reason, detail)

    # -- the loop ------------------------------------------------------------------------
    def _run(self, final: bool, final_reason: tuple = ("", "")) -> int | None:
        """Consume what can be consumed; returns, when a partial frame is dropped, where it would end."""
        if self.chunks:
            self.pending = b"".join([self.pending, *self.chunks]) if self.pending else b"".join(self.chunks)
            self.chunks.clear()
            self.chunks_len = 0
        buf = self.pending
        n = len(buf)
        mv = self._mv = memoryview(buf)
        pos = 0
        self.need = 0
        self.stalled = False
        cut_frame_end = None
        steps = self._steps
        while pos < n and not self.stalled:
            pos = steps[self.mode](self, buf, mv, pos, n, final)
        if final and pos < n:
            if self.mode == SYNCED:
                cut_frame_end = self._cut_frame_end(buf, pos, n)
            if self.region is None or self.mode not in (RESYNC, self.OPAQUE_MODE):
                self._open_region(pos, *final_reason)
            cast(ErrorRegion, self.region).add(mv[pos:n])  # open: RESYNC and the opaque mode keep theirs
            pos = n
        self.pending = buf[pos:] if pos < n else b""
        self.base += pos
        self._mv = None
        return cut_frame_end

    def _cut_frame_end(self, buf: bytes, pos: int, n: int) -> int | None:
        """Where the partial frame at ``pos`` would end, when its header is trusted enough to skip to it after a gap."""
        return None

    def _lose_sync(self, pos: int, reason: str, detail: str) -> int:
        self._open_region(pos, reason, detail)
        # the bad header's first octet; the scan starts after it (inside ``_run``: _mv is its buffer)
        cast(ErrorRegion, self.region).add(cast(memoryview, self._mv)[pos : pos + 1])
        self.mode = RESYNC
        return pos + 1

    def _header(self, mv: memoryview, pos: int) -> int:
        """A protocol header at ``pos``; ``owner.on_protocol_header`` returns the next mode and, for the
        opaque mode, the region's reason and detail."""
        off = self.base + pos
        result = self.owner.on_protocol_header(self, off, self._ts(off), bytes(mv[pos : pos + HEADER_SIZE]))
        self.frame_bytes += HEADER_SIZE
        self.mode = result[0]
        if self.mode == self.OPAQUE_MODE:
            self.opaque_reason = result[1:]
            self._open_region(pos + HEADER_SIZE, *self.opaque_reason)
        return pos + HEADER_SIZE

    # -- modes ---------------------------------------------------------------------------
    def _start(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        head = buf[pos : pos + HEADER_SIZE]
        if len(head) < HEADER_SIZE and could_be_header(head) and (self.START_WAITS_AT_CLOSE or not final):
            self.need = HEADER_SIZE
            self.stalled = True
            return pos
        if len(head) == HEADER_SIZE and head.startswith(AMQP):
            return self._header(mv, pos)
        self.mode = RESYNC
        return pos

    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        raise NotImplementedError

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        """YES, NO or WAIT (more bytes would decide) for a frame starting at ``q``."""
        raise NotImplementedError

    def _scanner(self):
        return self.CANDIDATE.search

    def _resync(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if self.region is None:
            self._open_region(pos, *self.resync_reason)
        start = pos
        if self.skip_to is not None:
            target = self.skip_to - self.base
            if target > n:
                cast(ErrorRegion, self.region).add(mv[pos:n])  # opened above if it was not
                return n
            start = max(pos, target)
            self.skip_to = None
        search = self._scanner()
        m = search(buf, start)
        while m is not None:
            q = m.start()
            verdict = self._plausible(buf, q, n, final)
            if verdict == YES:
                cast(ErrorRegion, self.region).add(mv[pos:q])
                self._flush_region()
                self.mode = SYNCED
                return q
            if verdict == WAIT:
                cast(ErrorRegion, self.region).add(mv[pos:q])
                self.stalled = True
                return q
            m = search(buf, q + 1)
        # a frame or protocol header may start in the last RESYNC_TAIL bytes: the search needs more to see it
        cut = n if final else max(pos, start, n - self.RESYNC_TAIL)
        cast(ErrorRegion, self.region).add(mv[pos:cut])
        if cut < n:
            self.need = n - cut + 1
            self.stalled = True
        return cut

    def _opaque(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if self.region is None:
            self._open_region(pos, *self.opaque_reason)
        cast(ErrorRegion, self.region).add(mv[pos:n])  # opened above if it was not
        return n

    def _wait(self, needed: int) -> int:
        self.need = needed  # pending is cut at the candidate before the next attempt
        return WAIT


class Codec(StreamConsumer, Protocol):
    """What decodes one connection's streams (a codec, ``SharedHeaderConsumer``, ``TlsLayer``, ``DecodingConsumer``):
    a ``StreamConsumer`` with the drains and the connection facts."""

    def drain_frames(self) -> list[dict]: ...

    def drain_errors(self) -> list[dict]: ...

    def drain_frame_errors(self) -> list[dict]: ...

    def connection_facts(self) -> dict: ...


class MessageTrackerBase(Generic[K, M]):
    """The open messages of one direction, by key (a channel, a link): each message gets a ``message_seq``,
    0-based per key. ``completed`` and ``abandoned`` count the messages ended whole or cut short."""

    def __init__(self, body_prefix_bytes: int = 0) -> None:
        self.body_prefix_bytes = body_prefix_bytes
        self._open: dict[K, M] = {}
        self._next_seq: dict[K, int] = {}
        self.completed = 0
        self.abandoned = 0

    def _number(self, key: K) -> int:
        """The next message_seq of ``key``."""
        seq = self._next_seq.get(key, 0)
        self._next_seq[key] = seq + 1
        return seq

    def reset(self) -> None:
        """Bytes went missing: no open message can be completed correctly."""
        self.abandoned += len(self._open)
        self._open.clear()

    @property
    def open_messages(self) -> int:
        return len(self._open)


class FramedOptions(TypedDict, total=False):
    """The options of a sized-frame codec (0-9-1 family, 1.0); ``StreamDecoderBase._init_framed`` gives the defaults."""

    max_frame_size: int
    resync_max_frame: int
    max_error_bytes: int
    body_prefix_bytes: int
    redact: bool
    redaction_key: bytes | None


class StreamDecoderBase:
    """The ``StreamConsumer`` plumbing of a codec's per-connection decoder.

    ``data``/``gap``/``close`` never raise: a decoder bug becomes one
    ``internal_error`` row for the bytes of that direction not yet accounted,
    and the rest of the direction is kept raw. A subclass calls
    ``_init_streams(connection_id, framers[, trackers])`` (or ``_init_framed``, for a codec of sized frames
    with its ``FramedOptions``), sets ``FRAME_TEMPLATE`` and
    ``dialect``, and may define the hooks ``_reset_direction`` (after a gap),
    ``_close_content`` (at close), ``_direction_facts``, ``_may_hold_secret``
    and ``_facts_dict`` (where the connection facts are kept). A codec that follows
    its messages with one tracker per direction (``reset()``, ``completed``,
    ``abandoned``, ``open_messages``) passes them as ``trackers``: they are reset
    after a gap and at close, and counted in the facts.
    """

    FRAME_TEMPLATE: dict = {}
    EMPTY_INTERNAL_ERROR_ROWS = False  # an internal_error row even when no byte was lost
    # set by every subclass's __init__
    dialect: str
    redact: bool
    _facts: Any  # the codec's connection facts: a ConnectionFacts (``.facts``), or the facts dict itself

    def _init_framed(
        self, connection_id: str, framer: Callable[[str, Any, int], Any], tracker: Callable[[int], T],
        facts: Callable[[str, bytes | None, bool], Any], *, max_frame_size: int = MAX_FRAME_SIZE,
        resync_max_frame: int = RESYNC_MAX_FRAME, max_error_bytes: int = MAX_ERROR_BYTES, body_prefix_bytes: int = 0,
        redact: bool = True, redaction_key: bytes | None = None,
    ) -> dict[str, T]:
        """``_init_streams`` for a codec of sized frames (``FramedOptions``): one ``framer(direction, self,
        max_error_bytes)`` and one ``tracker(body_prefix_bytes)`` per direction, the frame limits, and the connection
        facts ``facts(connection_id, redaction_key, redact)``. Returns the trackers by direction."""
        trackers = {d: tracker(body_prefix_bytes) for d in (TO_SERVER, TO_CLIENT)}
        self._init_streams(connection_id, {d: framer(d, self, max_error_bytes) for d in (TO_SERVER, TO_CLIENT)}, trackers)
        self.max_frame_size = max_frame_size
        self.resync_max_frame = resync_max_frame
        self.redact = redact
        self._facts = facts(connection_id, redaction_key, redact)
        return trackers

    def _init_streams(self, connection_id: str, framers: dict, trackers: dict | None = None) -> None:
        self.connection_id = connection_id
        self._framers = framers
        self._trackers = trackers or {}
        self._frames: list[dict] = []
        self._errors: list[dict] = []
        self._frame_errors: list[dict] = []  # frames that framed but did not decode (decode_errors stage frame)
        self._frame_counts = {TO_SERVER: 0, TO_CLIENT: 0}
        self._decode_errors = self._internal_errors = 0
        self._closed = False

    # -- StreamConsumer ---------------------------------------------------------------------
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        framer = self._framers.get(direction)
        if framer is None or self._closed:
            return
        try:
            framer.feed(offset, ts_us, data)
        except Exception as exc:  # a decoder bug must not fail the task: keep the bytes as an error
            self._internal_error(framer, exc, ts_us)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        framer = self._framers.get(direction)
        if framer is None or self._closed:
            return
        try:
            framer.gap(offset, length, ts_us)
            self._reset_direction(direction)
        except Exception as exc:
            self._internal_error(framer, exc, ts_us)

    def close(self, connection: ConnectionRecord | None = None) -> None:
        if self._closed:
            return
        for framer in self._framers.values():
            try:
                framer.close()
            except Exception as exc:
                self._internal_error(framer, exc, 0)
        self._close_content()
        if connection is not None:
            facts = self._facts_dict()
            facts["transport_end_reason"], facts["transport_closed_by"] = connection.end_reason, connection.closed_by
        self._closed = True

    def record_only(self, reason: str, detail: str) -> None:
        """Before any byte: decode nothing, keep each direction as one error region with this reason (TLS)."""
        for framer in self._framers.values():
            framer.mode, framer.opaque_reason = framer.OPAQUE_MODE, (reason, detail)

    # -- output -----------------------------------------------------------------------------
    def drain_frames(self) -> list[dict]:
        rows, self._frames = self._frames, []
        return rows

    def drain_errors(self) -> list[dict]:
        rows, self._errors = self._errors, []
        return rows

    def drain_frame_errors(self) -> list[dict]:
        """Error rows (the ``drain_errors`` keys) of frames whose content did not decode. Their bytes are
        frame bytes, so they are not part of the byte accounting; the row keeps them for a later decoder."""
        rows, self._frame_errors = self._frame_errors, []
        return rows

    def connection_facts(self) -> dict:
        out = dict(self._facts_dict())
        for d, framer in self._framers.items():
            out[f"stream_bytes_{d}"] = framer.fed
            out[f"frame_bytes_{d}"] = framer.frame_bytes
            out[f"error_bytes_{d}"] = framer.error_bytes
            out[f"gap_bytes_{d}"] = framer.gap_bytes
            out[f"frames_{d}"] = self._frame_counts[d]
            self._direction_facts(out, d)
        out["frame_decode_errors"] = self._decode_errors
        out["internal_errors"] = self._internal_errors
        return out

    # -- hooks ------------------------------------------------------------------------------
    def _facts_dict(self) -> dict:
        return self._facts.facts

    def _direction_facts(self, out: dict, direction: str) -> None:
        """Codec facts of one direction, after its byte and frame counts."""
        if self._trackers:
            tracker = self._trackers[direction]
            out[f"messages_{direction}"] = tracker.completed
            out[f"incomplete_messages_{direction}"] = tracker.abandoned + tracker.open_messages

    def _reset_direction(self, direction: str) -> None:
        """After a gap in ``direction``: forget the messages it cut."""
        if self._trackers:
            self._trackers[direction].reset()

    def _close_content(self) -> None:
        """At close, after the framers: end what is still open."""
        for tracker in self._trackers.values():
            tracker.reset()

    def _may_hold_secret(self, direction: str, offset: int, reason: str, raw: bytes) -> bool:
        return self.redact and direction == TO_SERVER

    # -- framer callbacks and rows ------------------------------------------------------------
    def on_error(self, framer, region: ErrorRegion) -> None:
        raw: bytes | None
        raw, detail = bytes(region.raw), region.detail
        if self._may_hold_secret(framer.direction, region.offset, region.reason, raw):
            raw, detail = None, detail + " (raw bytes withheld: they may hold credentials)"
        self._errors.append(self._error_row(framer.direction, region.offset, region.length, region.reason, detail, raw,
                                            region.hasher.hexdigest(), region.ts_us))  # fmt: skip

    def _frame_error(self, framer, row: dict) -> None:
        """A frame row with ``decode_error`` set: counted, and its bytes kept for ``drain_frame_errors``."""
        self._decode_errors += 1
        reason, detail = decode_error_parts(row["decode_error"])
        offset, size = row["stream_offset"], row["size"]
        whole = framer.raw_at(offset, size)
        raw, sha = None, None
        if whole is not None:
            sha = hashlib.sha256(whole).hexdigest()
            raw = whole[: framer.max_error_bytes]
            if self._may_hold_secret(framer.direction, offset, reason, whole):
                raw, detail = None, detail + " (raw bytes withheld: they may hold credentials)"
        self._frame_errors.append(self._error_row(framer.direction, offset, size, reason, detail, raw, sha, row["ts_us"]))

    def _row(self, framer, offset: int, ts_us: int, kind: str, channel, size: int) -> dict:
        row = self.FRAME_TEMPLATE.copy()
        # item by item, in the template's order: half the cost of ``update`` with keywords
        row["connection_id"] = self.connection_id
        row["direction"] = framer.direction
        row["stream_offset"] = offset
        row["ts_us"] = ts_us
        row["dialect"] = self.dialect
        row["frame_type"] = kind
        row["channel"] = channel
        row["size"] = size
        return row

    def _append(self, row: dict) -> None:
        self._frames.append(row)
        self._frame_counts[row["direction"]] += 1

    def _error_row(self, direction, offset, length, reason, detail, raw, sha, ts_us) -> dict:
        return {"connection_id": self.connection_id, "direction": direction, "stream_offset": offset, "length": length,
                "reason": reason, "detail": detail, "raw": raw, "raw_sha256": sha, "raw_length": length, "ts_us": ts_us}  # fmt: skip

    def _unaccounted(self, framer) -> int:
        """Bytes fed to ``framer`` that are in no frame and no flushed error region."""
        return framer.fed - framer.frame_bytes - framer.error_bytes

    def _internal_error(self, framer, exc: Exception, ts_us: int) -> None:
        self._internal_errors += 1
        lost = self._unaccounted(framer)
        framer.abandon()
        framer.error_bytes += lost
        if lost > 0 or self.EMPTY_INTERNAL_ERROR_ROWS:
            self._errors.append(self._error_row(framer.direction, framer.base - lost, lost, "internal_error",
                                                f"{type(exc).__name__}: {exc}", None, None, ts_us))  # fmt: skip


def decode_both(decoder_cls, to_server: bytes = b"", to_client: bytes = b"", connection_id: str = "c", **options):
    """Decode two whole direction streams at once: ``(frames, errors, facts)`` (for tests and tools)."""
    dec = decoder_cls(connection_id, **options)
    if to_server:
        dec.data(TO_SERVER, 0, 0, to_server)
    if to_client:
        dec.data(TO_CLIENT, 0, 0, to_client)
    dec.close()
    return dec.drain_frames(), dec.drain_errors(), dec.connection_facts()
