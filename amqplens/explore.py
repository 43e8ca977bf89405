"""What the notebooks in ``notebooks/`` call: lake tables -> pandas frames and matplotlib figures.

The notebooks read the Delta snapshots with delta-rs, not Spark: the tables
an exploration looks at (connections, one capture's flow events, the
whole-capture metric rows) fit in memory, and a notebook then opens in a
second on a laptop without Java. Every function takes the lake root and an
optional ``capture_id``, so a notebook on a big lake reads one capture's
files only. Figures are ``matplotlib.figure.Figure`` objects made without
pyplot, so they work in Jupyter and in a script alike.
"""

from __future__ import annotations

import pandas as pd
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from matplotlib.figure import Figure

from amqplens.contracts import table as table_def

US_PER_MS = 1000.0


def time_axis(ax) -> None:
    """UTC times as people write them (``19:26:05``, ``19:26:05.250``; the day in the axis title), not
    matplotlib's ``26:05.250000``. Call after plotting."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter

    def hms(x, _pos):
        text = mdates.num2date(x).strftime("%H:%M:%S.%f")[:-3]
        return text[:-4] if text.endswith(".000") else text

    ax.xaxis.set_major_locator(mdates.AutoDateLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(hms))
    lo, hi = (mdates.num2date(x).strftime("%Y-%m-%d") for x in ax.get_xlim())
    ax.set_xlabel(f"time (UTC), {lo}" + (f" .. {hi}" if hi != lo else ""))


def read(lake: str, name: str, capture_id: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """One table's current snapshot (only ``capture_id``'s rows when given); empty with its columns if absent."""
    try:
        dt = DeltaTable(f"{lake}/{name}")
    except TableNotFoundError:
        return table_def(name).arrow_schema().empty_table().to_pandas()[columns or slice(None)]
    filters = [("capture_id", "=", capture_id)] if capture_id else None
    return dt.to_pandas(columns=columns, filters=filters)


def _endpoint(ip: pd.Series, port: pd.Series) -> pd.Series:
    return ip + ":" + port.astype(str)


def entity_labels(lake: str, capture_id: str | None = None) -> dict:
    """{entity: entity_label}: how the metric tables name connections, channels, consumers and links
    (``10.0.0.5:51234 -> 10.0.0.9:5672 "orders" ch 1``), read from their whole-capture rows."""
    cols = ["bucket_seconds", "entity", "entity_label"]
    rows = pd.concat([read(lake, t, capture_id, cols) for t in ("metrics_latency", "metrics_flow")], ignore_index=True)
    rows = rows[rows.bucket_seconds == 0].drop_duplicates("entity")
    return dict(zip(rows.entity, rows.entity_label))


def _labelled(keys: pd.Series, labels: dict) -> pd.Series:
    """Each metric entity key as its label (the key itself where the metrics job has not run)."""
    return keys.map(lambda k: labels.get(k, k))


# ------------------------------------------------------------- connections
def connection_summary(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """One row per connection in start order: endpoints, dialect, duration, bytes each way and how it ended."""
    c = read(lake, "connections", capture_id)
    out = pd.DataFrame({
        "connection_id": c.connection_id,
        "label": _labelled(c.connection_id, entity_labels(lake, capture_id)),
        "client": _endpoint(c.client_ip, c.client_port),
        "server": _endpoint(c.server_ip, c.server_port),
        "dialect": c.dialect,
        "start_ts": c.start_ts,
        "end_ts": c.end_ts,
        "duration_s": c.duration_us / 1e6,
        "bytes_to_server": c.bytes_to_server,
        "bytes_to_client": c.bytes_to_client,
        "frames": c.frames_to_server.fillna(0) + c.frames_to_client.fillna(0),
        "end_reason": c.end_reason,
        "closed_by": c.closed_by,
    })
    return out.sort_values(["start_ts", "client"]).reset_index(drop=True)


def end_reasons(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """Connections per TCP end (fin, rst, capture_end, port_reuse) and side that closed."""
    c = read(lake, "connections", capture_id, ["end_reason", "closed_by"])
    return c.fillna({"closed_by": "-"}).value_counts().rename("connections").reset_index()


# Frames that open, negotiate or end a connection, session or link (not the traffic on them).
_LIFECYCLE_METHODS = {"connection", "channel", "session"}
_LIFECYCLE_PERFORMATIVES = {"open", "begin", "attach", "detach", "end", "close"}


def connection_events(lake: str, connection_id: str, capture_id: str | None = None) -> pd.DataFrame:
    """A connection's life in frames: protocol header, SASL, open/tune/close, channels, sessions and links."""
    f = read(lake, "frames", capture_id, ["connection_id", "ts", "direction", "stream_offset", "frame_type", "channel",
                                           "class_name", "method_name", "performative", "reply_code", "error_condition"])
    f = f[f.connection_id == connection_id]
    keep = ((f.frame_type.isin(["protocol_header", "sasl"])) | f.class_name.isin(_LIFECYCLE_METHODS)
            | f.performative.isin(_LIFECYCLE_PERFORMATIVES))
    f = f[keep].sort_values(["ts", "direction", "stream_offset"])
    what = f.performative.where(f.performative.notna(), f.class_name + "." + f.method_name)
    return pd.DataFrame({
        "ts": f.ts, "direction": f.direction, "channel": f.channel,
        "what": what.fillna(f.frame_type), "reply_code": f.reply_code, "error_condition": f.error_condition,
    }).reset_index(drop=True)


