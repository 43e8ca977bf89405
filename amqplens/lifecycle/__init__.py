"""The lifecycle stage: frames in; deliveries, flow events and request/response pairs out.

- ``machines``: the state machines as tables (``(state, event) -> (effect, next_state)``);
- ``amqp091`` / ``amqp10`` / ``amqp010``: one connection of the 0-9-1 family / of 1.0 / of 0-10, driving them;
- ``requests``: synchronous 0-9-1 method pairs, from the generated spec tables;
- ``amqp010_flow`` / ``amqp010_requests``: 0-10 credit per destination, 0-10 pairs; ``seqsets``: 0-10 id ranges;
- ``runner.LifecycleRunner``: many connections' frame rows, streamed with bounded state;
- ``batches.lifecycle_batches``: the Arrow batch function the Spark job maps with;
- ``fused.ConnectionLifecycle``: the same inside the ingest's decode task, a connection once its frames are all out.

Pure Python (stdlib and pyarrow); no Spark.

Outcomes (``deliveries.outcome``): 0-9-1 publishes confirmed, nacked_by_broker,
returned, unconfirmed_at_close, sent (no confirms: settled on send),
committed, rolled_back; 0-9-1 deliveries acked, nacked_requeue, nacked_drop,
rejected_requeue, rejected_drop, auto_ack, recovered (basic.recover),
requeued_on_close; 1.0 accepted, rejected, released, modified, received,
declared, transactional, presettled, settled (settled without a state),
aborted, unsettled_at_close; 0-10 accepted, rejected, released, sent
(accept-mode none toward the broker), auto_ack (accept-mode none from it),
unsettled_at_close; all: open_at_capture_end.

Flags (``deliveries.flags``), anomalies that never stop a run:
method_not_seen, consumer_not_seen, get_not_seen, attach_not_seen,
orphan_continuation (the capture missed how the message started);
content_incomplete (its last frame never came); duplicate_tag,
delivery_id_reused, frame_on_closed_channel, return_window_exceeded,
nacked_after_return, settle_rolled_back, uncommitted_settle, settled_twice,
state_<outcome> (the receiver stated it, nobody settled), state_regressed,
0-10 command_id_reused, completed_unsettled (the peer's session.completed
named it, nobody accepted/rejected/released it), reject_<code> (the reject's
code: unspecified, unroutable, immediate),
open_not_seen / close_not_seen / reopened_without_close (its channel's
lifecycle), unexpected_<event> (a pair the tables call impossible). Anomalies
with no delivery to carry them are ``settle`` flow events with ``reason``:
<ack|nack|reject>_of_unknown_tag, confirm_<ack|nack>_of_unknown_tag,
return_of_unknown_publish (each may add ",frame_on_closed_channel"),
disposition_of_unknown_id, <accept|reject|release>_of_unknown_id (0-10); a
link row past its credit has credit_exceeded (0-10 also byte_credit_exhausted).
"""

from amqplens.lifecycle.batches import FRAME_COLUMNS, frame_rows, lifecycle_batches, lifecycle_out_schema
from amqplens.lifecycle.machines import (
    DELIVER, ENDPOINT, MACHINES, PUBLISH, REQUEST, TRANSFER, TRANSFER_0_10, Machine, Transition,
)
from amqplens.lifecycle.records import DELIVERY_KEYS, FLOW_EVENT_KEYS, REQUEST_RESPONSE_KEYS
from amqplens.lifecycle.runner import LifecycleOptions, LifecycleRunner

__all__ = [
    "LifecycleRunner", "LifecycleOptions", "lifecycle_batches", "lifecycle_out_schema", "frame_rows", "FRAME_COLUMNS",
    "DELIVERY_KEYS", "FLOW_EVENT_KEYS", "REQUEST_RESPONSE_KEYS",
    "Machine", "Transition", "MACHINES", "PUBLISH", "DELIVER", "TRANSFER", "TRANSFER_0_10", "ENDPOINT", "REQUEST",
]
