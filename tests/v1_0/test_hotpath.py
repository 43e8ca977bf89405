"""AMQP 1.0's compiled path (``v1_0.hotpath``: flows and dispositions from the walk as columns) against the Python
decoder, the reference: every frame row (keys in the same order), error row, frame error row and connection fact.

Inputs: generated loads (``conversation.load``: transfers of many sizes, some over two frames, flows and
dispositions in every encoding the walk reads and some it leaves), the test conversation (SASL, an aborted message,
an error), the fuzz campaign's 1.0 seeds; each fed whole, cut into random pieces (a frame split across feeds, the
walk called on every piece) and with gaps; bad input: 1,200 mutations of a load (a byte changed, dropped or
repeated anywhere: frame headers, performative lists, constructors, sizes) and the fuzz mutator on the seeds.
``tests/v0_9_1/test_hotpath.py`` compares the stage-2 batches of every capture the tests keep, 1.0 ones included.
The walk is used on buffers of any size here (``hot_min_bytes = 0``).
"""

from __future__ import annotations

import random
import uuid

import pytest

from amqplens.decode.redaction import HeaderRedactor
from amqplens.decode.v1_0 import hotpath
from amqplens.decode.v1_0.stream import Amqp10StreamDecoder
from tools import fuzz_targets as ft

from . import encoder as E
from .conversation import conversation, load

pytestmark = pytest.mark.skipif(hotpath.load_kernel() is None, reason="numba is not installed: only the Python path exists")


def _decoder(compiled: bool) -> Amqp10StreamDecoder:
    dec = Amqp10StreamDecoder("c", compiled=compiled)
    dec.hot_min_bytes = 0
    return dec


def _feed(dec, to_server: bytes, to_client: bytes, rnd: random.Random | None, gap: bool = False) -> None:
    """Both directions in alternating pieces (random sizes, or whole), as the reassembler hands them."""
    pos = {"to_server": 0, "to_client": 0}
    data = {"to_server": to_server, "to_client": to_client}
    t = 0
    while any(pos[d] < len(data[d]) for d in pos):
        for d in pos:
            if pos[d] >= len(data[d]):
                continue
            n = len(data[d]) if rnd is None else rnd.choice([1, 7, 64, 300, 2000, 70000])
            if gap and rnd is not None and rnd.random() < 0.05:
                dec.gap(d, pos[d], min(n, len(data[d]) - pos[d]), t)
            else:
                dec.data(d, pos[d], t, data[d][pos[d]:pos[d] + n])
            pos[d] += n
            t += 17
    dec.close()


def _decode(compiled: bool, to_server: bytes, to_client: bytes, seed: int | None, gap: bool = False) -> tuple:
    dec = _decoder(compiled)
    _feed(dec, to_server, to_client, None if seed is None else random.Random(seed), gap)
    return dec.drain_frames(), dec.drain_errors(), dec.drain_frame_errors(), dec.connection_facts()


def _alike(to_server: bytes, to_client: bytes, seed: int | None = None, gap: bool = False) -> list[dict]:
    want = _decode(False, to_server, to_client, seed, gap)
    got = _decode(True, to_server, to_client, seed, gap)
    assert got == want
    assert [list(r) for r in got[0]] == [list(r) for r in want[0]]  # and the keys in the same order
    return got[0]


def _hot_rows(to_server: bytes, to_client: bytes) -> int:
    dec = _decoder(True)
    _feed(dec, to_server, to_client, None)
    return sum(len(i) for p in dec.drain_frame_parts() if isinstance(p, hotpath.Frame10Batch)
               for i in p.items if isinstance(i, hotpath.Hot10Rows))


@pytest.mark.parametrize("seed", range(3))
def test_loads_decode_alike_whole_in_pieces_and_with_gaps(seed):
    c, s = load(150, seed)
    rows = _alike(c, s)
    _alike(c, s, seed)
    _alike(c, s, seed + 100, gap=True)
    # not vacuous: most flows and dispositions came from the walk (the rest in encodings it leaves: a rejected
    # state, a field past the spec's, a signed int)
    flows = sum(1 for r in rows if r["performative"] in ("flow", "disposition"))
    assert flows > 60 and _hot_rows(c, s) > flows * 0.5


def test_the_conversation_decodes_alike():
    c, s = conversation()
    for seed in (None, 1, 2):
        _alike(c, s, seed)


