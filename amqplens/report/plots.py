"""The report's interactive figures: pandas frames from amqplens/report/data.py in, plotly.js figure specs out.

A figure is a plain ``{"data": [...], "layout": {...}}`` dict handed to
``Plotly.newPlot`` in the page (``div``): plotly's Python graph objects validate
every property on construction, which cost seconds per page, and the report
only needs the JavaScript library the wheel ships.

Every string from the wire is passed through ``esc`` first: plotly draws text as
a small subset of HTML, so a queue named ``<b>x</b>`` must arrive as entities to
show as typed. Time axes are dates in UTC with tick formats per zoom level
(``19:26:00.300``, ``19:26:05``, ``19:26``, ``Nov 25``), never float seconds.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from amqplens.report.data import OUTCOME_BAD

TIME_AXIS = dict(
    type="date", title=dict(text="time (UTC)"), hoverformat="%Y-%m-%d %H:%M:%S.%L",
    tickformatstops=[
        dict(dtickrange=[None, 1000], value="%H:%M:%S.%L"),
        dict(dtickrange=[1000, 60_000], value="%H:%M:%S"),
        dict(dtickrange=[60_000, 86_400_000], value="%H:%M<br>%b %d"),
        dict(dtickrange=[86_400_000, None], value="%b %d<br>%Y"),
    ],
)
COLOURS = {"open": "#1f77b4", "blocked": "#d62728", "flow_off": "#ff7f0e", "error": "#ff7f0e", "good": "#2ca02c",
           "bad": "#d62728"}
CONFIG = {"displaylogo": False, "responsive": True}
# one colour per entity of a step plot (its value solid, its limit dashed in the same colour); none near white
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
# a log axis labels 1, 2 and 5 of each decade, not every minor tick
LOG_TICKS = dict(type="log", dtick="D2")
# rows of a timeline: categories drawn at 0, 1, 2...; no zero line across the first row
ROWS_AXIS = dict(zeroline=False, showgrid=False)


def esc(v) -> str:
    return html.escape("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v), quote=False)


def vals(values) -> list:
    """JSON-ready values: timestamps as ``YYYY-MM-DD HH:MM:SS.ffffff`` (UTC, what plotly.js parses), NaN/NaT as null."""
    dtype = getattr(values, "dtype", None)
    if isinstance(values, pd.Series) and isinstance(dtype, np.dtype) and dtype.kind in "Mfiub":
        # a whole column at once (the series and page figures: thousands of points), as the loop below would give
        if dtype.kind == "M":  # naive datetime64: microseconds, as strftime's %f (truncated, not rounded)
            text = np.datetime_as_string(values.to_numpy().astype("datetime64[us]"), unit="us").tolist()
            return [None if t == "NaT" else t.replace("T", " ") for t in text]
        if dtype.kind == "f":
            return [None if v != v else v for v in values.tolist()]
        return values.tolist()
    out: list = []
    for v in values:
        if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
        elif isinstance(v, (pd.Timestamp, dt.datetime)):
            out.append(v.strftime("%Y-%m-%d %H:%M:%S.%f"))
        elif hasattr(v, "item"):  # numpy scalars
            out.append(v.item())
        else:
            out.append(v)
    return out


def figure(title: str, height: int, traces: list, **layout) -> dict:
    base: dict[str, Any] = dict(title=dict(text=esc(title)), height=height, margin=dict(l=10, r=10, t=50, b=40), hovermode="closest",
                legend=dict(font=dict(size=10)), plot_bgcolor="white", xaxis=dict(gridcolor="#eee", automargin=True),
                yaxis=dict(gridcolor="#eee", automargin=True))
    for k, v in layout.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return {"data": traces, "layout": base}


def div(fig: dict, div_id: str) -> str:
    """The figure as a div and the script that draws it; ``<`` and ``>`` escaped inside the JSON (no ``</script>``)."""
    spec = json.dumps(fig, separators=(",", ":"), allow_nan=False)
    spec = spec.replace("<", "\\u003c").replace(">", "\\u003e")
    return (f'<div id="{div_id}" class="plotly-graph-div" style="height:{fig["layout"]["height"]}px"></div>'
            f'<script>(()=>{{const f={spec};Plotly.newPlot("{div_id}",f.data,f.layout,{json.dumps(CONFIG)});}})();</script>')


def lines(spans, **kw) -> dict:
    """One trace drawing every (start, end, y, hover text) span as a thick line (None between spans: one trace, not one
    per span)."""
    xs, ys, texts = [], [], []
    for start, end, y, text in spans:
        xs += [start, end, None]
        ys += [y, y, None]
        texts += [text, text, None]
    return dict(type="scatter", mode="lines", x=vals(xs), y=ys, text=texts, **kw)


def latency_box(stats: pd.DataFrame) -> dict:
    """One box per kind from precomputed quantiles (whiskers: min .. p99), an x at the maximum; log ms axis."""
    names = [esc(w) for w in stats.what]
    box = dict(type="box", orientation="h", y=names, q1=vals(stats.q1), median=vals(stats["median"]), q3=vals(stats.q3),
               lowerfence=vals(stats["min"]), upperfence=vals(stats.p99), name="min, p25, median, p75, p99", boxpoints=False)
    top = dict(type="scatter", mode="markers", y=names, x=vals(stats["max"]), name="max", marker=dict(symbol="x", color="#555"),
               text=[f"{n:,} measured" for n in stats.n], hovertemplate="%{y}<br>max %{x:.3f} ms<br>%{text}")
    return figure("Latency distributions per dialect and method", max(300, 28 * len(stats) + 120), [box, top],
                  xaxis=dict(**LOG_TICKS, title=dict(text="milliseconds (log scale)")))


def _whole(v) -> str | None:
    """An integer column's value as text, None when null (a pandas int column with a null holds floats and NaN)."""
    return None if v is None or pd.isna(v) else str(int(v))


