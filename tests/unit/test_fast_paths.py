"""Faster equivalents against the plain code they replace (the reference)."""

from __future__ import annotations

import decimal
import json
import random

from amqplens.decode.redaction import DEFAULT_REDACT_HEADERS, HeaderRedactor
from amqplens.decode.common import rows


def _values(rng: random.Random, depth: int = 0):
    kinds = ["int", "str", "bytes", "bool", "none", "float", "decimal"] + (["dict", "list"] if depth < 3 else [])
    k = rng.choice(kinds)
    if k == "int":
        return rng.choice([0, -1, 2**63, rng.randrange(-(2**40), 2**40)])
    if k == "str":
        return "".join(rng.choice(['a', 'é', '"', '\\', '\n', '\x00', '\u2028', '😀', 'K', 'Z']) for _ in range(rng.randrange(6)))
    if k == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(5)))
    if k == "bool":
        return rng.random() < 0.5
    if k == "none":
        return None
    if k == "float":
        return rng.choice([0.5, -1e300, float("nan"), float("inf"), 1.0])
    if k == "decimal":
        return decimal.Decimal(rng.randrange(1000)).scaleb(-rng.randrange(4))
    if k == "dict":
        return {str(_values(rng, 3)) + str(i): _values(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_values(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_to_json_matches_the_json_encoder():
    rng = random.Random(7)
    for _ in range(3000):
        v = _values(rng)
        try:
            want = rows._STRICT(v)
        except ValueError:
            want = rows._STRICT(rows._finite(v))
        assert rows.to_json(v) == want


def test_to_json_uses_one_encoder():
    assert rows._FAST is not rows._STRICT  # the C accelerator is there in every supported Python


def test_redaction_search_matches_the_substring_scan():
    r = HeaderRedactor()
    rng = random.Random(3)
    pieces = [json.dumps(n) for n in DEFAULT_REDACT_HEADERS] + ['"TOKEN"', '"to\u212aen"', '"pass', 'word"', "x", "{", "}", ":", "İ"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(6)))
        low = text.lower()
        assert (r._search(low) is not None) == any(n in low for n in r._needles), text
    empty = HeaderRedactor(())
    assert empty.text('{"password":1}') == '{"password":1}'


def test_batch_functions_switch_to_the_task_pool_unless_one_was_chosen(monkeypatch):
    import pyarrow as pa

    from amqplens.decode import pipeline
    from amqplens.lifecycle import batches

    from amqplens.decode.common.arrow import has_jemalloc

    task_pool = "jemalloc" if has_jemalloc() else "system"
    before = pa.default_memory_pool()
    try:
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        list(pipeline.decode_flows(iter([])))
        assert pa.default_memory_pool().backend_name == "mimalloc"  # the operator's choice stands
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        list(pipeline.decode_flows(iter([])))
        assert pa.default_memory_pool().backend_name == task_pool
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        list(batches.lifecycle_batches(iter([]), pa.struct([]), pa.struct([]), pa.struct([])))
        assert pa.default_memory_pool().backend_name == task_pool
    finally:
        pa.set_memory_pool(before)
