"""``amqplens check``: is every table of a lake whole? (like ``git fsck``). No Spark: delta-rs, pyarrow and the files.

Two depths:

- ``cheap``: every table's log is read line by line (a cut-off or garbled commit file is named, with its version),
  the table opens, and every data file the snapshot references exists with the size its log records (one stat per
  file). Every command runs it before it starts Spark: a command that writes refuses a table whose log is damaged
  (``LakeDamaged``), and every command leaves out the captures whose files are gone, so one capture's damage never
  fails another.
- ``full`` (``amqplens check``): also opens and reads every data file (its row count against the log's), and matches
  the tables with ``captures``, the source of truth: every capture id a table holds is known, and each capture's
  ``connections`` rows are as many as its captures row says.

A problem is one line naming the table, the version and the file. ``amqplens repair`` (amqplens/lake/repair.py)
restores what the problems name.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

EXIT_DAMAGED = 5  # the CLI's exit status for a damaged lake (README: exit status)
LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
# the formats whose captures row counts the connections it found (a broker log's connections come from its lines)
_COUNTED_FORMATS = ("pcap", "pcapng")
ANY = "*"  # Problem.captures of a table whose rows no snapshot holds: every capture may have lost rows there
STAGING = "_staging"  # amqplens/lake/staging.py (not imported: it imports the contracts and pyarrow's filesystems)


@dataclasses.dataclass(frozen=True)
class Problem:
    table: str
    version: int | None  # the log version the problem is in (a damaged commit file) or seen at (a data file)
    file: str | None  # relative to the table's folder
    what: str
    captures: tuple[str, ...] = ()  # the captures whose rows it concerns; empty: the whole table (its log)

    @property
    def whole_table(self) -> bool:
        return not self.captures

    def line(self) -> str:
        where = [f"table {self.table}"]
        if self.version is not None:
            where.append(f"version {self.version}")
        if self.file:
            where.append(f"file {self.file}")
        return ", ".join(where) + f": {self.what}"


class LakeDamaged(Exception):
    """A command would read or write a table whose log is damaged: one line per problem, then what to do."""

    def __init__(self, root: str, problems: list[Problem], doing: str = "nothing was done"):
        self.problems = problems
        lines = [p.line() for p in problems]
        super().__init__("\n".join(lines) + f"\nthe lake is damaged; {doing}. `amqplens check --lake {root}` lists every "
                         f"problem, `amqplens repair --lake {root}` restores the tables from their captures")


def local_root(root: str) -> pathlib.Path | None:
    if "://" in root and not root.startswith("file://"):
        return None
    return pathlib.Path(root.removeprefix("file://")).expanduser().absolute()


def is_lake(root: str) -> bool:
    """A folder holding at least one table (a ``<table>/_delta_log`` folder); True for a remote root (not checked)."""
    p = local_root(root)
    return p is None or (p.is_dir() and any((d / LOG_DIR).is_dir() for d in p.iterdir() if not d.name.startswith("_")))


def commit_files(table_dir: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    logs = table_dir / LOG_DIR
    if not logs.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in logs.iterdir() if (m := _COMMIT.match(p.name))]
    return sorted(found)


def has_commits(table_dir: pathlib.Path) -> bool:
    """Whether the table's log holds a commit or checkpoint: a log folder without any is a first write that was cut
    off (a full disk, a kill) and reads as no table at all."""
    logs = table_dir / LOG_DIR
    return logs.is_dir() and any(_COMMIT.match(p.name) or _CHECKPOINT.match(p.name) for p in logs.iterdir())


def bad_line(path: pathlib.Path) -> str | None:
    """Why a commit file is not a Delta commit (None: every line is a JSON action)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not data.strip():
        return "is empty"
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            return f"line {n} is not JSON ({exc.args[0].split(':')[0]}): the file is cut off or overwritten"
        if not isinstance(action, dict) or len(action) != 1:
            return f"line {n} is not a Delta action"
    return None


def commit_units(path: pathlib.Path) -> set[str] | None:
    """The captures a commit file says it wrote (amqplens's commit metadata), from whatever of it still reads; None
    when that cannot be told."""
    try:
        for line in path.read_bytes().splitlines():
            try:
                info = json.loads(line).get("commitInfo")
            except (ValueError, AttributeError):
                continue
            if isinstance(info, dict):
                units = info.get("amqplens.units")
                return set(units.split(",")) if units else None
    except OSError:
        return None
    return None


