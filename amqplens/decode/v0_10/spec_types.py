"""The record type of the generated 0-10 spec module's controls and commands (spec.py)."""

from __future__ import annotations

from typing import NamedTuple


class Method(NamedTuple):
    """A control or a command: ``CONTROLS[(class code, code)]``, ``COMMANDS[(class code, code)]``."""

    class_name: str
    name: str
    fields: tuple[tuple[str, str, str | None], ...]  # (name, type, enum domain or None)
    has_segments: bool  # a header and a body segment follow it
    result: str | None  # the type of its execution.result, if it has one
