"""Every check of a table's suite counted in one pass: one Spark aggregate over the batch -> ``Tally``.

GX's Spark engine computes an expectation's metrics with a few Spark jobs per
table and domain (a scan of the cached batch each); on a large run that cost more
than the metrics stage. Here each check of amqplens/contracts/expectations.py is
turned into a column expression that counts the rows breaking it (or, for a mean,
the mean), and one ``agg`` over the batch computes them all: one job (its scan,
the joins the extra columns need). A uniqueness check is its own small aggregate of
the key alone (the repeats: sum of count - 1 per non-null key), cross-joined to the
one-row tally in the same job: as a distinct count inside the big ``agg``, Spark
grouped every row by the key carrying every other check's count (on the 300 MB
lake's frames, 1.85M keys with 20 counters each through a shuffle: 30-40% more JVM
CPU for the table's tally).

The tally is a screen, and GX keeps the last word: GX validates the tally
(``expectations.tally_suite``: each check's count is 0, each mean within its
bounds) and the checks whose tally it does not pass, or that the tally cannot
settle (a mean of no rows, an expectation type not counted here), are validated
by GX on the batch itself with their own expectations, returning samples of the
offending rows. A count here is 0 only when GX's expectation finds no
offending row in the batch, so a check the tally passes is one GX passes:

- uniqueness: non-null keys minus distinct non-null keys (0 exactly when every
  key appears once; GX counts every row of a repeated key, this the repeats);
- ``mostly`` (frames.decode_error_share): every offending row counts, so any
  share above 0 is left to GX's own ``mostly`` arithmetic;
- nulls are skipped as GX skips them (pairs: ``either_value_is_missing``);
- references (``<table>.ref.<column>``) are counted by a job per target table for every table of the run at once
  (quality.reference_jobs: the values the target lacks, one anti join, no distinct keys), not by joins in the
  table's batch; a row of an array column may hold several such values, so the count is of values, 0 exactly when
  no row holds one.
"""

from __future__ import annotations

import dataclasses
import functools

from amqplens.contracts import Table
from amqplens.contracts import expectations as ex

ROWS = "_rows"  # the batch's rows (GX's element_count of a column-map expectation)


def _both(a, b):
    return a.isNotNull() & b.isNotNull()


def offending(check: ex.Check):
    """A Spark aggregate of ``check``'s offending rows over the batch (the mean, for a mean check), or None when the
    check is not counted here (GX then validates it on the batch)."""
    from pyspark.sql import functions as F

    kind = check.expectation_type.__name__
    kw = check.kwargs
    count = lambda condition: F.count(F.when(condition, F.lit(1)))  # noqa: E731
    if kind == "ExpectColumnValuesToBeUnique":
        col = F.col(kw["column"])
        return F.count(col) - F.count_distinct(col)
    if kind == "ExpectCompoundColumnsToBeUnique":
        cols = [F.col(c) for c in kw["column_list"]]
        some = functools.reduce(lambda a, b: a | b, (c.isNotNull() for c in cols))  # GX skips a row with every value missing
        return count(some) - F.count_distinct(F.when(some, F.struct(*cols)))
    if kind == "ExpectColumnValuesToNotBeNull":
        return count(F.col(kw["column"]).isNull())
    if kind == "ExpectColumnValuesToBeNull":
        return F.count(F.col(kw["column"]))
    if kind in ("ExpectColumnValuesToBeInSet", "ExpectColumnValuesToNotBeInSet"):
        col = F.col(kw["column"])
        inside = col.isin(*kw["value_set"])
        return count(col.isNotNull() & (~inside if kind == "ExpectColumnValuesToBeInSet" else inside))
    if kind == "ExpectColumnValuesToBeBetween":
        col = F.col(kw["column"])
        out = F.lit(False)
        if kw.get("min_value") is not None:
            out = out | (col < kw["min_value"]) if not kw.get("strict_min") else out | (col <= kw["min_value"])
        if kw.get("max_value") is not None:
            out = out | (col > kw["max_value"]) if not kw.get("strict_max") else out | (col >= kw["max_value"])
        return count(col.isNotNull() & (out | F.isnan(col.cast("double"))))
    if kind in ("ExpectColumnPairValuesToBeEqual", "ExpectColumnPairValuesAToBeGreaterThanB") \
            and kw.get("ignore_row_if") == "either_value_is_missing":
        a, b = F.col(kw["column_A"]), F.col(kw["column_B"])
        if kind == "ExpectColumnPairValuesToBeEqual":
            ok = a == b
        else:
            ok = a >= b if kw.get("or_equal") else a > b
        return count(_both(a, b) & ~ok)
    if kind == "ExpectColumnMeanToBeBetween":
        return F.avg(F.col(kw["column"]))
    return None


