"""Any bytes, cut anywhere, with gaps anywhere: nothing raises out of the stream decoder, no
internal error, and every byte is in exactly one frame row, one error row or one gap."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import encoder as E
from .conversation import conversation
from .helpers import run

C2S, S2C = conversation()
PREFIXES = st.sampled_from([b"", E.AMQP_HEADER, E.SASL_HEADER, E.TLS_HEADER, b"AMQP", E.AMQP_HEADER + E.performative("open", container_id="x")])
CUTS = st.lists(st.integers(1, 2000), max_size=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PREFIXES, st.binary(max_size=600), st.binary(max_size=300), CUTS)
def test_random_bytes(prefix, to_server, to_client, cuts):
    run(prefix + to_server, to_client, cuts=cuts)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(C2S) - 1), st.integers(1, 300), st.binary(min_size=1, max_size=40), CUTS, st.booleans())
def test_a_real_stream_with_garbage_or_a_gap(at, length, garbage, cuts, as_gap):
    """Garbage spliced into a real stream, or a hole in it: the decoder resynchronises, accounting holds."""
    if as_gap:
        run(C2S, S2C, cuts=cuts, gaps=[(at, min(at + length, len(C2S)))])
    else:
        frames, errors, _ = run(C2S[:at] + garbage + C2S[at:], S2C, cuts=cuts)
        assert frames[-1]["performative"] == "close" or errors  # what follows the garbage is found again


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 255), st.integers(0, 3), st.integers(0, 0xFFFF)), max_size=8),
       st.binary(max_size=64))
def test_random_frame_headers(headers, filler):
    """Headers with any size, doff, type and channel, each followed by a little filler."""

    data = E.AMQP_HEADER + b"".join(struct.pack(">IBBH", *h) + filler for h in headers)
    run(data, cuts=range(1, len(data), 13))
