"""Hand-made frame rows: a conversation builder that numbers offsets, times and messages like the codecs do."""

from __future__ import annotations

import hashlib
import json

from amqplens.lifecycle import FRAME_COLUMNS, LifecycleRunner

CLIENT, SERVER = "to_server", "to_client"


class Conversation:
    """Frames of one connection in the order they are added; each gets the next offset of its direction."""

    def __init__(self, dialect: str = "0-9-1", connection_id: str = "conn", ts0: int = 1_000_000, step_us: int = 10) -> None:
        self.dialect, self.cid = dialect, connection_id
        self.ts, self.step = ts0, step_us
        self.offsets = {CLIENT: 0, SERVER: 0}
        self.seq: dict[tuple, int] = {}
        self.rows: list[dict] = []

    def frame(self, direction: str, frame_type: str, channel: int | None, size: int = 20, args: dict | None = None, **fields) -> dict:
        row = dict.fromkeys(FRAME_COLUMNS)
        self.ts += self.step
        off = self.offsets[direction]
        self.offsets[direction] = off + size
        row.update(connection_id=self.cid, direction=direction, stream_offset=off, ts_us=self.ts, dialect=self.dialect,
                   frame_type=frame_type, channel=channel, capture_id="cap")
        row["frame_id"] = f"{self.cid}-{'s' if direction == CLIENT else 'c'}-{off}"
        if args is not None:
            row["arguments_json"] = json.dumps(args, separators=(",", ":"))
        row.update(fields)
        self.rows.append(row)
        return row

    # -- 0-9-1 -------------------------------------------------------------------------------
    def method(self, direction: str, channel: int, name: str, args: dict | None = None, **fields) -> dict:
        cls, meth = name.split(".")
        return self.frame(direction, "method", channel, args=args, class_name=cls, method_name=meth, **fields)

    def c(self, channel: int, name: str, **fields) -> dict:
        return self.method(CLIENT, channel, name, **fields)

    def s(self, channel: int, name: str, **fields) -> dict:
        return self.method(SERVER, channel, name, **fields)

    def _message(self, row: dict, body: bytes, props: dict | None, frame_max: int) -> list[dict]:
        key = (row["direction"], row["channel"])
        seq = row["message_seq"] = self.seq.get(key, 0)
        self.seq[key] = seq + 1
        sha = hashlib.sha256(body).hexdigest()
        header = self.frame(row["direction"], "header", row["channel"], class_name="basic", body_size=len(body),
                            properties_json=json.dumps(props or {}), message_seq=seq)
        frames = [row, header]
        chunks = [body[i:i + frame_max] for i in range(0, len(body), frame_max)]
        for chunk in chunks:
            frames.append(self.frame(row["direction"], "body", row["channel"], size=len(chunk) + 8, message_seq=seq))
        frames[-1]["body_sha256"] = sha
        return frames

    def publish(self, channel: int, body: bytes = b"body", props: dict | None = None, frame_max: int = 4096, **fields) -> list[dict]:
        fields.setdefault("exchange", "")
        fields.setdefault("routing_key", "q")
        return self._message(self.c(channel, "basic.publish", **fields), body, props, frame_max)

    def deliver(self, channel: int, tag: int, consumer_tag: str = "ct", body: bytes = b"body", **fields) -> list[dict]:
        row = self.s(channel, "basic.deliver", delivery_tag=tag, consumer_tag=consumer_tag, redelivered=fields.pop("redelivered", False), **fields)
        return self._message(row, body, fields.pop("props", None), 4096)

    def get_ok(self, channel: int, tag: int, body: bytes = b"body", **fields) -> list[dict]:
        return self._message(self.s(channel, "basic.get-ok", delivery_tag=tag, redelivered=False, **fields), body, None, 4096)

    def basic_return(self, channel: int, exchange: str = "", routing_key: str = "q", code: int = 312) -> list[dict]:
        row = self.s(channel, "basic.return", exchange=exchange, routing_key=routing_key, reply_code=code)
        return self._message(row, b"body", None, 4096)

    def open_channel(self, channel: int = 1) -> None:
        self.c(channel, "channel.open")
        self.s(channel, "channel.open-ok")

    def consume(self, channel: int, tag: str = "ct", no_ack: bool = False, queue: str = "q") -> None:
        self.c(channel, "basic.consume", consumer_tag=tag, no_ack=no_ack, queue=queue, args={"consumer_tag": tag, "no_wait": False})
        self.s(channel, "basic.consume-ok", consumer_tag=tag)

    # -- 1.0 ----------------------------------------------------------------------------------
    def perf(self, direction: str, channel: int, performative: str, args: dict | None = None, **fields) -> dict:
        return self.frame(direction, "amqp", channel, args=args if args is not None else {}, performative=performative, **fields)

    def transfer(self, direction: str, channel: int, handle: int, delivery_id: int | None, more: bool = False,
                 body: bytes = b"x", props: dict | None = None, **fields) -> dict:
        key = (direction, channel, handle)
        open_key = ("open",) + key
        if open_key in self.seq:  # like the codec: a message open on the link continues, whatever the id says
            seq = self.seq[open_key]
        elif delivery_id is None:  # a continuation whose start was not seen: no message
            seq = None
        else:
            seq = self.seq.get(key, 0)
            self.seq[key] = seq + 1
        row = self.perf(direction, channel, "transfer", handle=handle, delivery_id=delivery_id, more=more, message_seq=seq, **fields)
        if seq is None:
            return row
        if more and not fields.get("aborted"):
            self.seq[open_key] = seq
        else:
            self.seq.pop(open_key, None)
            if not fields.get("aborted"):
                row.update(body_size=len(body), body_sha256=hashlib.sha256(body).hexdigest(),
                           properties_json=json.dumps(props or {"properties": {"message_id": f"m{seq}"}}))
        return row


def run(*conversations, **options) -> tuple[list, list, list, LifecycleRunner]:
    from amqplens.lifecycle import LifecycleOptions

    runner = LifecycleRunner(LifecycleOptions(**options))
    for conv in conversations:
        runner.feed(conv.rows)
    runner.finish()
    return runner.drain_deliveries(), runner.drain_flow_events(), runner.drain_request_responses(), runner


def by_tag(deliveries: list, method: str | None = None) -> dict:
    return {d["delivery_tag"]: d for d in deliveries if method is None or d["method"] == method}
