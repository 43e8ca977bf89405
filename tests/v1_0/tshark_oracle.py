"""tshark as an independent oracle for AMQP 1.0 captures (see shared/notes/tshark-as-oracle.md).

``frames(pcap)`` gives, per TCP connection (keyed by the client's port) and
direction, the sequence tshark dissects (continuation transfers filled in by
``fill_continuations``): protocol headers as ``("header", id)``
and frames as ``(channel, performative code, handle, delivery-id, settled,
link-credit, first, last)``, the code being ``amqp.performative`` or, for SASL
frames, ``amqp.sasl.method`` (None for an empty frame). It reads ``-T json``
with a hook that keeps the repeated ``amqp`` keys of several frames per packet.
"""

from __future__ import annotations

import subprocess

from tests.oracles.tshark_json import PREFS, available, packets  # noqa: F401  (available: the tests' skip)
from tests.oracles.tshark_json import get as _get

AMQP_PORTS = (5672,)
ARG = "amqp.performative.arguments."


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["tshark", *args], capture_output=True, text=True)


def _int(v):
    return int(v) if v is not None else None


def _bool(v):
    return None if v is None else v not in ("0", "False", "false")


def _frame(amqp) -> tuple | None:
    """The compared tuple, and for transfers (more, aborted) to apply the spec's continuation rule."""
    if _get(amqp, "amqp.init.protocol") is not None:
        return ("header", _int(_get(amqp, "amqp.init.id"))), None
    if _get(amqp, "amqp.type") is None:
        return None, None
    args = _get(amqp, "amqp.method.arguments")
    args = args if isinstance(args, list) else []
    code = _get(amqp, "amqp.performative") or _get(amqp, "amqp.sasl.method")
    flags = (_bool(_get(args, ARG + "more")), _bool(_get(args, ARG + "aborted")))
    return (
        _int(_get(amqp, "amqp.channel")),
        _int(code),
        _int(_get(args, ARG + "handle")),
        _int(_get(args, ARG + "deliveryId")),
        _bool(_get(args, ARG + "settled")),
        _int(_get(args, ARG + "linkCredit")),
        _int(_get(args, ARG + "first")),
        _int(_get(args, ARG + "last")),
    ), flags


def frames(pcap: str) -> tuple[dict, str]:
    """``({(client_port, direction): [entry, ...]}, tshark's stderr)``."""
    proc = _run(["-r", pcap, *PREFS, "-T", "json", "-J", "tcp amqp"])
    result: dict = {}
    for tcp, found in packets(proc.stdout):
        src, dst = int(_get(tcp, "tcp.srcport")), int(_get(tcp, "tcp.dstport"))
        key = (src, "to_server") if dst in AMQP_PORTS else (dst, "to_client")
        for amqp in found:
            entry, flags = _frame(amqp)
            if entry is not None:
                result.setdefault(key, []).append((entry, flags))
    return {key: fill_continuations(entries) for key, entries in result.items()}, proc.stderr


def fill_continuations(entries: list) -> list:
    """Our reading of continuation transfers, applied to tshark's: Part 2 §2.7.5 lets a continuation
    transfer omit delivery-id ("On continuation transfers the delivery-id MAY be omitted"), and it
    is then the delivery's, i.e. the first transfer's; tshark shows the field only where it is on
    the wire. A transfer follows an open delivery on its link when the link's previous transfer
    had more=true and was not aborted (§2.6.14: deliveries on one link are not interleaved)."""
    open_delivery: dict = {}
    out = []
    for entry, flags in entries:
        if entry[0] != "header" and entry[1] == 20:
            link = (entry[0], entry[2])
            if entry[3] is None and link in open_delivery:
                entry = entry[:3] + (open_delivery[link],) + entry[4:]
            more, aborted = flags
            if more and not aborted:
                open_delivery[link] = entry[3]
            else:
                open_delivery.pop(link, None)
        out.append(entry)
    return out
