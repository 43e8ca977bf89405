"""Capture readers: pcap/pcapng files in, PACKET_SCHEMA batches of TCP packets out.

    splits = plan_splits(path, split_size)
    for start, end in splits:
        result = read_split(path, capture_id, start, end)
        for columns in result:        # dict[str, list], exactly PACKET_SCHEMA's columns
            ...
        result.stats, result.errors   # SplitStats, list[CaptureErrorRecord]

The union of the packets of all splits equals one pass over the whole file.
"""

from amqplens.decode.capture.records import (
    PACKET_COLUMNS,
    PACKET_SCHEMA,
    CaptureErrorRecord,
    SplitStats,
    flow_key,
)
from amqplens.decode.capture.splits import (
    DEFAULT_SPLIT_SIZE,
    SplitResult,
    plan_splits,
    read_capture,
    read_split,
    sniff_format,
    sniff_head,
)

__all__ = [
    "DEFAULT_SPLIT_SIZE",
    "PACKET_COLUMNS",
    "PACKET_SCHEMA",
    "CaptureErrorRecord",
    "SplitResult",
    "SplitStats",
    "flow_key",
    "plan_splits",
    "read_capture",
    "read_split",
    "sniff_format",
    "sniff_head",
]
