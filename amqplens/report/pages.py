"""One page per connection: its timeline (open, channels, sessions, links, blocked, flow, errors, close), its
latencies over time and its deliveries by outcome. Figures from the pandas frames of amqplens/report/data.py."""

from __future__ import annotations

import hashlib

import pandas as pd

from amqplens.report.plots import (COLOURS, LOG_TICKS, PALETTE, ROWS_AXIS, TIME_AXIS, blocked_spans, error_text, esc, figure, frame_what,
                                   lines, vals)

OPENERS = {"open", "open-ok", "begin", "attach"}


def page_name(connection_id: str) -> str:
    """The page's file name under connections/ (stable: a short hash of the id)."""
    return hashlib.sha256(connection_id.encode()).hexdigest()[:16] + ".html"


def _row_key(r) -> str:
    """The timeline row a lifecycle frame belongs to: the connection, a channel/session, or a link."""
    if r.class_name == "connection" or r.performative in ("open", "close") or pd.isna(r.channel):
        return "connection"
    if r.performative in ("attach", "detach") and not pd.isna(r.handle):
        return f"ch {int(r.channel)} handle {int(r.handle)}"
    return f"ch {int(r.channel)}"


def timeline(conn, frames: pd.DataFrame, flows: pd.DataFrame, blocked: pd.DataFrame, errs: pd.DataFrame) -> dict:
    """Rows: the connection, then each channel/session and link in order of first appearance."""
    frame_rows = list(frames.itertuples())  # once: a page's frames are read row by row four times below
    row_keys = [_row_key(r) for r in frame_rows]
    keys = ["connection"] + [k for k in dict.fromkeys(row_keys) if k != "connection"]
    names: dict[str, str] = {}
    for r, k in zip(frame_rows, row_keys):
        if r.performative == "attach" and isinstance(r.link_name, str):
            names.setdefault(k, f"{k}: link {r.link_name}")
    y_of = {k: i for i, k in enumerate(keys)}
    spans = [(conn.start_ts, conn.end_ts, 0, esc(f"connection ({conn.end_reason})"))]
    for k, g in frames.groupby(row_keys) if frame_rows else []:
        if k != "connection":
            end = conn.end_ts if frame_what(next(g.tail(1).itertuples())).split(".")[-1] in OPENERS else g.ts.max()
            spans.append((g.ts.min(), end, y_of[k], esc(names.get(k, k))))
    traces = [lines(spans, line=dict(width=10, color=COLOURS["open"]), name="open",
                    hovertemplate="%{text}<br>%{x}<extra>open</extra>")]
    bl = [(s, e, 0, esc(reason or "blocked")) for _, s, e, reason in blocked_spans(blocked, pd.DataFrame([conn]))]
    if bl:
        traces.append(lines(bl, line=dict(width=14, color=COLOURS["blocked"]), name="blocked",
                            hovertemplate="%{x}<br>blocked: %{text}<extra></extra>"))
    off = flow_off_spans(flows, conn.end_ts)
    if off:
        traces.append(lines([(s, e, y_of.get(f"ch {ch}", 0), f"ch {ch} flow off") for ch, s, e in off],
                            line=dict(width=14, color=COLOURS["flow_off"]), name="channel.flow off",
                            hovertemplate="%{x}<br>%{text}<extra></extra>"))
    if len(frames):
        traces.append(dict(type="scatter", mode="markers", x=vals(frames.ts), y=[y_of[k] for k in row_keys],
                           marker=dict(size=9, color="#444", symbol="line-ns-open"), name="frames",
                           text=[esc(f"{frame_what(r)} ({r.direction}, ch {r.channel})") for r in frame_rows],
                           hovertemplate="%{x}<br>%{text}<extra></extra>"))
    if len(errs):
        rows = [y_of.get(f"ch {int(r.channel)}" if not pd.isna(r.channel) and r.class_name != "connection" else "connection", 0)
                for r in errs.itertuples()]
        traces.append(dict(type="scatter", mode="markers", x=vals(errs.ts), y=rows, name="error",
                           marker=dict(symbol="x", size=12, color=COLOURS["bad"]), text=[error_text(r) for r in errs.itertuples()],
                           hovertemplate="%{x}<br>%{text}<extra>error</extra>"))
    return figure("Timeline", max(260, 30 * len(keys) + 160), traces, xaxis=TIME_AXIS, legend=dict(orientation="h", y=-0.2),
                  yaxis=dict(tickvals=list(range(len(keys))), ticktext=[esc(names.get(k, k)) for k in keys], autorange="reversed",
                             **ROWS_AXIS))


