"""One lake for the metric tests: the real-broker fixtures and the demo, through every stage, once per session."""

from __future__ import annotations

import glob

import pytest

from jobs import ingest_captures, lifecycle, metrics
from jobs.lake import TableStore
from tests.conftest import DATA

CAPTURES = (sorted(glob.glob(str(DATA / "broker" / "*.pcap"))) + [str(DATA / "demo" / "demo.pcap")]
            + sorted(glob.glob(str(DATA / "v0_10" / "*.pcap"))))


@pytest.fixture(scope="session")
def metrics_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("metrics_lake")
    c = conf.with_overrides(lake__root=str(lake))
    ingest_captures.run(spark, c, CAPTURES, run_id="m")
    lifecycle.run(spark, c, run_id="m")
    done = metrics.run(spark, c, run_id="m")
    return c, TableStore(spark, str(lake)), done


def capture_id(name: str) -> str:
    path = DATA / "demo" / "demo.pcap" if name == "demo" else DATA / "broker" / f"{name}.pcap"
    if name.startswith("v0_10/"):
        path = DATA / f"{name}.pcap"
    return ingest_captures.capture_files([str(path)])[0].capture_id
