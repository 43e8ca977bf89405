"""Fuzz targets and the invariants every input must keep (shared by ``tools/fuzz.py`` and ``tests/fuzz``).

A target takes one byte string and raises ``Violation`` when an invariant
breaks; anything else it raises is a crash too. Two kinds of target:

- a dialect's stream decoder (``0-9-1``, ``1.0``, ``0-10``, ``drafts``): the input
  is a ``StreamInput`` (both directions, a chunking, an optional gap, decode
  options), fed to the codec the registry builds for one dialect of the family,
  or to ``DecodingConsumer`` to pick one from the bytes;
- ``capture``: the input is a capture file, read in byte-range splits and run
  through both ``mapInArrow`` batch functions, as the ingest job does.

Invariants checked on every input:

- no exception escapes, and no ``internal_error`` (a decoder bug the stream
  consumers caught) or ``reader_error`` row is made;
- byte accounting: per direction, frames + error regions + gaps = bytes fed,
  with no overlap (``tests/accounting.py``), and the facts agree;
- recursion: the decode runs with only ``RECURSION_BUDGET`` frames of Python
  stack above the caller, enough for every nesting cap the codecs configure;
- rows fit the table contracts (the pipeline's Arrow conversion; on ``check_rows``, which the
  campaign sets for one input in ``tools.fuzz.ROWS_EVERY``: it costs as much as the decode);
- memory (on ``check_memory``): the tracemalloc peak stays within
  ``ALLOC_BASE + ALLOC_PER_BYTE * len(input)``, so no buffer follows a length
  field that the bytes do not back.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import random
import struct
import sys
import tempfile
import tracemalloc

import pyarrow as pa

from amqplens.decode import pipeline
from amqplens.decode.capture import plan_splits
from amqplens.decode.codecs import CODECS, DecodeOptions, DecodingConsumer
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from tests.accounting import check_accounting

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
REGRESSIONS = DATA / "fuzz"

# dialect family -> the registry names (amqplens.decode.codecs.CODECS) its inputs are decoded as
FAMILIES = {
    "0-9-1": ("0-9-1", "0-8", "0-9-1", "0-8"),
    "1.0": ("1.0", "1.0-sasl", "1.0", "1.0"),
    "0-10": ("0-10",) * 4,
    "drafts": ("0-9-draft", "amqp-fast-0.9a5", "0-9", "0-9-draft"),
}
TARGETS = (*FAMILIES, "capture")

# Python frames a decode may use above its caller: the deepest legitimate input (a value nested
# to a codec's cap: 0-9-1 and 1.0 MAX_DEPTH = 64, 0-10 32) needs about 200; an unbounded recursion blows it.
RECURSION_BUDGET = 400
ALLOC_BASE = 4 << 20  # interpreter noise, the Arrow conversion, one error row's 4 KiB of raw bytes
ALLOC_PER_BYTE = 2000  # a frame row is a ~60-key dict: a few KB for an 8-byte heartbeat
SEED_STREAM_BYTES = 3000  # per direction: the handshake and the first frames, where the parsers branch most
SEED_CAPTURE_BYTES = 16 << 10  # of each fixture file: a cut capture is a capture too, and small inputs run fast


class Violation(AssertionError):
    """An input broke an invariant; the message says which."""


# ----------------------------------------------------------------- stream inputs

FLAG_DETECT, FLAG_GAP_SERVER, FLAG_GAP_CLIENT, FLAG_CLIENT_FIRST, FLAG_BODY_PREFIX, FLAG_SPEC_LETTERS = (4, 8, 16, 32, 64, 128)


@dataclasses.dataclass
class StreamInput:
    """Both directions of one connection and how to feed them.

    Encoded as: chunk seed (u8; 0 = one piece per direction), flags (u8: the low two bits pick the
    dialect of the family, then ``FLAG_*``), to_server length (u16), to_server, to_client.
    """

    to_server: bytes
    to_client: bytes
    chunk_seed: int = 0
    flags: int = 0

    @classmethod
    def decode(cls, data: bytes) -> StreamInput:
        head = data[:4].ljust(4, b"\0")
        n = struct.unpack(">H", head[2:4])[0]
        rest = data[4:]
        return cls(rest[:n], rest[n:], head[0], head[1])

    def encode(self) -> bytes:
        return struct.pack(">BBH", self.chunk_seed, self.flags, len(self.to_server)) + self.to_server + self.to_client


def _pieces(data: bytes, rnd: random.Random | None, gap: bool) -> list[tuple[str, int, bytes | int]]:
    """``("data", offset, bytes)`` and at most one ``("gap", offset, length)`` covering ``data``."""
    if not data:
        return []
    cuts = {0, len(data)}
    if rnd is not None:
        cuts |= {rnd.randrange(len(data) + 1) for _ in range(rnd.randrange(1, 12))}
    hole = None
    if gap:
        r = rnd or random.Random(len(data))
        a = r.randrange(len(data))
        hole = (a, min(len(data), a + r.randrange(1, 64)))
        cuts |= set(hole)
    points = sorted(cuts)
    return [("gap", a, b - a) if hole == (a, b) else ("data", a, data[a:b]) for a, b in zip(points, points[1:])]


def _consumer(family: str, inp: StreamInput):
    options = DecodeOptions(
        field_table_letters="spec" if inp.flags & FLAG_SPEC_LETTERS else "rabbitmq",
        body_prefix_bytes=16 if inp.flags & FLAG_BODY_PREFIX else 0,
    )
    if inp.flags & FLAG_DETECT:
        return DecodingConsumer("c", options, lambda *_: None)
    name = FAMILIES[family][inp.flags & 3]
    return CODECS[name]("c", name, options)


def _feed(consumer, inp: StreamInput) -> dict:
    """Interleave the two directions' pieces as a reassembler would; returns the gap bytes per direction."""
    rnd = random.Random(inp.chunk_seed) if inp.chunk_seed else None
    queues = {
        TO_SERVER: _pieces(inp.to_server, rnd, bool(inp.flags & FLAG_GAP_SERVER)),
        TO_CLIENT: _pieces(inp.to_client, rnd, bool(inp.flags & FLAG_GAP_CLIENT)),
    }
    order = [TO_CLIENT, TO_SERVER] if inp.flags & FLAG_CLIENT_FIRST else [TO_SERVER, TO_CLIENT]
    gaps = {TO_SERVER: 0, TO_CLIENT: 0}
    ts = 1000
    while any(queues.values()):
        for d in order:
            if queues[d]:
                kind, offset, value = queues[d].pop(0)
                ts += 1
                if kind == "gap":
                    consumer.gap(d, offset, value, ts)
                    gaps[d] += value
                else:
                    consumer.data(d, offset, ts, value)
        if rnd is not None:
            rnd.shuffle(order)
    consumer.close(None)
    return gaps


