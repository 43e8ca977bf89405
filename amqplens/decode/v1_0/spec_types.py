"""The record type of the generated 1.0 spec module's described types (spec.py)."""

from __future__ import annotations

from typing import NamedTuple


class Described(NamedTuple):
    """A described type: ``DESCRIBED[domain << 32 | id]``."""

    name: str
    symbol: str  # the symbolic descriptor (amqp:open:list)
    type_class: str  # composite or restricted
    source: str  # the type it is encoded as (list, map, ...)
    provides: tuple[str, ...]  # the archetypes it provides (frame, section, delivery-state, ...)
    fields: tuple[tuple, ...]  # (field, type, multiple, mandatory, default, requires) in list order
