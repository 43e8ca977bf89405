"""tshark as an independent oracle for AMQP 0-10 captures.

``frames(pcap)`` gives, per direction, the sequence tshark dissects: protocol
headers as ``("header", minor version)`` and frames as ``(segment type, track,
channel, position flags, size, class, control/command code)``; class and code
are None for header and body frames. It reads ``-T json`` with a hook that keeps
the repeated ``amqp`` keys of several frames in one packet.
"""

from __future__ import annotations

import subprocess

from tests.oracles.tshark_json import PREFS, available, packets  # noqa: F401  (available: the tests' skip)
from tests.oracles.tshark_json import get as _get

AMQP_PORT = 5672
METHOD_FIELDS = ("connection", "session", "execution", "message", "tx", "dtx", "exchange", "queue", "file", "stream")


def _int(v):
    return int(v, 0) if v is not None else None


def _frame(amqp) -> tuple | None:
    if _get(amqp, "amqp.init.protocol") is not None:
        return ("header", _int(_get(amqp, "amqp.init.version_minor")))
    if _get(amqp, "amqp.type") is None:
        return None
    method = next((_get(amqp, f"amqp.{c}.method") for c in METHOD_FIELDS if _get(amqp, f"amqp.{c}.method") is not None), None)
    return (
        _int(_get(amqp, "amqp.type")),
        _int(_get(amqp, "amqp.track-number")),
        _int(_get(amqp, "amqp.channel")),
        _int(_get(amqp, "amqp.frame-position")),
        _int(_get(amqp, "amqp.length")),
        _int(_get(amqp, "amqp.class")),
        _int(method),
    )


def frames(pcap: str) -> tuple[dict, str]:
    """``({direction: [entry, ...]}, tshark's stderr)`` for a one-connection capture."""
    proc = subprocess.run(["tshark", "-r", pcap, *PREFS, "-T", "json", "-J", "tcp amqp"], capture_output=True, text=True)
    result: dict = {"to_server": [], "to_client": []}
    for tcp, found in packets(proc.stdout):
        direction = "to_server" if int(_get(tcp, "tcp.dstport")) == AMQP_PORT else "to_client"
        for amqp in found:
            entry = _frame(amqp)
            if entry is not None:
                result[direction].append(entry)
    return result, proc.stderr


def complaints(pcap: str) -> list[str]:
    """Lines of tshark's AMQP dissection that say something is wrong (malformed, invalid, unknown).

    The session-header lines of tx commands are left out: tshark 4.0's tx dissector reads them one
    octet late (see test_tshark.py) and calls a correct header "(Invalid)"."""
    proc = subprocess.run(["tshark", "-r", pcap, *PREFS, "-O", "amqp", "-V"], capture_output=True, text=True)
    words = ("malformed", "invalid", "unknown (", "<unknown", "unknown type", "exception occurred")
    return [line.strip() for line in proc.stdout.splitlines()
            if any(w in line.lower() for w in words) and not line.strip().startswith("Session header")]  # fmt: skip
