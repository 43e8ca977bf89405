"""The report: static HTML pages with interactive plots (plotly), PNG copies, top-N tables and one page per connection.

amqplens report --lake DIR --out DIR

``<out>/index.html`` is the overview; ``<out>/connections/<hash>.html`` a page per
connection (those that ended in an error, then the busiest, ``report.connection_pages``
in all), linked from the overview's table and timeline. The pages load
``<out>/plotly.min.js``, copied from the plotly wheel, so they work offline and
from ``file://`` with no network; plotly rather than vega-lite/altair because its
wheel carries the whole library (altair's inline HTML needs vl-convert or
altair_viewer besides) and one JS file serves every page. Each overview figure is
also written as a PNG (matplotlib) for e-mail. Every figure and table names the
table and filter it was drawn from; every query is an aggregate, a top-N or capped
per connection (amqplens/report/data.py), so the report of a 2 GB capture stays small.
"""

from __future__ import annotations

import datetime as dt
import html
import logging
import pathlib
import time
import types
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout

import pandas as pd

from amqplens.report import data
from amqplens.report import findings as findings_section
from amqplens.report import pages
from amqplens.report import painter as painters
from amqplens.report import plots
from amqplens.report import png
from amqplens.config import Config, report_dir
from amqplens.lake.store import TableStore
from amqplens.jobs.findings.listing import most_severe
from amqplens.report.logs import alarm_intervals

log = logging.getLogger(__name__)

PLOTLY_JS = "plotly.min.js"
# Frames per connection page (open/close/attach/... and error closes) and channel.flow changes.
PAGE_EVENT_CAP = 2000
STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222;padding:0 1em}
figure{margin:2em 0} figcaption{font-size:90%;color:#555} table{border-collapse:collapse;font-size:85%}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top} code{font-size:95%}
.plot{min-height:200px} nav{font-size:90%}"""
# Lets a headless browser (the report test) and a reader see that every plot and image rendered:
# <body data-plots="k/n" data-images-loaded="k/n">.
RENDERED = """<script>addEventListener('load',()=>{const d=document.body.dataset,i=[...document.images];
d.imagesLoaded=i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;
const p=[...document.querySelectorAll('.plotly-graph-div')];let t=0;(function check(){
const ok=p.filter(x=>x._fullLayout&&x.querySelector('.main-svg .cartesianlayer .trace')).length;d.plots=ok+'/'+p.length;
if(ok<p.length&&++t<100)setTimeout(check,50);})();});</script>"""


class Figure:
    def __init__(self, name: str, title: str, table: str, where: str):
        self.name, self.title, self.table, self.where = name, title, table, where
        self.drawn = False  # set once the figure showed data
        self.div = ""


def _cell(v) -> str:
    if isinstance(v, float):
        return "" if pd.isna(v) else f"{v:,.2f}"
    if isinstance(v, (pd.Timestamp, dt.datetime)):
        return html.escape(v.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3])
    return html.escape("" if v is None else str(v))


def table_html(cols, rows, raw: set | frozenset = frozenset()) -> str:
    """An HTML table; values escaped except the columns in ``raw`` (links this module built). Columns all named ""
    (a two-column list of facts) make no header row."""
    if not rows:
        return "<p>(none)</p>"
    head = "<table>" + ("<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>" if any(cols) else "")
    return head + "".join("<tr>" + "".join(f"<td>{v if c in raw else _cell(v)}</td>" for c, v in zip(cols, r)) + "</tr>"
                          for r in rows) + "</table>"


def page_html(title: str, body: list[str], js: str) -> str:
    return "\n".join([f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style><script src="{js}"></script></head><body>""", *body, RENDERED, "</body></html>\n"])


QUERIES = ("latency_stats", "busiest_series", "entity_labels", "outcomes", "connections", "blocked_and_errors",
           "lifecycle_frames", "connection_metrics", "top_tables", "broker_event_rows", "alarm_rows")


def queries(engine: str, store, budget: int | None = None) -> types.SimpleNamespace:
    """The report's queries of one engine, each bound to what it reads: ``spark`` (amqplens/report/data.py and
    logs.py: the reference) or ``driver`` (amqplens/report/driver.py; raises ``TooMany`` past ``budget`` rows kept)."""
    import functools

    from amqplens.report import logs

    if engine == "driver":
        from amqplens.report import driver

        handle, where = driver.Lake(store, budget), [driver]
    else:
        handle, where = store, [data, logs]
    return types.SimpleNamespace(engine=engine, **{
        name: functools.partial(next(getattr(m, name) for m in where if hasattr(m, name)), handle) for name in QUERIES})