def connection_timeline(summary: pd.DataFrame, limit: int = 40) -> Figure:
    """Each connection as a bar from its first to its last packet, coloured by how it ended."""
    s = summary.head(limit)
    fig = Figure(figsize=(10, 0.3 * len(s) + 1.5))
    ax = fig.subplots()
    colours = {"fin": "tab:blue", "rst": "tab:red", "capture_end": "tab:gray", "port_reuse": "tab:purple"}
    for y, c in enumerate(s.itertuples()):
        ax.plot([c.start_ts, c.end_ts], [y, y], linewidth=5, solid_capstyle="butt",
                color=colours.get(c.end_reason, "black"), label=c.end_reason)
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))
    ax.legend(handles.values(), handles.keys(), title="ended by", fontsize=7)
    ax.set_yticks(range(len(s)), [f"{c.dialect or '?'} {c.label}" for c in s.itertuples()], fontsize=7)
    ax.invert_yaxis()
    time_axis(ax)
    ax.set_title(f"connections ({len(s)} of {len(summary)})")
    return fig


# ----------------------------------------------------------------- latency
def latency_table(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """The whole-capture latency metrics (metrics_latency, bucket 0, entity capture) in milliseconds."""
    m = read(lake, "metrics_latency", capture_id)
    m = m[(m.bucket_seconds == 0) & (m.entity_kind == "capture")]
    out = m[["capture_id", "metric", "dialect", "direction", "method", "count", "missing"]].copy()
    for q in ("p50", "p90", "p99", "max"):
        out[f"{q}_ms"] = m[f"{q}_us"] / US_PER_MS
    return out.sort_values(["capture_id", "metric", "dialect", "direction", "method"], na_position="first").reset_index(drop=True)


def latency_samples(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """Every measured latency in ms, labelled: settled deliveries (acknowledged ones) and answered requests."""
    d = read(lake, "deliveries", capture_id, ["dialect", "method", "direction", "settle_mode", "outcome", "settle_latency_us"])
    # auto-ack and unconfirmed publishes are settled on send: their zero latency measures nothing.
    d = d[d.settle_latency_us.notna() & ~d.settle_mode.isin(["auto_ack", "no_confirm"]) & (d.outcome != "presettled")]
    r = read(lake, "request_responses", capture_id, ["dialect", "request", "latency_us"])
    r = r[r.latency_us.notna()]
    return pd.concat([
        pd.DataFrame({"what": d.dialect + " " + d.method + " " + d.direction, "ms": d.settle_latency_us / US_PER_MS}),
        pd.DataFrame({"what": r.dialect + " " + r.request, "ms": r.latency_us / US_PER_MS}),
    ], ignore_index=True)


def latency_cdf(samples: pd.DataFrame, top: int = 8) -> Figure:
    """Cumulative distribution of latency for the ``top`` most measured kinds, log time axis."""
    fig = Figure(figsize=(10, 5))
    ax = fig.subplots()
    for what in samples.what.value_counts().index[:top]:
        ms = samples.ms[samples.what == what].sort_values().clip(lower=1e-3)
        ax.step(ms, [(i + 1) / len(ms) for i in range(len(ms))], where="post", label=f"{what} ({len(ms)})")
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    ax.set_ylabel("share of measurements at or below")
    ax.legend(fontsize=7)
    return fig


# ------------------------------------------------------------ flow control
def in_flight(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """0-9-1 unacknowledged deliveries and prefetch per channel over time (flow_events of channels), ``channel_key``
    the channel's entity_label."""
    f = read(lake, "flow_events", capture_id, ["connection_id", "channel", "entity", "ts", "event", "in_flight", "prefetch_count"])
    f = f[(f.entity == "channel") & f.in_flight.notna()].sort_values("ts")
    f = f.assign(channel_key=_labelled(f.connection_id + "/" + f.channel.astype(str), entity_labels(lake, capture_id)))
    return f[["channel_key", "connection_id", "channel", "ts", "event", "in_flight", "prefetch_count"]].reset_index(drop=True)


def link_credit(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """1.0 link credit per link over time (flow_events of links), ``link_key`` the link's entity_label."""
    f = read(lake, "flow_events", capture_id, ["connection_id", "channel", "link_handle", "entity", "ts", "event", "link_credit"])
    f = f[(f.entity == "link") & f.link_credit.notna()].sort_values("ts")
    handle = ("/handle " + f.link_handle.astype("Int64").astype(str)).where(f.link_handle.notna(), "")  # as metrics_flow names it
    key = f.connection_id + "/" + f.channel.astype(str) + handle
    f = f.assign(link_key=_labelled(key, entity_labels(lake, capture_id)))
    return f[["link_key", "connection_id", "ts", "event", "link_credit"]].reset_index(drop=True)


def blocked_intervals(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """connection.blocked .. unblocked spans per connection; an unfinished one ends with the connection."""
    f = read(lake, "flow_events", capture_id, ["connection_id", "entity", "ts", "blocked", "reason"])
    f = f[(f.entity == "connection") & f.blocked.notna()].sort_values("ts")
    # a lookup by connection_id (unique), no join: rows <= the blocked events
    ends = read(lake, "connections", capture_id, ["connection_id", "end_ts"]).set_index("connection_id").end_ts
    rows, since = [], {}
    for r in f.itertuples():
        if r.blocked and r.connection_id not in since:
            since[r.connection_id] = (r.ts, r.reason)
        elif not r.blocked and r.connection_id in since:
            start, reason = since.pop(r.connection_id)
            rows.append((r.connection_id, start, r.ts, reason, True))
    rows += [(cid, start, ends.get(cid), reason, False) for cid, (start, reason) in since.items()]
    out = pd.DataFrame(rows, columns=["connection_id", "blocked_ts", "until_ts", "reason", "unblocked"])
    span = pd.to_datetime(out.until_ts, utc=True) - pd.to_datetime(out.blocked_ts, utc=True)
    return out.assign(duration_s=span.dt.total_seconds())


def step_figure(frame: pd.DataFrame, key: str, value: str, title: str, top: int = 4, limit: str | None = None) -> Figure:
    """``value`` over time as steps for the ``top`` keys with the most events (dashed: ``limit``)."""
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    for k in frame[key].value_counts().index[:top]:
        g = frame[frame[key] == k]
        line = ax.step(g.ts, g[value], where="post", label=f"{k} {value}")
        if limit is not None and (g[limit] > 0).any():
            ax.step(g.ts, g[limit], where="post", linestyle="--", color=line[0].get_color(), label=f"{k} {limit}")
    ax.set_title(title)
    time_axis(ax)
    if len(frame):
        ax.legend(fontsize=7)
    return fig


# -------------------------------------------------------------- settlement
# Outcomes of messages nobody settled before their channel, link or connection (or the capture) ended.
UNSETTLED_OUTCOMES = ("unconfirmed_at_close", "requeued_on_close", "unsettled_at_close", "open_at_capture_end")


def settlement_table(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """Messages per dialect, direction and outcome, their share of the group and median settle time."""
    d = read(lake, "deliveries", capture_id, ["dialect", "direction", "outcome", "settle_latency_us"])
    # rows: groups of the deliveries read (pandas, in memory: a notebook's capture), no join
    g = d.groupby(["dialect", "direction", "outcome"], dropna=False)
    out = g.size().rename("messages").to_frame()
    out["p50_settle_ms"] = g.settle_latency_us.median() / US_PER_MS
    out = out.reset_index()
    out["share"] = out.messages / out.groupby(["dialect", "direction"]).messages.transform("sum")
    return out.sort_values(["dialect", "direction", "messages"], ascending=[True, True, False]).reset_index(drop=True)


def outcome_figure(settlement: pd.DataFrame) -> Figure:
    """Messages per outcome as horizontal bars, one per dialect/direction/outcome, log scale."""
    fig = Figure(figsize=(10, 0.3 * len(settlement) + 1.5))
    ax = fig.subplots()
    ax.barh([f"{r.dialect} {r.direction} {r.outcome}" for r in settlement.itertuples()], settlement.messages)
    ax.set_xscale("log")
    ax.set_xlabel("messages (log scale)")
    ax.invert_yaxis()
    return fig


SEVERITY_ORDER = ("critical", "warning", "info")
SEVERITY_COLOURS = {"critical": "#b00020", "warning": "#e08a00", "info": "#888888"}


def findings_table(lake: str, capture_id: str | None = None) -> pd.DataFrame:
    """The findings (one row per diagnosis), most severe first, then by time: severity, kind, entity_label, when,
    summary, evidence, partial."""
    cols = ["capture_id", "kind", "severity", "entity_label", "connection_id", "start_ts", "end_ts", "summary", "evidence",
            "partial", "count"]
    f = read(lake, "findings", capture_id, cols)
    rank = f.severity.map({s: i for i, s in enumerate(SEVERITY_ORDER)})
    return f.assign(_rank=rank).sort_values(["_rank", "start_ts", "kind"]).drop(columns="_rank").reset_index(drop=True)


def findings_figure(findings: pd.DataFrame, top: int = 30) -> Figure:
    """The first ``top`` findings as bars from start to end over time, coloured by severity (a dot for an instant)."""
    import matplotlib.dates as mdates

    shown = findings.head(top)
    fig = Figure(figsize=(11, 0.35 * len(shown) + 1.5))
    ax = fig.subplots()
    for i, r in enumerate(shown.itertuples()):
        start, end = mdates.date2num(r.start_ts), mdates.date2num(r.end_ts)
        colour = SEVERITY_COLOURS.get(r.severity, "#222222")
        ax.barh(i, max(end - start, 0), left=start, color=colour, height=0.6)
        ax.plot([start], [i], "o", color=colour, markersize=4)
    ax.set_yticks(range(len(shown)), [f"{r.kind} {r.entity_label[:50]}" for r in shown.itertuples()], fontsize=7)
    ax.invert_yaxis()
    if len(shown):
        time_axis(ax)
    ax.set_title("Findings over time (red critical, orange warning, grey info)")
    return fig
