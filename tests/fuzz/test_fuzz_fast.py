"""The fast subset of the fuzz campaign (tools/fuzz.py): a fixed-seed mutator over the fixture seeds, every invariant.

Each target gets a few thousand inputs mutated from the seeds (bit flips, interesting
integers, inserted, deleted, duplicated and spliced ranges, truncations), fed in random
chunkings to both directions with gaps; the regression inputs the campaign found run
too, and hand-made length claims and nestings check the memory and recursion bounds.
"""

from __future__ import annotations

import json

import pathlib
import random
import struct
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from amqplens.decode import pipeline
from tools import fuzz, fuzz_targets as ft
from tests.drafts import encoder as draft
from tests.v0_9_1.encoder import Encoder
from tests.v1_0 import encoder as amqp10

# inputs per target: a few thousand per dialect, fewer whole captures (each is a pipeline run)
COUNTS = {"0-9-1": 3000, "1.0": 3000, "0-10": 2500, "drafts": 3000, "capture": 200}
E091 = Encoder()


@pytest.mark.parametrize("target", ft.TARGETS)
def test_mutated_inputs_keep_every_invariant(target):
    failures = list(ft.quick_campaign(target, COUNTS[target], seed=11, max_len=4096))
    assert not failures, [f"{type(e).__name__}: {e} on {d[:80].hex()}" for d, e in failures[:3]]


def _regressions():
    return sorted(ft.REGRESSIONS.glob("*/*.bin"))


