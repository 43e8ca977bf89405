"""Frame rows of a capture file through the project's own pieces, as the ingest job makes them.

``amqplens.decode.decode_capture`` (the job's pieces in its order; TLS connections left out)
-> frame rows, plus the ``frame_id`` and ``capture_id`` the job adds.
"""

from __future__ import annotations

import functools
import json
import pathlib

from amqplens.decode import decode_capture

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
BROKER = DATA / "broker"


@functools.lru_cache(maxsize=None)
def _decoded(path: str) -> tuple:
    frames = decode_capture(path, capture_id="cap", tls=False).frames()
    for f in frames:
        f["frame_id"] = frame_id(f)
        f["capture_id"] = "cap"
    return tuple(frames)


def frame_id(row: dict) -> str:
    """The id the ingest job gives a frame row: connection, ``s`` (to_server) or ``c``, and stream offset by ``-``."""
    return f"{row['connection_id']}-{'s' if row['direction'] == 'to_server' else 'c'}-{row['stream_offset']}"


def frames_of(path) -> list[dict]:
    """The capture's frame rows sorted as the job sorts them: (connection_id, ts_us, stream_offset). Copies."""
    return [dict(f) for f in _decoded(str(path))]


@functools.lru_cache(maxsize=None)
def _client_ports(path: str) -> dict:
    return {c.record.connection_id: c.record.client_port for c in decode_capture(path, capture_id="cap", tls=False)}


def client_ports(path) -> dict[str, int]:
    """connection_id (as in ``frames_of``) -> the client's TCP port."""
    return dict(_client_ports(str(path)))


def oracle(name: str) -> dict:
    return json.loads((BROKER / f"{name}.oracle.json").read_text())
