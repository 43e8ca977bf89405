"""The compiled hot path (``v0_9_1.hotpath``, numba) against the Python decoder, the reference.

Every table the decoder emits must be the same, row for row and column for column: frame rows,
error rows (codec and frame stage), the connection facts with their byte accounting, and, through
``pipeline.decode_flows``, the connections, decode_errors and frames batches. Inputs:

- every capture the tests keep (real-broker fixtures, public captures, the demo, the fuzz
  campaign's capture findings), through the whole stage-2 batch function;
- every 0-9-1 family connection of those captures (the fuzz campaign's seeds) as streams, cut
  into random pieces, and bad input made from them: the fixed-seed fuzz mutator's edits (bit
  flips, interesting integers, inserts, deletes, splices, truncations), and for every frame
  header of a stream a flipped bit in each header octet and in its frame-end, and the stream
  cut inside that header.

The kernel is used on buffers of any size here (``hot_min_bytes = 0``), so small inputs take it too.
"""

from __future__ import annotations

import pathlib
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from amqplens.decode import pipeline
from amqplens.decode.codecs import DecodeOptions
from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER
from amqplens.decode.v0_9_1 import Amqp091StreamDecoder, hotpath
from amqplens.decode.v0_9_1.hotpath import FrameBatch
from tools import fuzz_targets as ft

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed: only the Python path exists")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    [p for p in (ROOT / "tests" / "data").rglob("*") if p.suffix in (".pcap", ".pcapng")] + [ROOT / "amqplens" / "data" / "demo.pcap"]
)
FAMILY = ft.FAMILIES["0-9-1"]


def _flows(path: pathlib.Path, compiled: str, batch_rows: int) -> dict[str, list]:
    from amqplens.contracts.arrow import facts_struct, frame_struct

    options = pipeline.Options(batch_rows=batch_rows, decode_options=DecodeOptions(compiled=compiled, body_prefix_bytes=8),
                               frame_struct=frame_struct(), facts_struct=facts_struct())  # fmt: skip
    split = pa.RecordBatch.from_pylist([{"capture_id": "cap", "path": str(path), "start": 0, "end": path.stat().st_size, "split_index": 0}],
                                       schema=pipeline.SPLITS_SCHEMA)  # fmt: skip
    packets = pa.Table.from_batches(list(pipeline.read_splits([split])), schema=pipeline.PACKETS_OUT_SCHEMA)
    packets = packets.sort_by([("kind", "ascending"), ("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")])
    out = pa.Table.from_batches(list(pipeline.decode_flows(packets.to_batches(max_chunksize=512), options)), schema=options.flows_schema)
    tables = {}
    for kind, column in (("frame", "frame"), ("error", "error"), ("connection", "connection"), ("connection", "facts")):
        tables[f"{kind}.{column}"] = out.filter(pc.equal(out.column("kind"), kind)).column(column).to_pylist()
    return tables


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_capture_gives_the_same_tables_through_both_paths(path):
    want = _flows(path, "off", 8192)
    for batch_rows in (8192, 50):  # small batches: frames cut across the parts of a drain
        got = _flows(path, "on", batch_rows)
        for name, rows in want.items():
            assert got[name] == rows, (name, batch_rows)


def test_the_fixtures_take_the_compiled_path():
    """The comparisons above are not vacuous: most frames of the broker fixtures are hot ones."""
    hot = total = 0
    for streams in _fixture_streams():
        dec = _decoder(True, ft.StreamInput(streams[TO_SERVER], streams[TO_CLIENT]))
        dec.data(TO_SERVER, 0, 0, streams[TO_SERVER])
        dec.data(TO_CLIENT, 0, 0, streams[TO_CLIENT])
        dec.close()
        for part in dec.drain_frame_parts():
            total += len(part)
            hot += len(part) - len(part.dicts) if isinstance(part, FrameBatch) else 0
    assert total > 1000 and hot > total / 3


def _fixture_streams() -> list[dict]:
    out = []
    for data in ft.seeds()["0-9-1"]:
        inp = ft.StreamInput.decode(data)
        out.append({TO_SERVER: inp.to_server, TO_CLIENT: inp.to_client})
    return out


def _decoder(compiled: bool, inp: ft.StreamInput) -> Amqp091StreamDecoder:
    dec = Amqp091StreamDecoder(
        "c", dialect=FAMILY[inp.flags & 3], compiled=compiled, body_prefix_bytes=16 if inp.flags & ft.FLAG_BODY_PREFIX else 0,
        field_table_letters="spec" if inp.flags & ft.FLAG_SPEC_LETTERS else "rabbitmq",
    )  # fmt: skip
    dec.hot_min_bytes = 0
    return dec


