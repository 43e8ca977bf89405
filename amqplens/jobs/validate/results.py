"""What a validation found: one ``Outcome`` per expectation, the run's summary (``<lake>/_quality/runs/<run_id>.json``),
its readable message and ``ValidationFailed`` (the CLI's exit 4)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib
from typing import Any

from amqplens.contracts import Table
from amqplens.jobs.validate import results_page


class ValidationFailed(RuntimeError):
    """A critical expectation failed; ``summary`` is what was written to <lake>/_quality/runs/."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


@dataclasses.dataclass
class Outcome:
    table: str
    name: str
    severity: str
    success: bool
    observed: str
    samples: list[str]

    def line(self) -> str:
        text = f"{self.name} ({self.severity}): {self.observed}"
        return text + (f"; e.g. {'; '.join(self.samples)}" if self.samples else "")


def observed(result: dict, exception: dict | None = None) -> str:
    """What a GX result observed, as text: ``N of M rows unexpected [(value)]`` or ``observed value``."""
    if exception and exception.get("raised_exception"):
        return f"could not be evaluated: {exception.get('exception_message')}"
    value: Any = result.get("observed_value")
    value = value.item() if hasattr(value, "item") else value  # GX's pandas engine observes numpy scalars
    if "unexpected_count" in result:
        text = f"{result['unexpected_count']} of {result.get('element_count')} rows unexpected"
        if "observed_value" in result:
            text += f" ({value})"
        return text
    return f"observed {value!r}"


def samples(result: dict, key: tuple[str, ...]) -> list[str]:
    """``key=value (column=value ...)`` of the offending rows GX returned."""
    out = []
    for row in result.get("partial_unexpected_index_list") or []:
        ident = ", ".join(f"{k}={row.get(k)}" for k in key)
        rest = ", ".join(f"{k}={v}" for k, v in row.items() if k not in key)
        out.append(f"{ident} ({rest})" if rest else ident)
    if not out:
        out = [repr(v) for v in result.get("partial_unexpected_list") or []]
    return out


def outcome(t: Table, r) -> Outcome:
    """The outcome of one GX ``ExpectationValidationResult`` of table ``t``'s suite."""
    meta = r.expectation_config.meta or {}
    result = r.result or {}
    return Outcome(t.name, meta["name"], meta["severity"], bool(r.success), observed(result, r.exception_info), samples(result, t.key))


def outcomes(t: Table, results) -> list[Outcome]:
    return [outcome(t, r) for r in results]


def summary(run_id: str, ids: list[str], rows: dict[str, int], results: list[Outcome], quality: pathlib.Path) -> dict:
    failed = [o for o in results if not o.success]
    return {
        "run_id": run_id, "time": dt.datetime.now(dt.timezone.utc).isoformat(), "capture_ids": ids, "rows": rows,
        "success": not any(o.severity == "critical" for o in failed),
        "critical_failures": [dataclasses.asdict(o) for o in failed if o.severity == "critical"],
        "warnings": [dataclasses.asdict(o) for o in failed if o.severity == "warning"],
        "expectations": [dataclasses.asdict(o) for o in results],
        "data_docs": str(quality / "data_docs" / "index.html"),
        "results_page": str(quality / "index.html"),  # results_page.py: readable offline, unlike GX's data docs
    }


def message(summary: dict) -> str:
    """The readable summary of a failed validation: one line per critical failure."""
    crit = summary["critical_failures"]
    lines = [f"validate: {len(crit)} critical expectation(s) failed on run {summary['run_id']} "
             f"({len(summary['capture_ids'])} capture(s))"]
    lines += [f"  {o['table']}: " + Outcome(**o).line() for o in crit]
    lines += [line for o in summary["warnings"] for line in results_page.warning_lines(o)]
    lines.append(f"  results: {summary['results_page']}")
    return "\n".join(lines)
