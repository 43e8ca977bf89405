"""Differential: every capture through our reader and through tshark, packet by packet."""

from __future__ import annotations

import subprocess
import sys

import pytest
from capture_helpers import ALL_CAPTURES, DATA, assert_matches_tshark, needs_tshark, read_all

from amqplens.decode.capture import flow_key, sniff_format

ROOT = DATA.parents[1]


@needs_tshark
@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_tcp_packets_match_tshark(path):
    assert_matches_tshark(path)


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_rows_are_consistent(path):
    rows, result = read_all(path)
    assert result.errors == []
    assert result.stats.tcp_packets == len(rows)
    offsets = [r["record_offset"] for r in rows]
    assert offsets == sorted(set(offsets))
    for r in rows:
        assert r["flow_key"] == flow_key(r["src_ip"], r["src_port"], r["dst_ip"], r["dst_port"])
        assert r["flow_key"] == flow_key(r["dst_ip"], r["dst_port"], r["src_ip"], r["src_port"])
        assert r["capture_id"] == "cap"
        assert 0 <= r["seq"] < 2**32 and 0 <= r["ack"] < 2**32


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_sniff_format(path):
    assert sniff_format(path) == path.suffix.lstrip(".")


def test_capture_package_stays_pure():
    code = (
        "import sys, amqplens.decode.capture; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'deltalake', 'pandas')); "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
