"""Hand-made 0-10 frame rows, shaped like the 0-10 codec's (fields on a segment's last frame)."""

from __future__ import annotations

import hashlib
import json

from .conversation import CLIENT, SERVER, Conversation

FLAGS = ("first_segment", "last_segment", "first_frame", "last_frame")


class Conversation010(Conversation):
    """Each side numbers its commands from 0 per channel, as after a command-point of 0 (``point`` moves it)."""

    def __init__(self, codec_ids: bool = True, **kw) -> None:
        super().__init__("0-10", **kw)
        self.codec_ids = codec_ids  # False: command_id left None, as the codec does after a peer's attached
        self.next_id: dict[tuple, int] = {}
        self.msg: dict[str, int] = {}

    def ctl(self, direction: str, channel: int, name: str, args: dict | None = None, **fields) -> dict:
        cls, ctl = name.split(".")
        return self.frame(direction, "control", channel, args=args or {}, class_name=cls, method_name=ctl, track=0,
                          **dict.fromkeys(FLAGS, True), **fields)

    def point(self, direction: str, channel: int, command_id: int) -> dict:
        self.next_id[(direction, channel)] = command_id
        return self.ctl(direction, channel, "session.command-point", args={"command_id": command_id, "command_offset": 0})

    def _take_id(self, direction: str, channel: int) -> int:
        cid = self.next_id.get((direction, channel), 0)
        self.next_id[(direction, channel)] = (cid + 1) % (1 << 32)
        return cid

    def cmd(self, direction: str, channel: int, name: str, sync: bool = False, frames: int = 1, last_segment: bool = True,
            **fields) -> list[dict]:
        """A command segment of ``frames`` frames; the fields on the last one. Returns the frames."""
        cls, command = name.split(".")
        cid = self._take_id(direction, channel)
        out = []
        for i in range(frames):
            last = i == frames - 1
            row = self.frame(direction, "command", channel, class_name=cls, method_name=command, track=1,
                             command_id=cid if self.codec_ids else None, first_segment=True, last_segment=last_segment,
                             first_frame=i == 0, last_frame=last)
            if last:
                row.update(sync=sync, arguments_json=json.dumps(fields.pop("args", {})), **fields)
            out.append(row)
        return out

    def transfer(self, direction: str, channel: int, destination: str, accept_mode: str = "explicit", body: bytes = b"body",
                 body_frames: int = 1, header: bool = True, cmd_frames: int = 1, props: dict | None = None, **fields) -> list[dict]:
        seq = self.msg[direction] = self.msg.get(direction, 0) + 1
        has_content = header or body is not None
        frames = self.cmd(direction, channel, "message.transfer", frames=cmd_frames, last_segment=not has_content,
                          destination=destination, accept_mode=accept_mode, acquire_mode="pre-acquired", message_seq=seq, **fields)
        cid = frames[0]["command_id"]
        common = dict(class_name="message", track=1, message_seq=seq, command_id=cid)
        if header:
            structs = props or {"message.delivery-properties": {"routing_key": "k", "delivery_mode": 2, "priority": 4},
                                "message.message-properties": {"message_id": f"m{seq}", "content_type": "text/plain"}}
            frames.append(self.frame(direction, "header", channel, first_segment=False, last_segment=body is None, first_frame=True,
                                     last_frame=True, properties_json=json.dumps(structs), routing_key="k",
                                     body_size=None if body is None else len(body), redelivered=False, **common))
        if body is not None:
            for i in range(body_frames):
                last = i == body_frames - 1
                frames.append(self.frame(direction, "body", channel, first_segment=False, last_segment=True, first_frame=i == 0,
                                         last_frame=last, **common))
            frames[-1].update(body_size=len(body), body_sha256=hashlib.sha256(body).hexdigest())
        return frames

    def completed(self, direction: str, channel: int, ranges: list) -> dict:
        return self.ctl(direction, channel, "session.completed", commands_json=json.dumps(ranges))

    def settle(self, direction: str, channel: int, verb: str, ranges: list, **fields) -> dict:
        return self.cmd(direction, channel, f"message.{verb}", transfers_json=json.dumps(ranges), **fields)[-1]

    def session(self, channel: int = 1, client_point: int = 0, server_point: int = 0) -> None:
        """attach, command-points, attached (in Qpid's order: the client's point before the broker's attached)."""
        self.ctl(CLIENT, channel, "session.attach", session_name="s1")
        self.point(CLIENT, channel, client_point)
        self.ctl(SERVER, channel, "session.attached", session_name="s1")
        self.point(SERVER, channel, server_point)


__all__ = ["Conversation010", "CLIENT", "SERVER"]