def channel_entity(r) -> str:
    """metrics_flow's entity name of a flow_events row of entity channel: connection_id/channel (amqplens/jobs/metrics/flow.py)."""
    return "/".join(p for p in (r.connection_id, _whole(r.channel)) if p is not None)


def link_entity(r) -> str:
    """metrics_flow's entity name of a link's flow_events row: connection_id/channel/handle N (1.0), or
    connection_id/channel/destination D (0-10: no link handle; the destination is in consumer_tag)."""
    handle = _whole(r.link_handle)
    tail = f"handle {handle}" if handle is not None else (
        f"destination {r.consumer_tag}" if isinstance(r.consumer_tag, str) else None)
    return "/".join(p for p in (r.connection_id, _whole(r.channel), tail) if p is not None)


def step_series(pdf: pd.DataFrame, labels: dict, key, value: str, title: str, ytitle: str, limit: str | None = None,
                log: bool = False) -> dict:
    """``value`` over time as steps, one trace per entity (``key(row) -> entity``), dashed ``limit`` beside it."""
    traces = []
    if len(pdf):
        pdf = pdf.assign(_entity=[key(r) for r in pdf.itertuples()])
    for i, (entity, g) in enumerate(pdf.groupby("_entity", sort=False) if len(pdf) else []):
        name = esc(labels.get(entity, entity))
        colour = PALETTE[i % len(PALETTE)]
        # markers too: a series of one sample (or of equal times) is no line at all, and was invisible
        step = dict(type="scatter", mode="lines+markers", marker=dict(size=4, color=colour), x=vals(g.ts), legendgroup=name)
        traces.append({**step, "y": vals(g[value]), "name": f"{name} {value}", "line": dict(shape="hv", color=colour),
                       "hovertemplate": f"%{{x}}<br>{value} %{{y}}<extra>{name}</extra>"})
        if limit is not None and (g[limit].fillna(0) > 0).any():
            traces.append({**step, "mode": "lines", "y": vals(g[limit]), "name": f"{name} {limit}",
                           "line": dict(shape="hv", dash="dash", color=colour),
                           "hovertemplate": f"%{{x}}<br>{limit} %{{y}}<extra>{name}</extra>"})
    yaxis = dict(title=dict(text=ytitle), **(LOG_TICKS if log else dict(type="linear")))
    return figure(title, 460, traces, xaxis=TIME_AXIS, yaxis=yaxis, legend=dict(orientation="h", y=-0.3))


def outcome_bars(pdf: pd.DataFrame) -> dict:
    """Messages per dialect, direction and outcome; red: negative outcomes (nack, reject, release, modify)."""
    bar = dict(type="bar", orientation="h", y=[esc(f"{r.dialect} {r.direction} {r.value}") for r in pdf.itertuples()],
               x=vals(pdf.n), marker=dict(color=[COLOURS["bad"] if v in OUTCOME_BAD else COLOURS["good"] for v in pdf.value]),
               hovertemplate="%{y}: %{x:,} messages<extra></extra>")
    return figure("Settlement outcomes", max(300, 24 * len(pdf) + 120), [bar],
                  xaxis=dict(**LOG_TICKS, title=dict(text="messages (log scale); red: negative outcomes")))


