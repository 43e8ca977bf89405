"""The deliveries' message_id, correlation_id, content_type, delivery_mode, priority and redelivered from their
``properties_json``, for the array passes (``array091``, ``array10``): one compiled scan of a batch's distinct texts
(``props_kernel.scan``), not ``json.loads`` per message.

``records.properties_0_9_1`` / ``properties_1_0`` on ``json.loads`` of each text (what ``Delivery.row`` does) are
the reference, and read every text the scan marks (see ``props_kernel``: keys twice, escapes in a key or a wanted
string, a wanted text that is not a string, invalid JSON, ...) and every text when numba is missing.
``tests/lifecycle/test_props.py`` compares the two on generated and mutated texts of both dialects.

Tried, not kept: Arrow's JSON reader (``pyarrow.json.read_json``, newline-delimited, an explicit schema) over the
texts. It refuses a whole batch for one odd value, and pyarrow 26.0.1 crashed the process (a segmentation fault)
on a batch whose first line is ``null``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.lifecycle.records import properties_0_9_1, properties_1_0

TYPES = (pa.string(), pa.string(), pa.string(), pa.int32(), pa.int32(), pa.bool_())
_PARSE = {"0-9-1": properties_0_9_1, "1.0": properties_1_0}
# the scan's fields: names, kinds (0 text, 1 integer, 2 boolean, 3 a section) and output columns (props_kernel.O_*)
_B = {name: np.frombuffer(name.encode(), np.uint8).copy() for name in (
    "message_id", "correlation_id", "content_type", "delivery_mode", "priority", "header", "properties", "durable",
    "first_acquirer", "delivery_count")}
def _scanner():
    from amqplens.decode.v0_9_1.hotpath import compiled_module

    return compiled_module("amqplens.lifecycle.props_kernel")


def columns(values: pa.Array | pa.ChunkedArray, dialect: str) -> list[pa.Array]:
    """The six columns (``TYPES``) of each value (a null or empty text: all null), each distinct text read once."""
    enc = pc.dictionary_encode(values)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    codes = pc.fill_null(enc.indices, -1).to_numpy().astype(np.int64)
    texts = enc.dictionary
    parse = _PARSE.get(dialect, properties_0_9_1)
    infos = _scanned(texts, dialect, parse)
    if infos is None:
        infos = reference(texts.to_pylist(), parse)
    take = pa.array(np.where(codes < 0, len(texts), codes))  # a null: the row after the texts', all null
    return [pa.concat_arrays([col, pa.nulls(1, col.type)]).take(take) for col in infos]


def reference(texts: list, parse: Callable[[dict], tuple]) -> list[pa.Array]:
    """``Delivery.row``'s reading: ``json.loads`` per text."""
    infos = []
    for text in texts:
        info = (None,) * 6
        if text:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                info = parse(parsed)
        infos.append(info)
    return [pa.array([x[k] for x in infos], t) for k, t in enumerate(TYPES)]


def _spans(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> pa.Array:
    """The texts ``data[start:end]`` (null where start is -1)."""
    valid = start >= 0
    lengths = np.where(valid, end - start, 0)
    offsets = np.zeros(len(start) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    picks = np.repeat(start - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    values = pa.LargeStringArray.from_buffers(len(start), pa.py_buffer(offsets), pa.py_buffer(data[picks].tobytes()))
    return pc.if_else(pa.array(valid), values, pa.scalar(None, pa.large_string())).cast(pa.string())


def _ints(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    ok = values >= 0 if valid is None else (values >= 0) & valid
    return pa.array(np.where(ok, values, 0).astype(np.int32), pa.int32(), mask=~ok)


def scan(texts: pa.Array, dialect: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``props_kernel.scan`` of the texts (a string array without nulls): (its output, the texts' bytes); None
    without numba or for a dialect it does not read."""
    kernel = _scanner()
    if kernel is None or dialect not in _PARSE:
        return None
    texts = texts.cast(pa.large_string())
    bufs = texts.buffers()
    offsets = np.frombuffer(bufs[1], np.int64, len(texts) + 1, texts.offset * 8).copy()
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    k = kernel
    if dialect == "1.0":
        out = k.scan(data, offsets, True, (_B["header"], _B["properties"]), np.array([3, 3]), np.array([k.O_HEADER, k.O_T0S]),
                     (_B["durable"], _B["priority"], _B["first_acquirer"], _B["delivery_count"]), np.array([2, 1, 2, 1]),
                     np.array([k.O_B0, k.O_I0, k.O_B1, k.O_I1]),
                     (_B["message_id"], _B["correlation_id"], _B["content_type"]), np.array([0, 0, 0]),
                     np.array([k.O_T0S, k.O_T1S, k.O_T2S]))
    else:
        names = (_B["message_id"], _B["correlation_id"], _B["content_type"], _B["delivery_mode"], _B["priority"])
        out = k.scan(data, offsets, False, names, np.array([0, 0, 0, 1, 1]),
                     np.array([k.O_T0S, k.O_T1S, k.O_T2S, k.O_I0, k.O_I1]), names, np.zeros(5, np.int64),
                     np.zeros(5, np.int64), names, np.zeros(5, np.int64), np.zeros(5, np.int64))
    return out, data


def _scanned(texts: pa.Array, dialect: str, parse: Callable[[dict], tuple]) -> list[pa.Array] | None:
    """The scan's reading of the texts, the reference's for those it marks; None without numba."""
    scanned = scan(texts, dialect) if len(texts) else None
    if scanned is None:
        return None
    out, data = scanned
    k = _scanner()
    if dialect == "1.0":
        header = out[:, k.O_HEADER] == 1
        durable, first = out[:, k.O_B0], out[:, k.O_B1]
        mode = pa.array(np.where(durable == 1, 2, 1).astype(np.int32), pa.int32(), mask=~header | (durable < 0))
        prio = _ints(out[:, k.O_I0], header)
        redelivered = pa.array((first == 0) | (out[:, k.O_I1] > 0), pa.bool_(), mask=~header)
    else:
        mode, prio = _ints(out[:, k.O_I0]), _ints(out[:, k.O_I1])
        redelivered = pa.nulls(len(texts), pa.bool_())
    cols = [_spans(data, out[:, s], out[:, s + 1]) for s in (k.O_T0S, k.O_T1S, k.O_T2S)] + [mode, prio, redelivered]
    marked = np.flatnonzero(out[:, k.O_REF] == 1)
    if len(marked):  # the texts the scan leaves: the reference's reading, put in their places
        ref = reference(texts.take(pa.array(marked)).to_pylist(), parse)
        pick = np.arange(len(texts))
        pick[marked] = len(texts) + np.arange(len(marked))
        cols = [pa.concat_arrays([c.cast(t), r]).take(pa.array(pick)) for c, r, t in zip(cols, ref, TYPES)]
    return [c.cast(t) for c, t in zip(cols, TYPES)]
