"""The validation results as one self-contained HTML page, ``<lake>/_quality/index.html``: readable offline.

GX's data docs (``<lake>/_quality/data_docs``, still built) load their styles and scripts from CDNs, so on a capture
host without internet they are unstyled and their results list is empty. This page holds everything inline (no
external URL): per table and expectation its severity, success, what was observed, the offending rows' count and a few
keys, with the plain words of amqplens/contracts/words.py; the run's id and time on top. The printed warning lines
come from here too (``warning_lines``), so terminal and page say the same.
"""

from __future__ import annotations

import html
import pathlib

from amqplens.contracts import words

PAGE = "index.html"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2733;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #d8dee6;padding-bottom:3px}
.meta{color:#566;margin-bottom:12px} table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid #eef1f4}
th{background:#f4f6f8;font-weight:600} td.name{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
.ok{color:#1b7a3a;font-weight:600} .warn{color:#a35f00;font-weight:600} .crit{color:#b3261e;font-weight:700}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-size:12px;margin-right:6px}
.b-ok{background:#e3f4e8;color:#1b7a3a} .b-warn{background:#fff1dc;color:#a35f00} .b-crit{background:#fde3e1;color:#b3261e}
.words{color:#334;margin-top:3px} .samples{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;color:#445}
ul.summary li{margin-bottom:8px} tr.failed td{background:#fffaf2} tr.critical td{background:#fff5f4}
"""


def _outcome_words(o: dict) -> list[str]:
    """What a failed expectation means and whether to worry, then each anomaly kind its samples name."""
    if o["success"]:
        return []
    if observed(o) == words.NO_ROWS:
        return [words.NO_ROWS_WORDS]
    out = [w for w in (words.expectation(o["name"]),) if w]
    for kind in words.anomaly_kinds(o.get("samples") or []):
        out.append(f"{kind}: {words.anomaly(kind) or 'no words for this kind yet'}")
    return out


def observed(o: dict) -> str:
    return words.observed(o["observed"])


def warning_lines(o: dict) -> list[str]:
    """The printed lines of one warning: table, expectation, what was observed and a few keys, then its words."""
    text = f"  warning: {o['table']}: {o['name']} ({o['severity']}): {observed(o)}"
    if o.get("samples"):
        text += f"; e.g. {'; '.join(o['samples'])}"
    return [text, *(f"    {w}" for w in _outcome_words(o))]


def _row(o: dict) -> str:
    e = html.escape
    if o["success"]:
        outcome, cls = '<span class="badge b-ok">passed</span>', ""
    elif o["severity"] == "critical":
        outcome, cls = '<span class="badge b-crit">FAILED (critical)</span>', "failed critical"
    else:
        outcome, cls = '<span class="badge b-warn">warning</span>', "failed"
    detail = e(observed(o))
    if o.get("samples"):
        detail += '<div class="samples">e.g. ' + "<br>".join(e(s) for s in o["samples"]) + "</div>"
    detail += "".join(f'<div class="words">{e(w)}</div>' for w in _outcome_words(o))
    return (f'<tr class="{cls}"><td class="name">{e(o["name"])}</td><td>{e(o["severity"])}</td><td>{outcome}</td>'
            f"<td>{detail}</td></tr>")


def render(summary: dict) -> str:
    e = html.escape
    results = summary["expectations"]
    crit, warn = len(summary["critical_failures"]), len(summary["warnings"])
    verdict = (f'<span class="crit">{crit} critical expectation(s) failed</span>' if crit
               else '<span class="ok">no critical expectation failed</span>')
    parts = [
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>amqplens validation {e(summary['run_id'])}</title><style>{_CSS}</style></head><body>",
        "<h1>amqplens validation results</h1>",
        f'<div class="meta">run <b>{e(summary["run_id"])}</b> at {e(str(summary["time"]))}; '
        f"{len(summary['capture_ids'])} capture(s); {len(results)} expectations: {verdict}, "
        f'<span class="{"warn" if warn else "ok"}">{warn} warning(s)</span>. '
        f"GX's own data docs (they need internet for their styles): {e(summary['data_docs'])}</div>",
    ]
    failed = [o for o in results if not o["success"]]
    if failed:  # what needs reading first, in words; every result follows, table by table
        parts.append('<h2>Warnings and failures</h2><ul class="summary">')
        for o in sorted(failed, key=lambda o: (o["severity"] != "critical", o["name"])):
            said = "".join(f'<div class="words">{e(w)}</div>' for w in _outcome_words(o))
            parts.append(f'<li><span class="{"crit" if o["severity"] == "critical" else "warn"}">{e(o["name"])}</span> '
                         f"({e(o['severity'])}): {e(observed(o))}{said}</li>")
        parts.append("</ul>")
    for table in dict.fromkeys([o["table"] for o in results] + sorted(summary["rows"])):
        rows = summary["rows"].get(table, 0)
        mine = [o for o in results if o["table"] == table]
        parts.append(f"<h2>{e(table)} <small>({rows} rows)</small></h2>")
        if not mine:
            parts.append(f'<div class="meta">{e(words.NO_ROWS if not rows else "no expectations")}</div>')
            continue
        mine.sort(key=lambda o: (o["success"], o["severity"] != "critical", o["name"]))  # failures first
        parts.append("<table><tr><th>expectation</th><th>severity</th><th>outcome</th><th>observed</th></tr>")
        parts += [_row(o) for o in mine]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write(quality: pathlib.Path, summary: dict) -> pathlib.Path:
    """Write the page beside GX's data docs; returns its path."""
    quality.mkdir(parents=True, exist_ok=True)
    path = quality / PAGE
    path.write_text(render(summary), encoding="utf-8")
    return path
