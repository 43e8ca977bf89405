"""Typed notes a Spark task sends its driver (or the next step of its own task) in a ``meta`` text column.

A task's output rows carry a ``kind`` and, for the kinds that report something, a ``meta`` text. Each such report
is a dataclass with ``MetaReport`` mixed in: the writer calls ``to_meta()``, the reader ``from_meta(text)``, so both
sides read and write one typed definition and the JSON is only the encoding in between.

- ``ConnectionsClosed`` (``amqplens.decode.pipeline``): on a ``connection`` batch, the frames of its connections
  are all out (the fused lifecycle waits for it);
- ``StagedFile`` (``amqplens.lake.staging``): a Parquet file a task wrote into a staging folder;
- ``CaptureCounts`` (``amqplens.jobs.ingest_captures``): a task's counts for one capture's ``captures`` row.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Self, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class MetaReport:
    """A dataclass that goes through a ``meta`` column as JSON of its fields."""

    def to_meta(self) -> str:
        return json.dumps(dataclasses.asdict(cast("DataclassInstance", self)), separators=(",", ":"))

    @classmethod
    def from_meta(cls, text: str) -> Self:
        fields: dict[str, Any] = json.loads(text)
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class ConnectionsClosed(MetaReport):
    """The batch's connections have ended: each of their frames is among the first ``frames_through`` frame rows
    the task has made."""

    frames_through: int
