"""Golden wire cases for every constructor code of the AMQP 1.0 type system, and its bounds.

The codes come from the spec's encoding table (types.bare.xml, generated into
``spec.ENCODINGS``); the described-type constructor 0x00 is Part 1 §1.2. Each
case is hex as the spec lays it out (constructor, size/count in network order,
then the value) and the value we expect.
"""

from __future__ import annotations

import math
import struct
import uuid

import pytest

from amqplens.decode.errors import Malformed, Truncated
from amqplens.decode.v1_0 import AmqpDecimal, Described, Symbol, Timestamp, decode, extent
from amqplens.decode.v1_0.spec import ENCODINGS
from amqplens.decode.v1_0.types import MAX_DEPTH, MAX_ELEMENTS, READERS, ZERO_WIDTH_PER_BYTE

UUID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")

GOLDEN = [
    # fixed width 0: the constants
    ("40", None),
    ("41", True),
    ("42", False),
    ("43", 0),
    ("44", 0),
    ("45", []),
    # fixed width 1
    ("50 ff", 255),
    ("51 ff", -1),
    ("52 ff", 255),
    ("53 10", 16),
    ("54 fe", -2),
    ("55 80", -128),
    ("56 00", False),
    ("56 01", True),
    # fixed width 2, 4, 8, 16
    ("60 ffff", 65535),
    ("61 8000", -32768),
    ("70 ffffffff", 4294967295),
    ("71 ffffffff", -1),
    ("72 3fc00000", 1.5),
    ("73 0001f600", "\U0001f600"),
    ("74 22500000", AmqpDecimal("decimal32:22500000")),
    ("80 ffffffffffffffff", 2**64 - 1),
    ("81 8000000000000000", -(2**63)),
    ("82 400921fb54442d18", math.pi),
    ("83 0000018bcfe56800", Timestamp(1_700_000_000_000)),
    ("84 2238000000000001", AmqpDecimal("decimal64:2238000000000001")),
    ("94 22080000000000000000000000000007", AmqpDecimal("decimal128:22080000000000000000000000000007")),
    ("98 0f1e2d3c4b5a69788796a5b4c3d2e1f0", UUID),
    # variable width
    ("a0 03 010203", b"\x01\x02\x03"),
    ("a0 00", b""),
    ("a1 06 68c3a96c6c6f", "h\u00e9llo"),
    ("a3 03 666f6f", Symbol("foo")),
    ("b0 00000002 abcd", b"\xab\xcd"),
    ("b1 00000002 6869", "hi"),
    ("b3 00000003 626172", Symbol("bar")),
    # compound: size covers the count and the elements
    ("c0 04 02 41 5201", [True, 1]),
    ("c0 01 00", []),
    ("c1 06 02 a30161 5207", {"a": 7}),
    ("c1 01 00", {}),
    ("d0 00000008 00000002 a10178 43", ["x", 0]),
    ("d1 00000006 00000002 44 41", {0: True}),
    ("c0 06 02 c0020142 45", [[False], []]),
    # arrays: one element constructor, then the elements without theirs
    ("e0 05 03 52 010203", [1, 2, 3]),
    ("e0 02 00 a3", []),
    ("e0 02 02 40", [None, None]),
    ("e0 09 02 a3 03616263 02 6465", [Symbol("abc"), Symbol("de")]),
    ("f0 0000000c 00000002 a1 026869 03616263", ["hi", "abc"]),
    ("e0 0a 02 e0 03 01 52 07 03 01 52 08", [[7], [8]]),  # an array of arrays
    ("e0 08 02 00 a3 01 78 52 01 02", [Described(Symbol("x"), 1), Described(Symbol("x"), 2)]),  # described elements
    ("e0 05 02 00 53 29 45", [Described(0x29, []), Described(0x29, [])]),  # described list0 elements: 0 bytes each
    # described types: numeric and symbolic descriptors
    ("00 53 24 45", Described(0x24, [])),
    ("00 80 0000000000000024 45", Described(0x24, [])),
    ("00 a3 12 616d71703a61636365707465643a6c697374 45", Described(Symbol("amqp:accepted:list"), [])),
    ("00 53 75 a0 02 6869", Described(0x75, b"hi")),
    ("00 53 77 00 53 24 45", Described(0x77, Described(0x24, []))),
    ("00 a3 03 666f6f 00 a3 03 626172 40", Described(Symbol("foo"), Described(Symbol("bar"), None))),
]


