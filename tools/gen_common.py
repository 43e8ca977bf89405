"""What the spec generators (gen_amqp091.py, gen_amqp10.py) write alike."""

from __future__ import annotations


def record_lines(key: str, record: str, comment: str, head: list, fields: tuple, tail: list[str] = ()) -> list[str]:
    """One dict entry ``key: record(head..., (fields, one per line), tail...)`` of a generated spec module."""
    lines = [f"    {key}: {record}(  # {comment}", "        " + ", ".join(repr(v) for v in head) + ","]
    if fields:
        lines += ["        (", *(f"            {f!r}," for f in fields), "        ),"]
    else:
        lines.append("        (),")
    return lines + [f"        {t}," for t in tail] + ["    ),"]


def record_dict(name: str, record: str, comment: tuple[str, ...], entries) -> list[str]:
    """A generated ``name: dict[int, record]`` after its comment lines, one entry (``record_lines``) per item."""
    return [*(f"# {c}" for c in comment), f"{name}: dict[int, {record}] = {{", *(line for e in entries for line in e), "}"]


def main(doc: str, generate, default_specs, default_out, argv: list[str] | None = None) -> int:
    """A generator's command line: ``--specs DIR --out DIR``; prints the files ``generate(specs, out)`` wrote."""
    import argparse
    import pathlib

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--specs", type=pathlib.Path, default=default_specs)
    ap.add_argument("--out", type=pathlib.Path, default=default_out)
    args = ap.parse_args(argv)
    for path in generate(args.specs, args.out):
        print(path)
    return 0
