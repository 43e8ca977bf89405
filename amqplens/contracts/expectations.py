"""The expectation suites of the lake (great-expectations 1.x): one per table, derived from its contract.

Most checks come from the ``Table`` definition itself, so a table added later gets them
without an entry here: its key is unique and never null, the columns the contract marks
not-null are not null, numeric columns are not negative, timestamps fall inside their
capture's window, and columns that name a row of another table (``connection_id``,
``*frame_id``, ``*frame_ids``) find it. ``ENUMS`` lists the closed value sets of the
contracts' columns (a test keeps them and the column docs in step), and ``_EXTRAS`` adds
the table-specific ones: byte accounting per connection, the share of frames whose content
did not decode, ordered percentiles, rates between 0 and 1.

A check that needs other rows or tables (references, windows, accounting) is computed by
amqplens/jobs/validate/quality.py and small.py as an extra column of the validated batch, named here (``REQUIRED_NULL``,
``NEGATIVE``, ``OUTSIDE_WINDOW``, ``missing_column(...)``, ...), and holds the offending
value or null. It is then a GX expectation like the others: in the results, the data docs
and the failure samples.

Every expectation is named ``<table>.<check>[.<column>]`` (in its ``meta``) and is of one of two
kinds. An *invariant* states what amqplens itself guarantees, whatever the traffic: keys, references
between tables, schema and enum values, byte accounting, timestamps inside the capture window, ordered
percentiles and rates. An *observation* judges what a peer did (``OBSERVATIONS``: a sender beyond its
credit or window, deliveries or settlements the lifecycle flagged, content that does not decode): that
is data, kept as the value observed with its flag or reason, counted in metrics_errors, and only ever
a warning, so a legitimate capture of a misbehaving peer never fails a run. Which invariants are
critical is config (``validate.critical`` / ``validate.warning``, see ``Settings``).
"""

from __future__ import annotations

import dataclasses
import fnmatch

import importlib

from amqplens.contracts.base import Table
from amqplens.contracts.values import TO_SERVER_CLIENT
from amqplens.contracts.tables import ALL_TABLES

# table -> column -> the values the contract allows (nulls are allowed where the column is nullable): the
# contracts' Column(values=...), which the docs (docs/tables.md) show too
ENUMS: dict[str, dict[str, tuple]] = {
    t.name: {c.name: c.values for c in t.columns if c.values} for t in ALL_TABLES.values() if any(c.values for c in t.columns)
}

# Numeric columns that may be negative, each with its own check (an observation) and the reason.
MAY_BE_NEGATIVE = {
    ("flow_events", "remote_incoming_window"): (
        "the peer's window as the sender computes it goes below 0 when the sender overruns it (windows of 2^31 "
        "and more, e.g. 2^32-1 for unlimited, are plain integers here: they no longer wrap to -2^31)"),
    ("flow_events", "link_credit"): (
        "a 1.0 sender that sends transfers beyond the credit it holds drives the credit below 0 (0-10: message "
        "credit); the row keeps the value and says credit_exceeded in reason"),
}

# The checks that judge what peers do (fnmatch patterns of check names) and why: warnings, never critical.
OBSERVATIONS = {
    "*.non_negative.*": "values of MAY_BE_NEGATIVE columns: below 0 only when a peer overruns its credit or window",
    "*.anomalies": "what the lifecycle flagged in a peer's traffic: unknown tags and delivery ids, duplicates, "
                   "transfers beyond credit, replies or continuations without their start",
    "frames.decode_error_share": "frames a peer sent whose content does not decode",
    "connections.codec_error_share": "bytes on an AMQP port that do not frame as AMQP (garbage, another protocol)",
}
# A closed value list of a column read as sent (Column.peer: 0-10 accept/acquire/flow modes and credit units, a log's
# level) judges the peer: a damaged message.subscribe with acquire-mode 255 keeps "255".
OBSERVATIONS.update({
    f"{t.name}.enum.{c.name}": "a value read off the wire or out of a log that the spec does not name, kept as read"
    for t in ALL_TABLES.values() for c in t.columns if c.peer and c.values
})
INVARIANT, OBSERVATION = "invariant", "observation"
# flow_events.reason names an anomaly except on these events (event -> the reasons that are not, None: any): a
# connection.blocked reason (the broker's text), the 0-10 flow mode of message.set-flow-mode
REASON_NOT_ANOMALY = {"blocked": None, "unblocked": None, "flow": ("credit", "window")}


