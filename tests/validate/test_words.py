"""Every anomaly kind the lifecycle can write and every expectation that can be a warning has plain words
(amqplens/contracts/words.py), and a warning line says them.

The anomaly kinds are collected from the lifecycle itself, not from the words table: the flags of every state
machine's transitions (including the ``unexpected_<event>`` no-ops), the literal flags and reasons its code writes,
and the templated families its docstring lists (``<ack|nack|reject>_of_unknown_tag``, ...). Bad input tried: a kind
no table covers (must have no words), an observed None (must not read "None").
"""

from __future__ import annotations

import re

from amqplens.contracts import ALL_TABLES
from amqplens.contracts import expectations as ex
from amqplens.contracts import words
from amqplens.jobs.validate import results_page
from amqplens.lifecycle.machines import MACHINES
from tests.conftest import ROOT

LIFECYCLE = ROOT / "amqplens" / "lifecycle"
TEMPLATED = [f"{k}_of_unknown_tag" for k in ("ack", "nack", "reject")] + \
    [f"confirm_{k}_of_unknown_tag" for k in ("ack", "nack")] + \
    [f"{k}_of_unknown_id" for k in ("accept", "reject", "release")] + \
    [f"reject_{c}" for c in ("unspecified", "unroutable", "immediate")] + \
    [f"state_{o}" for o in ("accepted", "rejected", "released", "modified")]
LITERAL = re.compile(r'(?:\.flag\(|flag = |reason=|reason = |_anomaly\([^)]*?)"([a-z][a-z0-9_]+)"')


def anomaly_kinds() -> set[str]:
    kinds = {t.flag for m in MACHINES for t in m.table.values() if t.flag}
    for path in LIFECYCLE.glob("*.py"):
        kinds.update(LITERAL.findall(path.read_text()))
    return kinds | set(TEMPLATED)


def test_every_anomaly_kind_has_words():
    kinds = anomaly_kinds()
    assert {"ack_of_unknown_tag", "credit_exceeded", "duplicate_tag", "attach_not_seen", "unexpected_ack"} <= kinds
    assert [k for k in sorted(kinds) if not words.anomaly(k)] == []
    assert words.anomaly("no_such_kind") is None
    both = words.anomaly("ack_of_unknown_tag,frame_on_closed_channel")
    assert both and words.ANOMALIES["frame_on_closed_channel"] in both


def test_every_expectation_that_can_be_a_warning_has_its_own_words():
    """Observations are always warnings: each needs words of its own, not the catch-all for invariants."""
    settings = ex.Settings()
    names = [c.name for t in ALL_TABLES.values() for c in ex.checks(t, settings)]
    observations = [n for n in names if ex.kind(n) == ex.OBSERVATION]
    assert "flow_events.anomalies" in observations and "connections.codec_error_share" in observations
    assert [n for n in observations if words.expectation(n) in (None, words.EXPECTATIONS["*"])] == []
    # invariants made warnings by validate.warning get the catch-all, which says to report it
    assert all(words.expectation(n) for n in names)


def test_an_observed_none_reads_as_no_rows():
    """A logs-only run's codec error share (no captured connection) was printed as 'observed None'."""
    outcome = {"table": "connections", "name": "connections.codec_error_share", "severity": "warning", "success": False,
               "observed": "observed None", "samples": []}
    assert results_page.warning_lines(outcome) == [
        "  warning: connections: connections.codec_error_share (warning): no rows to judge (e.g. a logs-only run has "
        "no captured connections)",
        "    nothing was judged, so nothing to worry about (GX counts an expectation over no values as failed)",
    ]
