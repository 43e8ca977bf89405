"""The validation results page (<lake>/_quality/index.html) shows every result in a browser with the network off.

GX's data docs, which every validate line used to point to, load their styles and scripts from CDNs: offline their
results list is empty. Here headless Chromium opens our page with every request to the network failing (a proxy on
a closed port, no name resolves), and what it renders is compared with the run's summary JSON: each expectation's
name, severity and outcome, row by row. Bad input tried: the network itself (any external URL would fail to load
and be reported by the browser).
"""

from __future__ import annotations

import json
import re

import pytest

from amqplens.jobs import validate
from amqplens.contracts import words
from tests.metrics.browser import OFFLINE, Browser, chromium

pytestmark = [pytest.mark.spark]

ROWS = """[...document.querySelectorAll('tr')].filter(r => r.querySelector('td')).map(
  r => [...r.querySelectorAll('td')].map(c => c.innerText.trim()))"""


@pytest.mark.skipif(not chromium(), reason="chromium is not installed (tools/setup_system.sh installs it)")
def test_results_page_shows_every_result_offline(validated, quality_lake, tmp_path):
    _, store = quality_lake
    quality = validate.quality_dir(store)
    page = quality / "index.html"
    assert validated["results_page"] == str(page)
    source = page.read_text()
    assert not re.search(r"https?://", source), "the page must not reference the network"
    summary = json.loads((quality / "runs" / "fixtures.json").read_text())
    browser = Browser(tmp_path / "profile", flags=OFFLINE)
    try:
        seen = browser.open(page.as_uri(), "document.querySelectorAll('tr').length > 0")
        rows = browser.evaluate(ROWS)
        text = browser.evaluate("document.body.innerText")
    finally:
        browser.close()
    assert seen == {"errors": [], "ready": True}
    expected = {e["name"]: (e["severity"], "passed" if e["success"] else
                            "warning" if e["severity"] == "warning" else "FAILED (critical)")
                for e in summary["expectations"]}
    assert {name: (severity, outcome) for name, severity, outcome, _ in rows} == expected
    assert len(rows) == len(summary["expectations"])
    assert summary["run_id"] in text and summary["time"] in text
    # the demo capture's unknown-tag acks are a warning, explained on the page
    (anomalies,) = [r for r in rows if r[0] == "flow_events.anomalies"]
    assert anomalies[2] == "warning" and words.ANOMALIES["*_of_unknown_tag"] in anomalies[3]