def kind(name: str) -> str:
    """``observation`` when the check judges what peers do (``OBSERVATIONS``), else ``invariant``."""
    return OBSERVATION if any(fnmatch.fnmatchcase(name, p) for p in OBSERVATIONS) else INVARIANT

# Names of the columns amqplens/jobs/validate/quality.py and small.py add to a batch: the offending value(s) as text, or null.
REQUIRED_NULL = "_required_null"  # the not-null columns that are null
NEGATIVE = "_negative"  # column=value of each negative numeric column
OUTSIDE_WINDOW = "_outside_capture_window"  # column=value of each timestamp outside the capture's window
CONNECTION_ROWS = "_connection_rows"  # captures: rows the capture has in connections
CODEC_ERROR_SHARE = "_codec_error_share"  # connections: codec decode_errors bytes / decoded stream bytes
ANOMALY = "_anomaly"  # deliveries: its flags; flow_events: its reason when that names an anomaly
PERCENTILES_UNORDERED = "_percentiles_unordered"  # metrics_latency: p50 <= p90 <= p99 <= max broken


def accounted(direction: str) -> str:
    """connections: frame + codec error + gap bytes of a decoded connection's direction (null when not decoded)."""
    return f"_accounted_bytes_{direction}"


def missing_column(column: str) -> str:
    """The referenced key(s) of ``column`` that the target table does not hold."""
    return f"_missing_{column}"


@dataclasses.dataclass(frozen=True)
class Settings:
    """What config decides: severities of the invariants (fnmatch patterns or table names; observations are
    always warnings) and the distribution thresholds."""

    critical: tuple[str, ...] = ("*",)
    warning: tuple[str, ...] = ()
    max_decode_error_share: float = 0.1
    max_codec_error_share: float = 0.5

    @classmethod
    def from_config(cls, conf) -> "Settings":
        return cls(tuple(conf["validate.critical"]), tuple(conf["validate.warning"]),
                   conf["validate.max_decode_error_share"], conf["validate.max_codec_error_share"])

    def severity(self, name: str) -> str:
        def matches(patterns):
            return any(fnmatch.fnmatchcase(name, p) or name.startswith(p + ".") for p in patterns)

        critical = kind(name) == INVARIANT and matches(self.critical) and not matches(self.warning)
        return "critical" if critical else "warning"


# ------------------------------------------------------------- generic rules
def references(t: Table) -> dict[str, str]:
    """column -> table whose key it names. capture_id is left out: a run's rows are chosen by their capture."""
    out = {}
    for c in t.columns:
        if c.name == "connection_id" and t.name != "connections":
            out[c.name] = "connections"
        elif c.name.endswith(("frame_id", "frame_ids")) and t.name != "frames":
            out[c.name] = "frames"
    return out


def reference_check(t: Table, column: str) -> str:
    """The name of the check that every value of ``column`` (a key of ``references(t)``) is a row of its target."""
    return f"{t.name}.ref.{column}"


def required_columns(t: Table) -> list[str]:
    return [c.name for c in t.columns if not c.nullable and c.name not in t.key]


def non_negative_columns(t: Table) -> list[str]:
    numeric = ("int8", "int16", "int32", "int64", "double")
    return [c.name for c in t.columns if c.type in numeric and (t.name, c.name) not in MAY_BE_NEGATIVE]


def window_columns(t: Table) -> list[str]:
    """Timestamps that must fall inside their capture's first..last packet (captures define the window)."""
    if t.name == "captures" or "capture_id" not in t.column_names:
        return []
    return [c.name for c in t.columns if c.type == "timestamp"]


# --------------------------------------------------------------------- suites
@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    expectation_type: type
    kwargs: dict
    description: str


def _gxe():
    """great_expectations.expectations, imported when a suite is first built: importing it takes 2-3 s, and the
    names and column rules here are read by jobs that build no suite (metrics reads ``REASON_NOT_ANOMALY``)."""
    return importlib.import_module("great_expectations.expectations")


