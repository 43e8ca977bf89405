"""`amqplens summary` says what the lake holds: every table (issue 36.8: it listed 4 of the 12)."""

from __future__ import annotations

import io
import re

import pytest
from deltalake import DeltaTable

from amqplens import cli
from amqplens.config import load_config
from amqplens.contracts import ALL_TABLES

pytestmark = pytest.mark.spark


def test_summary_lists_every_table_with_its_rows(spark, demo_lake):
    out = io.StringIO()
    cli.print_summary(spark, load_config(sets=[f"lake.root={demo_lake}"]), out=out)
    listed = dict(re.findall(r"^  (\w+)\s+([\d,]+) rows", out.getvalue(), re.M))
    unwritten = set(re.findall(r"^  (\w+)\s+not written yet$", out.getvalue(), re.M))
    assert set(listed) | unwritten == set(ALL_TABLES) and not set(listed) & unwritten, out.getvalue()
    assert unwritten == {t for t in ALL_TABLES if not (demo_lake / t / "_delta_log").exists()} == {"broker_events"}  # no logs given
    for name in listed:  # the rows delta-rs reads from each table's files, not its log's statistics
        assert int(listed[name].replace(",", "")) == DeltaTable(str(demo_lake / name)).to_pyarrow_table().num_rows, name
    assert int(listed["frames"].replace(",", "")) > 0 and int(listed["deliveries"].replace(",", "")) > 0
