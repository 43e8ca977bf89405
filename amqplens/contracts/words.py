"""Plain words for what validate reports: per anomaly kind and per warning-level expectation, what was seen and
whether to worry. The printed warning lines (amqplens/cli.py) and the results page
(amqplens/jobs/validate/results_page.py) read them; tests/validate/test_words.py checks that every anomaly kind the
lifecycle can write and every expectation that can be a warning has its words.

Keys are fnmatch patterns, tried in order: the first that matches gives the words.
"""

from __future__ import annotations

import fnmatch
import re

# An expectation over no rows (every value null, e.g. the mean codec error share of a run without captured
# connections) observes None: GX's "observed None" reads as this.
NO_ROWS = "no rows to judge (e.g. a logs-only run has no captured connections)"
NO_ROWS_WORDS = "nothing was judged, so nothing to worry about (GX counts an expectation over no values as failed)"

# A peer's traffic is data: none of these stops a run. Each says what the capture showed, then whether to worry.
ANOMALIES: dict[str, str] = {
    # settle events that name nothing the capture saw (flow_events.reason)
    "confirm_*_of_unknown_tag": "the broker confirmed a publish tag the capture never saw published; expected when the "
                                "capture started after the publish (or a multiple=true confirm covers tags already "
                                "confirmed); worry only if the capture saw the whole connection",
    "*_of_unknown_tag": "a client settled (ack/nack/reject) a delivery tag the capture never saw delivered, or one "
                        "already settled (a multiple=true ack past the last open tag); expected when the capture started "
                        "after the delivery; on a whole connection, the client's acking is off (its broker will close "
                        "the channel with PRECONDITION_FAILED)",
    "return_of_unknown_publish": "the broker returned a message whose publish the capture never saw; expected when the "
                                 "capture started mid-connection",
    "disposition_of_unknown_id": "an AMQP 1.0 disposition named delivery ids the capture never saw transferred; expected "
                                 "when the capture started mid-link",
    "*_of_unknown_id": "an AMQP 0-10 accept/reject/release named command ids the capture never saw; expected when the "
                       "capture started mid-session",
    "credit_exceeded": "a sender sent beyond the link credit it was given; the receiver may detach the link: worth a "
                       "look at the sender if it repeats",
    "byte_credit_exhausted": "an AMQP 0-10 sender used up its byte credit; normal flow control, worry only if "
                             "throughput stalls",
    # delivery flags (deliveries.flags)
    "method_not_seen": "content frames came without the method that starts the message: the capture began mid-message; "
                       "harmless at the start of a capture",
    "consumer_not_seen": "a delivery for a consumer whose basic.consume the capture did not see: it started before the "
                         "capture; harmless",
    "get_not_seen": "a basic.get-ok whose basic.get the capture did not see (the capture began in between); harmless",
    "attach_not_seen": "a transfer on an AMQP 1.0 link whose attach the capture did not see (it started before the "
                       "capture); harmless",
    "open_not_seen": "traffic on a channel or session whose open the capture did not see (it started before the "
                     "capture); harmless",
    "close_not_seen": "a channel or session reopened or ended without the close the capture should show; usually the "
                      "capture dropped packets",
    "reopened_without_close": "a channel was opened again without being closed: the capture missed its close, or the "
                              "client misbehaves",
    "orphan_continuation": "a continuation frame without the frame that starts its message: the capture missed the "
                           "start; harmless at the start of a capture, else packets were lost",
    "content_incomplete": "a message's last content frame never came: the capture ended or lost packets mid-message",
    "duplicate_tag": "two deliveries on one channel had the same delivery tag: the broker or the capture is at fault; "
                     "worth a look",
    "delivery_id_reused": "an AMQP 1.0 delivery id was reused while the first delivery was unsettled: a peer bug worth "
                          "a look",
    "command_id_reused": "an AMQP 0-10 command id was reused while the first command was open: a peer bug worth a look",
    "frame_on_closed_channel": "a frame on a channel already closed: the peer ignored the close; usually harmless",
    "return_window_exceeded": "more mandatory publishes awaited a possible basic.return than amqplens tracks "
                              "(lifecycle bound); the oldest was taken as routed: harmless, unless it was in fact "
                              "returned much later",
    "nacked_after_return": "the broker nacked a publish it had already returned: a broker quirk, the message is lost "
                           "either way",
    "settle_rolled_back": "a settle inside a transaction was rolled back: the message is delivered again; normal with "
                          "transactions",
    "uncommitted_settle": "a settle inside a transaction that was never committed (the channel closed, the capture "
                          "ended or the client recovered first): the broker delivers the message again",
    "settled_twice": "a delivery was settled twice; the second settle changes nothing: a client bug worth a look",
    "state_regressed": "an AMQP 1.0 receiver stated a delivery state that goes back on an earlier one; a peer quirk",
    "state_*": "the receiver stated this outcome but nobody settled the delivery before the capture ended; usually "
               "the capture ended first",
    "completed_unsettled": "an AMQP 0-10 session.completed named a transfer nobody accepted, rejected or released; "
                           "normal with accept-mode none",
    "reject_*": "the broker rejected an AMQP 0-10 transfer with this code (the message was not routed or delivered)",
    "unexpected_*": "an event the protocol's state machine calls impossible at that point (the capture missed frames, "
                    "or a peer broke the protocol); the row is kept as seen",
}