def _figure_queries(q, conf, pool) -> dict:
    """The figures' queries, submitted to ``pool`` (none needs the connections): name -> future of a pandas frame,
    ``labels`` -> future of {entity: entity_label} of the series' channels and links."""
    n, points = conf["report.busiest"], conf["report.max_points"]
    f = {"stats": pool.submit(q.latency_stats),
         "inflight": pool.submit(q.busiest_series, "channel", "deliver", ["in_flight", "prefetch_count"], n, points),
         "credit": pool.submit(q.busiest_series, "link", "transfer", ["link_credit"], n, points),
         "outcomes": pool.submit(q.outcomes)}
    # after the two it waits for, so that they hold workers of the pool before it does
    f["labels"] = pool.submit(lambda: q.entity_labels(
        ("channel", "link"), sorted(set(f["inflight"].result().connection_id) | set(f["credit"].result().connection_id))))
    return f


def _figures(conf, q: dict, conns, blocked, errs, events, alarms, out_dir: pathlib.Path, painter=None) -> list[Figure]:
    """The overview's figures from the queries ``_figure_queries`` started: plotly divs, and each also a PNG next to
    the page.

    The figures are made one at a time on the calling thread, each as soon as its queries are back, while the
    others' queries run. Each PNG goes to the PNG processes (``painter``, amqplens/report/painter.py) as its data is
    there; without them, or for a PNG they failed to draw, it is drawn on that thread (matplotlib's object API, not
    pyplot's global state; one thread, not one per figure, because matplotlib's mathtext parser, for log-axis labels
    such as 10^0, is shared by a process's figures: two drawn at once broke its parse, seen in
    tests/e2e/test_wild_run.py).
    """
    n, points = conf["report.busiest"], conf["report.max_points"]
    stats, inflight, credit, outcomes, labels = (q[k] for k in ("stats", "inflight", "credit", "outcomes", "labels"))
    chan, link = plots.channel_entity, plots.link_entity  # metrics_flow's entity names
    spans = plots.blocked_spans(blocked, conns)
    href = lambda cid: f"connections/{pages.page_name(cid)}" if cid in paged(conns) else None  # noqa: E731
    defs = [
        (Figure("latency", "Latency distributions per dialect and method", "deliveries",
                "settle_latency_us is not null and settle_mode not in (auto_ack, no_confirm), plus request_responses.latency_us; "
                "quantiles by percentile_approx (summaries: metrics_latency where bucket_seconds = 0 and entity_kind = 'capture')"),
         lambda: not stats.result().empty, lambda: plots.latency_box(stats.result()),
         lambda: ("latency", (stats.result(),)), (10, 7)),
        (Figure("inflight", f"In flight vs prefetch, {n} busiest channels", "flow_events",
                f"entity = 'channel', the {n} channels with the most 'deliver' events; at most {points} points each "
                "(per-interval maxima beyond); labels from metrics_flow.entity_label"),
         lambda: not inflight.result().empty,
         lambda: plots.step_series(inflight.result(), labels.result(), chan, "in_flight", "In flight vs prefetch", "messages",
                                   "prefetch_count"),
         lambda: ("steps", (inflight.result(), labels.result(), chan, "in_flight", "messages", "prefetch_count")), (10, 4)),
        (Figure("credit", f"Link credit over time, {n} busiest links", "flow_events",
                f"entity = 'link', the {n} links with the most 'transfer' events; at most {points} points each"),
         lambda: not credit.result().empty,
         lambda: plots.step_series(credit.result(), labels.result(), link, "link_credit", "Link credit", "link credit", log=True),
         lambda: ("steps", (credit.result(), labels.result(), link, "link_credit", "link credit (symlog)", None, True)),
         (10, 4)),
        (Figure("settlement", "Settlement outcomes", "metrics_settlement",
                "bucket_seconds = 0 and entity_kind = 'capture' and measure = 'outcome', summed over captures"),
         lambda: not outcomes.result().empty, lambda: plots.outcome_bars(outcomes.result()),
         lambda: ("outcomes", (outcomes.result(),)), (10, 5)),
        (Figure("timeline", "Connection timeline", "connections",
                "the first 40 connections by start_ts and those with a page (Proton-trace connections, which have no clock, "
                "left out); blocked from flow_events where entity = 'connection'; errors from frames where a close carries "
                "reply_code != 200 or an error_condition; broker log events (channel errors, abrupt closes, alarm intervals) "
                "from broker_events; a label links to the connection's page"),
         lambda: not conns.empty, lambda: plots.connection_timeline(conns, blocked, errs, events, alarms, href),
         lambda: ("timeline", (conns, errs, spans, events, alarms)), (11, 7)),
    ]
    # what each figure waits for; each is made as soon as its queries are back (the timeline's data is here already)
    needs = {"latency": [stats], "inflight": [inflight, labels], "credit": [credit, labels], "settlement": [outcomes],
             "timeline": []}
    made = [_draw(fig_def, has_data, interactive, static, size, out_dir, painter)
            for fig_def, has_data, interactive, static, size in _when_ready(defs[-1:] + defs[:-1], needs)]
    deadline = time.monotonic() + PNG_TIMEOUT_S
    for fig_def, job, png_args in made:  # the PNGs the processes were given: drawn here if they failed
        if job is None:
            continue
        try:
            job.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - drawn here instead
            if isinstance(e, FutureTimeout):  # a stuck helper: ended, so that the PNGs it still holds fail at once
                painter.kill()
                e = FutureTimeout(f"no answer within {PNG_TIMEOUT_S} s")
            log.warning("report: the PNG process did not draw %s (%s); drawn on the driver", fig_def.name, e)
            png.draw(*png_args)
    figures = {f.name: f for f, _, _ in made}
    return [figures[d[0].name] for d in defs]