@pytest.mark.parametrize("path", _regressions(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_campaign_findings_stay_fixed(path: pathlib.Path):
    ft.run_target(path.parent.name, path.read_bytes(), check_memory=True)


def _stream(to_server: bytes, to_client: bytes = b"", flags: int = 0) -> bytes:
    return ft.StreamInput(to_server, to_client, chunk_seed=0, flags=flags).encode()


def _amqp10_open_claiming(count: int) -> bytes:
    """A 1.0 open whose field list (list32) claims ``count`` elements in 4 bytes."""
    return amqp10.AMQP_HEADER + amqp10.frame(b"\x00\x53\x10\xd0" + struct.pack(">II", 4, count))


# Each input is under 64 bytes and claims gigabytes: the decode must stay within the
# per-input allocation bound (ALLOC_BASE + ALLOC_PER_BYTE * len, a few MB) and say what was wrong.
CLAIMS = {
    "0-9-1 frame of 4 GiB": ("0-9-1", _stream(E091.protocol_header() + struct.pack(">BHI", 1, 1, 0xFFFFFFFF) + b"\0" * 20)),
    "0-9-1 longstr of 4 GiB": ("0-9-1", _stream(E091.protocol_header() + E091.frame(1, 1, struct.pack(">HH", 60, 40) + b"\0\0" + struct.pack(">BI", 2, 0xFFFFFFFF)))),
    "1.0 list of 2^32 elements": ("1.0", _stream(_amqp10_open_claiming(0xFFFFFFFF))),
    "1.0 frame of 4 GiB": ("1.0", _stream(amqp10.AMQP_HEADER + struct.pack(">IBBH", 0xFFFFFFFF, 2, 0, 0) + b"\0" * 16)),
    "0-10 frames of 64 KiB each, 40 bytes sent": ("0-10", _stream(b"AMQP\x01\x01\x00\x0a" + b"\x0f\x01\xff\xff" + b"\0" * 28)),
    "Fast extended frame of 2^64": ("drafts", _stream(draft.HEADER_FAST + draft.META + struct.pack(">BBHQ", 3, 0, 1, 2**64 - 1) + b"x" * 8, flags=1)),
    "draft frame of 4 GiB": ("drafts", _stream(draft.HEADER_DRAFT + struct.pack(">BBHI", 1, 0, 1, 0xFFFFFFFF) + b"x" * 8)),
}


@pytest.mark.parametrize("name", list(CLAIMS))
def test_a_length_claim_the_bytes_do_not_back_allocates_nothing(name):
    target, data = CLAIMS[name]
    assert len(data) < 64
    ft.run_target(target, data, check_memory=True)
    consumer = ft._consumer(target, ft.StreamInput.decode(data))
    ft._feed(consumer, ft.StreamInput.decode(data))
    errors = consumer.drain_errors()
    frame_errors = [f["decode_error"] for f in consumer.drain_frames() if f.get("decode_error")]
    assert errors or frame_errors, "a claim the bytes do not back must be reported"


def _nested_table(depth: int) -> bytes:
    body = b""
    for _ in range(depth):
        body = b"\x01nF" + struct.pack(">I", len(body)) + body
    return struct.pack(">I", len(body)) + body


def _queue_declare_with(table: bytes) -> bytes:
    return E091.protocol_header() + E091.frame(1, 1, struct.pack(">HH", 50, 10) + b"\0\0" + b"\x01q" + b"\x00" + table)


@pytest.mark.parametrize("depth", [63, 9_000])
def test_field_tables_nested_to_the_cap_and_far_past_it_fit_the_recursion_budget(depth):
    """A table at 0-9-1's cap (64) decodes within the budget; 9,000 deep (the most a 64 KiB input holds) is a decode error, not a RecursionError."""
    data = _stream(_queue_declare_with(_nested_table(depth)))
    ft.run_target("0-9-1", data)  # internal_error (e.g. a RecursionError the consumer caught) would raise Violation
    consumer = ft._consumer("0-9-1", ft.StreamInput.decode(data))
    ft._feed(consumer, ft.StreamInput.decode(data))
    declare = [f for f in consumer.drain_frames() if f.get("method_name") == "declare"]
    assert len(declare) == 1
    assert (declare[0]["decode_error"] is None) == (depth < 64), declare[0]["decode_error"]


def test_the_recursion_budget_stops_a_deep_recursion():
    """The budget is real: a recursion of 2x the budget fails under it and passes without it."""

    def down(n):
        return 0 if n == 0 else 1 + down(n - 1)

    with pytest.raises(RecursionError), ft._recursion_budget():
        down(2 * ft.RECURSION_BUDGET)
    assert down(2 * ft.RECURSION_BUDGET) == 2 * ft.RECURSION_BUDGET
    assert sys.getrecursionlimit() >= 1000


def test_the_allocation_check_catches_an_allocation(monkeypatch):
    """The memory bound is real: a target that allocates what a 4 GiB claim would (here 64 MB) is a Violation."""
    ft._warm("0-9-1")
    monkeypatch.setattr(ft, "run_stream", lambda family, data, check_rows=True: bytearray(64 << 20))
    with pytest.raises(ft.Violation, match="allocation"):
        ft.run_target("0-9-1", b"\0" * 40, check_memory=True)


def test_the_mutator_is_deterministic_and_the_campaign_knows_every_target():
    a = [ft.mutate(b"AMQP\x00\x00\x09\x01", random.Random(5)) for _ in range(3)]
    b = [ft.mutate(b"AMQP\x00\x00\x09\x01", random.Random(5)) for _ in range(3)]
    assert a == b
    assert fuzz.TARGETS == ft.TARGETS
    assert all(ft.seeds()[t] for t in ft.TARGETS)


def test_a_value_wider_than_its_column_becomes_null_not_a_failed_task():
    """Campaign finding (tests/data/fuzz/1.0/channel_max_over_int32.bin): a 1.0 open whose channel-max is sent as a
    uint of 2147516415 made the facts' int32 column raise ArrowInvalid, which fails the Spark task."""
    typ = pa.struct([("channel_max", pa.int32()), ("n", pa.int64()), ("u", pa.uint16())])
    rows = [{"channel_max": 2147516415, "n": 5, "u": 70000}, {"channel_max": -7, "n": 2**63, "u": 65535}]
    assert pipeline.to_struct_array(rows, typ).to_pylist() == [{"channel_max": None, "n": 5, "u": None},
                                                                {"channel_max": -7, "n": None, "u": 65535}]  # fmt: skip


def _pcapng_packets(tmp_path, blocks_of) -> tuple[list, dict]:
    """A one-connection pcapng whose packet blocks ``blocks_of(index, sec, usec, packet)`` makes, through read_splits."""
    from tests.capture.capture_builders import idb, shb
    from tests.e2e.hostile_captures import records
    from tests.v1_0.pcap_writer import connection_pcap

    recs = records(connection_pcap([("to_server", b"AMQP\x00\x00\x09\x01")]))
    path = tmp_path / "c.pcapng"
    path.write_bytes(shb("<") + idb("<") + b"".join(blocks_of(i, *r) for i, r in enumerate(recs)))
    split = pa.RecordBatch.from_pylist([{"capture_id": "c", "path": str(path), "start": 0, "end": path.stat().st_size, "split_index": 0}],
                                       schema=pipeline.SPLITS_SCHEMA)  # fmt: skip
    table = pa.Table.from_batches(list(pipeline.read_splits([split])), schema=pipeline.PACKETS_OUT_SCHEMA)
    errors = table.filter(pc.equal(table.column("kind"), "capture_error")).column("meta").to_pylist()
    packets = table.filter(pc.equal(table.column("kind"), "packet")).to_pydict()
    return recs, packets | {"capture_errors": [json.loads(e) for e in errors]}


def test_a_record_claiming_an_origlen_over_2_31_is_read_not_a_failed_task(tmp_path):
    """Campaign finding (tests/data/fuzz/capture/origlen_over_int32.bin): a pcapng packet block's original length is a
    uint32; one over 2^31 - 1 did not fit the packets' int32 wire_len column and failed the read_splits task."""
    from tests.capture.capture_builders import epb

    recs, packets = _pcapng_packets(tmp_path, lambda i, s, us, pkt: epb("<", 0, s * 1_000_000 + us, pkt, 0xFFFFFFF0 if i == 3 else None))
    assert packets["wire_len"] == [len(pkt) if i != 3 else 0xFFFFFFF0 for i, (_, _, pkt) in enumerate(recs)]


def test_a_pcapng_timestamp_past_year_9999_is_an_error_row_and_the_packet_keeps_its_place(tmp_path):
    """Campaign finding (tests/data/fuzz/capture/pcapng_ts_over_int64.bin): 2^64 - 1 microsecond units overflowed the
    int64 ts_us column (then, clamped to 9999-12-31T23:59:59.999999Z, ``_capture_row`` rounded it to the year 10000
    and the job died). Now the time is a ``ts_out_of_range`` row and the packet takes the time of the one after it."""
    from tests.capture.capture_builders import epb

    recs, packets = _pcapng_packets(tmp_path, lambda i, s, us, pkt: epb("<", 0, 2**64 - 1 if i == 3 else s * 1_000_000 + us, pkt))
    times = [s * 1_000_000 + us for s, us, _ in recs]
    assert packets["ts_us"] == times[:3] + [times[4]] + times[4:]
    assert [(e["reason"], e["length"]) for e in packets["capture_errors"]] == [("ts_out_of_range", 0)]
    assert str(2**64 - 1) in packets["capture_errors"][0]["detail"]