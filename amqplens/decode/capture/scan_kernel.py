"""The numba-compiled header scan of a whole capture file (imported only through ``headscan.load_kernel``).

``walk`` goes over every record of a pcap or pcapng file from its first byte, as one
sequential read would (``pcap.iter_records`` / ``pcapng.iter_records`` over one split
covering the file), and over each packet's link, IP and TCP headers, as
``packets.PacketDecoder.add`` does. It gives up (``stop`` below the file size, ``why``
a BAIL_* code) at the first thing the Python reader would turn into an error row or
treat specially: a record header that does not frame, an untimely clock, a time
outside 1990..2100, an IP fragment, a link type the reader does not decode, a pcapng
SPB, PB or second section, a block shorter than its type. The caller then reads the
file with the Python reader, which keeps its resync and error rows.

Each TCP packet belongs to a directional flow (``dflow``: source and destination
address and port), numbered in order of first appearance by an open-addressing table
that compares the address bytes, so two flows never share a number. The numbering is
the same in every process that scans the same file, which is what lets the driver
plan by number and each task select by number.

Plan mode (``select`` empty) counts; select mode also fills the per-packet columns of
the packets whose dflow is selected, in file order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Record classes, as PacketDecoder.add counts them.
C_TCP, C_NON_TCP, C_MALFORMED = 0, 1, 2
BAIL_NONE, BAIL_RECORD, BAIL_TIME, BAIL_FRAGMENT, BAIL_LINKTYPE, BAIL_BLOCK, BAIL_INTERFACES = 0, 1, 2, 3, 4, 5, 6
MIN_TS_US = 631_152_000_000_000
MAX_TS_US = 4_102_444_800_000_000
MAX_RECORD_LEN = 16 << 20
MAX_BLOCK_LEN = 32 << 20
MAX_IFACES = 256
I64_MAX = 9_223_372_036_854_775_807


@njit(cache=True, nogil=True, inline="always")
def _u16be(b, o):
    return (np.int64(b[o]) << 8) | np.int64(b[o + 1])


@njit(cache=True, nogil=True, inline="always")
def _u32(b, o, little):
    if little:
        return (np.int64(b[o + 3]) << 24) | (np.int64(b[o + 2]) << 16) | (np.int64(b[o + 1]) << 8) | np.int64(b[o])
    return (np.int64(b[o]) << 24) | (np.int64(b[o + 1]) << 16) | (np.int64(b[o + 2]) << 8) | np.int64(b[o + 3])


@njit(cache=True, nogil=True, inline="always")
def _u16(b, o, little):
    if little:
        return (np.int64(b[o + 1]) << 8) | np.int64(b[o])
    return _u16be(b, o)


@njit(cache=True, nogil=True)
def _known_link(lt):
    return lt == 0 or lt == 1 or lt == 12 or lt == 14 or lt == 101 or lt == 108 or lt == 113 or lt == 228 or lt == 229 or lt == 276


@njit(cache=True, nogil=True)
def _after_ethertype(b, off, end, ethertype):
    """(ip version, l3 offset); version -1 for a frame too short (linklayer._after_ethertype)."""
    tags = 0
    while ethertype == 0x8100 or ethertype == 0x88A8 or ethertype == 0x9100:
        tags += 1
        if tags > 8 or off + 4 > end:
            return -1, off
        ethertype = _u16be(b, off + 2)
        off += 4
    if ethertype == 0x0800:
        return 4, off
    if ethertype == 0x86DD:
        return 6, off
    return 0, off


@njit(cache=True, nogil=True)
def _family(f):
    if f == 2:
        return 4
    if f == 10 or f == 24 or f == 28 or f == 30:
        return 6
    return 0


@njit(cache=True, nogil=True)
def _link(b, lt, off, end):
    """linklayer.LINK_DECODERS[lt](b, off, end): (version, l3); version -1 where the decoder gives None."""
    if lt == 1:
        if off + 14 > end:
            return -1, off
        et = _u16be(b, off + 12)
        if et == 0x0800:
            return 4, off + 14
        return _after_ethertype(b, off + 14, end, et)
    if lt == 0:
        if off + 4 > end:
            return -1, off
        fam = _u32(b, off, True)
        if fam > 0xFFFF:
            fam = _u32(b, off, False)
        return _family(fam), off + 4
    if lt == 12 or lt == 14 or lt == 101:
        if off >= end:
            return -1, off
        v = np.int64(b[off]) >> 4
        return (v if v == 4 or v == 6 else 0), off
    if lt == 108:
        if off + 4 > end:
            return -1, off
        return _family(_u32(b, off, False)), off + 4
    if lt == 113:
        if off + 16 > end:
            return -1, off
        return _after_ethertype(b, off + 16, end, _u16be(b, off + 14))
    if lt == 276:
        if off + 20 > end:
            return -1, off
        return _after_ethertype(b, off + 20, end, _u16be(b, off))
    if lt == 228:
        return (4 if off < end else -1), off
    if lt == 229:
        return (6 if off < end else -1), off
    return -1, off


@njit(cache=True, nogil=True)
def _ext_headers(b, nh, off, end):
    """ip.walk_extension_headers: (proto, l4 offset, state) with state 0 ok, 1 malformed, 2 fragment."""
    for _ in range(16):
        if nh == 0 or nh == 43 or nh == 60 or nh == 135 or nh == 139 or nh == 140:
            if off + 2 > end:
                return -1, off, 1
            nh, off = np.int64(b[off]), off + (np.int64(b[off + 1]) + 1) * 8
        elif nh == 51:
            if off + 2 > end:
                return -1, off, 1
            nh, off = np.int64(b[off]), off + (np.int64(b[off + 1]) + 2) * 4
        elif nh == 44:
            return -1, off, 2
        else:
            if off <= end:
                return nh, off, 0
            return -1, off, 1
    return -1, off, 1


@njit(cache=True, nogil=True)
def _packet(b, lt, off, end, out):
    """PacketDecoder.add on one frame: its class (C_*), or -1 for an IP fragment (the scan gives up).
    A TCP packet's fields go to ``out``: version, src offset, dst offset, address length, sport, dport,
    tcp header offset, payload start, payload end, truncated."""
    version, l3 = _link(b, lt, off, end)
    if version < 0:
        return C_MALFORMED
    if version == 4:
        if l3 + 20 > end:
            return C_MALFORMED
        vi = np.int64(b[l3])
        ihl = (vi & 0x0F) * 4
        if vi >> 4 != 4 or ihl < 20 or l3 + ihl > end:
            return C_MALFORMED
        total = _u16be(b, l3 + 2)
        if total == 0:
            ip_end = end
        elif total < ihl:
            return C_MALFORMED
        else:
            ip_end = l3 + total
        if _u16be(b, l3 + 6) & 0x3FFF:
            return -1
        proto = np.int64(b[l3 + 9])
        src, dst, alen, l4 = l3 + 12, l3 + 16, 4, l3 + ihl
    elif version == 6:
        if l3 + 40 > end:
            return C_MALFORMED
        if np.int64(b[l3]) >> 4 != 6:
            return C_MALFORMED
        plen = _u16be(b, l3 + 4)
        ip_end = l3 + 40 + plen if plen else end
        proto, l4, state = _ext_headers(b, np.int64(b[l3 + 6]), l3 + 40, min(end, ip_end))
        if state == 1:
            return C_MALFORMED
        if state == 2:
            return -1
        src, dst, alen = l3 + 8, l3 + 24, 16
    else:
        return C_NON_TCP
    if proto != 6:
        return C_NON_TCP
    captured_end = min(ip_end, end)
    truncated = ip_end > end
    if l4 + 20 > captured_end:
        return C_MALFORMED
    hlen = (_u16be(b, l4 + 12) >> 12) * 4
    if hlen < 20:
        return C_MALFORMED
    start = l4 + hlen
    if start > captured_end and not truncated:
        return C_MALFORMED
    out[0], out[1], out[2], out[3] = version, src, dst, alen
    out[4], out[5], out[6] = _u16be(b, l4), _u16be(b, l4 + 2), l4
    if start < captured_end:
        out[7], out[8] = start, captured_end
    else:
        out[7], out[8] = 0, 0
    out[9] = 1 if truncated else 0
    return C_TCP


@njit(cache=True, nogil=True)
def _hash(b, src, dst, alen, sport, dport):
    h = np.uint64(0xCBF29CE484222325)
    for i in range(alen):
        h = (h ^ np.uint64(b[src + i])) * np.uint64(0x100000001B3)
    for i in range(alen):
        h = (h ^ np.uint64(b[dst + i])) * np.uint64(0x100000001B3)
    h = (h ^ np.uint64(sport << 16 | dport) ^ np.uint64(alen << 40)) * np.uint64(0x100000001B3)
    return h ^ (h >> np.uint64(29))


@njit(cache=True, nogil=True)
def _same(b, rep, src, dst, alen, sport, dport):
    if rep[2] != alen or rep[3] != sport or rep[4] != dport:
        return False
    for i in range(alen):
        if b[rep[0] + i] != b[src + i] or b[rep[1] + i] != b[dst + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def _grow(slots, hashes, n):
    cap = slots.shape[0] * 2
    new_slots = np.full(cap, -1, np.int64)
    mask = np.uint64(cap - 1)
    for i in range(n):
        j = hashes[i] & mask
        while new_slots[j] >= 0:
            j = (j + np.uint64(1)) & mask
        new_slots[j] = i
    return new_slots


@njit(cache=True, nogil=True)
def walk(b, size, limit, fmt, little, nanos, pcap_linktype, max_caplen, ts_lo, ts_hi, select, stats, ifaces,
         slots, hashes, reps, o_off, o_ts, o_flow, o_seq, o_ack, o_flags, o_win, o_wire, o_ps, o_pe, o_trunc):
    """Scan the file ``b`` (uint8, ``size`` bytes; ``fmt`` 0 pcap, 1 pcapng) from ``stats[0]`` to the first
    record at or after ``limit``; called window by window, it carries its state in its arguments (``new_state``).

    pcap: ``little``/``nanos`` from the magic, the file's link type, ``max_caplen`` and the
    clock window ``ts_lo``..``ts_hi`` (seconds) of ``PcapFile``. pcapng: ``little`` of the
    first section. ``select``: a 0/1 per dflow (empty: plan mode); the ``o_*`` columns, as long
    as the selected dflows have packets (the plan counted them), get the selected packets in file
    order: record offset, ts, dflow, seq, ack, flags, window, wire_len, the payload's start (from the
    record's offset) and length, truncated.

    ``stats`` (int64[12]): position, why (BAIL_*), records, tcp, non_tcp, malformed, first ts,
    last ts, dflows, link-type bit set (bit i: ``LINK_TYPE_BITS[i]``), o_* filled, interfaces.
    ``ifaces`` the pcapng interfaces (link type, snaplen, mul, shift, div, offset); ``slots``,
    ``hashes``, ``reps`` the dflow table (reps[i]: src off, dst off, alen, sport, dport, version,
    packets, bytes), returned as they may have grown.
    """
    n_out = o_off.shape[0]
    cap = hashes.shape[0]
    pos, why, records, n_tcp, n_non, n_bad = stats[0], stats[1], stats[2], stats[3], stats[4], stats[5]
    first_ts, last_ts, n_flows, lt_bits, filled, n_if = stats[6], stats[7], stats[8], stats[9], stats[10], stats[11]
    selecting = select.shape[0] > 0
    tcp = np.zeros(10, np.int64)
    ts = lt = rec = data = caplen = origlen = nxt = 0
    frac_limit = 1_000_000_000 if nanos else 1_000_000
    div = 1000 if nanos else 1
    while pos < size and pos < limit and why == BAIL_NONE:
        # ---- the container: one record (pcap) or block (pcapng)
        if fmt == 0:
            if pos + 16 > size:
                why = BAIL_RECORD
                break
            sec = _u32(b, pos, little)
            frac = _u32(b, pos + 4, little)
            caplen = _u32(b, pos + 8, little)
            origlen = _u32(b, pos + 12, little)
            data = pos + 16
            if frac >= frac_limit or caplen > max_caplen or not (0 < origlen <= MAX_RECORD_LEN) or caplen > origlen:
                why = BAIL_RECORD
                break
            if data + caplen > size:
                why = BAIL_RECORD
                break
            if not (ts_lo <= sec <= ts_hi):
                why = BAIL_TIME
                break
            ts = sec * 1_000_000 + frac // div
            lt = pcap_linktype
            rec = pos
            nxt = data + caplen
        else:
            if pos + 12 > size:
                why = BAIL_BLOCK
                break
            btype = _u32(b, pos, little)
            if btype == 0x0A0D0D0A:
                if pos != 0:
                    why = BAIL_BLOCK  # a second section
                    break
            blen = _u32(b, pos + 4, little)
            if blen < 12 or blen % 4 or pos + blen > size or _u32(b, pos + blen - 4, little) != blen:
                why = BAIL_BLOCK
                break
            nxt = pos + blen
            if btype == 6:
                if blen < 32:
                    why = BAIL_BLOCK
                    break
                iface = _u32(b, pos + 8, little)
                units_hi = _u32(b, pos + 12, little)
                units_lo = _u32(b, pos + 16, little)
                caplen = _u32(b, pos + 20, little)
                origlen = _u32(b, pos + 24, little)
                if caplen > blen - 32 or iface >= n_if:
                    why = BAIL_BLOCK
                    break
                if units_hi >= (1 << 31):
                    why = BAIL_TIME
                    break
                units = (units_hi << 32) | units_lo
                mul, shift, idiv, ioff = ifaces[iface, 2], ifaces[iface, 3], ifaces[iface, 4], ifaces[iface, 5]
                # (units * mul) >> shift without the 64-bit overflow: (q * 2^shift + r) * mul >> shift is
                # q * mul + (r * mul >> shift), r * mul < 2^(shift + 20)
                high = units >> shift
                if high > I64_MAX // mul:
                    why = BAIL_TIME
                    break
                ts = (high * mul + (((units & ((1 << shift) - 1)) * mul) >> shift)) // idiv + ioff
                lt = ifaces[iface, 0]
                rec = pos
                data = pos + 28
            elif btype == 1:
                if blen < 20:
                    why = BAIL_BLOCK
                    break
                if n_if >= MAX_IFACES:
                    why = BAIL_INTERFACES
                    break
                lt_i = _u16(b, pos + 8, little)
                if not _known_link(lt_i):
                    why = BAIL_LINKTYPE
                    break
                tsresol, tsoffset = 6, 0
                opt, oend = pos + 16, pos + blen - 4
                while opt + 4 <= oend:
                    code, length = _u16(b, opt, little), _u16(b, opt + 2, little)
                    if code == 0:
                        break
                    if code == 9 and length >= 1:
                        tsresol = np.int64(b[opt + 4])
                    elif code == 14 and length >= 8:
                        lo = _u32(b, opt + 4, little)
                        hi = _u32(b, opt + 8, little)
                        if not little:
                            lo, hi = hi, lo
                        tsoffset = (hi << 32) | lo
                        if hi >= (1 << 31) or tsoffset > 10_000_000_000:
                            tsoffset = -1  # negative or absurd: the Python reader's arithmetic
                    opt += 4 + ((length + 3) & ~3)
                if tsoffset < 0:
                    why = BAIL_TIME
                    break
                exponent = tsresol & 0x7F
                mul, shift, idiv = 1, 0, 1
                if tsresol & 0x80:
                    if exponent > 42:
                        why = BAIL_TIME
                        break
                    mul, shift = 1_000_000, exponent
                elif exponent <= 6:
                    mul = 10 ** (6 - exponent)
                elif exponent <= 18:
                    idiv = 10 ** (exponent - 6)
                else:
                    why = BAIL_TIME
                    break
                ifaces[n_if, 0], ifaces[n_if, 1] = lt_i, _u32(b, pos + 12, little)
                ifaces[n_if, 2], ifaces[n_if, 3], ifaces[n_if, 4], ifaces[n_if, 5] = mul, shift, idiv, tsoffset * 1_000_000
                n_if += 1
                pos = nxt
                continue
            elif btype == 0x0A0D0D0A:
                if blen < 28:
                    why = BAIL_BLOCK
                    break
                pos = nxt
                continue
            elif btype == 2 or btype == 3:
                why = BAIL_BLOCK  # PB, SPB: the Python reader
                break
            else:
                minimum = 12
                if btype == 4 or btype == 9:
                    minimum = 12
                elif btype == 5:
                    minimum = 24
                elif btype == 10:
                    minimum = 20
                elif btype == 0x00000BAD or btype == 0x40000BAD:
                    minimum = 16
                if blen < minimum:
                    why = BAIL_BLOCK
                    break
                pos = nxt
                continue
        if not (MIN_TS_US <= ts < MAX_TS_US):
            why = BAIL_TIME
            break
        # ---- the packet
        cls = _packet(b, lt, data, data + caplen, tcp)
        if cls < 0:
            why = BAIL_FRAGMENT
            break
        records += 1
        if ts < first_ts:
            first_ts = ts
        if ts > last_ts:
            last_ts = ts
        lt_bits |= _lt_bit(lt)
        if cls == C_NON_TCP:
            n_non += 1
        elif cls == C_MALFORMED:
            n_bad += 1
        else:
            n_tcp += 1
            src, dst, alen, sport, dport = tcp[1], tcp[2], tcp[3], tcp[4], tcp[5]
            h = _hash(b, src, dst, alen, sport, dport)
            mask = np.uint64(slots.shape[0] - 1)
            j = h & mask
            flow = -1
            while slots[j] >= 0:
                k = slots[j]
                if hashes[k] == h and _same(b, reps[k], src, dst, alen, sport, dport):
                    flow = k
                    break
                j = (j + np.uint64(1)) & mask
            if flow < 0:
                flow = n_flows
                if flow == cap:
                    cap *= 2
                    hashes2 = np.zeros(cap, np.uint64)
                    hashes2[:flow] = hashes
                    hashes = hashes2
                    reps2 = np.zeros((cap, 8), np.int64)
                    reps2[:flow] = reps
                    reps = reps2
                hashes[flow] = h
                reps[flow, 0], reps[flow, 1], reps[flow, 2], reps[flow, 3], reps[flow, 4] = src, dst, alen, sport, dport
                reps[flow, 5] = tcp[0]
                slots[j] = flow
                n_flows += 1
                if n_flows * 2 > slots.shape[0]:
                    slots = _grow(slots, hashes, n_flows)
            reps[flow, 6] += 1
            reps[flow, 7] += nxt - rec
            if selecting and flow < select.shape[0] and select[flow] and filled < n_out:
                l4 = tcp[6]
                o_off[filled] = rec
                o_ts[filled] = ts
                o_flow[filled] = flow
                o_seq[filled] = _u32(b, l4 + 4, False)
                o_ack[filled] = _u32(b, l4 + 8, False)
                o_flags[filled] = np.int64(b[l4 + 13])
                o_win[filled] = _u16be(b, l4 + 14)
                o_wire[filled] = origlen
                if tcp[8] > tcp[7]:  # the payload as its start within the record and its length (no payload: 0, 0)
                    o_ps[filled] = tcp[7] - rec
                    o_pe[filled] = tcp[8] - tcp[7]
                else:
                    o_ps[filled] = 0
                    o_pe[filled] = 0
                o_trunc[filled] = tcp[9] != 0
                filled += 1
        pos = nxt
    stats[0], stats[1], stats[2], stats[3], stats[4], stats[5] = pos, why, records, n_tcp, n_non, n_bad
    stats[6], stats[7], stats[8], stats[9], stats[10], stats[11] = first_ts, last_ts, n_flows, lt_bits, filled, n_if
    return slots, hashes, reps


@njit(cache=True, nogil=True)
def _lt_bit(lt):
    if lt == 0:
        return 1
    if lt == 1:
        return 2
    if lt == 12:
        return 4
    if lt == 14:
        return 8
    if lt == 101:
        return 16
    if lt == 108:
        return 32
    if lt == 113:
        return 64
    if lt == 228:
        return 128
    if lt == 229:
        return 256
    return 512


LINK_TYPE_BITS = (0, 1, 12, 14, 101, 108, 113, 228, 229, 276)


@njit(cache=True, nogil=True)
def gather(b, starts, ends, offsets, out):
    """The payload bytes ``b[starts[i]:ends[i]]`` laid end to end in ``out`` at ``offsets[i]``."""
    for i in range(starts.shape[0]):
        s, e, o = starts[i], ends[i], offsets[i]
        for k in range(e - s):
            out[o + k] = b[s + k]


@njit(cache=True, nogil=True)
def flow_order(rank, ranks, ts):
    """The packets grouped by ``rank`` (their flow key's place among the group's: int32), each rank's packets in the
    order they came (the scan's: record offsets rising), as int32 positions; each rank's start in them; and whether
    each rank's times already rise (ties kept in record order), so that only a rank whose do not needs a sort.
    ``np.lexsort`` of (offset, time, flow key) gives the same order with two int64 arrays of every packet besides."""
    n = len(rank)
    starts = np.zeros(ranks + 1, np.int64)
    for i in range(n):
        starts[rank[i] + 1] += 1
    for r in range(ranks):
        starts[r + 1] += starts[r]
    at = starts[:-1].copy()
    order = np.empty(n, np.int32)
    rising = np.ones(ranks, np.bool_)
    last = np.empty(ranks, np.int64)
    for i in range(n):
        r = rank[i]
        if at[r] > starts[r] and ts[i] < last[r]:
            rising[r] = False
        last[r] = ts[i]
        order[at[r]] = i
        at[r] += 1
    return order, starts, rising
