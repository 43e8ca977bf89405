"""Table contracts: one definition per table (see amqplens.contracts.base and amqplens.contracts.tables).

The names below load on first use, so that ``amqplens.contracts.values`` (the closed value lists, which the decoder
and the lifecycle import) comes without the tables, pyarrow or the expectation suites.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amqplens.contracts.base import Column, Table
    from amqplens.contracts.tables import (
        ALL_TABLES,
        CAPTURES,
        CONNECTIONS,
        DECODE_ERRORS,
        DELIVERIES,
        FINDINGS,
        FLOW_EVENTS,
        FRAMES,
        REQUEST_RESPONSES,
    )

_WHERE = {"Column": "base", "Table": "base", "FINDINGS": "findings", **{n: "tables" for n in (
    "ALL_TABLES", "CAPTURES", "CONNECTIONS", "DECODE_ERRORS", "DELIVERIES", "FLOW_EVENTS", "FRAMES", "REQUEST_RESPONSES")}}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'amqplens.contracts' has no attribute {name!r}")
    return getattr(importlib.import_module(f"amqplens.contracts.{module}"), name)


def table(name: str) -> Table:
    from amqplens.contracts.tables import ALL_TABLES

    try:
        return ALL_TABLES[name]
    except KeyError:
        raise KeyError(f"no table named {name!r}; tables: {', '.join(sorted(ALL_TABLES))}") from None

__all__ = [
    "ALL_TABLES", "CAPTURES", "CONNECTIONS", "DECODE_ERRORS", "DELIVERIES", "FINDINGS", "FLOW_EVENTS", "FRAMES", "REQUEST_RESPONSES", "Column", "Table", "table"]
