"""A small lake for the quality gates: one capture per dialect family through every stage, validated once."""

from __future__ import annotations

import pytest

from amqplens.jobs import ingest_captures
from amqplens.jobs import lifecycle
from amqplens.jobs import metrics
from amqplens.jobs import validate
from amqplens.lake.store import TableStore
from tests.conftest import DATA

# 0-9-1 (the demo: confirms, consumers, acks), 1.0 (a real RabbitMQ 1.0 session with settle modes and errors), 0-10
CAPTURES = [str(DATA / "demo" / "demo.pcap"), str(DATA / "broker" / "amqp10_rich.pcap"), str(DATA / "v0_10" / "publish_consume.pcap")]


@pytest.fixture(scope="session")
def quality_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("quality_lake")
    c = conf.with_overrides(lake__root=str(lake))
    ingest_captures.run(spark, c, CAPTURES, run_id="q")
    lifecycle.run(spark, c, run_id="q")
    metrics.run(spark, c, run_id="q")
    return c, TableStore(spark, str(lake))


@pytest.fixture(scope="session")
def validated(spark, quality_lake):
    c, store = quality_lake
    return validate.run(spark, c, run_id="fixtures")


def capture_id(path: str) -> str:
    return ingest_captures.capture_files([path])[0].capture_id
