"""Broker logs into rows: RabbitMQ server logs, RabbitMQ message traces, Qpid Proton frame traces.

Pure Python like the codecs: ``lines`` reads a byte range of a file as entries
(the lines of one message), each format's module turns entries into rows
(``records``), and ``batches`` is the ``mapInArrow`` function of the job.
``sniff`` names a file's format from its first bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from amqplens.logs import proton, rabbitmq, tracing

SNIFF_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class LogFormat:
    name: str
    kind: str  # what it yields: events | deliveries | frames
    continues: Callable[[bytes, bytes], bool]
    parse: Callable  # (entries, log_format, log_id) -> iterator of (kind, row)
    splittable: bool = True  # False: one task reads the whole file (state runs across lines)


def _rabbit(name: str) -> LogFormat:
    return LogFormat(name, "events", rabbitmq.continues(name), lambda entries, fmt, log_id: rabbitmq.parse(entries, fmt))


def _trace(name: str) -> LogFormat:
    return LogFormat(name, "deliveries", tracing.continues(name), lambda entries, fmt, log_id: tracing.parse(entries, fmt))


FORMATS: dict[str, LogFormat] = {
    **{n: _rabbit(n) for n in ("rabbitmq-3.6", "rabbitmq-3.7", "rabbitmq-3.9", "rabbitmq-json")},
    **{n: _trace(n) for n in ("rabbitmq-trace-text", "rabbitmq-trace-json", "rabbitmq-firehose")},
    **{n: LogFormat(n, "frames", proton.continues(n), proton.parse, splittable=False) for n in ("proton-trace", "proton-trace-old")},
}

UNKNOWN = "log-unknown"
FRAME_FORMATS = frozenset(n for n, f in FORMATS.items() if f.kind == "frames")
LOG_FORMATS = frozenset(FORMATS) | {UNKNOWN}
# logs whose captures row must not be handed to the lifecycle job (it would replace their trace deliveries)
# formats whose rows are events or deliveries, no frames: the lifecycle job has nothing to build from them
FRAMELESS_FORMATS = LOG_FORMATS - FRAME_FORMATS


def sniff(head: bytes) -> str | None:
    """The format of a log from its first bytes (up to SNIFF_BYTES), or None."""
    return tracing.sniff(head) or proton.sniff(head) or rabbitmq.sniff(head)
