"""Write the 0-10 fixture pcaps (tests/data/v0_10/) from the conversations: ``python -m tests.v0_10.fixtures``.

Each pcap is one TCP connection on port 5672 (``tests.v1_0.pcap_writer``:
handshake, each turn cut into 1400-octet segments, FIN both ways), so tshark
dissects it as AMQP by port. The bytes are deterministic: a test regenerates
them and compares with the committed files.
"""

from __future__ import annotations

import pathlib
import sys

from tests.v0_10.conversation import CONVERSATIONS
from tests.v1_0.pcap_writer import connection_pcap

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "v0_10"


def pcap_bytes(name: str) -> bytes:
    return connection_pcap(CONVERSATIONS[name]())


def main(out: pathlib.Path = DATA) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for name in CONVERSATIONS:
        (out / f"{name}.pcap").write_bytes(pcap_bytes(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else DATA))