def test_mutations_decode_alike():
    rnd = random.Random(10)
    base = load(40, 7)
    for _ in range(1200):
        streams = [bytearray(b) for b in base]
        raw = streams[rnd.randrange(2)]
        at = rnd.randrange(len(raw))
        op = rnd.randrange(3)
        if op == 0:
            raw[at] = rnd.randrange(256)
        elif op == 1:
            del raw[at]
        else:
            raw.insert(at, raw[at])
        _alike(bytes(streams[0]), bytes(streams[1]), rnd.choice([None, rnd.randrange(1000)]))


def test_fuzz_seeds_and_their_mutations_decode_alike():
    pool = ft.seeds()["1.0"]
    rnd = random.Random(10)
    for data in pool:
        inp = ft.StreamInput.decode(data)
        _alike(inp.to_server, inp.to_client, rnd.randrange(1000))
    for _ in range(300):
        inp = ft.StreamInput.decode(ft.mutate(rnd.choice(pool), rnd, pool))
        _alike(inp.to_server, inp.to_client, rnd.choice([None, rnd.randrange(1000)]))


def test_performatives_seen_before_give_the_reference_rows_from_the_memo(monkeypatch):
    """The compiled path's memo of the performatives the reference decodes (``stream._MEMO``): the conversation (SASL,
    an aborted message, an error), the fuzz seeds and a load, each decoded twice over from an empty memo in pieces (the
    second time its opens, begins, attaches, detaches, ends and closes are hits) give the reference's frames, errors
    and facts both times; no SASL frame (credentials) and no transfer is remembered; the memo stays bounded."""
    from amqplens.decode.v1_0 import stream

    from tests.accounting import CountedMemo

    memo = CountedMemo()
    monkeypatch.setattr(stream, "_MEMO", memo)
    inputs = [conversation(), load(30, 3)]
    inputs += [(i.to_server, i.to_client) for i in map(ft.StreamInput.decode, ft.seeds()["1.0"])]
    added = []
    for c, s in inputs:
        for seed in (5, 6):
            before = len(stream._MEMO)
            _alike(c, s, seed)
            added.append(len(stream._MEMO) - before)
    assert sum(added[0::2]) > 0 and sum(added[1::2]) == 0  # the second decoding of each: hits only
    assert memo.hits >= 4 * len(inputs), memo.hits
    codes = {cached[1] for cached in stream._MEMO.values()}
    assert codes and codes <= set(stream._MEMO_CODES) and 0x14 not in codes and not codes & {0x40, 0x41, 0x42, 0x43, 0x44}
    monkeypatch.setattr(stream, "MEMO_ENTRIES", 3)
    monkeypatch.setattr(stream, "_MEMO", {})
    for c, s in inputs[:3]:
        _alike(c, s, 7)
        assert len(stream._MEMO) <= 3


def test_a_redacted_name_among_the_hot_keys_is_redacted_alike():
    """``decode.redact_headers`` names matched in the JSON columns: "first" and "link_credit" are keys of the hot rows'
    arguments_json; the compiled path redacts its columns as the reference redacts its dicts."""
    redactor = HeaderRedactor(("first", "link_credit"))
    c, s = load(60, 2)
    ref = _decoder(False)
    _feed(ref, c, s, None)
    want = [redactor.row(r) for r in ref.drain_frames()]
    dec = _decoder(True)
    _feed(dec, c, s, None)
    got = []
    for part in dec.drain_frame_parts():
        if isinstance(part, hotpath.Frame10Batch):
            part.redact(redactor)
            got += part.to_rows()
        else:
            got += [redactor.row(r) for r in part]
    assert got == want
    assert sum('"first":"' in (r["arguments_json"] or "") for r in got) > 10  # redacted values are strings


U = uuid.UUID("12345678-1234-5678-9abc-def012345678")
# every value the compiled path renders, in each of its encodings
SCALARS = [(0x40, None), E.boolean(True), E.boolean(False), (0x56, 1), (0x56, 0), (0x50, 200), (0x60, 65535),
           (0x70, 2**32 - 1), (0x43, None), (0x44, None), (0x53, 7), (0x52, 9), (0x80, 2**64 - 1), (0x80, 2**63),
           (0x51, -128), (0x61, -32768), (0x71, -2**31), (0x81, -2**63), (0x54, -1), (0x55, 127),
           (0x83, 1_700_000_000_000), (0x83, -5), (0x98, U), E.binary(b"\x00\xff"), E.binary(bytes(300)),
           E.string('q"uo\\te'), E.symbol("sym"), E.string(""), E.string("s" * 300), E.symbol("y" * 300)]
