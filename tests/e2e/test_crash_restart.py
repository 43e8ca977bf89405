"""A run killed with SIGKILL in the middle of each stage, then started again, ends in the same tables.

DESIGN.md's invariant: "a run that dies halfway and is started again ends in the same tables".
The kill comes when a stage's first table has committed and the rest of the stage has not, the
worst point for a writer that commits table by table. The comparison is with an uninterrupted run.
The run kills itself right after that commit (``amqplens.lake.store.FAILPOINT_ENV``): a stage's commits follow
each other within milliseconds, too close for a watcher to land a kill between them every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from amqplens.lake.store import FAILPOINT_ENV
from amqplens.contracts import ALL_TABLES
from tests.conftest import DATA, ROOT

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

CAPTURE = DATA / "broker" / "consume_prefetch_ack.pcap"


def amqplens(lake, tmp_path):
    return [sys.executable, "-m", "amqplens.cli", "run", "--input", str(CAPTURE), "--lake", str(lake),
            "--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2", "--set", f"report.out={tmp_path / 'report'}",
            # validation has its own tests (tests/validate); here it would only lengthen four runs
            "--set", "validate.enabled=false"]


def snapshot(lake) -> dict:
    out = {}
    for name, table in ALL_TABLES.items():
        path = lake / name
        if not (path / "_delta_log").exists():
            out[name] = None
            continue
        rows = DeltaTable(str(path)).to_pyarrow_table().drop_columns([c for c in ("run_id",) if c in table.column_names])
        keys = [r for r in rows.select(list(table.key)).to_pylist()]
        assert len(keys) == len({tuple(k.values()) for k in keys}), f"duplicate keys in {name}"
        out[name] = sorted(map(repr, rows.to_pylist()))
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    subprocess.run(amqplens(tmp / "lake", tmp), cwd=ROOT, check=True, capture_output=True, timeout=600)
    return snapshot(tmp / "lake")


def _killed_after_commit(cmd, table: str) -> None:
    """A run that SIGKILLs itself (no chance to clean up) right after it commits ``table``; its JVM, left without
    its driver, is killed with the process group."""
    env = {**os.environ, FAILPOINT_ENV: f"commit:{table}"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert rc == -signal.SIGKILL, f"the run ended (exit {rc}) without committing {table}"


def test_killed_in_each_stage_then_restarted_run_ends_in_the_same_tables(reference, tmp_path):
    """Kill, restart, kill the restart one stage further on, ... then let the last restart finish.

    Each restart redoes the stage its predecessor died in (ingest-captures: the captures table was
    not committed; lifecycle and metrics always rerun), so every stage is once killed and redone.
    """
    lake = tmp_path / "lake"
    seen = []
    # the ingest's first commit; the lifecycle's (fused: inside the ingest, before the captures row); metrics' first
    for first_table_of_stage in ("connections", "deliveries", "metrics_latency"):
        _killed_after_commit(amqplens(lake, tmp_path), first_table_of_stage)
        interrupted = snapshot(lake)
        assert interrupted != reference, f"the kill in {first_table_of_stage}'s stage left the lake finished"
        assert interrupted not in seen  # each restart got one stage further before its kill
        seen.append(interrupted)
    subprocess.run(amqplens(lake, tmp_path), cwd=ROOT, check=True, capture_output=True, timeout=600)
    assert snapshot(lake) == reference
