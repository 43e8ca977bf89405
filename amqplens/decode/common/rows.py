"""The shapes of the rows every codec emits, and their JSON rendering (shared by all dialects).

Frame rows and error rows are plain dicts with a fixed set of keys (every key
present, ``None`` when it does not apply), so a batch of them converts to one
Arrow schema.

Byte accounting: a frame row's ``size`` is every byte of the frame on the wire
(7-octet header, payload, frame-end; 8 for a protocol header). A frame whose
arguments fail to decode is still a frame row, with ``decode_error`` set, and
is never also an error row. Error rows cover the bytes that are not frames:
``length`` each. So per direction, sum(size) + sum(length) + gap bytes equals
the stream bytes.
"""

from __future__ import annotations

import decimal
import json
import math

FRAME_KEYS = (
    "connection_id",
    "direction",
    "stream_offset",
    "ts_us",
    "dialect",
    "frame_type",
    "channel",
    "size",
    "class_id",
    "method_id",
    "class_name",
    "method_name",
    "delivery_tag",
    "multiple",
    "requeue",
    "redelivered",
    "exchange",
    "routing_key",
    "queue",
    "consumer_tag",
    "prefetch_count",
    "prefetch_size",
    "global_qos",
    "reply_code",
    "reply_text",
    "body_size",
    "active",
    "reason",
    "mandatory",
    "immediate",
    "no_ack",
    "message_count",
    "arguments_json",
    "properties_json",
    "message_seq",
    "body_sha256",
    "body_prefix",
    "decode_error",
)

ERROR_KEYS = (
    "connection_id",
    "direction",
    "stream_offset",
    "length",
    "reason",
    "detail",
    "raw",
    "raw_sha256",
    "raw_length",
    "ts_us",
)

# method argument -> frame column, for the arguments every metric needs
FRAME_TEMPLATE = dict.fromkeys(FRAME_KEYS)
# decode_errors.stage of a frame that framed but did not decode: its bytes are also the frame's, so
# byte accounting (amqplens/jobs/validate/quality.py) and metrics_errors (amqplens/jobs/metrics/faults.py) leave these rows out
STAGE_FRAME = "frame"


def _default(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def _finite(value):
    """Non-finite floats as strings, so the text is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


_STRICT = json.JSONEncoder(default=_default, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _one_encoder():
    """``_STRICT``'s C encoder, built once instead of on every call (``JSONEncoder.encode`` builds one per call).

    No circular-reference markers: decoded values are trees, so the encoder keeps no state between calls.
    None when the C accelerator is missing; ``to_json`` then uses ``_STRICT``.
    """
    try:
        from json.encoder import c_make_encoder, encode_basestring

        if c_make_encoder is None:
            return None
        encode = c_make_encoder(None, _default, encode_basestring, None, ":", ",", False, False, False)
        return lambda value: "".join(encode(value, 0))
    except (ImportError, TypeError):  # another Python's signature
        return None


_FAST = _one_encoder() or _STRICT


def to_json(value) -> str:
    """Compact JSON; bytes as hex, decimals as strings, tables as objects."""
    try:
        return _FAST(value)
    except ValueError:  # NaN or infinity somewhere in a field table
        return _STRICT(_finite(value))
