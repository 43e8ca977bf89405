"""The record types of the generated 0-8/0-9/0-9-1 spec modules (spec_0_8.py, spec_0_9.py, spec_0_9_1.py).

Named tuples: a reader names the field it wants (``m.fields``), and a tuple's speed and shape stay.
"""

from __future__ import annotations

from typing import NamedTuple


class MethodSpec(NamedTuple):
    """One method of the spec: ``METHODS[class_id << 16 | method_id]``."""

    class_name: str
    method_name: str
    synchronous: bool
    content: bool  # a content header and bodies follow it
    fields: tuple[tuple[str, str], ...]  # (field, wire type) in wire order
    responses: tuple[int, ...]  # the keys of the methods that answer it
