"""The compiled method and property readers (``frames._compile_fast``) against the generic ones, the reference.

Payloads: every method and content-header frame of the real-broker and public 0-9-1 captures, and
for each of them every truncation and single-octet corruptions, so both the well-formed path and
the give-up-and-decode-again path are compared. Every dialect and both field-table readings.
"""

from __future__ import annotations

import pathlib
import random

import pytest

from amqplens.decode.capture import read_split
from amqplens.decode.tcp import TcpReassembler
from amqplens.decode.v0_9_1.fieldtable import RABBITMQ, SPEC
from amqplens.decode.v0_9_1.frames import SPECS, DialectTables

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    [p for p in (ROOT / "tests" / "data" / "broker").glob("*.pcap") if not p.name.startswith("amqp10")]
    + list((ROOT / "tests" / "data" / "public").glob("deepflow_amqp091_*.pcap"))
)


class _Collect:
    def __init__(self, info) -> None:
        self.streams = {"to_server": bytearray(), "to_client": bytearray()}

    def data(self, direction, offset, ts_us, data) -> None:
        self.streams[direction] += data

    def gap(self, direction, offset, length, ts_us) -> None:
        pass

    def close(self, connection) -> None:
        pass


def _payloads() -> tuple[list[bytes], list[bytes]]:
    """(method payloads, content-header payloads) of every fixture stream, cut by the frame sizes."""
    consumers = []

    def factory(info):
        consumers.append(_Collect(info))
        return consumers[-1]

    methods, headers = [], []
    for path in CAPTURES:
        consumers.clear()
        r = TcpReassembler("cap", consumer_factory=factory)
        for cols in read_split(str(path), "cap", 0, path.stat().st_size):
            r.feed_columns(cols)
        r.finish()
        for c in consumers:
            for stream in c.streams.values():
                buf = bytes(stream)
                pos = 8 if buf[:4] == b"AMQP" else 0
                while pos + 7 <= len(buf):
                    ftype, size = buf[pos], int.from_bytes(buf[pos + 3 : pos + 7], "big")
                    if pos + 8 + size > len(buf) or buf[pos + 7 + size] != 0xCE:
                        break
                    payload = buf[pos + 7 : pos + 7 + size]
                    (methods if ftype == 1 else headers if ftype == 2 else []).append(payload)
                    pos += size + 8
    return methods, headers


METHODS, HEADERS = _payloads()


def _variants(payload: bytes, rng: random.Random) -> list[bytes]:
    out = [payload] + [payload[:i] for i in range(len(payload))]
    for _ in range(8):
        if payload:
            b = bytearray(payload)
            b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
    out.append(payload + b"\x00")
    return out


def test_fixtures_have_frames():
    assert len(METHODS) > 200 and len(HEADERS) > 20


@pytest.mark.parametrize("letters", [RABBITMQ, SPEC])
@pytest.mark.parametrize("dialect", sorted(SPECS))
def test_compiled_methods_decode_like_the_generic_plans(dialect, letters):
    fast, ref = DialectTables(dialect, letters), DialectTables(dialect, letters, compiled=False)
    rng = random.Random(f"{dialect}-{letters}")
    compared = 0
    for payload in dict.fromkeys(METHODS):
        for v in _variants(payload, rng):
            mv = memoryview(v)
            got, want = fast.decode_method(mv), ref.decode_method(mv)
            assert got == want and list(got[1] or ()) == list(want[1] or ()), v.hex()  # values and argument order
            compared += 1
    assert compared > 1000


@pytest.mark.parametrize("letters", [RABBITMQ, SPEC])
@pytest.mark.parametrize("dialect", sorted(SPECS))
def test_compiled_properties_decode_like_the_generic_ones(dialect, letters):
    fast, ref = DialectTables(dialect, letters), DialectTables(dialect, letters, compiled=False)
    rng = random.Random(f"h-{dialect}-{letters}")
    for payload in dict.fromkeys(HEADERS):
        for v in _variants(payload, rng):
            mv = memoryview(v)
            for _ in range(2):  # the second time from the caches
                got, want = fast.decode_header(mv), ref.decode_header(mv)
                assert got == want and list(got[1] or ()) == list(want[1] or ()), v.hex()
    assert fast._fast_properties and not ref._fast_properties


def test_compiled_plans_cover_every_wire_type():
    """Each generated method of each dialect compiles (tables, bits, content, strings, fixed runs)."""
    for dialect in SPECS:
        t = DialectTables(dialect)
        assert set(t.fast_plans) == set(t.plans)
        for key, plan in t.plans.items():
            # an empty payload is never well formed for a method with arguments: the generic reader answers
            mv = memoryview(b"")
            assert t.fast_plans[key](mv, 0)[1] == DialectTables(dialect, compiled=False).fast_plans[key](mv, 0)[1]
