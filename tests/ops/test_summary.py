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


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(demo_lake):
    """`amqplens summary --lake L | head -3` (found walking the README on a fresh clone): the command's output pipe
    closed by its reader. Before: a BrokenPipeError traceback on stderr and exit 120. Now: no traceback, exit 141 as
    a Unix command stopped by SIGPIPE. The read end is closed before the command prints its first line (its JVM
    starts first), so the first write finds it closed."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "amqplens.cli", "summary", "--lake", str(demo_lake)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert DeltaTable(str(demo_lake / "captures")).version() == 0  # the lake is as it was
