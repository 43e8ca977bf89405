"""AMQP 1.0's compiled path: flows, dispositions and one-transfer messages from the walk as columns, every other
frame by the reference (issue 32 for 1.0).

With ``decode.compiled`` the framing loop of a direction in the AMQP layer hands each buffer of ``MIN_BYTES`` or
more to ``run`` (once both directions are past SASL, a direction's held segments at once: ``ahead``):
``hot_kernel.walk`` cuts its frames and reads transfer, disposition and flow performatives into integer columns,
``hot_kernel.bodies`` hashes the body of each transfer that is a whole message (more and aborted not true), and
``hot_json.render`` writes every such frame's ``arguments_json`` and each message's ``properties_json`` as the
reference's ``to_json`` would (or says it cannot: floats, text past ASCII, lists, repeated sections, ...). A hot
row needs nothing of the connection's state but the message numbers: a run of them becomes one ``Hot10Rows``
(the transfers' ``message_seq`` from the direction's ``MessageTracker`` counters, Python per link and run). Every
other frame goes to ``Amqp10StreamDecoder.on_frame`` in its place, Python per frame as before: a performative the
walk does not read, a transfer of a message over several transfers (and, after one the reference opened, the next
transfer on its link: ``_continued``), a transfer with sections the renderer leaves, a body prefix to keep. After a
frame that is neither read nor a transfer the walk stops (an ``open`` changes the frame limit the walk cut with, a
protocol header the layer), and the framing loop walks again from there. A frame the walk does not cut (a protocol
header, one cut short, a header the framer rejects) ends the walk, and the framing loop judges it.

The decoder keeps a run's rows as one ``Hot10Rows`` among its row dicts (``Ordered10`` when both directions were
decoded ahead); a drain hands them out as a ``Frame10Batch`` (``drain_frame_parts``), which becomes the frames
struct column by column with the dict rows, in wire order, the JSON columns from the rendered bytes, and is
redacted like them. ``tests/v1_0/test_hotpath.py`` requires the same rows with the path on and off, on the 1.0
captures, generated loads cut into pieces, messages with every section and value type, and mutations;
``tests/v0_9_1/test_hotpath.py`` does the same through the stage-2 batch function for every capture the tests keep.
"""

from __future__ import annotations

import bisect
import threading
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.v1_0.composites import FIELD_NAMES, NAMES, RCV_SETTLE_MODE, ROLE, SYMBOL_OF
from amqplens.decode.v1_0.rows import FRAME_KEYS_1_0

# buffers smaller than this stay on the Python path: a call of ``run`` costs 27-45 us whatever it holds (the walk,
# bodies and render calls, the hot run's arrays), the reference about 10 us a frame, and a live connection's segments
# are mostly one small frame each (the 1.0 load capture's: 17,071 of 18,302 calls under 256 bytes, 1.0-1.1 hot
# frames each). The 60 MB slice of that capture decoded in 2.16-2.23 CPU s with 8, 1.69-1.75 s with 256.
MIN_BYTES = 256
ROWS = 4096  # the walk's record rows per call


def load_kernel():
    """``hot_kernel`` (numba), or None where numba does not import."""
    try:
        from amqplens.decode.v1_0 import hot_json, hot_kernel  # noqa: F401
    except ImportError:
        return None
    return hot_kernel


class Hot10Rows:
    """A run of hot frames of one direction (flows, dispositions, one-transfer messages), as the walk read them:
    their record rows, offsets and times, the rendered JSON (``hot_json``), and for transfers the message number,
    delivery tag and body."""

    __slots__ = ("connection_id", "direction", "rec", "offsets", "ts", "args", "args_off", "props", "props_off",
                 "props_set", "seq", "tags", "tags_off", "body_size", "digest")

    def __init__(self, connection_id: str, direction: str, rec: np.ndarray, offsets: np.ndarray, ts: np.ndarray,
                 text: tuple, body: tuple) -> None:
        self.connection_id, self.direction, self.rec, self.offsets, self.ts = connection_id, direction, rec, offsets, ts
        self.args, self.args_off, self.props, self.props_off, self.props_set = text
        self.seq, self.tags, self.tags_off, self.body_size, self.digest = body

    def __len__(self) -> int:
        return len(self.rec)


