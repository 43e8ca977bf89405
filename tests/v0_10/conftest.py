"""Fixtures of the AMQP 0-10 codec tests (pure Python: no Spark, no broker)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest tests/v0_10` from a checkout without an installed package
    sys.path.insert(0, str(ROOT))
