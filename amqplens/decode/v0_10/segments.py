"""Frames into segments, segments into assemblies, and each session's command ids (seed 004, "Assemblies").

Per direction and channel, ``ChannelState.on_frame`` follows the frame header's
four flags: first-frame/last-frame delimit a segment (one control, one command,
one header or one body), first-segment/last-segment an assembly (a control,
or a command followed by its header and body segments). It gathers the bytes of
control, command and header segments (capped: ``MAX_SEGMENT``) and hashes body
segments as they pass, so no body is held.

Command ids: every command has an implicit id, the sender's next id in its
session; session.command-point sets it and each command segment takes one and
advances it (RFC 1982 arithmetic, modulo 2^32). Before a command-point (a
capture that starts mid-session) ids are unknown: ``None``.
"""

from __future__ import annotations
from amqplens.decode.errors import FrameError

import hashlib

CONTROL, COMMAND, HEADER, BODY = 0, 1, 2, 3
SEGMENT_TYPES = ("control", "command", "header", "body")
MAX_SEGMENT = 16 << 20  # bytes of one control/command/header segment kept: more is an attack, not a command
SEQUENCE_MODULUS = 1 << 32


class Body:
    __slots__ = ("hasher", "size", "prefix", "keep")

    def __init__(self, keep: int) -> None:
        self.hasher, self.size, self.prefix, self.keep = hashlib.sha256(), 0, bytearray(), keep

    def add(self, chunk) -> None:
        self.hasher.update(chunk)
        self.size += len(chunk)
        if len(self.prefix) < self.keep:
            self.prefix += chunk[: self.keep - len(self.prefix)]


class ChannelState:
    """Segments and the assembly in progress on one channel, one direction, and the session's next command id."""

    def __init__(self, body_prefix_bytes: int = 0) -> None:
        self.keep = body_prefix_bytes
        self.segment: int | None = None  # type of the open segment
        self.parts: list[bytes] = []
        self.length = 0
        self.head: tuple | None = None  # (class code, control/command code) of the open segment
        self.command_id: int | None = None  # of the open command segment, then of its assembly
        self.assembly: tuple | None = None  # (class code, command code, command id, message seq) awaiting header/body
        self.body: Body | None = None
        self.next_id: int | None = None

    def set_command_point(self, command_id: int) -> None:
        self.next_id = command_id % SEQUENCE_MODULUS

    def forget_ids(self) -> None:
        self.next_id = None

    def reset(self) -> None:
        """After missing bytes: whatever was open is lost (the id sequence is too)."""
        self.segment, self.parts, self.length, self.head, self.assembly, self.body = None, [], 0, None, None, None
        self.next_id = None

    def on_frame(self, flags: int, stype: int, payload) -> tuple[str | None, bool]:
        """Take one frame: (error or None, whether it completed its segment)."""
        first_seg, last_seg, first_frame, last_frame = bool(flags & 8), bool(flags & 4), bool(flags & 2), bool(flags & 1)
        error = None
        if first_frame:
            if self.segment is not None:
                error = FrameError("segment_cut", f"a new segment began before the last frame of the open {SEGMENT_TYPES[self.segment]} segment")
            if first_seg:
                if self.assembly is not None and error is None:
                    error = FrameError("assembly_cut", "a new assembly began before the last segment of the open one")
                self.assembly = None
                if stype in (HEADER, BODY):
                    error = error or FrameError("bad_assembly", f"a {SEGMENT_TYPES[stype]} segment cannot begin an assembly")
            elif self.assembly is None or stype not in (HEADER, BODY):
                error = error or FrameError("orphan_segment", f"a {SEGMENT_TYPES[stype]} segment continuing an assembly that was not seen")
            self.segment, self.parts, self.length = stype, [], 0
            self.head = (payload[0], payload[1]) if stype in (CONTROL, COMMAND) and len(payload) >= 2 else None
            if stype == COMMAND:
                self.command_id = self.next_id
                if self.next_id is not None:
                    self.next_id = (self.next_id + 1) % SEQUENCE_MODULUS
            elif stype == BODY:
                self.body = Body(self.keep)
        elif self.segment != stype:
            return FrameError("orphan_frame", "a frame continuing a segment that was not seen"), False
        if stype == BODY:
            if self.body is not None:
                self.body.add(payload)
        elif self.length + len(payload) <= MAX_SEGMENT:
            self.parts.append(bytes(payload))
            self.length += len(payload)
        else:
            error = error or FrameError("segment_too_large", f"over {MAX_SEGMENT} bytes")
            self.length = MAX_SEGMENT + 1
        if not last_frame:
            return error, False
        self.segment = None
        if last_seg:
            self.assembly = None
        return error, True

    def segment_bytes(self) -> bytes | None:
        return b"".join(self.parts) if self.length <= MAX_SEGMENT else None

    def take_body(self) -> Body | None:
        body, self.body = self.body, None
        return body