def connection_timeline(conns: pd.DataFrame, blocked: pd.DataFrame, errs: pd.DataFrame, events: pd.DataFrame,
                        alarms: list, href) -> dict:
    """Each connection a bar from first to last packet, blocked spans red, error closes as x, broker log events
    as markers and alarm intervals shaded; tick labels link to the connection's page (``href(id)`` or None)."""
    y_of = {c.connection_id: y for y, c in enumerate(conns.itertuples())}
    traces = [lines([(c.start_ts, c.end_ts, y_of[c.connection_id], esc(f"{c.conn_label} ({c.dialect}, {c.end_reason})"))
                     for c in conns.itertuples()], line=dict(width=10, color=COLOURS["open"]), name="open",
                    hovertemplate="%{text}<br>%{x}<extra>open</extra>")]
    spans = [(s, e, y_of[cid], esc(reason or "blocked")) for cid, s, e, reason in blocked_spans(blocked, conns)]
    if spans:
        traces.append(lines(spans, line=dict(width=14, color=COLOURS["blocked"]), name="blocked",
                            hovertemplate="%{x}<br>blocked: %{text}<extra></extra>"))
    if len(errs):
        traces.append(dict(type="scatter", mode="markers", x=vals(errs.ts), y=vals(errs.connection_id.map(y_of)), name="error close",
                           marker=dict(symbol="x", size=11, color=COLOURS["error"]), text=[error_text(r) for r in errs.itertuples()],
                           hovertemplate="%{x}<br>%{text}<extra>error</extra>"))
    for event, g in events.groupby("event") if len(events) else []:
        traces.append(dict(type="scatter", mode="markers", x=vals(g.ts), y=vals(g.connection_id.map(y_of)),
                           name=esc(f"{event} (broker log)"), marker=dict(symbol="diamond", size=9),
                           hovertemplate="%{x}<extra>" + esc(event) + "</extra>"))
    lo, hi = conns.start_ts.min(), conns.end_ts.max()
    shapes, notes = [], []
    for resource, start, end in alarms:
        if end is None or (end >= lo and start <= hi):
            x0, x1 = vals([max(start, lo), min(end or hi, hi)])
            shapes.append(dict(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor="gold", opacity=0.25,
                               line=dict(width=0), layer="below"))
            notes.append(dict(x=x0, y=1, xref="x", yref="paper", text=esc(f"{resource} alarm (log)"), showarrow=False,
                              xanchor="left", yanchor="bottom"))
    ticks = []
    for c in conns.itertuples():
        link = href(c.connection_id)
        ticks.append(f'<a href="{link}">{esc(c.conn_label)}</a>' if link else esc(c.conn_label))
    return figure("Connection timeline", max(320, 26 * len(conns) + 160), traces, shapes=shapes, annotations=notes,
                  xaxis=TIME_AXIS, legend=dict(orientation="h", y=-0.12),
                  yaxis=dict(tickvals=list(range(len(conns))), ticktext=ticks, autorange="reversed", tickfont=dict(size=10),
                             **ROWS_AXIS))


def blocked_spans(blocked: pd.DataFrame, conns: pd.DataFrame) -> list[tuple]:
    """(connection_id, blocked ts, unblocked ts or the connection's end, reason) per connection.blocked."""
    ends = dict(zip(conns.connection_id, conns.end_ts))
    since, out = {}, []
    for r in blocked.itertuples():
        if r.blocked and r.connection_id not in since:
            since[r.connection_id] = (r.ts, r.reason)
        elif not r.blocked and r.connection_id in since:
            start, reason = since.pop(r.connection_id)
            out.append((r.connection_id, start, r.ts, reason))
    return out + [(cid, start, ends.get(cid, start), reason) for cid, (start, reason) in since.items()]


def frame_what(r) -> str:
    """A frame row as its method (``channel.close``) or 1.0 performative (``detach``)."""
    return r.performative if isinstance(r.performative, str) else f"{r.class_name}.{r.method_name}"


def error_words(r) -> str:
    """An error close as words, not escaped: ``channel.close 404 NOT_FOUND - no queue 'q'``."""
    code = "" if pd.isna(r.reply_code) else f" {int(r.reply_code)}"
    why = r.error_condition if isinstance(r.error_condition, str) else (r.reply_text if isinstance(r.reply_text, str) else "")
    return f"{frame_what(r)}{code} {why}".strip()


def error_text(r) -> str:
    return esc(f"{error_words(r)} (ch {r.channel}, {r.direction})")
