"""``AMQP 1 1 0 9``: the published 0-9 or AMQP/Fast 0.9a5? The first frames decide (DESIGN.md, "Dialects").

Both send the same protocol header; their frame headers differ (7 octets with a
long size, against 4 octets with a short size that counts the frame-end), so
after the header at most one of them parses consistently.
``SharedHeaderConsumer`` holds every call until the frames after the header
(either direction) decide, then creates the chosen codec and replays the calls
into it, so no byte is lost or repeated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from amqplens.decode.detect import AMQP, D0_9, HEADER_SIZE
from amqplens.decode.drafts.layouts import AMQP_FAST, NEED, Frame, parse_fast, parse_published_0_9

if TYPE_CHECKING:
    from amqplens.decode.streaming import Codec

FRAMES_TO_AGREE = 3  # consecutive frames one framing must parse when the other cannot
MAX_HELD = 256 << 10  # bytes held undecided before the published 0-9 is assumed


def _run(parse, buf: bytes) -> tuple[int, str]:
    """(frames parsed in a row from the start, then "end" | "need" | "bad")."""
    pos, n, extended = 0, 0, False
    while n < FRAMES_TO_AGREE:
        if pos == len(buf):
            return n, "end"
        frame = parse(buf, pos, extended)
        if frame == NEED:
            return n, "need"
        if not isinstance(frame, Frame):
            return n, "bad"
        pos, n, extended = pos + frame.total, n + 1, frame.ftype == 9
    return n, "enough"


def choose_framing(buf: bytes, final: bool = False) -> str | None:
    """D0_9 or AMQP_FAST for the bytes after the protocol header, or None while undecided."""
    nine, fast = _run(parse_published_0_9, buf), _run(parse_fast, buf)
    for a, b, name in ((nine, fast, D0_9), (fast, nine, AMQP_FAST)):
        if a[0] > 0 and a[1] != "bad" and b[1] == "bad":
            return name
    if nine[1] == fast[1] == "bad":
        return D0_9  # neither: the published dialect's decoder keeps the bytes as errors
    if final or len(buf) > MAX_HELD or (nine[1] != "need" and fast[1] != "need"):
        return AMQP_FAST if fast[0] > nine[0] else D0_9
    return None


class SharedHeaderConsumer:
    """A StreamConsumer that becomes the codec ``factories[dialect](...)`` once the framing is known."""

    def __init__(self, make_codec) -> None:
        self.make_codec = make_codec  # dialect -> codec
        self.codec: Codec | None = None
        self.chosen: str | None = None
        self._held: list[tuple] = []
        self._bytes = {"to_server": b"", "to_client": b""}

    def _after_header(self, direction: str) -> bytes:
        buf = self._bytes[direction]
        return buf[HEADER_SIZE:] if buf.startswith(AMQP) else buf

    def _decide(self, final: bool) -> None:
        for d in ("to_client", "to_server"):  # the server's first frame comes first on the wire
            buf = self._after_header(d)
            if buf:
                name = choose_framing(buf, final)
                if name is not None:
                    return self._become(name)
        if final:
            self._become(D0_9)

    def _become(self, name: str) -> None:
        self.chosen = name
        self.codec = self.make_codec(name)
        held, self._held = self._held, []
        for kind, args in held:
            getattr(self.codec, kind)(*args)

    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        if self.codec is not None:
            return self.codec.data(direction, offset, ts_us, data)
        self._held.append(("data", (direction, offset, ts_us, data)))
        if offset == len(self._bytes.get(direction, b"x")):
            self._bytes[direction] += data
        self._decide(False)

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        if self.codec is not None:
            return self.codec.gap(direction, offset, length, ts_us)
        self._held.append(("gap", (direction, offset, length, ts_us)))
        self._decide(True)  # the bytes before the gap are all there will be to go by

    def close(self, connection=None) -> None:
        if self.codec is None:
            self._decide(True)  # final: it chooses
        cast("Codec", self.codec).close(connection)

    def drain_frames(self) -> list[dict]:
        return self.codec.drain_frames() if self.codec is not None else []

    def drain_errors(self) -> list[dict]:
        return self.codec.drain_errors() if self.codec is not None else []

    def drain_frame_errors(self) -> list[dict]:
        return self.codec.drain_frame_errors() if self.codec is not None else []

    def connection_facts(self) -> dict:
        return self.codec.connection_facts() if self.codec is not None else {}