# values the compiled path leaves to the reference (which renders them, or judges them malformed)
ODD = [(0x72, 1.5), (0x82, float("nan")), (0x82, -0.0), E.string("naïve"), E.string("line\nbreak"), E.string("\x7f"),
       E.lst(E.uint(1)), E.lst(), E.described(0x24, E.lst()), (0x73, "x"), (0x74, b"\0" * 4), (0xE0, (0x52, [1, 2])),
       (0x56, 2), E.mp([(E.string("in"), E.uint(1))])]


def _sections() -> list[bytes]:
    keys = [E.symbol(f"k{i}") for i in range(len(SCALARS))]
    data = E.section("data", E.binary(b"body"))
    props = E.section("properties", E.lst((0x98, U), E.binary(b"user"), E.string("/q"), E.string('sub"j'), (0x40, None),
                                          (0x80, 2**64 - 1), E.symbol("text/plain"), E.symbol("gzip"), (0x83, 123),
                                          (0x83, 456), E.string("g"), E.uint(5), E.string("rg")))
    rendered = [
        b"",  # no sections: properties_json null
        E.section("header", E.lst(E.boolean(True), (0x50, 4), E.uint(1000), E.boolean(False), E.uint(3))) + data,
        E.section("header", E.lst((0x40, None), (0x50, 9))) + data,
        E.section("header", (0x45, None)) + E.section("amqp-value", E.string("v")),
        E.section("message-annotations", E.mp(zip(keys, SCALARS))) + data,
        E.section("delivery-annotations", E.mp([])) + props + data + data,
        E.section("application-properties", E.mp(zip([E.string(f"a{i}") for i in range(len(SCALARS))], SCALARS)))
        + E.section("amqp-sequence", E.lst(E.uint(1))) + E.section("footer", E.mp([(E.symbol("f"), E.uint(1))])),
        E.section("application-properties", (0xD1, [(E.string("wide"), E.uint(1))])) + E.section("data", (0xB0, b"x" * 9)),
        data + E.section("amqp-value", E.uint(1)) + E.section("footer", E.mp([])),  # body kinds mixed, a footer after
        E.section("properties", (0xD0, [E.string("m")])) + data,
    ]
    left = [E.section("application-properties", E.mp([(E.string("x"), odd)])) + data for odd in ODD] + [
        E.section("application-properties", E.mp([(E.string("a"), E.uint(1)), (E.symbol("a"), E.uint(2))])) + data,
        E.section("application-properties", E.mp([(E.uint(5), E.uint(1))])) + data,  # a key not a string
        E.section("application-properties", E.mp([(E.string(f"k{i}"), E.uint(i)) for i in range(70)])) + data,
        props + props + data,  # a section repeated
        E.encode(E.described(0x79, E.mp([]))) + data,  # a section the spec does not define
        E.encode((0x00, (E.symbol("amqp:properties:list"), E.lst(E.string("m"))))) + data,  # a symbolic descriptor
        E.section("header", E.lst(*[E.boolean(True)] * 6)) + data,  # more fields than the header's
        E.section("data", E.string("not binary")),
        E.section("header", E.lst(E.boolean(True)))[:-1] + data,  # a section cut short
        data + b"\x00",
    ]
    return rendered + left, len(rendered)


def test_message_sections_of_every_kind_decode_alike():
    """One-transfer messages with every section, value type and encoding the compiled path renders as
    properties_json, and those it leaves to the reference (floats, text past ASCII or with control characters,
    lists, described values, repeated keys, other key types, a repeated or unknown section, fields past the spec's,
    broken sections): the same rows either way."""
    payloads, rendered = _sections()
    c = [E.AMQP_HEADER, E.performative("open", container_id="c"), E.performative("begin", next_outgoing_id=0,
                                                                                     incoming_window=9, outgoing_window=9)]
    for i, payload in enumerate(payloads * 2):
        c.append(E.performative("transfer", payload=payload, handle=i % 2, delivery_id=i, delivery_tag=i.to_bytes(2, "big"),
                                message_format=0))
    s = E.AMQP_HEADER + E.performative("open", container_id="s")
    rows = _alike(b"".join(c), s)
    assert sum(r["performative"] == "transfer" for r in rows) == 2 * len(payloads)
    assert _hot_rows(b"".join(c), s) >= 2 * rendered  # not vacuous: the rendered ones came from the compiled path
    assert any(r["properties_json"] and '"k20":1700000000000' in r["properties_json"] for r in rows)