_LOCAL = threading.local()  # the walk's record rows and the render buffers, one set a thread (not a decoder: 1 MiB each)


class _Rendered:
    """One walk's rendered text (``hot_json.render``): buffers reused a process, grown as a render needs."""

    def __init__(self) -> None:
        self.args = np.empty(1 << 16, np.uint8)
        self.props = np.empty(1 << 18, np.uint8)

    def render(self, arr: np.ndarray, rec: np.ndarray, whole: np.ndarray) -> tuple:
        from amqplens.decode.v1_0 import hot_json as hj
        from amqplens.decode.v1_0 import hot_kernel as hk

        n = len(rec)
        args_off, props_off = np.empty(n + 1, np.int64), np.empty(n + 1, np.int64)
        props_set = np.empty(n, np.int64)
        while True:
            o, q = hj.render(arr, rec, hk.PLAN, _ARG_NAMES[0], _ARG_NAMES[1], _SECTION_NAMES[0], _SECTION_NAMES[1],
                             _N_HEADER, _N_PROPS, whole, self.args, args_off, self.props, props_off, props_set)
            if o <= len(self.args) and q <= len(self.props):
                return args_off, props_off, props_set
            if o > len(self.args):
                self.args = np.empty(2 * o, np.uint8)
            if q > len(self.props):
                self.props = np.empty(2 * q, np.uint8)


def _buffers(hk) -> tuple[np.ndarray, _Rendered]:
    buffers = getattr(_LOCAL, "buffers", None)
    if buffers is None:
        buffers = _LOCAL.buffers = (np.empty((ROWS, hk.N_REC), np.int64), _Rendered())
    return buffers


def run(dec, framer, buf: bytes, mv: memoryview, pos: int, n: int) -> int:
    """Decode from ``pos`` what the walk cuts of ``buf[pos:n]``; returns where the framing loop goes on."""
    hk = dec.hot_kernel
    records, rendered = _buffers(hk)
    arr = np.frombuffer(buf, np.uint8)
    count, end = hk.walk(arr, pos, n, dec.frame_limit(framer.direction), hk.PLAN, records, True)
    if not count:
        return pos
    rec = records[:count]
    code = rec[:, hk.R_CODE]
    hot = rec[:, hk.R_HOT] == 1
    transfer = hot & (code == hk.TRANSFER)
    tracker = dec._messages[framer.direction]
    if transfer.any() and not tracker.body_prefix_bytes:  # a body prefix is the reference's to keep
        size, digest = hk.bodies(arr, rec)  # one-transfer messages (more and aborted not true): their bodies
        whole = (transfer & (size >= 0) & (rec[:, hk.F_DELIVERY_ID] >= 0)).astype(np.int64)
    else:
        size, digest, whole = None, None, np.zeros(count, np.int64)
    text = rendered.render(arr, rec, whole)  # whole: 0 where the sections are the reference's
    links = (rec[:, hk.R_CHANNEL] << 32) | np.maximum(rec[:, hk.F_HANDLE], 0)
    hot &= ~transfer | (whole == 1)
    cold = np.flatnonzero(~hot).tolist()
    # a transfer on a link with a message open is that message's continuation, the tracker's (MessageTracker): the
    # first on each link open now, and after each transfer the reference decodes, the next on a link it left open
    _continued(tracker, links, code, hot, cold, 0)
    mark_at, mark_ts = framer.marks.live()  # a frame's time is its first byte's segment's (``streaming.Marks``)
    run_ = _Run(dec, framer, arr, rec, (rendered, *text), size, digest, links, mark_at, mark_ts)
    done = k = 0
    while k < len(cold):
        i = cold[k]
        if i > done:
            run_.hot(done, i)
        at, length = int(rec[i, hk.R_POS]), int(rec[i, hk.R_SIZE])
        off = framer.base + at
        dec.on_frame(framer, off, framer._ts(off), int(rec[i, hk.R_TYPE]), int(rec[i, hk.R_CHANNEL]), mv[at:at + length],
                     int(rec[i, hk.R_DOFF]))
        framer.frame_bytes += length
        done = i + 1
        k += 1
        if code[i] == hk.TRANSFER and tracker._open:
            _continued(tracker, links, code, hot, cold, done)
    if done < count:
        run_.hot(done, count)
    return int(end)


