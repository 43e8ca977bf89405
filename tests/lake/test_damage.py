"""The lake under damage and interruption (issue 35): each damage is named, contained, and repaired.

Damage tried, each on a copy of a finished lake of the demo capture (then a second, healthy capture: a real
broker's basic.get), with the commands run as a user runs them (subprocesses):

1. one ``frames`` Parquet file deleted;
2. the newest ``deliveries`` commit file cut in half;
3. garbage before the first line of ``connections``' first commit file;
4. a table left as a log without any commit (a full disk or a kill during a lake's first write);
5. the lake on a read-only mount (``summary``, ``report --out`` elsewhere);
6. Ctrl-C while Spark starts and during a stage;
7. two runs of the same capture at once;
8. a mistyped ``--lake`` for the commands that read a lake (tests/unit/test_preflight.py);
9. ``vacuum`` right after rows were replaced (what it keeps, and why).

What must hold: ``check`` names the table, version and file, with exit 5; a healthy capture is ingested whole
beside a damaged one; a command refuses to write into a table whose log is damaged, and changes nothing;
``repair`` leaves every table equal, row for row, to a clean run's. The expected rows are a clean run's of the
same inputs (another process, no damage), never what the damaged lake printed.

A CLI run starts a JVM (10-20 s here): the lakes are built once per module and copied.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from amqplens.contracts import ALL_TABLES
from amqplens.lake.check import EXIT_DAMAGED
from tests.conftest import DATA, ROOT
from tests.e2e.test_crash_restart import snapshot

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

DEMO = DATA / "demo" / "demo.pcap"
OTHER = DATA / "broker" / "basic_get.pcap"
SETS = ["--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2", "--set", "validate.enabled=false"]


def cli(*args, lake, report=None, wrap=(), timeout=900) -> subprocess.CompletedProcess:
    extra = ["--set", f"report.out={report}"] if report else []
    cmd = [*wrap, sys.executable, "-m", "amqplens.cli", *args, "--lake", str(lake), *SETS, *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def run(lake, tmp, *inputs) -> subprocess.CompletedProcess:
    return cli("run", "--input", *map(str, inputs), lake=lake, report=tmp / "report")


def ok(proc) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def no_traceback(proc) -> None:
    for word in ("Traceback", "py4j", "DeltaError", "PATH_NOT_FOUND", "FileNotFoundError", "OSError"):
        assert word not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def copy(src, dest):
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("_logs"))
    return dest


def tree(lake) -> dict:
    """Every file of the lake (but the Spark logs) with its size and modification time: what 'nothing changed' means."""
    out = {}
    for dirpath, _, files in os.walk(lake):
        if "_logs" in dirpath:
            continue
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), lake)] = (st.st_size, st.st_mtime_ns)
    return out


def rows_of(snap: dict, capture_id: str) -> dict:
    return {name: None if rows is None else sorted(r for r in rows if capture_id in r) for name, rows in snap.items()}


def present_rows_of(lake, capture_id: str) -> dict:
    """``rows_of(snapshot(lake), ...)`` for a lake with missing files: their rows are left out (this capture has none)."""
    import pyarrow.dataset as pads
    from deltalake import DeltaTable

    out = {}
    for name in ALL_TABLES:
        if not (lake / name / "_delta_log").exists():
            out[name] = None
            continue
        data = DeltaTable(str(lake / name)).to_pyarrow_dataset()
        fragments = [f for f in data.get_fragments() if (lake / name / f.path).exists()]
        rows = pads.FileSystemDataset(fragments, data.schema, data.format, data.filesystem).to_table()
        out[name] = sorted(r for r in map(repr, rows.drop_columns(["run_id"] if "run_id" in rows.column_names else [])
                                          .to_pylist()) if capture_id in r)
    return out


def capture_id(lake, path) -> str:
    from deltalake import DeltaTable

    rows = DeltaTable(str(lake / "captures")).to_pyarrow_table(columns=["capture_id", "path"]).to_pylist()
    return next(r["capture_id"] for r in rows if r["path"] == str(path))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("damage")


@pytest.fixture(scope="module")
def clean(work):
    """A finished lake of the demo capture."""
    ok(run(work / "clean", work, DEMO))
    return work / "clean"


@pytest.fixture(scope="module")
def other_run_s(work, clean):
    """The wall time of a clean run of the other capture (on a copy of the clean lake): where random kills land."""
    lake = copy(clean, work / "timed")
    t0 = time.monotonic()
    ok(run(lake, work, OTHER))
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def reference(work, other_run_s):
    """The clean lake after a clean run of the other capture: what every repair must end in."""
    return snapshot(work / "timed")


@pytest.fixture(scope="module")
def missing_file(work, clean):
    """Case 1: one frames file of the demo capture deleted; then check, and a run of a new, healthy capture."""
    lake = copy(clean, work / "missing_file")
    victim = sorted((lake / "frames").rglob("*.parquet"))[0]
    victim.unlink()
    checked = cli("check", lake=lake)
    ran = run(lake, work, OTHER)
    return lake, victim.relative_to(lake / "frames").as_posix(), checked, ran


def test_a_missing_data_file_is_named_by_check(missing_file):
    lake, rel, checked, _ = missing_file
    assert checked.returncode == EXIT_DAMAGED, checked.stdout + checked.stderr
    (line,) = [ln for ln in checked.stdout.splitlines() if rel in ln]
    assert line.startswith("table frames, version 0, file ") and "missing" in line


def test_a_capture_damaged_in_one_table_fails_no_other_capture(missing_file, reference):
    """Before: the new capture was ingested, then marked failed in metrics with the other capture's PATH_NOT_FOUND."""
    lake, rel, _, ran = missing_file
    ok(ran)
    no_traceback(ran)
    assert "warning: table frames" in ran.stderr and rel in ran.stderr
    assert "ingest-captures: 1 capture(s) written" in ran.stdout and "metrics: 1 capture(s) written" in ran.stdout
    cid = capture_id(lake, OTHER)
    got = present_rows_of(lake, cid)
    assert got == rows_of(reference, cid) and got["frames"] and got["deliveries"]


