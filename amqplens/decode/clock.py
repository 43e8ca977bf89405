"""Times from the wire and from logs, made safe: nothing here raises, whatever value it is given.

A record header or a log line can claim any time: one flipped bit makes a packet say the year 49195,
a pcapng block 2^64 - 1 nanoseconds, a log line the year 1. Python's ``datetime`` stops at 9999 (and
``fromtimestamp`` rounds a float past it), Spark shows the years past 9999 only as garbage, and a
metric bucketed over a span of a thousand years is no metric. So amqplens keeps the times it stores
inside ``MIN_TS_US`` .. ``MAX_TS_US`` (1990 to 2100: no AMQP traffic is older, and an hour past 2100
is a corrupt clock, not a capture). A time outside is reported as ``ts_out_of_range`` by whoever read
it, and the row keeps a usable time instead (see ``amqplens.decode.capture.splits.guard_timestamps``).

A flipped bit can also leave a time inside the range and still years away from the packets around it
(a capture of seconds whose one record says four years later): its capture would span years. A
packet time is "out of line" when it lies more than ``OUT_OF_LINE_US`` (a day) from every one of its
``NEIGHBOURS`` nearest in-range record times on either side (at least ``MIN_NEIGHBOURS`` of them): a
lone record, since a real jump of the clock (a connection idle for a month, a capture paused) carries
the packets after it along and each of them has a neighbour close by. Such a time is a ``ts_out_of_line``
row and the packet takes a good time, as one out of range does.
"""

from __future__ import annotations

import datetime as dt

MIN_TS_US = 631_152_000_000_000  # 1990-01-01T00:00:00Z
MAX_TS_US = 4_102_444_800_000_000  # 2100-01-01T00:00:00Z (exclusive)
TS_OUT_OF_RANGE = "ts_out_of_range"  # the reason of the decode_errors row of a time outside the range
TS_OUT_OF_LINE = "ts_out_of_line"  # the reason of the decode_errors row of a time far from every neighbour's
OUT_OF_LINE_US = 86_400_000_000  # one day: farther from each neighbour than this, a lone time is a damaged one
NEIGHBOURS = 8  # record times looked at on each side of a record
MIN_NEIGHBOURS = 4  # fewer in-range neighbours than this (a tiny capture): no time is judged out of line
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
EPOCH_DAY = EPOCH.date()


def in_range(us) -> bool:
    """``us`` is an int of microseconds since the epoch between 1990 and 2100."""
    return isinstance(us, int) and not isinstance(us, bool) and MIN_TS_US <= us < MAX_TS_US


class TimeOutOfRange(ValueError):
    """A clock time (a log line's, a record's) outside 1990..2100; its row's reason is ``ts_out_of_range``."""

    reason = TS_OUT_OF_RANGE


def checked(us: int, what: str = "time") -> int:
    """``us`` when it is a time in range, else ``TimeOutOfRange`` (for parsers that turn a ValueError into a row)."""
    if not in_range(us):
        raise TimeOutOfRange(out_of_range_detail(us, what))
    return us


def utc_datetime(us) -> dt.datetime | None:
    """The UTC time of ``us`` microseconds (any int a datetime can hold: a log's line numbers stand in for times
    1970-01-01 + n us), else None; exact, never a float round trip, never an exception."""
    try:
        return EPOCH + dt.timedelta(microseconds=us)
    except (OverflowError, TypeError, ValueError):
        return None


def utc_date(us, default: dt.date = EPOCH_DAY) -> dt.date:
    """The UTC day of ``us`` microseconds, ``default`` when it is None or no day a datetime can hold."""
    t = utc_datetime(us)
    return default if t is None else t.date()


def describe(us) -> str:
    """``us`` for an error's detail: the raw number, and the time it names when a datetime can show it."""
    t = utc_datetime(us)
    return f"{us!r} us ({'beyond what a calendar shows' if t is None else t.isoformat()})"


def out_of_range_detail(us, what: str = "time") -> str:
    return f"{what} {describe(us)} is outside 1990-01-01 .. 2100-01-01"


def out_of_line(us: int, before, after, *, complete: bool) -> bool | None:
    """Whether the in-range time ``us`` is out of line with its neighbours: ``before`` the in-range times of up to
    ``NEIGHBOURS`` records before it (nearest last), ``after`` those after it (nearest first). None: not yet known
    (fewer than ``NEIGHBOURS`` after it and ``complete`` false: more records may follow)."""
    if before and abs(us - before[-1]) <= OUT_OF_LINE_US:  # the common case: close to the record before
        return False
    if any(abs(us - t) <= OUT_OF_LINE_US for t in before) or any(abs(us - t) <= OUT_OF_LINE_US for t in after):
        return False
    if len(after) < NEIGHBOURS and not complete:
        return None
    return len(before) + len(after) >= MIN_NEIGHBOURS


def out_of_line_detail(us) -> str:
    return (f"record time {describe(us)} is more than a day from each of the record times around it "
            "(a damaged time, not a clock that moved on)")
