"""Split planning: a file smaller than capture.split_size still feeds every core, down to min_split_size."""

from __future__ import annotations

import pytest

from amqplens.decode.capture import read_split
from amqplens.jobs.ingest_captures import _split_rows, split_size_for
from amqplens.inputs import CaptureFile

MIB = 1 << 20


@pytest.mark.parametrize(
    ("size", "split", "floor", "cores", "expected"),
    [
        (100_003_864, 128 * MIB, 8 * MIB, 2, 50_001_932),  # the 100 MB bench capture: two splits, not one
        (299_938_956, 128 * MIB, 8 * MIB, 2, 128 * MIB),  # larger than two splits already: unchanged
        (10 * MIB, 128 * MIB, 8 * MIB, 2, 8 * MIB),  # halves would be under the floor: 8 MiB + 2 MiB
        (1000, 128 * MIB, 8 * MIB, 2, 8 * MIB),  # a tiny file stays one split
        (100, 64, 0, 4, 25),  # no floor: one split per core
        (101, 64, 0, 4, 26),  # rounded up, so never a fifth split of one byte
        (0, 128 * MIB, 8 * MIB, 2, 8 * MIB),
        (100, 128 * MIB, 0, 0, 100),  # a parallelism of 0 is taken as 1
    ],
)
def test_split_size_for(size, split, floor, cores, expected):
    assert split_size_for(size, split, floor, cores) == expected


def test_small_file_gets_one_split_per_core_and_the_same_packets(tmp_path):
    """The rows of the planned splits together equal the rows of the file read whole."""
    from tools.gen_capture import generate

    path = tmp_path / "small.pcap"
    generate(path, 0.3, seed=3)
    f = CaptureFile(path=str(path), size=path.stat().st_size, capture_id="c")
    rows = _split_rows([f], 128 * MIB, 0, 3)
    assert [r[4] for r in rows] == [0, 1, 2]
    assert rows[0][2] == 0 and rows[-1][3] == f.size
    assert all(a[3] == b[2] for a, b in zip(rows, rows[1:]))  # contiguous, no byte twice

    def offsets(start, end):
        return [o for cols in read_split(str(path), "c", start, end) for o in cols["record_offset"]]

    whole = offsets(0, f.size)
    assert len(whole) > 100
    assert [o for r in rows for o in offsets(r[2], r[3])] == whole


def test_many_small_files_share_few_tasks_and_large_splits_keep_their_own():
    """300 captures of 30 KB (a capture cut by editcap, rotated tcpdump files) were 300 Spark tasks of the read stage,
    one per file; packed, they are one task per core, each split in exactly one task. Splits of min_split_size or
    more (a large file's) stay a task each."""
    from amqplens.jobs.ingest_captures import pack_splits

    tiny = [(f"c{i}", f"/f{i}", 0, 30_000 + i, 0) for i in range(300)]
    tasks = pack_splits(tiny, 8 * MIB, 2)
    assert len(tasks) == 2
    assert sorted(r for t in tasks for r in t) == sorted(tiny)
    assert abs(sum(r[3] for r in tasks[0]) - sum(r[3] for r in tasks[1])) <= 30_300
    big = [("b", "/big", i * 128 * MIB, (i + 1) * 128 * MIB, i) for i in range(3)]
    tasks = pack_splits(big + tiny[:5], 8 * MIB, 2)
    assert tasks[:3] == [[r] for r in big] and sorted(tasks[3]) == sorted(tiny[:5])
    # 40 MiB of small splits: at most min_split_size each, so at least 5 tasks; no floor: a task per split
    assert len(pack_splits([(f"c{i}", "/f", 0, MIB, 0) for i in range(40)], 8 * MIB, 2)) == 5
    assert pack_splits(tiny[:3], 0, 2) == [[r] for r in tiny[:3]]
