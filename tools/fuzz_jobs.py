"""Job-level fuzzing: the whole ``amqplens run`` (a subprocess) over seeded field-class mutants of every fixture family.

    python -m tools.fuzz_jobs --mutants 400 --batch 50          # the longer campaign (make fuzz): 8 runs of 50 mutants
    python -m tools.fuzz_jobs --pool fast --seed 38 --only 3,17  # those two mutants of one seed again, alone

Each batch is ONE ``amqplens run`` (so one JVM) over mutated copies of the fixtures, beside the clean originals
(the captures, the TLS key logs, the broker logs), then ``amqplens summary`` on its lake. The clean originals are
also run alone, once per campaign, into a lake of their own. A batch passes when:

- the run exits 0 or 3 (never 1, an uncaught error, nor 4, a critical expectation: a mutant is data);
- the report was written and ``amqplens summary`` exits 0;
- every input has a ``captures`` row, and no ``decode_errors`` row says ``internal_error``, ``reader_error`` or
  ``byte_accounting_mismatch`` (amqplens' own faults);
- the clean originals' rows in every table equal their rows in the clean-only run, capture by capture, apart
  from the columns that name the run and where its copy lay (``run_id``, ``path``, ``log_path``); a clean original
  never fails.

The mutants (``tests/e2e/mutations.py`` ``FIELD_CLASSES``): record times (years away, the ends of the field, a
fraction past its second), caplen and origlen, the pcap global header and the pcapng SHB/IDB fields (version,
snaplen, section length, if_tsresol), link types, pcapng interface ids and block lengths, truncation, IPv4/IPv6
and TCP header fields (ports, seq, ack, data offset, flags), the AMQP protocol header, each dialect's frame size,
channel, enumerated values (frame and segment type, track, class/method ids, 1.0 performative codes, roles and
settle modes), counts (body sizes, 1.0 list sizes and counts, 0-10 and draft payload integers), 1.0 link handles,
TLS record headers, and broker log line times, numbers and truncation. Classes go round-robin; mutant ``k`` of
seed ``s`` draws its original and its patch from ``random.Random(f"{s}:{k}")``, so a mutant's name
(``s<seed>k<k>``) and its pool are enough to make the same bytes again.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# family -> fixture files (relative to tests/data); "drafts" are made by draft_captures() (no fixture exists)
FAMILIES = {
    "0-9-1": ("broker/consume_prefetch_ack.pcap", "public/deepflow_amqp091_consume_publish.pcap", "broker/publish_confirms.pcap",
              "broker/channel_error.pcap", "broker/heartbeat.pcap", "broker/tx.pcap", "broker/large_body.pcap",
              "broker/mandatory_return.pcap", "broker/nack_reject.pcap", "broker/basic_get.pcap", "broker/topology.pcap",
              "broker/connection_forced.pcap", "broker/connection_blocked.pcap", "public/deepflow_amqp091_amqplib.pcap",
              "logs/broker_logs.pcap"),
    "1.0": ("broker/amqp10_rich.pcap", "public/adverb_amqp10_hello_world_qpidd_ipv6.pcapng", "broker/amqp10_proton.pcap",
            "public/amqpanalyze_amqp10_boolean_types.pcapng"),
    "0-10": ("v0_10/publish_consume.pcap", "v0_10/results_and_errors.pcap", "v0_10/large_body.pcap", "v0_10/file_and_stream.pcap"),
    "drafts": ("draft.pcap", "fast.pcap"),
    "tls": ("tls/tls12.pcap", "tls/tls13.pcap", "tls/tls12_chacha.pcap", "tls/tls13_pyamqp.pcap", "tls/tls_plain.pcap"),
    "formats": ("capture/multi_if.pcapng", "capture/lo_any_sll2.pcap", "capture/lo_ns.pcap", "capture/lo_snap120.pcap",
                "capture/lo_us.pcapng", "capture/lo_ns.pcapng"),
    "logs": ("logs/rabbitmq_3_10.log", "logs/tracing_json.log", "broker/amqp10_proton.trace.txt", "logs/rabbitmq_3_6.log",
             "logs/rabbitmq_3_7.log", "logs/rabbitmq_3_10_json.log", "logs/rabbitmq_3_10_lc4.log", "logs/tracing_text.log",
             "logs/firehose.jsonl", "logs/amqp10_proton_old_format.trace.txt", "broker/rabbitmq.log",
             "broker/amqp10_rich.rabbitmq.log", "broker/amqp10_rich.trace.txt"),
}
# a log joins the captured connections of every capture in the lake (docs/jobs.md, broker logs): with a mutated copy
# of the capture it was recorded beside in the same run, the copy's connections are candidates too, so its rows are
# compared with the clean-only run's only when no mutant of these captures is in the run (tests/data/*/README.md)
LOG_CAPTURES = {
    **{f"logs/{n}": ("logs/broker_logs.pcap",) for n in ("rabbitmq_3_10.log", "tracing_json.log", "tracing_text.log", "firehose.jsonl")},
    "broker/amqp10_proton.trace.txt": ("broker/amqp10_proton.pcap",),
    "broker/amqp10_rich.trace.txt": ("broker/amqp10_rich.pcap",),
    "broker/amqp10_rich.rabbitmq.log": ("broker/amqp10_rich.pcap",),
    "broker/rabbitmq.log": tuple(f for f in FAMILIES["0-9-1"] if f.startswith("broker/")),
}
# the make-test pool: the first two of each family (the smallest runs that still hold every dialect and format)
POOLS = {"fast": {f: files[:2] for f, files in FAMILIES.items()} | {"logs": FAMILIES["logs"][:3]}, "all": FAMILIES}
KEYLOGS = ("tls/tls12.keylog", "tls/tls13.keylog", "tls/tls12_chacha.keylog", "tls/tls13_pyamqp.keylog")
BUG_REASONS = {"internal_error", "reader_error", "byte_accounting_mismatch"}
PER_RUN = ("run_id", "path", "log_path")  # what names the run and where its copy lay, not the capture
# a log's decoder_version fingerprints the captures in the lake it was joined with (ingest_logs._captures_hash)
PER_LAKE_OF_LOGS = ("decoder_version",)
SETTINGS = ("spark.master=local[2]", "spark.shuffle_partitions=2", "spark.ui_enabled=false", "spark.progress_bar=off")


@dataclasses.dataclass
class Input:
    name: str  # file name in the run's input folder
    family: str
    data: bytes
    field_class: str = "clean"
    original: str = ""

    @property
    def capture_id(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def is_log(self) -> bool:
        return self.family == "logs"


def draft_captures() -> dict[str, bytes]:
    """A connection of each pre-standard draft (tools.fuzz_targets' seed streams) in a pcap."""
    from tests.v1_0.pcap_writer import connection_pcap
    from tools.fuzz_targets import _draft_streams
    from amqplens.decode.tcp.records import TO_CLIENT, TO_SERVER

    out = {}
    for name, streams in zip(("draft.pcap", "fast.pcap"), _draft_streams()):
        out[name] = connection_pcap([("to_server", streams[TO_SERVER]), ("to_client", streams[TO_CLIENT])],
                                    client=("10.1.0.7", 40007 + len(out)))
    return out


def originals(pool: str) -> list[Input]:
    drafts = draft_captures()
    out = []
    for family, files in POOLS[pool].items():
        for rel in files:
            data = drafts[rel] if family == "drafts" else (DATA / rel).read_bytes()
            out.append(Input(f"clean_{family}_{pathlib.Path(rel).name}", family, data, original=rel))
    return out


def mutants(pool: str, seed: int, count: int, only: set[int] | None = None, classes: list[str] | None = None) -> list[Input]:
    """Mutant ``k`` (0 <= k < count) of ``seed``: field class ``k`` round-robin, its original and its patch drawn from
    ``Random(f"{seed}:{k}")`` (retried with the same generator while a draw finds nothing to change)."""
    from tests.e2e.mutations import FIELD_CLASSES

    origs = originals(pool)
    classes = sorted(classes or FIELD_CLASSES)
    out, seen = [], {o.capture_id for o in origs}
    for k in range(count):
        if only is not None and k not in only:
            continue
        cls = classes[k % len(classes)]
        mutate, families = FIELD_CLASSES[cls]
        rnd = random.Random(f"{seed}:{k}")
        candidates = [o for o in origs if o.family in families]
        for _ in range(50):
            o = rnd.choice(candidates)
            data = mutate(o.data, rnd, o.family)
            if data and data != o.data and hashlib.sha256(data).hexdigest() not in seen:
                break
        else:
            continue
        seen.add(hashlib.sha256(data).hexdigest())
        stem = o.name.removeprefix(f"clean_{o.family}_")
        out.append(Input(f"s{seed}k{k}_{cls}_{stem}", o.family, data, cls, o.original))
    return out


# ----------------------------------------------------------------- running
def amqplens(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")  # as tests/conftest.py
    return subprocess.run([sys.executable, "-m", "amqplens.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_inputs(inputs: list[Input], work: pathlib.Path, run_id: str, summary: bool = True, sets: tuple[str, ...] = ()) -> dict:
    """One ``amqplens run`` over ``inputs`` (and ``amqplens summary`` after it) in ``work``."""
    caps, logs = work / "in", work / "logs"
    for d in (caps, logs):
        d.mkdir(parents=True, exist_ok=True)
    for i in inputs:
        ((logs if i.is_log else caps) / i.name).write_bytes(i.data)
    keylog = work / "all.keylog"
    keylog.write_bytes(b"".join((DATA / k).read_bytes() for k in KEYLOGS))
    args = ["run", "--lake", str(work / "lake"), "--run-id", run_id, "--keylog", str(keylog),
            "--set", f"report.out={work / 'report'}", *[a for s in (*SETTINGS, *sets) for a in ("--set", s)]]
    if any(not i.is_log for i in inputs):
        args += ["--input", str(caps)]
    if any(i.is_log for i in inputs):
        args += ["--logs", str(logs)]
    t0 = time.time()
    proc = amqplens(*args)
    out = {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "seconds": round(time.time() - t0, 1),
           "lake": str(work / "lake"), "report": (work / "report" / "index.html").is_file()}
    if summary:
        s = amqplens("summary", "--lake", str(work / "lake"), *[a for s in SETTINGS for a in ("--set", s)])
        out["summary_code"], out["summary_stderr"] = s.returncode, s.stderr[-3000:]
        out["summary_captures"] = next((line for line in s.stdout.splitlines() if line.startswith("captures (")), "")
    return out


def tables(lake: str, ids: set[str], log_ids: frozenset[str] = frozenset()) -> dict[str, dict[str, list[str]]]:
    """table -> capture id (log id) -> its rows (without PER_RUN columns) as sorted reprs; delta-rs, no Spark."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from amqplens.contracts import ALL_TABLES

    out: dict[str, dict[str, list[str]]] = {}
    for name in ALL_TABLES:
        path = pathlib.Path(lake) / name
        if not (path / "_delta_log").is_dir():
            out[name] = {}
            continue
        table = DeltaTable(str(path)).to_pyarrow_table()
        key = "capture_id" if "capture_id" in table.column_names else "log_id"
        table = table.filter(pc.is_in(table[key], value_set=pa.array(sorted(ids))))
        table = table.drop_columns([c for c in PER_RUN if c in table.column_names])
        rows: dict[str, list[str]] = {}
        for r in table.to_pylist():
            kept = {k: v for k, v in r.items() if not (r[key] in log_ids and k in PER_LAKE_OF_LOGS)}
            rows.setdefault(r[key], []).append(repr(sorted(kept.items())))
        out[name] = {cid: sorted(v) for cid, v in rows.items()}
    return out


def check(inputs: list[Input], result: dict, clean_tables: dict | None) -> list[str]:
    """What broke amqplens' promises in one batch's run (empty: it passed)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    problems = []
    if result["code"] not in (0, 3):
        problems.append(f"exit {result['code']}: {result['stderr'][-4000:]}")
    if not result["report"]:
        problems.append("no report written")
    if result.get("summary_code", 0) != 0:
        problems.append(f"summary exit {result['summary_code']}: {result['summary_stderr']}")
    lake = pathlib.Path(result["lake"])
    if not (lake / "captures" / "_delta_log").is_dir():
        return problems + ["no captures table"]
    caps = {r["capture_id"]: r for r in DeltaTable(str(lake / "captures")).to_pyarrow_table(
        columns=["capture_id", "status", "error"]).to_pylist()}
    names = {i.capture_id: i.name for i in inputs}
    for i in inputs:
        if i.capture_id not in caps:
            problems.append(f"{i.name}: no captures row")
        elif i.field_class == "clean" and caps[i.capture_id]["status"] == "failed":
            problems.append(f"{i.name}: a clean original failed: {caps[i.capture_id]['error']}")
    if (lake / "decode_errors" / "_delta_log").is_dir():
        errors = DeltaTable(str(lake / "decode_errors")).to_pyarrow_table(columns=["capture_id", "reason", "detail"])
        bugs = errors.filter(pc.is_in(errors["reason"], value_set=pa.array(sorted(BUG_REASONS))))
        for r in bugs.to_pylist()[:20]:
            problems.append(f"{names.get(r['capture_id'], r['capture_id'][:12])}: {r['reason']}: {r['detail']}")
    if clean_tables is not None:
        mutated = {i.original for i in inputs if i.field_class != "clean"}
        ids = {i.capture_id for i in inputs if i.field_class == "clean" and not set(LOG_CAPTURES.get(i.original, ())) & mutated}
        mine = tables(result["lake"], ids, frozenset(i.capture_id for i in inputs if i.is_log))
        for table, theirs in clean_tables.items():
            for cid in sorted((set(theirs) | set(mine[table])) & ids):
                if mine[table].get(cid) != theirs.get(cid):
                    a, b = mine[table].get(cid, []), theirs.get(cid, [])
                    diff = sorted(set(a) ^ set(b))[:2]
                    problems.append(f"{names.get(cid, cid[:12])}: {table} rows differ from the clean-only run "
                                    f"({len(a)} vs {len(b)}): {[d[:400] for d in diff]}")
    return problems


def clean_reference(pool: str, work: pathlib.Path) -> tuple[list[Input], dict]:
    """The clean originals run alone: their tables by capture id (the oracle for the clean rows of every batch)."""
    clean = originals(pool)
    result = run_inputs(clean, work, "clean", summary=False, sets=("validate.enabled=false",))  # validate writes no row
    if result["code"] != 0:
        raise RuntimeError(f"the clean-only run exited {result['code']}: {result['stderr'][-4000:]}")
    return clean, tables(result["lake"], {i.capture_id for i in clean}, frozenset(i.capture_id for i in clean if i.is_log))


def campaign(pool: str, seed: int, count: int, batch: int, out: pathlib.Path, only: set[int] | None = None,
             keep: bool = False, classes: list[str] | None = None) -> dict:
    """``count`` mutants of ``seed`` in batches of ``batch`` per run; findings in ``out/findings.json``."""
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="fuzz-jobs-", dir=out))
    clean, reference = clean_reference(pool, work / "clean")
    everything = mutants(pool, seed, count, only, classes)
    report: dict = {"pool": pool, "seed": seed, "mutants": len(everything), "runs": 0, "batches": []}
    for b in range(0, len(everything), batch):
        chunk = everything[b : b + batch]
        result = run_inputs(clean + chunk, work / f"batch{b // batch}", f"fuzz-{seed}-{b // batch}")
        problems = check(clean + chunk, result, reference)
        report["runs"] += 1
        report["batches"].append({"mutants": [m.name for m in chunk], "code": result["code"], "seconds": result["seconds"],
                                  "problems": problems, "stdout": result["stdout"][-3000:]})
        (out / "findings.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"batch {b // batch}: {len(chunk)} mutants, exit {result['code']}, {result['seconds']} s, "
              f"{len(problems)} problem(s)", flush=True)
        for p in problems:
            print("  " + p[:2000], flush=True)
        if not keep and not problems:
            shutil.rmtree(work / f"batch{b // batch}", ignore_errors=True)
    if not keep:
        shutil.rmtree(work / "clean", ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=200, help="mutants in all (default 200)")
    ap.add_argument("--batch", type=int, default=50, help="mutants per amqplens run (default 50)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="default: from the clock (printed)")
    ap.add_argument("--pool", choices=sorted(POOLS), default="all", help="the originals: every fixture, or make test's few")
    ap.add_argument("--only", help="comma-separated mutant numbers k of the seed (re-run them alone)")
    ap.add_argument("--skip-classes", default="", help="comma-separated field classes left out (tests/e2e/mutations.py)")
    ap.add_argument("--out", default=".fuzz-jobs", help="findings.json and the failing batches' folders")
    ap.add_argument("--keep", action="store_true", help="keep every batch's folder, not just the failing ones")
    args = ap.parse_args(argv)
    only = {int(k) for k in args.only.split(",")} if args.only else None
    from tests.e2e.mutations import FIELD_CLASSES

    skip = set(filter(None, args.skip_classes.split(",")))
    assert skip <= set(FIELD_CLASSES), f"unknown field classes: {skip - set(FIELD_CLASSES)}"
    classes = sorted(set(FIELD_CLASSES) - skip)
    print(f"seed {args.seed}, pool {args.pool}, {args.mutants} mutants, {args.batch} per run", flush=True)
    report = campaign(args.pool, args.seed, args.mutants, args.batch, pathlib.Path(args.out), only, args.keep, classes)
    failing = [b for b in report["batches"] if b["problems"]]
    print(f"{report['runs']} run(s), {report['mutants']} mutants, {len(failing)} failing run(s)")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
