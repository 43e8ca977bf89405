"""Table contracts: the docs and golden renderings are current, Arrow and Spark agree."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pytest

from amqplens.contracts import ALL_TABLES
from tools import gen_table_docs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_generated_docs_and_golden_files_are_current():
    stale = [str(p) for p, text in gen_table_docs.render().items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m tools.gen_table_docs`: {stale}"


@pytest.mark.parametrize("name", sorted(ALL_TABLES))
def test_key_columns_not_null_and_partition_first_class(name):
    t = ALL_TABLES[name]
    for k in t.key + t.partition_by:
        assert not t.column(k).nullable, f"{name}.{k} must be not null"


@pytest.mark.parametrize("name", sorted(ALL_TABLES))
def test_arrow_and_spark_schemas_have_the_same_columns(name):
    from pyspark.sql.pandas.types import to_arrow_schema

    t = ALL_TABLES[name]
    arrow = t.arrow_schema()
    spark_as_arrow = to_arrow_schema(t.spark_schema(), timezone="UTC")
    assert arrow.names == spark_as_arrow.names
    for a, b in zip(arrow, spark_as_arrow):
        # Spark's timestamp is UTC microseconds like ours.
        assert a.type == b.type or (pa.types.is_timestamp(a.type) and pa.types.is_timestamp(b.type)), a.name
