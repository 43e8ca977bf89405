"""Header and property names whose values never reach a table (``decode.redact_headers``).

Applications put credentials in message headers (0-9-1 ``headers``, 1.0
``application-properties``, 0-10 ``application-headers``) and in method
arguments: an ``Authorization`` header, a ``password`` property. The codecs
render those as JSON (``properties_json``, ``arguments_json``, the peers'
``*_properties_json`` facts); ``HeaderRedactor`` replaces the value of every
object member whose name matches one of the configured names, compared
case-insensitively, at any depth, with ``REDACTED``. Text that names none of
them is returned as it is, so the check costs one substring scan per row.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import cast

REDACTED = "<redacted>"
# names whose values are credentials in the HTTP, STOMP and AMQP clients we know of
DEFAULT_REDACT_HEADERS = (
    "authorization", "proxy-authorization", "cookie", "set-cookie", "password", "passwd", "secret",
    "token", "access_token", "refresh_token", "api_key", "apikey", "x-api-key",
)  # fmt: skip
ROW_COLUMNS = ("properties_json", "arguments_json")

_Search = Callable[[str], "re.Match[str] | None"]
_DUMP = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode  # the codecs' compact form


class HeaderRedactor:
    def __init__(self, names=DEFAULT_REDACT_HEADERS) -> None:
        self.names = frozenset(n.lower() for n in names)
        self._needles = tuple(json.dumps(n, ensure_ascii=False) for n in self.names)  # "name", as it appears quoted
        # one search for any of the needles (the same answer as ``any(n in low for n in needles)``, in one C call)
        self._pattern = "|".join(re.escape(n) for n in sorted(self._needles))
        self._search = re.compile(self._pattern).search if self.names else None
        self._raw_needles = tuple(n.encode("utf-8", "replace") for n in self.names)

    def mentions(self, raw: bytes) -> bool:
        """Whether undecoded wire bytes name any of the names (any case): their values cannot be told apart."""
        if not self.names or not raw:
            return False
        low = bytes(raw).lower()
        return any(n in low for n in self._raw_needles)

    def candidates(self, column):
        """Which values of an Arrow string ``column`` of ASCII text (the compiled path's JSON) ``text`` may change: a
        numpy bool per value, from one scan in C for all the names at once (the search ``text`` makes, over the
        lowered column); the others ``text`` returns as they are. Called per connection and batch: one scan per name
        was 14 Arrow calls each time, 1.4 of the 9.3 CPU s of a slice of 10,000 short connections."""
        import numpy as np
        import pyarrow.compute as pc

        if not self.names or column.null_count == len(column) or not self._anywhere(column):
            return np.zeros(len(column), np.bool_)
        # ASCII lowering: the compiled path writes printable ASCII only (anything else goes to the reference decoder),
        # so it lowers what utf8_lower would, 20% faster (300,000 properties_json values: 0.037 -> 0.030 CPU s)
        found = pc.match_substring_regex(pc.ascii_lower(column), self._pattern)
        return pc.fill_null(found, False).to_numpy(zero_copy_only=False)

    def _anywhere(self, column) -> bool:
        """Whether any name occurs (any case) in the bytes ``column``'s values span, searched as one text: False
        (the common case) proves no value names one, at 2.2x the speed of the search per value (300,000 values: 0.013
        against 0.029 CPU s); a name across two values only sends the column to that search. True for anything but a
        plain string array."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if type(column) is not pa.StringArray:
            return True
        offsets = np.frombuffer(column.buffers()[1], np.int32, len(column) + 1, column.offset * 4)
        start, end = int(offsets[0]), int(offsets[-1])
        data = column.buffers()[2]
        if data is None or end <= start:
            return False
        whole = pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, end - start], np.int32)), data.slice(start, end - start))
        return bool(pc.match_substring_regex(whole, self._pattern, ignore_case=True)[0].as_py())

    def text(self, text: str | None) -> str | None:
        """The JSON ``text`` with the value of every matching member replaced (the same object when none matches)."""
        if not text or not self.names:
            return text
        if cast(_Search, self._search)(text.lower()) is None:  # set whenever there are names
            return text
        try:
            value = json.loads(text)
        except ValueError:  # not JSON: nothing the codecs wrote; keep nothing that might hold a secret
            return REDACTED
        return _DUMP(value) if self._walk(value) else text

    def _walk(self, value) -> bool:
        changed = False
        if isinstance(value, dict):
            for k, v in value.items():
                if k.lower() in self.names:
                    changed = changed or v != REDACTED
                    value[k] = REDACTED
                else:
                    changed = self._walk(v) or changed
        elif isinstance(value, list):
            for v in value:
                changed = self._walk(v) or changed
        return changed

    def row(self, row: dict, columns=ROW_COLUMNS) -> dict:
        """``row`` with its JSON ``columns`` redacted in place."""
        for c in columns:
            if row.get(c):
                row[c] = self.text(row[c])
        return row


@functools.lru_cache(maxsize=8)
def shared(names: tuple[str, ...] = DEFAULT_REDACT_HEADERS) -> HeaderRedactor:
    """One redactor per set of names, shared by the connections of a process (it holds no state of its own after
    ``__init__``): building one compiles its search, 0.2 ms, paid per connection before (2,424 short connections of
    303 small captures: 0.45 s of a 7.8 s decode)."""
    return HeaderRedactor(names)