MEAN = "ExpectColumnMeanToBeBetween"


def key_columns(check: ex.Check) -> list[str]:
    """The key columns of a uniqueness check (counted by a group-by of its own), else []."""
    kind = check.expectation_type.__name__
    if kind == "ExpectColumnValuesToBeUnique":
        return [check.kwargs["column"]]
    if kind == "ExpectCompoundColumnsToBeUnique":
        return list(check.kwargs["column_list"])
    return []


@dataclasses.dataclass
class Tally:
    """What one pass over a table's batch counted: its rows and, per check, the offending rows or the mean
    (None: not counted, or a mean of no rows)."""

    rows: int
    values: dict[str, float | int | None]
    means: frozenset[str]  # the checks whose value is a mean, not a count

    def frame(self):
        """The tally as GX validates it (``expectations.tally_suite``): one row, a column per check it settles."""
        import pandas as pd

        return pd.DataFrame({name: [value] for name, value in self.values.items() if value is not None})

    def add(self, counts: dict[str, int]) -> None:
        """Take the counts of checks counted by another job (the references), those of this table's checks."""
        self.values.update({name: n for name, n in counts.items() if name in self.values})

    def settles(self, name: str) -> bool:
        return self.values.get(name) is not None

    def observed(self, name: str) -> str:
        """A passed check's ``observed`` as GX writes it (amqplens/jobs/validate/results.py: ``observed``)."""
        from amqplens.jobs.validate.results import observed

        if name in self.means:
            return observed({"observed_value": self.values[name]})
        return observed({"element_count": self.rows, "unexpected_count": 0})


def count(t: Table, df, settings: ex.Settings, elsewhere: frozenset[str] = frozenset()) -> Tally:
    """One aggregate over ``df`` (table ``t``'s batch): its rows and every check's count or mean. ``elsewhere``: checks
    counted by another job (the references: quality.reference_jobs), left None here for ``Tally.add``; ``df`` need not
    hold their columns."""
    from pyspark.sql import functions as F

    checks = ex.checks(t, settings)
    exprs = {c.name: None if c.name in elsewhere else offending(c) for c in checks}
    here = {name: e for name, e in exprs.items() if e is not None}
    aliases = {name: f"_c{i}" for i, name in enumerate(here)}  # check names hold dots: Spark reads them as fields
    keyed = {c.name: key_columns(c) for c in checks if key_columns(c)}
    one = df.agg(F.count(F.lit(1)).alias(ROWS), *(e.alias(aliases[name]) for name, e in here.items()
                                                     if name not in keyed))
    for name, cols in keyed.items():
        # rows: one per distinct key, summed to one row; the cross join meets one row with one row
        some = functools.reduce(lambda a, b: a | b, (F.col(c).isNotNull() for c in cols))  # GX skips all-null keys
        repeats = (df.where(some).groupBy(*cols).count()
                   .agg(F.coalesce(F.sum(F.col("count") - 1), F.lit(0)).alias(aliases[name])))
        one = one.crossJoin(repeats)
    (row,) = one.collect()
    values: dict[str, float | int | None] = {name: None for name in exprs}
    values.update({name: row[aliases[name]] for name in here})
    means = frozenset(c.name for c in checks if c.expectation_type.__name__ == MEAN)
    return Tally(int(row[ROWS]), values, means)
