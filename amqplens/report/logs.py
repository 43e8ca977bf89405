"""The broker log's part of the report: its events on the connection timeline, and a table of them.

Kept apart from amqplens/report/__init__.py so the report reads the same with or without logs:
with no broker_events rows nothing is drawn and the table says "(none)".
"""

from __future__ import annotations

# event -> (marker, colour, legend words) on a connection's line
MARKS = {
    "channel_error": ("D", "tab:purple", "channel error (log)"),
    "connection_error": ("X", "tab:red", "connection error (log)"),
    "connection_closed_error": ("X", "tab:red", "connection error (log)"),
    "connection_closed_abruptly": ("v", "tab:red", "closed abruptly (log)"),
}
ALARM_COLOURS = {"memory": "gold", "disk": "tan"}


def draw_broker_events(ax, conns, events, alarms) -> list[str]:
    """Markers for each plotted connection's log events (``broker_event_rows``), and shaded alarm intervals
    (``alarm_intervals``); the legend words used."""
    used = []
    y_of = {cid: y for y, cid in enumerate(conns.connection_id)}
    drawn = events[events.connection_id.isin(list(y_of))]
    for event, (marker, colour, words) in MARKS.items():  # one set of markers per kind, every connection's at once
        mine = drawn[drawn.event == event]
        if len(mine):
            ax.plot(mine.ts, mine.connection_id.map(y_of), linestyle="none", marker=marker, color=colour, markersize=7)
            used.append(words)
    lo, hi = conns.start_ts.min(), conns.end_ts.max()
    for resource, start, end in alarms:
        if end is None or end >= lo and start <= hi:
            ax.axvspan(max(start, lo), min(end or hi, hi), color=ALARM_COLOURS.get(resource, "khaki"), alpha=0.3, zorder=0)
            used.append(f"{resource} alarm (log)")
    return sorted(set(used))


def broker_event_rows(store, ids: list[str]):
    """(connection_id, ts, event) of the logged events drawn on the given connections' lines."""
    from pyspark.sql import functions as F

    # the connections' error and abrupt-close events: a handful per connection of ids
    return (store.read("broker_events").where(F.col("connection_id").isin(ids) & F.col("event").isin(*MARKS))
            .orderBy("ts", "connection_id", "event_id").select("connection_id", "ts", "event").toPandas())


def alarm_rows(store):
    """(ts, event, alarm_resource, node) of every alarm set and cleared in the logs, in time order."""
    from pyspark.sql import functions as F

    # rows: the alarms of every node in the logs (a few per incident)
    return (store.read("broker_events").where(F.col("event").isin("alarm_set", "alarm_cleared"))
            .orderBy("ts", "event_id").select("ts", "event", "alarm_resource", "node").toPandas())


def alarm_intervals(rows) -> list[tuple]:
    """(resource, set ts, cleared ts or None) per alarm of ``alarm_rows``, in time order."""
    open_: dict = {}
    out = []
    for r in rows.itertuples():
        key = (r.node, r.alarm_resource)
        if r.event == "alarm_set":
            open_.setdefault(key, r.ts)
        elif key in open_:
            out.append((r.alarm_resource, open_.pop(key), r.ts))
    out += [(resource, start, None) for (_, resource), start in open_.items()]
    return sorted(out, key=lambda a: a[1])


def broker_events_table(store, n: int):
    """The top table of the logs: events per kind, how many joined a captured connection, first and last."""
    from pyspark.sql import functions as F

    df = (store.read("broker_events").where(F.col("event") != "other")
          .groupBy("event").agg(F.count("*").alias("events"),  # rows: one per event kind
                                F.sum(F.when(F.array_contains("sources", "capture"), 1).otherwise(0)).alias("joined to a capture"),
                                F.min("ts").alias("first"), F.max("ts").alias("last"))
          .orderBy(F.desc("events"), "event").limit(n))
    return df
