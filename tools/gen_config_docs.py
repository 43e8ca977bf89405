"""conf/defaults.yaml and the key table of docs/configuration.md, generated from the configuration model.

    python -m tools.gen_config_docs          # write both
    python -m tools.gen_config_docs --check  # exit 1 if either is stale (tests/unit/test_config.py does the same)

The model (``amqplens.settings.Settings``) holds every key's rule, default and meaning; these two files only
show it. The table goes between the marker lines of docs/configuration.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import textwrap

from amqplens.settings import keys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULTS = ROOT / "conf" / "defaults.yaml"
DOC = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- generated: python -m tools.gen_config_docs -->", "<!-- end of generated table -->"
COMMENT_AT = 34  # column of the comments in defaults.yaml
WIDTH = 118

HEADER = """\
# amqplens defaults, generated from the configuration model (amqplens/settings.py, Settings) by
# `python -m tools.gen_config_docs`: change the model, not this file. Layers, later wins: this file,
# conf/local.yaml (ignored by git), --config FILE (repeatable), --set key=value (repeatable).
# Every key's value goes through its rule at start; docs/configuration.md has the same table.
"""

_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./\-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def yaml_value(value) -> str:
    """A default as YAML writes it: plain where YAML reads it back as the same string, JSON (YAML's flow style) else."""
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d+[kmg]", value):
        return value
    return json.dumps(value)


def defaults_yaml() -> str:
    lines = [HEADER.rstrip("\n")]
    section = None
    for key, (_rule, default, doc) in keys().items():
        sec, name = key.split(".", 1)
        if sec != section:
            lines.append(f"\n{sec}:")
            section = sec
        head = f"  {name}: {yaml_value(default)}"
        text = textwrap.wrap(doc.replace("`", ""), WIDTH - COMMENT_AT - 2) or [""]
        if len(head) + 1 >= COMMENT_AT:
            lines.append(head)
            lines += [" " * COMMENT_AT + "# " + part for part in text]
        else:
            lines.append(head.ljust(COMMENT_AT) + "# " + text[0])
            lines += [" " * COMMENT_AT + "# " + part for part in text[1:]]
    return "\n".join(lines) + "\n"


def table() -> str:
    rows = ["| key | default | rule | meaning |", "| --- | --- | --- | --- |"]
    for key, (rule, default, doc) in keys().items():
        shown = yaml_value(default) if not isinstance(default, list) or len(default) < 6 else f"{len(default)} names: " + ", ".join(default[:4]) + ", ..."
        rows.append(f"| `{key}` | `{shown}` | {rule.expected} | {doc.replace('|', '/')} |")
    return "\n".join(rows)


def doc_with_table(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: the marker lines {BEGIN!r} and {END!r} are missing")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a file is stale, write nothing")
    args = ap.parse_args(argv)
    want = {DEFAULTS: defaults_yaml(), DOC: doc_with_table(DOC.read_text())}
    stale = [p for p, text in want.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (python -m tools.gen_config_docs)")
        return 1 if stale else 0
    for p in stale:
        p.write_text(want[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
