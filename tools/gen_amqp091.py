#!/usr/bin/env python3
"""Generate the AMQP 0-8 / 0-9 / 0-9-1 spec tables from the working group's XML.

Writes ``amqplens/decode/v0_9_1/spec_0_8.py``, ``spec_0_9.py`` and ``spec_0_9_1.py``
(the last from RabbitMQ's extended 0-9-1 XML, a superset of the plain one).
The output is plain data (dicts and tuples), sorted and formatted the same way
on every run, so CI can regenerate it and fail on a diff
(``tests/v0_9_1/test_generator.py``). Nothing parses XML at import time.

Usage: python tools/gen_amqp091.py [--specs DIR] [--out DIR]
"""

from __future__ import annotations

import pathlib
import sys
import xml.etree.ElementTree as ET

if __package__ in (None, ""):  # run as a script (python tools/gen_....py): the repository, for tools.gen_common
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tools import gen_common  # noqa: E402
from tools.gen_common import record_dict, record_lines  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_SPECS = ROOT / "specs"  # a copy of ../shared/specs (the AMQP working group XML, see specs/COPYRIGHT)
DEFAULT_OUT = ROOT / "amqplens" / "decode" / "v0_9_1"

# (output module, dialect, spec XML relative to the specs dir, plain XML to diff against)
TARGETS = (
    ("spec_0_8.py", "0-8", "0-8/amqp0-8.stripped.xml", None),
    ("spec_0_9.py", "0-9", "0-9/amqp0-9.stripped.xml", None),
    ("spec_0_9_1.py", "0-9-1", "0-9-1-rabbit/amqp0-9-1.stripped.extended.xml", "0-9-1/amqp0-9-1.stripped.xml"),
)

WIRE_TYPES = frozenset(
    {"bit", "octet", "short", "long", "longlong", "shortstr", "longstr", "timestamp", "table", "content"}
)

# Domains a spec uses but does not define. 0-9's message.transfer has a field of
# domain "content": Qpid's 0-9 codec (framing/FramingContent.cpp) puts it on the
# wire as an octet discriminator (0 inline, 1 reference) and a longstr.
EXTRA_DOMAINS = {"content": "content"}

# Methods RabbitMQ speaks that are missing from its extended XML; they come from
# RabbitMQ's codegen JSON (amqp-rabbitmq-0.9.1.json) and match pika.spec.
# (class id, method id, name, synchronous, fields, responses)
RABBIT_SUPPLEMENT = (
    (10, 60, "blocked", False, (("reason", "shortstr"),), ()),
    (10, 61, "unblocked", False, (), ()),
    (10, 70, "update-secret", True, (("new-secret", "longstr"), ("reason", "shortstr")), ("update-secret-ok",)),
    (10, 71, "update-secret-ok", True, (), ()),
)
# Reply codes RabbitMQ sends that its extended XML lacks (same JSON; basic.return uses 312).
RABBIT_CONSTANTS = (("no-route", 312, "soft-error"),)


def snake(name: str) -> str:
    return name.strip().replace(" ", "_").replace("-", "_").lower()


def dashed(name: str) -> str:
    return name.strip().replace(" ", "-").lower()


class Spec:
    """The parts of one spec XML the decoder needs, normalised."""

    def __init__(self, path: pathlib.Path, supplement: tuple = (), constants: tuple = ()) -> None:
        root = ET.parse(path).getroot()
        self.major = int(root.get("major"))
        self.minor = int(root.get("minor"))
        self.revision = int(root.get("revision", "0"))
        self.port = int(root.get("port", "5672"))
        self.constants: dict[str, tuple[int, str]] = {}
        for c in root.findall("constant"):
            self.constants[dashed(c.get("name"))] = (int(c.get("value")), dashed(c.get("class") or ""))
        for name, value, error_class in constants:
            self.constants.setdefault(name, (value, error_class))
        self.domains = dict(EXTRA_DOMAINS)
        for d in root.findall("domain"):
            self.domains[dashed(d.get("name"))] = d.get("type")
        self.classes: dict[int, str] = {}
        self.properties: dict[int, tuple] = {}
        self.methods: dict[int, tuple] = {}
        for cls in root.findall("class"):
            class_id = int(cls.get("index"))
            class_name = dashed(cls.get("name"))
            self.classes[class_id] = class_name
            props = tuple((snake(f.get("name")), self.wire_type(f)) for f in cls.findall("field"))
            if props:
                self.properties[class_id] = props
            by_name = {dashed(m.get("name")): int(m.get("index")) for m in cls.findall("method")}
            for m in cls.findall("method"):
                method_id = int(m.get("index"))
                fields = tuple((snake(f.get("name")), self.wire_type(f)) for f in m.findall("field"))
                responses = tuple(
                    class_id << 16 | by_name[dashed(r.get("name"))] for r in m.findall("response")
                )
                self.methods[class_id << 16 | method_id] = (
                    class_name,
                    dashed(m.get("name")),
                    m.get("synchronous") == "1",
                    m.get("content") == "1",
                    fields,
                    responses,
                )
        ids = {(k >> 16, v[1]): k for k, v in self.methods.items()}
        ids.update({(c, name): c << 16 | m for c, m, name, *_ in supplement})
        for class_id, method_id, name, sync, fields, responses in supplement:
            self.methods[class_id << 16 | method_id] = (
                self.classes[class_id],
                name,
                sync,
                False,
                tuple((snake(n), t) for n, t in fields),
                tuple(ids[class_id, r] for r in responses),
            )

    def wire_type(self, field: ET.Element) -> str:
        t = field.get("type")
        seen = set()
        if t is None:
            t = dashed(field.get("domain"))
        while t not in WIRE_TYPES:
            if t in seen or t not in self.domains:
                raise SystemExit(f"unresolvable domain {t!r} for field {field.get('name')!r}")
            seen.add(t)
            t = dashed(self.domains[t])
        return t

    def frame_types(self) -> dict[int, str]:
        out = {}
        for name, (value, error_class) in self.constants.items():
            if self._is_frame_type(name, error_class):
                out[value] = snake(name[len("frame-"):])
        return dict(sorted(out.items()))

    @staticmethod
    def _is_frame_type(name: str, error_class: str) -> bool:
        # frame-error (501) is a reply code: it is the one frame-* constant with a class
        return name.startswith("frame-") and not error_class and name not in ("frame-end", "frame-min-size")

    def reply_codes(self) -> dict[int, tuple[str, str]]:
        return {
            v: (n, c)
            for n, (v, c) in sorted(self.constants.items(), key=lambda kv: kv[1][0])
            if not self._is_frame_type(n, c) and n not in ("frame-end", "frame-min-size")
        }