def test_the_renderer_knows_the_trackers_limits_and_names():
    from amqplens.decode.v1_0 import hot_json
    from amqplens.decode.v1_0.messages import MAX_SECTION_BYTES, _SECTION_KEYS

    assert hot_json.MAX_SECTION_BYTES == MAX_SECTION_BYTES
    assert [_SECTION_KEYS[c] for c in range(0x70, 0x79)] == [
        bytes(hotpath._SECTION_NAMES[0][a:b]).decode() for a, b in zip(hotpath._SECTION_NAMES[1], hotpath._SECTION_NAMES[1][1:10])]


def test_the_install_steps_sample_takes_the_compiled_path():
    """``python -m amqplens.decode.v0_9_1.warm`` compiles the 1.0 kernels with ``warm.sample_streams``: every
    transfer, flow and disposition of it is hot (so each kernel runs), and its rows are the reference's."""
    from amqplens.decode.v1_0 import warm

    c, s = warm.sample_streams()
    _alike(c, s, 3)
    assert _hot_rows(c, s) == 3 * 32
    assert warm.warm() >= 0


def test_decoders_in_threads_keep_their_own_buffers():
    """The walk's record rows and the render buffers are one set a thread (the kernels let go of the GIL): decoders
    of different loads in four threads at once give each its reference rows."""
    from concurrent.futures import ThreadPoolExecutor

    loads = [load(80, seed) for seed in range(4)]
    want = [_decode(False, c, s, seed) for seed, (c, s) in enumerate(loads)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: _decode(True, *loads[k], k), range(4)))
    assert got == want


def _frame_start(stream: bytes, frames: int) -> int:
    """The offset of frame number ``frames`` after the protocol header."""
    at = 8
    for _ in range(frames):
        at += int.from_bytes(stream[at:at + 4], "big")
    return at


def _mid_stream(compiled: bool, c: bytes, s: bytes, seed: int) -> tuple:
    """Both directions from their tenth frame on (a capture that starts in the middle of a connection), in pieces."""
    rnd = random.Random(seed)
    dec = _decoder(compiled)
    data = {"to_server": c, "to_client": s}
    pos = {d: _frame_start(data[d], 10) for d in data}
    t = 0
    while any(pos[d] < len(data[d]) for d in data):
        for d in data:
            if pos[d] < len(data[d]):
                n = rnd.choice([64, 300, 2000])
                dec.data(d, pos[d], t, data[d][pos[d]:pos[d] + n])
                pos[d] += n
                t += 17
    dec.close()
    out = dec.drain_frames(), dec.drain_errors(), dec.drain_frame_errors(), dec.connection_facts()
    return out, dec._held


def test_a_capture_started_mid_connection_is_decoded_ahead_too():
    """No protocol header seen (a long-lived connection captured after it opened): the decoder resynchronises on
    the frames, and the compiled path still holds the segments and decodes each direction ahead (a walk per segment
    costs more than the Python decoder: docs/performance.md). The same rows as the reference."""
    c, s = load(150, 4)
    want, _ = _mid_stream(False, c, s, 1)
    got, held = _mid_stream(True, c, s, 1)
    assert got == want
    assert sum(r["performative"] == "transfer" for r in got[0]) > 100
    assert held.ahead > 0


def test_a_window_is_decoded_ahead_again_after_a_barrier_in_its_middle(monkeypatch):
    """A 1.0 connection held whole in small pieces (no drain) with a frame of an unknown performative (descriptor
    0x30) between two transfers halfway: a barrier in the middle of the window. Rounds (``ahead.ROUND_SEGMENTS``
    lowered to 1) feed the barrier's segment alone and decode the rest ahead again: the reference's rows (the odd
    frame an error row in its place), and more windows decoded ahead than without rounds."""
    from amqplens.decode.v0_9_1 import ahead

    c, s = load(150, 5)
    odd = (12).to_bytes(4, "big") + bytes([2, 0, 0, 0]) + bytes([0x00, 0x53, 0x30, 0x45])
    at = _frame_start(c, 60)
    c = c[:at] + odd + c[at:]
    want = _decode(False, c, s, 5)
    decoded_ahead = []
    for round_segments in (10**9, 1):
        monkeypatch.setattr(ahead, "ROUND_SEGMENTS", round_segments)
        dec = _decoder(True)
        _feed(dec, c, s, random.Random(5))
        got = dec.drain_frames(), dec.drain_errors(), dec.drain_frame_errors(), dec.connection_facts()
        assert got == want
        decoded_ahead.append(dec._held.ahead)
    assert sum(r["performative"] == "transfer" for r in got[0]) > 100
    assert any(r["decode_error"] for r in got[0])
    assert decoded_ahead[1] > decoded_ahead[0], decoded_ahead
