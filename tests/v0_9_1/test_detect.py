"""Protocol headers of every dialect in DESIGN.md."""

from __future__ import annotations

import pytest

from amqplens.decode.detect import candidates, could_be_header, describe, detect_protocol_header


@pytest.mark.parametrize(
    "header, dialect",
    [
        (b"AMQP\x01\x01\x08\x00", "0-8"),
        (b"AMQP\x01\x01\x00\x09", "0-9"),
        (b"AMQP\x01\x01\x09\x01", "0-9-draft"),
        (b"AMQP\x00\x00\x09\x01", "0-9-1"),
        (b"AMQP\x01\x01\x00\x0a", "0-10"),
        (b"AMQP\x00\x01\x00\x00", "1.0"),
        (b"AMQP\x03\x01\x00\x00", "1.0-sasl"),
        (b"AMQP\x02\x01\x00\x00", "1.0-tls"),
    ],
)
def test_headers(header, dialect):
    assert detect_protocol_header(header + b"\x01\x00") == dialect
    assert could_be_header(header[:5])


def test_ambiguous_0_9_header():
    assert candidates(b"AMQP\x01\x01\x00\x09") == ("0-9", "amqp-fast-0.9a5")


@pytest.mark.parametrize("data", [b"", b"AMQ", b"AMQP\x09\x09\x09\x09", b"HTTP/1.1", b"\x16\x03\x01\x02\x00\x01\x00\x01"])
def test_not_a_known_header(data):
    assert detect_protocol_header(data) is None


def test_could_be_header():
    assert could_be_header(b"") and could_be_header(b"AM") and not could_be_header(b"GET ")
    assert describe(b"AMQP\x00\x00\x09\x01") == {"header": "414d515000000901", "dialect": "0-9-1", "version_octets": [0, 0, 9, 1]}
