"""The package's layout holds: no import cycle, the decoder side free of Spark and the lake, one registry of stages.

The import graph is read from the source (every ``import``, at module level or inside a function, so a cycle cannot
hide behind a function-local import); the decoder's purity is also checked at run time, in a fresh interpreter that
imports every one of its modules.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

from amqplens import stages
from tests.conftest import ROOT

PACKAGE = ROOT / "amqplens"
# the sub-packages that turn bytes into rows: plain Python with numpy, pyarrow and numba, no Spark, no lake, no jobs
PURE = ("amqplens.decode", "amqplens.lifecycle", "amqplens.logs")
NOT_IN_PURE = ("pyspark", "delta", "deltalake", "great_expectations", "amqplens.contracts", "amqplens.lake", "amqplens.jobs",
               "amqplens.report", "amqplens.cli", "amqplens.session", "amqplens.config")
# of the contracts, only the closed value lists (a leaf; the package's __init__ loads the tables on first use)
PURE_MAY_IMPORT = ("amqplens.contracts", "amqplens.contracts.values")


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(mods: dict[str, pathlib.Path]) -> dict[str, dict[str, int]]:
    """module -> {module or external top-level name it imports: line}."""
    def resolve(name: str) -> str:
        probe = name
        while probe and probe not in mods:
            probe = probe.rpartition(".")[0]
        return probe or name

    graph: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges = graph[mod] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [*subs, base]  # `from pkg import submodule`
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r != mod:
                    edges.setdefault(r, node.lineno)
                # importing a.b.c runs a/__init__ and a/b/__init__ first: those count too, unless they are the
                # importing module's own packages (already running)
                parts = r.split(".")
                for i in range(1, len(parts)):
                    parent = ".".join(parts[:i])
                    if parent in mods and parent != mod and not mod.startswith(parent + "."):
                        edges.setdefault(parent, node.lineno)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next((w for w in it if w in graph), None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycle():
    graph = _imports(_modules())
    assert len(graph) > 100  # every module was read
    found = _cycles(graph)
    detail = [[f"{a} -> {b} (line {graph[a][b]})" for a in c for b in graph[a] if b in c] for c in found]
    assert not found, detail


def test_the_cycle_check_finds_a_cycle():
    """The check itself: a function-local import that closes a loop counts."""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_the_cycle_check_counts_the_package_inits_an_import_runs(tmp_path):
    """``import p.q.leaf`` runs ``p/q/__init__`` first: a module that p/q/__init__ reaches back to is in a cycle
    with it even though no module names the other directly (a common module importing one dialect's field-table
    reader, whose package init imports the dialect's decoder, which imports the common module, was one)."""
    for path, text in {"pkg/__init__.py": "", "pkg/common.py": "from pkg.dialect.leaf import X\n",
                       "pkg/dialect/__init__.py": "from pkg.dialect.stream import S\n",
                       "pkg/dialect/stream.py": "from pkg.common import C\n", "pkg/dialect/leaf.py": "X = 1\n"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    mods = {}
    for p in (tmp_path / "pkg").rglob("*.py"):
        parts = list(p.relative_to(tmp_path).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    found = _cycles(_imports(mods))
    assert found == [["pkg.common", "pkg.dialect", "pkg.dialect.stream"]]


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_decoder_side_imports_no_spark_nor_lake_nor_jobs_in_its_source():
    graph = _imports(_modules())
    bad = {m: sorted(t for t in edges if _under(t, NOT_IN_PURE) and t not in PURE_MAY_IMPORT)
           for m, edges in graph.items() if _under(m, PURE)}
    assert {m: b for m, b in bad.items() if b} == {}


def test_the_decoder_side_imports_no_spark_nor_lake_nor_jobs_when_run():
    mods = sorted(m for m in _modules() if _under(m, PURE) and not m.endswith(".warm"))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            f"bad = sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {NOT_IN_PURE!r})"
            f" and m not in {PURE_MAY_IMPORT!r})\n"
            "print(len(sys.modules)); assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_one_registry_names_the_cli_commands_the_entry_scripts_and_the_dag_chain():
    from amqplens.cli import build_parser

    names = [s.name for s in stages.STAGES]
    assert names == list(stages.CHAIN)
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    assert set(names) <= commands
    scripts = sorted(p.name for p in (ROOT / "jobs").glob("*.py") if p.name not in ("dag_amqplens.py", "amqplens_cli.py"))
    assert scripts == sorted(s.script for s in stages.STAGES)
    for s in stages.STAGES:
        text = (ROOT / "jobs" / s.script).read_text()
        assert f'job_main("{s.name}")' in text, s.script
        assert callable(s.load().run), s.module
    dag = ast.parse((ROOT / "jobs" / "dag_amqplens.py").read_text())
    chain = next(ast.literal_eval(n.value) for n in dag.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", None) == "JOB_CHAIN")
    assert tuple(chain) == stages.CHAIN  # the DAG file imports only Airflow (its parse stays cheap): a copy, held here


def test_a_spark_task_imports_no_configuration_model():
    """The modules whose functions the Spark tasks run (the decode and lifecycle tasks) do not import pydantic: the
    configuration model is the driver's (amqplens/settings.py), and its import would add 0.07 s to every worker."""
    code = ("import sys, amqplens.jobs.ingest_captures, amqplens.jobs.lifecycle, amqplens.jobs.ingest_logs\n"
            "assert 'pydantic' not in sys.modules and 'amqplens.settings' not in sys.modules, 'the model was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
