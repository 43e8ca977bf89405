"""The 0-9-1 family's own part of its rows: the arguments promoted to frame columns.

The row shapes every codec shares (keys, byte accounting) and their JSON are in
amqplens/decode/common/rows.py; this module re-exports them for the 0-9-1 codec's modules.
"""

from __future__ import annotations

from amqplens.decode.common.rows import ERROR_KEYS, FRAME_KEYS, FRAME_TEMPLATE, to_json  # noqa: F401  (this package's names)

PROMOTED = {
    "delivery_tag": "delivery_tag",
    "multiple": "multiple",
    "requeue": "requeue",
    "redelivered": "redelivered",
    "exchange": "exchange",
    "routing_key": "routing_key",
    "queue": "queue",
    "consumer_tag": "consumer_tag",
    "prefetch_count": "prefetch_count",
    "prefetch_size": "prefetch_size",
    "global": "global_qos",
    "reply_code": "reply_code",
    "reply_text": "reply_text",
    "active": "active",
    "reason": "reason",
    "mandatory": "mandatory",
    "immediate": "immediate",
    "no_ack": "no_ack",
    "message_count": "message_count",
}
_TEXT_COLUMNS = frozenset({"exchange", "routing_key", "queue", "consumer_tag", "reply_text", "reason"})

def promote(row: dict, args: dict, pairs=None) -> None:
    """Copy the promoted arguments into their columns (text columns always str).

    ``pairs``: the method's (argument, column) pairs, when known (``DialectTables.promoted``).
    """
    for name, column in pairs if pairs is not None else ((n, PROMOTED.get(n)) for n in args):
        if column is None or name not in args:
            continue
        value = args[name]
        if column in _TEXT_COLUMNS and not isinstance(value, str):
            value = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else None
        elif column not in _TEXT_COLUMNS and not isinstance(value, int):
            value = None  # a spec variant with another type under the same name
        row[column] = value
