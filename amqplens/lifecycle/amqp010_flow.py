"""0-10 message credit per destination (flow_events rows, entity ``link``).

A destination is the 0-10 name messages are transferred to: the client's
subscription (message.subscribe destination) for the broker's transfers, or
whatever the broker grants credit on for the client's. The credit belongs to
the transfers of the side that did *not* send the message.flow, so the key is
(session channel, sender of the transfers, destination); rows carry the
channel, ``consumer_tag`` = the destination (0-10 uses it as the consumer
tag), ``link_handle`` null, and event_id key ``<channel>-<c|s><destination>``
(c: credit for the client's transfers, s: for the broker's).

Events:
- ``flow`` (message.set-flow-mode): the mode (``reason`` = credit | window);
  both credits reset to 0 (§ message.set-flow-mode);
- ``credit`` (message.flow): the value is added to the unit's credit;
  0xFFFFFFFF means unlimited (link_credit null while message credit is so);
  ``drain`` back to false;
- ``stop`` (message.stop): both credits 0;
- ``flush`` (message.flush): ``drain`` true; the credit is what it was until
  the sender's transfers use it;
- ``transfer``: each transfer to the destination, at its last frame: message
  credit - 1, byte credit - the body size;
- ``completed`` (window mode only): the receiver's session.completed naming
  transfers gives their credit back (+1, + their size);
- ``close`` (message.cancel, session detach): the destination is gone.

``link_credit`` is the message credit in hand; ``at_limit`` = it is 0 (or
less); ``reason`` on a credit/transfer/completed row: ``credit_exceeded``
(message credit < 0), else ``byte_credit_exhausted`` (byte credit <= 0), else
null. The byte credit has no column of its own (FLOW_EVENTS has none).
Destinations with no flow control seen (a publish to an exchange) make no rows.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import cast

from amqplens.lifecycle.records import Output, flow_row
from amqplens.lifecycle.seqsets import members

UNLIMITED = 0xFFFFFFFF
MAX_WINDOW_PENDING = 65_536  # per session and direction: window-mode transfers awaiting their completion


class Credit:
    __slots__ = ("mode", "messages", "bytes", "drain")

    def __init__(self) -> None:
        self.mode: str | None = None
        self.messages: int | None = 0  # None: unlimited
        self.bytes: int | None = 0
        self.drain = False


def _add(have: int | None, value: int) -> int | None:
    if have is None or value >= UNLIMITED:
        return None
    return have + value


class FlowTracker:
    """Credit of every destination of one connection."""

    def __init__(self, connection_id: str, out: Output) -> None:
        self.cid, self.out = connection_id, out
        self.credits: dict[tuple, Credit] = {}  # (channel, sender direction, destination)
        self.window: dict[tuple, OrderedDict] = {}  # (channel, sender) -> command id -> (credit key, size)

    def on_command(self, f: dict, name: str, fid: str, ts: int) -> None:
        """message.set-flow-mode / flow / stop / flush / cancel from f's sender."""
        d, ch, dest = f["direction"], f.get("channel") or 0, f.get("destination")
        key = (ch, "to_client" if d == "to_server" else "to_server", dest)
        c = self.credits.get(key)
        if name == "cancel":
            if c is not None:
                del self.credits[key]
                self._row(key, c, fid, ts, "close")
            return
        if c is None:
            c = self.credits[key] = Credit()
        if name == "set-flow-mode":
            c.mode, c.messages, c.bytes = f.get("flow_mode"), 0, 0
            self._row(key, c, fid, ts, "flow", reason=c.mode)
        elif name == "flow":
            value = f.get("credit_value") or 0
            if f.get("credit_unit") == "byte":
                c.bytes = _add(c.bytes, value)
            else:
                c.messages = _add(c.messages, value)
            c.drain = False
            self._row(key, c, fid, ts, "credit")
        elif name == "stop":
            c.messages, c.bytes = 0, 0
            self._row(key, c, fid, ts, "stop")
        elif name == "flush":
            c.drain = True
            self._row(key, c, fid, ts, "flush")

    def on_transfer(self, channel: int, sender: str, destination, command_id, size, fid: str, ts: int) -> None:
        key = (channel, sender, destination)
        c = self.credits.get(key)
        if c is None:
            return
        if c.messages is not None:
            c.messages -= 1
        if c.bytes is not None and size:
            c.bytes -= size
        if c.mode == "window" and command_id is not None:
            pending = self.window.setdefault((channel, sender), OrderedDict())
            pending[command_id] = (key, size or 0)
            if len(pending) > MAX_WINDOW_PENDING:
                pending.popitem(last=False)
        self._row(key, c, fid, ts, "transfer")

    def on_completed(self, channel: int, sender: str, ranges: list, fid: str, ts: int) -> None:
        """The receiver completed these of ``sender``'s commands: window-mode credit comes back."""
        pending = self.window.get((channel, sender))
        if not pending:
            return
        touched: dict[tuple, Credit] = {}
        for i in members(ranges, pending):
            entry = pending.pop(i, None)
            if entry is None:
                continue
            key, size = entry
            c = self.credits.get(key)
            if c is None:
                continue
            c.messages = None if c.messages is None else c.messages + 1
            c.bytes = None if c.bytes is None else c.bytes + size
            touched[key] = c
        for key, c in touched.items():
            self._row(key, c, fid, ts, "completed")

    def end_session(self, channel: int, fid: str | None, ts: int | None) -> None:
        for key in [k for k in self.credits if k[0] == channel]:
            c = self.credits.pop(key)
            if fid is not None:
                self._row(key, c, fid, cast(int, ts), "close")  # a frame's ts with its frame_id
        for key in [k for k in self.window if k[0] == channel]:
            del self.window[key]

    def _row(self, key: tuple, c: Credit, fid: str, ts: int, event: str, reason: str | None = None) -> None:
        ch, sender, dest = key
        if reason is None and event in ("credit", "transfer", "completed"):
            if c.messages is not None and c.messages < 0:
                reason = "credit_exceeded"
            elif c.bytes is not None and c.bytes <= 0:
                reason = "byte_credit_exhausted"
        self.out.flow_events.append(flow_row(
            self.cid, fid, ts, "link", f"{ch}-{'c' if sender == 'to_server' else 's'}{dest}", event, channel=ch,
            consumer_tag=dest, link_credit=c.messages, drain=c.drain,
            at_limit=c.messages is not None and c.messages <= 0, reason=reason))
