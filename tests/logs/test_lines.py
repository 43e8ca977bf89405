"""Reading a log by byte ranges: every line once, with its file line number, however the file is cut."""

from __future__ import annotations

from amqplens.logs import lines
from tests.conftest import DATA


def _all(path, size):
    out, before = [], 0
    for start, end in lines.plan_splits(path, size):
        out += [ln for entry in lines.read_entries(path, start, end, before + 1, lambda p, l: False) for ln in entry]
        before += lines.count_newlines(path, start, end)
    return out


def test_every_line_once_with_its_number_and_offset_for_any_split_size(tmp_path):
    path = tmp_path / "f.log"
    raw = b"first\r\n\nthird line\n" + b"x" * 300 + b"\nlast without newline"
    path.write_bytes(raw)
    want = [(1, 0, b"first"), (2, 7, b""), (3, 8, b"third line"), (4, 19, b"x" * 300), (5, 320, b"last without newline")]
    for size in (1, 2, 7, 8, 64, 10_000):
        assert [(ln.number, ln.offset, ln.raw) for ln in _all(path, size)] == want


def test_a_line_longer_than_the_cap_is_cut_and_flagged_and_the_next_line_read(tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 100)
    path = tmp_path / "long.log"
    path.write_bytes(b"a" * 1000 + b"\nnext\n")
    got = _all(path, 10_000)
    assert [(ln.number, ln.offset, len(ln.raw), ln.truncated) for ln in got] == [(1, 0, 100, True), (2, 1001, 4, False)]


def test_real_log_lines_match_splitlines():
    path = DATA / "broker" / "rabbitmq.log"
    assert [ln.raw for ln in _all(path, 777)] == path.read_bytes().splitlines()