# a PNG process's figure takes a second or two; the PNGs not drawn by this many seconds after the last was sent
# are drawn on the driver
PNG_TIMEOUT_S = 120


def _when_ready(defs: list, needs: dict):
    """``defs`` in the order their queries (``needs``: figure name -> futures) come back, ties in the given order."""
    left = list(defs)
    while left:
        ready = [d for d in left if all(f.done() for f in needs[d[0].name])]
        if not ready:
            wait({f for d in left for f in needs[d[0].name] if not f.done()}, return_when=FIRST_COMPLETED)
            continue
        left.remove(ready[0])
        yield ready[0]


def _draw(fig_def: Figure, has_data, interactive, static, size, out_dir: pathlib.Path, painter=None):
    """One figure: its plotly div, and its PNG (``<out_dir>/<name>.png``) handed to ``painter`` (then the job's
    future is returned, with the PNG's arguments) or drawn here."""
    fig_def.drawn = has_data()
    fig_def.div = plots.div(interactive(), f"plot-{fig_def.name}") if fig_def.drawn else "<p>(nothing to draw in this lake)</p>"
    kind, args = static()
    png_args = (kind, args, fig_def.title, size, str(out_dir / f"{fig_def.name}.png"))
    if painter is not None:
        return fig_def, painter.submit(*png_args), png_args
    png.draw(*png_args)
    return fig_def, None, png_args


def paged(conns) -> set:
    return set(conns.connection_id[conns.page])


def connections_table(conns) -> str:
    rows = []
    for c in conns[conns.page].sort_values(["bad_end", "frames"], ascending=False).itertuples():
        link = f'<a href="connections/{pages.page_name(c.connection_id)}">{html.escape(c.conn_label)}</a>'
        ended = c.end_reason + (f", close {int(c.close_code)}" if not pd.isna(c.close_code) else "") + \
            (f", {c.close_condition}" if isinstance(c.close_condition, str) else "")
        rows.append((link, c.dialect, c.start_ts, f"{c.duration_us / 1e6:,.3f}", f"{c.frames:,}", ended, c.errors))
    return table_html(["connection", "dialect", "start (UTC)", "seconds", "frames", "ended", "errors"], rows, raw={"connection"})


