"""Byte accounting and row shapes of the 0-10 decoder's output."""

from __future__ import annotations

import functools

from amqplens.decode.v0_10 import ERROR_KEYS, FRAME_KEYS_0_10
from tests.accounting import DIRECTIONS  # noqa: F401  (re-exported for the tests)
from tests.accounting import check_accounting as _check

check_accounting = functools.partial(_check, frame_keys=FRAME_KEYS_0_10, error_keys=ERROR_KEYS)
