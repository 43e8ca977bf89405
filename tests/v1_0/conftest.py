"""Fixtures of the AMQP 1.0 codec tests (pure Python: no Spark, no broker)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest tests/v1_0` from a checkout without an installed package
    sys.path.insert(0, str(ROOT))