def flow_off_spans(flows: pd.DataFrame, end_ts) -> list[tuple]:
    """(channel, off since, on again or the connection's end) per channel.flow active=false."""
    since, out = {}, []
    for r in flows.itertuples():
        if not r.flow_active and r.channel not in since:
            since[r.channel] = r.ts
        elif r.flow_active and r.channel in since:
            out.append((r.channel, since.pop(r.channel), r.ts))
    return out + [(ch, s, end_ts) for ch, s in since.items()]


def latencies(lat: pd.DataFrame) -> dict:
    """p50 (solid) and p99 (dotted) per metric and method over the time buckets, exact values on hover."""
    traces: list[dict] = []
    per_bucket = lat[lat.bucket_seconds > 0]
    for (metric, method, direction), g in per_bucket.groupby(["metric", "method", "direction"], dropna=False):
        name = esc(" ".join(str(v) for v in (metric, method, direction) if isinstance(v, str)))
        text = [f"{c:,} measured, {m:,} missing" for c, m in zip(g["count"], g.missing)]
        # one legend entry per series (p50 solid, p99 dotted in its colour): a click hides both
        colour = PALETTE[len(traces) // 2 % len(PALETTE)]
        for q, dash in (("p50", "solid"), ("p99", "dot")):
            traces.append(dict(type="scatter", mode="lines+markers", x=vals(g.bucket_start), y=vals(g[f"{q}_us"] / 1000),
                               name=name, legendgroup=name, showlegend=q == "p50", line=dict(dash=dash, color=colour),
                               marker=dict(color=colour), text=text,
                               hovertemplate=f"%{{x}}<br>{q} %{{y:.3f}} ms<br>%{{text}}<extra>{name}</extra>"))
    return figure("Latencies per time bucket (metrics_latency): p50 solid, p99 dotted", 460, traces,
                  legend=dict(orientation="h", y=-0.3), xaxis=bucket_axis(per_bucket),
                  yaxis=dict(**LOG_TICKS, title=dict(text="milliseconds (log scale)")))


def outcomes(out: pd.DataFrame) -> dict:
    """Messages per outcome and direction, stacked per time bucket."""
    traces = []
    for (direction, value), g in out[out.bucket_seconds > 0].groupby(["direction", "value"]):
        name = esc(f"{direction} {value}")
        # a bar covers its bucket [start, start + 90% of its width) (ms on a date axis), not centred on its start
        traces.append(dict(type="bar", x=vals(g.bucket_start), y=vals(g["count"]), name=name, offset=0,
                           width=vals(g.bucket_seconds * 900),
                           hovertemplate=f"%{{x}}<br>%{{y:,}} messages<extra>{name}</extra>"))
    return figure("Deliveries by outcome per time bucket (metrics_settlement)", 400, traces, barmode="stack",
                  xaxis=bucket_axis(out[out.bucket_seconds > 0]), yaxis=dict(title=dict(text="messages")))


def bucket_axis(rows: pd.DataFrame) -> dict:
    """A time axis from the first bucket's start to the last bucket's end (one bucket is not a zero-width range)."""
    axis = {**TIME_AXIS, "title": dict(text="time bucket (UTC)")}
    if len(rows):
        width = pd.Timedelta(seconds=int(rows.bucket_seconds.max()))
        axis["range"] = vals([rows.bucket_start.min(), rows.bucket_start.max() + width])
    return axis
