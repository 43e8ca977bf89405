"""The report: one static HTML page with PNG plots (matplotlib, Agg) and top-N tables, from the lake.

amqplens report --lake DIR --out DIR

Every figure and table names the table and filter it was drawn from, with a
link to that table's folder in the lake. The data behind the plots is small
(per-connection time series and per-capture metric rows), so it is collected
to pandas on the driver.
"""

from __future__ import annotations

import datetime as dt
import html
import pathlib
import sys

from jobs.config import Config
from jobs.lake import TableStore

OUTCOME_BAD = ("nacked_requeue", "nacked_drop", "rejected_requeue", "rejected_drop", "rejected", "released", "modified")


class Figure:
    def __init__(self, name: str, title: str, table: str, where: str):
        self.name, self.title, self.table, self.where = name, title, table, where
        self.drawn = False  # set once the figure showed data


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _empty(ax, what: str):
    ax.text(0.5, 0.5, f"no {what} in this lake", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return False


def latency_figure(store, ax):
    from pyspark.sql import functions as F

    d = store.read("deliveries").where(F.col("settle_latency_us").isNotNull()
                                       & ~F.col("settle_mode").isin("auto_ack", "no_confirm") & (F.col("outcome") != "presettled"))
    d = d.select(F.concat_ws(" ", "dialect", "method", "direction").alias("what"), F.col("settle_latency_us").alias("us"))
    r = store.read("request_responses").where(F.col("latency_us").isNotNull()).select(
        F.concat_ws(" ", "dialect", "request").alias("what"), F.col("latency_us").alias("us"))
    pdf = d.unionByName(r).limit(500_000).toPandas()
    if pdf.empty:
        return _empty(ax, "latencies")
    groups = pdf.groupby("what")["us"]
    order = groups.median().sort_values().index.tolist()[-25:]
    ax.boxplot([groups.get_group(g).clip(lower=1) / 1000 for g in order], orientation="horizontal", tick_labels=order, showfliers=True)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    return True


def _busiest(store, entity: str, event: str, n: int):
    from pyspark.sql import functions as F

    keys = ["connection_id", "channel", "consumer_tag", "link_handle"]
    fe = store.read("flow_events").where(F.col("entity") == entity)
    # rows: the top n keys (unique), so the inner join keeps at most fe's rows
    top = fe.where(F.col("event") == event).groupBy(*keys).count().orderBy(F.desc("count")).limit(n)
    top = top.select(*[F.col(k).alias(f"top_{k}") for k in keys])
    on = [fe[k].eqNullSafe(top[f"top_{k}"]) for k in keys]
    return fe.join(top, on, "inner").select(*fe.columns).orderBy("ts").toPandas()


def inflight_figure(store, ax, n: int):
    pdf = _busiest(store, "channel", "deliver", n)
    if pdf.empty:
        return _empty(ax, "0-9-1 deliveries")
    for (conn, ch), g in pdf.groupby(["connection_id", "channel"]):
        line = ax.step(g.ts, g.in_flight, where="post", label=f"{conn[:8]}/{ch} in flight")
        if (g.prefetch_count > 0).any():
            ax.step(g.ts, g.prefetch_count, where="post", linestyle="--", color=line[0].get_color(), label=f"{conn[:8]}/{ch} prefetch")
    ax.set_ylabel("messages")
    ax.legend(fontsize=7)
    return True


def credit_figure(store, ax, n: int):
    pdf = _busiest(store, "link", "transfer", n)
    if pdf.empty:
        return _empty(ax, "1.0 links")
    for (conn, ch, h), g in pdf.groupby(["connection_id", "channel", "link_handle"]):
        ax.step(g.ts, g.link_credit, where="post", label=f"{conn[:8]}/{ch}/handle {int(h)}")
    ax.set_yscale("symlog")
    ax.set_ylabel("link credit (symlog)")
    ax.legend(fontsize=7)
    return True


def settlement_figure(store, ax):
    from pyspark.sql import functions as F

    # rows: groupBy of the whole-capture outcome rows, fewer
    pdf = (store.read("metrics_settlement")
           .where((F.col("bucket_seconds") == 0) & (F.col("entity_kind") == "capture") & (F.col("measure") == "outcome"))
           .groupBy("dialect", "direction", "value").agg(F.sum("count").alias("n")).orderBy("dialect", "direction", "value").toPandas())
    if pdf.empty:
        return _empty(ax, "deliveries")
    labels = [f"{r.dialect} {r.direction} {r.value}" for r in pdf.itertuples()]
    colors = ["tab:red" if v in OUTCOME_BAD else "tab:green" for v in pdf.value]
    ax.barh(labels, pdf.n, color=colors)
    ax.set_xscale("log")
    ax.set_xlabel("messages (log scale); red: negative outcomes")
    return True


def timeline_figure(store, ax, limit: int = 40):
    from pyspark.sql import functions as F

    conns = store.read("connections").where(F.col("ip_version") != 0).orderBy("start_ts").limit(limit).select(  # 0: a Proton trace, no clock
        "connection_id", "client_port", "dialect", "start_ts", "end_ts", "end_reason").toPandas()
    if conns.empty:
        return _empty(ax, "connections")
    ids = list(conns.connection_id)
    blocked = store.read("flow_events").where((F.col("entity") == "connection") & F.col("connection_id").isin(ids)) \
        .orderBy("ts").select("connection_id", "ts", "blocked").toPandas()
    errs = store.read("frames").where(F.col("connection_id").isin(ids) & (
        ((F.col("method_name") == "close") & (F.col("reply_code") != 200)) | F.col("error_condition").isNotNull())) \
        .select("connection_id", "ts").toPandas()
    for y, c in enumerate(conns.itertuples()):
        ax.plot([c.start_ts, c.end_ts], [y, y], color="tab:blue", linewidth=4, solid_capstyle="butt")
        ax.plot([c.end_ts], [y], marker="|", color="black", markersize=10)
        b = blocked[blocked.connection_id == c.connection_id]
        since = None
        for r in b.itertuples():
            if r.blocked and since is None:
                since = r.ts
            elif not r.blocked and since is not None:
                ax.plot([since, r.ts], [y, y], color="tab:red", linewidth=8, solid_capstyle="butt")
                since = None
        if since is not None:
            ax.plot([since, c.end_ts], [y, y], color="tab:red", linewidth=8, solid_capstyle="butt")
        e = errs[errs.connection_id == c.connection_id]
        ax.plot(e.ts, [y] * len(e), linestyle="none", marker="x", color="tab:orange", markersize=9)
    from jobs.report_logs import draw_broker_events

    logged = draw_broker_events(store, ax, conns)
    ax.set_yticks(range(len(conns)), [f"{c.dialect or '?'} :{c.client_port} ({c.end_reason})" for c in conns.itertuples()], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (UTC); blue: open, red: blocked, x: error close, |: end" + ("; " + ", ".join(logged) if logged else ""))
    return True


def top_tables(store, n: int) -> list[tuple[str, str, str, list[str], list[tuple]]]:
    from pyspark.sql import functions as F

    whole = F.col("bucket_seconds") == 0
    slow = (store.read("metrics_latency").where(whole & (F.col("metric") == "deliver_settle") & (F.col("entity_kind") == "consumer"))
            .orderBy(F.desc("p99_us")).limit(n)
            .select("entity", "count", (F.col("p50_us") / 1000).alias("p50 ms"), (F.col("p99_us") / 1000).alias("p99 ms"),
                    (F.col("max_us") / 1000).alias("max ms")))
    # rows (this and the next three): filtered metric rows, grouped or cut to the top n; no join
    nacked = (store.read("metrics_settlement").where(whole & F.col("entity_kind").isin("queue", "address")
                                                      & (F.col("measure") == "outcome") & F.col("value").isin(*OUTCOME_BAD))
              .groupBy("entity_kind", "entity").agg(F.sum("count").alias("negative"), F.max("messages").alias("messages"))
              .orderBy(F.desc("negative")).limit(n))
    starved = (store.read("metrics_flow").where(whole & (F.col("metric") == "zero_credit_us") & (F.col("value") > 0))
               .orderBy(F.desc("value")).limit(n)
               .select("entity", (F.col("value") / 1000).alias("ms at zero credit"), (F.col("observed_us") / 1000).alias("ms observed")))
    errors = (store.read("metrics_errors").where(whole & (F.col("entity_kind") == "capture"))
              .groupBy("kind", "raised_by", "code", "condition").agg(F.sum("count").alias("count")).orderBy(F.desc("count")).limit(n))
    from jobs.report_logs import broker_events_table

    out = []
    for title, table, where, df in (
        ("Slowest consumers (deliver -> ack, p99)", "metrics_latency",
         "bucket_seconds = 0 and metric = 'deliver_settle' and entity_kind = 'consumer', by p99_us", slow),
        ("Most nacked / rejected queues", "metrics_settlement",
         "bucket_seconds = 0 and entity_kind in ('queue', 'address') and measure = 'outcome' and value is a nack, reject, "
         "release or modify", nacked),
        ("Starved links (time at zero link credit)", "metrics_flow",
         "bucket_seconds = 0 and metric = 'zero_credit_us' and value > 0", starved),
        ("Errors", "metrics_errors", "bucket_seconds = 0 and entity_kind = 'capture'", errors),
        broker_events_table(store, n),
    ):
        out.append((title, table, where, df.columns, [tuple(r) for r in df.collect()]))
    return out


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    return html.escape("" if v is None else str(v))


def render_html(store, figures: list[Figure], tables, generated: str) -> str:
    link = lambda t: f'<a href="{html.escape(store.uri(t))}"><code>{t}</code></a>'  # noqa: E731
    parts = [f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>amqplens report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}} img{{max-width:100%;border:1px solid #ddd}}
figure{{margin:2em 0}} figcaption{{font-size:90%;color:#555}} table{{border-collapse:collapse;font-size:85%}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left}} code{{font-size:95%}}</style></head><body>
<h1>amqplens report</h1>
<p>Lake <code>{html.escape(store.root)}</code>, generated {html.escape(generated)}. Metric definitions:
<code>docs/tables.md</code>, section "Metric definitions".</p>"""]
    for f in figures:
        parts.append(f'<figure id="{f.name}" class="{"drawn" if f.drawn else "empty"}"><h2>{html.escape(f.title)}</h2><img src="{f.name}.png" alt="{html.escape(f.title)}">'
                     f"<figcaption>Source: {link(f.table)} where {html.escape(f.where)}.</figcaption></figure>")
    for title, table, where, cols, rows in tables:
        parts.append(f"<h2>{html.escape(title)}</h2><p>Source: {link(table)} where {html.escape(where)}.</p>")
        if not rows:
            parts.append("<p>(none)</p>")
            continue
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in r) + "</tr>" for r in rows]
        parts.append("</table>")
    # Lets a headless browser (the report test) say whether every figure really loaded.
    parts.append("<script>addEventListener('load',()=>{const i=[...document.images];"
                 "document.body.dataset.imagesLoaded=i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;});</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def run(spark, conf: Config, out: str | None = None) -> pathlib.Path:
    """Write <out>/index.html and its PNGs; returns the page's path."""
    plt = _plt()
    store = TableStore(spark, conf["lake.root"])
    out_dir = pathlib.Path(out or conf["report.out"]).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    n = conf["report.busiest"]
    figures = [
        (Figure("latency", "Latency distributions per dialect and method", "deliveries",
                "settle_latency_us is not null and settle_mode not in (auto_ack, no_confirm), plus request_responses.latency_us"
                " (summaries: metrics_latency where bucket_seconds = 0 and entity_kind = 'capture')"),
         lambda ax: latency_figure(store, ax), (10, 7)),
        (Figure("inflight", f"In flight vs prefetch, {n} busiest channels", "flow_events",
                f"entity = 'channel', the {n} channels with the most 'deliver' events"),
         lambda ax: inflight_figure(store, ax, n), (10, 4)),
        (Figure("credit", f"Link credit over time, {n} busiest links", "flow_events",
                f"entity = 'link', the {n} links with the most 'transfer' events"),
         lambda ax: credit_figure(store, ax, n), (10, 4)),
        (Figure("settlement", "Settlement outcomes", "metrics_settlement",
                "bucket_seconds = 0 and entity_kind = 'capture' and measure = 'outcome', summed over captures"),
         lambda ax: settlement_figure(store, ax), (10, 5)),
        (Figure("timeline", "Connection timeline", "connections",
                "the first 40 connections by start_ts (Proton-trace connections, which have no clock, left out); blocked from "
                "flow_events where entity = 'connection'; errors from frames where a close carries reply_code != 200 or an "
                "error_condition; broker log events (channel errors, abrupt closes, alarm intervals) from broker_events"),
         lambda ax: timeline_figure(store, ax), (11, 7)),
    ]
    for fig_def, draw, size in figures:
        fig, ax = plt.subplots(figsize=size)
        fig_def.drawn = bool(draw(ax))
        ax.set_title(fig_def.title)
        fig.tight_layout()
        fig.savefig(out_dir / f"{fig_def.name}.png", dpi=90)
        plt.close(fig)
    page = out_dir / "index.html"
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page.write_text(render_html(store, [f for f, _, _ in figures], top_tables(store, conf["report.top_n"]), generated))
    return page


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import job_main

    return job_main("report", argv)


if __name__ == "__main__":
    sys.exit(main())
