"""Arrow structs of the contracts, as the decode tasks fill them (pyarrow, imported when called)."""

from __future__ import annotations

from amqplens.contracts.tables import FRAMES, PROTOCOL_COLUMNS, PROTOCOL_FACT_KEYS

# Columns of frames that the job adds itself (the codec rows carry ts_us instead of ts).
FRAME_JOB_COLUMNS = ("frame_id", "capture_id", "capture_date", "ts", "source")


def frame_struct():
    """A codec's frame row: the frames table's columns but those the job adds, plus ts_us."""
    import pyarrow as pa

    fields = [pa.field(c.name, c.arrow_type) for c in FRAMES.columns if c.name not in FRAME_JOB_COLUMNS]
    return pa.struct(fields + [pa.field("ts_us", pa.int64())])


def facts_struct():
    """A codec's protocol facts of a connection, under the codec's key names."""
    import pyarrow as pa

    return pa.struct([pa.field(PROTOCOL_FACT_KEYS.get(c.name, c.name), c.arrow_type) for c in PROTOCOL_COLUMNS])
