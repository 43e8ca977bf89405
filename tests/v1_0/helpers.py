"""Feeding the 1.0 decoder like the TCP reassembler does, and checking its byte accounting."""

from __future__ import annotations

import functools

from amqplens.decode.v1_0 import ERROR_KEYS, FRAME_KEYS_1_0, Amqp10StreamDecoder
from tests.accounting import DIRECTIONS, feed, run_decoder, strip_ts  # noqa: F401  (re-exported for the tests)
from tests.accounting import check_accounting as _check

check_accounting = functools.partial(_check, frame_keys=FRAME_KEYS_1_0, error_keys=ERROR_KEYS)


def run(to_server: bytes = b"", to_client: bytes = b"", cuts=(), gaps=(), **options):
    """Decode with the given cuts/gaps applied to both directions; checks accounting."""
    frames, errors, facts = run_decoder(Amqp10StreamDecoder("conn-1", **options), check_accounting, to_server, to_client, cuts, gaps)
    assert facts["internal_errors"] == 0
    return frames, errors, facts


def performatives(frames: list, direction: str) -> list:
    return [r["performative"] or r["frame_type"] for r in frames if r["direction"] == direction]
