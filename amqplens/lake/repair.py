"""``amqplens repair``: the captures are the source of truth and every table is derived from them.

1. A table whose log is damaged goes back to its last good version, where Delta allows: the commit files from the
   first damaged one on are moved to ``<lake>/_damaged/<time>/<table>/_delta_log`` (kept, never deleted). When no
   good version is left (the first commit file is damaged) the whole table folder is moved there and the table is
   rebuilt. The captures a moved commit wrote (its ``amqplens.units``, when still readable; else every capture) are
   affected.
2. The captures a problem names (a data file gone or damaged, rows that disagree with ``captures``) are affected.
3. Each affected capture is derived again from its input file, at the path its captures row records or among the
   ``--input`` files given, through every stage (``TableStore.redo``: its old transaction ids do not count), and the
   lake is checked again. A capture whose input is gone is reported, not guessed.

The log surgery needs no Spark; the re-derivation is a run of the stages.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import pathlib
import shutil

from amqplens.lake import check as lake_check

DAMAGED_DIR = "_damaged"


@dataclasses.dataclass
class Plan:
    lines: list[str]  # what was done to the logs, one line each
    affected: set[str]  # capture ids to derive again
    inputs: list[str]  # the input files of the captures among them
    logs: list[str]  # the input files of the broker logs among them
    missing: dict[str, str]  # capture id -> the recorded path that is gone


def _aside(root: pathlib.Path, stamp: str, table: str) -> pathlib.Path:
    return root / DAMAGED_DIR / stamp / table


def restore_log(root: pathlib.Path, problem: lake_check.Problem, stamp: str) -> tuple[str, set[str] | None]:
    """Take a damaged table back to its last good version (or aside whole): (what was done, the captures its lost
    commits wrote; None: cannot be told, every capture)."""
    table_dir = root / problem.table
    commits = lake_check.commit_files(table_dir)
    bad = problem.version if problem.version is not None else (commits[-1][0] if commits else 0)
    lost = [(v, p) for v, p in commits if v >= bad]
    good = [v for v, _ in commits if v < bad]
    units: set[str] | None = set()
    for _, path in lost:
        found = lake_check.commit_units(path)
        if found is None or units is None:
            units = None
        else:
            units |= found
    if good and not lake_check.has_checkpoint_after(table_dir, bad):
        dest = _aside(root, stamp, problem.table) / lake_check.LOG_DIR
        dest.mkdir(parents=True, exist_ok=True)
        for _, path in lost:
            shutil.move(str(path), dest / path.name)
        if not lake_check.log_problems(str(root), problem.table):
            return (f"table {problem.table}: back to version {good[-1]}; commit file(s) of version(s) "
                    f"{', '.join(str(v) for v, _ in lost)} moved to {dest}", units)
        for path in dest.iterdir():  # still does not open: undo, and set the whole table aside below
            shutil.move(str(path), table_dir / lake_check.LOG_DIR / path.name)
    dest = _aside(root, stamp, problem.table)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.move(str(table_dir), dest)
    return f"table {problem.table}: no good version left; the table was moved to {dest} and is rebuilt", None


def plan(root: str, problems: list[lake_check.Problem], given: list[str]) -> Plan:
    """Restore the damaged logs, then name the captures to derive again and their inputs."""
    from amqplens.inputs import capture_files

    local = lake_check.local_root(root)
    assert local is not None, "repair works on a local lake"
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    lines = []
    every = False
    affected: set[str] = set()
    for p in problems:
        if p.whole_table:
            line, units = restore_log(local, p, stamp)
            lines.append(line)
            every = every or units is None or p.table == "captures"
            affected |= units or set()
        elif lake_check.ANY in p.captures:  # rows in no snapshot: set them aside, rebuild the table
            dest = _aside(local, stamp, p.table)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(local / p.table), dest)
            lines.append(f"table {p.table}: its log held no commit; its folder was moved to {dest} and it is rebuilt")
            every = True
        else:
            affected |= set(p.captures)
    known = _captures(root)
    if every:
        affected |= set(known) | lake_check.table_captures(root)
    affected.discard(lake_check.ANY)
    by_id = {f.capture_id: f.path for f in capture_files(given, [])} if given else {}
    from amqplens.logs import LOG_FORMATS

    inputs: set[str] = set()
    logs: set[str] = set()
    missing: dict[str, str] = {}
    for cid in sorted(affected):
        path, fmt = by_id.get(cid) or known.get(cid, (None, None))[0], known.get(cid, (None, None))[1]
        if path and (cid in by_id or os.path.isfile(path)):
            (logs if fmt in LOG_FORMATS else inputs).add(path)
        else:
            missing[cid] = path or "(no captures row)"
    return Plan(lines, affected, sorted(inputs), sorted(logs), missing)


def _captures(root: str) -> dict[str, tuple[str, str]]:
    """capture id -> (recorded path, format), of the captures table (empty if it has no readable snapshot)."""
    if lake_check.log_problems(root, "captures"):
        return {}
    dt_ = lake_check.open_table(root, "captures")
    if dt_ is None:
        return {}
    rows = dt_.to_pyarrow_table(columns=["capture_id", "path", "format"]).to_pylist()
    return {r["capture_id"]: (r["path"], r["format"]) for r in rows}
