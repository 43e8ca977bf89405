"""The compiled hot path of the 0-9-1 family decoder, with the Python decoder as its reference.

Under load almost every frame of a 0-9-1 connection is one of a few: basic.publish,
deliver, ack, nack, reject, a content header, a body frame, a heartbeat. For those the
framing loop hands a whole buffer to ``hot_kernel.walk`` (numba), which reads their
columns straight into arrays; what the walk cannot prove well formed, and every other
frame, goes to the reference decoder (``Amqp091StreamDecoder.on_frame``) as before.
The message state (message_seq, body hashes, content errors) is ``hot_content.ArrayContent``'s
arrays: a run of hot frames goes through it in one numba call (``content_kernel.content_pass``),
the reference decoder's frames through ``ContentTracker``'s interface on the same state, in wire
order, so the rows are the same either way; ``tests/v0_9_1/test_hotpath.py`` checks that on every
fixture, the fuzz corpus and mutated streams.

Hot frames leave the decoder as ``HotRows``: Arrow columns of a run of frames, in
their place among the plain row dicts (``drain_frame_parts``). numba is optional:
``available()`` says whether it imports, ``compiled_enabled(choice)`` turns the
``decode.compiled`` setting (auto | on | off) into a yes or no. Compiled functions are
cached on disk (``cache_dir()``) and ``python -m amqplens.decode.v0_9_1.warm`` fills the
cache at install time, so no task pays the compile.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import tempfile
import warnings
import weakref
from typing import cast

import numpy as np
import pyarrow as pa

from amqplens.decode.redaction import ROW_COLUMNS
from amqplens.decode.v0_9_1 import primitives as p
from amqplens.decode.v0_9_1.frames import CONNECTION_CLASS
from amqplens.decode.v0_9_1.rows import _TEXT_COLUMNS, FRAME_KEYS, PROMOTED, to_json

HOT_METHODS = frozenset({("basic", "publish"), ("basic", "deliver"), ("basic", "ack"), ("basic", "nack"), ("basic", "reject")})
CONTENT_CLASS = "basic"
MIN_BYTES = 256  # below this a call into the kernel costs more than the Python loop it saves
_KIND = {"method": 1, "header": 2, "body": 3, "heartbeat": 4}  # hot_kernel.K_*
_OPS = {p.read_octet: 1, p.read_short: 2, p.read_long: 3, p.read_longlong: 4, p.read_shortstr: 5}  # hot_kernel.OP_*
OP_BIT, OP_TABLE, OP_FLAG = 6, 7, 8
MAX_KEY_BYTES = 512  # the keys of one plan in its JSON (hot_kernel.JSON_PER_FRAME leaves room for values)
CHOICES = ("auto", "on", "off")

_kernel = None  # hot_kernel.walk once imported; False when numba is missing


def cache_dir() -> str:
    """Where numba keeps the compiled functions: ``NUMBA_CACHE_DIR`` when set, else beside the interpreter
    (``<prefix>/var/cache/amqplens-numba``, which the install step warms and every local executor shares), else
    the user's cache folder."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return given
    for root in (pathlib.Path(sys.prefix) / "var" / "cache", pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")):
        folder = root / "amqplens-numba"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return str(folder)
    return os.path.join(tempfile.gettempdir(), "amqplens-numba")


def load_compiled(load):
    """``load()``, an import of a numba module, with numba's disk cache in ``cache_dir()``; False when numba does not
    import (the caller then stays on its Python path)."""
    os.environ.setdefault("NUMBA_CACHE_DIR", cache_dir())
    try:
        return load()
    except ImportError:
        return False


_modules: dict = {}


def compiled_module(name: str):
    """The numba module ``name`` imported once a process through ``load_compiled`` (the decoder's disk cache), or
    None when numba does not import (the caller then stays on its Python path)."""
    module = _modules.get(name)
    if module is None:
        module = _modules[name] = load_compiled(lambda: importlib.import_module(name))
    return module or None


def run_kernel():
    """The TCP reassembler's compiled runs (``amqplens.decode.tcp.run_kernel``), or None without numba."""
    return compiled_module("amqplens.decode.tcp.run_kernel")


def _walk():
    from amqplens.decode.v0_9_1.hot_kernel import walk
    from amqplens.decode.v0_9_1 import content_kernel  # noqa: F401  (ArrayContent's, loaded with the walk)

    return walk


def load_kernel():
    """``hot_kernel.walk``, or None when numba does not import (the decoder then stays on the Python path)."""
    global _kernel
    if _kernel is None:
        _kernel = load_compiled(_walk)
    return _kernel or None


def array_content():
    """The compiled path's message state class (``hot_content.ArrayContent``); only once ``load_kernel`` loaded numba."""
    from amqplens.decode.v0_9_1.hot_content import ArrayContent

    return ArrayContent


def available() -> bool:
    return load_kernel() is not None


def compiled_enabled(choice: str) -> bool:
    """``decode.compiled``: on when numba imports (auto, on), never for off. A missing numba degrades, never fails."""
    if choice not in CHOICES:
        raise ValueError(f"decode.compiled must be one of {CHOICES}, not {choice!r}")
    if choice == "off":
        return False
    if not available() and choice == "on":
        warnings.warn("decode.compiled is on but numba does not import: the 0-9-1 decoder runs its Python path", stacklevel=2)
    return available()


class HotTables:
    """One dialect's hot methods and content properties as the kernel's arrays (built once per DialectTables)."""

    def __init__(self, tables) -> None:
        by_name = {name: cid for cid, name in tables.classes.items()}
        self.content_class = by_name.get(CONTENT_CLASS, -1)
        self.class_name = tables.classes.get(self.content_class)
        kinds = np.full(256, -1, np.int64)
        for ftype, name in tables.frame_types.items():
            kinds[ftype] = _KIND.get(name, 0)
        # the kinds' and hot methods' names as Arrow arrays a column takes its values from by code (``arrays``): a
        # numpy array of Python strings converted cost about a microsecond a row (2.5% of the 2 GB ingest's samples)
        self.kind_names = pa.array([None, "method", "header", "body", "heartbeat"], pa.string())
        self.keys: bytearray | np.ndarray = bytearray()  # the plans' JSON keys; the kernel's uint8 array once built
        self.int_columns: list[str] = []
        self.bool_columns: list[str] = []
        self.text_columns: list[str] = []
        plans: list[list[list[int]]]
        plans, names, content = [], [None], []
        methods = np.full(256, -1, np.int64)
        for key, meta in sorted(tables.methods.items()):
            if (meta.class_name, meta.method_name) not in HOT_METHODS or key >> 16 != self.content_class or (key & 0xFFFF) > 255:
                continue
            fields = self._method_fields(tables.plans[key])
            if fields is None:
                continue
            methods[key & 0xFFFF] = len(plans)
            plans.append(fields)
            names.append(meta.method_name)
            content.append(bool(meta.content))
        self.method_names = pa.array(names, pa.string())  # by hot method + 1 (0: not a method)
        self.class_names = pa.array([None, self.class_name], pa.string())  # by whether a frame has a class
        self.has_content = np.array(content or [False], np.bool_)
        width = max([len(f) for f in plans] + [1])
        self.plan = np.zeros((max(len(plans), 1), width, 5), np.int64)
        for h, fields in enumerate(plans):
            self.plan[h, : len(fields)] = fields
        props = self._property_fields(tables.property_plans.get(self.content_class, ()), tables)
        self.props = np.array(props or [[0] * 5], np.int64)
        key_room = max([f[-1][4] - f[0][3] for f in plans if f] + [sum(f[4] - f[3] for f in props) + 2 * len(props) + 6 * len(props) + 2])
        self.meta = np.concatenate([kinds, methods, [CONNECTION_CLASS, self.content_class, len(props), key_room + 8],
                                    [len(f) for f in plans]]).astype(np.int64)  # fmt: skip (hot_kernel.M_*)
        self.keys = np.frombuffer(bytes(self.keys) or b"\0", np.uint8)

    def _key(self, name: str, prefix: str) -> tuple[int, int]:
        start = len(self.keys)
        self.keys += (prefix + to_json(name) + ":").encode()
        return start, len(self.keys)

    def _slot(self, name: str, op: int) -> int | None:
        """The promoted column's slot, -1 when not promoted, None when the kernel cannot fill it as the reference would."""
        column = PROMOTED.get(name)
        if column is None:
            return -1
        if (op == 5) != (column in _TEXT_COLUMNS):
            return None  # the reference makes a value of another type null in that column
        if op == 5:
            group, limit = self.text_columns, 4  # hot_kernel.N_STR - S_PROMOTED
        else:
            group, limit = (self.bool_columns, 32) if op == OP_BIT else (self.int_columns, 4)
        if column not in group:
            if len(group) >= limit:
                return None
            group.append(column)
        return group.index(column)

    def _method_fields(self, plan: tuple) -> list | None:
        fields: list[list[int]]
        fields, start = [], len(self.keys)
        for name, reader in plan:
            if reader is None:  # a run of bits sharing one octet
                for i, bit_name in enumerate(name):
                    slot = self._slot(bit_name, OP_BIT)
                    if slot is None:
                        return None
                    fields.append([OP_BIT, i, slot, *self._key(bit_name, "," if fields else "{")])
                continue
            op = _OPS.get(reader)
            slot = None if op is None else self._slot(name, op)
            if slot is None:
                return None
            fields.append([cast(int, op), 0, slot, *self._key(name, "," if fields else "{")])  # slot set: op too
        if len(self.keys) - start > MAX_KEY_BYTES:
            return None
        return fields

    def _property_fields(self, plan: tuple, tables) -> list:
        fields = []
        for name, reader in plan:
            if reader is None:
                op = OP_FLAG
            elif reader == tables.field_tables.read_table:
                op = OP_TABLE
            else:
                op = _OPS.get(reader, 0)  # 0: a property the kernel leaves to the reference
            fields.append([op, 0, -1, *self._key(name, "")])
        return fields


_HOT_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # DialectTables -> its HotTables


def hot_tables(tables) -> HotTables:
    hot = _HOT_TABLES.get(tables)
    if hot is None:
        hot = _HOT_TABLES[tables] = HotTables(tables)
    return hot


class HotBuilder:
    """One direction's hot rows since the last drain: the kernel's arrays, grown as needed, with what the message
    state (``hot_content.ArrayContent``) said for each row (``content_kernel.O_*``: message_seq, completion, error),
    the body hashes and prefixes, the rows' times and their errors."""

    def __init__(self, direction: str, prefix_bytes: int = 0, rows: int = 256, room: int = 1 << 14) -> None:
        from amqplens.decode.v0_9_1 import content_kernel as ck
        from amqplens.decode.v0_9_1 import hot_kernel as k

        self.direction = direction
        self.rows = 0
        self.flushed = 0  # rows already handed to the decoder's output as HotRows
        self.vals = np.empty((rows, k.N_VALS), np.int64)
        self.sdata = np.empty((k.N_STR, room), np.uint8)
        self.soff = np.zeros((k.N_STR, rows + 1), np.int64)
        self.ts = np.empty(rows, np.int64)
        self.out = np.empty((rows, ck.N_OUT), np.int64)
        self.digest = np.empty((rows, 32), np.uint8)
        self.prefixes = np.empty((rows, prefix_bytes), np.uint8)
        self.prefix_bytes = prefix_bytes
        self.errors: dict[int, str] = {}  # row -> its decode_error (a content error)

    def grow(self, rows: int, room: int) -> None:
        """Room for ``rows`` rows and ``room`` string bytes per column (at least doubled)."""
        n = self.rows
        if rows > self.vals.shape[0]:
            cap = max(rows, 2 * self.vals.shape[0])
            soff = np.zeros((self.soff.shape[0], cap + 1), np.int64)
            soff[:, : n + 1] = self.soff[:, : n + 1]
            self.soff = soff
            for name in ("vals", "ts", "out", "digest", "prefixes"):
                old = getattr(self, name)
                new = np.empty((cap, *old.shape[1:]), old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        if room > self.sdata.shape[1]:
            sdata = np.empty((self.sdata.shape[0], max(room, 2 * self.sdata.shape[1])), np.uint8)
            used = int(self.soff[:, n].max())
            sdata[:, :used] = self.sdata[:, :used]
            self.sdata = sdata

    @classmethod
    def merged(cls, builders: list["HotBuilder"]) -> "HotBuilder":
        """One builder holding the rows of ``builders`` (of one dialect and body prefix length) one after the other,
        so that their Arrow columns are built once (``FrameBatch``): a connection's drain holds a few rows."""
        from amqplens.decode.v0_9_1 import hot_kernel as k

        out = cls.__new__(cls)
        out.direction = ""
        out.prefix_bytes = builders[0].prefix_bytes
        rows = [b.rows for b in builders]
        out.rows = out.flushed = total = sum(rows)
        for name in ("vals", "ts", "out", "digest", "prefixes"):
            setattr(out, name, np.concatenate([getattr(b, name)[: b.rows] for b in builders]))
        used = np.array([b.soff[:, b.rows] for b in builders])  # string bytes per builder and column
        out.sdata = np.zeros((k.N_STR, max(int(used.sum(axis=0).max()), 1)), np.uint8)
        out.soff = np.zeros((k.N_STR, total + 1), np.int64)
        row = 0
        at = np.zeros(k.N_STR, np.int64)
        for b, m, u in zip(builders, rows, used):
            out.soff[:, row : row + m + 1] = b.soff[:, : m + 1] + at[:, None]
            for s in range(k.N_STR):
                out.sdata[s, at[s] : at[s] + u[s]] = b.sdata[s, : u[s]]
            at += u
            row += m
        out.errors = {}
        base = 0
        for b, m in zip(builders, rows):
            out.errors.update({base + i: e for i, e in b.errors.items()})
            base += m
        return out

    def arrays(self, hot: HotTables, labels: dict[str, pa.Array]) -> dict[str, pa.Array]:
        """The rows as Arrow columns (FRAME_KEYS names; the others are null); ``labels``: the connection_id, direction
        and dialect columns (``_BuilderEntry.labels``)."""
        from amqplens.decode.v0_9_1 import content_kernel as ck
        from amqplens.decode.v0_9_1 import hot_kernel as k
        from amqplens.decode.v0_9_1.hot_content import hex_column

        m = self.rows
        v = self.vals[:m]
        kinds = v[:, k.V_KIND]
        methods, headers = kinds == k.K_METHOD, kinds == k.K_HEADER
        classed = methods | headers
        seq = self.out[:m, ck.O_SEQ]
        done = self.out[:m, ck.O_DONE] == 1
        offsets, data = hex_column(self.digest[:m], done)
        valid = pa.py_buffer(np.packbits(done, bitorder="little"))
        sha = pa.StringArray.from_buffers(m, pa.py_buffer(offsets), pa.py_buffer(data), valid)
        if self.prefix_bytes:
            lengths = np.where(done, self.out[:m, ck.O_PREFIX], 0)
            starts = np.zeros(m + 1, np.int32)
            np.cumsum(lengths, out=starts[1:])
            body = self.prefixes[:m][np.arange(self.prefix_bytes) < lengths[:, None]]
            prefix = pa.BinaryArray.from_buffers(pa.binary(), m, [valid, pa.py_buffer(starts), pa.py_buffer(body)])
        else:
            prefix = pa.nulls(m, pa.binary())
        if self.errors:
            errors = pa.array([self.errors.get(i) for i in range(m)], pa.string())
        else:
            errors = pa.nulls(m, pa.string())
        cols = {
            "connection_id": labels["connection_id"],
            "direction": labels["direction"],
            "stream_offset": pa.array(v[:, k.V_OFFSET]),
            "ts_us": pa.array(self.ts[:m]),
            "dialect": labels["dialect"],
            "frame_type": hot.kind_names.take(pa.array(kinds)),
            "channel": pa.array(v[:, k.V_CHANNEL]),
            "size": pa.array(v[:, k.V_SIZE]),
            "class_id": pa.array(v[:, k.V_CLASS], mask=~classed),
            "method_id": pa.array(v[:, k.V_METHOD], mask=~methods),
            "class_name": hot.class_names.take(pa.array(classed.view(np.int8))),
            "method_name": hot.method_names.take(pa.array(np.where(methods, v[:, k.V_HOT_METHOD] + 1, 0))),
            "body_size": pa.array(v[:, k.V_BODY_SIZE], mask=~headers),
            "message_seq": pa.array(seq, mask=seq < 0),
            "body_sha256": sha,
            "body_prefix": prefix,
            "decode_error": errors,
        }
        for i, name in enumerate(hot.int_columns):
            cols[name] = pa.array(v[:, k.V_INTS + i], mask=(v[:, k.V_BOOL_SET] >> (32 + i) & 1) == 0)
        for i, name in enumerate(hot.bool_columns):
            cols[name] = pa.array((v[:, k.V_BOOL_VALUE] >> i & 1) == 1, mask=(v[:, k.V_BOOL_SET] >> i & 1) == 0)
        strings = [("arguments_json", k.S_ARGS), ("properties_json", k.S_PROPS)]
        strings += [(name, k.S_PROMOTED + i) for i, name in enumerate(hot.text_columns)]
        for name, s in strings:
            offsets = self.soff[s, : m + 1].astype(np.int32)
            data = self.sdata[s, : offsets[-1]]
            valid = np.packbits((v[:, k.V_STR_SET] >> s & 1).astype(bool), bitorder="little")
            cols[name] = pa.StringArray.from_buffers(m, pa.py_buffer(offsets), pa.py_buffer(data), pa.py_buffer(valid))
        return cols


class HotRows:
    """Rows [start, stop) of a direction's ``HotBuilder``: where they sit among the decoder's row dicts."""

    __slots__ = ("builder", "start", "stop")

    def __init__(self, builder: HotBuilder, start: int, stop: int) -> None:
        self.builder, self.start, self.stop = builder, start, stop

    def __len__(self) -> int:
        return self.stop - self.start


class HotPieces:
    """Two directions' decoder items (``HotRows`` and row dicts) interleaved in wire order, as arrays: piece ``p``
    is rows ``[lo[p], hi[p])`` of ``items[item[p]]`` (counted from that item's first row). ``ahead._interleave``
    makes them; ``FrameBatch`` takes them with array operations (a connection's publishes and acks alternate: a
    piece per frame or two, too many for a Python object each)."""

    __slots__ = ("items", "item", "lo", "hi")

    def __init__(self, items: list, item: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        self.items, self.item, self.lo, self.hi = items, item, lo, hi


class FrameBatch:
    """A decoder's frame rows since the last drain, in wire order: row dicts of the reference and the
    directions' hot rows as columns, with the order that interleaves them."""

    def __init__(self, hot: HotTables, connection_id: str, dialect: str, items: list) -> None:
        self.dicts: list[dict] = []
        # per builder, what its Arrow columns need; they are built when the batch is converted, with its
        # neighbours' (``_groups``)
        self.builders: list[_BuilderEntry] = []
        self._columns: list[tuple[dict, int]] | None = None
        self.sizes = [0]  # rows per source: the dicts, then each builder
        sources: dict[int, int] = {}
        segments: list[list[int]] = []  # [source, start, stop]: source 0 the dicts, i + 1 builder i
        blocks: list[np.ndarray] = []  # the segments so far, and each HotPieces' as one array

        def source(item) -> tuple[int, int]:  # (source, its row of the item's first row)
            if not isinstance(item, HotRows):
                self.dicts.append(item)
                return 0, len(self.dicts) - 1
            src = sources.get(id(item.builder))
            if src is None:
                src = sources[id(item.builder)] = len(self.sizes)
                self.builders.append(_BuilderEntry(item.builder, hot, connection_id, dialect))
                self.sizes.append(item.builder.rows)
            return src, item.start

        for item in items:
            if isinstance(item, HotPieces):
                if segments:
                    blocks.append(np.array(segments, np.int64))
                    segments = []
                src, base = (np.array(x, np.int64) for x in zip(*map(source, item.items)))
                src, base = src[item.item], base[item.item]
                blocks.append(np.stack([src, base + item.lo, base + item.hi], axis=1))
            elif isinstance(item, HotRows):
                segments.append([*source(item), item.stop])
            elif segments and segments[-1][0] == 0:  # a HotPieces' dicts come after segments is emptied
                segments[-1][2] += 1
                self.dicts.append(item)
            else:
                segments.append([0, len(self.dicts), len(self.dicts) + 1])
                self.dicts.append(item)
        self.sizes[0] = len(self.dicts)
        if segments or not blocks:
            blocks.append(np.array(segments, np.int64).reshape(-1, 3))
        self.segments = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)

    def __len__(self) -> int:
        return sum(self.sizes)

    @classmethod
    def combine(cls, parts: list) -> "FrameBatch":
        """Neighbouring parts of a frames batch (``FrameBatch``es and lists of row dicts, of any connections) as one
        batch, in their order: one conversion to Arrow for them all instead of one per connection."""
        out = cls.__new__(cls)
        out.dicts, out.builders, out.sizes, out._columns = [], [], [0], None
        pieces = []  # each part's [source, start, stop] rows, shifted to the combined sources (one array op a part)
        for part in parts:
            if isinstance(part, list):
                if part:
                    pieces.append(np.array([[0, len(out.dicts), len(out.dicts) + len(part)]], np.int64))
                    out.dicts += part
                continue
            seg = part.segments.copy()
            dicts = seg[:, 0] == 0
            seg[dicts, 1:] += len(out.dicts)
            seg[~dicts, 0] += len(out.sizes) - 1
            pieces.append(seg)
            out.dicts += part.dicts
            out.builders += part.builders
            out.sizes += part.sizes[1:]
        out.sizes[0] = len(out.dicts)
        out.segments = np.concatenate(pieces) if pieces else np.empty((0, 3), np.int64)
        return out

    def redact(self, redactor) -> None:
        """``HeaderRedactor`` on every row: the dicts' JSON columns, and the hot rows' (headers tables name anything)."""
        for row in self.dicts:
            redactor.row(row)
        for entry in self.builders:  # their columns are redacted when built (``_groups``)
            entry.redactor = redactor

    @staticmethod
    def _redact_columns(cols: dict, redactor) -> None:
        for name in ROW_COLUMNS:  # the kernel's text is printable ASCII: one C scan for the names finds what may change
            hit = np.flatnonzero(redactor.candidates(cols[name]))
            if not len(hit):
                continue
            values = cols[name].to_pylist()
            redacted = list(values)
            for i in hit:
                redacted[i] = redactor.text(values[i])
            if any(redacted[i] is not values[i] for i in hit):
                cols[name] = pa.array(redacted, pa.string())

    def _groups(self) -> list[tuple[dict, int]]:
        """The builders' Arrow columns, neighbours of one dialect, prefix length and redaction built at once (the
        rows of many short connections' drains in one set of arrays): ``(columns, rows)`` in builder order."""
        if self._columns is None:
            self._columns = []
            i = 0
            while i < len(self.builders):
                first = self.builders[i]
                j = i + 1
                while j < len(self.builders) and self.builders[j].joins(first):
                    j += 1
                members = self.builders[i:j]
                builder = first.builder if j - i == 1 else HotBuilder.merged([m.builder for m in members])
                cols = builder.arrays(first.hot, _BuilderEntry.labels(members))
                if first.redactor is not None:
                    self._redact_columns(cols, first.redactor)
                self._columns.append((cols, builder.rows))
                i = j
        return self._columns

    def _order(self) -> np.ndarray | None:
        """Positions in the concatenation (dicts, then each builder's rows) in wire order; None when already so."""
        seg = self.segments
        lengths = seg[:, 2] - seg[:, 1]
        bases = np.cumsum(self.sizes) - self.sizes
        shift = bases[seg[:, 0]] + seg[:, 1] - (np.cumsum(lengths) - lengths)  # position - place, per segment
        if not shift[lengths > 0].any():  # every row at its own place (an empty segment has none)
            return None
        return np.repeat(shift, lengths) + np.arange(int(lengths.sum()))

    def to_struct(self, typ: pa.StructType, dict_rows) -> pa.Array:
        """The rows as one ``typ`` struct array (the frames contract), in wire order; ``dict_rows(rows, typ)``:
        the caller's conversion of row dicts. Column by column: a column no source fills is one null array, the
        others are concatenated and put in wire order with one ``take`` each (not the whole struct's)."""
        total = len(self)
        order = self._order()
        dicts = dict_rows(self.dicts, typ) if self.dicts else None
        children = []
        nulls: dict[pa.DataType, pa.Array] = {}  # one all-null array a type, shared by the columns no source fills
        for f in typ:
            pieces, filled = [], False
            if dicts is not None:
                child = dicts.field(f.name)
                pieces.append(child)
                filled = child.null_count < len(child)
            for cols, n in self._groups():
                child = cols.get(f.name)
                if child is None:
                    pieces.append(pa.nulls(n, f.type))
                else:
                    pieces.append(child if child.type == f.type else child.cast(f.type))
                    filled = filled or child.null_count < n
            if not filled:
                if f.type not in nulls:
                    nulls[f.type] = pa.nulls(total, f.type)
                children.append(nulls[f.type])
                continue
            whole = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
            children.append(whole if order is None else whole.take(order))
        return pa.StructArray.from_arrays(children, fields=list(typ))

    def to_rows(self) -> list[dict]:
        """The rows as the reference decoder's dicts (every FRAME_KEYS key), in wire order."""
        sources = [self.dicts]
        for cols, n in self._groups():
            lists = {name: a.to_pylist() for name, a in cols.items()}
            rows = [{key: (lists[key][i] if key in lists else None) for key in FRAME_KEYS} for i in range(n)]
            at = 0
            while at < n:  # the group's builders, in order (their sizes add up to n)
                m = self.sizes[len(sources)]
                sources.append(rows[at : at + m])
                at += m
        return [row for src, start, stop in self.segments.tolist() for row in sources[src][start:stop]]


class _BuilderEntry:
    """A ``FrameBatch``'s builder with what its columns need: the hot tables, the connection, the dialect and (once
    ``redact`` ran) the redactor."""

    __slots__ = ("builder", "hot", "connection_id", "dialect", "redactor")

    def __init__(self, builder: HotBuilder, hot: HotTables, connection_id: str, dialect: str) -> None:
        self.builder, self.hot, self.connection_id, self.dialect = builder, hot, connection_id, dialect
        self.redactor = None

    def joins(self, other: "_BuilderEntry") -> bool:
        """Whether the two builders' columns can be built together: the same hot tables, prefix length and
        redaction names."""
        a, b = self.redactor, other.redactor
        return (self.hot is other.hot and self.builder.prefix_bytes == other.builder.prefix_bytes
                and (a is b or (a is not None and b is not None and a.names == b.names)))

    @staticmethod
    def labels(members: list["_BuilderEntry"]) -> dict[str, pa.Array]:
        """The connection_id, direction and dialect columns of the members' rows, one after the other."""
        # each member's value repeated by a take (a copy in C), not an object array converted value by value (4x)
        at = np.repeat(np.arange(len(members)), [m.builder.rows for m in members])

        def column(values: list) -> pa.Array:
            return pa.array(values, pa.string()).take(at)

        return {"connection_id": column([m.connection_id for m in members]),
                "direction": column([m.builder.direction for m in members]),
                "dialect": column([m.dialect for m in members])}


def run(kernel, framer, buf: bytes, mv: memoryview, pos: int, n: int) -> int:
    """Decode from ``pos`` what the kernel walks; returns where the Python loop goes on."""
    owner = framer.owner
    hot = hot_tables(owner.tables)
    builder = owner.hot_builder(framer.direction)
    arr = np.frombuffer(buf, np.uint8)
    first = builder.rows
    while True:
        rec, rows, end, need_rows, need_room = kernel(arr, pos, n, framer.base, owner.frame_limit(), hot.meta, hot.plan, hot.props,
                                                      hot.keys, builder.vals, builder.sdata, builder.soff, first)  # fmt: skip
        if not need_rows:
            break
        builder.grow(need_rows, need_room)
    if not len(rec):
        return pos
    builder.rows = first
    facts = owner._facts.facts
    if facts["dialect_source"] is None:
        facts["dialect_source"] = "framing"
    try:
        _replay(owner, framer, arr, mv, hot, builder, rec, first)
    finally:
        _flush(owner, builder)
    return int(end)


def _flush(owner, builder: HotBuilder) -> None:
    """The rows of ``builder`` processed since its last flush, as one item of the decoder's frame output."""
    if builder.rows > builder.flushed:
        owner._frames.append(HotRows(builder, builder.flushed, builder.rows))
        builder.flushed = builder.rows


def _replay(owner, framer, arr: np.ndarray, mv: memoryview, hot: HotTables, builder: HotBuilder, rec: np.ndarray,
            first: int) -> None:
    """The walk's frames in wire order: runs of hot frames through the message state and their times at once
    (``content_kernel.content_pass``), each frame the kernel left through the reference decoder in its place."""
    from amqplens.decode.v0_9_1 import content_kernel as ck
    from amqplens.decode.v0_9_1 import hot_kernel as k
    from amqplens.decode.v0_9_1.hot_content import error_of

    direction = framer.direction
    content = owner._content[direction]
    marks, base = framer.marks, framer.base
    mark_at, mark_ts = marks.live()
    rec_ts = np.empty(len(rec), np.int64)
    total = len(rec)
    i = 0
    try:
        while i < total:
            j, errors, nbytes, hot_rows = ck.content_pass(rec, i, arr, base, mark_at, mark_ts, builder.vals, hot.has_content,
                                                          hot.content_class, content.st, content.hs, content.tail, content.prefix,
                                                          content.cnt, builder.out, builder.digest, builder.prefixes, builder.ts,
                                                          rec_ts)  # fmt: skip
            if hot_rows:
                owner._frame_counts[direction] += hot_rows
                framer.frame_bytes += nbytes
                builder.rows += hot_rows
                if errors:
                    _content_errors(owner, framer, builder, rec, rec_ts, i, j, error_of)
            if j >= total:
                break
            pos, ftype, channel, size, kind = (int(x) for x in rec[j, : k.R_HOT + 1])
            if kind:  # a hot frame of a channel the state has no room for yet
                content.fit(channel)
                i = j
                continue
            _flush(owner, builder)  # the reference decodes it, in its place among the hot rows
            owner.on_frame(framer, base + pos, int(rec_ts[j]), owner.frame_types[ftype], channel, mv[pos + 7 : pos + 7 + size], size + 8)
            framer.frame_bytes += size + 8
            i = j + 1
    finally:
        last = base + int(rec[min(i, total - 1), k.R_POS])
        marks.spend(last)  # the marks before the last frame's, dropped as _ts drops them


def _content_errors(owner, framer, builder: HotBuilder, rec: np.ndarray, rec_ts: np.ndarray, i: int, j: int, error_of) -> None:
    """The frame errors of the hot records [i, j) whose message state said so, in wire order."""
    from amqplens.decode.v0_9_1 import content_kernel as ck
    from amqplens.decode.v0_9_1 import hot_kernel as k

    for r in range(i, j):
        row = int(rec[r, k.R_ROW])
        code, a, b = (int(x) for x in builder.out[row, ck.O_ERR : ck.O_ERR_B + 1])
        if code:
            error = builder.errors[row] = cast(str, error_of(code, a, b))
            owner._frame_error(framer, {"decode_error": error, "stream_offset": framer.base + int(rec[r, k.R_POS]),
                                        "size": int(rec[r, k.R_SIZE]) + 8, "ts_us": int(rec_ts[r])})  # fmt: skip
