"""Hostile captures in ONE ingest run: the run finishes each, problems are rows, intact frames equal the unmutated decode.

Tried here (see hostile_captures.py): every fixture truncated at a random offset;
8 payload bit flips in the middle third of four fixtures (0-9-1, 1.0, 0-10, the
multi-connection demo); 12 records duplicated and 12 neighbour pairs reordered in
two fixtures; a 0-9-1 frame claiming 4 GiB; a queue.declare whose arguments nest
10,000 field tables deep; a 1.0 flow whose list32 claims 2^32 - 1 elements; HTTP
and TLS on port 5672. The oracle for "intact" is the unmutated bytes through the
same batch functions (no Spark), decoded under the mutated file's capture id.
"""

from __future__ import annotations

import collections
import hashlib

import pytest

from amqplens.jobs import ingest_captures
from amqplens.lake.store import TableStore
from tests.e2e import hostile_captures as H
from tests.e2e.conftest import FIXTURES

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

BUG_REASONS = {"internal_error", "reader_error", "byte_accounting_mismatch"}
FRAME_COLUMNS = ["capture_id", *H.FRAME_KEY, *H.FRAME_VALUES]
Case = H.Case


@pytest.fixture(scope="module")
def hostile(spark, conf, tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    cases = H.cases(FIXTURES)
    H.write_cases(cases, d / "in")
    c = conf.with_overrides(lake__root=str(d / "lake"))
    ingest_captures.run(spark, c, [str(d / "in")], run_id="hostile")
    store = TableStore(spark, str(d / "lake"))
    rows = {t: store.delta(t).to_pyarrow_table(columns=cols).to_pylist() for t, cols in
            (("captures", None), ("connections", None), ("decode_errors", None), ("frames", FRAME_COLUMNS))}  # fmt: skip
    by_capture = {t: collections.defaultdict(list) for t in rows}
    for t, table in rows.items():
        for r in table:
            by_capture[t][r["capture_id"]].append(r)
    return cases, by_capture, ingest_captures.options_from(c), d


def _reference(hostile, case: Case, data: bytes | None = None) -> dict:
    _, _, options, d = hostile
    return H.reference(data if data is not None else case.original, case.capture_id, options, d)


def test_every_file_finishes_with_no_decoder_bug_rows(hostile):
    cases, rows, _, _ = hostile
    assert {c.capture_id for c in cases.values()} <= set(rows["captures"])
    bugs = [(e["reason"], e["detail"]) for errs in rows["decode_errors"].values() for e in errs if e["reason"] in BUG_REASONS]
    assert bugs == []


def _ends(c: dict) -> tuple:
    return c["client_ip"], c["client_port"], c["server_ip"], c["server_port"]


def _mine(rows, case: Case) -> dict:
    return H.frames_by_key(rows["frames"][case.capture_id], rows["connections"][case.capture_id])


def _equal_where_present(mutated: dict, ref: dict, keys) -> list:
    """Keys whose frame is missing from ``mutated`` or differs from ``ref`` in any compared column (not the time)."""
    def values(v):
        return v and {k: x for k, x in v.items() if k != "ts_us"}

    return [(k, mutated.get(k), ref[k]) for k in keys if values(mutated.get(k)) != values(ref[k])]


def test_truncated_fixtures_keep_every_frame_before_the_cut(hostile):
    cases, rows, _, _ = hostile
    checked = 0
    for name, case in cases.items():
        if case.kind != "truncated":
            continue
        ref = _reference(hostile, case)
        mine, theirs = _mine(rows, case), H.frames_by_key(ref["frame"], ref["connection"])
        assert set(mine) <= set(theirs), name  # nothing invented
        delivered = {(_ends(c), d): c[f"bytes_{d}"] for c in rows["connections"][case.capture_id] for d in ("to_server", "to_client")}
        whole = [k for k, v in theirs.items() if k[2] + v["size"] <= delivered.get(k[:2], -1)]
        assert _equal_where_present(mine, theirs, whole) == [], name
        checked += len(whole)
        reasons = {e["reason"] for e in rows["decode_errors"][case.capture_id]}
        assert reasons, f"{name}: cut at {case.extra['cut']} of {len(case.original)} bytes, and no row says so"
    assert checked > 1000  # frames before the cuts that were compared


def test_bit_flips_leave_the_frames_elsewhere_intact(hostile):
    cases, rows, _, _ = hostile
    for name, case in cases.items():
        if case.kind != "flipped":
            continue
        t_first, t_last = case.extra["t_first"], case.extra["t_last"]
        ref = _reference(hostile, case)
        span = {_ends(c): (c["start_ts_us"], c["end_ts_us"]) for c in ref["connection"]}
        theirs = H.frames_by_key(ref["frame"], ref["connection"])
        last_before = {}
        for k, v in sorted(theirs.items(), key=lambda kv: kv[1]["ts_us"]):
            if v["ts_us"] < t_first:
                last_before[k[:2]] = k
        untouched = [k for k, v in theirs.items()
                     if span[k[0]][1] < t_first or span[k[0]][0] > t_last or (v["ts_us"] < t_first and last_before[k[:2]] != k)]  # fmt: skip
        assert untouched, name
        mine = _mine(rows, case)
        assert _equal_where_present(mine, theirs, untouched) == [], name
        assert len(mine) >= 0.9 * len(theirs), (name, len(mine), len(theirs))


def test_duplicated_and_reordered_records_change_nothing_but_timestamps(hostile):
    cases, rows, _, _ = hostile
    for name, case in cases.items():
        if case.kind != "reordered":
            continue
        ref = _reference(hostile, case)
        theirs, mine = H.frames_by_key(ref["frame"], ref["connection"]), _mine(rows, case)
        assert set(mine) == set(theirs), name
        assert _equal_where_present(mine, theirs, theirs) == [], name
        conns = rows["connections"][case.capture_id]
        assert sum(c["retransmitted_bytes_to_server"] + c["retransmitted_bytes_to_client"] for c in conns) > 0, name


def _synthetic(hostile, name):
    cases, rows, _, _ = hostile
    case = cases[name]
    conns = {c["client_port"]: c for c in rows["connections"][case.capture_id]}
    ref = _reference(hostile, case)
    mine, theirs = _mine(rows, case), H.frames_by_key(ref["frame"], ref["connection"])
    control = [k for k in theirs if k[0][1] == 40002]
    assert control and _equal_where_present(mine, theirs, control) == [], name  # the neighbour is untouched
    errors = [e for e in rows["decode_errors"][case.capture_id] if e["connection_id"] == conns[40001]["connection_id"]]
    return conns[40001], {k: v for k, v in mine.items() if k[0][1] == 40001}, {k: v for k, v in theirs.items() if k[0][1] == 40001}, errors


def _shifted(theirs: dict, at: int, by: int) -> dict:
    """The twin's to_server frames after ``at`` moved by ``by`` bytes (what the injection did to the offsets)."""
    return {(c, d, o + by if d == "to_server" and o >= at else o): v for (c, d, o), v in theirs.items()}


def test_a_frame_claiming_4_gib_is_one_error_and_everything_after_decodes(hostile):
    conn, mine, twin, errors = _synthetic(hostile, "frame_4gib.pcap")
    assert [(e["reason"], e["offset"], e["length"]) for e in errors] == [("frame_too_large", 8, len(H.FRAME_4GIB))]
    expected = _shifted(twin, 8, len(H.FRAME_4GIB))
    assert set(mine) == set(expected) and _equal_where_present(mine, expected, expected) == []


def test_field_tables_nested_10000_deep_are_a_frame_error_and_everything_after_decodes(hostile):
    conn, mine, twin, errors = _synthetic(hostile, "nested_10000.pcap")
    declare = mine.pop((_ends(conn), "to_server", 8))
    assert declare["method_name"] == "declare"
    assert declare["decode_error"].startswith("malformed_arguments: field tables nested deeper than 64")
    # the frame is well delimited: its row carries the error, and one stage-frame row keeps its bytes (no codec row)
    injected = H.nested_table_declare(10_000)
    assert [(e["stage"], e["reason"], e["offset"], e["length"], e["raw_sha256"]) for e in errors] == [
        ("frame", "malformed_arguments", 8, declare["size"], hashlib.sha256(injected).hexdigest())]
    assert len(injected) == declare["size"] and errors[0]["raw"] == injected[:4096]
    expected = _shifted(twin, 8, declare["size"])
    assert set(mine) == set(expected) and _equal_where_present(mine, expected, expected) == []


def test_a_1_0_list_claiming_2_32_elements_is_reported_and_everything_after_decodes(hostile):
    conn, mine, twin, errors = _synthetic(hostile, "amqp10_list_2_32.pcap")
    claim = [k for k, v in mine.items() if v["decode_error"] and "over the limit" in v["decode_error"]]
    assert len(claim) == 1
    assert mine.pop(claim[0])["size"] == len(H.LIST_CLAIM)  # the frame is well delimited: its row carries the error
    # and one stage-frame row keeps its bytes; no byte is a codec error
    assert [(e["stage"], e["offset"], e["length"], e["raw"]) for e in errors] == [("frame", claim[0][2], len(H.LIST_CLAIM), H.LIST_CLAIM)]
    expected = _shifted(twin, claim[0][2], len(H.LIST_CLAIM))
    assert set(mine) == set(expected) and _equal_where_present(mine, expected, expected) == []


def test_http_on_5672_is_error_rows_for_every_byte(hostile):
    conn, mine, _, errors = _synthetic(hostile, "http_5672.pcap")
    assert mine == {}
    got = sorted((e["direction"], e["reason"], e["offset"], e["length"]) for e in errors)
    assert got == [("to_client", "not_amqp", 0, len(H.HTTP[1][1])), ("to_server", "not_amqp", 0, len(H.HTTP[0][1]))]


def test_tls_on_5672_is_flagged_tls_and_its_bytes_are_tls_rows(hostile):
    """TLS on the AMQP port: the connection says tls and has no dialect, and every byte of each direction is one
    ``tls`` row (recorded, not decoded), so nothing is lost or decoded as AMQP."""
    conn, mine, _, errors = _synthetic(hostile, "tls_5672.pcap")
    assert conn["tls"] is True and conn["dialect"] is None and mine == {}
    got = sorted((e["direction"], e["reason"], e["offset"], e["length"]) for e in errors)
    assert got == [("to_client", "tls", 0, len(H.TLS[1][1])), ("to_server", "tls", 0, len(H.TLS[0][1]))]