def _continued(tracker, links: np.ndarray, code: np.ndarray, hot: np.ndarray, cold: list[int], start: int) -> None:
    """The first transfer from ``start`` on each link with a message open in ``tracker`` taken off the hot rows and
    put in its place among the ``cold`` ones (Python per open link: a message over several transfers)."""
    from amqplens.decode.v1_0 import hot_kernel as hk

    for channel, handle in tracker._open:
        later = np.flatnonzero((code[start:] == hk.TRANSFER) & (links[start:] == (channel << 32) | max(handle, 0)))
        if len(later) and hot[start + later[0]]:
            hot[start + later[0]] = False
            bisect.insort(cold, int(start + later[0]))


class _Run:
    """A walk's rows and what was rendered of them, handed to the decoder a run of hot rows at a time."""

    def __init__(self, dec, framer, arr, rec, text, size, digest, links, mark_at, mark_ts) -> None:
        self.dec, self.framer, self.arr, self.rec, self.text = dec, framer, arr, rec, text
        self.size, self.digest, self.links, self.mark_at, self.mark_ts = size, digest, links, mark_at, mark_ts

    def hot(self, a: int, b: int) -> None:
        """Rows ``a:b`` (all hot) into the decoder's output, their times from the framer's marks (``FramerCore._ts``)."""
        from amqplens.decode.v1_0 import hot_kernel as hk

        dec, framer = self.dec, self.framer
        rec = self.rec[a:b].copy()
        offsets = framer.base + rec[:, hk.R_POS]
        if len(self.mark_at):
            ts = self.mark_ts[np.maximum(np.searchsorted(self.mark_at, offsets, "right") - 1, 0)]
            framer.marks.spend(int(offsets[-1]))  # the marks before the run's last frame, spent as the framing loop spends them
        else:
            ts = np.zeros(len(rec), np.int64)
        facts = dec._facts.facts
        if facts["dialect_source"] is None:
            facts["dialect_source"] = "framing"
        out, args_off, props_off, props_set = self.text
        text = (out.args[args_off[a]:args_off[b]].copy(), args_off[a:b + 1] - args_off[a],
                out.props[props_off[a]:props_off[b]].copy(), props_off[a:b + 1] - props_off[a], props_set[a:b].copy())
        dec._frames.append(Hot10Rows(dec.connection_id, framer.direction, rec, offsets, ts, text, self._body(a, b, rec)))
        dec._frame_counts[framer.direction] += len(rec)
        framer.frame_bytes += int(rec[:, hk.R_SIZE].sum())

    def _body(self, a: int, b: int, rec: np.ndarray) -> tuple:
        """The transfers' message numbers (the tracker's, per link), delivery tags and bodies; -1 / empty elsewhere."""
        from amqplens.decode.v1_0 import hot_kernel as hk

        n = len(rec)
        seq = np.full(n, -1, np.int64)
        rows = np.flatnonzero(rec[:, hk.R_CODE] == hk.TRANSFER)
        if not len(rows):
            return seq, np.zeros(0, np.uint8), np.zeros(n + 1, np.int64), seq, None
        tracker = self.dec._messages[self.framer.direction]
        keys, inverse, counts = np.unique(self.links[a:b][rows], return_inverse=True, return_counts=True)
        first = np.zeros(len(rows), np.int64)
        order = np.argsort(inverse, kind="stable")
        first[order] = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)  # rank within its link
        base = np.empty(len(keys), np.int64)
        for k, (key, m) in enumerate(zip(keys.tolist(), counts.tolist())):  # Python per link, not per message
            link = (key >> 32, key & 0xFFFFFFFF)
            base[k] = tracker._next_seq.get(link, 0)
            tracker._next_seq[link] = int(base[k]) + m
        tracker.completed += len(rows)
        seq[rows] = base[inverse] + first
        tag_at, tag_len = rec[:, hk.F_TAG_AT], np.maximum(rec[:, hk.F_TAG_LEN], 0)
        tags_off = np.zeros(n + 1, np.int64)
        np.cumsum(tag_len, out=tags_off[1:])
        starts = np.repeat(tag_at - tags_off[:-1], tag_len)
        tags = self.arr[starts + np.arange(tags_off[-1])] if tags_off[-1] else np.zeros(0, np.uint8)
        size = np.full(n, -1, np.int64)
        size[rows] = self.size[a:b][rows]
        digest = self.digest[a:b].copy()
        return seq, tags, tags_off, size, digest


