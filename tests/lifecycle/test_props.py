"""The deliveries' properties read from a batch of JSON texts by the compiled scan (amqplens/lifecycle/props.py) are what
``json.loads`` per text gives (``Delivery.row``'s reading), for 0-9-1 and 1.0 texts: canonical ones as the codecs
write them, and texts with every odd value tried: numbers where strings go (message ids as numbers, floats,
exponents, booleans, 2^31 and 2^63, negatives), durable not a boolean, first-acquirer false, delivery counts,
null and missing sections, sections that are not objects, keys given twice, escapes and non-ASCII text, empty
texts, invalid JSON, a top level that is a list or a string, raw line breaks inside strings."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from amqplens.lifecycle import props
from amqplens.lifecycle.records import properties_0_9_1, properties_1_0

ODD = (None, True, False, 0, 1, -1, 7, 2.0, 1e3, 1 << 31, (1 << 31) - 1, 1 << 63, "x", "é\"\\", "", [1], {"a": 1})


def _canonical(rng: random.Random, dialect: str) -> str:
    mid = {"message_id": f"m-{rng.randrange(10**6)}", "content_type": "application/json"}
    if rng.random() < 0.5:
        mid["correlation_id"] = f"c{rng.randrange(100)}"
    if dialect == "0-9-1":
        return json.dumps({**mid, "delivery_mode": rng.choice((1, 2)), "priority": rng.randrange(10)}, separators=(",", ":"))
    header = rng.choice(({}, {"durable": True}, {"durable": False, "priority": 4}, {"first_acquirer": False},
                         {"delivery_count": 2}))
    doc = {"header": header, "properties": mid, "application_properties": {"k": 1}, "body": ["data"]}
    if rng.random() < 0.2:
        del doc["header"]
    return json.dumps(doc, separators=(",", ":"))


def _odd(rng: random.Random, dialect: str) -> str:
    text = _canonical(rng, dialect)
    doc = json.loads(text)
    kind = rng.randrange(8)
    if kind == 0:  # a value of another type
        target = doc if dialect == "0-9-1" else doc.get(rng.choice(("header", "properties"))) or doc
        target[rng.choice(("message_id", "correlation_id", "content_type", "delivery_mode", "priority", "durable",
                           "first_acquirer", "delivery_count"))] = rng.choice(ODD)
        return json.dumps(doc)
    if kind == 1:  # a section that is not an object, or null
        doc[rng.choice(("header", "properties"))] = rng.choice((None, [1], "s", 3))
        return json.dumps(doc)
    if kind == 2:  # a key twice
        return text[:-1] + ',"message_id":"again"}' if dialect == "0-9-1" else text.replace(
            '"properties":{', '"properties":{"message_id":"twice",', 1)
    if kind == 3:
        return rng.choice(("", "[1,2]", '"text"', "{bad", "null", "{}", " {} "))
    if kind == 4:  # a raw line break in a string
        return text.replace("m-", "m\n-", 1)
    if kind == 5:  # escapes and non-ASCII text
        return text.replace("m-", "m\\u00e9\\\"\\\\-", 1)
    if kind == 6:
        return json.dumps(doc, indent=None, separators=(", ", ": "))
    return text


def _compare(texts: list, dialect: str) -> bool:
    parse = properties_1_0 if dialect == "1.0" else properties_0_9_1
    got = props.columns(pa.array(texts, pa.string()), dialect)
    want = props.reference(texts, parse)
    for g, w in zip(got, want):
        assert g.to_pylist() == w.to_pylist(), (texts, g, w)
    out, _ = props.scan(pa.array(sorted({t for t in texts if t}), pa.string()), dialect)
    return not out[:, 0].any()  # the scan read every text (none left to the reference)


@pytest.mark.parametrize("dialect", ["0-9-1", "1.0"])
def test_canonical_texts_are_read_by_arrow_alike(dialect):
    rng = random.Random(0)
    texts = [_canonical(rng, dialect) for _ in range(500)] + [None, None]
    texts += texts[:50]  # repeated
    assert _compare(texts, dialect)  # and the scan read them all


@pytest.mark.parametrize("dialect", ["0-9-1", "1.0"])
@pytest.mark.parametrize("seed", range(12))
def test_odd_texts_are_read_alike(dialect, seed):
    rng = random.Random(seed)
    texts = [_canonical(rng, dialect) for _ in range(20)]
    texts += [_odd(rng, dialect) for _ in range(rng.choice((1, 3)))]
    rng.shuffle(texts)
    _compare(texts, dialect)


@pytest.mark.parametrize("dialect", ["0-9-1", "1.0"])
def test_each_odd_value_alone_is_read_alike(dialect):
    fields = ("message_id", "correlation_id", "content_type", "delivery_mode", "priority") if dialect == "0-9-1" else (
        "header.durable", "header.priority", "header.first_acquirer", "header.delivery_count", "properties.message_id")
    arrow_read = 0
    for field in fields:
        for value in ODD:
            doc: dict = {"message_id": "m"} if dialect == "0-9-1" else {"header": {}, "properties": {"message_id": "m"}}
            target = doc
            *path, name = field.split(".")
            for p in path:
                target = target[p]
            target[name] = value
            arrow_read += _compare([json.dumps(doc), json.dumps(doc), None, ""], dialect)
    assert arrow_read >= 10  # the scan does not leave every odd text to the reference


@pytest.mark.parametrize("dialect", ["0-9-1", "1.0"])
def test_texts_damaged_byte_by_byte_are_read_alike(dialect):
    """Characters deleted, inserted (JSON's own: braces, brackets, quotes, commas, colons, backslashes, digits,
    signs, exponents, letters of the literals, control characters, non-ASCII) or doubled: whatever the scan accepts
    must be what json.loads reads, whatever json.loads rejects the scan must leave to the reference."""
    rng = random.Random(7)
    alphabet = '{}[]",:\\ 0123456789-+.eEtrufalsn\t\x01é'
    texts = []
    for _ in range(3000):
        text = _canonical(rng, dialect)
        for _ in range(rng.choice((1, 1, 2, 3))):
            i = rng.randrange(len(text))
            kind = rng.randrange(3)
            if kind == 0:
                text = text[:i] + text[i + 1:]
            elif kind == 1:
                text = text[:i] + rng.choice(alphabet) + text[i:]
            else:
                j = min(len(text), i + rng.randrange(1, 12))
                text = text[:j] + text[i:j] + text[j:]
        texts.append(text)
    _compare(texts, dialect)
    out, _ = props.scan(pa.array(sorted(set(t for t in texts if t)), pa.string()), dialect)
    assert 0.2 < out[:, 0].mean() < 0.95  # many damaged texts still valid JSON and read by the scan, many not