def _decode(compiled: bool, inp: ft.StreamInput) -> tuple:
    dec = _decoder(compiled, inp)
    ft._feed(dec, inp)
    return dec.drain_frames(), dec.drain_errors(), dec.drain_frame_errors(), dec.connection_facts()


def _assert_alike(inp: ft.StreamInput) -> None:
    got, want = _decode(True, inp), _decode(False, inp)
    assert got == want, inp.encode()[:64].hex()
    assert [list(r) for r in got[0]] == [list(r) for r in want[0]]  # and the keys in the same order


def _frame_headers(stream: bytes) -> list[int]:
    """Offsets of the frame headers of a well-formed 0-9-1 stream (after its protocol header)."""
    pos, out = (8 if stream[:4] == b"AMQP" else 0), []
    while pos + 8 <= len(stream):
        size = int.from_bytes(stream[pos + 3 : pos + 7], "big")
        if pos + size + 8 > len(stream) or stream[pos + size + 7] != 0xCE:
            break
        out.append(pos)
        pos += size + 8
    return out


def test_fixture_streams_in_pieces_decode_alike():
    rnd = random.Random(20)
    for streams in _fixture_streams():
        for flags in (0, ft.FLAG_BODY_PREFIX | ft.FLAG_CLIENT_FIRST, ft.FLAG_GAP_SERVER | ft.FLAG_GAP_CLIENT, ft.FLAG_SPEC_LETTERS | 2):
            _assert_alike(ft.StreamInput(streams[TO_SERVER], streams[TO_CLIENT], rnd.randrange(256), flags))


def test_fuzz_mutations_decode_alike():
    """The campaign's fixed-seed mutator on every 0-9-1 seed: bit flips, bytes, integers, inserts, deletes, splices, truncations."""
    pool = ft.seeds()["0-9-1"]
    rnd = random.Random(91)
    for _ in range(300):
        data = ft.mutate(rnd.choice(pool), rnd, pool)
        _assert_alike(ft.StreamInput.decode(data))


def test_body_sizes_past_int64_decode_alike():
    """A content header whose body-size is 2^63 or more (the 64-bit field read as signed is negative; the fuzz campaign's
    mutator found 0xFFFF0100_00000020 once the channel_flow fixture joined the seeds), then a body frame: both paths
    decode the body as the message's first bytes, the message never completes, nothing is an error."""
    def frame(kind: int, channel: int, payload: bytes) -> bytes:
        return bytes([kind]) + channel.to_bytes(2, "big") + len(payload).to_bytes(4, "big") + payload + b"\xce"

    publish = frame(1, 1, b"\x00\x3c\x00\x28" + b"\x00\x00" + b"\x00" + b"\x01q" + b"\x00")  # basic.publish '' 'q'
    for size in (2**63, 0xFFFF010000000020, 2**64 - 1):
        header = frame(2, 1, b"\x00\x3c\x00\x00" + size.to_bytes(8, "big") + b"\x00\x00")
        stream = b"AMQP\x00\x00\x09\x01" + publish + header + frame(3, 1, bytes(range(32)))
        inp = ft.StreamInput(stream, b"", 0)
        _assert_alike(inp)
        frames = _decode(True, inp)[0]
        assert [(f["frame_type"], f["message_seq"], f["decode_error"]) for f in frames[1:]] == [
            ("method", 0, None), ("header", 0, None), ("body", 0, None)], size
        assert frames[2]["body_size"] == size


def test_corrupt_and_truncated_frame_headers_decode_alike():
    """A stream's first frames each with a flipped bit in two header octets and in its frame-end (the stream kept
    up to 1 KiB past that frame, the other direction's first 4 KiB beside it), and the stream cut inside each header."""
    rnd = random.Random(7)
    for streams in _fixture_streams():
        for direction in (TO_SERVER, TO_CLIENT):
            stream = streams[direction]
            for pos in _frame_headers(stream)[:6]:
                variants = [stream[: pos + rnd.randrange(1, 8)]]  # cut inside the header
                size = int.from_bytes(stream[pos + 3 : pos + 7], "big")
                for at in [*rnd.sample(range(pos, pos + 7), 2), pos + size + 7]:
                    b = bytearray(stream[: pos + size + 8 + 1024])
                    b[at] ^= 1 << rnd.randrange(8)
                    variants.append(bytes(b))
                for v in variants:
                    pair = {TO_SERVER: streams[TO_SERVER][:4096], TO_CLIENT: streams[TO_CLIENT][:4096], direction: v}
                    _assert_alike(ft.StreamInput(pair[TO_SERVER], pair[TO_CLIENT], rnd.randrange(256)))