def _bytes(text: str) -> memoryview:
    return memoryview(bytes.fromhex(text.replace(" ", "")))


@pytest.mark.parametrize("text,value", GOLDEN, ids=[h.split()[0] + "_" + str(i) for i, (h, _) in enumerate(GOLDEN)])
def test_golden(text, value):
    buf = _bytes(text)
    got, end = decode(buf, 0)
    assert end == len(buf) == extent(buf, 0)
    assert type(got) is type(value) or (value is None and got is None)
    assert got == value
    if isinstance(value, float):
        assert struct.pack(">d", got) == struct.pack(">d", value)


def test_every_code_of_the_spec_table_has_a_golden_case():
    covered = {bytes.fromhex(h.replace(" ", ""))[0] for h, _ in GOLDEN}
    assert set(ENCODINGS) | {0x00} <= covered
    assert len(ENCODINGS) == 39  # types.bare.xml as of 1.0


def _smallest_body(category: str, width: int) -> bytes:
    """The shortest value of an encoding, after its constructor: zeros, an empty size, an empty compound/array."""
    if category in ("fixed", "variable"):
        return b"\x00" * width
    if category == "compound":
        return width.to_bytes(width, "big") + b"\x00" * width  # size = just the count, count 0
    return (width + 1).to_bytes(width, "big") + b"\x00" * width + b"\x40"  # count 0, element constructor null


def test_every_code_works_as_an_array_element_constructor():
    for code, (_, _, category, width) in ENCODINGS.items():
        body = bytes([code]) + _smallest_body(category, width) * 2
        arr = b"\xe0" + bytes([1 + len(body)]) + b"\x02" + body
        value, end = decode(memoryview(arr), 0)
        assert end == len(arr) == extent(memoryview(arr), 0) and len(value) == 2, hex(code)


@pytest.mark.parametrize("text,value", GOLDEN, ids=[h.split()[0] + "_" + str(i) for i, (h, _) in enumerate(GOLDEN)])
def test_every_prefix_is_truncated(text, value):
    buf = bytes(_bytes(text))
    for n in range(len(buf)):
        with pytest.raises(Truncated):
            decode(memoryview(buf[:n]), 0)


def test_unknown_constructors():
    known = set(ENCODINGS) | {0x00}
    for code in range(256):
        if code not in known:
            with pytest.raises(Malformed):
                decode(memoryview(bytes([code]) + b"\x00" * 16), 0)
            with pytest.raises(Malformed):
                extent(memoryview(bytes([code]) + b"\x00" * 16), 0)
    assert len(READERS) == 256


@pytest.mark.parametrize(
    "text,why",
    [
        ("56 02", "boolean octet"),
        ("73 0000d800", "not a Unicode scalar"),
        ("73 00110000", "not a Unicode scalar"),
        ("c0 02 02 41", "cannot hold"),  # two elements in one byte
        ("c0 02 01 70 00000001", "elements end at"),  # the element overruns the list's size
        ("c0 03 01 41 41", "elements end at"),  # a byte left over inside the list
        ("c1 02 01 41", "odd number"),
        ("c0 00", "cannot hold its"),  # a size too small for the count
        ("e0 03 02 70 00", "cannot hold"),
        ("e0 01 02", "without an element constructor"),
        ("e0 06 01 00 53 01 00 40", "described twice"),
        ("d0 00000004 ffffffff", "over the limit"),  # the 2^32-element claim: an error, no allocation
        ("f0 00000005 ffffffff 40", "over the limit"),  # 2^32 zero-width nulls
    ],
)
def test_malformed(text, why):
    with pytest.raises(Malformed, match=why):
        decode(_bytes(text), 0)


