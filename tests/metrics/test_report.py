"""The report: the overview and one page per connection, each opened in headless Chromium (DevTools protocol) with
every plot drawn and no console error; PNG copies of the overview's figures; labels instead of hashes; readable time
axes. Bad input tried: none here (tests/e2e/test_security_run.py runs a hostile capture through the report)."""

from __future__ import annotations

import html
import pathlib
import re

import pytest

from tests.metrics.browser import Browser, chromium

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

FIGURES = {"latency", "inflight", "credit", "settlement", "timeline"}
# what the page's own script sets once plotly drew every plot (the browser's errors are checked separately)
PLOTS_DRAWN = "document.body.dataset.plots && document.body.dataset.plots.split('/')[0] === document.body.dataset.plots.split('/')[1]"
# an x tick that shows seconds as a fraction of a minute, as matplotlib's default did ("19:26.300000")
UNREADABLE_TICK = re.compile(r"^\d{1,2}:\d{2}\.\d{3,}$")
# more than the fixtures' connections that end in an error (16 with the fault fixtures of tools/fault_fixtures.py:
# channel_flow's 540 and the resets RabbitMQ answers two proton clients' FIN with in amqp10_modified and
# amqp10_credit_starved came with issue 34's last three), so that each of those gets a page and a busy clean one too
PAGES = 19


@pytest.fixture(scope="module")
def report_dir(spark, metrics_lake, tmp_path_factory):
    from amqplens import report

    conf, _, _ = metrics_lake
    return report.run(spark, conf.with_overrides(report__connection_pages=PAGES), str(tmp_path_factory.mktemp("report"))).parent


def pages_of(report_dir) -> list[pathlib.Path]:
    text = (report_dir / "index.html").read_text()
    return [report_dir / p for p in dict.fromkeys(re.findall(r'href="(connections/[0-9a-f]{16}\.html)"', text))]


