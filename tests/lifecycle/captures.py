"""Frame rows of a capture file through the project's own pieces, as the ingest job makes them.

``read_capture`` -> packets sorted by (flow_key, ts_us, record_offset) ->
``TcpReassembler`` with a ``DecodingConsumer`` per connection (0-9-1 family or
1.0 by the protocol header) -> frame rows, plus the ``frame_id`` the job adds.
"""

from __future__ import annotations

import functools
import json
import pathlib

from amqp_decode.capture import read_capture
from amqp_decode.codecs import DecodeOptions, DecodingConsumer
from amqp_decode.tcp import TcpReassembler

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
BROKER = DATA / "broker"


def _packets(path) -> dict:
    merged: dict[str, list] = {}
    for batch in read_capture(str(path), "cap"):
        for name, values in batch.items():
            merged.setdefault(name, []).extend(values)
    order = sorted(range(len(merged.get("ts_us", []))), key=lambda i: (merged["flow_key"][i], merged["ts_us"][i], merged["record_offset"][i]))
    return {name: [values[i] for i in order] for name, values in merged.items()}


@functools.lru_cache(maxsize=None)
def _decoded(path: str) -> tuple:
    consumers = []

    def factory(info):
        if info.tls:
            return None
        c = DecodingConsumer(info.connection_id, DecodeOptions(), lambda consumer, record: None)
        consumers.append(c)
        return c

    reassembler = TcpReassembler("cap", consumer_factory=factory)
    reassembler.feed_columns(_packets(path))
    reassembler.finish()
    frames = [f for c in consumers for f in c.drain_frames()]
    for f in frames:
        f["frame_id"] = f"{f['connection_id']}-{'s' if f['direction'] == 'to_server' else 'c'}-{f['stream_offset']}"
        f["capture_id"] = "cap"
    frames.sort(key=lambda f: (f["connection_id"], f["ts_us"], f["stream_offset"]))
    return tuple(frames)


def frames_of(path) -> list[dict]:
    """The capture's frame rows sorted as the job sorts them: (connection_id, ts_us, stream_offset). Copies."""
    return [dict(f) for f in _decoded(str(path))]


def oracle(name: str) -> dict:
    return json.loads((BROKER / f"{name}.oracle.json").read_text())
