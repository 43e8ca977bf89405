"""The stages of a timed ``amqplens run``: their times and peak memory as the run goes, and the sweep's table.

``tools.bench`` runs the pipeline with stdout piped through ``follow_stages``:
each ``<stage>: ... (<seconds>s)`` line ``amqplens run`` prints ends a stage,
so the process-tree sampler charges its samples from then on to the next
stage (peak RSS of the JVM and of the Python workers per stage).
``print_sweep`` compares sizes: seconds per GB of each stage at the largest
size over the same at 300 MB (linear growth: within 1.3x), and the share of
metrics + findings + validate + report in the whole run.
"""

from __future__ import annotations

import re

WHOLE_RUN = "run"  # --stages value: the whole `amqplens run`
# What `amqplens run` prints, in order (amqplens/cli.py _run_stages); "session" is tools.bench_pipeline's.
RUN_STAGES = ("ingest-captures", "lifecycle", "metrics", "findings", "validate", "report")
AFTER_LIFECYCLE = ("metrics", "findings", "validate", "report")
STAGE_LINE = re.compile(r"^(session|ingest-captures|ingest-logs|lifecycle|metrics|findings|validate|report): .*\(([\d.]+)s\)")
GB = 1e9


def follow_stages(stream, log, sampler) -> None:
    """Copy the run's output to ``log``; at each stage's closing line, move the sampler on to the next stage."""
    done: set[str] = set()
    if sampler is not None:
        sampler.phase = RUN_STAGES[0]
    for raw in iter(stream.readline, b""):
        log.write(raw)
        m = STAGE_LINE.match(raw.decode(errors="replace"))
        if m and sampler is not None:
            done.add(m.group(1))
            sampler.phase = next((s for s in RUN_STAGES if s not in done), "shutdown")
    log.flush()


def _mib(n) -> str:
    return "-" if not n else f"{n / 2**20:.0f}"


def stage_lines(run: dict, file_bytes: int) -> list[str]:
    """One line per stage of a run: seconds, seconds per GB, peak RSS of the JVM and the Python workers."""
    out = []
    peaks = run.get("stage_peak_rss") or {}
    for name, s in run.get("stage_s", {}).items():
        pk = peaks.get(name, {})
        out.append(f"     {name:<16} {s:8.1f} s  {s / (file_bytes / GB):8.1f} s/GB   JVM {_mib(pk.get('jvm')):>5} MiB  "
                   f"workers {_mib(pk.get('workers_sum')):>5} MiB (largest {_mib(pk.get('worker_max'))} MiB)  "
                   f"driver {_mib(pk.get('driver'))} MiB")
    return out


def print_sweep(results: list[dict]) -> None:
    """Seconds per GB of each stage at every size; linearity against 300 MB; the after-lifecycle share."""
    rows = []
    for r in results:
        ok = [x for x in r["pipeline"]["runs"] if x["rc"] == 0]
        if ok:
            run = min(ok, key=lambda x: x["wall_s"])
            rows.append((r["file_bytes"], run))
    if not rows:
        return
    names = [s for s in ("session", *RUN_STAGES) if any(s in run["stage_s"] for _, run in rows)]
    print("\nwhole run, seconds per GB of capture (fastest run of each size):")
    print(f"{'size':>9}  {'wall s':>7}  " + "  ".join(f"{n:>15}" for n in names) + "  after-lifecycle share")
    per_gb = {}
    for size, run in rows:
        gb = size / GB
        per_gb[size] = {n: run["stage_s"][n] / gb for n in names if n in run["stage_s"]}
        after = sum(run["stage_s"].get(n, 0) for n in AFTER_LIFECYCLE)
        print(f"{size / 1e6:7.0f}MB  {run['wall_s']:7.1f}  "
              + "  ".join(f"{per_gb[size].get(n, float('nan')):15.1f}" for n in names)
              + f"  {after / run['wall_s']:6.1%} ({after:.1f} s)")
    base = min(per_gb, key=lambda b: abs(b - 300e6))
    top = max(per_gb)
    if top != base:
        print(f"growth of s/GB, {top / 1e6:.0f} MB over {base / 1e6:.0f} MB (linear: <= 1.3x): "
              + ", ".join(f"{n} {per_gb[top][n] / per_gb[base][n]:.2f}x" for n in names
                          if per_gb[base].get(n) and n in per_gb[top]))
