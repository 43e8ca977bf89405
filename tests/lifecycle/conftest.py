"""Fixtures of the lifecycle tests (pure Python: no Spark, no broker)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest tests/lifecycle` from a checkout without an installed package
    sys.path.insert(0, str(ROOT))
