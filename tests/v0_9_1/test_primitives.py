"""Primitive readers and field tables: every type letter, both letter readings, the bounds."""

from __future__ import annotations

import decimal
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.decode.errors import DecodeError, Malformed, Truncated
from amqplens.decode.v0_9_1 import primitives as p
from amqplens.decode.v0_9_1.fieldtable import MAX_DEPTH, FieldTableReader

from .encoder import Encoder, Typed

RABBIT = FieldTableReader("rabbitmq")
SPEC = FieldTableReader("spec")


def mv(b: bytes) -> memoryview:
    return memoryview(b)


@pytest.mark.parametrize(
    "reader, data, value, end",
    [
        (p.read_octet, b"\xff", 255, 1),
        (p.read_short, b"\x12\x34", 0x1234, 2),
        (p.read_long, b"\xff\xff\xff\xfe", 0xFFFFFFFE, 4),
        (p.read_longlong, b"\x80" + b"\0" * 7, 1 << 63, 8),
        (p.read_shortstr, b"\x03abc", "abc", 4),
        (p.read_shortstr, b"\x02\xff\xfe", b"\xff\xfe", 3),  # not UTF-8: kept as bytes
        (p.read_longstr, b"\0\0\0\x02hi", "hi", 6),
        (p.read_longstr_bytes, b"\0\0\0\x01\x00", b"\x00", 5),
        (p.read_content, b"\x01\0\0\0\x01r", {"reference": b"r"}, 6),
    ],
)
def test_readers(reader, data, value, end):
    assert reader(mv(data + b"tail"), 0) == (value, end)


@pytest.mark.parametrize(
    "reader, data",
    [
        (p.read_octet, b""),
        (p.read_short, b"\x01"),
        (p.read_long, b"\x01\x02\x03"),
        (p.read_longlong, b"\0" * 7),
        (p.read_shortstr, b"\x05abc"),
        (p.read_longstr, b"\xff\xff\xff\xff" + b"x" * 10),  # claims 4 GiB: an error, no allocation
        (p.read_longstr, b"\0\0"),
    ],
)
def test_readers_raise_truncated_past_the_end(reader, data):
    with pytest.raises(Truncated):
        reader(mv(data), 0)


def test_bits_share_an_octet_low_bit_first():
    assert p.read_bits(mv(b"\x05"), 0, 3) == ((True, False, True), 1)
    with pytest.raises(Malformed):
        p.read_bits(mv(b"\xff"), 0, 9)


def _table(entries: bytes) -> memoryview:
    return mv(struct.pack(">I", len(entries)) + entries)


def test_every_letter_rabbitmq_reading():
    e = Encoder(letters="rabbitmq")
    cases = {
        "t": (Typed("t", True), True),
        "b": (Typed("b", -5), -5),
        "B": (Typed("B", 250), 250),
        "U": (Typed("U", -300), -300),
        "u": (Typed("u", 65000), 65000),
        "I": (Typed("I", -(2**31)), -(2**31)),
        "i": (Typed("i", 2**32 - 1), 2**32 - 1),
        "L": (Typed("L", -(2**63)), -(2**63)),
        "l": (Typed("l", -1), -1),
        "f": (Typed("f", 1.5), 1.5),
        "d": (Typed("d", -2.25), -2.25),
        "D": (Typed("D", decimal.Decimal("12.34")), decimal.Decimal("12.34")),
        "s": (Typed("s", -2), -2),
        "S": (Typed("S", "long"), "long"),
        "x": (Typed("x", b"\x00\xff"), b"\x00\xff"),
        "A": (Typed("A", [1, "a", None]), [1, "a", None]),
        "T": (Typed("T", 1700000000), 1700000000),
        "F": (Typed("F", {"n": {"m": True}}), {"n": {"m": True}}),
        "V": (Typed("V", None), None),
    }
    table = {k: v for k, (v, _) in cases.items()}
    expected = {k: v for k, (_, v) in cases.items()}
    got, end = RABBIT.read_table(mv(e.table(table)), 0)
    assert got == expected
    assert end == len(e.table(table))


def test_the_letters_rabbitmq_and_the_spec_disagree_on():
    # 's': RabbitMQ short int (int16), spec short string
    raw_s = _table(b"\x01k" + b"s" + b"\xff\xfe")
    assert RABBIT.read_table(raw_s, 0)[0] == {"k": -2}
    with pytest.raises(DecodeError):  # as a shortstr, length 0xff runs past the table
        SPEC.read_table(raw_s, 0)
    raw_str = _table(b"\x01k" + b"s" + b"\x02hi")
    assert SPEC.read_table(raw_str, 0)[0] == {"k": "hi"}
    # 'l': RabbitMQ signed 64, spec unsigned 64
    raw_l = _table(b"\x01k" + b"l" + b"\xff" * 8)
    assert RABBIT.read_table(raw_l, 0)[0] == {"k": -1}
    assert SPEC.read_table(raw_l, 0)[0] == {"k": 2**64 - 1}


def test_unknown_letter_is_malformed():
    with pytest.raises(Malformed, match="unknown field type"):
        RABBIT.read_table(_table(b"\x01kZ\x00"), 0)


def test_duplicate_names_keep_the_first():
    assert RABBIT.read_table(_table(b"\x01kI\0\0\0\x01\x01kI\0\0\0\x02"), 0)[0] == {"k": 1}


