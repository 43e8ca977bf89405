"""What a command needs before Spark starts: its inputs, its lake and report folders, Java.

A mistake here costs the reader a fraction of a second and one line, instead of a
JVM start and Spark's warnings first. Nothing here imports pyspark (a test keeps it
so); the jobs check the same things again when they run (under spark-submit or from
a notebook nobody ran these checks).
"""

from __future__ import annotations

import glob
import os
import pathlib

from amqplens.config import Config, report_dir
from amqplens.inputs import InputError, expand_inputs

# commands that only read the lake: it may be read-only (their Spark log goes to the temp folder then)
READS_LAKE = frozenset({"summary", "report", "check"})
# commands that need a lake a run made: a missing one is a typo of --lake (exit 2), not an empty lake
NEEDS_LAKE = READS_LAKE | {"vacuum", "repair", "lifecycle", "metrics", "validate"}


class PreflightError(InputError):
    """A path the command needs is unusable: said in one line."""


def _local(path: str) -> pathlib.Path | None:
    """The local folder of a path or ``file://`` URI; None for an object store (only the job itself can tell)."""
    if "://" in path and not path.startswith("file://"):
        return None
    return pathlib.Path(path.removeprefix("file://")).expanduser().absolute()


def not_a_file(path: str, what: str) -> None:
    """A folder that is only read may be missing (an empty lake), but not a file."""
    p = _local(path)
    if p is not None and p.exists() and not p.is_dir():
        raise PreflightError(f"{what} {path!r} is a file, not a folder")


def writable_dir(path: str, what: str) -> None:
    """``path`` is a folder we may write: it is created if missing (the command is about to write there anyway)."""
    not_a_file(path, what)
    p = _local(path)
    if p is None:
        return
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PreflightError(f"{what} {path!r} cannot be created: {exc.strerror} ({exc.filename})") from exc
    if not os.access(p, os.W_OK | os.X_OK):
        raise PreflightError(f"{what} {path!r}: no permission to write there")


def existing_lake(root: str) -> None:
    """A lake holds at least one table: a folder without any is a mistyped ``--lake``, which must not read as an
    empty lake (nor get a ``_logs`` folder)."""
    from amqplens.lake.check import is_lake

    p = _local(root)
    if p is not None and not p.exists():
        raise PreflightError(f"no such lake: {root!r} does not exist")
    not_a_file(root, "lake")
    if not is_lake(root):
        raise PreflightError(f"no such lake: {root!r} holds no table (a lake is the --lake folder of a run)")


def log_specs_exist(specs: list[str]) -> None:
    """Each ``--logs`` file, folder or glob names something (amqplens.jobs.ingest_logs reads and sniffs them later)."""
    for spec in specs:
        if any(ch in spec for ch in "*?["):
            if not any(os.path.isfile(p) for p in glob.glob(spec, recursive=True)):
                raise PreflightError(f"logs {spec!r}: the pattern matches no file")
        elif not os.path.exists(spec):
            raise PreflightError(f"logs {spec!r}: no such file or folder")


def check(args, conf: Config) -> None:
    """Raise ``InputError`` (a ``PreflightError`` or one of amqplens.inputs') for the first thing the command cannot use."""
    command = args.command
    expand_inputs(getattr(args, "input", None) or [], conf["inputs.roots"])
    log_specs_exist(getattr(args, "logs", None) or [])
    if command in NEEDS_LAKE:
        existing_lake(conf["lake.root"])
    if command in READS_LAKE:
        not_a_file(conf["lake.root"], "lake")
    else:
        writable_dir(conf["lake.root"], "lake")
    if command in ("run", "demo", "report"):  # after the lake's checks: the default report folder is in the lake
        writable_dir(report_dir(conf, getattr(args, "out", None)), "report folder")
