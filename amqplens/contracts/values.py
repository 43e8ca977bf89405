"""The closed value lists that more than one column, or code outside the contracts, shares.

Each list is a ``Literal`` type with its values as a tuple (``typing.get_args``): the contracts' ``Column(values=...)``
take the tuples, so the docs (docs/tables.md) and the expectation suites (``expectations.ENUMS``) show them; the code
that writes the columns takes the types (mypy holds its constants to them: ``D0_8: Dialect = "0-8"`` in the decoder,
the lifecycle machines' outcomes) or checks against the tuples. Plain Python with no imports from the rest of the
contracts, so the decoder and the lifecycle import this module and nothing else of ``amqplens.contracts``.
"""

from __future__ import annotations

from typing import Literal, get_args

Dialect = Literal["0-8", "0-9", "0-9-1", "0-10", "1.0", "0-9-draft", "amqp-fast-0.9a5"]
DIALECTS: tuple[Dialect, ...] = get_args(Dialect)

Direction = Literal["to_server", "to_client"]  # which way a frame or byte went, on the wire
TO_SERVER_CLIENT: tuple[Direction, ...] = get_args(Direction)
BrokerDirection = Literal["to_broker", "from_broker"]  # which way a message went, for deliveries and metrics
TO_FROM_BROKER: tuple[BrokerDirection, ...] = get_args(BrokerDirection)
Peer = Literal["client", "server"]  # who closed a connection
CLIENT_SERVER: tuple[Peer, ...] = get_args(Peer)

LogFormat = Literal["rabbitmq-3.6", "rabbitmq-3.7", "rabbitmq-3.9", "rabbitmq-json"]  # RabbitMQ server logs
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)

# deliveries.outcome: how a message transfer ended. Every outcome a lifecycle machine (amqplens.lifecycle.machines)
# can reach is one of these (the machines are checked against OUTCOMES when they are built), and "traced" marks the
# rows of a broker's message trace.
Outcome = Literal[
    # 0-9-1 publishes
    "confirmed", "nacked_by_broker", "returned", "unconfirmed_at_close", "sent", "committed", "rolled_back",
    # 0-9-1 deliveries
    "acked", "nacked_requeue", "nacked_drop", "rejected_requeue", "rejected_drop", "auto_ack", "recovered",
    "requeued_on_close",
    # 1.0 (and the 0-10 transfers' settlements)
    "accepted", "rejected", "released", "modified", "received", "settled", "presettled", "aborted", "declared",
    "transactional", "unsettled_at_close",
    # any dialect; trace rows
    "open_at_capture_end", "traced",
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
