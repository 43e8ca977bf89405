"""The demo's validate warnings, word for word as a newcomer reads them on the terminal (issue 36).

The demo capture holds exactly one anomaly, on purpose: its channel_errors scenario (tools/make_fixtures.py) acks
delivery tag 99, which the broker never delivered, and RabbitMQ closes that channel with 406 PRECONDITION_FAILED.
The warning used to end at ``(_anomaly=ack_of_unknown_tag)``; it must now say what that is and whether to worry.
"""

from __future__ import annotations

import pytest

from amqplens import cli
from amqplens.config import load_config
from amqplens.contracts import ALL_TABLES
from amqplens.contracts import expectations as ex
from amqplens.lake.store import TableStore

pytestmark = [pytest.mark.spark]

EXPECTED = [
    "  warning: flow_events: flow_events.anomalies (warning): 1 of 196 rows unexpected; "
    "e.g. event_id=19ba5da232942504231c1f234f2614d7-s-729-channel-2 (_anomaly=ack_of_unknown_tag)",
    "    rows where the lifecycle flagged something a peer did that its protocol does not allow, kept as seen; "
    "the demo has them, and so does any capture that starts mid-connection: see each kind below",
    "    ack_of_unknown_tag: a client settled (ack/nack/reject) a delivery tag the capture never saw delivered, or one "
    "already settled (a multiple=true ack past the last open tag); expected when the capture started after the "
    "delivery; on a whole connection, the client's acking is off (its broker will close the channel with "
    "PRECONDITION_FAILED)",
]


def test_demo_warnings_say_what_they_mean(spark, demo_lake, capsys):
    capsys.readouterr()
    assert cli.main(["validate", "--lake", str(demo_lake), "--run-id", "words"]) == 0
    out = capsys.readouterr().out.splitlines()
    (i,) = [n for n, line in enumerate(out) if line.startswith("validate: ")]
    # the count: every check of the contracts' suites, over the tables that hold rows of the demo (broker_events
    # holds none: no broker log), from the contracts and the Delta logs, not from validate's own output
    store = TableStore(spark, str(demo_lake))
    ids = store.read_arrow("captures", ["capture_id"]).column("capture_id").to_pylist()
    settings = ex.Settings.from_config(load_config())
    expected = sum(len(ex.checks(t, settings)) for name, t in ALL_TABLES.items() if store.rows(name, ids) > 0)
    assert expected > 100
    assert out[i].split(" (")[0] == (f"validate: {expected} expectations on 1 capture(s), 1 warning(s); "
                                     f"results: {demo_lake / '_quality' / 'index.html'}")
    assert out[i + 1:] == EXPECTED
