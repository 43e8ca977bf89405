"""tshark as an independent oracle for 0-9-1 captures (see shared/notes/tshark-as-oracle.md).

- ``streams(pcap)``: per TCP stream, the two direction byte streams, taken from
  tshark's own ``follow,tcp,raw`` (the project's reassembler is tested apart);
- ``frames(pcap)``: per TCP stream and direction, the frames tshark dissects, as
  ``(channel, frame type, class id, method id, delivery tag)`` tuples, from
  ``-T json`` read with a hook that keeps the repeated ``amqp`` keys.
"""

from __future__ import annotations

import re
import subprocess

from tests.oracles.tshark_json import PREFS, available, packets  # noqa: F401  (available: the tests' skip)
from tests.oracles.tshark_json import get as _get

AMQP_PORTS = (5672,)
AMQPS_PORTS = (5671,)
TYPE_CODE = {"method": 1, "header": 2, "body": 3, "heartbeat": 8}


def _run(args: list[str]) -> str:
    return subprocess.run(["tshark", *args], check=True, capture_output=True, text=True).stdout


def stream_ids(pcap: str) -> list[int]:
    out = _run(["-r", pcap, *PREFS, "-T", "fields", "-e", "tcp.stream", "-Y", "tcp.len > 0"])
    return sorted({int(x) for x in out.split()})


def follow(pcap: str, streams: list[int]) -> dict[int, dict]:
    """``{stream: {"to_server": bytes, "to_client": bytes, "client_port": int}}`` for each of ``streams``: tshark's
    ``follow,tcp,raw`` of every stream in one run of tshark (one ``-z`` each; tshark prints a section per stream, in
    an order of its own, each naming its stream in its ``Filter:`` line)."""
    if not streams:
        return {}
    out = _run(["-r", pcap, *PREFS, "-q", *[a for n in streams for a in ("-z", f"follow,tcp,raw,{n}")]])
    found = {}
    for section in re.split(r"^={67}$\n?", out, flags=re.M):
        m = re.search(r"^Filter: tcp\.stream eq (\d+)$", section, re.M)
        if m:
            found[int(m.group(1))] = _section(section)
    assert sorted(found) == sorted(streams), (sorted(found), sorted(streams))
    return found


def _section(text: str) -> dict:
    ports = {}
    for node, _addr, port in re.findall(r"^Node (\d): (.+):(\d+)$", text, re.M):
        ports[int(node)] = int(port)
    data = {0: bytearray(), 1: bytearray()}
    for line in text.splitlines():
        if not line.strip() or line.startswith(("Follow:", "Filter:", "Node ")):
            continue
        node = 1 if line.startswith("\t") else 0
        data[node] += bytes.fromhex(line.strip())
    server = 0 if ports.get(0) in AMQP_PORTS else 1
    return {
        "to_server": bytes(data[1 - server]),
        "to_client": bytes(data[server]),
        "client_port": ports.get(1 - server),
    }


def ours(frames: list, direction: str) -> list:
    """Our frame rows of ``direction`` as ``frames`` gives tshark's: (channel, type, class, method, delivery_tag)."""
    return [
        (r["channel"], TYPE_CODE[r["frame_type"]], r["class_id"] if r["frame_type"] == "method" else None, r["method_id"], r["delivery_tag"])
        for r in frames
        if r["direction"] == direction and r["frame_type"] != "protocol_header"
    ]


def _int(v):
    return int(v) if v is not None else None


def frames(pcap: str, keylog: str | None = None) -> dict:
    """``{(stream, direction): [(channel, type, class, method, delivery_tag), ...]}``; with ``keylog``, TLS on
    5671 too, decrypted by tshark with that NSS key log."""
    tls = ["-o", f"tls.keylog_file:{keylog}"] if keylog else []
    out = _run(["-r", pcap, *PREFS, *tls, "-T", "json", "-J", "tcp amqp"])
    result: dict = {}
    for tcp, found in packets(out):
        stream = int(_get(tcp, "tcp.stream"))
        direction = "to_server" if int(_get(tcp, "tcp.dstport")) in AMQP_PORTS + AMQPS_PORTS else "to_client"
        for amqp in found:
            ftype = _get(amqp, "amqp.type")
            if ftype is None:  # tshark 4.0 leaves the 0-9-1 protocol header undissected
                continue
            args = _get(amqp, "amqp.method.arguments") or []
            tag = _get(args, "amqp.method.arguments.delivery_tag") if isinstance(args, list) else None
            result.setdefault((stream, direction), []).append(
                (
                    _int(_get(amqp, "amqp.channel")),
                    int(ftype),
                    _int(_get(amqp, "amqp.method.class")),
                    _int(_get(amqp, "amqp.method.method")),
                    _int(tag),
                )
            )
    return result
