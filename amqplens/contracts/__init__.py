"""Table contracts: one definition per table (see amqplens.contracts.base and amqplens.contracts.tables)."""

from amqplens.contracts.base import Column, Table
from amqplens.contracts.tables import (
    ALL_TABLES,
    CAPTURES,
    CONNECTIONS,
    DECODE_ERRORS,
    DELIVERIES,
    FLOW_EVENTS,
    FRAMES,
    REQUEST_RESPONSES,
)


def table(name: str) -> Table:
    try:
        return ALL_TABLES[name]
    except KeyError:
        raise KeyError(f"no table named {name!r}; tables: {', '.join(sorted(ALL_TABLES))}") from None


__all__ = [
    "ALL_TABLES", "CAPTURES", "CONNECTIONS", "DECODE_ERRORS", "DELIVERIES", "FLOW_EVENTS", "FRAMES", "REQUEST_RESPONSES", "Column", "Table", "table"]