def adding_commit_units(table: pathlib.Path, rel: str) -> set[str] | None:
    """The captures of the commit that added the data file ``rel`` (its path as the log has it), from the log's
    commit files; None when no readable commit adds it or says its captures. For a packed file that no longer
    reads: its captures are among these."""
    logs = table / "_delta_log"
    try:
        commits = sorted(p for p in logs.iterdir() if _COMMIT.match(p.name))
    except OSError:
        return None
    needle = json.dumps(rel)[1:-1].encode()
    for path in reversed(commits):  # the add is in the latest commit that names the file
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if needle in data and any(isinstance(a := _json_or_none(line), dict) and isinstance(a.get("add"), dict)
                                  and a["add"].get("path") == rel for line in data.splitlines()):
            return commit_units(path)
    return None


def _json_or_none(line: bytes):
    try:
        return json.loads(line)
    except ValueError:
        return None


def log_problems(root: str, name: str) -> list[Problem]:
    """The problems of one table's log (each commit file parses; the versions follow each other; the table opens)."""
    p = local_root(root)
    if p is None:
        return []
    table_dir = p / name
    commits = commit_files(table_dir)
    problems = []
    for i, (version, path) in enumerate(commits):
        why = bad_line(path)
        if why is not None:
            problems.append(Problem(name, version, f"{LOG_DIR}/{path.name}", f"the log's commit file {why}"))
            break
        if i and version != commits[i - 1][0] + 1 and not _checkpoint_at(table_dir, version - 1):
            problems.append(Problem(name, version, None, f"the log has no commit file for version {commits[i - 1][0] + 1}"))
            break
    if problems:
        return problems
    if not has_commits(table_dir):
        files = [f for f in table_dir.rglob("*.parquet") if STAGING not in f.relative_to(table_dir).parts]
        if files:  # no table, but rows of it: a log wiped or lost; the rows count for nothing until repaired
            problems.append(Problem(name, None, LOG_DIR, f"the log holds no commit, but the folder holds {len(files)} "
                                    "data file(s): their rows are in no snapshot", (ANY,)))
        return problems
    try:
        from deltalake import DeltaTable

        DeltaTable(str(table_dir))
    except Exception as exc:  # noqa: BLE001 - whatever delta-rs says, in one line, names the table
        first = next((s.strip() for s in str(exc).splitlines() if s.strip()), type(exc).__name__)
        problems.append(Problem(name, commits[-1][0] if commits else None, None, f"the log does not open: {first[:300]}"))
    return problems


def _checkpoint_at(table_dir: pathlib.Path, version: int) -> bool:
    return any(_CHECKPOINT.match(f.name) and int(f.name[:20]) >= version for f in (table_dir / LOG_DIR).iterdir())


def has_checkpoint_after(table_dir: pathlib.Path, version: int) -> bool:
    logs = table_dir / LOG_DIR
    return logs.is_dir() and any((m := _CHECKPOINT.match(p.name)) and int(m.group(1)) >= version for p in logs.iterdir())


def table_captures(root: str) -> set[str]:
    """The capture ids of every readable table's rows (from the log's file statistics)."""
    from amqplens.contracts import ALL_TABLES

    out: set[str] = set()
    for name in ALL_TABLES:
        if log_problems(root, name):
            continue
        dt = open_table(root, name)
        if dt is not None:
            for held in _files_units(root, name, dt).values():
                out |= {c for c in held if c}
    return out


def _files_units(root: str, name: str, dt) -> dict[str, dict]:
    """Each file of the snapshot (its path as the log has it) -> its units and their rows: the log's statistics of a
    file of one unit; a packed file's footer (``amqplens.lake.staging.UNITS_KEY``), or, when that does not read, the
    captures of the commit that added it between its least and greatest unit, at least those two (rows unknown: 0)."""
    import urllib.parse

    import pyarrow as pa

    from amqplens.contracts import table as table_def
    from amqplens.lake.staging import footer_units

    (rkey,) = table_def(name).replace_by
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    rels = actions.get("path", [])
    lo, hi = actions.get(f"min.{rkey}", [None] * len(rels)), actions.get(f"max.{rkey}", [None] * len(rels))
    counts = actions.get("num_records", [None] * len(rels))
    p = local_root(root)
    out = {}
    for i, rel in enumerate(rels):
        held = footer_units(str(p / name / urllib.parse.unquote(rel))) if lo[i] != hi[i] and p is not None else None
        if held is None and lo[i] != hi[i]:
            added = adding_commit_units(p / name, rel) if p is not None and lo[i] is not None and hi[i] is not None else None
            held = {u: 0 for u in sorted({lo[i], hi[i]} | {u for u in added or () if lo[i] <= u <= hi[i]})}
        out[rel] = held if held is not None else {lo[i]: counts[i] or 0}
    return out


