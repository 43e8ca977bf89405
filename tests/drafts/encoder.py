"""Frames of the two drafts, written from the seeds' diagrams (tests only)."""

from __future__ import annotations

import struct

HEADER_DRAFT = b"AMQP\x01\x01\x09\x01"  # seed 000 grammar: literal-AMQP %d1.1 %d9.1
HEADER_FAST = b"AMQP\x01\x01\x00\x09"  # seed 003: class 1, instance 1, version 0.9


def draft_frame(ftype: int, channel: int, payload: bytes = b"", cycle: int = 0) -> bytes:
    """seed 000, General Frame Format: type, cycle, channel (short), size (long), payload, frame-end."""
    return struct.pack(">BBHI", ftype, cycle, channel, len(payload)) + payload + b"\xce"


def draft_method(channel: int, class_id: int, method_id: int, args: bytes = b"", cycle: int = 0) -> bytes:
    return draft_frame(1, channel, struct.pack(">HH", class_id, method_id) + args, cycle)  # Method Frames


def draft_header(channel: int, class_id: int, weight: int, body_size: int, flags: int = 0) -> bytes:
    return draft_frame(2, channel, struct.pack(">HHQH", class_id, weight, body_size, flags))  # The Content Header


def fast_frame(ftype: int, channel: int, body: bytes = b"") -> bytes:
    """seed 003, The Frame Header Wire Format: type, channel (octet), size (short, counts the frame-end)."""
    return struct.pack(">BBH", ftype, channel, len(body) + 1) + body + b"\xce"


def fast_method(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    return fast_frame(1, channel, struct.pack(">BBH", class_id, method_id, 0) + args)  # Method Frame Body Wire Format


def fast_header(channel: int, class_id: int, weight: int, body_size: int, flags: int = 0) -> bytes:
    return fast_frame(2, channel, struct.pack(">BBQH", class_id, weight, body_size, flags))  # Content Header Frame


META = b"\x09\x00\x00\x00"  # seed 003, Meta Frames: channel and size MUST be zero


def fast_extended(ftype: int, channel: int, body: bytes) -> bytes:
    """seed 003, Extended Frame Header Wire Format: type, flags (0), channel (short), frame-size (long long)."""
    return META + struct.pack(">BBHQ", ftype, 0, channel, len(body) + 1) + body + b"\xce"
