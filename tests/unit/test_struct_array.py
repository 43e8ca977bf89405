"""pipeline.to_struct_array: only the fields some row has are converted; the result equals pyarrow's own."""

from __future__ import annotations

import pyarrow as pa

from amqplens.decode.common.arrow import to_struct_array

TYPE = pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.bool_()), ("d", pa.binary()), ("e", pa.int32())])


def test_rows_of_two_shapes_in_one_batch_equal_pyarrows_conversion():
    rows = [{"a": 1, "b": "x"}, {"c": True, "d": b"\x00", "extra": 5}, {"a": None, "b": "y"}]
    got = to_struct_array(rows, TYPE)
    assert got.type == TYPE
    assert got.equals(pa.array(rows, type=TYPE))
    assert got.to_pylist()[1] == {"a": None, "b": None, "c": True, "d": b"\x00", "e": None}
    assert got.field("e").null_count == 3


def test_every_field_present_and_no_rows():
    rows = [{"a": 1, "b": "x", "c": False, "d": b"", "e": 3}]
    assert to_struct_array(rows, TYPE).equals(pa.array(rows, type=TYPE))
    assert len(to_struct_array([], TYPE)) == 0


def test_a_value_the_type_cannot_hold_becomes_null_and_the_rest_stays():
    # bad input: an int over int32, a str where an int belongs, an int where binary belongs
    rows = [{"a": 1, "e": 1 << 40}, {"a": "two", "b": "ok"}, {"d": 7, "b": "z"}]
    got = to_struct_array(rows, TYPE).to_pylist()
    assert got[0]["a"] == 1 and got[1]["b"] == "ok" and got[2]["b"] == "z"
    assert got[0]["e"] is None and got[1]["a"] is None and got[2]["d"] is None