def _check_streams(consumer, inp: StreamInput, gaps: dict, check_rows: bool = True) -> None:
    frames, errors, facts = consumer.drain_frames(), consumer.drain_errors(), consumer.connection_facts()
    bugs = [e for e in errors if e["reason"] == "internal_error"]
    if bugs or facts.get("internal_errors"):
        raise Violation(f"internal_error: {bugs[0]['detail'] if bugs else facts['internal_errors']}")
    totals = {TO_SERVER: len(inp.to_server), TO_CLIENT: len(inp.to_client)}
    try:
        check_accounting(frames, errors, totals, gaps, frame_keys=tuple(frames[0]) if frames else (),
                         error_keys=tuple(errors[0]) if errors else (), ordered=False)  # fmt: skip
        for d, total in totals.items():
            if total:
                assert facts[f"frame_bytes_{d}"] + facts[f"error_bytes_{d}"] == facts[f"stream_bytes_{d}"] == total - gaps[d]
                assert facts[f"gap_bytes_{d}"] == gaps[d]
    except (AssertionError, KeyError) as exc:
        raise Violation(f"byte accounting: {exc!r}") from None
    frame_errors = consumer.drain_frame_errors()
    bad = sorted((f["direction"], f["stream_offset"], f["size"]) for f in frames if f["decode_error"] is not None)
    if sorted((e["direction"], e["stream_offset"], e["length"]) for e in frame_errors) != bad:
        raise Violation(f"frame errors: {len(frame_errors)} stage-frame rows for {len(bad)} frames with a decode_error")
    if check_rows:
        _conform(frames, errors + frame_errors, facts)


@functools.cache
def _structs():
    from amqplens.contracts.arrow import facts_struct, frame_struct

    return frame_struct(), facts_struct()


def _conform(frames: list, errors: list, facts: dict) -> None:
    """The rows through the pipeline's Arrow conversion (``pipeline.to_struct_array``, the error struct)."""
    frame_struct, facts_struct = _structs()
    try:
        pipeline.to_struct_array(frames, frame_struct)
        pipeline.to_struct_array([facts], facts_struct)
        pa.array([pipeline._codec_error_row("cap", e) for e in errors], pipeline.ERROR_STRUCT)
    except Exception as exc:
        raise Violation(f"rows do not fit the table contracts: {type(exc).__name__}: {exc}") from None