def test_sizes_past_the_buffer_are_truncated_not_allocated():
    for text in ("b0 ffffffff 00", "b1 fffffff0", "d0 ffffffff 00000001 40", "f0 7fffffff 7fffffff 40", "a0 ff 00"):
        with pytest.raises(Truncated):
            decode(_bytes(text), 0)
        extent(_bytes(text), 0)  # extent only reads the size: it says where the value would end


def _nested_lists(depth: int) -> bytes:
    value = b"\x45"
    for _ in range(depth):
        value = b"\xd0" + struct.pack(">II", len(value) + 4, 1) + value
    return value


def test_nesting_is_bounded():
    ok, _ = decode(memoryview(_nested_lists(MAX_DEPTH - 1)), 0)
    for _ in range(MAX_DEPTH - 1):
        ok = ok[0]
    assert ok == []
    for deep in (_nested_lists(MAX_DEPTH + 1), _nested_lists(5000), b"\x00\x53\x01" * 5000 + b"\x40"):
        with pytest.raises(Malformed, match="nested deeper"):
            decode(memoryview(deep), 0)
    with pytest.raises(Malformed, match="nested deeper"):
        extent(memoryview(b"\x00" * 5000), 0)
    body = struct.pack(">II", 5, 1) + b"\x40"  # an array32 body: one null
    for _ in range(200):  # an array of (an array of ...) arrays, one element each
        body = struct.pack(">II", 5 + len(body), 1) + b"\xf0" + body
    with pytest.raises(Malformed, match="nested deeper"):
        decode(memoryview(b"\xf0" + body), 0)


def test_counts_are_bounded():
    assert MAX_ELEMENTS == 1 << 20
    with pytest.raises(Malformed, match="over the limit"):
        decode(memoryview(b"\xf0" + struct.pack(">II", (MAX_ELEMENTS + 1) * 2 + 5, MAX_ELEMENTS + 1) + b"\x60" + bytes(2 * MAX_ELEMENTS + 2)), 0)
    # 0-width elements cost only their count: at most ZERO_WIDTH_PER_BYTE per byte of the array
    size = 5
    value, _ = decode(memoryview(b"\xf0" + struct.pack(">II", size, ZERO_WIDTH_PER_BYTE * size) + b"\x40"), 0)
    assert value == [None] * (ZERO_WIDTH_PER_BYTE * size)
    with pytest.raises(Malformed, match="cannot hold"):
        decode(memoryview(b"\xf0" + struct.pack(">II", size, ZERO_WIDTH_PER_BYTE * size + 1) + b"\x40"), 0)
    # so a list of many such arrays stays proportional to its bytes
    one = b"\xe0\x02\x10\x45"  # 16 empty lists in a 2-byte array
    value, _ = decode(memoryview(b"\xd0" + struct.pack(">II", 4 + 4 * 1000, 1000) + one * 1000), 0)
    assert sum(len(v) for v in value) == 16 * 1000


def test_unhashable_map_keys_are_frozen():
    text = "c1 09 02 c0 03 01 52 01 a1 01 78"  # {[1]: "x"}
    value, _ = decode(_bytes(text), 0)
    assert value == {(1,): "x"}


def test_invalid_utf8_is_kept_escaped():
    value, _ = decode(_bytes("a1 02 ff41"), 0)
    assert value == "\\xffA"


def test_decoding_at_an_offset_and_within_a_larger_buffer():
    buf = _bytes("ffff 52 07 a1 01 78 ffff")
    v, end = decode(buf, 2)
    assert (v, end) == (7, 4)
    v, end = decode(buf, end)
    assert (v, end) == ("x", 7)
