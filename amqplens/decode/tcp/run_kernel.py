"""The reassembler's in-order runs compiled (numba): how far a run of packets needs nothing of the per-packet path.

``TcpReassembler.feed_columns`` (``reassembly.py``) is the reference: it takes a packet at a time. Once a
connection is selected, past its handshake and both its byte streams flowing in order, the packets that follow
change nothing but counters, the next expected sequence numbers and the delivered bytes; ``run_end`` finds where
that stops being true, and the reassembler takes the run ``[i, j)`` with a few array operations
(``TcpReassembler._take_run``) instead of a Python call per packet.
"""

from __future__ import annotations

import numpy as np
from numba import njit

M32 = 0xFFFFFFFF


@njit(cache=True, nogil=True)
def run_end(i, n, cur_fk, fk, sport, scode, a_port, b_port, a_code, b_code, flags, control, plen, seq, trunc,
            nseq_a, nseq_b, data_a, data_b, side):
    """The first packet from ``i`` (before ``n``) the run cannot take: another flow, an endpoint that is neither
    side's (``sport``/``scode``: the source port and the source address's code), a control flag, a truncated
    payload, or a payload that is not the next in order of its side (``nseq_*``), or of a side that may not take
    data in a run (``data_*`` False). ``side[k]``: 0 (a) or 1 (b) for the packets taken."""
    na, nb = nseq_a, nseq_b
    k = i
    while k < n:
        if fk[k] != cur_fk or flags[k] & control or trunc[k]:
            break
        if sport[k] == a_port and scode[k] == a_code:
            s = 0
        elif sport[k] == b_port and scode[k] == b_code:
            s = 1
        else:
            break
        m = plen[k]
        if m:
            if s == 0:
                if not data_a or seq[k] != na:
                    break
                na = (na + m) & M32
            else:
                if not data_b or seq[k] != nb:
                    break
                nb = (nb + m) & M32
        side[k] = s
        k += 1
    return k


@njit(cache=True, nogil=True)
def history_kept(old, new, cap, keep):
    """``HalfStream``'s history after the ``new`` chunk lengths are appended one by one to the ``old`` ones, each
    append followed by ``trim_history`` when the total passes ``cap`` (the oldest chunks cut while the total is above
    ``keep``): ``(old chunks cut, first new chunk kept, total)``."""
    lengths = np.concatenate((old, new))
    total = 0
    for x in old:
        total += x
    cut = 0
    for k in range(len(old), len(lengths)):
        total += lengths[k]
        if total > cap:
            while total > keep and cut <= k:
                total -= lengths[cut]
                cut += 1
    n_old = len(old)
    return min(cut, n_old), max(cut - n_old, 0), total