def test_a_read_only_lake_can_be_summarised_and_reported(missing_file, work):
    """Case 5 (on the damaged lake of case 1, a read-only mount): before, both crashed on `<lake>/_logs` (exit 1)."""
    lake = missing_file[0]
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m) to mount the lake read-only")
    ro = ["unshare", "-m", "sh", "-c", f'mount --bind "{lake}" "{lake}" && mount -o remount,ro,bind "{lake}" && exec "$@"', "-"]
    before = tree(lake)
    summary = cli("summary", lake=lake, wrap=ro)
    report = cli("report", "--out", str(work / "ro-report"), lake=lake, wrap=ro)
    for proc in (summary, report):
        no_traceback(proc)
        assert proc.returncode == EXIT_DAMAGED, proc.stdout + proc.stderr  # the deleted file: named, not fatal
        assert "warning: table frames" in proc.stderr and "Read-only" not in proc.stderr
    assert "captures (2):" in summary.stdout
    assert (work / "ro-report" / "index.html").exists()
    assert tree(lake) == before


@pytest.fixture(scope="module")
def logs_damaged(work, missing_file):
    """Cases 2, 3, 4 on top of case 1 (a missing frames file; two captures, so each table has two versions): the
    newest deliveries commit cut in half, garbage in connections' first commit, flow_events' log emptied."""
    lake = copy(missing_file[0], work / "logs_damaged")
    newest = sorted((lake / "deliveries" / "_delta_log").glob("*.json"))[-1]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    first = lake / "connections" / "_delta_log" / f"{0:020d}.json"
    first.write_bytes(b"Garbage\n" + first.read_bytes())
    for f in (lake / "flow_events" / "_delta_log").glob("*.json"):
        f.unlink()
    before = tree(lake)
    out = {"check": cli("check", lake=lake), "summary": cli("summary", lake=lake), "run": run(lake, work, OTHER),
           "new": run(lake, work, DATA / "broker" / "connection_forced.pcap")}
    out["unchanged"] = tree(lake) == before
    out["repair"] = cli("repair", lake=lake)
    out["after"] = snapshot(lake)
    out["check_after"] = cli("check", lake=lake)
    out["vacuum"] = cli("vacuum", lake=lake)
    out["vacuum_now"] = cli("vacuum", "--retention-hours", "0", lake=lake)
    out["check_vacuumed"] = cli("check", lake=lake)
    return lake, newest.name, out


