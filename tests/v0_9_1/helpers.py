"""Feeding a decoder like the TCP reassembler does, and checking its byte accounting."""

from __future__ import annotations

import functools

from amqplens.decode.v0_9_1 import ERROR_KEYS, FRAME_KEYS, Amqp091StreamDecoder
from tests.accounting import DIRECTIONS, feed, run_decoder, strip_ts  # noqa: F401  (re-exported for the tests)
from tests.accounting import check_accounting as _check

check_accounting = functools.partial(_check, frame_keys=FRAME_KEYS, error_keys=ERROR_KEYS, ordered=False)


def run(to_server: bytes = b"", to_client: bytes = b"", cuts=(), gaps=(), **options):
    """Decode with the given cuts/gaps applied to both directions; checks accounting."""
    return run_decoder(Amqp091StreamDecoder("conn-1", **options), check_accounting, to_server, to_client, cuts, gaps)
