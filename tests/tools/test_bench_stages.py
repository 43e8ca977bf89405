"""The benchmark times every stage `amqplens run` prints: a stage missing from its pattern went uncounted (findings
was, and its ~17 s at 300 MB showed in no stage and in no job total)."""

from __future__ import annotations

import re
from pathlib import Path

from tools.bench import _STAGE_TIME
from tools.bench_stages import RUN_STAGES

CLI = Path(__file__).resolve().parents[2] / "amqplens" / "cli.py"


def test_every_stage_the_cli_prints_is_timed():
    printed = set(re.findall(r'Stage\("([a-z-]+)"', CLI.read_text()))
    assert {"ingest-captures", "metrics", "findings", "validate", "report"} <= printed
    text = "\n".join(f"{name}: 1 capture(s) written ({i}.5s)" for i, name in enumerate(sorted(printed)))
    assert {m.group(1): float(m.group(2)) for m in _STAGE_TIME.finditer(text)} == {
        name: i + 0.5 for i, name in enumerate(sorted(printed))}
    assert printed - {"ingest-logs"} <= set(RUN_STAGES)


def test_a_progress_line_is_not_a_stage_end():
    assert not _STAGE_TIME.search("metrics: tasks 3/15 (12s")
