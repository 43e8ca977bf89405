"""The ingest's direct path (capture.direct: no packet shuffle, flows balanced by bytes) against the shuffle path.

Every table (captures, connections, frames, decode_errors and the fused lifecycle's deliveries,
flow_events, request_responses) must be identical row for row, on every fixture capture and on
mutants of them: damaged TCP and IP headers, a changed payload byte (the scan reads these whole),
a record length the reader resyncs on, a record time outside 1990..2100 and IP fragments (the
scan gives up: those captures take the shuffle path inside the direct run). Only ``splits`` may
differ: 0 says a capture was read directly.
"""

from __future__ import annotations

import glob
import pathlib

import pytest

from amqplens.decode.capture import headscan
from amqplens.jobs import ingest_captures
from amqplens.lake.store import TableStore
from tests.capture import capture_builders as B
from tests.conftest import DATA
from tests.e2e import mutations as M
from tests.e2e.conftest import FIXTURES

pytestmark = [pytest.mark.spark, pytest.mark.e2e,
              pytest.mark.skipif(headscan.load_kernel() is None, reason="numba is not installed")]

EXTRA = sorted(glob.glob(str(DATA / "tls" / "*.pcap")) + glob.glob(str(DATA / "logs" / "*.pcap")))
TABLES = ("captures", "connections", "frames", "decode_errors", "deliveries", "flow_events", "request_responses")


def _mutants(folder: pathlib.Path) -> dict[str, bool]:
    """Mutant captures written to ``folder``: name -> whether the scan reads it whole (the direct path)."""
    consume = (DATA / "broker" / "consume_prefetch_ack.pcap").read_bytes()
    middle = M.middle_payload_record(consume)
    cases = {
        "tcp_offset": (M.packet_bytes(consume, middle, M.tcp_field(12, 0x30)), True),  # data offset 12 bytes
        "ip_total_short": (M.packet_bytes(consume, middle, M.ip_field(2, 30, 2)), True),
        "ip_proto_udp": (M.packet_bytes(consume, middle, M.ip_field(9, 17)), True),
        "payload_byte": (M.packet_bytes(consume, middle, lambda p: p.__setitem__(len(p) - 2, p[-2] ^ 0xFF)), True),
        "record_caplen": (M.record_field(consume, middle, "I", 8, 0x00FFFFFF), False),
        "record_year_49195": (M.record_field(consume, middle, "I", 0, 0xFFFFFFF0), False),
    }
    frames = B.read_pcap_frames(DATA / "public" / "deepflow_amqp091_consume_publish.pcap")
    recs = []
    for sec, frac, frame, _ in frames:
        ip = frame[14:]
        if frame[12:14] == b"\x08\x00" and ip[9] == 6 and len(ip) > 80:
            recs += [(sec, frac, frame[:14] + f) for f in B.ipv4_fragments(ip, 32)]
        else:
            recs.append((sec, frac, frame))
    cases["fragments"] = (B.pcap_bytes(recs), False)
    for name, (data, _) in cases.items():
        (folder / f"{name}.pcap").write_bytes(data)
    return {name: direct for name, (data, direct) in cases.items()}


