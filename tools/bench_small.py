"""The small-capture line of the benchmark: ``amqplens run`` on a capture of at most 1 MB, every stage included.

    python -m tools.bench_small                     # a generated 1 MB capture, 3 runs
    python -m tools.bench_small --capture demo.pcap --repeat 5

What a person trying amqplens on the capture at hand waits for: the CLI in a
subprocess (JVM start, session, ingest, lifecycle, metrics, validate, report,
shutdown) on a fresh lake each run, timed end to end, with the stage times the
CLI prints. ``tools.bench`` (``make bench``) prints this line after its large ones.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1_000_000
SIZE_MB = 1.0
TARGET_S = 20.0  # issue 23: a capture of 1 MB or less, validate and report included, in at most 20 s
STAGE_LINE = re.compile(r"^(?P<stage>[a-z-]+): .*\((?P<s>[0-9.]+)s\)")


def run_once(capture: Path, work: Path, master: str, sets: list[str]) -> dict:
    """One ``amqplens run`` on a fresh lake: wall seconds, exit code and the seconds of each stage line."""
    lake, report = work / "lake", work / "report"
    shutil.rmtree(work, ignore_errors=True)
    cmd = [sys.executable, "-m", "amqplens.cli", "run", "--input", str(capture), "--lake", str(lake),
           "--set", f"spark.master={master}", "--set", f"report.out={report}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    stages = {m["stage"]: float(m["s"]) for m in map(STAGE_LINE.match, p.stdout.splitlines()) if m}
    return {"wall_s": round(wall, 2), "rc": p.returncode, "stages": stages, "stdout": p.stdout, "stderr": p.stderr}


def bench(capture: Path, out: Path, *, repeat: int = 3, master: str = "local[2]", sets: list[str] = ()) -> dict:
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-small-", dir=out) as tmp:
        for i in range(repeat):
            r = run_once(capture, Path(tmp) / f"run{i}", master, list(sets))
            runs.append(r)
            if r["rc"] != 0:
                break
    ok = [r for r in runs if r["rc"] == 0]
    res = {"capture": str(capture), "file_bytes": capture.stat().st_size, "runs": runs,
           "median_s": round(statistics.median(r["wall_s"] for r in ok), 2) if ok else None}
    if ok:
        res["stage_median_s"] = {k: round(statistics.median(r["stages"].get(k, 0.0) for r in ok), 2) for k in ok[0]["stages"]}
    return res


def print_line(res: dict) -> None:
    size = res["file_bytes"] / MB
    if res["median_s"] is None:
        last = res["runs"][-1]
        print(f"small capture ({size:.2f} MB): amqplens run failed (exit {last['rc']})\n{last['stderr'][-2000:]}")
        return
    verdict = "ok" if res["median_s"] <= TARGET_S else "over"
    print(f"small capture ({size:.2f} MB, {Path(res['capture']).name}): amqplens run median {res['median_s']:.1f} s "
          f"over {len(res['runs'])} run(s) (target <= {TARGET_S:g} s: {verdict}); stages: "
          + ", ".join(f"{k} {v:.1f}" for k, v in res["stage_median_s"].items()))


def small_capture(out: Path, seed: int) -> Path:
    """The generated capture of ``SIZE_MB`` (cached in ``out`` like the large ones)."""
    from tools.bench import ensure_capture

    return ensure_capture(out, SIZE_MB, seed)[0]


def report(out: Path, seed: int = 0, master: str = "local[2]", repeat: int = 3) -> dict:
    """What ``tools.bench`` calls: bench the generated small capture and print its line."""
    res = bench(small_capture(out, seed), out, repeat=repeat, master=master)
    print_line(res)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_small", description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", type=Path, help="this capture instead of the generated 1 MB one")
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    capture = args.capture or small_capture(args.out, args.seed)
    res = bench(capture, args.out, repeat=args.repeat, master=args.master, sets=args.set)
    for i, r in enumerate(res["runs"]):
        print(f"  run {i + 1}: {r['wall_s']:.1f} s (exit {r['rc']})")
    print_line(res)
    return 0 if res["median_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
