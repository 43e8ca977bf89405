"""The CLI's checks before Spark starts, and its stage lines: a mistake costs well under a second and one line.

Bad input tried: an input file that does not exist, a glob that matches nothing, a --logs path that does not exist,
a lake path that is a file, a lake under a file, a report folder that is a file, a bad --set value. Each must end
the command with exit 2 and one line on stderr, before pyspark is even imported.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import pytest

from amqplens import preflight
from amqplens.progress import Stage
from tests.conftest import DATA, ROOT

GOOD = str(DATA / "broker" / "publish_confirms.pcap")


CASES = [
    (["run", "--input", "/no/such.pcap"], "input '/no/such.pcap': no such file or folder"),
    (["run", "--input", "/no/such/*.pcap"], "the pattern matches no file"),
    (["run", "--input", GOOD, "--logs", "/no/such.log"], "logs '/no/such.log': no such file or folder"),
    (["run", "--input", GOOD, "--lake", GOOD], "is a file, not a folder"),
    (["run", "--input", GOOD, "--lake", GOOD + "/lake"], "cannot be created"),
    (["run", "--input", GOOD, "--lake", "LAKE", "--out", GOOD], "report folder"),
    (["run", "--input", GOOD, "--set", "capture.split_size=huge"], "bad configuration"),
    # issue 35: a mistyped --lake for a command that reads a lake looked like success (exit 0, an empty summary or
    # report, "0 file(s) deleted") and left a new <typo>/_logs folder behind
    (["summary"], "no such lake: "),
    (["report", "--out", "OUT"], "no such lake: "),
    (["vacuum"], "no such lake: "),
    (["check"], "no such lake: "),
    (["repair"], "no such lake: "),
    (["metrics"], "no such lake: "),
]


def _argv(argv, tmp_path):
    argv = [str(tmp_path / "lake") if a == "LAKE" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    return argv if "--lake" in argv else argv + ["--lake", str(tmp_path / "lake")]


@pytest.mark.parametrize("argv, says", CASES)
def test_a_mistake_is_one_line(argv, says, tmp_path, capsys):
    from amqplens import cli

    assert cli.main(_argv(argv, tmp_path)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("amqplens: ") and says in err, err
    if argv[0] != "run":
        assert not (tmp_path / "lake").exists()  # a mistyped lake gets no folder (nor _logs) either


def test_a_mistake_costs_no_spark_start(tmp_path):
    """In a fresh interpreter: every case above fails without importing pyspark, in seconds at most."""
    code = ("import json, sys; from amqplens import cli; "
            "codes = [cli.main(a) for a in json.loads(sys.argv[1])]; "
            "print(codes, 'pyspark' in sys.modules)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([_argv(a, tmp_path) for a, _ in CASES])],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == f"{[2] * len(CASES)} False", proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 10  # ~0.5 s on a quiet machine (the interpreter and pyarrow's import)


def test_the_lake_is_created_by_a_run_and_a_command_that_reads_it_needs_one(tmp_path, conf):
    class Args:
        command, input, logs, out = "run", [GOOD], [], None

    preflight.check(Args, conf.with_overrides(lake__root=str(tmp_path / "a" / "lake"), report__out=str(tmp_path / "r")))
    assert (tmp_path / "a" / "lake").is_dir()
    Args.command, Args.input = "summary", []
    with pytest.raises(preflight.PreflightError, match="holds no table"):  # a folder, but no table in it
        preflight.check(Args, conf.with_overrides(lake__root=str(tmp_path / "a" / "lake")))
    (tmp_path / "a" / "lake" / "captures" / "_delta_log").mkdir(parents=True)
    preflight.check(Args, conf.with_overrides(lake__root=str(tmp_path / "a" / "lake")))


def test_a_short_stage_prints_one_line_and_a_long_one_plain_progress_lines_in_a_log():
    out = io.StringIO()
    with Stage("ingest-captures", out=out, tty=False) as stage:
        stage.done("1 capture(s) written")
    assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("ingest-captures: 1 capture(s) written (")
    out = io.StringIO()
    with Stage("metrics", out=out, tty=False, plain_every_s=0.2) as stage:
        time.sleep(1.3)
        stage.done("1 capture(s) written")
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("metrics: (") for line in lines[:-1]), lines
    assert "\r" not in out.getvalue() and lines[-1].startswith("metrics: 1 capture(s) written (")


def test_on_a_terminal_the_live_line_is_redrawn_then_cleared():
    out = io.StringIO()
    with Stage("validate", out=out, tty=True) as stage:
        time.sleep(1.2)
        stage.done("119 expectations")
    text = out.getvalue()
    assert text.startswith("\rvalidate: (") and text.count("\n") == 1
    assert text.split("\r")[-1].startswith("validate: 119 expectations (")  # the live line blanked, then the stage's line
