"""Packet batches in any of the shapes the pipeline hands around, as Python lists.

The reassembler walks columns with ``zip``, so every column becomes a plain
list once per batch: ``dict[str, list]`` from the split readers is used as is,
Arrow record batches and tables go through ``to_pylist``, and pandas frames
(``mapInPandas``) through ``Series.tolist``. Nothing here imports pandas.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

# The columns of PACKET_SCHEMA the reassembler reads, in the order it zips them.
REASSEMBLY_COLUMNS = (
    "flow_key",
    "ts_us",
    "ip_version",
    "src_ip",
    "src_port",
    "dst_ip",
    "dst_port",
    "seq",
    "ack",
    "tcp_flags",
    "wire_len",
    "payload",
    "payload_truncated",
)


def column_lists(batch: Any, names: tuple[str, ...] = REASSEMBLY_COLUMNS) -> list[list]:
    """The named columns of ``batch`` (mapping, Arrow batch/table or DataFrame) as lists."""
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return [batch.column(name).to_pylist() for name in names]
    return [_as_list(batch[name]) for name in names]


def _as_list(col: Any) -> list:
    if isinstance(col, list):
        return col
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        return col.to_pylist()
    tolist = getattr(col, "tolist", None)  # numpy arrays, pandas Series
    if tolist is not None:
        return tolist()
    return list(col)

