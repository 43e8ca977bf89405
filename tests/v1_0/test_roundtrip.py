"""Property tests: encode (tests/v1_0/encoder.py) then decode gives the value back, for nested values
of every encoding; ``extent`` agrees with ``decode``; and through the stream decoder an arbitrary
amqp-value body is hashed exactly."""

from __future__ import annotations

import hashlib
import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.decode.v1_0 import decode, decode_streams, extent
from amqplens.decode.v1_0.composites import to_json

from . import encoder as E

SMALL = {0x50: (0, 255), 0x51: (-128, 127), 0x52: (0, 255), 0x53: (0, 255), 0x54: (-128, 127), 0x55: (-128, 127),
         0x60: (0, 2**16 - 1), 0x61: (-(2**15), 2**15 - 1), 0x70: (0, 2**32 - 1), 0x71: (-(2**31), 2**31 - 1),
         0x80: (0, 2**64 - 1), 0x81: (-(2**63), 2**63 - 1), 0x83: (-(2**63), 2**63 - 1)}  # fmt: skip
ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=40)
CHARS = st.characters(blacklist_categories=("Cs",))


def payloads(code: int):
    """Strategy for what an encoding carries (without its constructor)."""
    if code in SMALL:
        lo, hi = SMALL[code]
        return st.integers(lo, hi)
    return {
        0x56: st.booleans(),
        0x72: st.floats(width=32, allow_nan=False),
        0x82: st.floats(allow_nan=False),
        0x73: CHARS,
        0x74: st.binary(min_size=4, max_size=4),
        0x84: st.binary(min_size=8, max_size=8),
        0x94: st.binary(min_size=16, max_size=16),
        0x98: st.uuids(),
        0xA0: st.binary(max_size=255),
        0xB0: st.binary(max_size=300),
        0xA1: st.text(CHARS, max_size=60).filter(lambda s: len(s.encode()) < 256),
        0xB1: st.text(CHARS, max_size=60),
        0xA3: ASCII,
        0xB3: ASCII,
    }[code]


PAYLOAD_CODES = sorted(set(SMALL) | {0x56, 0x72, 0x82, 0x73, 0x74, 0x84, 0x94, 0x98, 0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3})
CONSTANTS = st.sampled_from([(c, None) for c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45)])
SCALARS = st.one_of(CONSTANTS, st.sampled_from(PAYLOAD_CODES).flatmap(lambda c: payloads(c).map(lambda p: (c, p))))
KEYS = st.one_of(
    st.sampled_from(PAYLOAD_CODES).filter(lambda c: c not in (0x72, 0x82)).flatmap(lambda c: payloads(c).map(lambda p: (c, p))),
    CONSTANTS.filter(lambda n: n[0] != 0x45),
)
DESCRIPTORS = st.one_of(st.integers(0, 2**64 - 1).map(E.ulong), ASCII.map(E.symbol))


def _fits8(nodes_bytes: int, count: int) -> bool:
    return nodes_bytes + 1 <= 255 and count <= 255


def _list(wide, nodes):
    body = sum(len(E.encode(n)) for n in nodes)
    return (0xD0 if wide or not _fits8(body, len(nodes)) else 0xC0, nodes)


def _map(wide, pairs):
    body = sum(len(E.encode(k)) + len(E.encode(v)) for k, v in pairs)
    return (0xD1 if wide or not _fits8(body, 2 * len(pairs)) else 0xC1, pairs)


ARRAY_ELEMENTS = st.sampled_from([0x40, 0x41, 0x43, 0x45] + PAYLOAD_CODES)


@st.composite
def arrays(draw):
    code = draw(ARRAY_ELEMENTS)
    items = draw(st.lists(payloads(code) if code in PAYLOAD_CODES else st.none(), max_size=8))
    element = (draw(DESCRIPTORS), code) if draw(st.booleans()) else code
    body = len(E.encode_body(0xF0, (element, items)))
    return (0xF0 if draw(st.booleans()) or body - 8 + 2 > 255 or len(items) > 255 else 0xE0, (element, items))


def extend(children):
    return st.one_of(
        st.tuples(st.booleans(), st.lists(children, max_size=6)).map(lambda t: _list(*t)),
        st.tuples(st.booleans(), st.lists(st.tuples(KEYS, children), max_size=5)).map(lambda t: _map(*t)),
        st.tuples(DESCRIPTORS, children).map(lambda t: (0x00, t)),
    )


VALUES = st.recursive(st.one_of(SCALARS, arrays()), extend, max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_round_trip(node):
    raw = E.encode(node)
    value, end = decode(memoryview(raw), 0)
    assert end == len(raw) == extent(memoryview(raw), 0)
    assert value == E.expected(node)
    json.loads(to_json(value))  # every value renders as strict JSON


@settings(max_examples=100, deadline=None)
@given(VALUES, st.binary(max_size=8))
def test_round_trip_inside_a_larger_buffer(node, trailer):
    raw = b"\xff\xfe" + E.encode(node) + trailer
    value, end = decode(memoryview(raw), 2)
    assert end == len(raw) - len(trailer)
    assert value == E.expected(node)


@settings(max_examples=100, deadline=None)
@given(VALUES, st.integers(1, 200))
def test_amqp_value_body_hashed_across_transfers(node, cut):
    """A message whose body is any amqp-value, split into two transfers anywhere."""
    payload = E.section("application-properties", E.mp([(E.string("k"), E.uint(1))])) + E.section("amqp-value", node)
    cut = min(cut, len(payload))
    c = (
        E.AMQP_HEADER
        + E.performative("transfer", payload=payload[:cut], handle=0, delivery_id=0, delivery_tag=b"x", more=True)
        + E.performative("transfer", payload=payload[cut:], handle=0)
    )
    frames, errors, _ = decode_streams(c)
    assert errors == []
    last = frames[-1]
    assert last["decode_error"] is None
    assert last["body_sha256"] == hashlib.sha256(E.encode(node)).hexdigest()
    assert last["body_size"] == len(E.encode(node))
    assert json.loads(last["properties_json"]) == {"application_properties": {"k": 1}, "body": ["amqp-value"]}


def test_uuid_and_symbol_render_as_strings():
    u = uuid.UUID(int=5)
    assert json.loads(to_json({E.expected((0xA3, "k")): E.expected((0x98, u))})) == {"k": str(u)}