def test_a_buffer_the_framer_keeps_from_the_walk_is_one_the_walk_takes_nothing_of():
    """``DirectionFramer._walks`` saves the kernel's call where it would walk nothing: at every frame header of every
    fixture stream in both directions, whole, cut at random places and with a flipped bit in each of its first 11
    octets, a False means the kernel's own count of frames is 0 (a True may still walk nothing: that is the call
    as before). Both answers are met: the handshake's connection methods and cut frames, and the hot frames."""
    import numpy as np

    from amqplens.decode.v0_9_1 import hot_kernel as hk

    rnd = random.Random(11)
    seen = {True: 0, False: 0}
    for streams in _fixture_streams():
        dec = _decoder(True, ft.StreamInput(streams[TO_SERVER], streams[TO_CLIENT]))
        meta = hotpath.hot_tables(dec.tables).meta
        for direction in (TO_SERVER, TO_CLIENT):
            stream, framer = streams[direction], dec._framers[direction]
            for pos in _frame_headers(stream)[:200]:
                variants = [stream, stream[: pos + rnd.randrange(1, 64)]]
                for at in range(pos, min(pos + 11, len(stream))):
                    b = bytearray(stream[: pos + 4096])
                    b[at] ^= 1 << rnd.randrange(8)
                    variants.append(bytes(b))
                for buf in variants:
                    walks = framer._walks(buf, pos, len(buf))
                    seen[walks] += 1
                    if not walks:
                        count, _room = hk._frames(np.frombuffer(buf, np.uint8), pos, len(buf), dec.frame_limit(), meta)
                        assert count == 0, (direction, pos, buf[pos : pos + 11].hex())
    assert seen[True] > 1000 and seen[False] > 1000, seen


def test_a_redacted_name_among_the_hot_keys_is_redacted_on_the_compiled_path_too():
    """``decode.redact_headers`` may name an argument the hot path writes (here ``routing_key``)."""
    from amqplens.decode.codecs import DecodingConsumer

    streams = max(_fixture_streams(), key=lambda s: s[TO_SERVER].count(b"\x00\x3c\x00\x28"))
    rows = {}
    for compiled in ("on", "off"):
        c = DecodingConsumer("c", DecodeOptions(compiled=compiled, redact_headers=("routing_key",)), lambda *_: None)
        c.data(TO_SERVER, 0, 0, streams[TO_SERVER])
        c.data(TO_CLIENT, 0, 0, streams[TO_CLIENT])
        c.codec.close()
        rows[compiled] = [r for part in c.drain_frame_parts() for r in (part.to_rows() if isinstance(part, FrameBatch) else part)]
    assert rows["on"] == rows["off"]
    published = [r for r in rows["on"] if r["method_name"] == "publish"]
    assert published and all('"routing_key":"<redacted>"' in r["arguments_json"] for r in published)


def test_a_redacted_header_name_is_redacted_on_the_compiled_path_too():
    """Headers tables name anything: a ``Token`` header (any case) and one nested where the walk leaves it to the reference."""
    from amqplens.decode.codecs import DecodingConsumer

    from .encoder import Encoder

    e = Encoder()
    message = (e.method(1, "basic", "publish", reserved_1=0, exchange="x", routing_key="k", mandatory=False, immediate=False)
               + e.header(1, 60, 2, {"content_type": "text/plain", "headers": {"Token": "abc", "n": -5, "ok": True}})
               + e.body(1, b"hi") + e.header(1, 60, 0, {"headers": {"deep": {"password": "x"}}}))  # fmt: skip
    stream = e.protocol_header() + message * 20
    rows = {}
    for compiled in ("on", "off"):
        c = DecodingConsumer("c", DecodeOptions(compiled=compiled), lambda *_: None)
        c.data(TO_SERVER, 0, 0, stream)
        c.codec.close()
        rows[compiled] = [r for part in c.drain_frame_parts() for r in (part.to_rows() if isinstance(part, FrameBatch) else part)]
    assert rows["on"] == rows["off"]
    props = [r["properties_json"] for r in rows["on"] if r["frame_type"] == "header"]
    assert props[0] == '{"content_type":"text/plain","headers":{"Token":"<redacted>","n":-5,"ok":true}}'
    assert props[1] == '{"headers":{"deep":{"password":"<redacted>"}}}'


def test_compiled_choice():
    assert hotpath.compiled_enabled("auto") and hotpath.compiled_enabled("on") and not hotpath.compiled_enabled("off")
    with pytest.raises(ValueError):
        hotpath.compiled_enabled("fast")


def test_the_switch_is_a_config_key_outside_the_fingerprint():
    """``decode.compiled`` changes speed, not rows: switching it must not make the lake re-ingest a capture."""
    from amqplens.jobs import ingest_captures
    from amqplens.config import load_config

    prints = {c: ingest_captures.fingerprint(ingest_captures.options_from(load_config(sets=[f"decode.compiled={c}"]))) for c in hotpath.CHOICES}
    assert len(set(prints.values())) == 1
    assert load_config()["decode.compiled"] == "auto"  # on by default since it pays at pipeline level (docs/performance.md)