def _lines_for_dict(name: str, mapping: dict, key_fmt=repr, comment: str = "") -> list[str]:
    out = [f"# {comment}"] if comment else []
    out.append(f"{name} = {{")
    for k in sorted(mapping):
        out.append(f"    {key_fmt(k)}: {mapping[k]!r},")
    out.append("}")
    return out


def render(dialect: str, source: str, spec: Spec, plain: Spec | None) -> str:
    lines = [
        f'"""Auto-generated by tools/gen_amqp091.py from specs/{source}; do not edit.',
        "",
        f"AMQP {dialect}: frame types, reply codes, domains, classes, methods and",
        "content properties, as plain data for the table-driven decoder in",
        "amqplens.decode.v0_9_1. Field names are snake_case; wire types are one of",
        "bit octet short long longlong shortstr longstr timestamp table content.",
        '"""',
        "",
        "from amqplens.decode.v0_9_1.spec_types import MethodSpec",
        "",
        f"DIALECT = {dialect!r}",
        f"SPEC_VERSION = {(spec.major, spec.minor, spec.revision)!r}  # <amqp major minor revision>",
        f"PORT = {spec.port!r}",
        f"FRAME_END = {spec.constants['frame-end'][0]!r}",
        f"FRAME_MIN_SIZE = {spec.constants['frame-min-size'][0]!r}",
        "",
    ]
    lines += _lines_for_dict("FRAME_TYPES", spec.frame_types(), comment="frame type octet -> frame type name")
    lines.append("")
    lines += _lines_for_dict(
        "REPLY_CODES", spec.reply_codes(), comment="reply code -> (name, error class: soft-error, hard-error or '')"
    )
    lines.append("")
    lines += _lines_for_dict("DOMAINS", spec.domains, comment="domain -> wire type")
    lines.append("")
    lines += _lines_for_dict("CLASSES", spec.classes, comment="class id -> class name")
    lines.append("")
    lines += record_dict("METHODS", "MethodSpec", (
        "class_id << 16 | method_id -> MethodSpec(class name, method name, synchronous, has content,",
        "    ((field, wire type), ...) in wire order, (response method keys, ...))"), (
        record_lines(f"0x{key:08X}", "MethodSpec", f"{c}.{m}", [c, m, sync, content], fields,
                     ["(" + "".join(f"0x{r:08X}, " for r in responses).rstrip() + ")"])
        for key, (c, m, sync, content, fields, responses) in sorted(spec.methods.items())))
    lines.append("")
    lines.append("# class id -> ((property, wire type), ...) in property-flag order (bit 15 of the first word first)")
    lines.append("PROPERTIES = {")
    for class_id in sorted(spec.properties):
        lines.append(f"    {class_id!r}: (")
        for p in spec.properties[class_id]:
            lines.append(f"        {p!r},")
        lines.append("    ),")
    lines.append("}")
    lines.append("")
    ext = sorted(set(spec.methods) - set(plain.methods)) if plain is not None else []
    lines.append("# methods absent from the plain spec XML of this version (vendor extensions)")
    lines.append("EXTENSIONS: frozenset[int] = frozenset({" + ", ".join(f"0x{k:08X}" for k in ext) + "})")
    lines.append("")
    return "\n".join(lines)


def generate(specs_dir: pathlib.Path, out_dir: pathlib.Path) -> list[pathlib.Path]:
    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for module, dialect, source, plain_source in TARGETS:
        extra = (RABBIT_SUPPLEMENT, RABBIT_CONSTANTS) if plain_source else ((), ())
        spec = Spec(specs_dir / source, *extra)
        plain = Spec(specs_dir / plain_source) if plain_source else None
        path = out_dir / module
        path.write_text(render(dialect, source, spec, plain), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    return gen_common.main(__doc__, generate, DEFAULT_SPECS, DEFAULT_OUT, argv)


if __name__ == "__main__":
    sys.exit(main())
