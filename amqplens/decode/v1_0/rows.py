"""The shapes of the rows the AMQP 1.0 decoder emits, and the promoted performative fields.

Frame rows have exactly the keys of the 0-9-1 family's rows (``v0_9_1.rows.FRAME_KEYS``,
``None`` where they do not apply to 1.0) plus the 1.0 columns of the frames table
(``amqplens.contracts.tables.FRAMES``); error rows exactly ``v0_9_1.rows.ERROR_KEYS``. Byte
accounting is the same: a frame row's ``size`` is every byte of the frame (8 for
a protocol header), error rows cover the bytes that are not frames, so per
direction sum(size) + sum(length) + gap bytes = stream bytes.

Promoted columns hold what is on the wire: a field that is absent (or null) is
``None``, not its spec default; one exception, a continuation transfer's
``delivery_id`` is the first transfer's (the spec lets it be omitted there).
"""

from __future__ import annotations

from typing import cast

from amqplens.decode.common.rows import ERROR_KEYS, FRAME_KEYS
from amqplens.decode.v1_0.composites import RCV_SETTLE_MODE, ROLE, SND_SETTLE_MODE, code_of, fields, state_name
from amqplens.decode.v1_0.types import Described

KEYS_1_0 = (
    "performative",
    "descriptor",
    "handle",
    "role",
    "link_name",
    "delivery_id",
    "delivery_tag_bin",
    "settled",
    "more",
    "aborted",
    "rcv_settle_mode",
    "snd_settle_mode",
    "message_format",
    "link_credit",
    "delivery_count",
    "available",
    "drain",
    "echo",
    "next_incoming_id",
    "incoming_window",
    "next_outgoing_id",
    "outgoing_window",
    "first",
    "last",
    "state",
    "error_condition",
    "error_description",
    "source_address",
    "target_address",
)
FRAME_KEYS_1_0 = FRAME_KEYS + KEYS_1_0
FRAME_TEMPLATE = dict.fromkeys(FRAME_KEYS_1_0)
INT64_MAX = (1 << 63) - 1


def _uint(v):
    """A field the spec types unsigned (handle, uint, delivery-number, sequence-no, ...): a peer that encodes it as a
    signed type with a value below 0 breaks the spec; the column stays null (not a negative number that
    frames.non_negative, our invariant, would judge) and the value as sent stays in arguments_json."""
    return v if type(v) is int and 0 <= v <= INT64_MAX else None


def _bool(v):
    return v if type(v) is bool else None


def _text(v):
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "backslashreplace")
    return None


def _binary(v):
    return bytes(v) if isinstance(v, (bytes, bytearray)) else None


def _choice(table):
    return lambda v: table.get(v) if type(v) in (int, bool) else None


# performative field -> (frame column, conversion)
PROMOTED = {
    "handle": ("handle", _uint),
    "role": ("role", _choice(ROLE)),
    "name": ("link_name", _text),
    "delivery_id": ("delivery_id", _uint),
    "delivery_tag": ("delivery_tag_bin", _binary),
    "settled": ("settled", _bool),
    "more": ("more", _bool),
    "aborted": ("aborted", _bool),
    "rcv_settle_mode": ("rcv_settle_mode", _choice(RCV_SETTLE_MODE)),
    "snd_settle_mode": ("snd_settle_mode", _choice(SND_SETTLE_MODE)),
    "message_format": ("message_format", _uint),
    "link_credit": ("link_credit", _uint),
    "delivery_count": ("delivery_count", _uint),
    "initial_delivery_count": ("delivery_count", _uint),
    "available": ("available", _uint),
    "drain": ("drain", _bool),
    "echo": ("echo", _bool),
    "next_incoming_id": ("next_incoming_id", _uint),
    "incoming_window": ("incoming_window", _uint),
    "next_outgoing_id": ("next_outgoing_id", _uint),
    "outgoing_window": ("outgoing_window", _uint),
    "first": ("first", _uint),
    "last": ("last", _uint),
}


def error_fields(error) -> tuple[str | None, str | None]:
    """(condition, description) of an ``error`` composite."""
    if not isinstance(error, Described):
        return None, None
    code = code_of(error.descriptor)
    f = fields(code, error.value) if code is not None else None
    if not f:
        return None, None
    return _text(f.get("condition")), _text(f.get("description"))


def _address(terminus) -> str | None:
    if not isinstance(terminus, Described):
        return None
    code = code_of(terminus.descriptor)
    f = fields(code, terminus.value) if code is not None else None
    return _text(f.get("address")) if f else None


def promote(row: dict, args: dict) -> None:
    """Copy a performative's fields (``{field: value}``) into the frame columns."""
    for name, value in args.items():
        target = PROMOTED.get(name)
        if target is not None:
            row[target[0]] = target[1](value)
    if "state" in args:
        state = args["state"]
        row["state"] = state_name(state)
        if row["state"] == "rejected":
            outcome = fields(cast(int, code_of(state.descriptor)), state.value) or {}  # rejected: a known code
            row["error_condition"], row["error_description"] = error_fields(outcome.get("error"))
    if "error" in args:
        row["error_condition"], row["error_description"] = error_fields(args["error"])
    if "source" in args:
        row["source_address"] = _address(args["source"])
    if "target" in args:
        row["target_address"] = _address(args["target"])


__all__ = ["FRAME_KEYS_1_0", "ERROR_KEYS", "FRAME_TEMPLATE", "promote", "error_fields"]
