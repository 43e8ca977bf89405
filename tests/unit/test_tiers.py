"""The slow tier (tests/conftest.py SLOW) names tests that exist: a renamed test must not slip into the fast tier
unnoticed, nor a stale name stay in the list."""

from __future__ import annotations

import ast

from tests.conftest import ROOT, SLOW


def test_every_slow_entry_names_an_existing_module_or_test():
    for key in SLOW:
        path, _, name = key.partition("::")
        module = ROOT / path
        assert module.is_file(), key
        if name:
            tests = {n.name for n in ast.parse(module.read_text()).body if isinstance(n, ast.FunctionDef)}
            assert name in tests, key