def test_a_cut_off_commit_file_is_named_and_no_command_writes_into_its_table(logs_damaged):
    """Case 2. Before: every command failed with `Json error: Truncated record` and a Rust backtrace that never named
    the table, and a new capture's frames were committed, its deliveries not, its captures row said failed."""
    _, newest, out = logs_damaged
    line = f"table deliveries, version 1, file _delta_log/{newest}: the log's commit file "
    assert line in out["check"].stdout and out["check"].returncode == EXIT_DAMAGED
    for cmd in ("summary", "run", "new"):
        proc = out[cmd]
        assert proc.returncode == EXIT_DAMAGED and line in proc.stderr, proc.stdout + proc.stderr
        assert "nothing was done" in proc.stderr and "amqplens repair" in proc.stderr
        no_traceback(proc)
    assert out["unchanged"]  # not a byte of the lake was written


def test_garbage_in_a_first_commit_file_is_named(logs_damaged):
    """Case 3. Before: `Json error: Encountered unexpected 'G'`, no table named."""
    out = logs_damaged[2]
    assert f"table connections, version 0, file _delta_log/{0:020d}.json: the log's commit file line 1 is not JSON" \
        in out["check"].stdout


def test_a_log_without_commits_is_no_table_and_its_left_files_are_named(logs_damaged, tmp_path):
    """Case 4. Before: the deltalake package refused such a table ("No files in log segment") in every command."""
    from amqplens.lake.store import TableStore

    out = logs_damaged[2]
    assert "table flow_events, file _delta_log: the log holds no commit, but the folder holds " in out["check"].stdout
    (tmp_path / "frames" / "_delta_log").mkdir(parents=True)  # a first write that died before its commit
    assert TableStore(None, str(tmp_path)).delta("frames") is None


def test_repair_restores_every_table_to_a_clean_runs_rows(logs_damaged, reference):
    lake, _, out = logs_damaged
    repair = ok(out["repair"])
    assert "repair: table deliveries: back to version 0" in repair.stdout  # where Delta allows: the good version
    assert "repair: table connections: no good version left" in repair.stdout
    assert out["after"] == reference
    assert ok(out["check_after"]).stdout.startswith("check: ")
    assert list((lake / "_damaged").iterdir())  # what was set aside is kept


def test_vacuum_says_what_it_keeps_and_why(logs_damaged):
    """Case 9. Before: right after captures were replaced, "0 file(s) deleted" for every table, and nothing said why."""
    out = logs_damaged[2]
    vac, now = ok(out["vacuum"]), ok(out["vacuum_now"])
    kept = int(vac.stdout.split("vacuum: ")[1].split()[0])
    assert kept > 0 and "less than 168 h ago" in vac.stdout
    deleted = sum(int(ln.split(": ")[1].split()[0]) for ln in now.stdout.splitlines() if "file(s) deleted" in ln)
    assert deleted >= kept
    ok(out["check_vacuumed"])
    help_text = subprocess.run([sys.executable, "-m", "amqplens.cli", "vacuum", "--help"], cwd=ROOT, capture_output=True,
                               text=True).stdout
    help_text = " ".join(help_text.split())  # argparse wraps it to the terminal's width
    assert "--retention-hours H keep the files" in help_text and "older snapshot" in help_text


