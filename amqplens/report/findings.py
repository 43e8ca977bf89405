"""The report's first section: the findings, most severe first, each linking to its connection's page and to the
plot that shows it (the connection page's plot when it has a page, else the overview's figure)."""

from __future__ import annotations

import html

from amqplens.report import pages

# kind -> (the plot on a connection page, the overview's figure) that shows it
PLOT = {
    **dict.fromkeys(("unsettled_at_end", "returned_unroutable", "publish_nacked", "rejected_by_consumer",
                     "redelivery_loop"), ("plot-outcomes", "settlement")),
    "slow_settle": ("plot-latency", "latency"),
    "slow_consumer": ("plot-timeline", "inflight"),
    "credit_starved": ("plot-timeline", "credit"),
}
DEFAULT_PLOT = ("plot-timeline", "timeline")
COLOURS = {"critical": "#b00020", "warning": "#b26a00", "info": "#555"}


def section(rows: list[dict], counts: dict[str, int], paged: set, link) -> str:
    """``rows``: the findings listed (amqplens.jobs.findings.listing.most_severe); ``paged``: connections with a page;
    ``link``: table name -> its HTML link."""
    total = sum(counts.values())
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    head = (f'<h2 id="findings">Findings</h2><p>{total} finding(s){": " + said if said else ""}'
            f'{f"; the first {len(rows)} (<code>findings.top_n</code>)" if len(rows) < total else ""}, most severe first. '
            f"Source: {link('findings')}; every rule, what it reads and its thresholds: <code>docs/tables.md</code>, "
            f'section "Finding rules".</p>')
    if not rows:
        return head + "<p>Nothing found: no rule raised anything on these captures.</p>"
    out = ["<table><tr><th>severity</th><th>finding</th><th>about</th><th>when (UTC)</th><th>what</th><th>evidence</th>"
           "<th>plot</th></tr>"]
    for r in rows:
        page_plot, figure = PLOT.get(r["kind"], DEFAULT_PLOT)
        about = html.escape(r["entity_label"])
        if r["connection_id"] in paged:
            page = f"connections/{pages.page_name(r['connection_id'])}"
            about = f'<a href="{page}">{about}</a>'
            plot = f'<a href="{page}#{page_plot}">connection</a>, <a href="#{figure}">overview</a>'
        else:
            plot = f'<a href="#{figure}">overview</a>'
        when = r["start_ts"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if r["end_ts"] != r["start_ts"]:
            when += f" .. {r['end_ts'].strftime('%H:%M:%S.%f')[:-3]}"
        partial = " <em>(partial: the capture has gaps)</em>" if r["partial"] else ""
        colour = COLOURS.get(r["severity"], "#222")
        out.append(f'<tr class="finding {html.escape(r["severity"])}"><td style="color:{colour}"><b>'
                   f'{html.escape(r["severity"])}</b></td><td>{html.escape(r["kind"])}</td><td>{about}</td>'
                   f"<td>{html.escape(when)}</td><td>{html.escape(r['summary'])}{partial}</td>"
                   f"<td style=\"word-break:break-all;min-width:15em;max-width:19em;font-size:80%\"><code>{html.escape(r['evidence'])}</code></td>"
                   f"<td>{plot}</td></tr>")
    return head + "\n".join(out) + "</table>"
