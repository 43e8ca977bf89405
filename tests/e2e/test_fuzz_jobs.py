"""Job-level fuzzing (the fast run of ``tools/fuzz_jobs.py``; ``make fuzz`` is the longer campaign).

Tried, in ONE ``amqplens run`` subprocess (one JVM) beside the clean originals: two seeded mutants of each field
class of ``tests/e2e/mutations.py`` (``FIELD_CLASSES``), drawn from the first fixtures of every family (0-9-1 broker
and public captures, 1.0 broker and public pcapng, the 0-10 captures, a capture of each pre-standard draft, TLS 1.2
and 1.3 captures with their key logs, the pcapng/SLL2 format captures, RabbitMQ, tracing and Proton trace logs): record
times (before 1990, after 2100, hours away, a fraction past its second), caplen, origlen, the pcap global header and
the pcapng SHB/IDB fields, link types, pcapng interface ids and block lengths, truncation, IP and TCP header fields,
the AMQP protocol header, frame sizes, channel numbers, enumerated values, counts, 1.0 link handles, TLS record
headers, log line times, numbers and lines. Then ``amqplens summary`` on that lake, and the clean originals alone in
a second run. Asserted: exit 0 or 3 (never 1 or 4), the report and the summary written, every input has a captures
row and no decoder-fault rows, and every clean original's rows in every table equal those of the clean-only run.
"""

from __future__ import annotations

import collections

import pytest

from tests.e2e.mutations import FIELD_CLASSES
from tools import fuzz_jobs as F

pytestmark = [pytest.mark.e2e]

SEED = 38
PER_CLASS = 2
# field classes this run leaves out: none since issue 38's items 3 and 5 landed (kept as the place to name one, with the
# fix it awaits, should a class ever make the run exit 1 or 4 for a reason already being fixed)
AWAITING: dict[str, str] = {}
CLASSES = sorted(set(FIELD_CLASSES) - set(AWAITING))
# mutants (k of SEED) left out of the run until the fix named lands: none
AWAITING_MUTANTS: dict[int, str] = {}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz_jobs")
    clean, reference = F.clean_reference("fast", work / "clean")
    run = set(range(PER_CLASS * len(CLASSES))) - set(AWAITING_MUTANTS)
    mutants = F.mutants("fast", SEED, PER_CLASS * len(CLASSES), only=run, classes=CLASSES)
    result = F.run_inputs(clean + mutants, work / "mutants", "fuzz")
    return clean, mutants, result, reference


def test_every_field_class_and_family_is_mutated(fuzzed):
    _, mutants, _, _ = fuzzed
    left_out = collections.Counter(CLASSES[k % len(CLASSES)] for k in AWAITING_MUTANTS)
    assert collections.Counter(m.field_class for m in mutants) == {c: PER_CLASS - left_out[c] for c in CLASSES if PER_CLASS > left_out[c]}
    assert {m.family for m in mutants} == set(F.FAMILIES)


def test_the_run_exits_0_or_3_and_writes_the_report_and_the_summary(fuzzed):
    _, _, result, _ = fuzzed
    assert result["code"] in (0, 3), result["stderr"][-4000:]
    assert result["report"]
    assert result["summary_code"] == 0, result["summary_stderr"]


def test_clean_rows_are_those_of_the_clean_run_and_no_input_shows_a_decoder_fault(fuzzed):
    clean, mutants, result, reference = fuzzed
    assert F.check(clean + mutants, result, reference) == []
