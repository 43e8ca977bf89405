"""Connection-level facts of an AMQP 0-10 connection, and credential redaction.

The keys are the 0-9-1 family's (``v0_9_1.facts.FACT_KEYS``), filled from the
0-10 connection controls: start (server properties, mechanisms, locales),
start-ok (client properties, SASL mechanism, user, locale), tune / tune-ok
(channel-max, max-frame-size, heartbeat; the server's heartbeat-max is its
``server_heartbeat``), open (virtual-host) and close (reply-code, reply-text).
The response of start-ok and secure-ok never reaches a row: it is replaced in
place by ``<redacted len=N>`` (``v0_9_1.facts.redact``); PLAIN's user is kept.
"""

from __future__ import annotations

from amqplens.decode.common.facts import FACT_KEYS
from amqplens.decode.common.facts import text as _text
from amqplens.decode.v0_9_1.facts import ConnectionFacts as _Base, sasl_user
from amqplens.decode.common.rows import to_json


def _names(value) -> str | None:
    """A str16-array of names as the 0-9-1 facts spell them: space separated."""
    if isinstance(value, list):
        return " ".join(_text(v) or "" for v in value)
    return _text(value)


class ConnectionFacts(_Base):
    TUNE_OK_ARGS = (("channel_max", "channel_max"), ("frame_max", "max_frame_size"), ("heartbeat", "heartbeat"))

    def __init__(self, connection_id: str, redaction_key: bytes | None = None, redact_secrets: bool = True) -> None:
        super().__init__(connection_id, redaction_key, redact_secrets)
        self.facts["dialect"] = "0-10"
        self.facts["version_major"], self.facts["version_minor"] = 0, 10

    def _start(self, direction: str, args: dict) -> None:
        self._peer("server", args.get("server_properties"))
        self.facts["server_mechanisms"] = _names(args.get("mechanisms"))
        self.facts["server_locales"] = _names(args.get("locales"))

    def _tune(self, direction: str, args: dict) -> None:
        f = self.facts
        f["server_channel_max"], f["server_frame_max"] = args.get("channel_max"), args.get("max_frame_size")
        f["server_heartbeat"] = args.get("heartbeat_max")
        for key, arg in (("channel_max", "channel_max"), ("frame_max", "max_frame_size")):
            if f[key] is None:
                f[key] = args.get(arg)


# the 0-9-1 family's handlers, with 0-10's own start (str16-array mechanisms and locales) and tune (max-frame-size,
# heartbeat-max); 0-10's close names no class or method, so those facts stay null
ConnectionFacts.HANDLERS = {**_Base.HANDLERS, ("connection", "start"): ConnectionFacts._start, ("connection", "tune"): ConnectionFacts._tune}

__all__ = ["ConnectionFacts", "FACT_KEYS", "sasl_user", "to_json"]
