"""Which AMQP dialect a stream speaks, from its 8-octet protocol header.

Every AMQP version opens with ``AMQP`` and four octets (DESIGN.md, "Dialects").
One header is ambiguous: ``AMQP 1 1 0 9`` is sent both by the published AMQP
0-9 (7-octet frame header) and by AMQP/Fast 0.9a5 (seed 003, 4-octet frame
header); ``detect_protocol_header`` names the published 0-9 and
``candidates`` lists both, so a codec can settle it by which framing parses.
"""

from __future__ import annotations

import functools

from typing import Final

from amqplens.contracts.values import Dialect

AMQP = b"AMQP"
HEADER_SIZE = 8

# dialect names as the frames/connections tables spell them (the contracts' list: mypy holds these to it)
D0_8: Final[Dialect] = "0-8"
D0_9: Final[Dialect] = "0-9"
D0_9_1: Final[Dialect] = "0-9-1"
D0_9_DRAFT: Final[Dialect] = "0-9-draft"
AMQP_FAST: Final[Dialect] = "amqp-fast-0.9a5"
D0_10: Final[Dialect] = "0-10"
D1_0: Final[Dialect] = "1.0"
# the protocol headers of a 1.0 connection's SASL and TLS layers (not dialects of the tables)
D1_0_SASL = "1.0-sasl"
D1_0_TLS = "1.0-tls"

PROTOCOL_HEADERS: dict[bytes, tuple[str, ...]] = {
    b"AMQP\x01\x01\x08\x00": (D0_8,),
    b"AMQP\x01\x01\x00\x09": (D0_9, AMQP_FAST),  # same header, two framings
    b"AMQP\x01\x01\x09\x01": (D0_9_DRAFT,),
    b"AMQP\x00\x00\x09\x01": (D0_9_1,),
    b"AMQP\x01\x01\x00\x0a": (D0_10,),
    b"AMQP\x00\x01\x00\x00": (D1_0,),
    b"AMQP\x03\x01\x00\x00": (D1_0_SASL,),
    b"AMQP\x02\x01\x00\x00": (D1_0_TLS,),
}

# one header per dialect, for encoders and tests
HEADER_OF: dict[str, bytes] = {name: h for h, names in PROTOCOL_HEADERS.items() for name in names}

FAMILY_0_9_1 = frozenset({D0_8, D0_9, D0_9_1})  # the dialects amqplens.decode.v0_9_1 decodes


def candidates(first_bytes: bytes) -> tuple[str, ...]:
    """Every dialect whose protocol header ``first_bytes`` starts with (best first)."""
    return PROTOCOL_HEADERS.get(bytes(first_bytes[:HEADER_SIZE]), ())


def detect_protocol_header(first_bytes: bytes) -> str | None:
    """The dialect named by the protocol header at the start of ``first_bytes``, or None."""
    found = candidates(first_bytes)
    return found[0] if found else None


def could_be_header(first_bytes: bytes) -> bool:
    """True while ``first_bytes`` (fewer than 8) may still grow into a protocol header."""
    head = bytes(first_bytes[:HEADER_SIZE])
    if len(head) < len(AMQP):
        return AMQP.startswith(head)
    return head.startswith(AMQP)


@functools.lru_cache(maxsize=512)
def _describe_json(header: bytes, to_json) -> str:
    return to_json(describe(header))


def describe_json(header, to_json) -> str:
    """``to_json(describe(header))`` (a protocol header row's ``arguments_json``), remembered per header and encoder:
    every connection starts with one or two of a handful of headers (the dict and its JSON cost 2-3 us a header)."""
    return _describe_json(bytes(header[:HEADER_SIZE]), to_json)


def describe(header: bytes) -> dict:
    """A protocol header as a small dict: its hex, the dialect and the four version octets
    (their names differ between versions: class/instance/major/minor in 0-8 and 0-9,
    id/major/minor/revision in 0-9-1 and 1.0)."""
    h = bytes(header[:HEADER_SIZE])
    return {"header": h.hex(), "dialect": detect_protocol_header(h), "version_octets": list(h[4:])}