class Ordered10:
    """Rows of both directions decoded ahead (``ahead``): ``items`` (row dicts and ``Hot10Rows``, each direction's in
    its order) and ``order``, the reference's order of their rows (indices into the items' rows one after another)."""

    __slots__ = ("items", "order")

    def __init__(self, items: list, order: np.ndarray) -> None:
        self.items, self.order = items, order

    def __len__(self) -> int:
        return len(self.order)


def _rows(items: list) -> int:
    return sum(len(i) if isinstance(i, (Hot10Rows, Ordered10)) else 1 for i in items)


def _dicts(items: list):
    for item in items:
        if isinstance(item, Ordered10):
            yield from _dicts(item.items)
        elif not isinstance(item, Hot10Rows):
            yield item


def _flat(items: list, dicts: list, hots: list, counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``items`` in order: whether it is a dict, and its index among the dicts or among the hot runs'
    rows (the dicts and runs appended to ``dicts`` and ``hots``; ``counts``: how many of each so far)."""
    kinds: list[np.ndarray] = []
    index: list[np.ndarray] = []
    loose: list[int] = []  # the dicts' indices since the last array

    def flush() -> None:
        if loose:
            kinds.append(np.ones(len(loose), bool))
            index.append(np.array(loose, np.int64))
            loose.clear()

    for item in items:
        if isinstance(item, Hot10Rows):
            flush()
            kinds.append(np.zeros(len(item), bool))
            index.append(np.arange(counts[1], counts[1] + len(item)))
            counts[1] += len(item)
            hots.append(item)
        elif isinstance(item, Ordered10):
            flush()
            k, i = _flat(item.items, dicts, hots, counts)
            kinds.append(k[item.order])
            index.append(i[item.order])
        else:
            loose.append(counts[0])
            counts[0] += 1
            dicts.append(item)
    flush()
    if not kinds:
        return np.zeros(0, bool), np.zeros(0, np.int64)
    return np.concatenate(kinds), np.concatenate(index)


class Frame10Batch:
    """Frame rows in wire order: row dicts (the reference's), ``Hot10Rows`` and ``Ordered10``, of one or more
    connections."""

    __slots__ = ("items", "redactor")

    def __init__(self, items: list) -> None:
        self.items = items
        self.redactor = None

    def __len__(self) -> int:
        return _rows(self.items)

    @classmethod
    def combine(cls, parts: list) -> "Frame10Batch":
        """Neighbouring parts (``Frame10Batch``es and lists of row dicts) as one batch, in their order."""
        items: list = []
        redactor = None
        for part in parts:
            if isinstance(part, Frame10Batch):
                items += part.items
                redactor = redactor or part.redactor
            else:
                items += part
        out = cls(items)
        out.redactor = redactor
        return out

    def redact(self, redactor) -> None:
        """``HeaderRedactor`` on every row: the dicts now, the hot rows' JSON columns when built."""
        for item in _dicts(self.items):
            redactor.row(item)
        self.redactor = redactor

    def _split(self) -> tuple[list[dict], list[Hot10Rows], np.ndarray]:
        """The dict rows, the hot runs, and the wire order as indices into [dicts..., hot rows...]."""
        dicts: list[dict] = []
        hots: list[Hot10Rows] = []
        is_dict, index = _flat(self.items, dicts, hots, [0, 0])
        return dicts, hots, np.where(is_dict, index, len(dicts) + index)

    def to_struct(self, typ: pa.StructType, dict_rows) -> pa.Array:
        """The rows as one ``typ`` struct array, in wire order (``dict_rows(rows, typ)``: the dicts' conversion)."""
        dicts, hots, order = self._split()
        parts = []
        if dicts:
            parts.append(dict_rows(dicts, typ))
        if hots:
            cols = columns(hots, self.redactor)
            n = sum(len(h) for h in hots)
            parts.append(pa.StructArray.from_arrays(
                [_typed(cols.get(f.name), f.type, n) for f in typ], fields=list(typ)))
        whole = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        return whole if len(order) == len(whole) and (order == np.arange(len(order))).all() else whole.take(pa.array(order))

    def to_rows(self) -> list[dict]:
        """The rows as the reference decoder's dicts (every ``FRAME_KEYS_1_0`` key), in wire order."""
        dicts, hots, order = self._split()
        rows = list(dicts)
        if hots:
            cols = columns(hots, self.redactor)
            lists = {name: a.to_pylist() for name, a in cols.items()}
            n = sum(len(h) for h in hots)
            rows += [{key: (lists[key][i] if key in lists else None) for key in FRAME_KEYS_1_0} for i in range(n)]
        return [rows[i] for i in order.tolist()]


def _typed(values, typ: pa.DataType, n: int) -> pa.Array:
    if values is None:
        return pa.nulls(n, typ)
    return values if values.type == typ else values.cast(typ)


def _labels(values: list, codes: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """``values[codes[i]]`` as strings, null where ``null``."""
    taken = pa.array(values, pa.string()).take(pa.array(codes, pa.int64()))
    return taken if null is None or not null.any() else pc.if_else(pa.array(null), pa.scalar(None, pa.string()), taken)


def _text_array(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None, typ=pa.string()) -> pa.Array:
    """Strings (or binaries) whose bytes are ``data[offsets[i]:offsets[i + 1]]``, null where ``valid`` is False."""
    n = len(offsets) - 1
    mask, nulls = None, 0
    if valid is not None and not valid.all():
        mask, nulls = pa.array(valid).buffers()[1], int(n - valid.sum())  # the validity bits
    return pa.Array.from_buffers(typ, n, [mask, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls)


def _joined(hots: list[Hot10Rows], data: str, offsets: str) -> tuple[np.ndarray, np.ndarray]:
    """The runs' ``data`` bytes one after the other, and their ``offsets`` rebased onto them."""
    datas = [getattr(h, data) for h in hots]
    starts = np.cumsum([0] + [len(d) for d in datas])
    offs = [getattr(h, offsets)[:-1] + starts[k] for k, h in enumerate(hots)]
    return np.concatenate(datas), np.concatenate([*offs, starts[-1:]])


def _int_column(values: np.ndarray) -> pa.Array | None:
    valid = values >= 0
    return pa.array(values, pa.int64(), mask=~valid) if valid.any() else None


def columns(hots: list[Hot10Rows], redactor=None) -> dict[str, pa.Array]:
    """The frames columns of the hot runs, concatenated (the reference's values: ``rows.promote``, ``to_json``, the
    message tracker's)."""
    from amqplens.decode.v1_0 import hot_kernel as hk

    rec = np.concatenate([h.rec for h in hots])
    n = len(rec)
    sizes = np.array([len(h) for h in hots], np.int64)
    part = np.repeat(np.arange(len(hots)), sizes)
    code = rec[:, hk.R_CODE]
    cols: dict[str, pa.Array] = {
        "connection_id": _labels([h.connection_id for h in hots], part),
        "direction": _labels([h.direction for h in hots], part),
        "stream_offset": pa.array(np.concatenate([h.offsets for h in hots])),
        "ts_us": pa.array(np.concatenate([h.ts for h in hots])),
        "dialect": pa.repeat(pa.scalar("1.0"), n),
        "frame_type": pa.repeat(pa.scalar("amqp"), n),
        "channel": pa.array(rec[:, hk.R_CHANNEL].astype(np.int32)),
        "size": pa.array(rec[:, hk.R_SIZE]),
        "performative": _labels(["flow", "transfer", "disposition"], code - hk.FLOW),
        "descriptor": pa.array(code),
    }
    for column, name in _INTS.items():
        values = _int_column(rec[:, column])
        if values is not None:
            cols[name] = values
    for column, name in _BOOLS.items():
        values = rec[:, column]
        valid = values >= 0
        if valid.any():
            cols[name] = pa.array(values == 1, pa.bool_(), mask=~valid)
    role = rec[:, hk.F_ROLE]
    if (role >= 0).any():
        roles = cast("dict[bool, str]", ROLE)
        cols["role"] = _labels([roles[False], roles[True]], np.maximum(role, 0), role < 0)
    mode = rec[:, hk.F_RCV_SETTLE]
    if (mode >= 0).any():
        modes = cast("dict[int, str]", RCV_SETTLE_MODE)
        cols["rcv_settle_mode"] = _labels([modes[0], modes[1]], np.maximum(mode, 0), mode < 0)
    state = rec[:, hk.F_STATE]
    if (state >= 0).any():
        cols["state"] = _labels(["accepted", "released"], (state == hk.RELEASED).astype(np.int64), state < 0)
    transfer = code == hk.TRANSFER
    if transfer.any():
        seq = np.concatenate([h.seq for h in hots])
        cols["message_seq"] = _int_column(seq)
        cols["body_size"] = _int_column(np.concatenate([h.body_size for h in hots]))
        digest = np.concatenate([h.digest if h.digest is not None else np.zeros((len(h), 32), np.uint8) for h in hots])
        hexed = _HEX[digest].reshape(n, 64)  # two hex digits a byte
        cols["body_sha256"] = _text_array(hexed.reshape(-1), np.arange(0, 64 * n + 1, 64), transfer)
        tags, tags_off = _joined(hots, "tags", "tags_off")
        cols["delivery_tag_bin"] = _text_array(tags, tags_off, rec[:, hk.F_TAG_AT] >= 0, pa.binary())
        props, props_off = _joined(hots, "props", "props_off")
        cols["properties_json"] = _text_array(props, props_off, np.concatenate([h.props_set for h in hots]) == 1)
    args, args_off = _joined(hots, "args", "args_off")
    text = {"arguments_json": _text_array(args, args_off, None)}
    if "properties_json" in cols:
        text["properties_json"] = cols["properties_json"]
    if redactor is not None:
        for name, column in text.items():
            hit = np.flatnonzero(redactor.candidates(column))
            if len(hit):
                values = column.to_pylist()
                for i in hit.tolist():
                    values[i] = redactor.text(values[i])
                text[name] = pa.array(values, pa.string())
    cols.update(text)
    return cols


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)[np.array([[b >> 4, b & 15] for b in range(256)])]


def _promoted():
    from amqplens.decode.v1_0 import hot_kernel as hk

    ints = {hk.F_NEXT_IN: "next_incoming_id", hk.F_IN_WINDOW: "incoming_window", hk.F_NEXT_OUT: "next_outgoing_id",
            hk.F_OUT_WINDOW: "outgoing_window", hk.F_HANDLE: "handle", hk.F_COUNT: "delivery_count",
            hk.F_CREDIT: "link_credit", hk.F_AVAILABLE: "available", hk.F_FIRST: "first", hk.F_LAST: "last",
            hk.F_DELIVERY_ID: "delivery_id", hk.F_FORMAT: "message_format"}
    bools = {hk.F_DRAIN: "drain", hk.F_ECHO: "echo", hk.F_SETTLED: "settled", hk.F_MORE: "more", hk.F_ABORTED: "aborted"}
    return ints, bools


def _names(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts as one byte array and their offsets (``hot_json``'s names)."""
    raw = [t.encode() for t in texts]
    return np.frombuffer(b"".join(raw) or b"\0", np.uint8), np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)


def _tables():
    from amqplens.decode.v1_0 import hot_kernel as hk

    fields = []
    for code in (hk.FLOW, hk.TRANSFER, hk.DISPOSITION):
        fields += [*FIELD_NAMES[code], *[""] * hk.MAX_FIELDS][:hk.MAX_FIELDS]
    states = ['{"descriptor":"%s","value":{}}' % SYMBOL_OF[c] for c in (hk.ACCEPTED, hk.RELEASED)]
    # messages.MessageTracker's section keys (codes 0x70-0x78), then the header's and the properties' field names
    sections = [NAMES[c].replace("-", "_") for c in range(0x70, 0x79)] + [*FIELD_NAMES[0x70], *FIELD_NAMES[0x73]]
    return _names(fields + states), _names(sections), len(FIELD_NAMES[0x70]), len(FIELD_NAMES[0x73])


try:
    _INTS, _BOOLS = _promoted()
    _ARG_NAMES, _SECTION_NAMES, _N_HEADER, _N_PROPS = _tables()
except ImportError:  # no numba: the path is off and these are never read
    _INTS, _BOOLS = {}, {}

