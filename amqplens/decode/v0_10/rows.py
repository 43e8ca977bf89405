"""The shapes of the rows the AMQP 0-10 decoder emits, and the promoted fields.

Frame rows have exactly the keys of the 1.0 rows (``v1_0.rows.FRAME_KEYS_1_0``:
the 0-9-1 family's keys plus the 1.0 columns, ``None`` where they do not apply)
plus the 0-10 columns ``KEYS_0_10``; error rows exactly ``v0_9_1.rows.ERROR_KEYS``.
Byte accounting as in the siblings: a frame row's ``size`` is the whole frame
(12-octet header included; 8 for a protocol header), error rows cover what is
not a frame, so per direction sum(size) + sum(length) + gap bytes = stream bytes.

For 0-10, ``frame_type`` is the segment type (control, command, header, body)
or ``protocol_header``; ``class_id``/``method_id`` and their names are the
control's or command's (header and body frames carry their command's class and
``command_id``); ``channel`` is the frame's channel (the session's).
"""

from __future__ import annotations

from amqplens.decode.common.rows import ERROR_KEYS, to_json
from amqplens.decode.v0_10 import spec
from amqplens.decode.v1_0.rows import FRAME_KEYS_1_0

KEYS_0_10 = (
    "track",  # 0 control, 1 command (frame header octet 5)
    "first_segment",  # frame header flags: B, E, b, e
    "last_segment",
    "first_frame",
    "last_frame",
    "command_id",  # the command's implicit id in its session (session.command-point, +1 per command)
    "sync",  # session.header sync bit of a command
    "session_name",  # session.attach/attached/detach/detached name
    "destination",
    "accept_mode",  # explicit | none
    "acquire_mode",  # pre-acquired | not-acquired
    "credit_unit",  # message | byte
    "credit_value",
    "flow_mode",  # credit | window
    "transfers_json",  # id ranges [[lo, hi], ...] of message.accept/reject/release/acquire and message.acquired
    "commands_json",  # id ranges of session.expected/confirmed/completed/known-completed/gap
    "referenced_command_id",  # the command an execution.result / execution.exception is about
)
FRAME_KEYS_0_10 = FRAME_KEYS_1_0 + KEYS_0_10
FRAME_TEMPLATE = dict.fromkeys(FRAME_KEYS_0_10)


def _text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "backslashreplace")
    return None


def _int(v):
    return v if type(v) is int else None


def _bool(v):
    return v if type(v) is bool else None


def _enum(domain: str):
    names = spec.ENUMS[domain]
    return lambda v: names.get(v, str(v)) if type(v) is int else None


def _ranges(v):
    return to_json(v) if isinstance(v, list) else None


# argument -> (frame column, conversion)
PROMOTED = {
    "destination": ("destination", _text),
    "accept_mode": ("accept_mode", _enum("message.accept-mode")),
    "acquire_mode": ("acquire_mode", _enum("message.acquire-mode")),
    "flow_mode": ("flow_mode", _enum("message.flow-mode")),
    "unit": ("credit_unit", _enum("message.credit-unit")),
    "value": ("credit_value", _int),
    "transfers": ("transfers_json", _ranges),
    "commands": ("commands_json", _ranges),
    "exchange": ("exchange", _text),
    "routing_key": ("routing_key", _text),
    "queue": ("queue", _text),
    "consumer_tag": ("consumer_tag", _text),
    "delivery_tag": ("delivery_tag", _int),
    "multiple": ("multiple", _bool),
    "requeue": ("requeue", _bool),
    "redelivered": ("redelivered", _bool),
    "mandatory": ("mandatory", _bool),
    "immediate": ("immediate", _bool),
    "prefetch_count": ("prefetch_count", _int),
    "prefetch_size": ("prefetch_size", _int),
    "global": ("global_qos", _bool),
    "reply_code": ("reply_code", _int),
    "reply_text": ("reply_text", _text),
    "error_code": ("reply_code", _int),
    "description": ("reply_text", _text),
    "message_count": ("message_count", _int),
}
# per (class, name): arguments promoted under another column than PROMOTED says
SPECIAL = {
    ("message", "reject"): {"code": ("reply_code", _int), "text": ("reply_text", _text)},
    ("session", "detached"): {"code": ("reply_code", _int)},
    ("execution", "result"): {"command_id": ("referenced_command_id", _int)},
    ("execution", "exception"): {"command_id": ("referenced_command_id", _int)},
}
_SESSION_NAMED = frozenset({"attach", "attached", "detach", "detached"})


def promote(row: dict, class_name: str, name: str, args: dict) -> None:
    """Copy a control's or command's arguments into the frame columns."""
    special = SPECIAL.get((class_name, name), {})
    for arg, value in args.items():
        target = special.get(arg) or PROMOTED.get(arg)
        if target is None or (arg == "value" and (class_name, name) != ("message", "flow")):
            continue  # execution.result's value is a struct, not credit
        row[target[0]] = target[1](value)
    if class_name == "session" and name in _SESSION_NAMED:
        row["session_name"] = _text(args.get("name"))
    result = args.get("value")
    if (class_name, name) == ("execution", "result") and isinstance(result, dict):
        for arg in ("transfers", "message_count"):
            if arg in result:
                column, convert = PROMOTED[arg]
                row[column] = convert(result[arg])


def promote_header(row: dict, structs: dict) -> None:
    """The fields of a header segment's delivery-properties every metric needs."""
    delivery = structs.get("message.delivery-properties")
    if isinstance(delivery, dict):
        for arg in ("exchange", "routing_key", "redelivered", "immediate"):
            if arg in delivery:
                column, convert = PROMOTED[arg]
                row[column] = convert(delivery[arg])


__all__ = ["FRAME_KEYS_0_10", "KEYS_0_10", "ERROR_KEYS", "FRAME_TEMPLATE", "promote", "promote_header", "to_json"]
