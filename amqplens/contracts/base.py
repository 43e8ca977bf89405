"""One definition per table, from which Arrow, Spark and the docs are derived.

A ``Table`` is a list of ``Column``s with a small type vocabulary. Everything
else (the Arrow schema used by delta-rs, the Spark StructType used by the
jobs, the golden text rendering and the Markdown reference) is computed from
it, so a contract change shows up in one place and in review.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

# type name -> (arrow type, spark type name); Spark types are built lazily so
# that importing a table definition never needs a JVM.
_TYPES = {
    "string": (pa.string(), "StringType"),
    "int8": (pa.int8(), "ByteType"),
    "int16": (pa.int16(), "ShortType"),
    "int32": (pa.int32(), "IntegerType"),
    "int64": (pa.int64(), "LongType"),
    "double": (pa.float64(), "DoubleType"),
    "bool": (pa.bool_(), "BooleanType"),
    "binary": (pa.binary(), "BinaryType"),
    "date": (pa.date32(), "DateType"),
    "timestamp": (pa.timestamp("us", tz="UTC"), "TimestampType"),
    "array<string>": (pa.list_(pa.string()), None),
    "array<int32>": (pa.list_(pa.int32()), None),
}


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str
    nullable: bool = True
    # the closed set of values the column takes (empty: open), the one list the docs, the expectation suites
    # (expectations.ENUMS) and the tests of the code that writes the column read
    values: tuple = ()
    # the value is read off the wire or out of a log as it came, a number the spec gives no name kept as read:
    # ``values`` are the ones the spec names, and a value outside them is what a peer sent (its check an observation)
    peer: bool = False

    def __post_init__(self):
        if self.type not in _TYPES:
            raise ValueError(f"column {self.name}: unknown type {self.type}")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"column {self.name}: a value listed twice")

    @property
    def arrow_type(self) -> pa.DataType:
        return _TYPES[self.type][0]

    def spark_type(self):
        from pyspark.sql import types as T

        if self.type.startswith("array<"):
            inner = self.type[6:-1]
            return T.ArrayType(getattr(T, _TYPES[inner][1])(), True)
        return getattr(T, _TYPES[self.type][1])()


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # columns that identify a row (unique, not null)
    partition_by: tuple[str, ...] = ("capture_date",)
    # Columns whose values name the unit a job replaces as a whole: re-ingesting
    # a capture removes every file of that capture and adds the new ones.
    replace_by: tuple[str, ...] = ("capture_id",)
    # Columns written without a Parquet dictionary: their values are nearly all distinct (ids, offsets, times), where
    # the writer's dictionary costs a hash per value and saves nothing (the 60 MB slice's 370k frames: 0.55 -> 0.44
    # CPU s to write, 10 -> 8 MiB). Storage only: readers see the same values.
    plain: tuple[str, ...] = ()
    # Columns written without Parquet statistics: never null (a reader's ``null_columns`` learns nothing from their
    # null counts) and never a reader's filter (no row group is skipped by their least and greatest values), where
    # the writer's min/max per page costs a compare per value (the frames' seven such columns: 658 -> 617 ns a frame
    # to write, the 2 GB load capture's frames). Storage only: readers see the same values.
    no_statistics: tuple[str, ...] = ()

    def __post_init__(self):
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: duplicate column names")
        for col in self.key + self.partition_by + self.replace_by + self.plain + self.no_statistics:
            if col not in names:
                raise ValueError(f"table {self.name}: {col} is not a column")
        nullable = [c.name for c in self.columns if c.name in self.no_statistics and c.nullable]
        if nullable:
            raise ValueError(f"table {self.name}: {', '.join(nullable)} may be null: their null counts are statistics")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns])

    def spark_schema(self):
        from pyspark.sql import types as T

        return T.StructType([T.StructField(c.name, c.spark_type(), c.nullable) for c in self.columns])

    def dictionary_columns(self) -> list[str]:
        """The data columns a Parquet writer dictionary-encodes (``use_dictionary``): all but ``plain``."""
        return [c.name for c in self.data_columns() if c.name not in self.plain]

    def statistics_columns(self) -> list[str]:
        """The data columns a Parquet writer keeps statistics of (``write_statistics``): all but ``no_statistics``."""
        return [c.name for c in self.data_columns() if c.name not in self.no_statistics]

    def data_columns(self) -> list[Column]:
        """Columns stored inside the Parquet files (partition columns live in paths)."""
        return [c for c in self.columns if c.name not in self.partition_by]

    def render_text(self) -> str:
        """The golden rendering checked by tests: one line per column."""
        lines = [f"table {self.name}", f"key {', '.join(self.key)}", f"partition_by {', '.join(self.partition_by)}"]
        for c in self.columns:
            lines.append(f"{c.name} {c.type}{'' if c.nullable else ' not null'}"
                         + (f" in {{{', '.join(map(str, c.values))}}}" if c.values else ""))
        return "\n".join(lines) + "\n"

    def render_markdown(self) -> str:
        out = [f"## `{self.name}`", "", self.doc, ""]
        out.append(f"Key: {', '.join(f'`{k}`' for k in self.key)}. Partitioned by {', '.join(f'`{p}`' for p in self.partition_by)}.")
        out += ["", "| column | type | null | meaning |", "| --- | --- | --- | --- |"]
        for c in self.columns:
            values = f" Values: {', '.join(f'`{v}`' for v in c.values)}." if c.values else ""
            if c.peer:
                values += " Read as sent: a value the spec does not name is kept as read (a warning, not a failure)."
            out.append(f"| `{c.name}` | {c.type} | {'yes' if c.nullable else 'no'} | {c.doc}{values} |")
        return "\n".join(out) + "\n"


# The leading columns of every table (data and metric): the capture and its day, the partition.
CAPTURE_DATE = Column("capture_date", "date", "UTC day of the capture's first packet (1970-01-01 when it has none); the partition", False)
CAPTURE_ID = Column("capture_id", "string", "sha256 of the input file's bytes (a capture, or a broker log: its log_id)", False)