def _generic(t: Table) -> list[Check]:
    gxe = _gxe()
    n = t.name
    key = list(t.key)
    checks = [
        Check(f"{n}.key_unique", gxe.ExpectColumnValuesToBeUnique, {"column": key[0]}, f"each {key[0]} appears once")
        if len(key) == 1 else
        Check(f"{n}.key_unique", gxe.ExpectCompoundColumnsToBeUnique, {"column_list": key}, f"each ({', '.join(key)}) appears once"),
        *(Check(f"{n}.key_not_null.{k}", gxe.ExpectColumnValuesToNotBeNull, {"column": k}, f"{k} is never null") for k in key),
    ]
    if required_columns(t):
        checks.append(Check(f"{n}.required", gxe.ExpectColumnValuesToBeNull, {"column": REQUIRED_NULL},
                            f"no null in the not-null columns: {', '.join(required_columns(t))}"))
    for col, values in ENUMS.get(n, {}).items():
        checks.append(Check(f"{n}.enum.{col}", gxe.ExpectColumnValuesToBeInSet, {"column": col, "value_set": list(values)},
                            f"{col} is one of {', '.join(map(str, values))}"))
    if non_negative_columns(t):
        checks.append(Check(f"{n}.non_negative", gxe.ExpectColumnValuesToBeNull, {"column": NEGATIVE},
                            f"not negative: {', '.join(non_negative_columns(t))}"))
    if window_columns(t):
        checks.append(Check(f"{n}.in_capture_window", gxe.ExpectColumnValuesToBeNull, {"column": OUTSIDE_WINDOW},
                            f"{', '.join(window_columns(t))} between the capture's first and last packet (with slack)"))
    for col, target in references(t).items():
        checks.append(Check(reference_check(t, col), gxe.ExpectColumnValuesToBeNull, {"column": missing_column(col)},
                            f"every {col} is a row of {target} (of the same captures)"))
    for (tname, col), why in MAY_BE_NEGATIVE.items():
        if tname == n:
            checks.append(Check(f"{n}.non_negative.{col}", gxe.ExpectColumnValuesToBeBetween, {"column": col, "min_value": 0},
                                f"{col} is not negative ({why})"))
    return checks


def _pair(name, expectation_type, a, b, description, **kw) -> Check:
    return Check(name, expectation_type, {"column_A": a, "column_B": b, "ignore_row_if": "either_value_is_missing", **kw},
                 description)


def _extras(t: Table, s: Settings) -> list[Check]:
    gxe = _gxe()
    n = t.name
    after = gxe.ExpectColumnPairValuesAToBeGreaterThanB
    if n == "captures":
        return [
            _pair("captures.connections", gxe.ExpectColumnPairValuesToBeEqual, "connections", CONNECTION_ROWS,
                  "connections equals the rows the capture has in connections"),
            _pair("captures.ts_order", after, "last_ts", "first_ts", "last_ts >= first_ts", or_equal=True),
        ]
    if n == "connections":
        return [
            *(_pair(f"connections.byte_accounting.{d}", gxe.ExpectColumnPairValuesToBeEqual, f"bytes_{d}", accounted(d),
                    f"decoded connections: frame + codec error + gap bytes = stream bytes {d.replace('_', ' ')}")
              for d in TO_SERVER_CLIENT),
            _pair("connections.ts_order", after, "end_ts", "start_ts", "end_ts >= start_ts", or_equal=True),
            Check("connections.codec_error_share", gxe.ExpectColumnMeanToBeBetween,
                  {"column": CODEC_ERROR_SHARE, "max_value": s.max_codec_error_share},
                  "mean share of a decoded connection's captured stream bytes that did not frame "
                  f"(codec decode_errors) <= validate.max_codec_error_share ({s.max_codec_error_share})"),
        ]
    if n == "frames":
        return [Check("frames.decode_error_share", gxe.ExpectColumnValuesToBeNull,
                      {"column": "decode_error", "mostly": round(1 - s.max_decode_error_share, 6)},
                      f"frames whose content did not decode <= validate.max_decode_error_share ({s.max_decode_error_share})")]
    if n == "decode_errors":
        return [Check("decode_errors.no_accounting_mismatch", gxe.ExpectColumnValuesToNotBeInSet,
                      {"column": "reason", "value_set": ["byte_accounting_mismatch"]},
                      "the ingest's own byte accounting check found nothing")]
    if n == "deliveries":
        return [_pair("deliveries.ts_order", after, "settled_ts", "sent_ts", "settled_ts >= sent_ts", or_equal=True),
                Check("deliveries.anomalies", gxe.ExpectColumnValuesToBeNull, {"column": ANOMALY},
                      "no delivery the lifecycle flagged (flags: duplicate_tag, delivery_id_reused, orphan_continuation, ...)")]
    if n == "flow_events":
        return [Check("flow_events.anomalies", gxe.ExpectColumnValuesToBeNull, {"column": ANOMALY},
                      "no flow event with an anomaly in reason (credit_exceeded, ack_of_unknown_tag, ...)")]
    if n == "request_responses":
        return [_pair("request_responses.ts_order", after, "response_ts", "request_ts", "response_ts >= request_ts",
                      or_equal=True)]
    if n == "metrics_latency":
        return [Check("metrics_latency.percentile_order", gxe.ExpectColumnValuesToBeNull, {"column": PERCENTILES_UNORDERED},
                      "p50_us <= p90_us <= p99_us <= max_us")]
    if n == "metrics_settlement":
        return [
            Check("metrics_settlement.rate_range", gxe.ExpectColumnValuesToBeBetween,
                  {"column": "rate", "min_value": 0, "max_value": 1}, "rate between 0 and 1"),
            _pair("metrics_settlement.count_le_messages", after, "messages", "count", "count <= messages", or_equal=True),
        ]
    return []