def open_table(root: str, name: str):
    """The table's snapshot; None when it has no commit yet. Call ``log_problems`` first: this raises on a damaged log."""
    from deltalake import DeltaTable

    p = local_root(root)
    uri = f"{root.rstrip('/')}/{name}" if p is None else str(p / name)
    if p is not None and not has_commits(p / name):
        return None
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        return None


def file_problems(root: str, name: str, dt, *, deep: bool) -> list[Problem]:
    """The data files of the snapshot: each exists with its logged size; ``deep``: each opens, reads whole, and holds
    the rows its log entry counts."""
    import pyarrow as pa

    from amqplens.contracts import table as table_def

    p = local_root(root)
    if p is None or dt is None:
        return []
    (rkey,) = table_def(name).replace_by
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    held = _files_units(root, name, dt)
    version = dt.version()
    problems = []
    for i, rel in enumerate(actions.get("path", [])):
        caps = tuple(sorted(c for c in held[rel] if c is not None)) or ("?",)
        cid = None if caps == ("?",) else caps[0] if len(caps) == 1 else f"{caps[0][:12]} and {len(caps) - 1} more"
        path = p / name / _unquote(rel)
        try:
            size = path.stat().st_size
        except OSError:
            problems.append(Problem(name, version, rel, f"the data file is missing (rows of capture {_short(cid)})", caps))
            continue
        if size != actions["size_bytes"][i]:
            problems.append(Problem(name, version, rel, f"the data file has {size} bytes, the log says "
                                    f"{actions['size_bytes'][i]} (rows of capture {_short(cid)})", caps))
            continue
        if deep:
            why = _unreadable(path, actions.get("num_records", [None] * (i + 1))[i])
            if why:
                problems.append(Problem(name, version, rel, f"the data file {why} (rows of capture {_short(cid)})", caps))
    return problems


def _unquote(rel: str) -> str:
    import urllib.parse

    return urllib.parse.unquote(rel)


def _short(cid) -> str:
    """A capture id cut to 12 characters; a packed file's text of several (``file_problems``) as it is."""
    return "unknown" if not cid else str(cid) if " " in str(cid) else str(cid)[:12]


def _unreadable(path: pathlib.Path, rows) -> str | None:
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
        n = sum(batch.num_rows for batch in f.iter_batches(batch_size=65536))
    except Exception as exc:  # noqa: BLE001 - any reason a file does not read is the problem's text
        return f"does not read ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
    if rows is not None and n != rows:
        return f"holds {n} rows, the log says {rows}"
    return None


def capture_problems(root: str, tables: dict) -> list[Problem]:
    """The tables against ``captures``: every capture id a table holds is known there, and a capture's
    ``connections`` rows are as many as its captures row counts. ``tables``: name -> snapshot (None: no table)."""
    caps_dt = tables.get("captures")
    if caps_dt is None:
        return []
    caps = caps_dt.to_pyarrow_table(columns=["capture_id", "format", "status", "connections"]).to_pylist()
    known = {c["capture_id"]: c for c in caps}
    problems = []
    for name, dt in tables.items():
        if name == "captures" or dt is None:
            continue
        rows: dict[str, int] = {}
        for held in _files_units(root, name, dt).values():
            for cid, n in held.items():
                rows[cid] = rows.get(cid, 0) + (n or 0)
        for cid in sorted(c for c in rows if c not in known):
            problems.append(Problem(name, dt.version(), None, f"holds {rows[cid]} rows of capture {_short(cid)}, which "
                                    "captures does not know (a run that stopped before its last commit: run it again "
                                    "with the same input)", (cid,)))
        if name == "connections":
            for cid, c in sorted(known.items()):
                if c["format"] in _COUNTED_FORMATS and c["status"] != "failed" and rows.get(cid, 0) != c["connections"]:
                    problems.append(Problem(name, dt.version(), None, f"holds {rows.get(cid, 0)} rows of capture "
                                            f"{_short(cid)}, its captures row counts {c['connections']}", (cid,)))
    return problems


def check(root: str, *, deep: bool = False, names=None) -> list[Problem]:
    """Every problem of the lake's tables (``names``: only these): ``cheap`` without ``deep``; ``full`` with it."""
    from amqplens.contracts import ALL_TABLES

    problems: list[Problem] = []
    tables = {}
    for name in names or ALL_TABLES:
        damaged = log_problems(root, name)
        problems += damaged
        if damaged:
            continue
        dt = open_table(root, name)
        tables[name] = dt
        problems += file_problems(root, name, dt, deep=deep)
    if deep:
        problems += capture_problems(root, tables)
    return problems


def damaged_captures(problems: list[Problem]) -> set[str]:
    return {cid for p in problems for cid in p.captures}
