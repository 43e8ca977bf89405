"""The ingest task's two halves (decode + staged tables, then the fused lifecycle; ``tools.bench_task``, no Spark)
with ``decode.compiled`` off (the reference) and auto: every table the same, row for row in the same order:
frames, connections, decode_errors, deliveries, flow_events, request_responses.

Inputs: every real-broker fixture and the demo capture as one capture, in packet batches of 8192 (a drain per
batch, as the ingest task runs) and of 16 (many drains: a connection's segments are held and decoded ahead in
many small windows), so the rows the compiled path puts back in order reach the lifecycle machines.
"""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pytest

from amqplens.decode.v0_9_1 import hotpath
from tools.bench_hotpath import packets
from tools.bench_task import decode_stage, lifecycle_stage, results

pytestmark = pytest.mark.skipif(not hotpath.available(), reason="numba is not installed: only the Python path exists")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAPTURES = sorted((ROOT / "tests" / "data" / "broker").glob("*.pcap")) + [ROOT / "amqplens" / "data" / "demo.pcap"]


def _tables(table: pa.Table, compiled: str, chunk: int, root: pathlib.Path) -> dict[str, pa.Table]:
    _, events, tables = decode_stage(table, compiled, str(root / f"{compiled}-{chunk}"), chunk)
    _, life = lifecycle_stage(events, str(root / f"{compiled}-{chunk}"))
    return results(tables, life)


@pytest.mark.parametrize("chunk", [8192, 16])
def test_every_table_of_the_task_is_the_same_with_the_compiled_decode(chunk, tmp_path):
    rows: dict[str, int] = {}
    for path in CAPTURES:
        table = packets(str(path))
        want = _tables(table, "off", chunk, tmp_path / path.stem)
        got = _tables(table, "auto", chunk, tmp_path / path.stem)
        assert set(got) == set(want), path.name
        for name, t in want.items():
            assert got[name].equals(t), (path.name, name)
            rows[name] = rows.get(name, 0) + t.num_rows
    # not vacuous: the fixtures hold thousands of frames and hundreds of deliveries, flow events and requests
    assert rows["frames"] > 5000 and min(rows[f"life:{k}"] for k in ("delivery", "flow_event", "request_response")) > 100, rows


def test_every_table_is_the_same_with_every_run_the_reassembler_can_take(tmp_path, monkeypatch):
    """The reassembler's compiled runs down to two packets (the pipeline takes 32 and more), on every fixture and
    on the hostile captures (cut mid-conversation, bit flips, records duplicated and reordered, synthetic damage):
    the compiled decode with them against the reference without."""
    from amqplens.decode.tcp import reassembly
    from tests.e2e.hostile_captures import cases

    monkeypatch.setattr(reassembly, "MIN_RUN", 2)
    taken = []
    monkeypatch.setattr(reassembly.TcpReassembler, "_take_run", _counted(reassembly.TcpReassembler._take_run, taken))
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    paths = list(CAPTURES)
    for name, case in cases([str(p) for p in CAPTURES if p.parent.name == "broker"]).items():
        path = hostile / (name if name.endswith((".pcap", ".pcapng")) else name + ".pcap")
        path.write_bytes(case.data)
        paths.append(path)
    for path in paths:
        table = packets(str(path))
        want = _tables(table, "off", 8192, tmp_path / path.stem)
        got = _tables(table, "auto", 8192, tmp_path / path.stem)
        for name, t in want.items():
            assert got[name].equals(t), (path.name, name)
    assert sum(taken) > 10_000, sum(taken)  # packets the runs took: not vacuous


def _counted(take_run, taken: list):
    def counted(self, kernel, conn, i, j, *rest):
        taken.append(j - i)
        return take_run(self, kernel, conn, i, j, *rest)

    return counted