# Expectations that can be warnings: the observations (expectations.OBSERVATIONS) and, by config, any invariant.
EXPECTATIONS: dict[str, str] = {
    "*.anomalies": "rows where the lifecycle flagged something a peer did that its protocol does not allow, kept as "
                   "seen; the demo has them, and so does any capture that starts mid-connection: see each kind below",
    "*.non_negative.*": "a peer overran the credit or window it was given (the value went below 0); the peer's data, "
                        "not an amqplens fault: worth a look at that sender",
    "frames.decode_error_share": "many frames' content did not decode: a peer sent malformed content, or the port "
                                 "carries another protocol; amqplens kept the frames and their errors",
    "connections.codec_error_share": "on average much of a decoded connection's bytes did not frame as AMQP (garbage, "
                                     "another protocol, or a capture that lost packets)",
    "frames.enum.accept_mode": "a 0-10 message.transfer or subscribe carried an accept-mode the spec does not define: "
                               "the peer's value, kept as sent; worth a look at that client, not an amqplens fault",
    "frames.enum.acquire_mode": "a 0-10 message.transfer or subscribe carried an acquire-mode the spec does not define: "
                                "the peer's value, kept as sent; worth a look at that client, not an amqplens fault",
    "frames.enum.credit_unit": "a 0-10 message.flow carried a credit unit the spec does not define: the peer's value, "
                               "kept as sent; worth a look at that client, not an amqplens fault",
    "frames.enum.flow_mode": "a 0-10 message.set-flow-mode carried a flow mode the spec does not define: the peer's "
                             "value, kept as sent; worth a look at that client, not an amqplens fault",
    "broker_events.enum.level": "a broker log line carried a level amqplens does not know: the log's own word, kept "
                                "as written; nothing to worry about",
    # invariants made warnings by validate.warning: amqplens broke its own promise, whatever the level
    "*": "amqplens broke a promise about its own output (validate.warning made it a warning): please report it with "
         "the capture",
}

_ANOMALY_SAMPLE = re.compile(r"_anomaly=([\w,]+)")


def _first(table: dict[str, str], name: str) -> str | None:
    return next((words for pattern, words in table.items() if fnmatch.fnmatchcase(name, pattern)), None)


def anomaly(kind: str) -> str | None:
    """The words of one anomaly kind (a flow event's reason may carry a second one: 'ack_of_unknown_tag,frame_on_closed_channel')."""
    parts = [_first(ANOMALIES, k) for k in kind.split(",") if k]
    return "; and ".join(p for p in parts if p) or None


def expectation(name: str) -> str | None:
    return _first(EXPECTATIONS, name)


def observed(text: str) -> str:
    """GX's observed value as the results say it, with a judgement over no rows in words."""
    return NO_ROWS if text in ("observed None", "observed nan") else text


def anomaly_kinds(samples: list[str]) -> list[str]:
    """The anomaly kinds named by an outcome's sample rows (``... (_anomaly=kind)``), each once, in order."""
    kinds: list[str] = []
    for s in samples:
        for m in _ANOMALY_SAMPLE.finditer(s):
            for k in m.group(1).split(","):
                if k and k not in kinds:
                    kinds.append(k)
    return kinds