def channel_errors(errs: pd.DataFrame) -> str:
    """The error closes of a connection's channels, sessions and links by code and text (``404 NOT_FOUND x3``), which
    its close line (often ``200 Normal shutdown``) does not show; "none" when it had none."""
    if not len(errs):
        return "none"
    said = [plots.error_words(r) for r in errs.itertuples()]
    counts: dict[str, int] = {}
    for s in said:
        counts[s] = counts.get(s, 0) + 1
    return f"{len(said)}: " + ", ".join(f"{s} x{n}" if n > 1 else s for s, n in counts.items())


def render_overview(store, figures: list[Figure], tables, conns, generated: str, found=((), {})) -> str:
    link = lambda t: f'<a href="{html.escape(store.uri(t))}"><code>{t}</code></a>'  # noqa: E731
    body = [f"""<h1>amqplens report</h1>
<p>Lake <code>{html.escape(store.root)}</code>, generated {html.escape(generated)}. Metric definitions:
<code>docs/tables.md</code>, section "Metric definitions". Plots zoom (drag), pan, show exact values on hover and
hide a series on a click in the legend; double-click resets. Each has a PNG copy beside this page.</p>""",
            findings_section.section(list(found[0]), dict(found[1]), paged(conns), link),
            f"<h2>Connections with a page</h2><p>Source: {link('connections')}: those that ended in an error (a close "
            f"other than 200, an error condition, a reset), then the most frames; {int(conns.page.sum())} of the "
            f"connections (<code>report.connection_pages</code>).</p>", connections_table(conns)]
    for f in figures:
        body.append(f'<figure id="{f.name}" class="{"drawn" if f.drawn else "empty"}"><h2>{html.escape(f.title)}</h2>'
                    f'<div class="plot">{f.div}</div><figcaption>Source: {link(f.table)} where {html.escape(f.where)}. '
                    f'<a href="{f.name}.png">PNG</a></figcaption></figure>')
    for title, table, where, cols, rows in tables:
        body.append(f"<h2>{html.escape(title)}</h2><p>Source: {link(table)} where {html.escape(where)}.</p>")
        body.append(table_html(cols, rows))
    return page_html("amqplens report", body, PLOTLY_JS)


def render_connection(store, c, frames, flows, blocked, errs, lat, out) -> str:
    link = lambda t: f'<a href="{html.escape(store.uri(t))}"><code>{t}</code></a>'  # noqa: E731
    facts = [("connection_id", c.connection_id), ("capture_id", c.capture_id), ("dialect", c.dialect),
             ("start (UTC)", c.start_ts), ("end (UTC)", c.end_ts), ("seconds", c.duration_us / 1e6), ("frames", c.frames),
             ("bytes to server / client", f"{c.bytes_to_server:,} / {c.bytes_to_client:,}"), ("ended", c.end_reason),
             ("close", " ".join(str(v) for v in (None if pd.isna(c.close_code) else int(c.close_code), c.close_text,
                                                 c.close_condition) if v is not None and not pd.isna(v))),
             ("errors", channel_errors(errs))]
    whole = lat[lat.bucket_seconds == 0]
    lat_rows = [(r.metric, r.method, r.direction, r.count, r.missing, r.p50_us / 1000, r.p99_us / 1000, r.max_us / 1000)
                for r in whole.itertuples()]
    body = [f'<nav><a href="../index.html">overview</a></nav><h1>{html.escape(c.conn_label)}</h1>',
            table_html(["", ""], facts),
            f"<h2>Timeline</h2>{plots.div(pages.timeline(c, frames, flows, blocked, errs), 'plot-timeline')}"
            f"<p>Source: {link('frames')} (connection, channel, session and link open/close frames, at most "
            f"{PAGE_EVENT_CAP}; error closes), {link('flow_events')} (connection.blocked, channel.flow).</p>",
            f"<h2>Latencies</h2>{plots.div(pages.latencies(lat), 'plot-latency') if len(lat) else '<p>(none)</p>'}"
            f"<p>Source: {link('metrics_latency')} where entity_kind = 'connection' and this connection_id.</p>",
            table_html(["metric", "method", "direction", "count", "missing", "p50 ms", "p99 ms", "max ms"], lat_rows),
            f"<h2>Deliveries by outcome</h2>{plots.div(pages.outcomes(out), 'plot-outcomes') if len(out) else '<p>(none)</p>'}"
            f"<p>Source: {link('metrics_settlement')} where entity_kind = 'connection' and measure = 'outcome'.</p>",
            table_html(["direction", "outcome", "messages"],
                       [(r.direction, r.value, r.count) for r in out[out.bucket_seconds == 0].itertuples()])]
    return page_html(f"amqplens: {c.conn_label}", body, f"../{PLOTLY_JS}")


