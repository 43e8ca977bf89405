"""The suites as code: built from every contract, their value sets in step with the column docs (no JVM)."""

from __future__ import annotations

import fnmatch
import re

from amqplens.lifecycle import machines
from amqplens.contracts import ALL_TABLES
from amqplens.contracts.expectations import ENUMS, Settings, checks, suite, suite_columns


def _words(doc: str) -> set[str]:
    return set(re.findall(r"[\w.*+-]+", doc))


def test_every_enum_value_is_named_in_its_column_doc():
    """The sets the suites check are the contract's: a value the doc does not name would be a silent widening.

    Docs that list no values, or an open list (``...``), are not held to it: those sets come from the code (DIALECTS).
    """
    for name, columns in ENUMS.items():
        t = ALL_TABLES[name]
        for column, values in columns.items():
            doc = t.column(column).doc
            if "..." in doc or " | " not in doc and ", " not in doc:
                continue
            words = _words(doc)
            for v in values:
                assert str(v) in words or any(fnmatch.fnmatchcase(str(v), w) for w in words if "*" in w), (name, column, v)


def test_every_listed_value_set_in_a_doc_has_a_check():
    """A column whose doc starts with a closed list (a | b | c) is checked, unless the list is open (..., *, <...>)."""
    for t in ALL_TABLES.values():
        for c in t.columns:
            if re.match(r"^[\w.-]+( \| [\w.-]+)+(\s|$|[;:,(])", c.doc) and not re.search(r"\.\.\.|<|, or the", c.doc):
                assert c.name in ENUMS.get(t.name, {}), f"{t.name}.{c.name}: {c.doc}"


def test_outcomes_of_every_lifecycle_machine_are_allowed():
    """The deliveries.outcome set holds every outcome the state machines (amqplens.lifecycle) can produce."""
    produced = {*machines.PUBLISH_OUTCOMES, *machines.DELIVER_OUTCOMES, *machines.TRANSFER_OUTCOMES, *machines.TRANSFER_0_10_OUTCOMES}
    assert produced <= set(ENUMS["deliveries"]["outcome"])


def test_a_suite_per_table_with_names_and_severities_in_meta():
    settings = Settings(warning=("frames.decode_error_share",))
    for t in ALL_TABLES.values():
        s = suite(t, settings)
        names = [e.meta["name"] for e in s.expectations]
        assert s.name == t.name and names == [c.name for c in checks(t, settings)]
        assert len(set(names)) == len(names) and all(n.startswith(t.name + ".") for n in names)
        assert f"{t.name}.key_unique" in names and all(f"{t.name}.key_not_null.{k}" in names for k in t.key)
        for e in s.expectations:
            assert e.meta["severity"] == e.severity.value == settings.severity(e.meta["name"])
    frames = {e.meta["name"]: e for e in suite(ALL_TABLES["frames"], settings).expectations}
    assert frames["frames.decode_error_share"].severity.value == "warning"
    assert frames["frames.decode_error_share"].mostly == 0.9
    assert suite(ALL_TABLES["frames"], settings, only={"frames.key_unique"}).name == "frames.failures"


def test_a_batch_keeps_every_column_an_expectation_reads():
    """validate projects each batch to ``suite_columns``; GX's own ``domain_keys`` of each expectation say which of its
    arguments name columns, so a check added with another column argument would fail here, not in a run."""
    settings = Settings()
    for t in ALL_TABLES.values():
        kept = suite_columns(t, settings)
        assert kept[: len(t.key)] == list(t.key) and len(set(kept)) == len(kept)
        for e in suite(t, settings).expectations:
            for arg in set(type(e).domain_keys) - {"batch_id", "row_condition", "condition_parser", "table"}:
                value = getattr(e, arg, None)
                for column in [value] if isinstance(value, str) else value or []:
                    assert column in kept, (t.name, e.meta["name"], arg, column)
    assert len(suite_columns(ALL_TABLES["frames"], settings)) < len(ALL_TABLES["frames"].columns) / 3