def run_stream(family: str, data: bytes, check_rows: bool = True) -> None:
    """One input of a dialect family's target; raises ``Violation`` (or crashes) when an invariant breaks."""
    inp = StreamInput.decode(data)
    with _recursion_budget():
        consumer = _consumer(family, inp)
        gaps = _feed(consumer, inp)
    _check_streams(consumer, inp, gaps, check_rows)


# ----------------------------------------------------------------- capture inputs

BAD_CAPTURE_REASONS = {"reader_error", "internal_error", "byte_accounting_mismatch"}


@functools.cache
def _scratch() -> str:
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="amqplens-fuzz-", suffix=".pcap", dir=folder)
    os.close(fd)
    return path


def run_capture(data: bytes, check_rows: bool = True) -> None:  # the pipeline converts every capture row itself
    """One capture file: read in splits (size from the last byte) and decoded; no bug rows, no exception."""
    path = _scratch()
    with open(path, "wb") as f:
        f.write(data)
    split_size = max(64, len(data) // (1 + (data[-1] % 4 if data else 0)))
    splits = [{"capture_id": "cap", "path": path, "start": a, "end": b, "split_index": i}
              for i, (a, b) in enumerate(plan_splits(path, split_size))]  # fmt: skip
    frame_struct, facts_struct = _structs()
    options = pipeline.Options(frame_struct=frame_struct, facts_struct=facts_struct)
    with _recursion_budget():
        batches = pipeline.read_splits([pa.RecordBatch.from_pylist(splits, schema=pipeline.SPLITS_SCHEMA)], options)
        packets = pa.Table.from_batches(list(batches), schema=pipeline.PACKETS_OUT_SCHEMA)
        # the job's shuffle: stage 2 gets each flow's packets together, in time order
        packets = packets.sort_by([("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")])
        out = list(pipeline.decode_flows(packets.to_batches(), options))
    for batch in out:
        if batch.num_rows and batch.column("kind")[0].as_py() == "error":
            for row in batch.column("error").to_pylist():
                if row["reason"] in BAD_CAPTURE_REASONS:
                    raise Violation(f"{row['reason']}: {row['detail']}")


# ----------------------------------------------------------------- the checks around a run


class _recursion_budget:
    """Allow only ``RECURSION_BUDGET`` more Python frames while decoding."""

    def __enter__(self):
        self.saved = sys.getrecursionlimit()
        depth, frame = 0, sys._getframe()
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        sys.setrecursionlimit(depth + RECURSION_BUDGET)

    def __exit__(self, *exc):
        sys.setrecursionlimit(self.saved)


@functools.cache
def _warm(target: str) -> None:
    """Run the seeds once: lazy imports and generated tables are not an input's allocations."""
    for data in seeds()[target]:
        run_target(target, data)


def run_target(target: str, data: bytes, check_memory: bool = False, check_rows: bool = True) -> None:
    """Run one input; with ``check_memory`` also bound its tracemalloc peak (``check_rows``: see the module doc)."""
    fn = run_capture if target == "capture" else functools.partial(run_stream, target)
    if not check_memory:
        return fn(data, check_rows)
    _warm(target)
    tracemalloc.start()
    try:
        fn(data, check_rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limit = ALLOC_BASE + ALLOC_PER_BYTE * len(data)
    if peak > limit:
        raise Violation(f"allocation: peak {peak} bytes for a {len(data)}-byte input (limit {limit})")


# ----------------------------------------------------------------- seeds


def _fixture_captures() -> list[pathlib.Path]:
    return sorted(p for p in DATA.rglob("*") if p.suffix in (".pcap", ".pcapng") and "fuzz" not in p.parts)


class _Recorder:
    """A StreamConsumer that keeps the first ``limit`` bytes of each direction, up to its first hole."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streams = {TO_SERVER: b"", TO_CLIENT: b""}

    def data(self, direction, offset, ts_us, data):
        if offset == len(self.streams[direction]) < self.limit:
            self.streams[direction] += data[: self.limit - offset]

    def gap(self, direction, offset, length, ts_us):
        pass

    def close(self, connection):
        pass


def streams_of(path: pathlib.Path, limit: int = SEED_STREAM_BYTES) -> list[dict]:
    """Each connection of the capture at ``path`` as its two directions' first ``limit`` in-order bytes."""
    from amqplens.decode.api import reassemble

    recorders: list[_Recorder] = []

    def factory(info):
        recorders.append(_Recorder(limit))
        return recorders[-1]

    reassemble(path, factory, capture_id="seed")
    return [r.streams for r in recorders]


def _family_of(streams: dict) -> str | None:
    from amqplens.decode.codecs import sniff_framing
    from amqplens.decode.detect import detect_protocol_header

    name = detect_protocol_header(streams[TO_SERVER][:8]) or sniff_framing(streams[TO_SERVER] or streams[TO_CLIENT])
    for family, names in FAMILIES.items():
        if name in names:
            return family
    return None


def _draft_streams() -> list[dict]:
    from tests.drafts import encoder as e

    draft = e.HEADER_DRAFT + e.draft_method(1, 60, 40, b"\x00\x01x", cycle=3) + e.draft_header(1, 60, 0, 5) + e.draft_frame(3, 1, b"hello")
    fast = (e.HEADER_FAST + e.fast_method(1, 10, 11, b"\x05guest") + e.fast_header(1, 3, 0, 4) + e.fast_frame(3, 1, b"body")
            + e.META + e.fast_extended(3, 1, b"x" * 40))  # fmt: skip
    return [{TO_SERVER: draft, TO_CLIENT: draft[8:]}, {TO_SERVER: fast, TO_CLIENT: fast[8:]}]


def _v0_10_streams() -> list[dict]:
    from tests.v0_10.conversation import CONVERSATIONS, streams

    out = []
    for make in CONVERSATIONS.values():
        s = streams(make())
        out.append({d: s[d][:SEED_STREAM_BYTES] for d in (TO_SERVER, TO_CLIENT)})
    return out


@functools.cache
def seeds() -> dict[str, tuple[bytes, ...]]:
    """Seed inputs per target: every fixture connection's first bytes per direction, the fixture files."""
    out: dict[str, list[bytes]] = {t: [] for t in TARGETS}
    extra = {"drafts": _draft_streams(), "0-10": _v0_10_streams()}
    for family, streams_list in extra.items():
        for streams in streams_list:
            out[family].append(StreamInput(streams[TO_SERVER], streams[TO_CLIENT]).encode())
    for path in _fixture_captures():
        out["capture"].append(path.read_bytes()[:SEED_CAPTURE_BYTES])
        for streams in streams_of(path):
            family = _family_of(streams)
            if family is not None:
                out[family].append(StreamInput(streams[TO_SERVER], streams[TO_CLIENT]).encode())
    return {t: tuple(dict.fromkeys(v)) for t, v in out.items()}


# ----------------------------------------------------------------- a deterministic mutator

INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)


def mutate(data: bytes, rnd: random.Random, others: tuple[bytes, ...] = (), max_len: int = 1 << 16) -> bytes:
    """One to four random edits (bit flips, bytes, interesting integers, inserts, deletes, duplicates, splices)."""
    buf = bytearray(data or b"\0")
    for _ in range(rnd.randint(1, 4)):
        n = len(buf)
        i = rnd.randrange(n) if n else 0
        op = rnd.randrange(8)
        if op == 0 and n:
            buf[i] ^= 1 << rnd.randrange(8)
        elif op == 1 and n:
            buf[i] = rnd.randrange(256)
        elif op == 2:
            width = rnd.choice((1, 2, 4))
            value = rnd.choice(INTERESTING) & ((1 << 8 * width) - 1)
            buf[i : i + width] = value.to_bytes(width, "big")
        elif op == 3:
            buf[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
        elif op == 4 and n > 1:
            del buf[i : i + rnd.randint(1, max(1, n // 8))]
        elif op == 5 and n:
            j = rnd.randrange(n)
            buf[j:j] = buf[i : i + rnd.randint(1, 64)]
        elif op == 6 and others:
            other = rnd.choice(others)
            if other:
                a = rnd.randrange(len(other))
                buf[i:] = other[a : a + rnd.randint(1, 512)]
        elif op == 7 and n:
            del buf[rnd.randrange(n) :]
    return bytes(buf[:max_len])


def quick_campaign(target: str, count: int, seed: int = 11, memory_every: int = 97, max_len: int = 1 << 16):
    """``count`` mutated inputs of ``target`` (deterministic for a seed); yields ``(input, error)`` for each failure."""
    rnd = random.Random(seed)
    pool = seeds()[target]
    for k in range(count):
        data = mutate(rnd.choice(pool), rnd, pool, max_len)
        try:
            run_target(target, data, check_memory=k % memory_every == 0)
        except Exception as exc:  # a crash or a Violation: both are findings
            yield data, exc
