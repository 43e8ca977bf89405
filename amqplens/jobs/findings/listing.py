"""The findings as the report and ``amqplens summary`` list them: most severe first, then by time (delta-rs: no Spark
job; a capture's findings are a few rows per entity)."""

from __future__ import annotations

from amqplens.contracts.findings import SEVERITIES

COLUMNS = ("finding_id", "capture_id", "kind", "severity", "entity_kind", "entity", "entity_label", "connection_id",
           "channel", "start_ts", "end_ts", "summary", "evidence", "partial", "count")


def most_severe(store, limit: int | None = None, capture_ids=None) -> tuple[list[dict], dict[str, int]]:
    """(the first ``limit`` findings, most severe first; how many there are of each severity)."""
    rows = store.read_arrow("findings", list(COLUMNS), capture_ids).to_pylist() if store.delta("findings") else []
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    rows.sort(key=lambda r: (rank.get(r["severity"], len(rank)), r["start_ts"], r["kind"], r["entity_label"]))
    counts = {s: sum(1 for r in rows if r["severity"] == s) for s in SEVERITIES}
    return (rows if limit is None else rows[:limit]), counts


def line(r: dict) -> str:
    """One finding in one line: severity, kind, entity, the summary (and partial)."""
    partial = " (partial: the capture has gaps)" if r["partial"] else ""
    return f"{r['severity'].upper():<8} {r['kind']:<20} {r['entity_label']}: {r['summary']}{partial}"
