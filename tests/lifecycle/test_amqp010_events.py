"""Every flow_events.event the 0-10 credit machine writes is one the contract lists (flow_events.enum.event is a
critical invariant: a derived value outside our own list fails the run with exit 4).

Bad input tried: none; a client's ordinary message.flush (qpid's synchronous fetch sends it) and message.stop on a
credit-mode subscription, written with the test encoder from the spec. Expected events from the commands written
(amqplens/lifecycle/amqp010_flow.py's docstring names one event per command): set-flow-mode -> flow, flow -> credit,
flush -> flush, stop -> stop, and close when the session detaches. Before: stop and flush were not in the list.
"""

from __future__ import annotations

from amqplens.contracts.expectations import ENUMS
from amqplens.lifecycle import LifecycleRunner
from tests.lifecycle.captures import frames_of
from tests.v0_10 import conversation as V
from tests.v0_10.encoder import cmd
from tests.v1_0.pcap_writer import connection_pcap


def test_flush_and_stop_are_events_the_contract_lists(tmp_path):
    turns = V.handshake() + V.attach() + [
        (V.S, cmd(1, "message", "subscribe", queue="q1", destination="d1", accept_mode=0, acquire_mode=0)
            + cmd(1, "message", "set-flow-mode", destination="d1", flow_mode=0)
            + cmd(1, "message", "flow", destination="d1", unit=0, value=10)
            + cmd(1, "message", "flush", destination="d1")
            + cmd(1, "message", "stop", destination="d1")),
    ] + V.close()
    path = tmp_path / "flush_stop.pcap"
    path.write_bytes(connection_pcap(turns))
    runner = LifecycleRunner()
    runner.feed(frames_of(str(path)))
    runner.finish()
    events = [e["event"] for e in runner.drain_flow_events()]
    assert events == ["flow", "credit", "flush", "stop", "close"]
    assert set(events) <= set(ENUMS["flow_events"]["event"])
