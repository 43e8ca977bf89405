"""The fuzz campaign: coverage-guided (atheris/libFuzzer) runs of every target in ``tools/fuzz_targets.py``.

    python -m tools.fuzz --runs 1000000                       # every target, one after another
    python -m tools.fuzz --targets 1.0,capture --max-time 600 --jobs 2

Needs ``pip install -e '.[fuzz]'`` (atheris). Per target, ``<out>/corpus/<target>``
starts from the seeds (fixture connections' first bytes per direction, the
fixture files) and keeps what libFuzzer finds new coverage with. A failing input
does not stop the run: the first input per distinct failure is saved under
``<out>/findings/<target>/`` with its message, to become a regression file in
``tests/data/fuzz/<target>/`` once fixed. ``<out>/stats/<target>.json`` holds
the figures (inputs run, failures, the slowest input), rewritten as it goes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import time

TARGETS = ("0-9-1", "1.0", "0-10", "drafts", "capture")  # tools.fuzz_targets.TARGETS, not imported here (see fuzz_one)
MEMORY_EVERY = 50  # one input in this many also runs under tracemalloc (which makes it ~3x slower)
ROWS_EVERY = 4  # one stream input in this many has its rows converted to the tables' Arrow types (as costly as the decode)
STATS_EVERY = 2000


class Campaign:
    """What one target's run has seen; written to ``stats/<target>.json``."""

    def __init__(self, target: str, out: pathlib.Path, run_target) -> None:
        self.target, self.run_target = target, run_target
        self.findings_dir = out / "findings" / target
        self.stats_path = out / "stats" / f"{target}.json"
        for d in (self.findings_dir, self.stats_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        self.inputs = self.failures = 0
        self.signatures: dict[str, str] = {}
        self.slowest = (0.0, "")

    def one(self, data: bytes) -> None:
        self.inputs += 1
        t0 = time.perf_counter()
        try:
            self.run_target(self.target, data, check_memory=self.inputs % MEMORY_EVERY == 0,
                            check_rows=self.inputs % ROWS_EVERY == 0 or self.inputs % MEMORY_EVERY == 0)
        except Exception as exc:  # a finding: keep the input, go on
            self._found(data, exc)
        elapsed = time.perf_counter() - t0
        if elapsed > self.slowest[0]:
            path = self.findings_dir.parent.parent / "slowest" / f"{self.target}.bin"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
            self.slowest = (elapsed, str(path))
        if self.inputs % STATS_EVERY == 0:
            self.write()

    def _found(self, data: bytes, exc: Exception) -> None:
        self.failures += 1
        message = f"{type(exc).__name__}: {exc}"
        signature = message.split(":")[0:2]
        key = hashlib.sha1(repr(signature).encode()).hexdigest()[:12]
        if key not in self.signatures:
            self.signatures[key] = message[:500]
            (self.findings_dir / f"{key}.bin").write_bytes(data)
            (self.findings_dir / f"{key}.txt").write_text(message + "\n")
            self.write()

    def write(self) -> None:
        stats = {
            "target": self.target, "inputs": self.inputs, "seconds": round(time.time() - self.started, 1),
            "failures": self.failures, "distinct_failures": self.signatures,
            "slowest_seconds": round(self.slowest[0], 4), "slowest_input": self.slowest[1],
        }  # fmt: skip
        self.stats_path.write_text(json.dumps(stats, indent=1) + "\n")


def fuzz_one(target: str, out: pathlib.Path, libfuzzer_args: list[str]) -> None:
    """Run atheris on one target in this process (never returns: libFuzzer exits)."""
    import atheris

    with atheris.instrument_imports(include=["amqplens.decode"]):
        import amqplens.decode.capture  # noqa: F401  (the codecs import some modules lazily: instrument them all now)
        import amqplens.decode.drafts  # noqa: F401
        import amqplens.decode.tcp  # noqa: F401
        import amqplens.decode.v0_9_1  # noqa: F401
        import amqplens.decode.v0_10  # noqa: F401
        import amqplens.decode.v1_0  # noqa: F401
        from tools import fuzz_targets
    corpus = out / "corpus" / target
    if not corpus.is_dir():
        corpus.mkdir(parents=True)
        for data in fuzz_targets.seeds()[target]:
            (corpus / hashlib.sha1(data).hexdigest()).write_bytes(data)
    fuzz_targets.run_target(target, b"", check_memory=True)  # warm up: lazy imports, schemas
    campaign = Campaign(target, out, fuzz_targets.run_target)
    atheris.Setup([sys.argv[0], *libfuzzer_args, str(corpus)], campaign.one)
    try:
        atheris.Fuzz()
    finally:
        campaign.write()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    ap.add_argument("--runs", type=int, default=1_000_000, help="inputs per target (-atheris_runs)")
    ap.add_argument("--max-time", type=int, default=0, help="seconds per target (0: no limit)")
    ap.add_argument("--max-len", type=int, default=4096, help="largest input libFuzzer makes")
    ap.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    ap.add_argument("--out", default=".fuzz", help="corpus, findings and stats folder")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child process of one target
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    flags = [f"-atheris_runs={args.runs + 1}", f"-max_len={args.max_len}", "-timeout=30", "-rss_limit_mb=3072", "-print_final_stats=1"]
    if args.max_time:
        flags.append(f"-max_total_time={args.max_time}")
    if args.one:  # before anything imports amqplens.decode, or atheris cannot instrument it
        # libFuzzer's own artifacts (an input that ran out of time or memory) go next to the findings, not into cwd
        (out / "artifacts" / args.one).mkdir(parents=True, exist_ok=True)
        return fuzz_one(args.one, out, [*flags, f"-artifact_prefix={out / 'artifacts' / args.one}/"])
    pending = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(pending) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; known: {', '.join(TARGETS)}")
    running: list[subprocess.Popen] = []
    while pending or running:
        while pending and len(running) < args.jobs:
            target = pending.pop(0)
            log = (out / "logs")
            log.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "tools.fuzz", "--one", target, "--out", str(out), "--runs", str(args.runs),
                   "--max-time", str(args.max_time), "--max-len", str(args.max_len)]  # fmt: skip
            running.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log / f"{target}.log", "w")))
        time.sleep(1)
        running = [p for p in running if p.poll() is None]
    for path in sorted((out / "stats").glob("*.json")):
        s = json.loads(path.read_text())
        print(f"{s['target']:>8}: {s['inputs']} inputs in {s['seconds']} s, {s['failures']} failures "
              f"({len(s['distinct_failures'])} distinct), slowest {s['slowest_seconds']} s")  # fmt: skip


if __name__ == "__main__":
    main()
