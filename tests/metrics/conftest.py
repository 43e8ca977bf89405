"""One lake for the metric tests: the real-broker fixtures and the demo, through every stage, once per session."""

from __future__ import annotations

import glob

import pytest

from amqplens.jobs import ingest_captures
from amqplens.jobs import lifecycle
from amqplens.jobs import metrics
from amqplens.lake.store import TableStore
from amqplens.session import sql_settings
from tests.conftest import COMPILED, DATA
from tests.e2e.hostile_captures import records, ts_of, with_records

CAPTURES = (sorted(glob.glob(str(DATA / "broker" / "*.pcap"))) + [str(DATA / "demo" / "demo.pcap")]
            + sorted(glob.glob(str(DATA / "v0_10" / "*.pcap"))))


def shifted_copy(src, dst, delta_us: int):
    """The pcap ``src`` with every record's timestamp moved by ``delta_us``: another capture (another
    capture_id) of the same messages, a moment later."""
    data = src.read_bytes()
    recs = [[*divmod(ts_of(r) + delta_us, 1_000_000), r[2]] for r in records(data)]
    dst.write_bytes(with_records(data, recs))
    return dst


@pytest.fixture(scope="session")
def metrics_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("metrics_lake")
    c = conf.with_overrides(lake__root=str(lake))
    # nack_reject again, 1 us later, in the same run: its publishes must not stand in for the original's
    # (the same message ids, each 1 us after the original's publish and before its delivery)
    twin = shifted_copy(DATA / "broker" / "nack_reject.pcap", lake.parent / "nack_reject_1us_later.pcap", 1)
    # compiled, as the pipeline runs (the tests' other queries run interpreted: tests/conftest.py)
    with sql_settings(spark, COMPILED):
        return c, *built_lake(spark, c, [*CAPTURES, str(twin)], "m")


def built_lake(spark, c, paths: list[str], run_id: str):
    """The captures ``paths`` through ingest, lifecycle and metrics into ``c``'s lake: (its store, the captures done)."""
    ingest_captures.run(spark, c, paths, run_id=run_id)
    lifecycle.run(spark, c, run_id=run_id)
    done = metrics.run(spark, c, run_id=run_id)
    return TableStore(spark, c["lake.root"]), done


def capture_id(name: str) -> str:
    path = DATA / "demo" / "demo.pcap" if name == "demo" else DATA / "broker" / f"{name}.pcap"
    if name.startswith("v0_10/"):
        path = DATA / f"{name}.pcap"
    return ingest_captures.capture_files([str(path)])[0].capture_id