def test_entry_overrunning_its_table_is_an_error():
    # the table says 6 bytes, the long string inside claims 100
    with pytest.raises(Truncated):
        RABBIT.read_table(mv(struct.pack(">I", 6) + b"\x01kS\0\0\0\x64" + b"x" * 200), 0)


def _nested(depth: int, letter: str = "F") -> bytes:
    """A table whose one value nests ``depth`` tables (or arrays) deep."""
    body = b""
    for _ in range(depth):
        body = (b"\x01nF" if letter == "F" else b"A") + struct.pack(">I", len(body)) + body
    if letter == "A":
        body = b"\x01n" + body
    return struct.pack(">I", len(body)) + body


def test_nesting_depth_is_bounded():
    RABBIT.read_table(mv(_nested(MAX_DEPTH - 1)), 0)
    with pytest.raises(Malformed, match="nested deeper"):
        RABBIT.read_table(mv(_nested(10_000)), 0)
    with pytest.raises(Malformed, match="nested deeper"):
        RABBIT.read_table(mv(_nested(10_000, "A")), 0)


def test_element_count_is_bounded():
    small = FieldTableReader(max_elements=100)
    arr = b"A" + struct.pack(">I", 101) + b"V" * 101
    with pytest.raises(Malformed, match="more than 100"):
        small.read_table(_table(b"\x01a" + arr), 0)


def test_amqplain_entries_without_length_prefix():
    e = Encoder()
    assert RABBIT.read_entries(mv(e.table_entries({"LOGIN": "u", "PASSWORD": "p"}))) == {"LOGIN": "u", "PASSWORD": "p"}


# -- property tests ---------------------------------------------------------------------

_key = st.text(min_size=1, max_size=12).filter(lambda s: len(s.encode()) < 256)
_scalars = st.one_of(
    st.builds(lambda v: (Typed("t", v), v), st.booleans()),
    st.builds(lambda v: (Typed("b", v), v), st.integers(-128, 127)),
    st.builds(lambda v: (Typed("B", v), v), st.integers(0, 255)),
    st.builds(lambda v: (Typed("U", v), v), st.integers(-(2**15), 2**15 - 1)),
    st.builds(lambda v: (Typed("u", v), v), st.integers(0, 2**16 - 1)),
    st.builds(lambda v: (Typed("I", v), v), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda v: (Typed("i", v), v), st.integers(0, 2**32 - 1)),
    st.builds(lambda v: (Typed("L", v), v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: (Typed("f", v), v), st.floats(width=32, allow_nan=False)),
    st.builds(lambda v: (Typed("d", v), v), st.floats(allow_nan=False)),
    st.builds(
        lambda v, s: (Typed("D", decimal.Decimal(v).scaleb(-s)), decimal.Decimal(v).scaleb(-s)),
        st.integers(0, 2**32 - 1),
        st.integers(0, 20),
    ),
    st.builds(lambda v: (Typed("S", v), v), st.text(max_size=20)),
    st.builds(lambda v: (Typed("x", v), v), st.binary(max_size=20)),
    st.builds(lambda v: (Typed("T", v), v), st.integers(0, 2**64 - 1)),
    st.just((Typed("V", None), None)),
)
_rabbit_only = st.one_of(
    st.builds(lambda v: (Typed("s", v), v), st.integers(-(2**15), 2**15 - 1)),
    st.builds(lambda v: (Typed("l", v), v), st.integers(-(2**63), 2**63 - 1)),
)
_spec_only = st.one_of(
    st.builds(lambda v: (Typed("s", v), v), st.text(max_size=20).filter(lambda s: len(s.encode()) < 256)),
    st.builds(lambda v: (Typed("l", v), v), st.integers(0, 2**64 - 1)),
)


def _tree(leaves):
    def extend(children):
        tables = st.dictionaries(_key, children, max_size=5).map(
            lambda d: (Typed("F", {k: t for k, (t, _) in d.items()}), {k: v for k, (_, v) in d.items()})
        )
        arrays = st.lists(children, max_size=5).map(
            lambda items: (Typed("A", [t for t, _ in items]), [v for _, v in items])
        )
        return st.one_of(tables, arrays)

    return st.dictionaries(_key, st.recursive(leaves, extend, max_leaves=20), max_size=8)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(_tree(st.one_of(_scalars, _rabbit_only)))
def test_field_table_round_trip_rabbitmq(tree):
    typed = {k: t for k, (t, _) in tree.items()}
    expected = {k: v for k, (_, v) in tree.items()}
    raw = Encoder(letters="rabbitmq").table(typed)
    got, end = RABBIT.read_table(mv(raw + b"\xce"), 0)
    assert end == len(raw)
    assert _same(got, expected)


@settings(max_examples=200, deadline=None)
@given(_tree(st.one_of(_scalars, _spec_only)))
def test_field_table_round_trip_spec(tree):
    typed = {k: t for k, (t, _) in tree.items()}
    expected = {k: v for k, (_, v) in tree.items()}
    raw = Encoder(letters="spec").table(typed)
    got, end = SPEC.read_table(mv(raw), 0)
    assert end == len(raw)
    assert _same(got, expected)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_a_table_raise_only_decode_errors(data):
    for reader in (RABBIT, SPEC):
        try:
            reader.read_table(mv(data), 0)
        except DecodeError:
            pass
