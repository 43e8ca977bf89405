"""The lake every e2e test module shares: all fixtures ingested once per session."""

from __future__ import annotations

import glob

import pytest

from amqplens.jobs import ingest_captures
from amqplens.lake.store import TableStore
from tests.conftest import DATA

FIXTURES = sorted(
    glob.glob(str(DATA / "public" / "*.pcap*"))
    + glob.glob(str(DATA / "broker" / "*.pcap"))
    + glob.glob(str(DATA / "demo" / "*.pcap"))
    + glob.glob(str(DATA / "capture" / "*.pcap*"))
    + glob.glob(str(DATA / "v0_10" / "*.pcap"))
)
TABLES = ("captures", "connections", "frames", "decode_errors")


@pytest.fixture(scope="session")
def ingested(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("lake")
    c = conf.with_overrides(lake__root=str(lake))
    result = ingest_captures.run(spark, c, FIXTURES, run_id="first")
    return c, TableStore(spark, str(lake)), result


@pytest.fixture(scope="session")
def lifecycled(spark, ingested):
    from amqplens.jobs import lifecycle

    c, store, _ = ingested
    done = lifecycle.run(spark, c, run_id="first")
    return c, store, done