def write_connection_pages(store, q, conns, blocked, errs, out_dir: pathlib.Path) -> list[pathlib.Path]:
    mine = conns[conns.page]
    ids = list(mine.connection_id)
    if not ids:
        return []
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="amqplens-pages") as pool:  # independent queries
        lifecycle = pool.submit(q.lifecycle_frames, ids, PAGE_EVENT_CAP)
        metrics = pool.submit(q.connection_metrics, ids)
        (frames, flows), (lat, out) = lifecycle.result(), metrics.result()
    folder = out_dir / "connections"
    folder.mkdir(exist_ok=True)
    # each frame split by connection once (rows in their order), not filtered once per page
    split = [(df.iloc[:0], dict(tuple(df.groupby("connection_id", sort=False)))) for df in (frames, flows, blocked, errs, lat, out)]
    written = []
    for c in mine.itertuples():
        path = folder / pages.page_name(c.connection_id)
        path.write_text(render_connection(store, c, *(parts.get(c.connection_id, none) for none, parts in split)))
        written.append(path)
    return written


def write_plotly_js(out_dir: pathlib.Path) -> None:
    """plotly.js from the plotly wheel (package_data/plotly.min.js), copied unless the same file is there."""
    import importlib.resources

    source = importlib.resources.files("plotly") / "package_data" / PLOTLY_JS
    target = out_dir / PLOTLY_JS
    js = source.read_bytes()
    if not target.exists() or target.read_bytes() != js:
        target.write_bytes(js)


def run(spark, conf: Config, out: str | None = None) -> pathlib.Path:
    """Write <out>/index.html, its PNGs, plotly.min.js and <out>/connections/*.html; returns the overview's path.

    ``report.engine``: the queries on the driver (``driver``), through Spark (``spark``), or on the driver unless the
    rows they keep pass ``report.driver_max_rows`` (``auto``), when the report is written again through Spark."""
    from amqplens.jobs.findings.driver import TooMany

    store = TableStore(spark, conf["lake.root"])
    out_dir = pathlib.Path(report_dir(conf, out)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    write_plotly_js(out_dir)
    engine = conf["report.engine"]
    painter = painters.take(conf["report.png_processes"])  # its imports while the queries run
    try:
        if engine != "spark":
            budget = None if engine == "driver" else conf["report.driver_max_rows"]
            try:
                return write(store, conf, out_dir, queries("driver", store, budget), painter)
            except TooMany as e:
                log.info("report: %s; through Spark", e)
        return write(store, conf, out_dir, queries("spark", store), painter)
    finally:
        if painter is not None:
            painter.stop()


def write(store, conf: Config, out_dir: pathlib.Path, q, painter=None) -> pathlib.Path:
    """The report's pages from the queries ``q`` (``queries``); the PNGs by ``painter`` (painter.Painter) if given."""
    # Independent queries at once from driver threads: each is a small aggregate whose cost on a small lake is
    # planning and scheduling (Spark) or reading (the driver), which overlap; the figures' queries start first, as
    # they need no connection list. The figures draw on a thread of their own (_figures); the connection pages draw
    # with plotly only.
    with ThreadPoolExecutor(max_workers=6, thread_name_prefix="amqplens-report") as pool:
        futures = _figure_queries(q, conf, pool)
        top = pool.submit(q.top_tables, conf["report.top_n"])
        found = pool.submit(most_severe, store, conf["findings.top_n"])
        conns = q.connections(conf["report.connection_pages"])
        ids = list(conns.connection_id)
        logs = pool.submit(lambda: (q.broker_event_rows(ids), alarm_intervals(q.alarm_rows())))
        blocked, errs = q.blocked_and_errors(ids, PAGE_EVENT_CAP)
        pages_written = pool.submit(write_connection_pages, store, q, conns, blocked, errs, out_dir)
        events, alarms = logs.result()
        figures = _figures(conf, futures, conns, blocked, errs, events, alarms, out_dir, painter)
        pages_written.result()
        tables = top.result()
    page = out_dir / "index.html"
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page.write_text(render_overview(store, figures, tables, conns, generated, found.result()))
    return page