def _rows(store: TableStore, table: str) -> list[tuple]:
    df = store.read(table).drop("run_id")
    if table == "captures":
        df = df.drop("splits")
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_direct_and_shuffle_paths_give_the_same_tables(spark, conf, tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    expected_direct = _mutants(inputs)
    paths = FIXTURES + EXTRA + sorted(str(p) for p in inputs.iterdir())
    stores, results = {}, {}
    for mode in ("on", "off"):
        c = conf.with_overrides(lake__root=str(tmp_path / mode), capture__direct=mode)
        results[mode] = ingest_captures.run(spark, c, paths, run_id="same")
        stores[mode] = TableStore(spark, c["lake.root"])
    assert not results["on"].failed and not results["off"].failed
    for table in TABLES:
        on, off = _rows(stores["on"], table), _rows(stores["off"], table)
        assert on == off, table
        assert on or table == "decode_errors", f"{table} is empty: nothing compared"
    splits = {pathlib.Path(r["path"]).stem: r["splits"] for r in results["on"].captures}
    for name, direct in expected_direct.items():
        assert (splits[name] == 0) == direct, name
    fixtures_direct = [p for p in FIXTURES + EXTRA if splits[pathlib.Path(p).stem] == 0]
    assert fixtures_direct == FIXTURES + EXTRA  # every fixture went the direct way
    assert all(r["splits"] > 0 for r in results["off"].captures)
    errors = {pathlib.Path(r["path"]).stem: r["capture_errors"] for r in results["on"].captures}
    assert errors["record_caplen"] > 0 and errors["record_year_49195"] > 0  # the reader's error rows, kept


def _weights(rows, scans) -> list[int]:
    """Each task's weight as the plan counts it: its bytes and FLOW_COST_BYTES per flow (both directions one)."""
    import json

    out = []
    for _, plan in rows:
        items = json.loads(plan)
        flows = {(item["capture_id"], scans[item["capture_id"]].dflows[int(d)][5]) for item in items for d in item["dflows"]}
        out.append(sum(item["bytes"] for item in items) + ingest_captures.FLOW_COST_BYTES * len(flows))
    return out


def test_plan_spreads_flows_by_bytes(tmp_path):
    """Two tasks, one capture of many flows: each task's weight (bytes and a fixed cost per flow) is within the
    heaviest flow of half."""
    scan = headscan.plan(str(DATA / "demo" / "demo.pcap"))
    assert scan is not None and scan.clean
    rows = ingest_captures.direct_plan({"demo": scan}, 2)
    import json

    loads = [sum(item["bytes"] for item in json.loads(plan)) for _, plan in rows]
    flows = scan.flows()
    assert sum(loads) == sum(f.bytes for f in flows) == sum(d[7] for d in scan.dflows)
    weights = _weights(rows, {"demo": scan})
    assert max(weights) - min(weights) <= max(f.bytes for f in flows) + ingest_captures.FLOW_COST_BYTES
    dflows = [d for _, plan in rows for item in json.loads(plan) for d in item["dflows"]]
    assert sorted(map(int, dflows)) == list(range(len(scan.dflows)))  # every directional flow in exactly one task


def test_plan_counts_a_fixed_cost_per_connection():
    """One long connection beside many short ones of the same bytes in all (the load capture's shape: 8 long
    connections and 10,000 of about 14 KB, where the task given the short ones by bytes alone took 50.5 s against
    40.3 s): the long one's task takes short ones too, and the two tasks' weights (bytes + FLOW_COST_BYTES a
    connection) differ by at most one short connection's."""
    import json

    short = ingest_captures.FLOW_COST_BYTES
    dflows = [[4, "10.0.0.1", 40000, "10.0.0.2", 5672, 1, 2000, 1_000_000]]
    dflows += [[4, "10.0.0.1", 40001 + i, "10.0.0.2", 5672, 2 + i, 30, short] for i in range(40)]
    scan = headscan.FileScan("x.pcap", 0, True, None, headscan.SplitStats(), dflows)
    rows = ingest_captures.direct_plan({"x": scan}, 2)
    tasks = [{int(d) for item in json.loads(plan) for d in item["dflows"]} for _, plan in rows]
    long_task = next(t for t in tasks if 0 in t)
    assert len(long_task) > 1, "bytes alone would give the long connection's task no short one"
    weights = _weights(rows, {"x": scan})
    assert max(weights) - min(weights) <= short + ingest_captures.FLOW_COST_BYTES
    assert sorted(d for t in tasks for d in t) == list(range(41))


def test_plan_keeps_each_of_many_small_captures_whole_on_one_task():
    """Twelve captures on two tasks (more than four per task): a capture under ``whole_below`` bytes goes whole to one
    task, the tasks' bytes stay within the largest capture of each other, every directional flow is planned once;
    a capture above it is still spread by flow."""
    import glob
    import json

    paths = sorted(glob.glob(str(DATA / "broker" / "*.pcap")))[:12]
    scans = {pathlib.Path(p).stem: headscan.plan(p) for p in paths}
    scans = {k: s for k, s in scans.items() if s is not None and s.clean}
    assert len(scans) > 8
    sizes = {k: sum(f.bytes for f in s.flows()) for k, s in scans.items()}
    rows = ingest_captures.direct_plan(scans, 2, whole_below=max(sizes.values()))
    tasks_of: dict[str, set] = {}
    planned: dict[str, list] = {}
    loads = []
    for task, plan in rows:
        items = json.loads(plan)
        loads.append(sum(item["bytes"] for item in items))
        for item in items:
            tasks_of.setdefault(item["capture_id"], set()).add(task)
            planned.setdefault(item["capture_id"], []).extend(int(d) for d in item["dflows"])
    assert all(len(t) == 1 for t in tasks_of.values())  # whole
    assert {k: sorted(v) for k, v in planned.items()} == {k: list(range(len(s.dflows))) for k, s in scans.items() if s.dflows}
    weights = _weights(rows, scans)
    assert max(weights) - min(weights) <= max(sizes[k] + ingest_captures.FLOW_COST_BYTES * len(scans[k].flows()) for k in scans)
    biggest = max(sizes, key=lambda k: sizes[k])
    split = ingest_captures.direct_plan(scans, 2, whole_below=sizes[biggest] - 1)  # the largest one above it
    holding = {task for task, plan in split for item in json.loads(plan) if item["capture_id"] == biggest}
    assert len(holding) == 2 or len(scans[biggest].flows()) == 1