def test_a_capture_failing_after_some_commits_gets_no_captures_row_that_contradicts_them(work, clean):
    """Before (case 2's second half): a capture whose frames were committed and whose next table failed got a captures
    row saying `failed ... packets=0 connections=0`, contradicting its 492 stored frames. Now it gets no row (as
    after a kill between two commits): the run exits 3 naming it, check names its rows, the next run finishes it."""
    from amqplens.lake.store import FAILPOINT_ENV, TableStore

    lake = copy(clean, work / "half")
    cmd = [sys.executable, "-m", "amqplens.cli", "run", "--input", str(OTHER), "--lake", str(lake), *SETS,
           "--set", f"report.out={work / 'report'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, FAILPOINT_ENV: "raise:frames"})  # decode_errors' commit raises
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert str(OTHER) in proc.stderr and "the next run finishes it" in proc.stderr
    store = TableStore(None, str(lake))
    caps = store.read_arrow("captures", ["capture_id", "path"]).to_pylist()
    assert [c["path"] for c in caps] == [str(DEMO)]  # no row for the half-committed capture
    cid = subprocess.run(["sha256sum", str(OTHER)], capture_output=True, text=True).stdout.split()[0]
    assert store.rows("frames", [cid]) > 0 and store.rows("decode_errors", [cid]) == 0
    checked = cli("check", lake=lake)
    assert checked.returncode == EXIT_DAMAGED
    assert f"table frames, version 1: holds {store.rows('frames', [cid])} rows of capture {cid[:12]}, which captures " \
        "does not know" in checked.stdout


def _interrupt_when(lake, tmp, ready) -> subprocess.CompletedProcess:
    """A run sent SIGINT (as Ctrl-C sends it: to the whole process group) as soon as ``ready()`` holds."""
    cmd = [sys.executable, "-m", "amqplens.cli", "run", "--input", str(DEMO), "--lake", str(lake), *SETS,
           "--set", f"report.out={tmp / 'report'}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Case 6. Before: during a stage exit 130 without a word; while Spark started, 48 lines of py4j tracebacks."""
    lake = tmp_path / "lake"
    starting = _interrupt_when(lake, tmp_path, lambda: any((lake / "_logs").glob("spark-*.log")))
    staging = _interrupt_when(lake, tmp_path, lambda: any(p.is_dir() and any(p.iterdir())
                                                          for p in lake.glob("*/_staging")))
    for proc, where in ((starting, "while Spark started"), (staging, "during ingest-captures")):
        assert proc.returncode == 130, proc.stdout + proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"amqplens: interrupted {where}"), proc.stderr
        assert "finishes the work" in lines[0]
        no_traceback(proc)


def test_two_runs_at_once_each_say_what_they_wrote(work, clean, reference):
    """Case 7. Before: both runs of one capture printed "1 capture(s) written"."""
    lake = copy(clean, work / "concurrent")
    cmd = [sys.executable, "-m", "amqplens.cli", "run", "--input", str(OTHER), "--lake", str(lake), *SETS,
           "--set", f"report.out={work / 'report'}"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
        assert "Nothing was changed" not in err and "retrying" not in err, err
    written = [out for out, _ in outs if "ingest-captures: 1 capture(s) written" in out]
    assert len(written) == 1, [out for out, _ in outs]
    assert snapshot(lake) == reference


# kill points of the test below; AMQPLENS_KILL_POINTS=10 (or more) for the longer run (see docs/operations.md)
KILL_POINTS = int(os.environ.get("AMQPLENS_KILL_POINTS", "2"))


def test_killed_at_random_moments_then_rerun_ends_in_a_clean_runs_tables(work, clean, reference, other_run_s):
    """SIGKILL (the run and its JVM) at moments drawn with a fixed seed over a clean run's wall time, each kill
    followed by the next attempt, then one run left to finish: the lake equals the clean run's, row for row."""
    import random

    draw = random.Random(35)
    lake = copy(clean, work / "killed")
    cmd = [sys.executable, "-m", "amqplens.cli", "run", "--input", str(OTHER), "--lake", str(lake), *SETS,
           "--set", f"report.out={work / 'report'}"]
    for _ in range(KILL_POINTS):
        at = draw.uniform(0.1, 1.0) * other_run_s
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=at)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    final = ok(run(lake, work, OTHER))
    no_traceback(final)
    assert snapshot(lake) == reference