def test_overview_names_sources_and_keeps_pngs(report_dir):
    text = (report_dir / "index.html").read_text()
    for name in FIGURES:
        assert f'<figure id="{name}" class="drawn">' in text  # the fixtures have something for every figure
        data = (report_dir / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    for table in ("metrics_latency", "metrics_settlement", "metrics_flow", "metrics_errors", "flow_events", "connections"):
        assert f"<code>{table}</code>" in text  # every figure and table names its source
    assert (report_dir / "plotly.min.js").stat().st_size > 1_000_000  # the library itself, no network needed
    assert re.findall(r"<script src=\"([^\"]+)\"", text) == ["plotly.min.js"]  # nothing is fetched from anywhere else


def test_top_tables_name_entities_as_operators_do(report_dir):
    text = (report_dir / "index.html").read_text()
    for title in ("Slowest consumers", "Most nacked / rejected queues", "Starved links", "Errors"):
        section = text.split(title, 1)[1].split("<h2>", 1)[0]
        assert "<td>" in section, title
    slow = html.unescape(text.split("Slowest consumers", 1)[1].split("<h2>", 1)[0])
    # a consumer of a real-broker fixture: its client's connection name (tools/make_fixtures.py) and its queue
    assert re.search(r'127\.0\.0\.1:\d+ -> 127\.0\.0\.1:5672 "fixture-[a-z_]+" ch \d+ consumer \S+ queue \w+', slow)
    assert not re.search(r"<td>[0-9a-f]{32}/", text)  # no hash-named entity left


def test_connection_pages_cover_the_connections_that_failed(report_dir):
    pages = pages_of(report_dir)
    assert len(pages) == PAGES and all(p.exists() for p in pages)
    titles = {html.unescape(p.read_text().split("<h1>", 1)[1].split("</h1>", 1)[0]) for p in pages}
    # channel_error and connection_forced end in a channel.close 404 / connection.close 320 by construction
    # (tools/make_fixtures.py), amqp10_rich-noperm in amqp:unauthorized-access: each has a page before any busier one
    # refused_login's and heartbeat_timeout's: a connection.close 403 / 530 from the broker, a reset after missed heartbeats
    for name in ("channel_error", "connection_forced", "amqp10_rich-noperm", "refused_login-bad_password",
                 "refused_login-no_such_vhost", "refused_login-no_permission", "heartbeat_timeout-silent"):
        assert any(f'"fixture-{name}"' in t for t in titles), name
    for p in pages:
        text = p.read_text()
        assert '<a href="../index.html">' in text and '<script src="../plotly.min.js">' in text
        for section in ("Timeline", "Latencies", "Deliveries by outcome"):
            assert f"<h2>{section}</h2>" in text


@pytest.mark.skipif(not chromium(), reason="chromium is not installed (tools/setup_system.sh installs it)")
def test_every_page_renders_in_headless_chromium(report_dir, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        for page in [report_dir / "index.html", *pages_of(report_dir)]:
            seen = browser.open(page.as_uri(), PLOTS_DRAWN)
            assert seen == {"errors": [], "ready": True}, page.name
            drawn = browser.evaluate("document.body.dataset.plots")
            n = int(drawn.split("/")[1])
            assert n >= (len(FIGURES) if page.name == "index.html" else 1), (page.name, drawn)
            # every plot has its axes and something in them (lines, markers, boxes or bars)
            assert browser.evaluate("[...document.querySelectorAll('.plotly-graph-div')].every(d => "
                                    "d.querySelectorAll('.xtick').length > 0 && "
                                    "d.querySelectorAll('.scatterlayer path, .boxlayer path, .barlayer path').length > 0)"), page.name
            ticks = browser.evaluate("[...document.querySelectorAll('.xtick text')].map(t => t.textContent)")
            assert ticks and not [t for t in ticks if UNREADABLE_TICK.match(t)], (page.name, ticks[:10])
    finally:
        browser.close()


@pytest.mark.skipif(not chromium(), reason="chromium is not installed (tools/setup_system.sh installs it)")
def test_hover_shows_exact_values(report_dir, metrics_lake, tmp_path):
    """Hovering an outcome bar shows its message count: the deliveries rows of that dialect, direction and outcome."""
    _, store, _ = metrics_lake
    browser = Browser(tmp_path / "profile")
    try:
        assert browser.open((report_dir / "index.html").as_uri(), PLOTS_DRAWN)["errors"] == []
        text = browser.evaluate("""(() => { const d = document.getElementById('plot-settlement');
            Plotly.Fx.hover(d, [{curveNumber: 0, pointNumber: 0}]);
            return [...d.querySelectorAll('.hovertext')].map(h => h.textContent).join(' | '); })()""")
    finally:
        browser.close()
    dialect, direction, outcome, n = re.search(r"(\S+) (\S+) (\S+): ([\d,]+) messages", text).groups()
    rows = store.read("deliveries").where(f"dialect = '{dialect}' and direction = '{direction}' and outcome = '{outcome}'")
    assert int(n.replace(",", "")) == rows.count() > 0


def test_series_are_capped_and_keep_their_peaks(metrics_lake):
    """At most ``points`` + 1 steps per entity however many events it has, and the highest in-flight count survives
    (compared with the raw flow_events rows)."""
    from pyspark.sql import functions as F

    from amqplens.report import data as report_data

    _, store, _ = metrics_lake
    series = report_data.busiest_series(store, "channel", "deliver", ["in_flight"], 2, 3)
    assert series.groupby(["connection_id", "channel"]).size().between(1, 4).all()
    for (conn, ch), g in series.groupby(["connection_id", "channel"]):
        raw = store.read("flow_events").where((F.col("entity") == "channel") & (F.col("connection_id") == conn)
                                              & (F.col("channel") == int(ch)))
        assert g.in_flight.max() == raw.agg(F.max("in_flight")).first()[0]
        assert raw.count() > 4  # the busiest channels have more events than the cap


def figures_of(page: pathlib.Path) -> dict[str, dict]:
    """The plotly figure specs a page draws, by div id."""
    import json

    found = re.findall(r'<script>\(\(\)=>\{const f=(\{.*?\});Plotly\.newPlot\("([\w-]+)"', page.read_text())
    return {div: json.loads(spec) for spec, div in found}


def test_figures_have_no_glitches(report_dir, metrics_lake):
    """Issue 36.4, each seen in headless Chromium's screenshots and read here off the figure specs: the timelines'
    zero line across the first row; outcome bars centred on their bucket's start instead of covering the bucket;
    a latency legend of one entry per quantile; an in-flight series drawn in no colour of its own (or, with one
    sample, as no line at all); every minor tick of a log axis labelled; an empty first row on connection pages."""
    pages = pages_of(report_dir)
    overview = figures_of(report_dir / "index.html")
    assert overview["plot-timeline"]["layout"]["yaxis"]["zeroline"] is False
    for name in ("plot-latency", "plot-settlement"):
        assert overview[name]["layout"]["xaxis"]["dtick"] == "D2"
    assert overview["plot-credit"]["layout"]["yaxis"]["dtick"] == "D2"
    inflight = [t for t in overview["plot-inflight"]["data"] if t["name"].endswith(" in_flight")]
    assert len(inflight) >= 2 and all("markers" in t["mode"] for t in inflight)
    assert len({t["line"]["color"] for t in inflight}) == len(inflight)  # a colour per channel
    bars = latency_lines = 0
    for page in pages:
        figs = figures_of(page)
        assert figs["plot-timeline"]["layout"]["yaxis"]["zeroline"] is False
        first_table = page.read_text().split("<table>", 1)[1].split("</tr>", 1)[0]
        assert "<th></th>" not in first_table and "connection_id" in first_table, page.name
        for bar in figs.get("plot-outcomes", {}).get("data", []):
            assert bar["offset"] == 0  # starts at its bucket's start, covers 90% of it
            bars += 1
        latency = figs.get("plot-latency", {}).get("data", [])
        shown = [t for t in latency if t.get("showlegend", True)]
        assert len(shown) * 2 == len(latency)  # one entry per series; its p99 trace is in the same legend group
        latency_lines += len(latency)
    assert bars > 0 and latency_lines > 0


def test_a_connection_page_names_its_channel_errors(report_dir, metrics_lake):
    """A connection whose channels were closed with errors says how many and which beside its own close line (issue
    36.4: "close 200 Normal shutdown" alone, its errors only as x marks). Oracle: the frames table's error closes."""
    _, store, _ = metrics_lake
    checked = 0
    for page in pages_of(report_dir):
        text = page.read_text()
        cid = re.search(r"<td>connection_id</td><td>([^<]+)</td>", text).group(1)
        closes = store.read("frames").where(
            f"connection_id = '{cid}' and ((method_name = 'close' and reply_code is not null and reply_code != 200) "
            "or error_condition is not null)").collect()
        said = re.search(r"<td>errors</td><td>([^<]*)</td>", text).group(1)
        if not closes:
            assert said == "none", page.name
            continue
        assert said.startswith(f"{len(closes)}: "), (page.name, said)
        for f in closes:
            if f.reply_code is not None:
                assert f"{f.class_name}.close {f.reply_code}" in html.unescape(said)
        checked += 1
    assert checked > 0