def checks(t: Table, settings: Settings) -> list[Check]:
    return _generic(t) + _extras(t, settings)


COLUMN_ARGS = ("column", "column_list", "column_A", "column_B")  # the expectation arguments that name columns


def suite_columns(t: Table, settings: Settings) -> list[str]:
    """The columns table ``t``'s suite reads (its key first: failure samples name rows by it), in first-use order.

    A batch needs no other column, so validate projects each table to these before caching it.
    """
    out = dict.fromkeys(t.key)
    for c in checks(t, settings):
        for arg in COLUMN_ARGS:
            value = c.kwargs.get(arg)
            out.update(dict.fromkeys([value] if isinstance(value, str) else value or []))
    return list(out)


def suite(t: Table, settings: Settings, only: set[str] | None = None):
    """The table's ``gx.ExpectationSuite`` (``only``: of these checks, a suite named <table>.failures).

    Each expectation's meta carries its name, severity and kind (invariant or observation).
    """
    import great_expectations as gx
    from great_expectations.expectations.metadata_types import FailureSeverity

    expectations = []
    for c in checks(t, settings):
        if only is not None and c.name not in only:
            continue
        sev = settings.severity(c.name)
        expectations.append(c.expectation_type(
            **c.kwargs, description=f"{c.name}: {c.description}", meta={"name": c.name, "severity": sev, "kind": kind(c.name)},
            severity=FailureSeverity.CRITICAL if sev == "critical" else FailureSeverity.WARNING))
    return gx.ExpectationSuite(name=t.name if only is None else f"{t.name}.failures", expectations=expectations)


def tally_suite(t: Table, settings: Settings, counted: set[str], means: set[str]):
    """The suite GX validates a table's tally with (amqplens/jobs/validate/tally.py: one row, a column per check that
    holds the rows breaking it, counted in one pass over the table, or the mean of a mean check): each ``counted``
    check's count is 0, each mean within its check's bounds. Named, with severity and kind, as the check itself;
    a check that fails here is validated by its own expectation on the table's rows."""
    import great_expectations as gx
    from great_expectations.expectations.metadata_types import FailureSeverity

    expectations = []
    for c in checks(t, settings):
        if c.name not in counted:
            continue
        sev = settings.severity(c.name)
        bounds = ({k: c.kwargs.get(k) for k in ("min_value", "max_value", "strict_min", "strict_max") if k in c.kwargs}
                  if c.name in means else {"min_value": 0, "max_value": 0})
        what = "mean" if c.name in means else "rows that break it"
        expectations.append(_gxe().ExpectColumnValuesToBeBetween(
            column=c.name, **bounds, description=f"{c.name}: {c.description} ({what}, counted in one pass over the table)",
            meta={"name": c.name, "severity": sev, "kind": kind(c.name), "tally": True},
            severity=FailureSeverity.CRITICAL if sev == "critical" else FailureSeverity.WARNING))
    return gx.ExpectationSuite(name=f"{t.name}.tally", expectations=expectations)
